"""Batch queries (manual CREATE, REFRESH, VACUUM) on the plugin's side, against a real index server:
the documents and the job's conf a POST writes, the limit of refreshing jobs, GET from documents,
DELETE stopping the job and returning a refreshing index to active. The job is played by the test
(a RecordingLauncher starts nothing), following the contract the real job implements."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from async_query.api import BASE
from async_query.launcher.base import MAX_QUERY_IN_CONF, JobRunState, job_conf
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.errors import IndexUnavailableError, InvalidTransitionError, TooManyRequestsError
from query_core.flint import latest_id
from query_core.ids import new_id
from query_core.models import (
    ColumnSchema,
    FlintIndexStateDoc,
    LosslessResult,
    ResultDoc,
    RunningStatement,
    SessionDoc,
    now_millis,
)
from query_core.states import FlintIndexState, SessionState, SessionType, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, job_beats, seed

REFRESH = "REFRESH SKIPPING INDEX ON local.default.http_logs"
INDEX = "flint_local_default_http_logs_skipping_index"


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin()


def submit(plugin: Plugin, query: str = REFRESH) -> tuple[str, str]:
    ds = plugin.datasources.all()[0].name
    done = plugin.service.submit(SubmitRequest(ds, "sql", query))
    return done.query_id, done.session_id


def status(plugin: Plugin, query_id: str) -> dict[str, object]:
    return dict(json.loads(plugin.service.get(query_id)))


def job_runs(store: Store, ds: str, session_id: str, query_id: str, age_ms: int = 0) -> None:
    """What the job does first: claim the session, start the statement, heart-beat it."""
    session = store.sessions.get(ds, session_id)
    statement = store.statements.get(ds, query_id)
    assert session is not None and statement is not None
    job_beats(
        store,
        session,
        age_ms,
        heartbeat_interval_millis=1_000,
        running_statements=[RunningStatement(query_id=query_id, start_time=now_millis())],
    )
    store.statements.start(statement)


def job_refreshes(store: Store, ds: str, job_id: str, index: str = INDEX) -> None:
    """The job's REFRESH transaction, mid-way: the index is refreshing, owned by the job."""
    seed(store,
        FlintIndexStateDoc(
            latest_id=latest_id(index),
            data_source_name=ds,
            index_name=index,
            state=FlintIndexState.REFRESHING,
            job_id=job_id,
            application_id="test-app",
        )
    )


def index_state(store: Store, ds: str, index: str = INDEX) -> FlintIndexStateDoc:
    found = store.index_states.get(ds, latest_id(index))
    assert found is not None
    return found.doc


# -- POST -------------------------------------------------------------------------------------------


def test_post_writes_the_statement_and_session_and_launches_a_batch_job(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin)

    assert len(launcher.started) == 1
    request = launcher.started[0]
    assert request.session_type == SessionType.BATCH and request.session_id == session_id
    assert request.conf["spark.flint.job.type"] == "batch"
    assert request.conf["spark.flint.job.sessionId"] == session_id
    assert request.conf["spark.flint.job.queryId"] == query_id
    assert request.conf["spark.flint.job.query"] == REFRESH

    statement = store.statements.get(ds, query_id)
    assert statement is not None
    assert (statement.doc.state, statement.doc.session_id, statement.doc.query) == (
        StatementState.WAITING,
        session_id,
        REFRESH,
    )
    assert (statement.doc.job_id, statement.doc.application_id) == ("job-1", "test-app")
    session = store.sessions.get(ds, session_id)
    assert session is not None
    assert session.doc.session_type == SessionType.BATCH and session.doc.state == SessionState.NOT_STARTED
    assert (session.doc.job_id, session.doc.application_id) == ("job-1", "test-app")
    assert session.doc.pending_statement_ids == [query_id]
    assert status(plugin, query_id) == {"status": "WAITING"}


def test_the_reply_has_no_session_id(client: httpx.Client, ds_name: str, launcher: RecordingLauncher) -> None:
    resp = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": REFRESH})
    assert resp.status_code == 201, resp.text
    assert set(resp.json()) == {"queryId"}
    assert client.get(f"{BASE}/{resp.json()['queryId']}").json() == {"status": "WAITING"}


def test_every_batch_query_gets_a_job_of_its_own(make_plugin: PluginFactory) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    sessions = {submit(plugin, q)[1] for q in (REFRESH, "VACUUM SKIPPING INDEX ON t", "CREATE INDEX i ON t (a)")}
    assert len(sessions) == 3
    assert {r.session_id for r in launcher.started} == sessions
    assert {r.session_type for r in launcher.started} == {SessionType.BATCH}


def test_a_query_too_long_for_a_command_line_is_left_to_the_statement_document(
    opensearch_config: OpenSearchConfig, make_plugin: PluginFactory
) -> None:
    ds = make_plugin().datasources.all()[0]
    long_query = "REFRESH MATERIALIZED VIEW mv -- " + "x" * MAX_QUERY_IN_CONF
    conf, _ = job_conf(Settings(), ds, opensearch_config, "sid", SessionType.BATCH, query_id="qid", query=long_query)
    assert conf["spark.flint.job.queryId"] == "qid" and "spark.flint.job.query" not in conf
    conf, _ = job_conf(Settings(), ds, opensearch_config, "sid", SessionType.INTERACTIVE)
    assert "spark.flint.job.queryId" not in conf and "spark.flint.job.query" not in conf


