"""The interactive job: claim the session, heartbeat, find waiting statements, run them.

The loop is explicit and testable: :meth:`InteractiveJob.run_once` handles at most one statement,
:meth:`InteractiveJob.run` loops until the inactivity limit, a stop request, or the loss of the
session (another job owns it, or the plugin ended it). Every wait is on the stop event, so a stop
is noticed at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any, Protocol

from flint_repl_job.config import JobConfig
from flint_repl_job.errors import classify
from flint_repl_job.executor import QueryOutput, RunningQuery, SparkExecutor
from query_core.errors import AsyncQueryError, IndexUnavailableError, InvalidTransitionError, VersionConflictError
from query_core.models import (
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementDoc,
    StatementProgress,
    Versioned,
    now_millis,
)
from query_core.states import SessionState, SessionType, StatementState, is_terminal
from query_core.store import IndexStore, quiet_driver_logs

log = logging.getLogger(__name__)

#: How long a cancelled or timed-out statement's Spark work may take to stop before the job moves on.
CANCEL_GRACE_S = 30.0
#: Failed heartbeats in a row after which the job gives up and ends the session ``fail``.
MAX_BEAT_FAILURES = 5


class SessionLostError(Exception):
    """The session is no longer this job's: another job owns it, or it was ended."""


class Executor(Protocol):
    """What the job needs of its executor (:class:`SparkExecutor` runs statements on Spark)."""

    def start(self, query_id: str, sql: str) -> RunningQuery: ...

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool: ...

    def progress(self, query_id: str) -> StatementProgress: ...


class Heartbeat:
    """One conditional write of the session document per interval, whatever runs.

    It carries liveness (``lastUpdateTime``), the statements running and their Spark progress, and
    the interval itself (so the plugin can tell how stale is too stale). The interval is short while
    statements run and long when idle; a change of activity re-times the next beat, it does not
    add one.

    A failed beat is tried again at the next interval. After ``max_failures`` failures in a row,
    or should the thread end in any other way, the job is told (:meth:`InteractiveJob.fail`):
    a job without a heartbeat would look dead to the plugin while it runs on.
    """

    def __init__(self, job: InteractiveJob, max_failures: int = MAX_BEAT_FAILURES) -> None:
        self.job = job
        self.max_failures = max_failures
        self.writes = 0
        self.failures = 0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._last = time.monotonic()
        self._reported_running = False
        self._progress_failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._wake.set()
        self._thread.join(timeout=10)

    def retime(self) -> None:
        self._wake.set()

    def interval_ms(self) -> int:
        """Short while a statement runs, and once more after the last beat that reported one, so
        that the end of a statement (a cancel honoured) shows within one short interval."""
        cfg = self.job.cfg
        busy = self.job.running is not None or self._reported_running
        return cfg.heartbeat_running_ms if busy else cfg.heartbeat_idle_ms

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.job.fail(f"Session failed: heartbeat stopped: {type(exc).__name__}: {exc}")
            raise

    def _loop(self) -> None:
        while not self.job.stop_event.is_set():
            due = self._last + self.interval_ms() / 1000
            if self._wake.wait(max(0.0, due - time.monotonic())):
                self._wake.clear()
                continue
            self._last = time.monotonic()  # the period runs from the start of a beat: no drift
            try:
                self.beat()
            except SessionLostError as exc:
                log.warning("heartbeat: %s; stopping", exc)
                self.job.stop_event.set()
                return
            except Exception as exc:  # noqa: BLE001 - counted: too many in a row end the session
                if not self._failed(exc):
                    return
            else:
                self.failures = 0

    def _failed(self, exc: Exception) -> bool:
        """Count a failed beat; False once there were too many in a row (the job is told)."""
        self.failures += 1
        if self.failures >= self.max_failures:
            log.error("heartbeat failed %d times in a row; ending the session", self.failures, exc_info=exc)
            self.job.fail(
                f"Session failed: heartbeat failed {self.failures} times in a row: {type(exc).__name__}: {exc}"
            )
            return False
        log.warning("heartbeat failed (%d in a row); will try again next interval", self.failures, exc_info=exc)
        return True

    def _progress(self, query_id: str) -> StatementProgress | None:
        """Spark's progress of a statement; None when it cannot be had (progress is optional)."""
        try:
            progress = self.job.executor.progress(query_id)
        except Exception as exc:  # noqa: BLE001 - a beat without progress beats no beat (Py4J errors, say)
            level = logging.DEBUG if self._progress_failing else logging.WARNING  # once per streak
            log.log(level, "no progress for statement %s, beating without: %s: %s", query_id, type(exc).__name__, exc)
            self._progress_failing = True
            return None
        self._progress_failing = False
        return progress

    def beat(self) -> None:
        job = self.job
        running = job.running
        report = [
            RunningStatement(query_id=r.query_id, start_time=job.running_since, progress=self._progress(r.query_id))
            for r in ([running] if running else [])
        ]
        # The interval advertised is the one until the *next* beat, so the plugin knows when
        # this session's heartbeat becomes stale.
        cfg = job.cfg
        next_ms = cfg.heartbeat_running_ms if report or job.running is not None else cfg.heartbeat_idle_ms

        def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
            job.check_owner(current.doc)
            return job.store.update_session(
                current,
                index=job.cfg.request_index,
                last_update_time=now_millis(),
                running_statements=report,
                heartbeat_interval_millis=next_ms,
            )

        if job.store.update_with_retry(job.read_session, change) is None:
            raise SessionLostError(f"session {job.cfg.session_id} disappeared")
        self._reported_running = bool(report)
        self.writes += 1


