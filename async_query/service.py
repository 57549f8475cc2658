"""The service the REST layer calls: a thin facade over the query handlers.

POST classifies the query (:mod:`async_query.dispatch`) and hands it to the handler of its kind;
GET and DELETE read the statement and route on the ``sessionType`` its session document records
(:mod:`async_query.handlers`), never re-parsing the query. Rendering is :mod:`async_query.replies`.

Each call takes the caller (a :class:`Principal`; in-process callers default to the admin of
``none``): POST needs the datasource's ``allowedRoles``, GET and DELETE are for the query's
submitter or an admin, the session listing shows a user their own sessions (docs/security.md).

Hot paths read by id (real-time) and write conditionally; nothing here depends on a search
seeing a fresh write.
"""

from __future__ import annotations

import logging
import threading

from async_query import datasource_dialect as dialect
from async_query import logs, metrics
from async_query.caches import Cache
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.dispatch import QueryKind, classify, kind_of_session
from async_query.handlers import HandlerContext, QueryHandler, SubmitRequest, Submitted, handlers_for
from async_query.handlers.interactive import InteractiveHandler
from async_query.health import Health
from async_query.job_figures import MetricsWorker
from async_query.launcher.base import Launcher, launcher_policy, stop_job_within
from async_query.liveness import LivenessChecker, Staleness
from async_query.replies import GONE, Page, page_reply, success_reply
from async_query.security.authz import check_datasource_access, check_owner
from async_query.security.principal import ANONYMOUS, Principal
from async_query.session_cache import SessionCache
from async_query.settings import Settings
from async_query.stats import Stats
from async_query.stream_watch import StreamWatcher
from async_query.streams import StreamStopper
from async_query.workers import CancelSupervisor, Housekeeper, Lease, StreamingHousekeeper
from query_core.config import OpenSearchConfig
from query_core.errors import InvalidRequestError, QueryNotFoundError, UnknownDatasourceError
from query_core.ids import datasource_of
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.realtime import ReadNotServed
from query_core.states import SessionState, StatementState, is_terminal
from query_core.store import Store
from query_core.validation import StatementLimits, check_limits, validate_query

__all__ = ["AsyncQueryService", "Page", "SubmitRequest", "Submitted", "success_reply"]

log = logging.getLogger(__name__)


