"""Error replies in the reference's shape, made in one place for every HTTP layer of the service
(the REST API, its request checks, the gateway): ``{"status": code, "error": {"type", "reason",
"details"}}`` (``docs/api.md``)."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from async_query.security.errors import FORBIDDEN_REASON, UNAUTHORIZED_REASON

#: The ``reason`` of each status the service answers with (the reference's words).
REASONS = {
    400: "Invalid Request",
    401: UNAUTHORIZED_REASON,
    403: FORBIDDEN_REASON,
    502: "Bad Gateway",
    504: "Gateway Timeout",
    404: "Invalid Request",
    405: "Invalid Request",
    406: "Invalid Request",
    413: "Invalid Request",
    415: "Invalid Request",
    429: "Too Many Requests",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
#: The reason of any other status (a 500).
INTERNAL = "There was internal problem at backend"


def error_body(status: int, error_type: str, details: str, reason: str = "") -> dict[str, object]:
    """The error shape of ``status``; ``reason`` defaults to the reference's for that status."""
    reason = reason or REASONS.get(status, INTERNAL)
    return {"status": status, "error": {"type": error_type, "reason": reason, "details": details}}


def error_bytes(status: int, error_type: str, details: str, reason: str = "") -> bytes:
    """:func:`error_body` as compact JSON, for the layers that write their reply themselves."""
    return json.dumps(error_body(status, error_type, details, reason), separators=(",", ":")).encode()


def error_response(status: int, error_type: str, details: str, reason: str = "") -> JSONResponse:
    """:func:`error_body` as a reply."""
    return JSONResponse(error_body(status, error_type, details, reason), status_code=status)
