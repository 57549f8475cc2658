"""The batch and streaming runners, and the choice of runner by job type, without Spark.

As in ``test_job_loop``, the executor is a stand-in for this product's own ``SparkExecutor``;
the index is the test process's OpenSearch node (tests/node.py).
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from flint_repl_job import runners
from flint_repl_job.config import JobConfig
from flint_repl_job.executor import QueryOutput, RunningQuery
from flint_repl_job.runners import RUNNERS, BatchJob, InteractiveJob, StreamingJob, main, runner_for
from flint_repl_job.runners.base import SessionRunner
from flint_repl_job.runners.streaming import NOT_SUPPORTED
from query_core.ids import RESULT_INDEX_PREFIX, default_result_index, new_id, request_index
from query_core.jobconf import JobConf, render_conf
from query_core.models import SessionDoc, StatementDoc
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import MemoryIndex, Store, Version
from tests.support import wait_for
from tests.unit.test_job_loop import JOB_ID, StubExecutor, job_config, source
from tests.unit.test_job_loop import seed as loop_seed


class FailingExecutor(StubExecutor):
    """Statements fail at once with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery:
        self.started.append(query_id)
        future: Future[QueryOutput] = Future()
        future.set_exception(self.error)
        return RunningQuery(query_id, future)


class RecordingIndex(MemoryIndex):
    """The in-memory index, noting the order of result writes and statement moves."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        if index.startswith(RESULT_INDEX_PREFIX):
            self.events.append(f"result {source['status']}")
        return super().put(index, doc_id, source)

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        current = self.get(index, doc_id)
        written = super().update_if(index, doc_id, partial, version)
        if current is not None and current.source.get("type") == "statement":
            self.events.append(f"statement {partial['state']}")
        return written


class RecordingStore(Store):
    def __init__(self) -> None:
        self.recording = RecordingIndex()
        super().__init__(self.recording)

    @property
    def events(self) -> list[str]:
        return self.recording.events


@pytest.fixture
def recording_store() -> RecordingStore:
    return RecordingStore()


def seed(
    store: Store, ds: str, session_type: SessionType, with_statement: bool = True
) -> tuple[SessionDoc, StatementDoc]:
    """A session and its one statement as the plugin writes them before launching a batch or
    streaming job (the statement only when ``with_statement``)."""
    index = request_index(ds)
    session_id, query_id = new_id(ds), new_id(ds)
    statement = StatementDoc(
        statement_id=query_id, query_id=query_id, session_id=session_id, query="SELECT 1", data_source_name=ds
    )
    session = SessionDoc(session_id=session_id, data_source_name=ds, job_id=JOB_ID, session_type=session_type)
    store.index.create(index, session_id, session.to_source())
    if with_statement:
        store.index.create(index, query_id, statement.to_source())
    return session, statement


def config(ds: str, session: SessionDoc, statement: StatementDoc, job_type: SessionType, **fields: Any) -> JobConfig:
    return job_config(ds, session.session_id, job_type=job_type, query_id=statement.query_id, **fields)


# -- batch ------------------------------------------------------------------------------------


def test_batch_runs_its_statement_to_success(recording_store: RecordingStore, ds_name: str) -> None:
    store = recording_store
    session, statement = seed(store, ds_name, SessionType.BATCH)
    executor = StubExecutor()
    job = BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, executor)

    assert job.run() == SessionState.DEAD
    assert executor.started == [statement.query_id]
    index = request_index(ds_name)
    assert source(store, index, statement.statement_id)["state"] == StatementState.SUCCESS.value
    result = store.results.get(default_result_index(ds_name), statement.query_id)
    assert result is not None and result.status == "SUCCESS" and result.job_type == "batch"
    assert result.result == ["{'x':1}"]
    # The result document is written before the statement's terminal state.
    assert store.events == ["statement running", "result SUCCESS", "statement success"]
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.DEAD.value and ended["error"] == "" and ended["jobId"] == JOB_ID


def test_a_failed_batch_statement_fails_the_session_with_its_error(
    recording_store: RecordingStore, ds_name: str
) -> None:
    store = recording_store
    session, statement = seed(store, ds_name, SessionType.BATCH)
    job = BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, FailingExecutor(RuntimeError("boom")))

    assert job.run() == SessionState.FAIL
    index = request_index(ds_name)
    failed = source(store, index, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value and "boom" in failed["error"]
    result = store.results.get(default_result_index(ds_name), statement.query_id)
    assert result is not None and result.status == "FAILED" and "boom" in result.error
    assert store.events == ["statement running", "result FAILED", "statement failed"]
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.FAIL.value and ended["error"] == failed["error"]


# -- interactive: a driver out of reach --------------------------------------------------------


def interactive_job(store: Store, ds: str, executor: StubExecutor) -> tuple[InteractiveJob, StatementDoc]:
    """An interactive job on a session that has one waiting statement."""
    session, statement = loop_seed(store, ds)
    return InteractiveJob(job_config(ds, session.session_id), store, executor), statement


def test_a_statement_that_finds_the_spark_driver_gone_ends_the_session_failed(store: Store, ds_name: str) -> None:
    """py4j's connection refused: the job's JVM is gone, and every later statement would fail the
    same way; the session ends (the next query of its user gets a new one)."""
    refused = ConnectionRefusedError(111, "Connection refused")
    job, statement = interactive_job(store, ds_name, FailingExecutor(refused))
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(state=job.run()), daemon=True)
    thread.start()
    thread.join(timeout=30)
    job.stop_event.set()  # a job that went on would otherwise wait for statements until its timeout
    thread.join(timeout=30)

    assert outcome.get("state") == SessionState.FAIL
    index = request_index(ds_name)
    failed = source(store, index, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value
    assert failed["error"] == "Fail to run query. Cause: [Errno 111] Connection refused"
    ended = source(store, index, job.cfg.session_id)
    assert ended["state"] == SessionState.FAIL.value
    assert ended["error"] == "Session failed: the job cannot reach its Spark driver: [Errno 111] Connection refused"


def test_a_statement_that_fails_otherwise_leaves_the_session_running(store: Store, ds_name: str) -> None:
    job, statement = interactive_job(store, ds_name, FailingExecutor(RuntimeError("boom")))
    job.wait_for_session()
    job.claim()

    assert job.run_once()
    index = request_index(ds_name)
    assert source(store, index, statement.statement_id)["state"] == StatementState.FAILED.value
    assert not job.stop_event.is_set()
    assert source(store, index, job.cfg.session_id)["state"] == SessionState.RUNNING.value


def test_a_batch_statement_cancelled_while_running_stops_and_stays_cancelled(store: Store, ds_name: str) -> None:
    session, statement = seed(store, ds_name, SessionType.BATCH)
    executor = StubExecutor(finish=False)
    job = BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, executor)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(value=job.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: executor.started, timeout=10, what="the statement to start")
        current = store.statements.get(ds_name, statement.statement_id)
        assert current is not None
        store.statements.cancel(current)  # the plugin's DELETE
        thread.join(timeout=15)
        assert not thread.is_alive(), "the batch job did not stop after its statement was cancelled"
    finally:
        job.stop_event.set()
        thread.join(timeout=15)

    assert job.running is None
    assert outcome == {"value": SessionState.DEAD}
    index = request_index(ds_name)
    assert source(store, index, statement.statement_id)["state"] == StatementState.CANCELLED.value
    assert store.results.get(default_result_index(ds_name), statement.query_id) is None
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.DEAD.value and ended["runningStatements"] == []


def test_a_batch_statement_cancelled_before_the_job_starts_is_not_run(store: Store, ds_name: str) -> None:
    session, statement = seed(store, ds_name, SessionType.BATCH)
    current = store.statements.get(ds_name, statement.statement_id)
    assert current is not None
    store.statements.cancel(current)
    executor = StubExecutor()

    assert BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, executor).run() == SessionState.DEAD
    assert executor.started == []
    assert source(store, request_index(ds_name), statement.statement_id)["state"] == StatementState.CANCELLED.value


def test_batch_falls_back_to_the_query_conf_without_a_statement_document(
    recording_store: RecordingStore, ds_name: str
) -> None:
    store = recording_store
    session, statement = seed(store, ds_name, SessionType.BATCH, with_statement=False)
    executor = StubExecutor()
    cfg = config(ds_name, session, statement, SessionType.BATCH, query="SELECT 2")
    job = BatchJob(cfg, store, executor)

    assert job.run() == SessionState.DEAD
    assert executor.started == [statement.query_id]
    result = store.results.get(default_result_index(ds_name), statement.query_id)
    assert result is not None and result.status == "SUCCESS" and result.query_text == "SELECT 2"
    assert store.events == ["result SUCCESS"]  # the result only: no statement document appears
    assert store.index.get(request_index(ds_name), statement.statement_id) is None
    assert source(store, request_index(ds_name), session.session_id)["state"] == SessionState.DEAD.value


def test_batch_without_a_statement_or_a_query_fails_the_session(store: Store, ds_name: str) -> None:
    session, statement = seed(store, ds_name, SessionType.BATCH, with_statement=False)
    executor = StubExecutor()
    job = BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, executor)

    assert job.run() == SessionState.FAIL
    assert executor.started == []
    ended = source(store, request_index(ds_name), session.session_id)
    assert ended["state"] == SessionState.FAIL.value
    assert statement.query_id in ended["error"] and "spark.flint.job.query" in ended["error"]


def test_batch_heartbeats_while_its_statement_runs(store: Store, ds_name: str) -> None:
    session, statement = seed(store, ds_name, SessionType.BATCH)
    executor = StubExecutor(finish=False)
    job = BatchJob(config(ds_name, session, statement, SessionType.BATCH), store, executor)
    thread = threading.Thread(target=job.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: job.heartbeat.writes >= 2, timeout=10, what="two heartbeats")
        beat = source(store, request_index(ds_name), session.session_id)
        assert [r["queryId"] for r in beat["runningStatements"]] == [statement.query_id]
    finally:
        job.stop_event.set()
        thread.join(timeout=15)
    failed = source(store, request_index(ds_name), statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value
    assert failed["error"].startswith("Session ended while the statement was running")


# -- streaming --------------------------------------------------------------------------------


def test_a_streaming_job_given_a_statement_that_is_no_auto_refresh_fails_it_clearly(
    recording_store: RecordingStore, ds_name: str
) -> None:
    """A streaming job runs CREATE/ALTER with auto refresh and RECOVER only: anything else (here
    ``SELECT 1``) is failed at once, result first, without running, and the session ends ``fail``."""
    store = recording_store
    session, statement = seed(store, ds_name, SessionType.STREAMING)
    executor = StubExecutor()
    job = StreamingJob(config(ds_name, session, statement, SessionType.STREAMING), store, executor)

    assert job.run() == SessionState.FAIL
    assert executor.started == []
    index = request_index(ds_name)
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.FAIL.value and NOT_SUPPORTED in ended["error"]
    failed = source(store, index, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value and NOT_SUPPORTED in failed["error"]
    assert store.events == ["result FAILED", "statement failed"]


# -- choosing the runner ----------------------------------------------------------------------


def test_each_job_type_has_its_runner() -> None:
    assert runner_for(SessionType.INTERACTIVE) is InteractiveJob
    assert runner_for("batch") is BatchJob
    assert runner_for(SessionType.STREAMING) is StreamingJob
    assert runner_for(SessionType.LOCAL) is None  # the plugin's own: no job runs it
    assert runner_for("nonsense") is None
    assert all(issubclass(r, SessionRunner) for r in RUNNERS.values())


class FakeSpark:
    """Just what ``main()`` touches of a Spark session before its runner takes over."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self.stopped = False
        self.sparkContext = self
        self.made: dict[str, str] | None = None

    def getConf(self) -> FakeSpark:  # noqa: N802 - PySpark's name
        return self

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.conf.get(key, default)

    def stop(self) -> None:
        self.stopped = True


