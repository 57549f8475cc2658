"""Mappings and settings of the product's own indexes, the single source for code and tests.

``request_index.json`` describes ``.query_execution_request_<datasource>`` and ``result_index.json``
describes ``query_execution_result_<datasource>``, ``datasource_index.json`` the datasources created
over REST and ``scheduler_index.json`` the schedules of scheduled refresh
(``.async-query-scheduler``); :func:`load` returns the create-index body. The users' usage index
(``.query_execution_request__usage``) has the request indexes' mappings and :data:`USAGE_TRANSLOG`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

IndexKind = Literal["request_index", "result_index", "datasource_index", "scheduler_index", "usage_index"]
#: The usage index's translog: synced each second, not at each write. A POST's charge then costs no
#: disk sync of its own; a node that dies forgets at most the last second's charges (a user may
#: then hold that much more than the bound). Nothing else is kept there (docs/durability.md).
USAGE_TRANSLOG = {"durability": "async", "sync_interval": "1s"}


@cache
def _load_text(kind: str) -> str:
    return resources.files(__name__).joinpath(f"{kind}.json").read_text(encoding="utf-8")


def load(kind: IndexKind) -> dict[str, Any]:
    """The body for a create-index call (``settings`` and ``mappings``); a fresh copy each call."""
    body: dict[str, Any] = json.loads(_load_text("request_index" if kind == "usage_index" else kind))
    if kind == "usage_index":
        body["settings"]["index"]["translog"] = dict(USAGE_TRANSLOG)
    return body
