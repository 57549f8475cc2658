"""The query read model: GET (and its paging), its caches, and who may read what.

One shape, two ways of waiting: a finished reply comes from the cache; otherwise the statement
(and its session, when this process knows which it is) is read by id, and its handler answers.
The REST layer first tries :meth:`QueryReads.get_without_blocking` on the event loop, which
answers only what its handler says needs no blocking call, then :meth:`QueryReads.get` in a
worker thread. A query is read by its submitter or an admin (``docs/security.md``); DELETE finds
its statement here too (:meth:`QueryReads.statement_for`), under the same rule.

Hot paths read by id (real-time); nothing here depends on a search seeing a fresh write.
"""

from __future__ import annotations

import logging

from async_query import logs
from async_query.caches import Cache
from async_query.datasources import DatasourceRegistry
from async_query.handlers import Handlers, QueryHandler, Submitted
from async_query.replies import GONE, Page, page_reply
from async_query.security.authz import check_owner
from async_query.security.principal import ANONYMOUS, Principal
from async_query.session_cache import SessionCache
from async_query.settings import Settings
from query_core.errors import QueryNotFoundError, UnknownDatasourceError
from query_core.ids import datasource_of
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.realtime import ReadNotServed
from query_core.states import StatementState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)


class QueryReads:
    """GET of a query, from its documents and the caches of what never changes."""

    def __init__(self, settings: Settings, store: Store, datasources: DatasourceRegistry, handlers: Handlers) -> None:
        self.settings = settings
        self.store = store
        self.datasources = datasources
        self.handlers = handlers
        entries = settings.reply_cache_entries * 10
        #: Finished replies (they never change), bounded by their bytes.
        self.replies: Cache[str, bytes] = Cache(settings.reply_cache_bytes, sizeof=len)
        #: Which session a query runs in (it never changes), so GET can read both at once.
        self.session_of_query: Cache[str, str] = Cache(entries)
        #: Who submitted a query ("" for nobody recorded; it never changes), so that a cached reply
        #: is served to its submitter without reading the statement.
        self.owner_of_query: Cache[str, str] = Cache(entries)
        #: Sessions as GET last read them (see :mod:`async_query.session_cache`).
        self.session_cache = SessionCache(settings.session_cache_ms / 1000, settings.reply_cache_entries)

    def submitted(self, submitted: Submitted, owner: str | None) -> None:
        """Remember what a POST of this process made: the query's session and submitter."""
        self.owner_of_query.put(submitted.query_id, owner or "")
        self.session_of_query.put(submitted.query_id, submitted.session_id)

    # -- GET --------------------------------------------------------------------------------

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
        handler = self.handlers.of(statement.doc, session)
        if not handler.answers_without_blocking(statement.doc, session.doc):
            return None
        return self._answer(statement, session, handler)

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

    # -- DELETE's read ------------------------------------------------------------------------

    def statement_for(
        self, query_id: str, principal: Principal
    ) -> tuple[Versioned[StatementDoc], Versioned[SessionDoc] | None]:
        """The statement of a query, read by id, for its submitter or an admin (a 403 for anyone
        else), and its session when routing needs it."""
        statement = self._statement(query_id)
        logs.note(session_id=statement.doc.session_id)
        self._authorize(principal, statement.doc)
        return statement, self._session_for_routing(statement, None, needed=False)

    # -- who may read -----------------------------------------------------------------------

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

    # -- reading the documents ----------------------------------------------------------------

    def _answer(
        self,
        statement: Versioned[StatementDoc],
        session: Versioned[SessionDoc] | None,
        handler: QueryHandler | None = None,
    ) -> bytes:
        reply = (handler or self.handlers.of(statement.doc, session)).get(statement, session)
        if reply.final:
            self.replies.put(statement.doc.query_id, reply.body)
        return reply.body

    def _session_for_routing(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None, needed: bool
    ) -> Versioned[SessionDoc] | None:
        """``session``, or the statement's session read by id when the handler needs it
        (``needed``) or its kind is not known yet in this process."""
        if session is not None or (not needed and self.handlers.knows(statement.doc.session_id)):
            return session
        return self.store.sessions.get(statement.doc.data_source_name, statement.doc.session_id)

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
