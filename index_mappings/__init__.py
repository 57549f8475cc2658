"""Mappings and settings of the product's own indexes, the single source for code and tests.

``request_index.json`` describes ``.query_execution_request_<datasource>`` and ``result_index.json``
describes ``query_execution_result_<datasource>``, ``datasource_index.json`` the datasources created
over REST and ``scheduler_index.json`` the schedules of scheduled refresh
(``.async-query-scheduler``); :func:`load` returns the create-index body.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

IndexKind = Literal["request_index", "result_index", "datasource_index", "scheduler_index"]


@cache
def _load_text(kind: IndexKind) -> str:
    return resources.files(__name__).joinpath(f"{kind}.json").read_text(encoding="utf-8")


def load(kind: IndexKind) -> dict[str, Any]:
    """The body for a create-index call (``settings`` and ``mappings``); a fresh copy each call."""
    body: dict[str, Any] = json.loads(_load_text(kind))
    return body
