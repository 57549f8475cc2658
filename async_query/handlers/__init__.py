"""One handler per query kind, behind one small interface (:class:`.base.QueryHandler`).

:func:`handlers_for` builds the table the service routes on: POST by the classifier's kind
(:mod:`async_query.dispatch`), GET and DELETE by the kind the statement's session records.
"""

from __future__ import annotations

from async_query.dispatch import QueryKind
from async_query.handlers.base import HandlerContext, QueryHandler, SubmitRequest, Submitted
from async_query.handlers.batch import BatchHandler
from async_query.handlers.index_dml import IndexDmlHandler
from async_query.handlers.interactive import InteractiveHandler
from async_query.handlers.streaming import StreamingHandler

__all__ = ["HandlerContext", "QueryHandler", "SubmitRequest", "Submitted", "handlers_for"]


def handlers_for(context: HandlerContext) -> dict[QueryKind, QueryHandler]:
    """One handler for every query kind."""
    handlers: list[QueryHandler] = [
        InteractiveHandler(context),
        BatchHandler(context),
        StreamingHandler(context),
        IndexDmlHandler(context),
    ]
    table = {handler.kind: handler for handler in handlers}
    assert set(table) == set(QueryKind), "every query kind needs a handler"
    return table
