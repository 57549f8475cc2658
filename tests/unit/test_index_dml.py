"""Index DML (DROP, ALTER to manual refresh) done by the plugin, and the housekeeping sweeps that
end what a stopped plugin or job left unfinished, against a real index server. The jobs whose
sessions own indexes are played by the test (a RecordingLauncher starts nothing)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.launcher.base import JobRunState
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query.workers import DAY_MS
from query_core.flint import latest_id
from query_core.flint.metas import flint_metas
from query_core.ids import new_id, request_index
from query_core.models import FlintIndexStateDoc, SessionDoc, StatementDoc, now_millis
from query_core.states import FlintIndexState, SessionState, SessionType, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, StandInStream, seed, serve_http, wait_for

F = FlintIndexState
INDEX = "flint_local_default_http_logs_skipping_index"
DROP = "DROP SKIPPING INDEX ON local.default.http_logs"
ALTER = "ALTER SKIPPING INDEX ON http_logs WITH (auto_refresh = false)"
EMPTY_SUCCESS = {"status": "SUCCESS", "schema": [], "datarows": [], "total": 0, "size": 0}


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin()


def flint_index(store: Store, auto_refresh: bool, **options: str) -> dict[str, Any]:
    """A Flint index as the job creates it: the OpenSearch index with its ``_meta``."""
    meta = {
        "version": "1.0.0",
        "name": INDEX,
        "kind": "skipping",
        "source": "local.default.http_logs",
        "indexedColumns": [{"kind": "PARTITION", "parameters": {}, "columnName": "year", "columnType": "int"}],
        "options": {"auto_refresh": str(auto_refresh).lower(), "incremental_refresh": "false", **options},
        "latestId": latest_id(INDEX),
        "properties": {"env": {"SERVERLESS_EMR_JOB_ID": "job-s"}},
    }
    assert store.admin.create_index(INDEX, {"mappings": {"_meta": meta, "properties": {"file_path": {"type": "keyword"}}}})
    return meta


def index_at(store: Store, ds: str, state: F, job_id: str = "", age_ms: int = 0, index: str = INDEX) -> None:
    seed(store,
        FlintIndexStateDoc(
            latest_id=latest_id(index),
            data_source_name=ds,
            index_name=index,
            state=state,
            job_id=job_id,
            last_update_time=now_millis() - age_ms,
        )
    )


def job_session(
    store: Store, ds: str, job_id: str, session_type: SessionType, state: SessionState, age_ms: int = 0
) -> str:
    """The session document of a job (as the plugin and the job's heartbeat leave it)."""
    session_id = new_id(ds)
    seed(store,
        SessionDoc(
            session_id=session_id,
            session_type=session_type,
            data_source_name=ds,
            state=state,
            job_id=job_id,
            heartbeat_interval_millis=1_000,
            last_update_time=now_millis() - age_ms,
            error="stream stopped: source gone" if state == SessionState.FAIL else "",
        )
    )
    store.index.refresh("*")  # what follows finds them by a search
    assert store.sessions.find(ds, [state], job_id=job_id)
    return session_id


def state_of(store: Store, ds: str, index: str = INDEX) -> FlintIndexStateDoc:
    found = store.index_states.get(ds, latest_id(index))
    assert found is not None
    return found.doc


def run(plugin: Plugin, query: str) -> tuple[str, dict[str, Any]]:
    """POST ``query`` and wait for its end; returns its id and final GET reply."""
    ds = plugin.datasources.all()[0].name
    query_id = plugin.service.submit(SubmitRequest(ds, "sql", query)).query_id

    def finished() -> dict[str, Any] | None:
        reply = dict(json.loads(plugin.service.get(query_id)))
        return reply if reply["status"] not in ("WAITING", "RUNNING") else None

    return query_id, wait_for(finished, timeout=30, what=f"{query} to finish")


def ended_local_session(store: Store, ds: str, query_id: str) -> SessionDoc:
    """The statement's local session, once ended: the plugin ends it right after it settles the
    statement, so a reader who saw the statement end may still find it running a moment."""
    statement = store.statements.get(ds, query_id)
    assert statement is not None

    def ended() -> SessionDoc | None:
        session = store.sessions.get(ds, statement.doc.session_id)
        assert session is not None and session.doc.session_type == SessionType.LOCAL
        return session.doc if session.doc.state == SessionState.DEAD else None

    return wait_for(ended, timeout=30, what="the local session to end")


# -- DROP --------------------------------------------------------------------------------------------


def test_drop_moves_an_active_index_to_deleted_and_ends_its_query(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0]
    flint_index(store, auto_refresh=False)
    job_session(store, ds.name, "job-b", SessionType.BATCH, SessionState.DEAD)
    index_at(store, ds.name, F.ACTIVE, job_id="job-b")

    query_id, reply = run(plugin, DROP)

    assert reply == EMPTY_SUCCESS
    assert state_of(store, ds.name).state == F.DELETED
    assert store.admin.index_exists(INDEX)  # the data stays until VACUUM, as in the reference
    assert launcher.started == [] and launcher.cancelled == []  # the batch job that built it has ended
    result = store.results.get(ds.results, query_id)
    assert result is not None and result.status == "SUCCESS" and result.error == "" and result.session_id == ""
    ended_local_session(store, ds.name, query_id)


def test_drop_of_a_refreshing_index_asks_its_stream_to_stop(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    flint_index(store, auto_refresh=True)
    session_id = job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")

    with StandInStream(store, ds, session_id, latest_id(INDEX)) as job:
        _, reply = run(plugin, DROP)
        assert job.stopped.is_set()

    assert reply == EMPTY_SUCCESS
    assert launcher.cancelled == []  # the job stopped when asked: no launcher call
    assert state_of(store, ds).state == F.DELETED


def test_a_stream_that_does_not_stop_when_asked_is_cancelled_after_the_deadline(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, stream_stop_timeout_s=0.5)
    ds = plugin.datasources.all()[0].name
    flint_index(store, auto_refresh=True)
    session_id = job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")

    with StandInStream(store, ds, session_id, latest_id(INDEX), responsive=False):
        _, reply = run(plugin, DROP)

    assert reply == EMPTY_SUCCESS
    assert launcher.cancelled == ["job-s"]
    assert state_of(store, ds).state == F.DELETED
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD
    assert session.doc.error == "the job did not stop its stream within 0.5 s of being asked; it was cancelled"


def test_drop_of_a_missing_index_fails_with_the_reference_message(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0]
    query_id, reply = run(plugin, "DROP SKIPPING INDEX ON nope")
    message = "Couldn't fetch flint index: flint_local_default_nope_skipping_index details"
    assert reply == {"status": "FAILED", "error": message}
    assert store.index_states.get(ds.name, latest_id("flint_local_default_nope_skipping_index")) is None
    result = store.results.get(ds.results, query_id)
    assert result is not None and result.status == "FAILED" and result.error == message
    ended_local_session(store, ds.name, query_id)


def test_drop_of_an_opensearch_index_that_is_no_flint_index_is_refused(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    assert store.admin.create_index(INDEX, {"mappings": {"properties": {"a": {"type": "keyword"}}}})  # no Flint _meta
    _, reply = run(plugin, DROP)
    assert reply == {"status": "FAILED", "error": f"Couldn't fetch flint index: {INDEX} details"}
    assert store.index_states.get(ds, latest_id(INDEX)) is None


def test_drop_of_an_index_already_deleted_fails_and_changes_nothing(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    flint_index(store, auto_refresh=False)
    index_at(store, ds, F.DELETED)
    _, reply = run(plugin, DROP)
    assert reply["status"] == "FAILED" and f"cannot drop {INDEX}: it is deleted" in reply["error"]
    assert state_of(store, ds).state == F.DELETED


# -- ALTER to manual refresh -------------------------------------------------------------------------


def test_alter_to_manual_stops_the_stream_and_rewrites_the_options(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    meta = flint_index(store, auto_refresh=True, checkpoint_location="/tmp/cp", refresh_interval="1 minute")
    session_id = job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")

    with StandInStream(store, ds, session_id, latest_id(INDEX)) as job:
        _, reply = run(
            plugin, "ALTER SKIPPING INDEX ON http_logs WITH (auto_refresh = false, incremental_refresh = false)"
        )
        assert job.stopped.is_set()

    assert reply == EMPTY_SUCCESS
    assert launcher.cancelled == []
    assert state_of(store, ds).state == F.ACTIVE
    stored = flint_metas(store.admin, INDEX)[INDEX]
    assert stored["options"] == {
        "auto_refresh": "false",
        "incremental_refresh": "false",
        "checkpoint_location": "/tmp/cp",
        "refresh_interval": "1 minute",
    }
    assert {k: v for k, v in stored.items() if k != "options"} == {k: v for k, v in meta.items() if k != "options"}


@pytest.mark.parametrize(
    ("query", "auto_refresh", "message"),
    [
        (ALTER, False, "auto_refresh option must be updated"),
        (
            "ALTER SKIPPING INDEX ON http_logs WITH (auto_refresh = false, refresh_interval = '5 minutes')",
            True,
            "Altering to full refresh only allows: [auto_refresh, incremental_refresh] options",
        ),
        (
            "ALTER SKIPPING INDEX ON http_logs WITH (auto_refresh = false, incremental_refresh = true)",
            True,
            "Conversion to incremental refresh index cannot proceed due to missing attributes: checkpoint_location.",
        ),
    ],
    ids=["not auto refresh", "option not allowed", "incremental without checkpoint"],
)
def test_a_refused_alter_fails_with_the_reference_message_and_changes_nothing(
    make_plugin: PluginFactory, store: Store, query: str, auto_refresh: bool, message: str
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    meta = flint_index(store, auto_refresh=auto_refresh)
    job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING if auto_refresh else F.ACTIVE, job_id="job-s")

    _, reply = run(plugin, query)

    assert reply == {"status": "FAILED", "error": message}
    assert launcher.cancelled == []
    assert state_of(store, ds).state == (F.REFRESHING if auto_refresh else F.ACTIVE)
    assert flint_metas(store.admin, INDEX)[INDEX] == meta


def test_an_alter_ends_in_bounded_time_even_when_neither_job_nor_launcher_answers(
    make_plugin: PluginFactory, store: Store
) -> None:
    """The job is told twice (its index moved, then its session ended), so the operation goes on
    and the job stops itself whenever it can reach the index again."""

    class RefusingLauncher(RecordingLauncher):
        def cancel(self, job_id: str) -> None:
            from query_core.errors import LauncherError

            raise LauncherError(f"job {job_id} cannot be cancelled now")

    plugin = make_plugin(RefusingLauncher(), stream_stop_timeout_s=0.5)
    ds = plugin.datasources.all()[0].name
    flint_index(store, auto_refresh=True)
    session_id = job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")

    with StandInStream(store, ds, session_id, latest_id(INDEX), responsive=False):
        _, reply = run(plugin, ALTER)

    assert reply == EMPTY_SUCCESS
    assert state_of(store, ds).state == F.ACTIVE
    assert flint_metas(store.admin, INDEX)[INDEX]["options"]["auto_refresh"] == "false"
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD
    assert session.doc.error.endswith("(the cancel failed: job job-s cannot be cancelled now)")


def test_an_alter_whose_batch_refresh_cannot_be_stopped_rolls_back(
    make_plugin: PluginFactory, store: Store
) -> None:
    """A job of another kind holding the index (no stop protocol) is stopped by its launcher:
    when that fails, the operation rolls back."""

    class RefusingLauncher(RecordingLauncher):
        def cancel(self, job_id: str) -> None:
            from query_core.errors import LauncherError

            raise LauncherError(f"job {job_id} cannot be cancelled now")

    plugin = make_plugin(RefusingLauncher())
    ds = plugin.datasources.all()[0].name
    meta = flint_index(store, auto_refresh=True)
    job_session(store, ds, "job-s", SessionType.BATCH, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")

    _, reply = run(plugin, ALTER)

    assert reply == {"status": "FAILED", "error": "job job-s cannot be cancelled now"}
    state = state_of(store, ds)
    assert state.state == F.REFRESHING and state.error == "job job-s cannot be cancelled now"
    assert flint_metas(store.admin, INDEX)[INDEX] == meta


# -- DELETE and the service's end --------------------------------------------------------------------


def test_delete_of_index_dml_is_a_400(client: httpx.Client, plugin: Plugin, ds_name: str) -> None:
    resp = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "DROP SKIPPING INDEX ON nope"})
    assert resp.status_code == 201 and set(resp.json()) == {"queryId"}
    query_id = resp.json()["queryId"]
    deleted = client.delete(f"{BASE}/{query_id}")
    assert deleted.status_code == 400
    assert deleted.json()["error"]["details"] == "can't cancel index DML query"
    wait_for(lambda: client.get(f"{BASE}/{query_id}").json()["status"] == "FAILED", what="the DROP to fail")


def test_a_query_submitted_while_the_service_closes_still_ends(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    plugin.close()
    query_id = plugin.service.submit(SubmitRequest(ds, "sql", DROP)).query_id
    statement = store.statements.get(ds, query_id)
    assert statement is not None and statement.doc.state == StatementState.FAILED
    assert "stopped before the index DML query could run" in statement.doc.error
    ended_local_session(store, ds, query_id)


def test_a_full_index_dml_queue_refuses_with_a_429_and_writes_nothing(
    make_plugin: PluginFactory, store: Store
) -> None:
    """One thread, a queue of two: a DROP waiting on its stream holds the thread, a second waits for
    it, a third is refused in the error shape with nothing written; once they end, the queue takes
    work again."""
    plugin = make_plugin(index_dml_workers=1, index_dml_queue=2, stream_stop_timeout_s=60)
    ds = plugin.datasources.all()[0].name
    flint_index(store, auto_refresh=True)
    session_id = job_session(store, ds, "job-s", SessionType.STREAMING, SessionState.RUNNING)
    index_at(store, ds, F.REFRESHING, job_id="job-s")
    body = {"datasource": ds, "lang": "sql", "query": DROP}

    def documents() -> list[str]:
        store.index.refresh(request_index(ds))  # a scan sees the index as of its last refresh
        return sorted(doc_id for doc_id, _ in store.admin.scan(request_index(ds)))

    with (
        StandInStream(store, ds, session_id, latest_id(INDEX), responsive=False) as job,
        serve_http(create_app(plugin)) as url,
        httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http,
    ):
        first = http.post(BASE, json=body)
        assert first.status_code == 201
        wait_for(lambda: state_of(store, ds).state == F.DELETING, what="the first DROP to hold the thread")
        second = http.post(BASE, json=body)
        assert second.status_code == 201
        before = documents()

        refused = http.post(BASE, json=body)

        assert refused.status_code == 429
        assert refused.json() == {
            "status": 429,
            "error": {
                "type": "ConcurrencyLimitExceededException",
                "reason": "Too Many Requests",
                "details": "too many index DML queries in progress in this plugin process (at most 2); try again later",
            },
        }
        assert documents() == before
        job.responsive = True  # the stream stops: both queries run to their end

        def ended() -> bool:
            replies = [http.get(f"{BASE}/{accepted.json()['queryId']}").json() for accepted in (first, second)]
            return all(reply["status"] in ("SUCCESS", "FAILED") for reply in replies)

        wait_for(ended, what="both DROPs to end")
        assert http.post(BASE, json=body).status_code == 201  # room again


# -- housekeeping: stalled DML -----------------------------------------------------------------------


def dml_left_by_a_stopped_plugin(store: Store, ds: str, age_ms: int) -> tuple[str, str]:
    """A local session and its statement, as a plugin that stopped mid-DROP left them."""
    session_id, query_id = new_id(ds), new_id(ds)
    seed(store,
        SessionDoc(
            session_id=session_id,
            session_type=SessionType.LOCAL,
            data_source_name=ds,
            state=SessionState.RUNNING,
            last_update_time=now_millis() - age_ms,
            pending_statement_ids=[query_id],
        )
    )
    statement = seed(store,
        StatementDoc(statement_id=query_id, query_id=query_id, session_id=session_id, query=DROP, data_source_name=ds)
    )
    store.statements.start(statement)
    return session_id, query_id


def test_the_sweep_ends_index_dml_left_unfinished_past_its_timeout(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.UNKNOWN)
    plugin = make_plugin(launcher, index_dml_timeout_s=60)
    ds = plugin.datasources.all()[0].name
    old_session, old_query = dml_left_by_a_stopped_plugin(store, ds, age_ms=120_000)
    new_session, new_query = dml_left_by_a_stopped_plugin(store, ds, age_ms=10_000)
    store.index.refresh("*")  # what follows finds them by a search
    assert len(store.sessions.find(ds, [SessionState.RUNNING])) == 2

    plugin.housekeeper.run_once()

    old = store.statements.get(ds, old_query)
    assert old is not None and old.doc.state == StatementState.FAILED
    assert "Index DML query did not finish within 60 s" in old.doc.error
    assert json.loads(plugin.service.get(old_query))["status"] == "FAILED"
    session = store.sessions.get(ds, old_session)
    assert session is not None and session.doc.state == SessionState.DEAD
    # Within its timeout, a DML query is left to the process running it; no launcher is asked.
    fresh = store.statements.get(ds, new_query)
    assert fresh is not None and fresh.doc.state == StatementState.RUNNING
    still = store.sessions.get(ds, new_session)
    assert still is not None and still.doc.state == SessionState.RUNNING
    assert launcher.described == []


# -- housekeeping: indexes left mid-operation --------------------------------------------------------


def names(count: int) -> list[str]:
    return [f"flint_local_default_t{i}_skipping_index" for i in range(count)]


def test_the_sweep_repairs_indexes_whose_owner_is_gone_and_only_those(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.RUNNING)
    plugin = make_plugin(launcher, index_op_stall_s=60)
    ds = plugin.datasources.all()[0].name
    idx = names(9)
    job_session(store, ds, "batch-dead", SessionType.BATCH, SessionState.DEAD)
    job_session(store, ds, "stream-failed", SessionType.STREAMING, SessionState.FAIL)
    job_session(store, ds, "stream-live", SessionType.STREAMING, SessionState.RUNNING)
    job_session(store, ds, "batch-stale", SessionType.BATCH, SessionState.RUNNING, age_ms=DAY_MS)
    cases = {
        idx[0]: (F.REFRESHING, "batch-dead", 0, F.ACTIVE),  # a REFRESH whose job ended
        idx[1]: (F.REFRESHING, "stream-failed", 0, F.FAILED),  # a stream that died
        idx[2]: (F.REFRESHING, "stream-live", 0, F.REFRESHING),  # a live stream: its stable state
        idx[3]: (F.CREATING, "batch-stale", 0, F.CREATING),  # stale, but the launcher says running
        idx[4]: (F.DELETING, "", 120_000, F.DELETED),  # no owner, stalled long enough
        idx[5]: (F.DELETING, "", 10_000, F.DELETING),  # no owner, not yet
        idx[6]: (F.VACUUMING, "unknown-job", 120_000, F.VACUUMING),  # no session known; the launcher: running
        idx[7]: (F.CANCELLING, "batch-dead", 0, F.ACTIVE),
        idx[8]: (F.ACTIVE, "batch-dead", 120_000, F.ACTIVE),  # stable: never touched
    }
    for index, (state, job, age, _) in cases.items():
        index_at(store, ds, state, job_id=job, age_ms=age, index=index)
    store.index.refresh("*")  # what follows finds them by a search
    assert len(store.index_states.find(ds)) == len(cases)

    plugin.housekeeper.run_once()

    assert {index: state_of(store, ds, index).state for index in cases} == {
        index: expected for index, (_, _, _, expected) in cases.items()
    }
    assert "job batch-dead (batch session" in state_of(store, ds, idx[0]).error
    assert "ended dead" in state_of(store, ds, idx[0]).error
    assert "stream stopped: source gone" in state_of(store, ds, idx[1]).error
    assert re.search(r"no job owns it, and it was left unchanged for 12\d s", state_of(store, ds, idx[4]).error)
    assert all(state_of(store, ds, idx[i]).error == "" for i in (2, 3, 5, 6, 8))
    assert plugin.housekeeper.stalled_indexes.repaired == 4
    assert sorted(launcher.described) == ["batch-stale", "unknown-job"]


def test_an_index_whose_job_has_no_session_is_repaired_once_the_launcher_says_it_ended(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.CANCELLED)
    plugin = make_plugin(launcher, index_op_stall_s=60)
    ds = plugin.datasources.all()[0].name
    recent, stalled = names(2)
    index_at(store, ds, F.REFRESHING, job_id="foreign-1", age_ms=10_000, index=recent)
    index_at(store, ds, F.REFRESHING, job_id="foreign-2", age_ms=120_000, index=stalled)
    store.index.refresh("*")  # what follows finds them by a search
    assert len(store.index_states.find(ds)) == 2

    plugin.housekeeper.run_once()

    assert state_of(store, ds, recent).state == F.REFRESHING
    repaired = state_of(store, ds, stalled)
    assert repaired.state == F.ACTIVE
    assert repaired.error.endswith("job foreign-2, of which no session is known, is cancelled")
    assert launcher.described == ["foreign-2"]  # the recent one is not even asked about


def test_an_index_whose_stale_owner_is_confirmed_dead_is_repaired(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.FAILED)
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    session_id = job_session(store, ds, "job-1", SessionType.BATCH, SessionState.RUNNING, age_ms=DAY_MS)
    index_at(store, ds, F.CREATING, job_id="job-1")
    store.index.refresh("*")  # what follows finds them by a search
    assert store.index_states.find(ds)

    plugin.housekeeper.run_once()

    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD
    state = state_of(store, ds)
    assert state.state == F.EMPTY and "job job-1" in state.error and "ended dead" in state.error
