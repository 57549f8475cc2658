"""Batch queries (manual CREATE, REFRESH, VACUUM): a job of their own per statement. Not yet:
a placeholder that refuses them (:mod:`async_query.handlers.placeholder`)."""

from __future__ import annotations

from async_query.dispatch import QueryKind
from async_query.handlers.placeholder import PlaceholderHandler


class BatchHandler(PlaceholderHandler):
    kind = QueryKind.BATCH
    # SPEC section 7: DELETE stops the job (and a REFRESH's index goes back to active).
    cannot_cancel = "cancelling a batch query is not supported yet"
