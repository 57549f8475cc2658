"""Index DML (DROP, ALTER to manual refresh): work the plugin does itself, in a ``local`` session.
Not yet: a placeholder that refuses them (:mod:`async_query.handlers.placeholder`)."""

from __future__ import annotations

from async_query.dispatch import QueryKind
from async_query.handlers.placeholder import PlaceholderHandler


class IndexDmlHandler(PlaceholderHandler):
    kind = QueryKind.INDEX_DML
    # SPEC section 7, the reference's message.
    cannot_cancel = "can't cancel index DML query"
