"""Interactive queries: statements in a reusable session whose job polls for them.

POST reuses the session the client names when it is interactive, of the same datasource and alive
(by its documents alone, or one confirmed ``describe``), and otherwise starts a new session, under
the deployment's session limit. The statement's id is then appended to the session document, which
the job reads by id: pickup does not wait for an index refresh. GET checks the session's liveness
and fails statements its ended session left unfinished; DELETE cancels and, for a running
statement, hands the cancel to the supervisor, which bounds how long the job may take to honour it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from async_query.datasources import Datasource
from async_query.dispatch import Classified, QueryKind
from async_query.handlers.base import HandlerContext, SubmitRequest, Submitted, render
from async_query.launcher.base import JobRequest, job_conf
from async_query.liveness import fail_statement
from async_query.replies import Reply
from query_core.errors import (
    AsyncQueryError,
    InvalidTransitionError,
    QueryNotFoundError,
    TooManyRequestsError,
)
from query_core.ids import datasource_of, new_id
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal

log = logging.getLogger(__name__)


class InteractiveHandler:
    kind = QueryKind.INTERACTIVE

    def __init__(self, context: HandlerContext) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        datasource = self.context.datasources.get(request.datasource)
        session = self._usable_session(datasource, request.session_id) if request.session_id else None
        if session is None:
            self._check_session_limit()
            session = self._new_session(datasource)
        query_id = new_id(datasource.name)
        statement = StatementDoc(
            statement_id=query_id,
            query_id=query_id,
            session_id=session.doc.session_id,
            lang=request.lang,
            query=request.query,
            data_source_name=datasource.name,
            application_id=session.doc.application_id,
            job_id=session.doc.job_id,
        )
        created = self.store.create_statement(statement)
        self._signal_job(session, created)
        return Submitted(query_id, session.doc.session_id, self.kind)

    def _signal_job(self, session: Versioned[SessionDoc], statement: Versioned[StatementDoc]) -> None:
        """Append the statement id to the session's list, which its job reads by id (real-time).

        Should the session have ended in the instant since it was chosen, the statement is failed
        at once, so that it still reaches a terminal state.
        """
        sid = statement.doc.statement_id
        kept = self.settings.pending_ids_kept

        def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state):
                return None
            ids = [*current.doc.pending_statement_ids, sid][-kept:]
            return self.store.update_session(current, pending_statement_ids=ids)

        written = self.store.update_with_retry(
            lambda: self.store.get_session(session.doc.data_source_name, session.doc.session_id), change, first=session
        )
        if written is None:
            fail_statement(
                self.store,
                statement,
                f"Session {session.doc.session_id} ended before the statement could run; submit it again",
            )

    def _usable_session(self, datasource: Datasource, session_id: str) -> Versioned[SessionDoc] | None:
        """The given session if it can take a statement: same datasource, interactive, alive."""
        try:
            if datasource_of(session_id) != datasource.name:
                return None
        except AsyncQueryError:
            return None
        session = self.store.get_session(datasource.name, session_id)
        if session is None or session.doc.session_type != SessionType.INTERACTIVE:
            return None
        return session if self.context.liveness.confirm_alive(session) else None

    def _check_session_limit(self) -> None:
        """At most ``max_sessions`` live interactive sessions per deployment.

        Counted with a search (it lags new sessions by up to a refresh; it returns at most 10,000
        hits), on the path that starts a new job anyway; submitting into a live session never
        comes here.
        """
        live = self.store.find_sessions(
            None,
            [SessionState.NOT_STARTED, SessionState.RUNNING],
            size=min(self.settings.max_sessions * 4 + 100, 10_000),
        )
        is_fresh = self.context.liveness.staleness.is_fresh
        count = sum(1 for s in live if s.doc.session_type == SessionType.INTERACTIVE and is_fresh(s.doc))
        if count >= self.settings.max_sessions:
            raise TooManyRequestsError(f"domain concurrent active session can not exceed {self.settings.max_sessions}")

    def _new_session(self, datasource: Datasource) -> Versioned[SessionDoc]:
        session_id = new_id(datasource.name)
        launcher = self.context.launcher_for(datasource)
        conf, secret = job_conf(self.settings, datasource, self.context.opensearch, session_id, SessionType.INTERACTIVE)
        job_id = launcher.start(JobRequest(session_id, datasource, SessionType.INTERACTIVE, conf, secret))
        doc = SessionDoc(
            session_id=session_id,
            session_type=SessionType.INTERACTIVE,
            data_source_name=datasource.name,
            application_id=launcher.application_id,
            job_id=job_id,
            heartbeat_interval_millis=self.settings.heartbeat_idle_ms,
        )
        try:
            return self.store.create_session(doc)
        except AsyncQueryError:
            with contextlib.suppress(AsyncQueryError):  # keep the original error
                launcher.cancel(job_id)
            raise

    # -- GET --------------------------------------------------------------------------------

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
        if session is None or not is_terminal(session.doc.state):
            return statement
        reason = session.doc.error or f"session {session.doc.session_id} is {session.doc.state.value}"
        return fail_statement(self.store, statement, f"Session ended before the statement finished: {reason}")

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        query_id = statement.doc.query_id
        cancelled_from: list[StatementState] = []  # the state of the version the cancel was written over

        def change(current: Versioned[StatementDoc]) -> Versioned[StatementDoc]:
            if is_terminal(current.doc.state):
                raise InvalidTransitionError(f"can't cancel query {query_id}: it is already {current.doc.state.value}")
            cancelled = self.store.move_statement(current, StatementState.CANCELLED)
            cancelled_from.append(current.doc.state)
            return cancelled

        if self.store.update_with_retry(self._rereader(statement.doc), change, first=statement) is None:
            # The re-read after a lost race found nothing: the statement was deleted meanwhile.
            raise QueryNotFoundError(f"no async query with id {query_id}")
        # A waiting statement never starts once cancelled (the job's move to running is
        # conditional). A running one is supervised until a heartbeat shows its work stopped;
        # past the deadline its session's job is cancelled.
        if cancelled_from[-1] == StatementState.RUNNING:
            self.context.supervisor.watch(query_id, statement.doc.data_source_name, statement.doc.session_id)
        log.info("cancelled query %s", query_id)

    def _rereader(self, doc: StatementDoc) -> Callable[[], Versioned[StatementDoc] | None]:
        return lambda: self.store.get_statement(doc.data_source_name, doc.statement_id)
