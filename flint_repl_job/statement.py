"""Running one statement to a terminal state, and its result document: shared by every runner.

:meth:`StatementRunner.run` moves a ``waiting`` statement to ``running`` with a conditional
write, starts it on the executor, watches it for a cancel (its document moved to ``cancelled``),
the execution timeout and a stop of the job, and ends it: the result document is written first,
and only then is the statement moved to its terminal state, never over ``cancelled``.

:meth:`StatementRunner.run_untracked` runs a query that has no statement document (a batch job
started with ``spark.flint.job.query`` only): it writes the result document and nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from flint_repl_job.config import JobConfig
from flint_repl_job.errors import classify, driver_unreachable, write_failure
from flint_repl_job.executor import QueryOutput, RunningQuery
from flint_repl_job.figures import JobCounters
from query_core.errors import AsyncQueryError, IndexUnavailableError
from query_core.models import ResultDoc, StatementDoc, StatementProgress, Versioned, now_millis
from query_core.states import StatementState, is_terminal
from query_core.store import Store
from query_core.store.usage import result_bytes

log = logging.getLogger(__name__)

#: The query languages a statement may be written in.
LANGUAGES = ("sql", "ppl")
#: How long a cancelled or timed-out statement's Spark work may take to stop before the job moves on.
CANCEL_GRACE_S = 30.0


class Executor(Protocol):
    """What the job needs of its executor (:class:`SparkExecutor` runs statements on Spark)."""

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery: ...

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool: ...

    def progress(self, query_id: str) -> StatementProgress: ...


@dataclass(frozen=True)
class Outcome:
    """How a statement ended: its terminal state and error (empty on success and cancel)."""

    state: StatementState
    error: str = ""


def build_result(
    cfg: JobConfig,
    doc: StatementDoc,
    status: Any,
    *,
    run_ms: int = 0,
    error: str = "",
    output: QueryOutput | None = None,
) -> ResultDoc:
    """The result document of ``doc`` (the reference's fields; ``status`` SUCCESS/FAILED/TIMEOUT)."""
    return ResultDoc(
        query_id=doc.query_id,
        query_text=doc.query,
        session_id=cfg.session_id,
        status=status,
        result=output.result if output else [],
        schema=output.schema if output else [],
        lossless=output.lossless if output else None,
        chunks=output.chunks if output else None,
        error=error,
        job_run_id=cfg.job_id,
        application_id=cfg.application_id,
        data_source_name=cfg.datasource,
        job_type=cfg.job_type.value,
        query_run_time=run_ms,
    )


class StatementRunner:
    """Runs statements one at a time for a runner; :attr:`running` is what the heartbeat reports.

    ``on_change`` is called when a statement starts and when it ends (the runner re-times its
    heartbeat); ``failure`` gives the reason the session is failing, if any, for the error of a
    statement cut short by the stop of the job; ``fail_session`` ends the session ``fail`` with a
    reason (a statement that found the job's Spark driver out of reach)."""

    def __init__(
        self,
        cfg: JobConfig,
        store: Store,
        executor: Executor,
        stop_event: threading.Event,
        *,
        on_change: Callable[[], None] = lambda: None,
        failure: Callable[[], str] = lambda: "",
        fail_session: Callable[[str], None] = lambda reason: None,
        figures: JobCounters | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.executor = executor
        self.stop_event = stop_event
        self.on_change = on_change
        self.failure = failure
        self.fail_session = fail_session
        self.running: RunningQuery | None = None
        self.running_since = 0
        self.figures = figures if figures is not None else JobCounters()

    def read_statement(self, statement_id: str) -> Versioned[StatementDoc] | None:
        return self.store.statements.get(self.cfg.datasource, statement_id)

    # -- running ----------------------------------------------------------------------------

    def run(self, statement: Versioned[StatementDoc]) -> Outcome | None:
        """Run a waiting statement to a terminal state; None when it moved (was cancelled, say)
        before it could start. Bookkeeping errors of the index (``AsyncQueryError``) propagate."""
        doc = statement.doc
        if doc.lang.lower() not in LANGUAGES:
            error = f"Fail to run query. Cause: language {doc.lang!r} is not supported; use sql or ppl"
            return self.fail(statement, error)
        started = self.store.statements.start(statement)
        if started is None:
            log.info("statement %s moved before it could start; skipping", doc.statement_id)
            return None
        return self._execute(doc, started)

    def run_untracked(self, doc: StatementDoc) -> Outcome:
        """Run a query without a statement document: no state moves, no cancel; the result only."""
        return self._execute(doc, None)

    def fail(self, statement: Versioned[StatementDoc], error: str) -> Outcome:
        """End a statement that will not run ``failed`` with ``error`` (result document first)."""
        self.finish(
            statement, StatementState.FAILED, build_result(self.cfg, statement.doc, "FAILED", error=error), error
        )
        return Outcome(StatementState.FAILED, error)

    def _execute(self, doc: StatementDoc, statement: Versioned[StatementDoc] | None) -> Outcome:
        started = time.monotonic()
        self.running_since = now_millis()
        self.running = self.executor.start(doc.query_id, doc.query, doc.lang.lower())
        self.on_change()
        try:
            return self.watch(doc, statement, self.running, started)
        finally:
            self.running = None
            self.on_change()
            pickup = self.running_since - doc.submit_time if statement is not None else None
            self.figures.statement_ran(pickup, int((time.monotonic() - started) * 1000))
            self._count_io(doc.query_id)
            self._count_acceleration(doc.query_id)

    def _count_io(self, query_id: str) -> None:
        """Add the statement's Spark input and output to the job's figures, once it has ended (its
        result and state are written first), where the executor can tell them."""
        io_of = getattr(self.executor, "io", None)
        if io_of is None:
            return
        try:
            self.figures.add_io(io_of(query_id))
        except Exception as exc:  # noqa: BLE001 - figures are optional (Py4J errors, say)
            log.debug("no input/output figures for statement %s: %s: %s", query_id, type(exc).__name__, exc)

    def _count_acceleration(self, query_id: str) -> None:
        """Add the statement's use of Flint indexes to the job's figures (``docs/acceleration.md``)."""
        report_of = getattr(self.executor, "acceleration", None)
        report = report_of(query_id) if report_of is not None else None
        if report is not None:
            self.figures.accelerated(report)

    def watch(
        self, doc: StatementDoc, statement: Versioned[StatementDoc] | None, running: RunningQuery, started: float
    ) -> Outcome:
        """Wait for the statement's end, a cancel, the execution timeout or a stop of the job."""
        timeout = self.cfg.query_execution_timeout_s
        while not running.future.done():
            if self.stop_event.is_set():
                self._stop_work(running)
                failure = self.failure()
                error = "Session ended while the statement was running" + (f": {failure}" if failure else "")
                return self.finish(statement, StatementState.FAILED, self.result(doc, "FAILED", error=error), error)
            if time.monotonic() - started > timeout:
                self._stop_work(running)
                error = f"Executing statement {doc.query_id} timed out after {timeout} s"
                return self.finish(statement, StatementState.TIMEOUT, self.result(doc, "TIMEOUT", error=error), error)
            if self._prepare_overdue(running, time.monotonic() - started):
                self.executor.abandon(running)  # type: ignore[attr-defined]
                error = (
                    "Fail to analyze query. Cause: the statement took longer than "
                    f"{running.prepare_timeout_s:g} s to parse and analyze"
                )
                return self.finish(statement, StatementState.FAILED, self.result(doc, "FAILED", error=error), error)
            if statement is not None:
                current = self.read_statement(doc.statement_id)
                if current is not None and current.doc.state == StatementState.CANCELLED:
                    log.info("statement %s cancelled: cancelling its Spark job group", doc.query_id)
                    self._stop_work(running)
                    return Outcome(StatementState.CANCELLED)
            try:
                running.future.result(timeout=self.cfg.loop_pause_s(time.monotonic() - started))
            except Exception:  # noqa: BLE001 - handled below, once the future is done
                pass
        return self._record_outcome(doc, statement, running, started)

    def _prepare_overdue(self, running: RunningQuery, elapsed_s: float) -> bool:
        """Whether the statement is stuck in Spark's parser or analyzer past its limit (an
        executor that cannot tell says no)."""
        overdue = getattr(self.executor, "prepare_overdue", None)
        return bool(overdue is not None and overdue(running, elapsed_s))

    def _stop_work(self, running: RunningQuery) -> None:
        if not self.executor.cancel(running, CANCEL_GRACE_S, self.cfg.loop_frequency_ms / 1000):
            log.error("statement %s did not stop within %.0f s of its cancel", running.query_id, CANCEL_GRACE_S)

    def _record_outcome(
        self, doc: StatementDoc, statement: Versioned[StatementDoc] | None, running: RunningQuery, started: float
    ) -> Outcome:
        run_ms = int((time.monotonic() - started) * 1000)
        exc = running.future.exception()
        if exc is None:
            output: QueryOutput = running.future.result()
            result = self.result(doc, "SUCCESS", run_ms=run_ms, output=output)
            return self.finish(statement, StatementState.SUCCESS, result, "")
        error = classify(exc, self.cfg.datasource)
        log.info("statement %s failed: %s", doc.query_id, error.splitlines()[0] if error else "")
        outcome = self.finish(
            statement, StatementState.FAILED, self.result(doc, "FAILED", run_ms=run_ms, error=error), error
        )
        if driver_unreachable(exc):
            # Every later statement would fail the same way: once this one has ended, the session
            # ends too, and the next query of its user gets a new one.
            self.fail_session(f"Session failed: the job cannot reach its Spark driver: {exc}")
        return outcome

    # -- ending -----------------------------------------------------------------------------

    def finish(
        self, statement: Versioned[StatementDoc] | None, state: StatementState, result: ResultDoc, error: str
    ) -> Outcome:
        """Write the result document, and only then move the statement (never over ``cancelled``:
        a statement cancelled meanwhile keeps its state, and its result document is never read).
        Without a statement document (``None``) only the result is written.

        A result document the index refuses (too large, a mapping conflict) fails the statement
        with the cause instead; should even that be refused, the error propagates to the runner,
        which fails the statement or, failing that, ends the session: a statement never stays
        ``running`` in a live session that no longer runs it.

        Returns the state the statement ended in: ``state``, or the terminal state it was found in
        (``cancelled``, say)."""
        state, result, error = self._write_result(state, result, error)
        self._count_usage(statement, result)
        self._report_catalog(result.query_id, state)
        if statement is None:
            return Outcome(state, error)
        settled = self.store.statements.settle(statement, state, error=error)
        if not settled.applied and is_terminal(settled.state):
            return Outcome(settled.state, "" if settled.state == StatementState.CANCELLED else error)
        return Outcome(state, error)

    def _count_usage(self, statement: Versioned[StatementDoc] | None, result: ResultDoc) -> None:
        """Add what the result's documents hold to its submitter's usage (docs/security.md, "What
        one user may store"); a charge that cannot be written is logged, never the statement's error."""
        submitter = statement.doc.submitted_by if statement is not None else None
        try:
            self.store.usage.charge(submitter, result_bytes(result))
        except AsyncQueryError as exc:
            log.warning("result of %s not counted in its submitter's usage: %s", result.query_id, exc)

    def _report_catalog(self, query_id: str, state: StatementState) -> None:
        """Record what the statement changed in the catalog, and that the session holds temporary
        views, before the statement's end is written: a GET that says SUCCESS comes after both
        (docs/catalog.md). An index that is down stops the statement as a result write would;
        any other refusal leaves the plugins' read models to their staleness bound."""
        changes = getattr(self.executor, "catalog_changes", None)
        found = changes() if changes is not None else []
        try:
            if found:
                self.store.catalog_changes.record(self.cfg.datasource, found, query_id, self.cfg.session_id)
            views = getattr(self.executor, "temporary_views", None)
            if state == StatementState.SUCCESS and views is not None and self.cfg.session_id and views():
                self.store.sessions.note_temporary_views(self.cfg.datasource, self.cfg.session_id)
        except IndexUnavailableError:
            raise
        except AsyncQueryError as exc:
            log.warning("catalog changes of %s not recorded: %s", query_id, exc)

    def _write_result(
        self, state: StatementState, result: ResultDoc, error: str
    ) -> tuple[StatementState, ResultDoc, str]:
        """Write the result document (before the statement moves, ``docs/results.md``): the one
        given, or, when the index refuses it, a ``FAILED`` one that says why."""
        try:
            self.store.results.put(self.cfg.result_index, result)
            return state, result, error
        except IndexUnavailableError:
            raise
        except AsyncQueryError as exc:
            if not result.result and result.lossless is None:
                raise  # a document without rows is refused: nothing smaller to write
            failure = write_failure(exc)
            log.warning("result of %s refused by the index: %s", result.query_id, failure)
        failed = result.model_copy(
            update={"status": "FAILED", "error": failure, "result": [], "schema_": [], "lossless": None, "chunks": None}
        )
        self.store.results.put(self.cfg.result_index, failed)
        return StatementState.FAILED, failed, failure

    def result(
        self, doc: StatementDoc, status: Any, *, run_ms: int = 0, error: str = "", output: QueryOutput | None = None
    ) -> ResultDoc:
        return build_result(self.cfg, doc, status, run_ms=run_ms, error=error, output=output)
