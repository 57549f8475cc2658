"""Health and the index call figures against a real index that goes away and comes back (the test
process's node behind a port that can close: tests/faults/procs.py, FixedPortIndex)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.health import Health
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.errors import DocumentExistsError, IndexUnavailableError
from query_core.ids import request_index
from query_core.store import IndexClient, Store
from tests.faults.procs import FixedPortIndex
from tests.node import CLIENT_SSL, auth_fields
from tests.support import RecordingLauncher, serve_http

HEALTH = f"{BASE}/_health"


@pytest.fixture
def index() -> Iterator[FixedPortIndex]:
    server = FixedPortIndex()
    yield server
    server.close()


@pytest.fixture
def plugin(index: FixedPortIndex, tmp_path: Path) -> Iterator[Plugin]:
    settings = Settings(data_dir=tmp_path / "var", opensearch_retry_seconds=0.5, health_cache_s=0, health_timeout_s=2)
    opensearch = settings.opensearch(index.url).model_copy(update=auth_fields(index.url))
    store = Store.connect(opensearch)
    registry = DatasourceRegistry([local_datasource()], store)
    made = build_plugin(settings, store, registry, {"local": RecordingLauncher()}, opensearch)
    yield made
    made.close()
    store.close()


def test_health_is_503_while_the_index_server_is_stopped_and_200_once_it_is_back(
    index: FixedPortIndex, plugin: Plugin
) -> None:
    plugin.housekeeper.run_once()  # takes the datasource's housekeeping lease
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
        healthy = client.get(HEALTH)
        assert healthy.status_code == 200, healthy.text
        checks = healthy.json()["checks"]
        assert checks["index"] == {"ok": True}
        lease = checks["housekeeping"]["housekeeping"]["leases"]["local"]
        assert lease["thisProcess"] is True and lease["holder"] == plugin.housekeeper.lease.owner

        index.stop()
        down = client.get(HEALTH)
        assert down.status_code == 503, down.text
        body = down.json()
        assert body["status"] == 503 and set(body["error"]) == {"type", "reason", "details"}
        assert body["error"]["reason"] == "Service Unavailable"
        assert "index: the index cluster does not answer" in body["error"]["details"]
        assert body["checks"]["index"]["ok"] is False
        assert body["checks"]["launcher:local"] == {"ok": True}

        index.start()
        back = client.get(HEALTH)
        assert back.status_code == 200, back.text
        gauge = client.get("/metrics").text
    assert 'async_query_health_check_ok{check="index"} 1.0' in gauge


def test_index_calls_are_told_by_outcome_and_retries(index: FixedPortIndex, plugin: Plugin) -> None:
    client = plugin.store.index
    assert isinstance(client, IndexClient)
    told: list[tuple[str, str, int]] = []
    client.call_listeners.append(lambda *call: told.append(call))
    ds_index = request_index("local")
    client.create(ds_index, "a", {"type": "lock"})
    assert ("create", "2xx", 0) in told
    told.clear()
    with pytest.raises(DocumentExistsError):
        client.create(ds_index, "a", {"type": "lock"})
    assert told == [("create", "4xx", 0)]
    told.clear()
    index.stop()
    with pytest.raises(IndexUnavailableError):
        client.get(ds_index, "a")
    [(operation, outcome, retries)] = told
    assert (operation, outcome) == ("get", "unreachable") and retries >= 1


def stop_the_thread() -> None:
    raise SystemExit  # what ends a thread without a trace (an exception handler of its own)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stopped_housekeeping_loop_is_unhealthy(plugin: Plugin) -> None:
    plugin.housekeeper.start()
    plugin.housekeeper._thread.join(timeout=0)  # type: ignore[union-attr]
    health = Health(plugin.health.watched, timeout_s=2, cache_s=0)
    assert health.report().checks["housekeeping"]["ok"] is True
    # the loop's thread dies without being asked to stop
    plugin.housekeeper.run_once = stop_the_thread  # type: ignore[method-assign]
    plugin.housekeeper.wake()
    plugin.housekeeper._thread.join(timeout=10)  # type: ignore[union-attr]
    report = health.report()
    assert report.checks["housekeeping"]["ok"] is False
    assert "this process's housekeeping loop has stopped" in report.problems()
    health.close()
