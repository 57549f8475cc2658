"""What the handlers of statements run by a Spark job's session share (interactive and batch).

Such a statement lives in a session whose job heart-beats it: GET checks the session's liveness
(documents first, one coalesced ``describe`` for a suspect) and fails a statement its ended
session left unfinished; DELETE moves the statement to ``cancelled`` with a conditional write.
A new session takes its slots first (:mod:`async_query.slots`: its user's share, then the
deployment's; each count and claim one conditional write), then gets its job (a warm pool job
claimed, or one launched: :mod:`async_query.pool`), then its documents are written, so the session
document always names its job. A POST that fails after
that (a launch refused, a document write that fails) holds nothing: its job is stopped, a session
it wrote is ended, and its slots are given back (:meth:`JobSessionHandler.new_job`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from async_query import logs, metrics
from async_query.datasources import Datasource
from async_query.dispatch import QueryKind
from async_query.handlers.base import HandlerContext, fail_if_orphaned, render
from async_query.launcher.base import Launcher
from async_query.pool import StartedJob
from async_query.replies import Reply
from async_query.slots import Holder, Limit, Slots, user_scope
from query_core.errors import QueryNotFoundError, TooManyRequestsError
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal

log = logging.getLogger(__name__)


@dataclass
class NewJob:
    """The job a POST got for a new session (:meth:`JobSessionHandler.new_job`)."""

    started: StartedJob
    #: The session document once the POST has written it (ended should the POST fail later).
    session: Versioned[SessionDoc] | None = None

    @property
    def launcher(self) -> Launcher:
        return self.started.launcher

    @property
    def job_id(self) -> str:
        return self.started.job_id


class JobSessionHandler:
    """The base of the handlers whose statements run in a job's session."""

    kind: QueryKind
    #: The ``sessionType`` of the sessions this handler starts.
    session_type: SessionType
    #: The deployment limit its new sessions are started under.
    limit: Limit
    #: The per-user limit they are started under too (None: none).
    user_limit: Limit | None = None

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
        user_limit = self.user_limit
        #: The per-user slots (their scope set per user by :meth:`_user_slots`).
        self.user_slots = (
            Slots(context.store, user_limit, lambda: user_limit.allowed(self.settings), self.slots.is_live)
            if user_limit is not None
            else None
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

    @contextlib.contextmanager
    def new_job(
        self,
        datasource: Datasource,
        session_id: str,
        submitted_by: str | None,
        *,
        name_suffix: str = "",
        **statement: str,
    ) -> Iterator[NewJob]:
        """Get the job of a new session under the handler's limits (a 429 when one is reached): a
        warm pool job claimed, or one launched (``SessionJobs.start``); yield it while the POST
        writes its documents; ``statement`` (``query_id``, ``query``)
        names the one statement of a batch or streaming job, ``name_suffix`` ends the job's name
        (a streaming job's index).

        Should the launch or anything in the ``with`` block fail, the POST holds nothing: the job
        is stopped, the session the block recorded (``NewJob.session``) is ended (its statements
        failed), and the slots are given back at once. Each of those is best effort (the index may
        be what failed): a slot whose write is lost is free anyway once its session has ended, or
        once the grace of a session never recorded has passed."""
        holder = Holder(datasource.name, session_id)
        taken = self._take_slots(holder, submitted_by)
        try:
            logs.note(session_id=session_id)
            started = self.context.jobs.start(
                datasource, session_id, self.session_type, name_suffix=name_suffix, **statement
            )
        except BaseException:
            self._release(taken, holder)
            raise
        job = NewJob(started)
        try:
            yield job
        except BaseException as exc:
            self._undo(job, exc)
            self._release(taken, holder)
            raise

    def _take_slots(self, holder: Holder, submitted_by: str | None) -> list[tuple[Slots, int]]:
        """The user's slot (a named caller's), then the deployment's; none if either is full."""
        taken: list[tuple[Slots, int]] = []
        try:
            if self.user_slots is not None and submitted_by is not None:
                user_slots = self.user_slots.scoped(user_scope(submitted_by))
                taken.append((user_slots, user_slots.take(holder)))
            taken.append((self.slots, self._take_slot(holder)))
        except BaseException:
            self._release(taken, holder)
            raise
        return taken

    @staticmethod
    def _release(taken: list[tuple[Slots, int]], holder: Holder) -> None:
        for slots, slot in taken:
            slots.release(slot, holder)

    def _undo(self, job: NewJob, cause: BaseException) -> None:
        """Stop a failed POST's job and end the session it recorded (best effort)."""
        try:
            metrics.launcher_call(job.launcher, "cancel", lambda: job.launcher.cancel(job.job_id))
        except Exception as exc:  # noqa: BLE001 - the POST's own error is the one raised
            log.warning("cannot stop job %s of a failed POST: %s", job.job_id, exc)
        if job.session is None:
            return
        error = f"The request that started this session failed: {cause}"
        try:
            self.context.liveness.end_session(job.session, SessionState.DEAD, error)
        except Exception as exc:  # noqa: BLE001 - as above; liveness ends it later
            log.warning("cannot end session %s of a failed POST: %s", job.session.doc.session_id, exc)

    def _take_slot(self, holder: Holder) -> int:
        limit = self.slots.limit()
        if self.live_sessions(self.limit.session_types, limit) >= limit:
            raise TooManyRequestsError(self.limit.message(limit))
        return self.slots.take(holder)

    def session_doc(
        self,
        datasource: Datasource,
        session_id: str,
        job: NewJob,
        submitted_by: str | None,
        pending: list[str] | None = None,
    ) -> SessionDoc:
        """The new session's document, naming its job. A claimed pool job's session records its
        slot and the interval the job beat at when it was idle (0: it was still starting), so its
        liveness counts from the claim as a running session's does (docs/documents.md)."""
        started = job.started
        claimed = started.pool_slot is not None
        return SessionDoc(
            session_id=session_id,
            session_type=self.session_type,
            data_source_name=datasource.name,
            application_id=started.launcher.application_id,
            job_id=started.job_id,
            heartbeat_interval_millis=started.heartbeat_interval_millis if claimed else self.settings.heartbeat_idle_ms,
            pending_statement_ids=pending or [],
            submitted_by=submitted_by,
            pool_slot=started.pool_slot,
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
