"""The unit tier: no servers. The store is the in-memory twin of the index (held to the real
cluster's behaviour by ``tests/integration/test_store_contract.py``), searches seeing writes only
after a refresh, as a real cluster's do; services are built on it with launchers that start
nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from query_core.config import OpenSearchConfig
from query_core.store import Store


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store.in_memory()
    yield s
    s.close()


@pytest.fixture
def opensearch_config() -> OpenSearchConfig:
    """The connection services hand their jobs (the unit tier's launchers start none)."""
    return OpenSearchConfig(url="http://127.0.0.1:9")


@pytest.fixture
def ds_name() -> str:
    return "local"
