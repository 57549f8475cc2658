"""The service's use cases, as the REST layer calls them: submit, get, cancel, and the session list.

POST classifies the query (:mod:`async_query.dispatch`) and hands it to the handler of its kind;
GET is the read model's (:mod:`async_query.reads`); DELETE reads the statement there and routes on
the ``sessionType`` its session document records (:mod:`async_query.handlers`), never re-parsing
the query. What each use case needs is given when the plugin is built (:mod:`async_query.runtime`).

Each call takes the caller (a :class:`Principal`; in-process callers default to the admin of
``none``): POST needs the datasource's ``allowedRoles``, GET and DELETE are for the query's
submitter or an admin, the session listing shows a user their own sessions (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from async_query import metrics
from async_query.datasources import DatasourceRegistry
from async_query.dispatch import Classified, classify
from async_query.handlers import Handlers, SubmitRequest, Submitted
from async_query.launcher.base import launcher_policy
from async_query.launcher.registry import LauncherRegistry
from async_query.reads import QueryReads
from async_query.replies import Page
from async_query.security.authz import check_datasource_access
from async_query.security.principal import ANONYMOUS, Principal
from query_core.flint import check_catalog
from query_core.models import PoolJobDoc, SessionDoc
from query_core.states import SessionState
from query_core.store import PoolJobRepository, SessionRepository, UsageRepository
from query_core.validation import StatementLimits, check_limits, validate_query

__all__ = ["AsyncQueryService", "StorageBound", "SubmitRequest", "Submitted"]


@dataclass(frozen=True)
class StorageBound:
    """What one user's statements and results may hold in the index (bytes; 0: no bound), counted
    over the last ``window_days`` (docs/security.md, "What one user may store")."""

    max_bytes: int = 0
    window_days: float = 60.0

#: Routes a classified statement of a datasource, for a caller, by its index's refresh mode.
Route = Callable[[Classified, str, Principal], Classified]


class AsyncQueryService:
    """POST, GET, DELETE and the session listing."""

    def __init__(
        self,
        datasources: DatasourceRegistry,
        launchers: LauncherRegistry,
        handlers: Handlers,
        reads: QueryReads,
        sessions: SessionRepository,
        pool: PoolJobRepository,
        limits: StatementLimits,
        usage: UsageRepository | None = None,
        storage: StorageBound | None = None,
        route: Route | None = None,
    ) -> None:
        self.datasources = datasources
        self.launchers = launchers
        self.handlers = handlers
        self.reads = reads
        self._sessions = sessions
        self._pool = pool
        #: A statement's size and nesting depth, checked before any parser reads it.
        self.limits = limits
        self._usage = usage
        #: What one user may store in the index; each statement is charged against it at POST.
        self.storage = storage or StorageBound()
        #: The kind that runs a classified statement, given how its index is refreshed (a
        #: scheduled index's CREATE is batch; :mod:`async_query.scheduler.modes`); None: its class's.
        self.route = route

    def submit(self, request: SubmitRequest) -> Submitted:
        """Refuse a caller outside the datasource's ``allowedRoles`` (a 403), classify the query,
        refuse what its datasource's validation policy denies (a 400), all before anything is
        written or started, and hand it to its kind's handler (a malformed Flint statement is a
        400)."""
        datasource = self.datasources.get(request.datasource)  # an unknown datasource is refused first, as always
        check_datasource_access(request.principal, datasource)
        tokens = check_limits(request.query, request.lang, self.limits)  # before any parser recurses
        classified = classify(request.lang, request.query)
        if classified.statement is not None:
            check_catalog(classified.statement, datasource.name)  # its own indexes only
        policy = launcher_policy(datasource, self.launchers.for_datasource(datasource))
        validate_query(policy, request.lang, request.query, classified.statement, tokens=tokens)
        if self.route is not None and classified.statement is not None:
            classified = self.route(classified, datasource.name, request.principal)
        self._charge(request)  # the last check: a statement refused before is not counted
        submitted = self.handlers[classified.kind].submit(request, classified)
        self.reads.submitted(submitted, request.submitted_by)
        self.handlers.submitted(submitted)
        metrics.query_submitted(datasource.name, submitted.kind.value)
        return submitted

    def _charge(self, request: SubmitRequest) -> None:
        """Count the statement against its submitter's bound (a 429 past it, a 400 for a statement
        larger than the bound itself), in one conditional write (docs/security.md)."""
        bound = self.storage
        if self._usage is not None and bound.max_bytes:
            self._usage.charge_statement(request.submitted_by, request.query, bound.max_bytes, bound.window_days)

    def get(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes:
        """GET's reply, for the query's submitter or an admin (:meth:`QueryReads.get`)."""
        return self.reads.get(query_id, principal)

    async def get_without_blocking(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes | None:
        """GET's reply when it can be had on the event loop, else None (:mod:`async_query.reads`)."""
        return await self.reads.get_without_blocking(query_id, principal)

    def get_page(self, query_id: str, page: Page, principal: Principal = ANONYMOUS) -> bytes:
        """GET with paging (``docs/api.md``)."""
        return self.reads.get_page(query_id, page, principal)

    def cancel(self, query_id: str, principal: Principal = ANONYMOUS) -> None:
        """DELETE, for the query's submitter or an admin."""
        statement, session = self.reads.statement_for(query_id, principal)
        self.handlers.of(statement.doc, session).cancel(statement)

    def sessions(
        self,
        datasource: str | None = None,
        states: list[SessionState] | None = None,
        size: int = 100,
        principal: Principal = ANONYMOUS,
    ) -> list[SessionDoc]:
        """Sessions, most recently active first (a search, of the indexes refreshed first: a session
        started a moment ago is listed); a non-admin's own only (filtered in the search, so ``size``
        counts theirs)."""
        if datasource is not None:
            self.datasources.get(datasource)
        wanted = states or list(SessionState)
        mine = None if principal.is_admin else principal.name
        return [v.doc for v in self._sessions.find(datasource, wanted, size=size, submitted_by=mine, fresh=True)]

    def pool_jobs(self, size: int = 100, principal: Principal = ANONYMOUS) -> list[PoolJobDoc]:
        """The warm pools' live jobs, most recently active first (a search), for admins: they
        belong to no user until a session claims one."""
        return [v.doc for v in self._pool.live(size, fresh=True)] if principal.is_admin else []
