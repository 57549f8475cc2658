"""Query and session ids.

An id is base64 of ten random alphanumerics followed by the datasource name, as the reference
issues them, so the datasource (and therefore the index) is known from the id alone and either
implementation can read the other's ids. Ids are drawn from :mod:`secrets`, and redrawn until the
base64 text holds no ``+`` or ``/`` so that every id is safe in a URL path.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import string
from typing import TYPE_CHECKING

from query_core.errors import MalformedIdError

if TYPE_CHECKING:
    from index_mappings import IndexKind

RANDOM_LEN = 10
_ALPHABET = string.ascii_letters + string.digits
#: Datasource names as the reference accepts them (letters first, then letters, digits, ``_-``).
#: Anchored with ``\Z``: ``$`` would also accept a trailing newline.
DATASOURCE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,127}\Z")
_ID_SHAPE = re.compile(r"^[A-Za-z0-9+/=]{16,400}\Z")


def new_id(datasource: str) -> str:
    """A fresh unguessable id that carries ``datasource``."""
    while True:
        random_part = "".join(secrets.choice(_ALPHABET) for _ in range(RANDOM_LEN))
        encoded = base64.b64encode((random_part + datasource).encode()).decode()
        if "+" not in encoded and "/" not in encoded:
            return encoded


def datasource_of(any_id: str) -> str:
    """The datasource an id was issued for; :class:`MalformedIdError` when it is not one of ours."""
    if not _ID_SHAPE.match(any_id or ""):
        raise MalformedIdError(f"malformed id: {any_id[:80]!r}")
    try:
        raw = base64.b64decode(any_id, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise MalformedIdError(f"malformed id: {any_id[:80]!r}") from None
    datasource = raw[RANDOM_LEN:]
    if len(raw) <= RANDOM_LEN or not DATASOURCE_NAME.match(datasource):
        raise MalformedIdError(f"malformed id: {any_id[:80]!r}")
    return datasource


#: The index names this product reads and writes (docs/documents.md): one request index and one
#: result index per datasource, the datasources created over REST, the schedules of scheduled
#: refresh, and one deployment-wide index of lock documents (its name sorts with the request indexes, but no datasource can own it:
#: datasource names start with a letter).
REQUEST_INDEX_PREFIX = ".query_execution_request_"
REQUEST_INDEX_PATTERN = REQUEST_INDEX_PREFIX + "*"
RESULT_INDEX_PREFIX = "query_execution_result"
RESULT_INDEX_PATTERN = RESULT_INDEX_PREFIX + "*"
DATASOURCE_INDEX = ".ql-datasources"
DEPLOYMENT_INDEX = REQUEST_INDEX_PREFIX + "_deployment"
#: Each user's usage documents (:mod:`query_core.store.usage`): the request indexes' mappings, its
#: translog synced each second rather than at each write (docs/durability.md).
USAGE_INDEX = REQUEST_INDEX_PREFIX + "_usage"
#: The schedules of scheduled refresh, one document per Flint index (the reference's name).
SCHEDULER_INDEX = ".async-query-scheduler"


def index_kind(index: str) -> IndexKind:
    """The kind of product index ``index`` is, which says the mappings it is created with: the
    request and datasource indexes by their names, any other (a result index, whatever name a
    datasource gives it) a result index."""
    if index == USAGE_INDEX:
        return "usage_index"
    if index.startswith(REQUEST_INDEX_PREFIX):
        return "request_index"
    if index == DATASOURCE_INDEX:
        return "datasource_index"
    if index == SCHEDULER_INDEX:
        return "scheduler_index"
    return "result_index"


def request_index(datasource: str) -> str:
    return f"{REQUEST_INDEX_PREFIX}{datasource.lower()}"


def default_result_index(datasource: str) -> str:
    return f"{RESULT_INDEX_PREFIX}_{datasource.lower()}"
