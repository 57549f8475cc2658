"""The ASGI middleware that authenticates and audits every request, and how endpoints read it.

Pure ASGI, as ``_RequestChecks`` of the REST layer, because it is on GET's hot path: with the
credentials cached it costs a header scan, an HMAC, a cache lookup and one audit line.
Endpoints take the caller with ``Depends(current_principal)`` and may add the datasource or query
id to the request's audit line with :func:`audit_note`.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from async_query.http_errors import error_bytes
from async_query.security.audit import MAX_FIELD, outcome_of, utc_stamp
from async_query.security.errors import (
    FORBIDDEN_REASON,
    UNAUTHORIZED_REASON,
    AuthUnavailableError,
    ForbiddenError,
    TooManyFailedLoginsError,
    UnauthorizedError,
)
from async_query.security.principal import Principal
from async_query.security.proxies import client_address
from async_query.security.setup import CHALLENGE, Security
from query_core.errors import AsyncQueryError, MalformedIdError
from query_core.hosts import loopback_host, loopback_origin
from query_core.ids import datasource_of

ASYNC_BASE = "/_plugins/_async_query"
DATASOURCE_BASE = "/_plugins/_query/_datasources"
CONSOLE_BASE = "/console"
_REASONS = {401: UNAUTHORIZED_REASON, 403: FORBIDDEN_REASON, 429: "Too Many Requests", 503: "Service Unavailable"}
_REFUSALS = (UnauthorizedError, ForbiddenError, AuthUnavailableError, TooManyFailedLoginsError)
_ASYNC_ACTIONS = {"GET": "query.get", "DELETE": "query.cancel"}
_DATASOURCE_ACTIONS = {"POST": "datasource.create", "PUT": "datasource.update", "PATCH": "datasource.patch"}


class AuditEntry:
    """What the audit line of one request says; endpoints may fill ``datasource`` and ``query_id``."""

    __slots__ = ("action", "datasource", "method", "path", "query_id", "remote", "user")

    def __init__(self, scope: Scope) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.remote: str | None = client_address(scope)
        self.user: str | None = None
        self.action, self.datasource, self.query_id = classify(self.method, self.path)

    def record(self, status: int) -> dict[str, Any]:
        return {
            "time": utc_stamp(time.time()),
            "user": self.user,
            "action": self.action,
            "datasource": self.datasource,
            "queryId": self.query_id,
            "outcome": outcome_of(status),
            "status": status,
            "method": self.method,
            "path": self.path[:MAX_FIELD],
            "remote": self.remote,
        }


def classify(method: str, path: str) -> tuple[str, str | None, str | None]:
    """(action, datasource, queryId) of a request, as far as its method and path tell."""
    if path.startswith(ASYNC_BASE):
        rest = path[len(ASYNC_BASE) :]
        if rest in ("", "/"):
            return ("query.submit" if method == "POST" else "other"), None, None
        part = rest[1:]
        if part == "_sessions":
            return ("sessions.list" if method == "GET" else "other"), None, None
        if "/" not in part and method in _ASYNC_ACTIONS:
            return _ASYNC_ACTIONS[method], _datasource_of(part), part[:MAX_FIELD]
    elif path.startswith(DATASOURCE_BASE):
        rest = path[len(DATASOURCE_BASE) :]
        if rest in ("", "/"):
            action = "datasource.list" if method == "GET" else _DATASOURCE_ACTIONS.get(method, "other")
            return action, None, None
        name = rest[1:]
        if "/" not in name and method in ("GET", "DELETE"):
            return ("datasource.get" if method == "GET" else "datasource.delete"), name[:MAX_FIELD], None
    elif path == CONSOLE_BASE or path.startswith(CONSOLE_BASE + "/"):
        return "console", None, None  # its endpoints name their own action (docs/console.md)
    return "other", None, None


def _datasource_of(query_id: str) -> str | None:
    try:
        return datasource_of(query_id)
    except MalformedIdError:
        return None


class SecurityMiddleware:
    """Authenticates every HTTP request, puts the :class:`Principal` in ``scope["state"]``, and
    writes one audit line per request (refused or not).

    Refusals come in the REST API's error shape: 401 with ``WWW-Authenticate`` for missing or bad
    credentials (never saying which part was wrong), 403 for a non-loopback Host under ``none``,
    503 when the cluster could not be asked.

    Under ``none``, the Host check keeps out pages that had their own name resolve to 127.0.0.1
    (DNS rebinding), and the Origin check pages of other sites that send requests to 127.0.0.1
    straight from the browser (cross-site requests, which the JSON-only bodies already make hard).
    """

    def __init__(self, app: ASGIApp, security: Security) -> None:
        self.app = app
        self.security = security
        self.authenticator = security.authenticator
        self.audit = security.audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        entry = AuditEntry(scope)
        try:
            principal = await self._authenticate(scope, entry.remote)
        except _REFUSALS as exc:
            await self._refuse(exc, entry, send)
            return
        entry.user = principal.name
        state = scope.setdefault("state", {})
        state["principal"] = principal
        state["audit"] = entry
        written = False

        async def send_audited(message: Message) -> None:
            # The line is written when the answer starts: before the client can see it.
            nonlocal written
            if message["type"] == "http.response.start" and not written:
                written = True
                self.audit.write(entry.record(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_audited)
        finally:
            if not written:  # the app raised before answering (the server answers 500)
                self.audit.write(entry.record(500))

    async def _authenticate(self, scope: Scope, client: str | None) -> Principal:
        host = origin = authorization = None
        hosts = authorizations = 0
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization, authorizations = value, authorizations + 1
            elif name == b"host":
                host, hosts = value, hosts + 1
            elif name == b"origin":
                origin = value
        if self.security.loopback_only and (hosts != 1 or not loopback_host(host) or not loopback_origin(origin)):
            raise ForbiddenError(
                "this service has no authentication (ASYNC_QUERY_AUTH=none), so it answers only requests "
                "addressed to localhost, 127.0.0.1 or [::1], and from no web page of another site"
            )
        if authorizations > 1:
            raise UnauthorizedError()
        return await self.authenticator.authenticate(authorization, client)

    async def _refuse(self, exc: AsyncQueryError, entry: AuditEntry, send: Send) -> None:
        status = exc.http_status
        if isinstance(exc, UnauthorizedError) and exc.claimed_user:
            entry.user = exc.claimed_user
        self.audit.write(entry.record(status))
        payload = error_bytes(status, exc.error_type, exc.message, _REASONS.get(status, FORBIDDEN_REASON))
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", CHALLENGE.encode()))
        if isinstance(exc, TooManyFailedLoginsError):
            headers.append((b"retry-after", str(exc.retry_after_s).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


async def current_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller. Fails closed (401) if the middleware did not run.

    A coroutine, so that FastAPI calls it on the event loop (a plain function would cost GET's
    hot path a trip to a worker thread)."""
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise UnauthorizedError()
    return principal


def audit_note(request: Request, *, datasource: str | None = None, query_id: str | None = None) -> None:
    """Add what only the endpoint knows (a datasource named in the body, a new query's id) to
    this request's audit line."""
    entry = request.scope.get("state", {}).get("audit")
    if isinstance(entry, AuditEntry):
        if datasource is not None:
            entry.datasource = datasource[:MAX_FIELD]
        if query_id is not None:
            entry.query_id = query_id[:MAX_FIELD]
