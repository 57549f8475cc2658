"""Batch queries (manual CREATE, REFRESH, VACUUM): a job of their own per statement.

POST, under the deployment's limit of refreshing jobs (a slot, :mod:`async_query.slots`), launches
the job and writes the statement, then the session (``sessionType: batch``) naming the job. The job waits for its session document
before it reads the statement, so it always finds both; a failed write stops the job and gives the slot back. The reply
carries no ``sessionId``. GET is the interactive one: the job heart-beats its session, so a GET
reads documents only while the heartbeat is fresh.

DELETE cancels the statement and stops the job (``docs/flint.md``). An index the job is refreshing
(its state document names the job and is ``refreshing``) goes back to ``active`` through the
"cancel refresh" operation (``refreshing → cancelling → active``, the work being the stop). Every
launcher call is bounded in time, and the cancel supervisor watches the statement: a job still
running it after the cancel deadline is cancelled again and its session ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from async_query.dispatch import Classified, QueryKind, classify, index_named
from async_query.handlers.base import SubmitRequest, Submitted, statement_doc
from async_query.handlers.job_session import JobSessionHandler
from async_query.slots import REFRESHING_JOBS, USER_REFRESHING_JOBS
from query_core.errors import AsyncQueryError
from query_core.flint.naming import index_name_of, latest_id
from query_core.ids import new_id
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import FlintIndexStateDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import FlintIndexState, SessionType, is_terminal

log = logging.getLogger(__name__)


class BatchHandler(JobSessionHandler):
    kind = QueryKind.BATCH
    session_type = SessionType.BATCH
    limit = REFRESHING_JOBS
    user_limit = USER_REFRESHING_JOBS

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        datasource = self.context.datasources.get(request.datasource)
        session_id, query_id = new_id(datasource.name), new_id(datasource.name)
        with self.new_job(
            datasource,
            session_id,
            request.submitted_by,
            query_id=query_id,
            query=request.query,
            name_suffix=self.job_name_suffix(classified, datasource.name),
        ) as job:
            launcher, job_id = job.launcher, job.job_id
            statement = self.store.statements.create(
                statement_doc(
                    request,
                    datasource.name,
                    query_id,
                    session_id,
                    application_id=launcher.application_id,
                    job_id=job_id,
                )
            )
            session = self.session_doc(datasource, session_id, job, request.submitted_by, pending=[query_id])
            self._create_session(session, statement)
        log.info("%s query %s runs as job %s (session %s)", self.kind.value, query_id, job_id, session_id)
        return Submitted(query_id, session_id, self.kind)

    def job_name_suffix(self, classified: Classified, datasource: str) -> str:
        """What follows ``<cluster>:<type>:`` in the job's name (nothing for a batch job)."""
        return ""

    def _create_session(self, session: SessionDoc, statement: Versioned[StatementDoc]) -> None:
        """Write the session; if that fails, the statement (nobody knows its id yet) is failed
        so that it does not stay waiting without a session."""
        try:
            self.store.sessions.create(session)
        except AsyncQueryError as exc:
            try:
                self.store.statements.fail(statement, f"The batch session could not be recorded: {exc}")
            except AsyncQueryError:
                log.warning("cannot fail statement %s after its session write failed", statement.doc.query_id)
            raise

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        self.cancel_statement(statement)
        doc = statement.doc
        session = self.store.sessions.get(doc.data_source_name, doc.session_id)
        if session is None or is_terminal(session.doc.state):
            return
        self._stop_job(session, doc)
        # Whatever the launcher said, the supervisor bounds the cancel: a job whose heartbeat
        # still shows the statement after the deadline is cancelled again and its session ended.
        self.context.supervisor.watch(doc.query_id, doc.data_source_name, doc.session_id)

    def _stop_job(self, session: Versioned[SessionDoc], statement: StatementDoc) -> None:
        """Stop the session's job; an index it is refreshing goes back to ``active``."""
        stop = _once(lambda: self._ask_launcher_to_stop(session.doc))
        for state in self._refreshing(session.doc, statement):
            self._cancel_refresh(state, stop)
        try:
            stop()
        except AsyncQueryError as exc:
            log.warning("cannot stop job %s of session %s: %s", session.doc.job_id, session.doc.session_id, exc)

    def _refreshing(self, session: SessionDoc, statement: StatementDoc) -> list[Versioned[FlintIndexStateDoc]]:
        """The index states the session's job holds ``refreshing``: the index its statement names,
        read by id (a search misses a state written within the last refresh interval, as a job
        cancelled just after it began its refresh has), and any other a search finds. One that
        both miss is left to the housekeeping sweep, which repairs it once the session has ended."""
        found: dict[str, Versioned[FlintIndexStateDoc]] = {}
        named = self._named_index(statement)
        if named is not None:
            state = self.store.index_states.get(statement.data_source_name, latest_id(named))
            if state is not None and state.doc.state == FlintIndexState.REFRESHING and state.doc.job_id == session.job_id:
                found[state.doc.latest_id] = state
        refreshing = [FlintIndexState.REFRESHING]
        for state in self.store.index_states.find(session.data_source_name, refreshing, job_id=session.job_id):
            found.setdefault(state.doc.latest_id, state)
        return list(found.values())

    @staticmethod
    def _named_index(statement: StatementDoc) -> str | None:
        """The OpenSearch index of the Flint index ``statement`` names (None: it names none)."""
        try:
            parsed = classify(statement.lang, statement.query).statement
        except AsyncQueryError:
            return None
        return index_named(parsed, statement.data_source_name)

    def _cancel_refresh(self, state: Versioned[FlintIndexStateDoc], stop: Callable[[], None]) -> None:
        target = IndexTarget(state.doc.data_source_name, index_name_of(state.doc.latest_id, state.doc.index_name))
        try:
            IndexTransaction(self.store, target).run("cancel refresh", stop)
            log.info("refresh of index %s cancelled: the index is active", target.index_name)
        except AsyncQueryError as exc:
            # The job finished meanwhile, or the stop failed (the index stays refreshing, and the
            # sweep repairs it once the session ends): the cancel of the statement stands.
            log.warning("cannot cancel the refresh of index %s: %s", target.index_name, exc)

    def _ask_launcher_to_stop(self, session: SessionDoc) -> None:
        self.context.launchers.stop_job(session.data_source_name, session.job_id)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    """``action`` run on the first call only; later calls repeat its outcome (its error)."""
    outcome: list[AsyncQueryError | None] = []

    def call() -> None:
        if not outcome:
            try:
                action()
                outcome.append(None)
            except AsyncQueryError as exc:
                outcome.append(exc)
        if outcome[0] is not None:
            raise outcome[0]

    return call
