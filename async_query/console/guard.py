"""The one middleware in front of every console request (``docs/console.md``).

For a path under ``/console`` (every other path passes untouched):

- ``GET /console`` is the page (the same for everyone: it holds no user's data, only this
  browser's CSRF token), and ``GET /console/static/<name>`` its assets, from an allow list read
  once from the package. Neither needs a login: the login form is part of the page.
- Every other console request (``/console/api/...``) goes on to the API's authentication: the
  login cookie, if the request carries no ``Authorization`` of its own, is turned back into the
  ``Authorization`` header it seals (:mod:`.tokens`), so the security middleware behind checks and
  audits it as it checks and audits any API request.
- A state-changing request (any method but GET and HEAD) without the CSRF token (the
  ``X-CSRF-Token`` header equal to the CSRF cookie, which this service signed) is refused with a
  403 in the error shape, and audited, before anything else looks at it.
- Every reply gets the Content-Security-Policy and the other protective headers, and loses any
  ``WWW-Authenticate`` (the page shows its own login form; a browser would show its own dialog).

Pure ASGI, as the API's other layers.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from importlib import resources

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from async_query.console.tokens import CSRF_COOKIE, CSRF_HEADER, LOGIN_COOKIE, ConsoleTokens
from async_query.http_errors import error_bytes
from async_query.security.audit import AuditLog
from async_query.security.errors import FORBIDDEN_REASON
from async_query.security.middleware import AuditEntry

CONSOLE = "/console"
STATIC = CONSOLE + "/static/"
_SAFE_METHODS = frozenset({"GET", "HEAD"})
#: No inline script or style, no eval, nothing from elsewhere; strings never reach an HTML sink
#: (Trusted Types with no policy: the scripts build the page with DOM calls only).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
_CSRF_PLACEHOLDER = b"__CSRF_TOKEN__"


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """Every file under ``static/`` (the allow list of what ``/console/static/`` serves)."""
    assets: dict[str, Asset] = {}
    root = resources.files("async_query.console") / "static"
    stack = [(root, "")]
    while stack:
        folder, prefix = stack.pop()
        for entry in folder.iterdir():
            name = prefix + entry.name
            if entry.is_dir():
                stack.append((entry, name + "/"))
                continue
            body = entry.read_bytes()
            kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind in ("application/javascript", "text/javascript"):
                kind += "; charset=utf-8"
            assets[name] = Asset(body, kind, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return assets


def is_console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


class ConsoleGuard:
    """See the module's documentation. ``audit`` is the API's audit log (CSRF refusals go there)."""

    def __init__(self, app: ASGIApp, tokens: ConsoleTokens, audit: AuditLog) -> None:
        self.app = app
        self.tokens = tokens
        self.audit = audit
        self.assets = load_assets()
        self.page = self.assets.pop("index.html")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console(scope["path"]):
            await self.app(scope, receive, send)
            return
        cookies = _cookies(scope)
        csrf = cookies.get(CSRF_COOKIE)
        new_csrf = None if self.tokens.csrf_valid(csrf) else self.tokens.new_csrf()
        guarded = _guarded_send(send, self._csrf_cookie(new_csrf, scope) if new_csrf else None)
        method, path = scope["method"], scope["path"]
        if path == CONSOLE or path.startswith(STATIC):
            await self._serve_file(scope, guarded, new_csrf or csrf or "")
            return
        if method not in _SAFE_METHODS and not self.tokens.csrf_matches(csrf, _header(scope, CSRF_HEADER)):
            entry = AuditEntry(scope)
            entry.action = "console.csrf"
            self.audit.write(entry.record(403))
            await _error(guarded, 403, "the request has no valid CSRF token (X-CSRF-Token); reload the console")
            return
        await self.app(self._with_login(scope, cookies.get(LOGIN_COOKIE)), receive, guarded)

    def _with_login(self, scope: Scope, login: str | None) -> Scope:
        """The scope with the login cookie's ``Authorization``, when it carries none of its own."""
        if not login or _header(scope, b"authorization") is not None:
            return scope
        authorization = self.tokens.open_login(login)
        if authorization is None:
            return scope
        return {**scope, "headers": [*scope["headers"], (b"authorization", authorization)]}

    async def _serve_file(self, scope: Scope, send: Send, csrf: str) -> None:
        if scope["method"] not in _SAFE_METHODS:
            await _error(send, 405, "the console's page and assets are only read")
            return
        path = scope["path"]
        if path == CONSOLE:
            body = self.page.body.replace(_CSRF_PLACEHOLDER, csrf.encode("ascii"))
            headers = [(b"content-type", self.page.content_type.encode()), (b"cache-control", b"no-store")]
        else:
            asset = self.assets.get(path[len(STATIC) :])
            if asset is None:
                await _error(send, 404, "no such console asset")
                return
            if _header(scope, b"if-none-match") == asset.etag:
                await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", asset.etag.encode())]})
                await send({"type": "http.response.body", "body": b""})
                return
            body = asset.body
            headers = [
                (b"content-type", asset.content_type.encode()),
                (b"etag", asset.etag.encode()),
                (b"cache-control", b"no-cache"),
            ]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    def _csrf_cookie(self, token: str, scope: Scope) -> bytes:
        return cookie_header(CSRF_COOKIE, token, scope)


def cookie_header(name: str, value: str, scope: Scope, max_age: int | None = None) -> bytes:
    """A ``Set-Cookie`` value for the console: ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``,
    and ``Secure`` when the request came over TLS."""
    parts = [f"{name}={value}", f"Path={CONSOLE}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if scope.get("scheme") == "https":
        parts.append("Secure")
    return "; ".join(parts).encode("latin-1")


def _guarded_send(send: Send, set_csrf: bytes | None) -> Send:
    async def guarded(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"www-authenticate"]
            headers.extend(_HEADERS)
            if not any(k.lower() == b"cache-control" for k, _ in headers):
                headers.append((b"cache-control", b"no-store"))
            if set_csrf is not None:
                headers.append((b"set-cookie", set_csrf))
            message = {**message, "headers": headers}
        await send(message)

    return guarded


async def _error(send: Send, status: int, details: str) -> None:
    reason = FORBIDDEN_REASON if status == 403 else ""
    body = error_bytes(status, "IllegalArgumentException" if status != 403 else "SecurityException", details, reason)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _cookies(scope: Scope) -> dict[str, str]:
    header = _header(scope, b"cookie")
    return cookie_parser(header) if header else {}