class RecordingRunner(SessionRunner):
    built: list[tuple[JobConfig, threading.Event]] = []

    def __init__(self, cfg: JobConfig, store: Store, executor: Any, stop_event: threading.Event | None = None):
        RecordingRunner.built.append((cfg, stop_event or threading.Event()))

    def run(self) -> SessionState | None:
        return SessionState.DEAD

    def work(self) -> tuple[SessionState, str]:
        raise AssertionError("not called")


@pytest.fixture
def fake_spark(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``main()`` with a fake Spark session (the settings it is made with in ``made``); the process
    settings it changes restored."""
    spark = FakeSpark({})

    def session(options: dict[str, str]) -> FakeSpark:
        spark.made = options
        return spark

    monkeypatch.setattr(runners, "jvm_session", session)
    monkeypatch.setenv("TZ", "UTC")
    handler = signal.getsignal(signal.SIGTERM)
    yield spark
    signal.signal(signal.SIGTERM, handler)
    time.tzset()


def conf_for(job_type: SessionType) -> dict[str, str]:
    return dict(render_conf(JobConf(session_id="s-1", datasource="local", job_type=job_type)))


@pytest.mark.parametrize("job_type", [SessionType.INTERACTIVE, SessionType.BATCH, SessionType.STREAMING])
def test_main_runs_the_runner_of_the_job_type(
    fake_spark: FakeSpark, monkeypatch: pytest.MonkeyPatch, job_type: SessionType
) -> None:
    fake_spark.conf = conf_for(job_type)
    RecordingRunner.built = []
    monkeypatch.setitem(RUNNERS, job_type, RecordingRunner)

    assert main(["result_index"]) == 0
    assert fake_spark.made == {"spark.sql.session.timeZone": "UTC", "spark.sql.python.filterPushdown.enabled": "true"}
    [(cfg, stop)] = RecordingRunner.built
    assert cfg.job_type == job_type and cfg.session_id == "s-1" and cfg.result_index == "result_index"
    assert fake_spark.stopped
    signal.raise_signal(signal.SIGTERM)  # SIGTERM asks the runner to stop
    assert stop.is_set()


def test_main_refuses_a_job_type_without_a_runner(fake_spark: FakeSpark, caplog: pytest.LogCaptureFixture) -> None:
    fake_spark.conf = conf_for(SessionType.LOCAL)

    assert main(["result_index"]) != 0
    assert fake_spark.stopped
    assert "no runner for job type 'local'" in caplog.text
