"""Who may read what operators read, the service with metrics off, and the JSON log lines that
name the query and session they are about."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query import logs, metrics
from async_query.api import BASE, create_app
from async_query.security.users import UsersFile
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, serve_http

PASSWORDS = {"admin": "admin-Pa55word-1", "reader": "reader-Pa55word-1", "scraper": "scraper-Pa55word-1"}
ADMIN_ONLY = [("GET", "/metrics"), ("GET", "/_plugins/_sql/stats"), ("POST", "/_plugins/_ppl/stats")]


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.json"
    UsersFile(path, FAST_HASHER).add("admin", PASSWORDS["admin"], ["all_access"])
    UsersFile(path, FAST_HASHER).add("reader", PASSWORDS["reader"], ["reader"])
    UsersFile(path, FAST_HASHER).add("scraper", PASSWORDS["scraper"], ["prometheus"])
    return path


@pytest.fixture
def secured(make_plugin: PluginFactory, users: Path) -> Iterator[str]:
    plugin = make_plugin(auth="basic", users_file=users, metrics_roles=["prometheus"])
    with serve_http(create_app(plugin)) as url:
        yield url


def as_user(name: str) -> httpx.BasicAuth:
    return httpx.BasicAuth(name, PASSWORDS[name])


def test_metrics_and_stats_are_for_admins_and_health_for_every_caller(secured: str) -> None:
    with httpx.Client(base_url=secured, timeout=30, verify=CLIENT_SSL) as client:
        for method, path in ADMIN_ONLY:
            assert client.request(method, path).status_code == 401
            refused = client.request(method, path, auth=as_user("reader"))
            assert refused.status_code == 403, refused.text
            error = refused.json()["error"]
            assert "not authorized to read the service's metrics" in error["details"]
            assert client.request(method, path, auth=as_user("admin")).status_code == 200
            assert client.request(method, path, auth=as_user("scraper")).status_code == 200
        # the metrics role gives no other power
        assert client.delete("/_plugins/_query/_datasources/local", auth=as_user("scraper")).status_code == 403
        assert client.get(f"{BASE}/_health").status_code == 401
        for user in ("reader", "admin"):
            health = client.get(f"{BASE}/_health", auth=as_user(user))
            assert health.status_code == 200, health.text
            assert health.json()["serving"] is True
            assert set(health.json()["checks"]) == {"index", "launcher:local", "housekeeping"}


def requests_counted() -> float:
    metrics.flush()
    return sum(v for _, v in metrics.samples(metrics.HTTP_REQUESTS, "_count"))


def test_with_metrics_off_nothing_is_counted_or_shown(make_plugin: PluginFactory, ds_name: str) -> None:
    plugin = make_plugin(metrics_enabled=False)
    counted = requests_counted()
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
        for path in ("/metrics", "/_plugins/_sql/stats"):
            reply = client.get(path)
            assert reply.status_code == 404
            assert set(reply.json()) == {"status", "error"}
        assert client.get(f"{BASE}/_health").status_code == 200  # health is not a metric
        reply = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT 1"})
        assert client.get(f"{BASE}/{reply.json()['queryId']}").status_code == 200
    assert requests_counted() == counted
    assert plugin.store.index.call_listeners == []
    assert plugin.store.statements.end_listeners == []


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The product's log lines, as ``serve --log-format json`` writes them."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs._AboutFilter())
    product = logging.getLogger("async_query")
    level = product.level
    product.addHandler(handler)
    product.setLevel(logging.INFO)
    yield out
    product.removeHandler(handler)
    product.setLevel(level)


def test_json_log_lines_name_the_query_and_session_they_are_about(
    make_plugin: PluginFactory, ds_name: str, json_lines: io.StringIO
) -> None:
    plugin = make_plugin()
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
        reply = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT 1"})
        query_id, session_id = reply.json()["queryId"], reply.json()["sessionId"]
        assert client.delete(f"{BASE}/{query_id}").status_code == 204
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    cancelled = [line for line in lines if line["message"] == f"cancelled query {query_id}"]
    assert len(cancelled) == 1, lines
    assert cancelled[0]["queryId"] == query_id and cancelled[0]["sessionId"] == session_id
    assert cancelled[0]["level"] == "INFO" and cancelled[0]["logger"] == "async_query.handlers.job_session"
    assert cancelled[0]["time"].endswith("+00:00")


def test_a_line_about_nothing_names_nothing_and_a_traceback_stays_in_the_line() -> None:
    contextvars.Context().run(about_nothing_then_a_query)


def about_nothing_then_a_query() -> None:
    formatter = logs.JsonFormatter()
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
    assert set(json.loads(formatter.format(record))) == {"time", "level", "logger", "message"}
    with logs.about(query_id="q1", session_id="s1"):
        try:
            raise ValueError("boom")
        except ValueError:
            record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
        line = json.loads(formatter.format(record))
    assert (line["queryId"], line["sessionId"]) == ("q1", "s1")
    assert "ValueError: boom" in line["exception"] and "\n" not in formatter.format(record)
    assert logs.current() == {}
