"""The REST layer: ``POST/GET/DELETE /_plugins/_async_query``, wire-compatible with the reference.

Every error, whatever raised it, leaves as ``{"status": code, "error": {"type", "reason",
"details"}}``; no stack trace ever reaches a client. Every request is authenticated and audited
first (:mod:`async_query.security`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from async_query import logs
from async_query.console import ConsoleGuard, ConsoleTokens, console_router
from async_query.datasource_api import datasource_router
from async_query.http_errors import error_response
from async_query.http_limits import ConcurrencyLimit
from async_query.metrics import MetricsMiddleware
from async_query.ops_api import ops_router
from async_query.replies import CreateAsyncQueryRequest, Page, pool_job_view, session_view, submitted_reply
from async_query.security.errors import UnauthorizedError
from async_query.security.middleware import SecurityMiddleware, audit_note, current_principal
from async_query.security.principal import Principal
from async_query.security.proxies import with_client_addresses
from async_query.security.setup import Security, build_security
from async_query.service import AsyncQueryService, SubmitRequest
from query_core.errors import AsyncQueryError, InvalidRequestError
from query_core.states import SessionState

if TYPE_CHECKING:
    from async_query.gateway import Gateway
    from async_query.runtime import Plugin

log = logging.getLogger(__name__)

BASE = "/_plugins/_async_query"


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _validation_details(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            parts.append(f"unknown field: {loc}")
        elif kind == "missing":
            parts.append(f"missing field: {loc}")
        elif kind in ("json_invalid", "model_attributes_type", "dict_type"):
            parts.append("the body must be a JSON object")
        else:
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def page_asked(offset: int | None, size: int | None, max_size: int) -> Page:
    """GET's paging parameters (an addition, ``docs/api.md``): ``offset`` defaults to 0, ``size``
    to ``max_size`` (the rows of a result's first document), which it may not exceed."""
    offset = 0 if offset is None else offset
    size = max_size if size is None else size
    if offset < 0:
        raise InvalidRequestError("offset must be 0 or more")
    if not 1 <= size <= max_size:
        raise InvalidRequestError(f"size must be between 1 and {max_size}")
    return Page(offset, size)


class _RequestChecks:
    """ASGI middleware: the checks every request passes before its endpoint.

    - A Content-Length over ``max_body`` is a 413, and so is a body that grows past it as the
      endpoint reads it (the Content-Length check alone lets a chunked body of any size through):
      the endpoint then sees the client disconnect, whatever it answers is dropped, and the 413
      is sent instead.
    - A POST, PUT or PATCH with a body that is not JSON is a 406.

    Written against ASGI itself: Starlette's ``BaseHTTPMiddleware`` costs about as much CPU per
    request as a GET's own work.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = encoding = content_type = None
        for name, value in scope["headers"]:  # uvicorn gives names in lower case
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                encoding = value
            elif name == b"content-type":
                content_type = value
        if length is None and encoding is None:  # no body: nothing to check, nothing to bound
            await self.app(scope, receive, send)
            return
        refused = self._refused(scope["method"], length, encoding, content_type)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self._limited(scope, receive, send)

    def _refused(
        self, method: str, length_header: bytes | None, encoding: bytes | None, content_type_header: bytes | None
    ) -> JSONResponse | None:
        length = None if length_header is None else length_header.decode("latin-1")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return error_response(
                413, "IllegalArgumentException", f"the request body is larger than {self.max_body} bytes"
            )
        has_body = (length is not None and length != "0") or encoding is not None
        content_type = "" if content_type_header is None else content_type_header.decode("latin-1")
        if method in ("POST", "PUT", "PATCH") and has_body and not _is_json(content_type):
            return error_response(
                406,
                "IllegalArgumentException",
                f"Content-Type header [{content_type}] is not supported; send application/json",
            )
        return None

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded or started:
                raise
        if exceeded and not started:
            reply = error_response(
                413, "IllegalArgumentException", f"the request body is larger than {self.max_body} bytes"
            )
            await reply(scope, receive, send)


class _QueryGet:
    """ASGI middleware, innermost: ``GET /_plugins/_async_query/{queryId}`` (no query string), the
    request clients poll, answered here rather than through the router.

    FastAPI's routing, dependency solving and response classes cost more CPU than the GET itself
    when its reply is cached; this answers exactly as the ``get_query`` endpoint does (the same
    service calls, the same error shape), for the caller the middleware in front authenticated.
    Every other request, paged GETs and ids starting with ``_`` (the router's own paths) included,
    goes on to the router.
    """

    def __init__(self, app: ASGIApp, service: AsyncQueryService) -> None:
        self.app = app
        self.service = service
        self.prefix = BASE + "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            path: str = scope["path"]
            if path.startswith(self.prefix):
                query_id = path[len(self.prefix) :]
                if query_id and query_id[0] != "_" and "/" not in query_id:
                    await self._get(scope, receive, send, query_id)
                    return
        await self.app(scope, receive, send)

    async def _get(self, scope: Scope, receive: Receive, send: Send, query_id: str) -> None:
        logs.note(query_id=query_id)
        principal = scope.get("state", {}).get("principal")
        try:
            if not isinstance(principal, Principal):  # the security middleware did not run
                raise UnauthorizedError()
            body = await self.service.get_without_blocking(query_id, principal)
            if body is None:
                body = await run_in_threadpool(self.service.get, query_id, principal)
        except AsyncQueryError as exc:
            await product_error(exc, "GET", path_of(scope))(scope, receive, send)
            return
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def path_of(scope: Scope) -> str:
    return str(scope.get("path", ""))


def product_error(exc: AsyncQueryError, method: str, path: str) -> JSONResponse:
    """The reply to a product error raised by an endpoint (logged when it is the service's fault)."""
    if exc.http_status >= 500:
        log.error("%s %s failed: %s", method, path, exc.message)
    return error_response(exc.http_status, exc.error_type, exc.message, exc.reason_phrase)


class _WithoutTrailingSlash:
    """``/_plugins/_query/_datasources/`` is read as ``/_plugins/_query/_datasources``, as
    OpenSearch reads it, by every layer (authorization included), and nothing redirects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if len(path) > 1 and path.endswith("/"):
            stripped = path.rstrip("/") or "/"
            raw = scope.get("raw_path")
            scope = {**scope, "path": stripped}
            if isinstance(raw, bytes):
                scope["raw_path"] = raw.rstrip(b"/") or b"/"
        await self.app(scope, receive, send)


def create_app(
    plugin: Plugin,
    on_shutdown: Callable[[], None] | None = None,
    security: Security | None = None,
    gateway: Gateway | None = None,
) -> FastAPI:
    """The ASGI app. ``on_shutdown`` runs when the server shuts down, whatever stopped it
    (uvicorn re-raises SIGTERM after shutdown, so code after ``uvicorn.run`` may never run).
    ``security`` defaults to what the service's settings say (``ASYNC_QUERY_AUTH``). With
    ``gateway``, every path the app does not own passes through it to the index cluster, after
    authentication and before any of the app's own request checks (its connections open and close
    with the app)."""
    service, settings = plugin.service, plugin.settings
    guard = security if security is not None else build_security(settings)
    console_tokens = ConsoleTokens(plugin.datasources.sealer.derived("console"), settings.console_session_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if gateway is not None:
            await gateway.open()
        try:
            yield
        finally:
            if gateway is not None:
                await gateway.close()
            await guard.aclose()
            if on_shutdown is not None:
                on_shutdown()

    # No redirect to the path with or without its trailing slash: Starlette builds that URL from the
    # request's Host header (any host a caller names); the path is read without it instead.
    app = FastAPI(title="Async query service", docs_url=None, redoc_url=None, lifespan=lifespan, redirect_slashes=False)
    app.state.service = service
    max_body = settings.max_body_bytes
    max_query = settings.max_query_chars

    app.add_middleware(_QueryGet, service=service)  # innermost: after every check below
    app.add_middleware(_RequestChecks, max_body=max_body)
    if gateway is not None:
        app.add_middleware(gateway.in_front_of)  # outside the request checks
    # Added last, so outermost: nothing is looked at before the caller is known.
    app.add_middleware(SecurityMiddleware, security=guard)
    if settings.console_enabled:  # in front of it: the console's login cookie, CSRF and CSP (docs/console.md)
        app.add_middleware(ConsoleGuard, tokens=console_tokens, audit=guard.audit)
    # Outside even that: it bounds everything, authentication included (docs/security.md).
    app.add_middleware(ConcurrencyLimit, limit=settings.http_max_concurrency)
    if settings.metrics_enabled:
        app.add_middleware(MetricsMiddleware)  # outside even that: refusals are counted too
    app.add_middleware(_WithoutTrailingSlash)  # every layer reads one spelling of a path
    # Outermost: every layer reads one client address, the peer's unless a trusted proxy names another.
    app.add_middleware(with_client_addresses, trusted_proxies=settings.trusted_proxies)

    @app.exception_handler(AsyncQueryError)
    async def on_product_error(request: Request, exc: AsyncQueryError) -> JSONResponse:
        return product_error(exc, request.method, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, "IllegalArgumentException", _validation_details(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "IllegalArgumentException", str(exc.detail))

    @app.exception_handler(Exception)
    async def on_anything(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, type(exc).__name__, "an unexpected error occurred; see the service log")

    app.include_router(datasource_router(plugin.datasources, plugin.launchers.check))
    if settings.console_enabled:
        app.include_router(console_router(plugin, console_tokens, guard.mode))
    app.include_router(ops_router(settings, plugin.health, plugin.stats))  # before GET /{query_id}: it owns BASE/_health

    caller = Depends(current_principal)

    @app.post(BASE, status_code=201)
    def create_query(body: CreateAsyncQueryRequest, request: Request, principal: Principal = caller) -> JSONResponse:
        audit_note(request, datasource=body.datasource)
        if len(body.query) > max_query:
            return error_response(400, "IllegalArgumentException", f"the query is longer than {max_query} characters")
        submitted = service.submit(SubmitRequest(body.datasource, body.lang, body.query, body.session_id, principal))
        audit_note(request, query_id=submitted.query_id)
        reply = submitted_reply(submitted.kind, submitted.query_id, submitted.session_id)
        return JSONResponse(reply, status_code=201)

    @app.get(BASE + "/_sessions")
    def list_sessions(
        request: Request,
        datasource: str | None = None,
        state: str | None = None,
        size: int = 100,
        principal: Principal = caller,
    ) -> JSONResponse:
        """This product's addition: sessions and what runs in them (for the CLI and operators);
        a non-admin sees only the sessions they started."""
        audit_note(request, datasource=datasource)
        try:
            states = [SessionState(s.strip().lower()) for s in state.split(",")] if state else None
        except ValueError:
            return error_response(400, "IllegalArgumentException", f"unknown session state in {state!r}")
        if not 1 <= size <= 1000:
            return error_response(400, "IllegalArgumentException", "size must be between 1 and 1000")
        found = service.sessions(datasource, states, size, principal)
        pool = service.pool_jobs(size, principal)
        return JSONResponse({"sessions": [session_view(s) for s in found], "poolJobs": [pool_job_view(p) for p in pool]})

    @app.get(BASE + "/{query_id}")
    async def get_query(
        query_id: str, principal: Principal = caller, offset: int | None = None, size: int | None = None
    ) -> Response:
        logs.note(query_id=query_id)
        if offset is not None or size is not None:
            page = page_asked(offset, size, settings.result_chunk_rows)
            paged = await run_in_threadpool(service.get_page, query_id, page, principal)
            return Response(paged, media_type="application/json")
        # Most GETs are answered on the event loop (a cached reply, or one real-time read of a
        # statement still going); the rest in a worker thread, where blocking calls are fine.
        # Either way, only the query's submitter or an admin gets an answer.
        body = await service.get_without_blocking(query_id, principal)
        if body is None:
            body = await run_in_threadpool(service.get, query_id, principal)
        return Response(body, media_type="application/json")

    @app.delete(BASE + "/{query_id}", status_code=204)
    def cancel_query(query_id: str, principal: Principal = caller) -> Response:
        logs.note(query_id=query_id)
        service.cancel(query_id, principal)
        return Response(status_code=204)

    return app
