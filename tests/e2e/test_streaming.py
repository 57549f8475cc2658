"""Auto-refreshed Flint indexes through the REST API alone, with real spark-submit streaming jobs
and the shared catalog: a covering index and a windowed materialized view kept fresh while rows
are inserted from an interactive session; ALTER off then on again with no duplicate and no
missing document; the refresh-job limit; DROP and VACUUM of a streaming view; a streaming job
killed with ``kill -9``, then recovered; a datasource deleted under its stream."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from async_query.datasources import Datasource
from async_query.embedded.metastore import Metastore
from async_query.launcher.local import catalog_settings
from async_query.runtime import Plugin
from query_core.flint.naming import latest_id
from query_core.models import FlintIndexStateDoc, SessionDoc, StreamProgress
from query_core.states import FlintIndexState, SessionState
from tests.e2e.conftest import TERMINAL, Api, shared_catalog_service
from tests.faults.procs import group_members, job_pid
from tests.support import wait_for

pytestmark = pytest.mark.e2e
DS = "local"
TABLE = "local.default.stream_events"
COVERING = "flint_local_default_stream_events_pages_index"
MV = "flint_local_default_stream_counts"
#: Freshness: how long a row may take to be searchable (a JVM start, then 1 s micro-batches).
FRESH_S = 120


@pytest.fixture(scope="module")
def plugin(
    metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, Plugin]]:
    tmp = tmp_path_factory.mktemp("streaming")
    # Two shuffle partitions, not Spark's 200: each micro-batch of the windowed view's stateful
    # aggregation otherwise runs 200 state-store tasks, some 20 s per batch on two cores.
    with shared_catalog_service(
        metastore,
        module_index_url,
        tmp,
        DS,
        spark_conf={"spark.sql.shuffle.partitions": "2"},
        heartbeat_streaming_ms=500,
        stream_check_ms=200,
        stale_heartbeats=3,
        max_refreshing_jobs=2,
        liveness_cache_s=0.5,
    ) as served:
        yield served


@pytest.fixture(scope="module")
def api(plugin: tuple[Api, Plugin]) -> Api:
    return plugin[0]


@pytest.fixture(scope="module")
def svc(plugin: tuple[Api, Plugin]) -> Plugin:
    return plugin[1]


def ok(api: Api, query: str, session_id: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    submitted, reply = api.run(query, session_id, timeout=180)
    assert reply["status"] == "SUCCESS", (query, reply)
    return submitted, reply


class Events:
    """The source table, and the rows inserted so far (from one interactive session)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        submitted, _ = ok(api, f"CREATE TABLE {TABLE} (ts TIMESTAMP, page STRING, n INT) USING parquet")
        self.session = str(submitted["sessionId"])
        self.rows: list[tuple[str, str, int]] = []

    def insert(self, *rows: tuple[str, str, int]) -> None:
        values = ", ".join(f"(TIMESTAMP '{ts}', '{page}', {n})" for ts, page, n in rows)
        ok(self.api, f"INSERT INTO {TABLE} VALUES {values}", self.session)
        self.rows.extend(rows)

    def pages(self) -> list[tuple[str, int]]:
        return sorted((page, n) for _, page, n in self.rows)


@pytest.fixture(scope="module")
def events(api: Api) -> Events:
    table = Events(api)
    table.insert(("2026-01-01 00:00:10", "/home", 1), ("2026-01-01 00:00:20", "/cart", 2))
    return table


def docs(svc: Plugin, index: str) -> list[dict[str, Any]]:
    return [source for _, source in svc.store.admin.scan(index)] if svc.store.admin.index_exists(index) else []


def covering_pages(svc: Plugin) -> list[tuple[str, int]]:
    return sorted((d["page"], d["n"]) for d in docs(svc, COVERING))


def state_of(svc: Plugin, index: str) -> FlintIndexStateDoc:
    found = svc.store.index_states.get(DS, latest_id(index))
    assert found is not None, index
    return found.doc


def session_of(svc: Plugin, query_id: str) -> SessionDoc:
    statement = svc.store.statements.get(DS, query_id)
    assert statement is not None
    session = svc.store.sessions.get(DS, statement.doc.session_id)
    assert session is not None
    return session.doc


def start_stream(api: Api, query: str) -> str:
    """POST a streaming query; once it is SUCCESS its stream runs. Returns its query id."""
    submitted = api.submit(query)
    assert set(submitted) == {"queryId"}, submitted
    reply = api.wait_status(submitted["queryId"], TERMINAL, timeout=180)
    assert reply == {"status": "SUCCESS", "schema": [], "datarows": [], "total": 0, "size": 0}, (query, reply)
    return str(submitted["queryId"])


