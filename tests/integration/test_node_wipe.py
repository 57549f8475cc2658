"""The tests' wipe of their node (``tests/node.py``): what one test leaves, the next never sees."""

from __future__ import annotations

import pytest

from async_query.embedded.index import EmbeddedIndex
from query_core.ids import request_index
from query_core.store.client import ClusterConnection, ProductIndexes
from tests import node
from tests.conftest import REAL_CLUSTER

pytestmark = pytest.mark.skipif(bool(REAL_CLUSTER), reason="wipes this test process's own node")
REQUESTS = request_index("local")


def _indexes(server: EmbeddedIndex) -> set[str]:
    with node.index_client(server.url) as client:
        return {
            row["index"]
            for row in client.get("/_cat/indices", params={"format": "json", "expand_wildcards": "all"}).json()
        }


def _count(server: EmbeddedIndex, index: str) -> int:
    with node.index_client(server.url) as client:
        return int(client.get(f"/{index}/_count").json()["count"])


def _made_by_the_product(server: EmbeddedIndex) -> None:
    node.wipe(server, keep=False)
    connection = ClusterConnection(node.index_config(server.url))
    try:
        ProductIndexes(connection).ensure_index(REQUESTS)
    finally:
        connection.close()


def _write(server: EmbeddedIndex, index: str, doc_id: str) -> None:
    with node.index_client(server.url) as client:
        assert client.put(f"/{index}/_doc/{doc_id}", json={"type": "statement", "state": "waiting"}).status_code in (
            200,
            201,
        )


def test_a_product_index_as_made_is_kept_empty_and_everything_else_goes(index_server: EmbeddedIndex) -> None:
    _made_by_the_product(index_server)
    node.wipe(index_server)
    assert REQUESTS in _indexes(index_server)
    _write(index_server, REQUESTS, "one")  # not refreshed yet: the wipe still finds it
    _write(index_server, "flint_local_default_t_index", "x")
    node.wipe(index_server)
    assert REQUESTS in _indexes(index_server)
    assert "flint_local_default_t_index" not in _indexes(index_server)
    assert _count(index_server, REQUESTS) == 0


@pytest.mark.parametrize(
    ("path", "change"),
    [
        ("_mapping", {"properties": {"extra": {"type": "keyword"}}}),
        ("_settings", {"index": {"max_result_window": 50}}),
        ("_alias/requests", None),
    ],
    ids=["mappings", "settings", "aliases"],
)
def test_a_product_index_changed_in_any_way_is_deleted(
    index_server: EmbeddedIndex, path: str, change: dict[str, object] | None
) -> None:
    _made_by_the_product(index_server)
    node.wipe(index_server)
    assert REQUESTS in _indexes(index_server)
    with node.index_client(index_server.url) as client:
        reply = client.put(f"/{REQUESTS}/{path}", json=change)
        assert reply.status_code == 200, reply.text
    node.wipe(index_server)
    assert REQUESTS not in _indexes(index_server)


def test_a_bare_wipe_leaves_no_index_at_all(index_server: EmbeddedIndex) -> None:
    _made_by_the_product(index_server)
    node.wipe(index_server)
    assert REQUESTS in _indexes(index_server)
    node.wipe(index_server, keep=False)
    assert _indexes(index_server) == set()


@pytest.mark.bare_cluster
def test_a_bare_cluster_test_starts_with_no_index(index_url: str, index_server: EmbeddedIndex) -> None:
    assert _indexes(index_server) == set()
