"""Streaming queries (CREATE and ALTER with auto refresh, RECOVER INDEX JOB): a job that keeps an
index refreshed until stopped. Not yet: a placeholder that refuses them
(:mod:`async_query.handlers.placeholder`)."""

from __future__ import annotations

from async_query.dispatch import QueryKind
from async_query.handlers.placeholder import PlaceholderHandler


class StreamingHandler(PlaceholderHandler):
    kind = QueryKind.STREAMING
    # SPEC section 7, the reference's message: a stream is stopped by ALTER or VACUUM, not DELETE.
    cannot_cancel = (
        "can't cancel index DML query, using ALTER auto_refresh=off statement to stop job, "
        "using VACUUM statement to stop job and delete data"
    )
