"""What the handlers of statements run by a Spark job's session share (interactive and batch).

Such a statement lives in a session whose job heart-beats it: GET checks the session's liveness
(documents first, one coalesced ``describe`` for a suspect) and fails a statement its ended
session left unfinished; DELETE moves the statement to ``cancelled`` with a conditional write.
A new session's job is launched first and its documents written after, so the session document
always names its job, and a failed write stops the job it launched.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from async_query import logs, metrics
from async_query.datasources import Datasource
from async_query.dispatch import QueryKind
from async_query.handlers.base import HandlerContext, fail_if_orphaned, render
from async_query.launcher.base import JobRequest, Launcher, job_conf, launcher_policy
from async_query.replies import Reply
from query_core.errors import AsyncQueryError, QueryNotFoundError
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal

log = logging.getLogger(__name__)


class JobSessionHandler:
    """The base of the handlers whose statements run in a job's session."""

    kind: QueryKind
    #: The ``sessionType`` of the sessions this handler starts.
    session_type: SessionType

    def __init__(self, context: HandlerContext) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings

    def close(self) -> None:
        """Nothing to release: the jobs outlive the plugin process."""

    # -- POST: limits and new sessions ------------------------------------------------------

    def live_sessions(self, types: frozenset[SessionType], limit: int) -> int:
        """Live sessions of ``types`` in the deployment, counted up to about ``limit``.

        A search (it lags new sessions by up to a refresh; it returns at most 10,000 hits), only
        on the paths that start a new job anyway.
        """
        live = self.store.sessions.find(
            None, [SessionState.NOT_STARTED, SessionState.RUNNING], size=min(limit * 4 + 100, 10_000)
        )
        is_fresh = self.context.liveness.staleness.is_fresh
        return sum(1 for s in live if s.doc.session_type in types and is_fresh(s.doc))

    def start_job(
        self, datasource: Datasource, session_id: str, *, name_suffix: str = "", **statement: str
    ) -> tuple[Launcher, str]:
        """Launch the job of a new session; ``statement`` (``query_id``, ``query``) names the one
        statement of a batch or streaming job, ``name_suffix`` ends the job's name (a streaming
        job's index). Returns the launcher and the job id."""
        launcher = self.context.launcher_for(datasource)
        conf, secret = job_conf(
            self.settings,
            datasource,
            self.context.opensearch,
            session_id,
            self.session_type,
            checkpoint_root=launcher.checkpoint_root,
            checkpoint_mandatory=launcher.checkpoint_mandatory,
            policy=launcher_policy(datasource, launcher),
            **statement,
        )
        request = JobRequest(session_id, datasource, self.session_type, conf, secret, name_suffix=name_suffix)
        logs.note(session_id=session_id)
        job_id = metrics.launcher_call(launcher, "start", lambda: launcher.start(request))
        metrics.job_started(datasource.name, self.session_type.value, launcher.kind or type(launcher).__name__.lower())
        return launcher, job_id

    def session_doc(
        self, datasource: Datasource, session_id: str, launcher: Launcher, job_id: str, pending: list[str] | None = None
    ) -> SessionDoc:
        return SessionDoc(
            session_id=session_id,
            session_type=self.session_type,
            data_source_name=datasource.name,
            application_id=launcher.application_id,
            job_id=job_id,
            heartbeat_interval_millis=self.settings.heartbeat_idle_ms,
            pending_statement_ids=pending or [],
        )

    # -- GET --------------------------------------------------------------------------------

    def answers_without_blocking(self, statement: StatementDoc, session: SessionDoc) -> bool:
        """Whether :meth:`get` of ``statement`` in ``session`` is CPU work alone (it may then run
        on the event loop): a statement still going, in a running session with a fresh heartbeat,
        needs no launcher call, no write and no result read."""
        return (
            not is_terminal(statement.state)
            and statement.state != StatementState.SUCCESS
            and session.state == SessionState.RUNNING
            and self.context.liveness.staleness.is_fresh(session)
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