def test_a_failed_session_write_stops_the_job_and_fails_the_statement(
    make_plugin: PluginFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name

    def refuse(doc: SessionDoc, **_: object) -> None:
        raise IndexUnavailableError("index down")

    monkeypatch.setattr(store.sessions, "create", refuse)
    with pytest.raises(IndexUnavailableError):
        submit(plugin)
    assert launcher.cancelled == ["job-1"]
    statement_id = launcher.started[0].conf["spark.flint.job.queryId"]
    statement = store.statements.get(ds, statement_id)
    assert statement is not None and statement.doc.state == StatementState.FAILED
    assert "could not be recorded: index down" in statement.doc.error


# -- the limit of refreshing jobs ------------------------------------------------------------------


def live_sessions(store: Store, ds: str, count: int) -> bool:
    return len(store.sessions.find(ds, [SessionState.NOT_STARTED, SessionState.RUNNING])) == count


def test_the_limit_of_refreshing_jobs_counts_live_batch_and_streaming_sessions(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, max_refreshing_jobs=2)
    ds = plugin.datasources.all()[0].name
    _, first = submit(plugin)
    store.sessions.create(SessionDoc(session_id=new_id(ds), data_source_name=ds, session_type=SessionType.STREAMING))
    store.sessions.create(SessionDoc(session_id=new_id(ds), data_source_name=ds))  # interactive: not counted
    store.index.refresh("*")  # what follows finds them by a search
    assert live_sessions(store, ds, 3)

    with pytest.raises(TooManyRequestsError, match=r"^domain concurrent refresh job can not exceed 2$"):
        submit(plugin)
    assert len(launcher.started) == 1  # refused before anything was launched

    ended = store.sessions.get(ds, first)
    assert ended is not None
    store.sessions.end(ended, SessionState.DEAD)
    store.index.refresh("*")  # what follows finds them by a search
    assert live_sessions(store, ds, 2)
    submit(plugin)
    assert len(launcher.started) == 2


def test_the_limit_is_a_429_in_the_reference_shape(
    client: httpx.Client, plugin: Plugin, store: Store, ds_name: str
) -> None:
    for _ in range(plugin.settings.max_refreshing_jobs):
        assert client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": REFRESH}).status_code == 201
    store.index.refresh("*")  # what follows finds them by a search
    assert live_sessions(store, ds_name, 5)
    resp = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": REFRESH})
    assert resp.status_code == 429
    assert resp.json()["error"]["reason"] == "Too Many Requests"
    assert resp.json()["error"]["details"] == "domain concurrent refresh job can not exceed 5"
    # Interactive queries have their own limit.
    assert client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT 1"}).status_code == 201


# -- GET ---------------------------------------------------------------------------------------------


def test_get_reads_documents_only_while_the_heartbeat_is_fresh(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0]
    query_id, session_id = submit(plugin)
    job_runs(store, ds.name, session_id, query_id)
    for _ in range(50):
        assert status(plugin, query_id)["status"] == "RUNNING"

    # The job writes the result, then the terminal state, then ends its session.
    result = ResultDoc(
        query_id=query_id,
        status="SUCCESS",
        job_type="batch",
        lossless=LosslessResult(schema=[ColumnSchema(name="n", type="long")], datarows="[[7]]", total=1),
    )
    statement = store.statements.get(ds.name, query_id)
    assert statement is not None
    store.statements.settle(statement, StatementState.SUCCESS, result=(ds.results, result))
    session = store.sessions.get(ds.name, session_id)
    assert session is not None
    store.sessions.end(session, SessionState.DEAD)
    for _ in range(50):
        assert status(plugin, query_id) == {
            "status": "SUCCESS",
            "schema": [{"name": "n", "type": "long"}],
            "datarows": [[7]],
            "total": 1,
            "size": 1,
        }
    assert launcher.described == []


def test_a_batch_job_that_died_fails_its_statement_on_get(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher(state=JobRunState.FAILED)
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin)
    job_runs(store, ds, session_id, query_id, age_ms=60_000)  # its last heartbeat, long ago
    reply = status(plugin, query_id)
    assert reply["status"] == "FAILED" and "Session ended before the statement finished" in str(reply["error"])
    assert launcher.described == ["job-1"]
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD


# -- DELETE ------------------------------------------------------------------------------------------


def test_delete_cancels_the_statement_stops_the_job_and_returns_the_index_to_active(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin)
    other_query, other_session = submit(plugin, "REFRESH INDEX idx ON local.default.other")
    job_runs(store, ds, session_id, query_id)
    job_refreshes(store, ds, "job-1")
    other_index = "flint_local_default_other_idx_index"
    job_refreshes(store, ds, "job-2", other_index)  # another job's refresh: untouched
    store.index.refresh("*")  # what follows finds them by a search
    assert len(store.index_states.find(ds, job_id="job-1")) == 1

    plugin.service.cancel(query_id)

    assert status(plugin, query_id) == {"status": "CANCELLED"}
    assert launcher.cancelled == ["job-1"]
    state = index_state(store, ds)
    assert state.state == FlintIndexState.ACTIVE and state.error == ""
    assert index_state(store, ds, other_index).state == FlintIndexState.REFRESHING
    assert plugin.supervisor.pending == 1  # until a heartbeat (or the deadline) shows the job stopped
    assert status(plugin, other_query) == {"status": "WAITING"}
    assert other_session != session_id


@pytest.mark.parametrize(
    ("refreshing_job", "left"),
    [("job-1", FlintIndexState.ACTIVE), ("job-9", FlintIndexState.REFRESHING)],
    ids=["its-own-refresh", "another-jobs-refresh"],
)
def test_delete_reads_the_index_it_names_before_a_search_can_see_its_refresh(
    make_plugin: PluginFactory, store: Store, refreshing_job: str, left: FlintIndexState
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin, "REFRESH SKIPPING INDEX ON http_logs")  # named unqualified
    job_runs(store, ds, session_id, query_id)
    # Just now: no search sees it yet (the node refreshes each second). Its own job's refresh goes
    # back to active; another job's stays as it is.
    job_refreshes(store, ds, refreshing_job)

    plugin.service.cancel(query_id)

    assert launcher.cancelled == ["job-1"]
    state = index_state(store, ds)
    assert state.state == left and state.error == ""


def test_delete_of_a_waiting_batch_query_stops_its_job(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, cancel_deadline_s=0.0)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin)
    plugin.service.cancel(query_id)
    assert launcher.cancelled == ["job-1"]
    assert status(plugin, query_id) == {"status": "CANCELLED"}
    # No heartbeat ever shows the job stopped: past the deadline the supervisor ends the session.
    plugin.supervisor.run_once()
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD
    assert status(plugin, query_id) == {"status": "CANCELLED"}  # cancelled stays cancelled