class InteractiveJob:
    """One session's job. Every read and write of its session and statements goes to the request
    index it was given (``cfg.request_index``), which need not be the datasource's own."""

    def __init__(
        self, cfg: JobConfig, store: IndexStore, executor: Executor, stop_event: threading.Event | None = None
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.executor = executor
        self.stop_event = stop_event or threading.Event()
        #: Why the session must end ``fail`` although the loop itself did not fail (see :meth:`fail`).
        self.failure = ""
        self.running: RunningQuery | None = None
        self.running_since = 0
        self.heartbeat = Heartbeat(self)
        self._finished_ids: set[str] = set()
        self._next_search = 0.0

    # -- session ownership ------------------------------------------------------------------

    def read_session(self) -> Versioned[SessionDoc] | None:
        return self.store.get_session(self.cfg.datasource, self.cfg.session_id, index=self.cfg.request_index)

    def read_statement(self, statement_id: str) -> Versioned[StatementDoc] | None:
        return self.store.get_statement(self.cfg.datasource, statement_id, index=self.cfg.request_index)

    def fail(self, reason: str) -> None:
        """End the session ``fail`` with ``reason``: called from another thread (the heartbeat);
        the loop notices the stop at once and :meth:`run` records the reason."""
        if not self.failure:
            self.failure = reason[:2000]
        self.stop_event.set()

    def check_owner(self, session: SessionDoc) -> None:
        mine = self.cfg.job_id
        if session.job_id and session.job_id != mine:
            raise SessionLostError(f"session {session.session_id} is owned by job {session.job_id}")
        if mine in session.exclude_job_ids or mine in self.cfg.exclude_jobs:
            raise SessionLostError(f"job {mine} is excluded from session {session.session_id}")
        if is_terminal(session.state):
            raise SessionLostError(f"session {session.session_id} is {session.state.value}")

    def wait_for_session(self) -> Versioned[SessionDoc]:
        """The session document, waiting for it to appear (the plugin writes it after launching)."""
        deadline = time.monotonic() + self.cfg.session_wait_ms / 1000
        while True:
            session = self.read_session()
            if session is not None:
                self.check_owner(session.doc)
                return session
            if time.monotonic() >= deadline or self.stop_event.wait(self.cfg.loop_frequency_ms / 1000):
                raise SessionLostError(f"session {self.cfg.session_id} never appeared")

    def claim(self) -> None:
        """Move the session to ``running`` under this job's id."""

        def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
            self.check_owner(current.doc)
            now = now_millis()
            return self.store.update_session(
                current,
                SessionState.RUNNING,
                index=self.cfg.request_index,
                job_id=self.cfg.job_id,
                application_id=self.cfg.application_id,
                job_start_time=now,
                last_update_time=now,
                heartbeat_interval_millis=self.cfg.heartbeat_idle_ms,
            )

        self.store.update_with_retry(self.read_session, change)

    def end_session(self, state: SessionState, error: str = "") -> None:
        def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state) or (current.doc.job_id and current.doc.job_id != self.cfg.job_id):
                return None
            return self.store.update_session(
                current,
                state,
                index=self.cfg.request_index,
                error=error,
                running_statements=[],
                last_update_time=now_millis(),
            )

        self.store.update_with_retry(self.read_session, change)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> SessionState | None:
        """Run the session until it ends; returns the state it ended in (None if never ours)."""
        try:
            self.wait_for_session()
            self.claim()
        except SessionLostError as exc:
            log.warning("not starting: %s", exc)
            return None
        log.info("session %s running as job %s", self.cfg.session_id, self.cfg.job_id)
        self.heartbeat.start()
        end_state, error = SessionState.DEAD, ""
        try:
            self.loop()
        except SessionLostError as exc:
            log.warning("stopping: %s", exc)
            end_state = SessionState.DEAD
        except Exception as exc:
            log.exception("session failed")
            end_state, error = SessionState.FAIL, f"Session failed: {type(exc).__name__}: {exc}"[:2000]
        finally:
            self.stop_event.set()
            self.heartbeat.stop()
        if self.failure and not error:
            end_state, error = SessionState.FAIL, self.failure
        self.end_session(end_state, error)
        log.info("session %s ended %s", self.cfg.session_id, end_state.value)
        return end_state

    def loop(self) -> None:
        idle_since = time.monotonic()
        limit = self.cfg.inactivity_limit_ms / 1000
        while not self.stop_event.is_set():
            if self.run_once():
                idle_since = time.monotonic()
                continue
            if time.monotonic() - idle_since >= limit:
                log.info("no statement for %.0f s: ending the session", limit)
                return
            self.stop_event.wait(self.cfg.loop_frequency_ms / 1000)

    def run_once(self) -> bool:
        """Take the oldest waiting statement, if any, and run it to a terminal state."""
        statement = self.next_statement()
        if statement is None:
            return False
        try:
            self.process(statement)
        except (SessionLostError, IndexUnavailableError):
            raise
        except AsyncQueryError:
            # One statement's bookkeeping failed; the session goes on. The statement is failed if
            # it can be, and in any case ends with the session (the plugin fails what is left).
            log.exception("statement %s could not be processed", statement.doc.statement_id)
        return True

    # -- finding work -----------------------------------------------------------------------

    def next_statement(self) -> Versioned[StatementDoc] | None:
        """The oldest waiting statement: first from the session's real-time list of submitted ids,
        then, at most once per search interval, from the refresh-delayed search the reference
        plugin's statements are found by."""
        session = self.read_session()
        if session is None:
            raise SessionLostError(f"session {self.cfg.session_id} disappeared")
        self.check_owner(session.doc)
        waiting = [s for s in map(self._get_if_waiting, session.doc.pending_statement_ids) if s is not None]
        if not waiting and time.monotonic() >= self._next_search:
            self._next_search = time.monotonic() + self.cfg.search_interval_ms / 1000
            try:
                found = self.store.find_waiting_statements(
                    self.cfg.datasource, self.cfg.session_id, index=self.cfg.request_index
                )
            except AsyncQueryError as exc:
                log.warning("search for waiting statements failed: %s", exc)
                found = []
            waiting = [s for s in found if s.doc.statement_id not in self._finished_ids]
        return min(waiting, key=lambda s: s.doc.submit_time) if waiting else None

    def _get_if_waiting(self, statement_id: str) -> Versioned[StatementDoc] | None:
        if statement_id in self._finished_ids:
            return None
        statement = self.read_statement(statement_id)
        if statement is None or statement.doc.state != StatementState.WAITING:
            self._finished_ids.add(statement_id)
            return None
        return statement

    # -- running one statement --------------------------------------------------------------

    def process(self, statement: Versioned[StatementDoc]) -> None:
        doc = statement.doc
        self._finished_ids.add(doc.statement_id)
        waited = now_millis() - doc.submit_time
        if waited > self.cfg.query_wait_timeout_ms:
            error = (
                f"Statement wait timeout: waited {waited} ms, more than the {self.cfg.query_wait_timeout_ms} ms allowed"
            )
            self.finish(statement, StatementState.FAILED, self._result(doc, "FAILED", error=error), error)
            return
        if doc.lang.lower() != "sql":
            error = f"Fail to run query. Cause: language {doc.lang!r} is not supported by this job; use sql"
            self.finish(statement, StatementState.FAILED, self._result(doc, "FAILED", error=error), error)
            return
        try:
            statement = self.store.move_statement(statement, StatementState.RUNNING, index=self.cfg.request_index)
        except (VersionConflictError, InvalidTransitionError):
            log.info("statement %s moved before it could start; skipping", doc.statement_id)
            return
        started = time.monotonic()
        self.running_since = now_millis()
        self.running = self.executor.start(doc.query_id, doc.query)
        self.heartbeat.retime()
        try:
            self.watch(statement, self.running, started)
        finally:
            self.running = None
            self.heartbeat.retime()

    def watch(self, statement: Versioned[StatementDoc], running: RunningQuery, started: float) -> None:
        doc = statement.doc
        timeout = self.cfg.query_execution_timeout_s
        poll = self.cfg.loop_frequency_ms / 1000
        while not running.future.done():
            if self.stop_event.is_set():
                self._stop_work(running)
                error = "Session ended while the statement was running" + (f": {self.failure}" if self.failure else "")
                self.finish(statement, StatementState.FAILED, self._result(doc, "FAILED", error=error), error)
                return
            if time.monotonic() - started > timeout:
                self._stop_work(running)
                error = f"Executing statement {doc.query_id} timed out after {timeout} s"
                self.finish(statement, StatementState.TIMEOUT, self._result(doc, "TIMEOUT", error=error), error)
                return
            current = self.read_statement(doc.statement_id)
            if current is not None and current.doc.state == StatementState.CANCELLED:
                log.info("statement %s cancelled: cancelling its Spark job group", doc.query_id)
                self._stop_work(running)
                return
            try:
                running.future.result(timeout=poll)
            except Exception:  # noqa: BLE001 - handled below, once the future is done
                pass
        self._record_outcome(statement, running, started)

    def _stop_work(self, running: RunningQuery) -> None:
        if not self.executor.cancel(running, CANCEL_GRACE_S, self.cfg.loop_frequency_ms / 1000):
            log.error("statement %s did not stop within %.0f s of its cancel", running.query_id, CANCEL_GRACE_S)

    def _record_outcome(self, statement: Versioned[StatementDoc], running: RunningQuery, started: float) -> None:
        doc = statement.doc
        run_ms = int((time.monotonic() - started) * 1000)
        exc = running.future.exception()
        if exc is None:
            output: QueryOutput = running.future.result()
            result = self._result(doc, "SUCCESS", run_ms=run_ms, output=output)
            self.finish(statement, StatementState.SUCCESS, result, "")
            return
        error = classify(exc, self.cfg.datasource)
        log.info("statement %s failed: %s", doc.query_id, error.splitlines()[0] if error else "")
        self.finish(statement, StatementState.FAILED, self._result(doc, "FAILED", run_ms=run_ms, error=error), error)

    def finish(self, statement: Versioned[StatementDoc], state: StatementState, result: ResultDoc, error: str) -> None:
        """Write the result document, and only then move the statement (never over ``cancelled``:
        a statement cancelled meanwhile keeps its state, and its result document is never read)."""
        self.store.put_result(self.cfg.result_index, result)

        def change(cur: Versioned[StatementDoc]) -> Versioned[StatementDoc] | None:
            if is_terminal(cur.doc.state):
                return None
            return self.store.move_statement(cur, state, index=self.cfg.request_index, error=error)

        self.store.update_with_retry(lambda: self.read_statement(statement.doc.statement_id), change, first=statement)

    def _result(
        self, doc: StatementDoc, status: Any, *, run_ms: int = 0, error: str = "", output: QueryOutput | None = None
    ) -> ResultDoc:
        return ResultDoc(
            query_id=doc.query_id,
            query_text=doc.query,
            session_id=self.cfg.session_id,
            status=status,
            result=output.result if output else [],
            schema=output.schema if output else [],
            lossless=output.lossless if output else None,
            error=error,
            job_run_id=self.cfg.job_id,
            application_id=self.cfg.application_id,
            data_source_name=self.cfg.datasource,
            job_type=self.cfg.job_type.value,
            query_run_time=run_ms,
        )


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    # Python's datetime conversion of Spark timestamps uses the process time zone: make it UTC,
    # like the Spark session's, so timestamps come back as written.
    os.environ["TZ"] = "UTC"
    time.tzset()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    try:
        conf = spark.sparkContext.getConf()
        cfg = JobConfig.load(lambda key: conf.get(key, None), argv)
        if cfg.job_type != SessionType.INTERACTIVE:
            log.error("session type %s is not supported by this job yet", cfg.job_type.value)
            return 2
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        executor = SparkExecutor(spark, cfg.datasource)
        try:
            InteractiveJob(cfg, IndexStore(cfg.opensearch), executor, stop).run()
        finally:
            executor.close()
    finally:
        spark.stop()
    return 0
