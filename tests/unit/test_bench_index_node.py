"""The benches' index (bench/index_node.py): ``OPENSEARCH_URL`` wins over starting a node, its
credential goes with every client and into a service process's environment, and nothing the
shell named as an index reaches that process."""

from __future__ import annotations

import pytest

from bench.index_node import IndexNode, index_headers, index_node
from query_core.config import OpenSearchConfig


def test_opensearch_url_wins_and_its_credential_goes_along(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("ASYNC_QUERY_OPENSEARCH_URL", "ASYNC_QUERY_OPENSEARCH_USERNAME", "ASYNC_QUERY_OPENSEARCH_PASSWORD"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OPENSEARCH_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("OPENSEARCH_USERNAME", "bench")
    monkeypatch.setenv("OPENSEARCH_PASSWORD", "s3cret")
    with index_node() as index:
        assert index.node is None and index.url == "http://127.0.0.1:1"
        assert index.auth == ("bench", "s3cret")
        assert index.headers() == {"Authorization": "Basic YmVuY2g6czNjcmV0"}
        assert index.resident() is None
        assert index.env() == {
            "OPENSEARCH_URL": "http://127.0.0.1:1",
            "OPENSEARCH_USERNAME": "bench",
            "OPENSEARCH_PASSWORD": "s3cret",
        }


def test_a_service_gets_this_index_and_no_other() -> None:
    index = IndexNode("http://127.0.0.1:2", OpenSearchConfig(url="http://127.0.0.1:2", auth="basic", username="u", password="p"))
    inherited = {
        "PATH": "/bin",
        "ASYNC_QUERY_OPENSEARCH_URL": "http://elsewhere:9200",
        "ASYNC_QUERY_OPENSEARCH_PASSWORD": "other",
        "OPENSEARCH_USERNAME": "other",
        "ASYNC_QUERY_OPENSEARCH_VERIFY_CERTS": "false",
    }
    assert index.service_env(inherited) == {
        "PATH": "/bin",
        "ASYNC_QUERY_OPENSEARCH_VERIFY_CERTS": "false",
        "OPENSEARCH_URL": "http://127.0.0.1:2",
        "OPENSEARCH_USERNAME": "u",
        "OPENSEARCH_PASSWORD": "p",
    }


def test_raw_requests_are_signed_only_where_they_can_be() -> None:
    assert index_headers(OpenSearchConfig(auth="noauth")) == {}
    assert index_headers(OpenSearchConfig(auth="sigv4")) is None
    assert IndexNode("http://x", OpenSearchConfig(url="http://x")).env() == {"OPENSEARCH_URL": "http://x"}
