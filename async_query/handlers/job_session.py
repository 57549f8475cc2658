"""What the handlers of statements run by a Spark job's session share (interactive and batch).

Such a statement lives in a session whose job heart-beats it: GET checks the session's liveness
(documents first, one coalesced ``describe`` for a suspect) and fails a statement its ended
session left unfinished; DELETE moves the statement to ``cancelled`` with a conditional write.
A new session takes a slot of its deployment limit first (:mod:`async_query.slots`: the count
and the claim are one conditional write), then gets its job (a warm pool job claimed, or one
launched: :mod:`async_query.pool`), then its documents are written, so the session document always
names its job; a failed launch frees the slot, and a failed write stops the job it got.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from async_query import logs, metrics
from async_query.datasources import Datasource
from async_query.dispatch import QueryKind
from async_query.handlers.base import HandlerContext, fail_if_orphaned, render
from async_query.launcher.base import Launcher
from async_query.pool import StartedJob
from async_query.replies import Reply
from async_query.slots import Holder, Limit, Slots
from query_core.errors import AsyncQueryError, QueryNotFoundError, TooManyRequestsError
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal

log = logging.getLogger(__name__)


class JobSessionHandler:
    """The base of the handlers whose statements run in a job's session."""

    kind: QueryKind
    #: The ``sessionType`` of the sessions this handler starts.
    session_type: SessionType
    #: The deployment limit its new sessions are started under.
    limit: Limit

    def __init__(self, context: HandlerContext) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings
        self.slots = Slots(
            context.store,
            self.limit,
            lambda: self.limit.allowed(self.settings),
            lambda session: not is_terminal(context.liveness.check(session).doc.state),
        )

    def close(self) -> None:
        """Nothing to release: the jobs outlive the plugin process."""

    # -- POST: limits and new sessions ------------------------------------------------------

    def live_sessions(self, types: frozenset[SessionType], limit: int) -> int:
        """Live sessions of ``types`` in the deployment, counted up to about ``limit``.

        A search (it lags new sessions by up to a refresh; it returns at most 10,000 hits), only
        on the paths that start a new job anyway: it counts the sessions that hold no slot (started
        by another plugin version, say); the slots make the limit hold when processes race.
        """
        live = self.store.sessions.find(
            None, [SessionState.NOT_STARTED, SessionState.RUNNING], size=min(limit * 4 + 100, 10_000)
        )
        is_fresh = self.context.liveness.staleness.is_fresh
        return sum(1 for s in live if s.doc.session_type in types and is_fresh(s.doc))

    def start_job(
        self, datasource: Datasource, session_id: str, *, name_suffix: str = "", **statement: str
    ) -> StartedJob:
        """Get the job of a new session under the handler's limit (a 429 when it is reached): a
        warm pool job claimed, or one launched (``SessionJobs.start``). ``statement``
        (``query_id``, ``query``) names the one statement of a batch or streaming job,
        ``name_suffix`` ends the job's name (a streaming job's index)."""
        holder = Holder(datasource.name, session_id)
        slot = self._take_slot(holder)
        try:
            logs.note(session_id=session_id)
            return self.context.jobs.start(
                datasource, session_id, self.session_type, name_suffix=name_suffix, **statement
            )
        except AsyncQueryError:
            self.slots.release(slot, holder)
            raise

    def _take_slot(self, holder: Holder) -> int:
        limit = self.slots.limit()
        if self.live_sessions(self.limit.session_types, limit) >= limit:
            raise TooManyRequestsError(self.limit.message(limit))
        return self.slots.take(holder)

    def session_doc(
        self,
        datasource: Datasource,
        session_id: str,
        job: StartedJob,
        submitted_by: str | None,
        pending: list[str] | None = None,
    ) -> SessionDoc:
        """The new session's document, naming its job. A claimed pool job's session records its
        slot and the interval the job beat at when it was idle (0: it was still starting), so its
        liveness counts from the claim as a running session's does (docs/documents.md)."""
        claimed = job.pool_slot is not None
        return SessionDoc(
            session_id=session_id,
            session_type=self.session_type,
            data_source_name=datasource.name,
            application_id=job.launcher.application_id,
            job_id=job.job_id,
            heartbeat_interval_millis=job.heartbeat_interval_millis if claimed else self.settings.heartbeat_idle_ms,
            pending_statement_ids=pending or [],
            submitted_by=submitted_by,
            pool_slot=job.pool_slot,
        )

    # -- GET --------------------------------------------------------------------------------

    def answers_without_blocking(self, statement: StatementDoc, session: SessionDoc) -> bool:
        """Whether :meth:`get` of ``statement`` in ``session`` is CPU work alone (it may then run
        on the event loop): a statement still going, in a running session the liveness check
        vouches for without a call, needs no launcher call, no write and no result read."""
        return (
            not is_terminal(statement.state)
            and statement.state != StatementState.SUCCESS
            and session.state == SessionState.RUNNING
            and self.context.liveness.vouches_for(session)
        )

    def get(self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None) -> Reply:
        if not is_terminal(statement.doc.state):
            if session is not None:
                session = self.context.liveness.check(session)
            statement = self.reconcile(statement, session)
        return render(self.context, statement, session)

    def reconcile(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None
    ) -> Versioned[StatementDoc]:
        """A statement that is not finished, in a session that is, never will be: fail it."""
        return fail_if_orphaned(self.store, statement, session)

    # -- DELETE -----------------------------------------------------------------------------

    def cancel_statement(self, statement: Versioned[StatementDoc]) -> StatementState:
        """Move the statement to ``cancelled``; returns the state it was cancelled from.

        A finished statement is a 400; one deleted meanwhile is not found.
        """
        query_id = statement.doc.query_id
        cancelled = self.store.statements.cancel(statement)
        if cancelled is None:
            # The re-read after a lost race found nothing: the statement was deleted meanwhile.
            raise QueryNotFoundError(f"no async query with id {query_id}")
        log.info("cancelled query %s", query_id)
        return cancelled[1]


@contextlib.contextmanager
def stopping_job_on_error(launcher: Launcher, job_id: str) -> Iterator[None]:
    """Stop the job just launched if what follows (its documents' writes) fails."""
    try:
        yield
    except AsyncQueryError:
        with contextlib.suppress(AsyncQueryError):  # keep the original error
            metrics.launcher_call(launcher, "cancel", lambda: launcher.cancel(job_id))
        raise
