"""The one small interface every query handler implements, and what handlers share.

A handler serves one :class:`~async_query.dispatch.QueryKind`: it accepts the POSTs the classifier
gives it, and answers GET and DELETE for the statements whose session documents record its
session type. Handlers never re-parse a query: what they need later is in the documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from async_query import logs
from async_query.catalog.readmodel import CatalogReadModel
from async_query.datasources import DatasourceRegistry
from async_query.dispatch import Classified, QueryKind
from async_query.launcher.registry import LauncherRegistry
from async_query.liveness import LivenessChecker
from async_query.pending_signals import PendingSignals
from async_query.pool import SessionJobs
from async_query.replies import Reply, needs_result, statement_reply
from async_query.scheduler.operations import ScheduleOperations
from async_query.security.principal import ANONYMOUS, Principal
from async_query.settings import Settings
from async_query.streams import StreamStopper
from async_query.workers import CancelSupervisor
from query_core.config import OpenSearchConfig
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import is_terminal
from query_core.store import Store


@dataclass(frozen=True)
class SubmitRequest:
    """A POST as the service takes it. ``principal`` is the caller (the REST layer passes the
    authenticated one; in-process callers, which are trusted, default to the admin of ``none``)."""

    datasource: str
    lang: str
    query: str
    session_id: str | None = None
    principal: Principal = ANONYMOUS

    @property
    def submitted_by(self) -> str | None:
        """The submitter recorded on what the POST writes (docs/security.md): the caller's name;
        None for the anonymous caller of ``none``, an admin, whose documents so keep the
        reference's shape (the reference plugin refuses a statement with a field it does not know)."""
        return None if self.principal.anonymous else self.principal.name


def statement_doc(
    request: SubmitRequest,
    datasource: str,
    query_id: str,
    session_id: str,
    *,
    application_id: str = "",
    job_id: str = "",
) -> StatementDoc:
    """The statement document of a POST to ``datasource`` (its statement id is its query id)."""
    logs.note(query_id=query_id, session_id=session_id)
    return StatementDoc(
        statement_id=query_id,
        query_id=query_id,
        session_id=session_id,
        lang=request.lang,
        query=request.query,
        data_source_name=datasource,
        application_id=application_id,
        job_id=job_id,
        submitted_by=request.submitted_by,
    )


@dataclass(frozen=True)
class Submitted:
    """What a POST created. ``session_id`` is the session document the statement belongs to
    (every kind has one, ``docs/documents.md``); the reply shows it only for interactive queries
    (:func:`async_query.replies.submitted_reply`)."""

    query_id: str
    session_id: str
    kind: QueryKind = QueryKind.INTERACTIVE


@dataclass(frozen=True)
class HandlerContext:
    """What the service shares with its handlers (one of each per service)."""

    settings: Settings
    store: Store
    datasources: DatasourceRegistry
    liveness: LivenessChecker
    supervisor: CancelSupervisor
    #: Which launcher runs a datasource's jobs; it also stops a job, bounded in time.
    launchers: LauncherRegistry
    #: The connection the jobs use (it may differ from the plugin's, e.g. a public endpoint).
    opensearch: OpenSearchConfig
    #: Stops streaming jobs when an operation asks (bounded: see :mod:`async_query.streams`).
    stream_stopper: StreamStopper
    #: Gives a new session its job: a warm pool job claimed, or one launched (:mod:`async_query.pool`).
    jobs: SessionJobs
    #: Writes POSTs' pending-id signals to their sessions, just after the reply.
    signals: PendingSignals
    #: Answers the catalog browse statements (None: they all go to Spark; docs/catalog.md).
    catalog: CatalogReadModel | None = None
    #: The statements about indexes the scheduler refreshes (None: this service has no scheduler).
    schedules: ScheduleOperations | None = None


class QueryHandler(Protocol):
    """POST, GET and DELETE for one query kind."""

    kind: QueryKind

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        """Write the statement (and the session when one is needed) and start or signal its work.

        Must not accept a query that cannot reach a terminal state.
        """
        ...

    def get(self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None) -> Reply:
        """The GET reply for ``statement``, read with its session (``None``: no session document)."""
        ...

    def answers_without_blocking(self, statement: StatementDoc, session: SessionDoc) -> bool:
        """Whether :meth:`get` of ``statement`` in ``session`` is CPU work alone (no launcher call,
        no write, no result read), so that it may run on the event loop."""
        ...

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        """Cancel ``statement``, or raise a 400 saying why it cannot be."""
        ...

    def close(self) -> None:
        """Release what the handler owns (its worker threads); called by the service's close."""
        ...


def fail_if_orphaned(
    store: Store, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None
) -> Versioned[StatementDoc]:
    """A statement that is not finished, in a session that is, never will be: fail it."""
    if is_terminal(statement.doc.state) or session is None or not is_terminal(session.doc.state):
        return statement
    reason = session.doc.error or f"session {session.doc.session_id} is {session.doc.state.value}"
    return store.statements.fail(statement, f"Session ended before the statement finished: {reason}")


def render(context: HandlerContext, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None) -> Reply:
    """The reply for a statement as its documents stand, reading its result when it succeeded."""
    result = None
    if needs_result(statement.doc):
        datasource = context.datasources.get(statement.doc.data_source_name)
        result = context.store.results.get(datasource.results, statement.doc.query_id)
    return statement_reply(statement, session, result)