def fresh(svc: Plugin, expected: list[tuple[str, int]]) -> None:
    wait_for(lambda: covering_pages(svc) == expected, timeout=FRESH_S, interval=0.2, what="the index to catch up")


def listed(api: Api, session: str) -> dict[str, list[Any]]:
    _, reply = ok(api, f"SHOW FLINT INDEXES EXTENDED IN {DS}", session)
    return {row[0]: row for row in reply["datarows"]}


# -- a covering index kept fresh, stopped and started again -------------------------------------------


def test_a_covering_index_stays_fresh_while_rows_are_inserted(api: Api, svc: Plugin, events: Events) -> None:
    query_id = start_stream(
        api, f"CREATE INDEX pages ON {TABLE} (page, n) WITH (auto_refresh = true, refresh_interval = '1 second')"
    )
    state = state_of(svc, COVERING)
    session = session_of(svc, query_id)
    assert state.state is FlintIndexState.REFRESHING and state.job_id == session.job_id
    assert session.session_type.value == "streaming" and session.state is SessionState.RUNNING
    fresh(svc, events.pages())

    for n in range(3, 6):
        events.insert((f"2026-01-01 00:01:{n:02d}", f"/p{n}", n))
        fresh(svc, events.pages())

    def reported() -> StreamProgress | None:
        progress = session_of(svc, query_id).stream_progress
        return progress if progress is not None and progress.batches > 0 else None

    progress = wait_for(reported, what="the heartbeat to report the stream")
    assert progress.index_name == COVERING and progress.last_error == ""
    row = listed(api, events.session)[COVERING]
    assert row[:7] == [COVERING, "covering", "default", "stream_events", "pages", True, "refreshing"]
    assert api.cancel(query_id).json()["error"]["details"].startswith("can't cancel index DML query, using ALTER")


def test_alter_off_then_on_again_loses_and_duplicates_nothing(api: Api, svc: Plugin, events: Events) -> None:
    before = state_of(svc, COVERING)
    ok(api, f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = false)")
    assert state_of(svc, COVERING).state is FlintIndexState.ACTIVE
    stopped = svc.store.sessions.find(DS, [SessionState.DEAD], job_id=before.job_id, fresh=True)
    assert stopped and stopped[0].doc.error == ""  # the job stopped its stream itself
    assert svc.stream_stopper.cancelled == 0

    events.insert(("2026-01-01 00:02:00", "/while-off", 6), ("2026-01-01 00:02:01", "/while-off", 7))
    assert covering_pages(svc) == sorted(p for p in events.pages() if p[0] != "/while-off")

    start_stream(api, f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = true)")
    assert state_of(svc, COVERING).state is FlintIndexState.REFRESHING
    fresh(svc, events.pages())  # exactly the rows: none twice, none missing
    events.insert(("2026-01-01 00:02:02", "/after", 8))
    fresh(svc, events.pages())


# -- a windowed materialized view, the limit, DROP and VACUUM ---------------------------------------


def test_a_windowed_view_counts_each_closed_window_once(api: Api, svc: Plugin, events: Events) -> None:
    start_stream(
        api,
        f"CREATE MATERIALIZED VIEW stream_counts AS SELECT window.start AS startTime, COUNT(*) AS count "
        f"FROM {TABLE} GROUP BY TUMBLE(ts, '1 Minute') "
        "WITH (auto_refresh = true, refresh_interval = '1 second', watermark_delay = '1 Second')",
    )
    # A row two minutes later moves the watermark past every window so far: each is emitted once.
    events.insert(("2026-01-01 00:05:00", "/late", 9))
    expected: dict[str, int] = {}
    for ts, _, _ in events.rows:
        if ts < "2026-01-01 00:05":
            minute = ts[:16] + ":00"
            expected[minute] = expected.get(minute, 0) + 1

    def counts() -> dict[str, int]:
        return {d["startTime"][:19].replace("T", " "): d["count"] for d in docs(svc, MV)}

    wait_for(lambda: counts() == expected, timeout=FRESH_S, interval=0.2, what="the view's closed windows")


def test_the_refresh_job_limit_refuses_a_third_stream(api: Api) -> None:
    reply = api.http.post(
        "/_plugins/_async_query",
        json={
            "datasource": DS,
            "lang": "sql",
            "query": f"CREATE INDEX more ON {TABLE} (n) WITH (auto_refresh = true)",
        },
    )
    assert reply.status_code == 429
    assert reply.json()["error"]["details"] == "domain concurrent refresh job can not exceed 2"


