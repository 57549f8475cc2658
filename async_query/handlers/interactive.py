"""Interactive queries: statements in a reusable session whose job polls for them.

POST reuses the session the client names when it is interactive, of the same datasource, started
by the same user, and alive (by its documents alone, or one confirmed ``describe``), and otherwise
starts a new session, under the caller's share and the deployment's session limit (slots,
:mod:`async_query.slots`, taken before its job starts; a POST that fails gives them back), whose
job is a warm pool job claimed when its pool has one (:mod:`async_query.pool`). The statement's id
is then appended to the session document, which the job
reads by id, just after the reply (:mod:`async_query.pending_signals`): pickup does not wait for
an index refresh. GET checks the session's liveness and fails
statements its ended session left unfinished; DELETE cancels and, for a running statement, hands
the cancel to the supervisor, which bounds how long the job may take to honour it.
"""

from __future__ import annotations

from async_query.datasources import Datasource
from async_query.dispatch import Classified, QueryKind
from async_query.handlers.base import HandlerContext, SubmitRequest, Submitted, statement_doc
from async_query.handlers.browse import BrowseFastPath
from async_query.handlers.job_session import JobSessionHandler
from async_query.security.authz import may_use_session
from async_query.security.principal import Principal
from async_query.slots import INTERACTIVE_SESSIONS, USER_SESSIONS
from query_core.errors import AsyncQueryError
from query_core.ids import datasource_of, new_id
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionType, StatementState


class InteractiveHandler(JobSessionHandler):
    kind = QueryKind.INTERACTIVE
    session_type = SessionType.INTERACTIVE
    limit = INTERACTIVE_SESSIONS
    user_limit = USER_SESSIONS

    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        #: The catalog browse statements answered from the read model (docs/catalog.md).
        self.browse = (
            BrowseFastPath(
                self.store,
                context.catalog,
                self._named_session,
                self._new_session,
                max_rows=self.settings.result_chunk_rows,
                max_bytes=self.settings.result_chunk_bytes,
            )
            if context.catalog is not None
            else None
        )

    def close(self) -> None:
        if self.browse is not None:
            self.browse.close()

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        datasource = self.context.datasources.get(request.datasource)
        if self.browse is not None:
            answered = self.browse.submit(request, classified, datasource)
            if answered is not None:
                return answered
        session = self._named_session(datasource, request)
        if session is not None:
            return self._add_statement(request, datasource, session)
        session_id = new_id(datasource.name)
        with self.new_job(datasource, session_id, request.submitted_by) as job:
            job.session = self.store.sessions.create(self.session_doc(datasource, session_id, job, request.submitted_by))
            return self._add_statement(request, datasource, job.session)

    def _add_statement(self, request: SubmitRequest, datasource: Datasource, session: Versioned[SessionDoc]) -> Submitted:
        query_id = new_id(datasource.name)
        statement = statement_doc(
            request,
            datasource.name,
            query_id,
            session.doc.session_id,
            application_id=session.doc.application_id,
            job_id=session.doc.job_id,
        )
        created = self.store.statements.create(statement)
        self._signal_job(session, created)
        return Submitted(query_id, session.doc.session_id, self.kind)

    def _signal_job(self, session: Versioned[SessionDoc], statement: Versioned[StatementDoc]) -> None:
        """Append the statement id to the session's list, which its job reads by id (real-time),
        right after the reply (:mod:`async_query.pending_signals`: should the session have ended in
        the instant since it was chosen, the statement is failed there, so that it still reaches a
        terminal state)."""
        self.context.signals.add(session, statement)

    def _named_session(self, datasource: Datasource, request: SubmitRequest) -> Versioned[SessionDoc] | None:
        """The session the POST names, if it can take the statement."""
        if not request.session_id:
            return None
        if self.browse is not None:
            self.browse.wait_for_start(request.session_id)
        return self._usable_session(datasource, request.session_id, request.principal)

    def _usable_session(
        self, datasource: Datasource, session_id: str, principal: Principal
    ) -> Versioned[SessionDoc] | None:
        """The given session if it can take a statement: same datasource, interactive, the
        caller's own (:func:`~async_query.security.authz.may_use_session`), alive."""
        try:
            if datasource_of(session_id) != datasource.name:
                return None
        except AsyncQueryError:
            return None
        # As this process's last signal to it wrote it, a moment ago (async_query/pending_signals.py), or read.
        session = self.context.signals.written(session_id) or self.store.sessions.get(datasource.name, session_id)
        if session is None or session.doc.session_type != SessionType.INTERACTIVE:
            return None
        if not may_use_session(principal, session.doc.submitted_by):
            return None
        return session if self.context.liveness.confirm_alive(session) else None

    def _new_session(self, datasource: Datasource, submitted_by: str | None, session_id: str) -> Versioned[SessionDoc]:
        """Start the new session ``session_id`` as a POST does (:meth:`new_job`: the caller's share
        and the deployment's slots, a warm pool job claimed or one launched, then its document),
        holding nothing should it fail; the browse fast path starts its sessions this way."""
        with self.new_job(datasource, session_id, submitted_by) as job:
            job.session = self.store.sessions.create(self.session_doc(datasource, session_id, job, submitted_by))
            return job.session

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        # A waiting statement never starts once cancelled (the job's move to running is
        # conditional). A running one is supervised until a heartbeat shows its work stopped;
        # past the deadline its session's job is cancelled.
        if self.cancel_statement(statement) == StatementState.RUNNING:
            doc = statement.doc
            self.context.supervisor.watch(doc.query_id, doc.data_source_name, doc.session_id)

