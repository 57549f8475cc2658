"""The plugin's one cache: bounded by entries or by size, least recently used out first, expiring."""

from __future__ import annotations

import pytest

from async_query.caches import Cache
from async_query.datasources import DatasourceRegistry
from query_core.errors import UnknownDatasourceError
from query_core.store import Store
from query_core.store.memory import MemoryIndex
from tests.conftest import PluginFactory


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: Cache[str, int] = Cache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_a_cache_bounded_by_bytes_keeps_at_most_that_many() -> None:
    cache: Cache[str, bytes] = Cache(100, sizeof=len)
    for i in range(10):
        cache.put(f"k{i}", b"x" * 30)
    assert cache.size <= 100 and len(cache) == 3
    assert cache.get("k9") is not None and cache.get("k0") is None
    cache.put("huge", b"x" * 101)  # larger than the whole cache: not kept, nothing else lost
    assert cache.get("huge") is None and len(cache) == 3


def test_entries_expire_after_their_time() -> None:
    cache: Cache[str, int] = Cache(10, ttl_s=60)
    cache.put("kept", 1)
    cache.put("gone", 2, ttl_s=-1)  # expired already
    assert cache.get("kept") == 1 and cache.get("gone") is None
    assert cache.hits == 1 and cache.misses == 1


def test_pop_and_clear() -> None:
    cache: Cache[str, int] = Cache(10)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.pop("a")
    cache.pop("missing")
    assert cache.get("a") is None and cache.get("b") == 2
    cache.clear()
    assert len(cache) == 0


# -- the caches that use it ---------------------------------------------------------------------------


def test_datasource_lookups_are_bounded_and_remember_names_that_name_nothing() -> None:
    """A client asking for many names that name no datasource costs one index read per name and
    never more entries than the cache holds; asking again is answered from memory."""
    store = Store.in_memory()
    index = store.index
    assert isinstance(index, MemoryIndex)
    registry = DatasourceRegistry([], store, cache_s=60, entries=10)

    def reads_for(name: str) -> int:
        before = index.calls.get("get", 0)
        with pytest.raises(UnknownDatasourceError):
            registry.get(name)
        return index.calls.get("get", 0) - before

    assert [reads_for(f"nothing{n}") for n in range(100)] == [1] * 100
    assert reads_for("nothing99") == 0  # remembered as missing
    assert reads_for("nothing0") == 1  # pushed out long ago: the cache holds 10


def test_finished_replies_are_kept_up_to_the_configured_bytes(make_plugin: PluginFactory) -> None:
    plugin = make_plugin(reply_cache_bytes=1_000)
    for n in range(50):
        plugin.reads.replies.put(f"q{n}", b"x" * 100)
    assert plugin.reads.replies.size <= 1_000 and len(plugin.reads.replies) == 10
