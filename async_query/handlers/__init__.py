"""One handler per query kind, behind one small interface (:class:`.base.QueryHandler`).

:class:`Handlers` is the table the service routes on: POST by the classifier's kind
(:mod:`async_query.dispatch`), GET and DELETE by the kind the statement's session records.
"""

from __future__ import annotations

from async_query.caches import Cache
from async_query.dispatch import QueryKind, kind_of_session
from async_query.handlers.base import HandlerContext, QueryHandler, SubmitRequest, Submitted
from async_query.handlers.batch import BatchHandler
from async_query.handlers.index_dml import IndexDmlHandler
from async_query.handlers.interactive import InteractiveHandler
from async_query.handlers.streaming import StreamingHandler
from query_core.models import SessionDoc, StatementDoc, Versioned

__all__ = ["HandlerContext", "Handlers", "QueryHandler", "SubmitRequest", "Submitted"]


class Handlers:
    """A handler for every query kind, and the kind of each session this process has seen (a
    session's ``sessionType`` never changes, so GET and DELETE route without reading the session
    when the handler does not need it)."""

    def __init__(self, context: HandlerContext, kinds_kept: int) -> None:
        handlers: list[QueryHandler] = [
            InteractiveHandler(context),
            BatchHandler(context),
            StreamingHandler(context),
            IndexDmlHandler(context),
        ]
        self.table: dict[QueryKind, QueryHandler] = {handler.kind: handler for handler in handlers}
        assert set(self.table) == set(QueryKind), "every query kind needs a handler"
        #: The kind of a session's queries, by session id.
        self.kinds: Cache[str, QueryKind] = Cache(kinds_kept)

    def __getitem__(self, kind: QueryKind) -> QueryHandler:
        return self.table[kind]

    @property
    def interactive(self) -> InteractiveHandler:
        """The interactive handler, typed as such (for tests and tools that reach into it)."""
        handler = self.table[QueryKind.INTERACTIVE]
        assert isinstance(handler, InteractiveHandler)
        return handler

    def submitted(self, submitted: Submitted) -> None:
        """Remember the kind of the session a POST used."""
        self.kinds.put(submitted.session_id, submitted.kind)

    def knows(self, session_id: str) -> bool:
        return self.kinds.get(session_id) is not None

    def kind_seen(self, session_id: str) -> QueryKind | None:
        """The kind of a session as this process has seen it, without counting a cache lookup."""
        return self.kinds.peek(session_id)

    def of(self, statement: StatementDoc, session: Versioned[SessionDoc] | None) -> QueryHandler:
        """The handler of a statement, by the ``sessionType`` its session document records.

        A statement without a session document is interactive: the reference tracks only
        interactive sessions, and this product writes a session for every kind.
        """
        if session is not None:
            kind = kind_of_session(session.doc.session_type)
            self.kinds.put(session.doc.session_id, kind)
        else:
            kind = self.kinds.get(statement.session_id) or QueryKind.INTERACTIVE
        return self.table[kind]

    def close(self) -> None:
        for handler in self.table.values():
            handler.close()
