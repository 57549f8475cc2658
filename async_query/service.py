"""The service the REST layer calls: a thin facade over the query handlers.

POST classifies the query (:mod:`async_query.dispatch`) and hands it to the handler of its kind;
GET and DELETE read the statement and route on the ``sessionType`` its session document records
(:mod:`async_query.handlers`), never re-parsing the query. Rendering is :mod:`async_query.replies`.

Hot paths read by id (real-time) and write conditionally; nothing here depends on a search
seeing a fresh write.
"""

from __future__ import annotations

import logging
import threading

from async_query.caches import Cache
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.dispatch import QueryKind, classify, kind_of_session
from async_query.handlers import HandlerContext, QueryHandler, SubmitRequest, Submitted, handlers_for
from async_query.handlers.interactive import InteractiveHandler
from async_query.launcher.base import Launcher, launcher_policy, stop_job_within
from async_query.liveness import LivenessChecker, Staleness
from async_query.replies import GONE, Page, page_reply, success_reply
from async_query.session_cache import SessionCache
from async_query.settings import Settings
from async_query.streams import StreamStopper
from async_query.workers import CancelSupervisor, Housekeeper, Lease, StreamingHousekeeper
from query_core.config import OpenSearchConfig
from query_core.errors import QueryNotFoundError, UnknownDatasourceError
from query_core.ids import datasource_of
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.realtime import ReadNotServed
from query_core.states import SessionState, StatementState, is_terminal
from query_core.store import Store
from query_core.validation import validate_query

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
        self.launchers = launchers
        #: The connection the jobs use (it may differ from the plugin's, e.g. a public endpoint).
        self.opensearch = opensearch
        #: Finished replies (they never change), bounded by their bytes.
        self.replies: Cache[str, bytes] = Cache(settings.reply_cache_bytes, sizeof=len)
        #: Which session a query runs in (it never changes), so GET can read both at once.
        self.session_of_query: Cache[str, str] = Cache(settings.reply_cache_entries * 10)
        #: The kind of a session's queries (its ``sessionType`` never changes), so that GET and
        #: DELETE route without reading the session when the handler does not need it.
        self.kind_of_session_id: Cache[str, QueryKind] = Cache(settings.reply_cache_entries * 10)
        #: Sessions as GET last read them (see :mod:`async_query.session_cache`).
        self.session_cache = SessionCache(settings.session_cache_ms / 1000, settings.reply_cache_entries)
        store.index.write_listeners.append(self.session_cache.forget)
        self._emr_launchers: dict[str, tuple[Datasource, Launcher]] = {}
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

    def start_workers(self) -> None:
        """Start the background loops (cancel supervision, housekeeping); tests drive them by hand."""
        self.supervisor.start()
        self.housekeeper.start()
        self.streaming_housekeeper.start()

    def launcher_for(self, datasource: Datasource) -> Launcher:
        """The launcher of a datasource: shared by connector, or built per EMR Serverless datasource."""
        if datasource.connector in self.launchers:
            return self.launchers[datasource.connector]
        if datasource.connector == "emr-serverless":
            with self._launcher_lock:
                known = self._emr_launchers.get(datasource.name)
                if known is None or known[0] != datasource:
                    from async_query.launcher.emr import launcher_for_datasource

                    known = (datasource, launcher_for_datasource(datasource, self.settings))
                    self._emr_launchers[datasource.name] = known
                return known[1]
        raise UnknownDatasourceError(f"no launcher for connector {datasource.connector!r}")

    def _stop_job(self, datasource: str, job_id: str) -> None:
        """Cancel a job through its datasource's launcher, waiting at most ``stop_job_timeout_s``."""
        launcher = self.launcher_for(self.datasources.get(datasource))
        stop_job_within(launcher, job_id, self.settings.stop_job_timeout_s)

    def _launcher_of_session(self, session: SessionDoc) -> Launcher:
        return self.launcher_for(self.datasources.get(session.data_source_name))

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> Submitted:
        """Classify the query, refuse what its datasource's validation policy denies (a 400, before
        anything is written or started), and hand it to its kind's handler (a malformed Flint
        statement is a 400)."""
        datasource = self.datasources.get(request.datasource)  # an unknown datasource is refused first, as always
        classified = classify(request.lang, request.query)
        validate_query(
            launcher_policy(datasource, self.launcher_for(datasource)),
            request.lang,
            request.query,
            classified.statement,
        )
        submitted = self.handlers[classified.kind].submit(request, classified)
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

    def get(self, query_id: str) -> bytes:
        """The JSON reply for GET (bytes: the result rows are passed through as stored)."""
        cached = self.replies.get(query_id)
        if cached is not None:
            return cached
        statement, session = self._statement_and_session(query_id)
        # A statement still going is answered with its session (liveness, progress).
        session = self._session_for_routing(statement, session, needed=not is_terminal(statement.doc.state))
        return self._answer(statement, session)

    async def get_without_blocking(self, query_id: str) -> bytes | None:
        """GET's reply when it can be had on the event loop: a finished reply from the cache, or
        one its handler answers without blocking (:meth:`QueryHandler.answers_without_blocking`),
        read on the event loop. None: call :meth:`get` in a worker thread."""
        cached = self.replies.get(query_id)
        if cached is not None:
            return cached
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
        handler = self.handler_of(statement.doc, session)
        if not handler.answers_without_blocking(statement.doc, session.doc):
            return None
        return self._answer(statement, session, handler)

    def get_page(self, query_id: str, page: Page) -> bytes:
        """GET with paging (``docs/api.md``): rows of a successful result, read from the documents
        that hold them (not cached: a script reads each page once). A statement that has not
        succeeded gets the reply of :meth:`get`."""
        statement, session = self._statement_and_session(query_id)
        doc = statement.doc
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
        self, datasource: str | None = None, states: list[SessionState] | None = None, size: int = 100
    ) -> list[SessionDoc]:
        """Sessions, most recently active first (a search: it lags writes by up to a refresh)."""
        if datasource is not None:
            self.datasources.get(datasource)
        wanted = states or list(SessionState)
        return [v.doc for v in self.store.sessions.find(datasource, wanted, size=size)]

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, query_id: str) -> None:
        statement = self._statement(query_id)
        session = self._session_for_routing(statement, None, needed=False)
        self.handler_of(statement.doc, session).cancel(statement)

    def close(self) -> None:
        self.supervisor.stop()
        self.housekeeper.stop()
        self.streaming_housekeeper.stop()
        self.stream_stopper.close()
        for handler in self.handlers.values():
            handler.close()
        launchers = [*self.launchers.values(), *(launcher for _, launcher in self._emr_launchers.values())]
        for launcher in launchers:
            launcher.close()
