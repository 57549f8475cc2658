"""Index DML (DROP, ALTER to manual refresh, and the ALTER and RECOVER statements of indexes the
service's scheduler refreshes): work the plugin does itself, in a ``local`` session.

POST writes a ``local`` session document (listing the statement's id), then the statement, and
returns at once; the work (:mod:`async_query.handlers.index_dml_ops`) runs on a small pool of
threads owned by the handler. It moves the statement ``waiting → running``, writes the result
document (empty rows on success, the error on failure), then the terminal state, and ends the
session ``dead``. The pool's queue is bounded: a plugin process holds at most ``index_dml_queue``
index DML queries (running or waiting for a thread); a POST beyond that is a 429, with nothing
written (``docs/api.md``). GET reads documents only. DELETE is refused with the reference's message.

Should the plugin process stop between the POST and the end, the housekeeping sweep ends the
session after ``index_dml_timeout_s`` and fails the statement
(:class:`async_query.workers.Housekeeper`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from async_query.dispatch import Classified, QueryKind
from async_query.handlers.base import HandlerContext, SubmitRequest, Submitted, fail_if_orphaned, render, statement_doc
from async_query.handlers.index_dml_ops import IndexDmlOperations, IndexDmlStatement
from async_query.replies import Reply
from async_query.security.principal import Principal
from query_core.errors import AsyncQueryError, InvalidRequestError, TooManyRequestsError
from query_core.flint import AlterIndex, DropIndex, RecoverIndexJob
from query_core.ids import new_id
from query_core.models import LosslessResult, ResultDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal

log = logging.getLogger(__name__)

#: DELETE's refusal (the reference's ``IndexDMLHandler.cancelJob``).
CANNOT_CANCEL = "can't cancel index DML query"
#: The result's ``jobType``: the reference answers index DML as a batch job.
RESULT_JOB_TYPE = "batch"
#: How long ``close`` waits for the operations already accepted.
CLOSE_GRACE_S = 30.0


class IndexDmlHandler:
    kind = QueryKind.INDEX_DML

    def __init__(self, context: HandlerContext) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings
        self.operations = IndexDmlOperations(
            context.store, context.launchers.stop_job, context.stream_stopper.stop, context.schedules
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.settings.index_dml_workers), thread_name_prefix="dml")
        self._running: set[Future[None]] = set()
        #: Queries accepted and not finished (running or waiting for a thread), at most ``index_dml_queue``.
        self._held = 0
        self._lock = threading.Lock()

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        statement = classified.statement
        if not isinstance(statement, DropIndex | AlterIndex | RecoverIndexJob):
            raise InvalidRequestError(f"{classified.what} is not index DML")
        datasource = self.context.datasources.get(request.datasource)
        self._hold()
        try:
            created, session = self._record(request, datasource.name)
        except BaseException:
            self._let_go()
            raise
        self._schedule(created, session, statement, request.principal)  # the work holds the place from here on
        return Submitted(created.doc.query_id, session.doc.session_id, self.kind)

    def _hold(self) -> None:
        """A place in the bounded queue, or a 429 before anything is written."""
        limit = max(1, self.settings.index_dml_queue)
        with self._lock:
            if self._held >= limit:
                raise TooManyRequestsError(
                    f"too many index DML queries in progress in this plugin process (at most {limit}); "
                    "try again later"
                )
            self._held += 1

    def _let_go(self) -> None:
        with self._lock:
            self._held -= 1

    def _record(
        self, request: SubmitRequest, datasource: str
    ) -> tuple[Versioned[StatementDoc], Versioned[SessionDoc]]:
        """Write the session, then the statement."""
        session_id, query_id = new_id(datasource), new_id(datasource)
        session = self.store.sessions.create(
            SessionDoc(
                session_id=session_id,
                session_type=SessionType.LOCAL,
                data_source_name=datasource,
                pending_statement_ids=[query_id],
                submitted_by=request.submitted_by,
            )
        )
        try:
            created = self.store.statements.create(statement_doc(request, datasource, query_id, session_id))
        except AsyncQueryError as exc:
            self._end_session_quietly(session, f"The statement could not be recorded: {exc}")
            raise
        return created, session

    def _schedule(
        self,
        statement: Versioned[StatementDoc],
        session: Versioned[SessionDoc],
        work: IndexDmlStatement,
        owner: Principal,
    ) -> None:
        """Hand the work to the pool; a pool that is shut down fails the query at once. Its place
        in the queue is let go when the work is done."""
        try:
            with self._lock:
                future = self._pool.submit(self._run, statement, session, work, owner)
                self._running.add(future)
        except RuntimeError:  # the service is closing
            try:
                self._finish(statement, session, "The service stopped before the index DML query could run", 0)
            finally:
                self._let_go()
            return
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._running.discard(future)
            self._held -= 1

    # -- the work ---------------------------------------------------------------------------

    def _run(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc], work: IndexDmlStatement, owner: Principal
    ) -> None:
        """Run one index DML query to its end; whatever happens, the documents say how it ended
        (or, if they cannot be written, the housekeeping sweep ends it later)."""
        try:
            started = self._begin(statement, session)
            if started is None:
                return
            running, session = started
            began = time.monotonic()
            error = self._operate(running.doc.data_source_name, work, owner)
            self._finish(running, session, error, int((time.monotonic() - began) * 1000))
        except Exception:
            log.exception("index DML query %s could not be recorded to its end", statement.doc.query_id)

    def _operate(self, datasource: str, work: IndexDmlStatement, owner: Principal) -> str:
        """Run the operation for ``owner``; returns its error ("" on success)."""
        try:
            self.operations.run(datasource, work, owner)
            return ""
        except AsyncQueryError as exc:
            return exc.message
        except Exception as exc:  # a bug: the query must still end, with what happened
            log.exception("index DML failed unexpectedly")
            return f"Fail to run query. Cause: {type(exc).__name__}: {exc}"

    def _begin(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc]
    ) -> tuple[Versioned[StatementDoc], Versioned[SessionDoc]] | None:
        """The session and the statement moved to ``running``; None when either has ended
        meanwhile (the housekeeping sweep, after a long stall)."""
        running_session = self.store.sessions.start(session)
        if running_session is None:
            return None
        running = self.store.statements.start(statement)
        return (running, running_session) if running is not None else None

    def _finish(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc], error: str, run_ms: int
    ) -> None:
        """The result first, then the statement's terminal state, then the session."""
        doc = statement.doc
        datasource = self.context.datasources.get(doc.data_source_name)
        state = StatementState.FAILED if error else StatementState.SUCCESS
        self.store.statements.settle(statement, state, error=error, result=(datasource.results, _result(doc, error, run_ms)))
        self.store.sessions.end(session, SessionState.DEAD)
        log.info("index DML query %s ended %s", doc.query_id, "failed: " + error if error else "success")

    def _end_session_quietly(self, session: Versioned[SessionDoc], error: str) -> None:
        try:
            self.store.sessions.end(session, SessionState.DEAD, error)
        except AsyncQueryError as exc:
            log.warning("cannot end session %s: %s", session.doc.session_id, exc)

    # -- GET and DELETE ---------------------------------------------------------------------

    def get(self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None) -> Reply:
        """Documents only: a statement its ended session left unfinished is failed."""
        return render(self.context, fail_if_orphaned(self.store, statement, session), session)

    def answers_without_blocking(self, statement: StatementDoc, session: SessionDoc) -> bool:
        """A statement still going, in a session still going: rendered from the documents alone."""
        return not is_terminal(statement.state) and not is_terminal(session.state)

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        raise InvalidRequestError(CANNOT_CANCEL)

    def close(self) -> None:
        """Accept no more work; wait (boundedly) for the operations already accepted."""
        self._pool.shutdown(wait=False)
        with self._lock:
            running = list(self._running)
        concurrent.futures.wait(running, timeout=CLOSE_GRACE_S)


def _result(doc: StatementDoc, error: str, run_ms: int) -> ResultDoc:
    """The result document of an index DML query: no rows; the error on failure."""
    return ResultDoc(
        query_id=doc.query_id,
        query_text=doc.query,
        status="FAILED" if error else "SUCCESS",
        error=error,
        data_source_name=doc.data_source_name,
        job_type=RESULT_JOB_TYPE,
        query_run_time=run_ms,
        lossless=None if error else LosslessResult(schema=[], datarows="[]", total=0),
    )
