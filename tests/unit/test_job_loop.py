"""The interactive job's loop and heartbeat against a real index server, without Spark.

The executor is this product's own class (it runs statements on Spark); a small stand-in with the
same three calls takes its place, so that statements finish, hang or fail to report progress on
demand. The index is the test process's OpenSearch node (tests/node.py), wiped for each test.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import QueryCancelledError, QueryOutput, RunningQuery
from flint_repl_job.runners.interactive import InteractiveJob
from query_core.errors import InvalidRequestError
from query_core.ids import default_result_index, new_id, request_index
from query_core.models import LosslessResult, SessionDoc, StatementDoc, StatementProgress
from query_core.states import SessionState, StatementState
from query_core.store import MemoryIndex, Store, Version
from tests.support import wait_for

JOB_ID = "job-1"


class StubExecutor:
    """Stands in for ``SparkExecutor``: statements finish at once (``finish=True``) or run until
    cancelled; ``progress`` raises ``progress_error`` when one is given (a Py4J error, say)."""

    def __init__(self, finish: bool = True, progress_error: Exception | None = None) -> None:
        self.finish = finish
        self.progress_error = progress_error
        self.started: list[str] = []
        self.progress_calls = 0

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery:
        self.started.append(query_id)
        future: Future[QueryOutput] = Future()
        if self.finish:
            future.set_result(QueryOutput(["{'x':1}"], [], LosslessResult(schema=[], datarows="[[1]]", total=1)))
        return RunningQuery(query_id, future)

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool:
        running.cancelled.set()
        if not running.future.done():
            running.future.set_exception(QueryCancelledError(running.query_id))
        return True

    def progress(self, query_id: str) -> StatementProgress:
        self.progress_calls += 1
        if self.progress_error is not None:
            raise self.progress_error
        return StatementProgress(tasks_total=2, tasks_completed=1)


def job_config(ds: str, session_id: str, index: str | None = None, **fields: Any) -> JobConfig:
    return JobConfig(
        session_id=session_id,
        datasource=ds,
        result_index=default_result_index(ds),
        request_index=index or request_index(ds),
        job_id=JOB_ID,
        application_id="app-1",
        loop_frequency_ms=10,
        heartbeat_running_ms=20,
        heartbeat_idle_ms=50,
        search_interval_ms=50,
        session_wait_ms=1_000,
        **fields,
    )


def seed(store: Store, ds: str, index: str | None = None, signal: bool = True) -> tuple[SessionDoc, StatementDoc]:
    """A session as the plugin writes it before its job starts, and one waiting statement (listed
    in the session's real-time list when ``signal``; the reference plugin writes no such list)."""
    index = index or request_index(ds)
    session_id, query_id = new_id(ds), new_id(ds)
    statement = StatementDoc(
        statement_id=query_id, query_id=query_id, session_id=session_id, query="SELECT 1", data_source_name=ds
    )
    session = SessionDoc(
        session_id=session_id,
        data_source_name=ds,
        job_id=JOB_ID,
        pending_statement_ids=[query_id] if signal else [],
    )
    store.index.create(index, session_id, session.to_source())
    store.index.create(index, query_id, statement.to_source())
    return session, statement


def source(store: Store, index: str, doc_id: str) -> dict[str, Any]:
    found = store.index.get(index, doc_id)
    assert found is not None, f"{index}/{doc_id} is missing"
    return found.source


class RunningJob:
    """``InteractiveJob.run`` in a thread; stopped (and joined) when the test ends."""

    def __init__(self, job: InteractiveJob) -> None:
        self.job = job
        self.done = threading.Event()
        self.outcome: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name="job", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.outcome["value"] = self.job.run()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            self.outcome["error"] = exc
        finally:
            self.done.set()

    def stop(self) -> None:
        self.job.stop_event.set()
        self._thread.join(timeout=30)


@pytest.fixture
def running_jobs() -> Iterator[list[RunningJob]]:
    jobs: list[RunningJob] = []
    yield jobs
    for job in jobs:
        job.stop()


def test_beats_go_on_without_progress_when_progress_fails(
    store: Store, ds_name: str, running_jobs: list[RunningJob]
) -> None:
    """A progress call that raises (Py4J lost the JVM side, say) must not end the heartbeat: the
    session keeps beating, and reports the running statement without progress."""
    session, statement = seed(store, ds_name)
    executor = StubExecutor(finish=False, progress_error=RuntimeError("py4j: Answer from Java side is empty"))
    job = InteractiveJob(job_config(ds_name, session.session_id), store, executor)
    running_jobs.append(RunningJob(job))
    index = request_index(ds_name)

    wait_for(lambda: executor.started, timeout=10, what="the statement to start")
    first = job.heartbeat.writes
    wait_for(lambda: job.heartbeat.writes >= first + 3, timeout=10, what="three more heartbeats")
    beat = source(store, index, session.session_id)
    assert [r["queryId"] for r in beat["runningStatements"]] == [statement.query_id]
    assert "progress" not in beat["runningStatements"][0]
    assert executor.progress_calls >= 3  # asked at every beat, and failing every time
    assert not job.stop_event.is_set()

    running_jobs[0].stop()
    assert running_jobs[0].outcome == {"value": SessionState.DEAD}  # a stop, not a failure
    assert source(store, index, session.session_id)["error"] == ""


class RefusesRunningStatements(MemoryIndex):
    """An index refusing, for good, any write that reports a running statement (a mapping conflict)."""

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        if partial.get("runningStatements"):
            raise InvalidRequestError("mapper_parsing_exception: failed to parse field [runningStatements]")
        return super().update_if(index, doc_id, partial, version)


def test_a_heartbeat_that_keeps_failing_ends_the_session_with_its_reason(
    ds_name: str, running_jobs: list[RunningJob]
) -> None:
    """Here the index refuses every beat that reports a running statement (a request index whose
    mapping some other version created, say, with ``runningStatements`` a keyword). The job must
    not run on without a heartbeat: it ends the session ``fail`` with the reason."""
    index = request_index(ds_name)
    store = Store(RefusesRunningStatements())
    session, statement = seed(store, ds_name)
    job = InteractiveJob(job_config(ds_name, session.session_id), store, StubExecutor(finish=False))
    running_jobs.append(RunningJob(job))

    assert running_jobs[0].done.wait(timeout=15), "the job ran on although its heartbeat kept failing"
    assert running_jobs[0].outcome == {"value": SessionState.FAIL}
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.FAIL.value
    assert "heartbeat" in ended["error"].lower() and "mapper_parsing_exception" in ended["error"], ended["error"]
    failed = source(store, index, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value
    assert failed["error"].startswith("Session ended while the statement was running: Session failed: heartbeat")


def test_the_job_uses_the_request_index_it_is_given(store: Store, ds_name: str) -> None:
    """``spark.flint.job.requestIndex`` names the request index (the reference plugin may use
    another than the datasource's): the session is claimed and the statement run there. The
    statement is found by search, as a statement of the reference plugin is."""
    index = f".query_execution_request_custom_{ds_name}"
    session, statement = seed(store, ds_name, index=index, signal=False)
    store.index.refresh(index)
    executor = StubExecutor()
    job = InteractiveJob(job_config(ds_name, session.session_id, index=index), store, executor)

    job.wait_for_session()
    job.claim()
    claimed = source(store, index, session.session_id)
    assert claimed["state"] == SessionState.RUNNING.value and claimed["jobId"] == JOB_ID

    assert job.run_once()
    assert executor.started == [statement.query_id]
    done = source(store, index, statement.statement_id)
    assert done["state"] == StatementState.SUCCESS.value
    result = store.results.get(default_result_index(ds_name), statement.query_id)
    assert result is not None and result.status == "SUCCESS"

    job.end_session(SessionState.DEAD)
    assert source(store, index, session.session_id)["state"] == SessionState.DEAD.value
    assert not store.admin.index_exists(request_index(ds_name))  # nothing where the name points


class StuckInAnalysis(StubExecutor):
    """Its first statement never gets past Spark's parser and analyzer (no cancel reaches it);
    later ones finish at once."""

    def __init__(self) -> None:
        super().__init__(finish=True)
        self.abandoned: list[str] = []

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery:
        if self.started:
            return super().start(query_id, sql, lang)
        self.started.append(query_id)
        return RunningQuery(query_id, Future(), prepare_timeout_s=0.05)

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool:
        return False  # a job-group cancel does not reach the parser

    def prepare_overdue(self, running: RunningQuery, elapsed_s: float) -> bool:
        return not running.prepared.is_set() and elapsed_s > running.prepare_timeout_s

    def abandon(self, running: RunningQuery) -> None:
        self.abandoned.append(running.query_id)


def test_a_statement_stuck_in_analysis_fails_alone_and_the_session_goes_on(store: Store, ds_name: str) -> None:
    session, stuck = seed(store, ds_name)
    index = request_index(ds_name)
    executor = StuckInAnalysis()
    job = InteractiveJob(job_config(ds_name, session.session_id), store, executor)
    job.wait_for_session()
    job.claim()

    assert job.run_once()
    failed = source(store, index, stuck.statement_id)
    assert failed["state"] == StatementState.FAILED.value
    assert failed["error"] == "Fail to analyze query. Cause: the statement took longer than 0.05 s to parse and analyze"
    assert executor.abandoned == [stuck.query_id]

    after_id = new_id(ds_name)
    after = StatementDoc(
        statement_id=after_id,
        query_id=after_id,
        session_id=session.session_id,
        query="SELECT 1",
        data_source_name=ds_name,
    )
    store.index.create(index, after.statement_id, after.to_source())
    store.index.refresh(index)
    assert job.run_once()
    assert source(store, index, after.statement_id)["state"] == StatementState.SUCCESS.value
    assert source(store, index, session.session_id)["state"] == SessionState.RUNNING.value


class FakeClock:
    """The loop's clock, moved on by the loop's own waits: a wait returns at once (nothing stops the
    job) and records how long it would have waited."""

    def __init__(self) -> None:
        self.now_ms = 0  # whole milliseconds: the waits add up exactly
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now_ms / 1000

    def event(self) -> threading.Event:
        clock = self

        class Waits(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                assert timeout is not None
                clock.waits.append(round(timeout, 3))
                clock.now_ms += round(timeout * 1000)
                return self.is_set()

        return Waits()


def test_an_idle_session_is_read_every_loop_period_then_every_quiet_period(
    store: Store, ds_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/job.md, "The loop": after ``quiet_loop_after_ms`` with no statement the job reads its
    session less often, until the inactivity limit ends it."""
    session, _ = seed(store, ds_name, signal=False)
    clock = FakeClock()
    monkeypatch.setattr("flint_repl_job.runners.interactive.time.monotonic", clock.monotonic)
    cfg = job_config(
        ds_name,
        session.session_id,
        quiet_loop_after_ms=100,
        quiet_loop_frequency_ms=40,
        inactivity_limit_ms=300,
    )
    job = InteractiveJob(cfg, store, StubExecutor(), stop_event=clock.event())

    job.loop()

    assert clock.waits == [0.01] * 10 + [0.04] * 5


@pytest.mark.parametrize(
    ("quiet_ms", "expected_s"),
    [(0, 0.01), (99, 0.01), (100, 0.04), (60_000, 0.04)],
)
def test_the_loop_period_is_the_quiet_one_once_nothing_new_came_for_long_enough(quiet_ms: int, expected_s: float) -> None:
    cfg = job_config("ds", "sid", quiet_loop_after_ms=100, quiet_loop_frequency_ms=40)
    assert cfg.loop_pause_s(quiet_ms / 1000) == expected_s


def test_the_search_for_waiting_statements_is_stretched_as_the_loop_is() -> None:
    cfg = job_config("ds", "sid", quiet_loop_after_ms=100, quiet_loop_frequency_ms=40)  # 4 x the loop period
    assert (cfg.search_pause_s(0.0), cfg.search_pause_s(1.0)) == (0.05, 0.2)


def test_a_quiet_period_below_the_loop_period_never_speeds_the_loop_up() -> None:
    cfg = job_config("ds", "sid", quiet_loop_after_ms=100, quiet_loop_frequency_ms=1)
    assert cfg.loop_pause_s(10.0) == 0.01