def test_drop_stops_the_stream_and_vacuum_removes_index_and_checkpoint(api: Api, svc: Plugin) -> None:
    job_id = state_of(svc, MV).job_id
    ok(api, "DROP MATERIALIZED VIEW stream_counts")
    assert state_of(svc, MV).state is FlintIndexState.DELETED
    [ended] = svc.store.sessions.find(DS, list(SessionState), job_id=job_id, fresh=True)
    assert ended.doc.state is SessionState.DEAD and ended.doc.error == ""
    pid = job_pid(svc.settings.data_dir, job_id)
    wait_for(lambda: not group_members(pid), timeout=60, what="the streaming job to exit")

    checkpoint = Path(svc.launchers.shared["local"].checkpoint_root) / MV
    assert checkpoint.exists()
    ok(api, "VACUUM MATERIALIZED VIEW stream_counts")
    assert not svc.store.admin.index_exists(MV)
    assert svc.store.index_states.get(DS, latest_id(MV)) is None
    assert not checkpoint.exists()


# -- failures -----------------------------------------------------------------------------------------


def test_a_killed_streaming_job_fails_its_index_with_the_cause_and_recover_resumes(
    api: Api, svc: Plugin, events: Events
) -> None:
    """The stream watcher notices the silent session at its staleness limit (3 beats of 0.5 s
    here) and fails the index; the housekeeping sweep never runs."""
    job_id = state_of(svc, COVERING).job_id
    pid = job_pid(svc.settings.data_dir, job_id)
    svc.stream_watcher.start()
    try:
        killed_at = time.monotonic()
        os.killpg(pid, signal.SIGKILL)

        def failed() -> FlintIndexStateDoc | None:
            state = state_of(svc, COVERING)
            return state if state.state is FlintIndexState.FAILED else None

        state = wait_for(failed, timeout=60, interval=0.1, what="the index to be failed")
        took_s = time.monotonic() - killed_at
    finally:
        svc.stream_watcher.stop()
    limit_s = svc.settings.stale_heartbeats * svc.settings.heartbeat_streaming_ms / 1000
    print(f"kill -9 -> index failed: {took_s:.1f} s (staleness limit {limit_s:g} s)", file=sys.stderr)
    assert svc.housekeeper.stalled_indexes.repaired == 0 and svc.stream_watcher.failed == [COVERING]
    assert job_id in state.error and "streaming session" in state.error and "exited with code -9" in state.error
    assert not group_members(pid)
    row = listed(api, events.session)[COVERING]
    assert row[6] == "failed" and row[7] == state.error

    start_stream(api, f"RECOVER INDEX JOB {COVERING}")
    assert state_of(svc, COVERING).state is FlintIndexState.REFRESHING
    events.insert(("2026-01-01 00:06:00", "/recovered", 10))
    fresh(svc, events.pages())


def test_the_streaming_housekeeper_stops_the_stream_of_a_deleted_datasource(
    api: Api, svc: Plugin, events: Events, metastore: Metastore
) -> None:
    # Make room under the limit: the covering stream stops.
    ok(api, f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = false)")
    catalog = catalog_settings(metastore.home / "warehouse", metastore.uri)
    svc.datasources.create(Datasource(name="lake", connector="local", spark_conf=catalog))
    lake = Api(str(api.http.base_url), "lake")
    index = "flint_lake_default_stream_events_lake_pages_index"
    query_id = start_stream(
        lake, "CREATE INDEX lake_pages ON lake.default.stream_events (page) WITH (auto_refresh = true)"
    )
    job_id = session_of_ds(svc, "lake", query_id).job_id
    wait_for(lambda: len(docs(svc, index)) == len(events.rows), timeout=FRESH_S, what="the lake index")

    svc.datasources.delete("lake")
    svc.streaming_housekeeper.run_once()

    found = svc.store.index_states.get("lake", latest_id(index))
    assert found is not None and found.doc.state is FlintIndexState.DELETED
    assert svc.streaming_housekeeper.stopped == ["datasource lake was deleted"]
    pid = job_pid(svc.settings.data_dir, job_id)
    wait_for(lambda: not group_members(pid), timeout=60, what="the lake stream's job to exit")


def session_of_ds(svc: Plugin, ds: str, query_id: str) -> SessionDoc:
    statement = svc.store.statements.get(ds, query_id)
    assert statement is not None
    session = svc.store.sessions.get(ds, statement.doc.session_id)
    assert session is not None
    return session.doc