def test_delete_of_a_finished_batch_query_is_a_400(
    client: httpx.Client, plugin: Plugin, store: Store, launcher: RecordingLauncher, ds_name: str
) -> None:
    query_id, _ = submit(plugin)
    statement = store.statements.get(ds_name, query_id)
    assert statement is not None
    store.statements.fail(statement, "boom")
    with pytest.raises(InvalidTransitionError, match="it is already failed"):
        plugin.service.cancel(query_id)
    resp = client.delete(f"{BASE}/{query_id}")
    assert resp.status_code == 400
    assert resp.json()["error"]["details"] == f"can't cancel query {query_id}: it is already failed"
    assert launcher.cancelled == []


@dataclass
class HangingLauncher(RecordingLauncher):
    """``cancel`` blocks until the test releases it (an unreachable EMR Serverless endpoint)."""

    release: threading.Event = field(default_factory=threading.Event)

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.release.wait(30)


def test_delete_is_bounded_when_the_launcher_hangs(make_plugin: PluginFactory, store: Store) -> None:
    """DELETE returns, the supervisor ends the session past the deadline, and the sweep then
    returns the index the job was refreshing to active, although the launcher never answers."""
    launcher = HangingLauncher()
    plugin = make_plugin(launcher, stop_job_timeout_s=0.3, cancel_deadline_s=0.0)
    ds = plugin.datasources.all()[0].name
    query_id, session_id = submit(plugin)
    job_runs(store, ds, session_id, query_id)
    job_refreshes(store, ds, "job-1")
    store.index.refresh("*")  # what follows finds them by a search
    assert len(store.index_states.find(ds, job_id="job-1")) == 1
    try:
        began = time.monotonic()
        plugin.service.cancel(query_id)
        assert time.monotonic() - began < 5
        assert launcher.cancelled == ["job-1"]  # asked once, for the index and the job alike
        assert status(plugin, query_id) == {"status": "CANCELLED"}
        # The stop was not confirmed: the cancel of the refresh rolled back, with why.
        state = index_state(store, ds)
        assert state.state == FlintIndexState.REFRESHING
        assert state.error == "stopping job job-1 did not complete within 0.3 s"
        assert plugin.supervisor.pending == 1

        began = time.monotonic()
        plugin.supervisor.run_once()  # past the deadline, no heartbeat since the cancel
        assert time.monotonic() - began < 5
        assert plugin.supervisor.pending == 0 and launcher.cancelled == ["job-1", "job-1"]
        session = store.sessions.get(ds, session_id)
        assert session is not None and session.doc.state == SessionState.DEAD
        store.index.refresh("*")  # what follows finds them by a search
        assert store.sessions.find(ds, [SessionState.DEAD], job_id="job-1")

        plugin.housekeeper.run_once()
        state = index_state(store, ds)
        assert state.state == FlintIndexState.ACTIVE
        assert "job job-1 (batch session" in state.error and "ended dead" in state.error
    finally:
        launcher.release.set()