class AsyncQueryService:
    """POST, GET, DELETE and the session listing, as the REST layer calls them.

    It owns what every handler shares (launchers, liveness, the cancel supervisor, housekeeping,
    the caches of finished replies and of each query's session); the handlers hold the logic of
    their query kind.
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        datasources: DatasourceRegistry,
        launchers: dict[str, Launcher],
        opensearch: OpenSearchConfig,
    ) -> None:
        self.settings = settings
        self.store = store
        self.datasources = datasources
        #: Launchers by engine (``local``, ``emr-serverless``); an EMR Serverless one is otherwise
        #: built from the settings, per execution role.
        self.launchers = launchers
        datasources.default_engine = self.default_engine
        datasources.limit = settings.datasources_limit
        #: The connection the jobs use (it may differ from the plugin's, e.g. a public endpoint).
        self.opensearch = opensearch
        #: Finished replies (they never change), bounded by their bytes.
        self.replies: Cache[str, bytes] = Cache(settings.reply_cache_bytes, sizeof=len)
        #: Which session a query runs in (it never changes), so GET can read both at once.
        self.session_of_query: Cache[str, str] = Cache(settings.reply_cache_entries * 10)
        #: Who submitted a query ("" for nobody recorded; it never changes), so that a cached reply
        #: is served to its submitter without reading the statement.
        self.owner_of_query: Cache[str, str] = Cache(settings.reply_cache_entries * 10)
        #: The kind of a session's queries (its ``sessionType`` never changes), so that GET and
        #: DELETE route without reading the session when the handler does not need it.
        self.kind_of_session_id: Cache[str, QueryKind] = Cache(settings.reply_cache_entries * 10)
        #: Sessions as GET last read them (see :mod:`async_query.session_cache`).
        self.session_cache = SessionCache(settings.session_cache_ms / 1000, settings.reply_cache_entries)
        store.index.write_listeners.append(self.session_cache.forget)
        #: EMR Serverless launchers built from the settings, by execution role.
        self._emr_launchers: dict[str, Launcher] = {}
        self._launcher_lock = threading.Lock()
        self.liveness = LivenessChecker(
            store,
            self._launcher_of_session,
            Staleness(settings.stale_heartbeats, settings.session_start_timeout_s, settings.heartbeat_idle_ms),
            settings.liveness_cache_s,
        )
        self.supervisor = CancelSupervisor(
            store,
            self.liveness,
            self._launcher_of_session,
            settings.cancel_deadline_s,
            stop_timeout_s=settings.stop_job_timeout_s,
        )
        self.housekeeper = Housekeeper(
            store,
            datasources,
            self.liveness,
            settings.housekeeping_interval_s,
            settings.request_retention_days,
            settings.result_retention_days,
            Lease(store, "housekeeping-lease", lease_ms=int(settings.housekeeping_interval_s * 2000)),
            self.supervisor,
            dml_timeout_s=settings.index_dml_timeout_s,
            index_op_stall_s=settings.index_op_stall_s,
            launchers=self._all_launchers,
            job_files_days=settings.job_files_retention_days,
        )
        #: Stops streaming jobs (ALTER to manual refresh, DROP, the streaming housekeeper).
        self.stream_stopper = StreamStopper(
            store, self._stop_job, self.liveness.end_session, settings.stream_stop_timeout_s
        )
        self.streaming_housekeeper = StreamingHousekeeper(
            store,
            datasources,
            self.liveness,
            self.stream_stopper.stop,
            settings.streaming_housekeeping_interval_s,
        )
        #: Notices a dead stream within its staleness limit (its index then fails with the cause).
        self.stream_watcher = StreamWatcher(store, self.liveness, settings.stream_watch_interval_s)
        #: ``GET /_plugins/_async_query/_health`` (docs/metrics.md).
        self.health = Health(self, settings.health_timeout_s, settings.health_cache_s)
        self.metrics_worker = MetricsWorker(store, settings.metrics_interval_s, health=self.health)
        if settings.metrics_enabled:
            self._count_for_metrics()
        self.handlers: dict[QueryKind, QueryHandler] = handlers_for(
            HandlerContext(
                settings=settings,
                store=store,
                datasources=datasources,
                liveness=self.liveness,
                supervisor=self.supervisor,
                launcher_for=self.launcher_for,
                opensearch=opensearch,
                stop_job=self._stop_job,
                stream_stopper=self.stream_stopper,
            )
        )

    def _count_for_metrics(self) -> None:
        """Feed the metrics (docs/metrics.md): this process's index calls, the queries it ends,
        its GET caches' lookups, and the stats' rolling counters."""
        settings = self.settings
        metrics.stats = Stats(settings.stats_rolling_window_s, settings.stats_rolling_interval_s)
        self.store.index.call_listeners.append(metrics.index_call)
        self.store.statements.end_listeners.append(self._statement_ended)
        for name, cache in (
            ("replies", self.replies),
            ("session_of_query", self.session_of_query),
            ("sessions", self.session_cache.cache),
        ):
            metrics.caches.watch(name, cache)

    def _statement_ended(self, doc: StatementDoc) -> None:
        kind = self.kind_of_session_id.peek(doc.session_id)
        metrics.query_finished(doc.data_source_name, kind.value if kind is not None else "unknown", doc.state.value)

    def start_workers(self) -> None:
        """Start the background loops (cancel supervision, housekeeping, metrics); tests drive
        them by hand."""
        self.supervisor.start()
        self.housekeeper.start()
        self.streaming_housekeeper.start()
        self.stream_watcher.start()
        if self.settings.metrics_enabled:
            self.metrics_worker.start()

    @property
    def default_engine(self) -> str:
        """The engine of datasources that name none: EMR Serverless when the settings configure
        it (as the reference runs every S3GLUE datasource there), else local Spark."""
        if self.settings.spark_execution_engine_config is not None:
            return dialect.EMR_SERVERLESS
        return dialect.LOCAL if dialect.LOCAL in self.launchers else next(iter(self.launchers), dialect.LOCAL)

    def check_datasource(self, datasource: Datasource) -> None:
        """Refuse (a 400) a datasource this deployment cannot run: an engine it has no launcher
        for, or an execution role its settings do not list (docs/datasources.md)."""
        engine = datasource.engine or self.default_engine
        emr = self.settings.spark_execution_engine_config
        if engine not in self.launchers and not (engine == dialect.EMR_SERVERLESS and emr is not None):
            raise InvalidRequestError(
                f"engine {engine} is not available here: EMR Serverless needs ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG"
            )
        role = datasource.properties.get(dialect.EXECUTION_ROLE)
        allowed = {*self.settings.emr_execution_roles, *([emr.execution_role_arn] if emr else [])}
        if role is not None and role not in allowed:
            raise InvalidRequestError(
                f"{dialect.EXECUTION_ROLE} must be one of the execution roles listed in ASYNC_QUERY_EMR_EXECUTION_ROLES"
            )

    def launcher_for(self, datasource: Datasource) -> Launcher:
        """The launcher of a datasource's engine: shared, or built for EMR Serverless from the
        settings (one per execution role)."""
        engine = datasource.engine or self.default_engine
        if engine in self.launchers:
            return self.launchers[engine]
        if engine == dialect.EMR_SERVERLESS:
            from async_query.launcher.emr import execution_role_of, launcher_from_settings

            role = execution_role_of(datasource, self.settings)
            with self._launcher_lock:
                launcher = self._emr_launchers.get(role)
                if launcher is None:
                    launcher = self._emr_launchers[role] = launcher_from_settings(self.settings, role)
                return launcher
        raise UnknownDatasourceError(f"no launcher for engine {engine!r} of datasource {datasource.name!r}")

    def _stop_job(self, datasource: str, job_id: str) -> None:
        """Cancel a job through its datasource's launcher, waiting at most ``stop_job_timeout_s``."""
        launcher = self.launcher_for(self.datasources.get(datasource))
        stop_job_within(launcher, job_id, self.settings.stop_job_timeout_s)

    def _launcher_of_session(self, session: SessionDoc) -> Launcher:
        return self.launcher_for(self.datasources.get(session.data_source_name))

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> Submitted:
        """Refuse a caller outside the datasource's ``allowedRoles`` (a 403), classify the query,
        refuse what its datasource's validation policy denies (a 400), all before anything is
        written or started, and hand it to its kind's handler (a malformed Flint statement is a
        400)."""
        datasource = self.datasources.get(request.datasource)  # an unknown datasource is refused first, as always
        check_datasource_access(request.principal, datasource)
        limits = StatementLimits(self.settings.max_query_chars, self.settings.max_statement_depth)
        tokens = check_limits(request.query, request.lang, limits)  # before any parser recurses
        classified = classify(request.lang, request.query)
        validate_query(
            launcher_policy(datasource, self.launcher_for(datasource)),
            request.lang,
            request.query,
            classified.statement,
            tokens=tokens,
        )
        submitted = self.handlers[classified.kind].submit(request, classified)
        self.owner_of_query.put(submitted.query_id, request.submitted_by or "")
        metrics.query_submitted(datasource.name, submitted.kind.value)
        self.session_of_query.put(submitted.query_id, submitted.session_id)
        self.kind_of_session_id.put(submitted.session_id, submitted.kind)
        return submitted

    def looks_alive(self, session: SessionDoc) -> bool:
        """Alive by its documents alone: not ended, and its heartbeat (or start-up) is recent."""
        return self.liveness.staleness.is_fresh(session)

    # -- routing ----------------------------------------------------------------------------

    @property
    def interactive(self) -> InteractiveHandler:
        """The interactive handler, typed as such (for tests and tools that reach into it)."""
        handler = self.handlers[QueryKind.INTERACTIVE]
        assert isinstance(handler, InteractiveHandler)
        return handler

    def handler_of(self, statement: StatementDoc, session: Versioned[SessionDoc] | None) -> QueryHandler:
        """The handler of a statement, by the ``sessionType`` its session document records.

        A statement without a session document is interactive: the reference tracks only
        interactive sessions, and this product writes a session for every kind.
        """
        if session is not None:
            kind = kind_of_session(session.doc.session_type)
            self.kind_of_session_id.put(session.doc.session_id, kind)
        else:
            kind = self.kind_of_session_id.get(statement.session_id) or QueryKind.INTERACTIVE
        return self.handlers[kind]

    def _session_for_routing(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None, needed: bool
    ) -> Versioned[SessionDoc] | None:
        """``session``, or the statement's session read by id when the handler needs it
        (``needed``) or its kind is not known yet in this process."""
        if session is not None or (not needed and self.kind_of_session_id.get(statement.doc.session_id) is not None):
            return session
        return self.store.sessions.get(statement.doc.data_source_name, statement.doc.session_id)

    # -- GET --------------------------------------------------------------------------------
    #
    # One shape, two ways of waiting: a finished reply comes from the cache; otherwise the
    # statement (and its session, when this process knows which it is) is read by id, and its
    # handler answers. The REST layer first tries :meth:`get_without_blocking` on the event loop,
    # which answers only what its handler says needs no blocking call, then :meth:`get` in a
    # worker thread.

    def get(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes:
        """The JSON reply for GET (bytes: the result rows are passed through as stored), for the
        query's submitter or an admin."""
        cached = self.replies.get(query_id)
        if cached is not None and self._cleared_by_cache(principal, query_id):
            return cached
        statement, session = self._statement_and_session(query_id)
        logs.note(session_id=statement.doc.session_id)
        self._authorize(principal, statement.doc)
        if cached is not None:
            return cached
        # A statement still going is answered with its session (liveness, progress).
        session = self._session_for_routing(statement, session, needed=not is_terminal(statement.doc.state))
        return self._answer(statement, session)

    async def get_without_blocking(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes | None:
        """GET's reply when it can be had on the event loop: a finished reply from the cache, or
        one its handler answers without blocking (:meth:`QueryHandler.answers_without_blocking`),
        read on the event loop. None: call :meth:`get` in a worker thread."""
        cached = self.replies.get(query_id)
        if cached is not None:
            return cached if self._cleared_by_cache(principal, query_id) else None
        known = self._known_session(query_id)
        if known is None:
            return None
        datasource, session_id, session = known
        generation = self.session_cache.generation()
        try:
            statement, read = await self.store.statement_and_session_async(
                datasource, query_id, None if session is not None else session_id
            )
        except ReadNotServed:
            return None
        session = self._keep_session(read, generation) or session
        if statement is None or session is None:
            return None
        self._authorize(principal, statement.doc)
        handler = self.handler_of(statement.doc, session)
        if not handler.answers_without_blocking(statement.doc, session.doc):
            return None
        return self._answer(statement, session, handler)

    def _cleared_by_cache(self, principal: Principal, query_id: str) -> bool:
        """Whether the caller may have a cached reply by what this process knows: True for an
        admin or the submitter (:attr:`owner_of_query`), a 403 for another user, False when the
        submitter is not known here (then read the statement and :meth:`_authorize`)."""
        if principal.is_admin:
            return True
        owner = self.owner_of_query.get(query_id)
        if owner is None:
            return False
        check_owner(principal, owner, query_id)
        return True

    def _authorize(self, principal: Principal, statement: StatementDoc) -> None:
        """GET and DELETE of ``statement``: its submitter or an admin, else a 403 (before
        anything else is said or done about the query)."""
        if principal.is_admin:
            return
        self.owner_of_query.put(statement.query_id, statement.submitted_by or "")
        check_owner(principal, statement.submitted_by, statement.query_id)

    def get_page(self, query_id: str, page: Page, principal: Principal = ANONYMOUS) -> bytes:
        """GET with paging (``docs/api.md``), for the query's submitter or an admin: rows of a
        successful result, read from the documents that hold them (not cached: a script reads
        each page once). A statement that has not succeeded gets the reply of :meth:`get`."""
        statement, session = self._statement_and_session(query_id)
        doc = statement.doc
        logs.note(session_id=doc.session_id)
        self._authorize(principal, doc)
        if doc.state != StatementState.SUCCESS:
            return self._answer(statement, self._session_for_routing(statement, session, not is_terminal(doc.state)))
        result_index = self.datasources.get(doc.data_source_name).results
        result = self.store.results.get(result_index, query_id)
        if result is None:
            return self._answer(statement, session)  # the reply saying the result is gone
        if result.lossless is None:
            return page_reply(result, None, page)
        try:
            found = self.store.results.page(
                result_index, result, page.offset, page.size, self.settings.result_chunk_bytes
            )
        except LookupError as exc:
            log.warning("GET %s: %s", query_id, exc)
            return GONE
        return page_reply(result, found, page)

    def _answer(
        self,
        statement: Versioned[StatementDoc],
        session: Versioned[SessionDoc] | None,
        handler: QueryHandler | None = None,
    ) -> bytes:
        reply = (handler or self.handler_of(statement.doc, session)).get(statement, session)
        if reply.final:
            self.replies.put(statement.doc.query_id, reply.body)
        return reply.body

    def _known_session(self, query_id: str) -> tuple[str, str, Versioned[SessionDoc] | None] | None:
        """The datasource and session of a query this process has seen, and the session as read
        moments ago (if it was); None when finding out may need a blocking read."""
        session_id = self.session_of_query.get(query_id)
        if session_id is None:
            return None
        datasource = datasource_of(query_id)  # the id was served before: it decodes
        if self.datasources.known(datasource) is None:
            return None
        return datasource, session_id, self.session_cache.get(session_id)

    def _keep_session(self, read: Versioned[SessionDoc] | None, generation: int) -> Versioned[SessionDoc] | None:
        if read is not None:
            self.session_cache.put(read, generation)
        return read

    def _datasource_of_query(self, query_id: str) -> str:
        datasource = datasource_of(query_id)
        try:
            self.datasources.get(datasource)
        except UnknownDatasourceError:
            raise QueryNotFoundError(f"no async query with id {query_id}") from None
        return datasource

    def _statement(self, query_id: str) -> Versioned[StatementDoc]:
        statement = self.store.statements.get(self._datasource_of_query(query_id), query_id)
        if statement is None:
            raise QueryNotFoundError(f"no async query with id {query_id}")
        return statement

    def _statement_and_session(self, query_id: str) -> tuple[Versioned[StatementDoc], Versioned[SessionDoc] | None]:
        """The statement, read by id every time, and its session when this process knows which it
        is (from the POST or an earlier GET): from the session cache when it was read moments ago,
        otherwise read in real time with the statement."""
        datasource = self._datasource_of_query(query_id)
        session_id = self.session_of_query.get(query_id)
        if session_id is None:
            statement = self._statement(query_id)
            self.session_of_query.put(query_id, statement.doc.session_id)
            return statement, None
        session = self.session_cache.get(session_id)
        if session is not None:
            return self._statement(query_id), session
        generation = self.session_cache.generation()
        found, read = self.store.statement_and_session(datasource, query_id, session_id)
        if found is None:
            raise QueryNotFoundError(f"no async query with id {query_id}")
        return found, self._keep_session(read, generation)

    # -- listing ----------------------------------------------------------------------------

    def sessions(
        self,
        datasource: str | None = None,
        states: list[SessionState] | None = None,
        size: int = 100,
        principal: Principal = ANONYMOUS,
    ) -> list[SessionDoc]:
        """Sessions, most recently active first (a search: it lags writes by up to a refresh);
        a non-admin's own only (filtered in the search, so ``size`` counts theirs)."""
        if datasource is not None:
            self.datasources.get(datasource)
        wanted = states or list(SessionState)
        mine = None if principal.is_admin else principal.name
        return [v.doc for v in self.store.sessions.find(datasource, wanted, size=size, submitted_by=mine)]

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, query_id: str, principal: Principal = ANONYMOUS) -> None:
        """DELETE, for the query's submitter or an admin."""
        statement = self._statement(query_id)
        logs.note(session_id=statement.doc.session_id)
        self._authorize(principal, statement.doc)
        session = self._session_for_routing(statement, None, needed=False)
        self.handler_of(statement.doc, session).cancel(statement)

    def close(self) -> None:
        self.metrics_worker.stop()
        self.health.close()
        self.supervisor.stop()
        self.housekeeper.stop()
        self.streaming_housekeeper.stop()
        self.stream_watcher.stop()
        self.stream_stopper.close()
        for handler in self.handlers.values():
            handler.close()
        for launcher in self._all_launchers():
            launcher.close()

    def _all_launchers(self) -> list[Launcher]:
        """The launchers by connector, and those built per EMR Serverless execution role so far."""
        with self._launcher_lock:
            built = list(self._emr_launchers.values())
        return [*self.launchers.values(), *built]
