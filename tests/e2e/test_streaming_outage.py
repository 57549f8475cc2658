"""A streaming job rides out a restart of the index under it: the embedded index (an OpenSearch node
on a fixed port) is stopped gracefully and started again on its data while the stream runs; the job
keeps retrying its index calls, and rows inserted after the restart reach the index, with no
duplicate and no missing document."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from async_query.embedded.index import EmbeddedIndex
from async_query.embedded.metastore import Metastore
from async_query.embedded.node_jars import NodeJars
from async_query.launcher.local import catalog_settings
from query_core.flint.naming import latest_id
from query_core.states import FlintIndexState, SessionState
from tests.conftest import REAL_CLUSTER
from tests.e2e.conftest import TERMINAL, Api, e2e_service
from tests.faults.procs import kill_all_jobs
from tests.node import node_options
from tests.support import free_port, serve_http, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(REAL_CLUSTER), reason="restarts the embedded index server, not a real cluster"),
]
DS = "local"
TABLE = "local.default.outage_events"
INDEX = "flint_local_default_outage_events_outage_pages_index"


@pytest.fixture
def index(tmp_path: Path) -> Iterator[list[EmbeddedIndex]]:
    """The embedded index on a fixed port; the test replaces the list's one server when it restarts it."""
    port = free_port()
    servers = [EmbeddedIndex.start(tmp_path / "index", NodeJars.resolve(), node_options(), port=port, watch=False)]
    yield servers
    servers[-1].close()


def ok(api: Api, query: str, session_id: str | None = None) -> dict[str, Any]:
    submitted, reply = api.run(query, session_id, timeout=180)
    assert reply["status"] == "SUCCESS", (query, reply)
    return submitted


def test_a_stream_resumes_after_the_index_server_restarts(
    index: list[EmbeddedIndex], metastore: Metastore, tmp_path: Path
) -> None:
    catalog = catalog_settings(metastore.home / "warehouse", metastore.uri)
    plugin = e2e_service(
        index[0].url,
        tmp_path,
        DS,
        catalog,
        index_auth=index[0].auth,
        heartbeat_streaming_ms=1_000,
        stream_check_ms=200,
        job_index_retry_seconds=120,
    )
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, DS)
            sid = str(ok(api, f"CREATE TABLE {TABLE} (page STRING, n INT) USING parquet")["sessionId"])
            rows = [("/a", 1), ("/b", 2)]
            ok(api, "INSERT INTO " + TABLE + " VALUES ('/a', 1), ('/b', 2)", sid)
            submitted = api.submit(
                f"CREATE INDEX outage_pages ON {TABLE} (page, n) "
                "WITH (auto_refresh = true, refresh_interval = '1 second')"
            )
            assert api.wait_status(submitted["queryId"], TERMINAL, timeout=180)["status"] == "SUCCESS"

            def pages() -> list[tuple[str, int]]:
                return sorted((d["page"], d["n"]) for _, d in plugin.store.admin.scan(INDEX))

            wait_for(lambda: pages() == sorted(rows), timeout=120, what="the first rows")

            index[0].close()  # a graceful stop
            again = EmbeddedIndex.start(
                tmp_path / "index", NodeJars.resolve(), node_options(), port=index[0].port, credential=index[0].credential
            )
            index.append(again)

            ok(api, "INSERT INTO " + TABLE + " VALUES ('/c', 3)", sid)
            rows.append(("/c", 3))
            wait_for(lambda: pages() == sorted(rows), timeout=120, interval=0.2, what="the row after the restart")
            state = plugin.store.index_states.get(DS, latest_id(INDEX))
            assert state is not None and state.doc.state is FlintIndexState.REFRESHING
            live = plugin.store.sessions.find(DS, [SessionState.RUNNING], job_id=state.doc.job_id, fresh=True)
            assert len(live) == 1
    finally:
        plugin.close()
        kill_all_jobs(plugin.settings.data_dir)
