"""The base of the handlers of query kinds this service cannot run yet.

They refuse every POST with a 400 before anything is written, so that nothing is accepted that
could never reach a terminal state. GET answers from the documents as they stand (statements of
these kinds can only have been written by someone else); DELETE refuses as the kind's handler
will (:attr:`PlaceholderHandler.cannot_cancel`).
"""

from __future__ import annotations

from async_query.dispatch import Classified, QueryKind
from async_query.handlers.base import HandlerContext, SubmitRequest, Submitted, UnsupportedQueryError, render
from async_query.replies import Reply
from query_core.errors import InvalidRequestError
from query_core.models import SessionDoc, StatementDoc, Versioned


class PlaceholderHandler:
    kind: QueryKind
    #: Why DELETE refuses a statement of this kind (a 400).
    cannot_cancel: str

    def __init__(self, context: HandlerContext) -> None:
        self.context = context

    def submit(self, request: SubmitRequest, classified: Classified) -> Submitted:
        raise UnsupportedQueryError(
            f"{classified.what} is not supported yet: its query kind, {self.kind.value}, "
            "is one this service cannot run yet"
        )

    def get(self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None) -> Reply:
        return render(self.context, statement, session)

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        raise InvalidRequestError(self.cannot_cancel)

    def close(self) -> None:
        """Nothing to release."""
