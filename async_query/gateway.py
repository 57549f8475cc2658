"""Gateway mode: the service stands where OpenSearch Dashboards expects its cluster.

Dashboards talks to one OpenSearch endpoint. In gateway mode the service answers its own paths
(:data:`OWNED_PREFIXES`: the async query API, the datasource API and this product's additions
under them, its metrics and stats) and passes every other request to the index cluster, unchanged: method, path (as
received, still percent-encoded), query string, headers less the hop-by-hop ones, status and body,
both bodies streamed (a large ``_bulk`` or search reply is never held whole), ``HEAD`` and chunked
replies included. ``Host`` is rewritten for the cluster; the caller's forwarding headers
(``X-Forwarded-*``, ``Forwarded``, ``X-Real-IP``) are dropped and ``X-Forwarded-For`` names the
client as the service read it (its peer, or what a trusted proxy said: docs/security.md);
``Content-Length`` is kept when the
caller sent one (otherwise the body goes upstream chunked). Replies pass through as raw bytes, so a
compressed reply stays compressed. The ASGI server stamps its own ``Date``, so the cluster's is
dropped rather than sent twice.

Failures before the cluster's reply began are answered in the service's error shape: the cluster
cannot be reached (refused, reset, a broken reply) -> 502; it did not answer in time (connect or
read timeout, no pooled connection free in time) -> 504. A failure after the reply began can only
cut the connection short, so the caller sees a truncated reply, never a complete-looking one.

Who may pass through, and as whom: the auth seam
-----------------------------------------------
Every request that is passed through first asks a :data:`PassPolicy`, a plain callable given the
request's ASGI scope. It returns either :class:`PassThrough` (with the ``Authorization`` value to
send upstream, or None to send none: the caller's own header never goes upstream unless the
policy returns it) or :class:`Refusal` (answered in the error shape, nothing sent upstream).

* :func:`service_credentials` (the default, for authentication ``none``, loopback only): every
  request passes, with the service's own cluster credentials (basic auth from the OpenSearch
  username and password), or none when the service has none.
* :func:`caller_credentials` (for ``cluster`` authentication): the caller's own
  ``Authorization`` goes upstream, so the cluster's security decides what it may see.
* For other modes (``basic``), a policy reads the principal the authentication middleware attached
  to the request and lets only admins pass, with the service's credentials. The principal is
  found in the scope (Starlette keeps ``request.state`` in ``scope["state"]``), so the
  authentication middleware must run before this one: add it to the app after the gateway
  (Starlette's last added middleware is the outermost).

A policy runs on the event loop for every passed-through request: it must not block.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from async_query.http_errors import error_response
from async_query.security.proxies import FORWARDING_HEADERS, client_address
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.peer import checked_transport

log = logging.getLogger(__name__)

#: Paths the service answers itself (each prefix exactly, or followed by ``/``); all others pass.
OWNED_PREFIXES = (
    "/_plugins/_async_query",
    "/_plugins/_query/_datasources",
    # What operators read (docs/metrics.md): the service's own metrics and stats.
    "/metrics",
    "/_plugins/_sql/stats",
    "/_plugins/_ppl/stats",
    # The web console (docs/console.md): its page, assets and endpoints never reach the cluster.
    "/console",
)

#: Hop-by-hop headers (RFC 9110 section 7.6.1, and the older names still seen): they describe one
#: connection, never the request or reply, so they are dropped both ways, with whatever
#: ``Connection`` lists.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: Also not passed upstream: the gateway sets ``Host`` for the cluster and ``Authorization`` as
#: the policy says; ``Expect: 100-continue`` was answered to the caller by the ASGI server; the
#: caller's forwarding headers name whatever addresses it likes, so ``X-Forwarded-For`` is the
#: gateway's own (the client's address, as the trusted proxies let it be read).
_NOT_UPSTREAM = HOP_BY_HOP | FORWARDING_HEADERS | {b"host", b"authorization", b"expect"}
#: Also not passed back: the ASGI server adds its own ``Date``.
_NOT_DOWNSTREAM = HOP_BY_HOP | {b"date"}

#: A request body up to this size is read whole before it is sent (one write upstream, and a
#: request that can be sent again if a pooled connection turns out closed); larger ones stream.
SMALL_BODY = 64 * 1024
#: Methods sent a second time when a pooled connection turns out closed (they change nothing).
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
#: Replies larger than this (or of unknown size) are streamed while watching for the caller
#: leaving, so that a reply nobody reads any more stops being read from the cluster.
WATCHED_REPLY = 1024 * 1024


def owns(path: str) -> bool:
    """Whether the service answers ``path`` itself (the rest passes to the cluster)."""
    for prefix in OWNED_PREFIXES:
        if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
            return True
    return False


# -- the auth seam ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassThrough:
    """Pass the request to the cluster with this ``Authorization`` (None: without one)."""

    authorization: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Refusal:
    """Answer the request in the error shape instead of passing it."""

    status: int
    details: str
    error_type: str = "SecurityException"


Decision = PassThrough | Refusal
#: Decides, per request (its ASGI scope), whether it may pass and with which credentials.
PassPolicy = Callable[[Scope], Decision]


class GatewayConfigError(ValueError):
    """Gateway mode cannot run with this cluster configuration."""


def service_credentials(config: OpenSearchConfig) -> PassPolicy:
    """Every request passes, as the service itself: with its basic-auth credentials, or none.

    A SigV4 cluster is refused here, at start-up: passing a request through would mean signing
    it, body included, which a streamed body does not allow.
    """
    if config.auth == "sigv4":
        raise GatewayConfigError("gateway mode cannot pass requests to a SigV4-signed cluster")
    decision = PassThrough(_basic(config.username, config.password) if config.auth == "basic" else None)

    def policy(scope: Scope) -> Decision:
        return decision

    return policy


def caller_credentials() -> PassPolicy:
    """Every request passes with the caller's own ``Authorization`` (none if it sent none): the
    cluster's security decides what the caller may see."""

    def policy(scope: Scope) -> Decision:
        for name, value in scope["headers"]:
            if name.lower() == b"authorization":
                return PassThrough(value.decode("latin-1"))
        return PassThrough(None)

    return policy


def admins_only(policy: PassPolicy) -> PassPolicy:
    """``policy`` for admins; any other caller is refused (the cluster holds every user's data)."""
    refusal = Refusal(403, "only administrators may reach the index cluster through the gateway")

    def admin_policy(scope: Scope) -> Decision:
        principal = scope.get("state", {}).get("principal")
        return policy(scope) if getattr(principal, "is_admin", False) else refusal

    return admin_policy


def gateway_policy(settings: Settings, cluster: OpenSearchConfig | None = None) -> PassPolicy:
    """The policy of the deployment's authentication: with ``cluster``, the caller's own
    credentials go upstream (the cluster's security decides); otherwise only admins pass, as the
    service itself (``cluster``: the service's connection, when it is not the settings' alone,
    as the embedded index's with its credential)."""
    if settings.auth == "cluster":
        return caller_credentials()
    return admins_only(service_credentials(cluster or settings.opensearch()))


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


# -- the proxy -------------------------------------------------------------------------------------


class _CallerGone(Exception):  # noqa: N818 - a signal, not an error to report
    """The caller disconnected while its request body was being passed on."""


@dataclass(frozen=True)
class GatewayLimits:
    """Timeouts (seconds) and pool size of the connections to the cluster."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0
    max_connections: int = 64


class Gateway:
    """Passes requests to the cluster at ``upstream`` over a pool of keep-alive connections.

    :meth:`open` creates the pool (at app start) and :meth:`close` closes it (at shutdown); a
    request arriving before :meth:`open` opens it. :meth:`in_front_of` wraps the app so that the
    paths it does not own come here.
    """

    def __init__(
        self,
        upstream: str,
        policy: PassPolicy,
        limits: GatewayLimits | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GatewayConfigError("the index cluster's URL must be http:// or https:// with a host")
        self.limits = limits or GatewayLimits()
        self.policy = policy
        self._verify = verify
        port = f":{parts.port}" if parts.port else ""
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        #: The cluster's address as shown in errors and logs: never with credentials.
        self.upstream = f"{parts.scheme}://{host}{port}"
        self._base = httpx.URL(self.upstream)
        self._host = self._base.netloc
        self._prefix = parts.path.rstrip("/").encode()
        limits_ = self.limits
        self._timeout = httpx.Timeout(
            connect=limits_.connect_timeout_s,
            read=limits_.read_timeout_s,
            write=limits_.read_timeout_s,
            pool=limits_.read_timeout_s,
        ).as_dict()
        self._pool: httpx.AsyncHTTPTransport | None = None
        #: The uid the upstream's listener must belong to (the embedded index's: each new
        #: connection is checked before a request is passed on, :mod:`query_core.peer`).
        self.peer_uid: int | None = None

    @classmethod
    def for_cluster(cls, config: OpenSearchConfig, policy: PassPolicy, limits: GatewayLimits) -> Gateway:
        """A gateway to the cluster ``config`` names, with its TLS settings."""
        verify: ssl.SSLContext | bool = config.verify_certs
        if config.verify_certs and config.ca_certs:
            verify = ssl.create_default_context(cafile=config.ca_certs)
        gateway = cls(config.url, policy, limits, verify)
        gateway.peer_uid = config.peer_uid
        return gateway

    async def open(self) -> httpx.AsyncHTTPTransport:
        """The connection pool: httpx's transport, the pool under ``httpx.AsyncClient``, used
        without the client's layer (redirects, a cookie jar, auth flows), none of which a proxy
        may apply to a caller's request, and which cost as much again per request."""
        if self._pool is None:
            self._pool = checked_transport(
                httpx.AsyncHTTPTransport(
                    verify=self._verify,
                    limits=httpx.Limits(
                        max_connections=self.limits.max_connections,
                        max_keepalive_connections=self.limits.max_connections,
                    ),
                ),
                self.peer_uid,
            )
        return self._pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()

    def in_front_of(self, app: ASGIApp) -> ASGIApp:
        """``app`` for the paths it owns, this gateway for every other HTTP request."""

        async def routed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and not owns(scope["path"]):
                await self(scope, receive, send)
            else:
                await app(scope, receive, send)

        return routed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        decision = self.policy(scope)
        if isinstance(decision, Refusal):
            await error_response(decision.status, decision.error_type, decision.details)(scope, receive, send)
            return
        try:
            response = await self._forward(scope, receive, decision.authorization)
        except _CallerGone:
            log.debug("%s %s: the caller left before its request was passed on", scope["method"], scope["path"])
            return
        except httpx.TimeoutException as exc:
            await self._failed(scope, receive, send, 504, f"did not answer in time ({self._timed_out(exc)})")
            return
        except httpx.InvalidURL as exc:
            details = f"the request target cannot be passed to the index cluster: {exc}"
            await error_response(400, "IllegalArgumentException", details)(scope, receive, send)
            return
        except (httpx.TransportError, httpx.UnsupportedProtocol) as exc:
            await self._failed(scope, receive, send, 502, f"cannot be reached: {_reason(exc)}")
            return
        except Exception:
            log.exception("%s %s: passing the request to the index cluster failed", scope["method"], scope["path"])
            await error_response(500, "GatewayException", "the request could not be passed on; see the service log")(
                scope, receive, send
            )
            return
        try:
            await self._reply(scope, receive, send, response)
        finally:
            await response.aclose()

    async def _forward(self, scope: Scope, receive: Receive, authorization: str | None) -> httpx.Response:
        """Send the request upstream; returns the reply with its body still to stream."""
        pool = self._pool or await self.open()
        headers, length, chunked = _upstream_headers(scope["headers"], self._host, authorization, client_address(scope))
        content: bytes | AsyncIterator[bytes] | None = None
        if chunked or (length is not None and length > SMALL_BODY):
            content = _body_stream(receive)
        elif length:
            content = await _read_body(receive)
        request = httpx.Request(
            scope["method"],
            self._base.copy_with(raw_path=self._target(scope)),
            headers=headers,
            content=content,
            extensions={"timeout": self._timeout},
        )
        try:
            return await pool.handle_async_request(request)
        except httpx.RemoteProtocolError:
            # The cluster closed the connection without a reply: a pooled connection it had
            # closed. A read-only request whose body is in hand is sent once more.
            if scope["method"] not in _REPLAYABLE or isinstance(content, AsyncIterator):
                raise
            return await pool.handle_async_request(request)

    def _target(self, scope: Scope) -> bytes:
        raw = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        return self._prefix + raw + (b"?" + query if query else b"")

    def _timed_out(self, exc: httpx.TimeoutException) -> str:
        limits = self.limits
        if isinstance(exc, httpx.ConnectTimeout):
            return f"connect timeout, {limits.connect_timeout_s:g} s"
        if isinstance(exc, httpx.PoolTimeout):
            return f"no free connection within {limits.read_timeout_s:g} s"
        kind = "write" if isinstance(exc, httpx.WriteTimeout) else "read"
        return f"{kind} timeout, {limits.read_timeout_s:g} s"

    async def _failed(self, scope: Scope, receive: Receive, send: Send, status: int, what: str) -> None:
        details = f"the index cluster at {self.upstream} {what}"
        log.warning("%s %s -> %d: %s", scope["method"], scope["path"], status, details)
        kind = "GatewayTimeoutException" if status == 504 else "BadGatewayException"
        await error_response(status, kind, details)(scope, receive, send)

    async def _reply(self, scope: Scope, receive: Receive, send: Send, response: httpx.Response) -> None:
        headers, length = _downstream_headers(response.headers.raw)
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        if scope["method"] == "HEAD" or length == 0:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if length is not None and length <= WATCHED_REPLY:
            done = await _stream_reply(send, response, scope)
        else:
            done = await _stream_watched(send, receive, response, scope)
        if done:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # Otherwise the reply is left incomplete: the ASGI server closes the connection, so the
        # caller sees it cut short.


def _upstream_headers(
    raw: Iterable[tuple[bytes, bytes]], host: bytes, authorization: str | None, client: str | None = None
) -> tuple[list[tuple[bytes, bytes]], int | None, bool]:
    """The headers to send upstream, the body's length (None: not given) and whether it comes
    chunked (``Transfer-Encoding`` wins over ``Content-Length``, as HTTP/1.1 has it). The
    request's ``client`` address goes as ``X-Forwarded-For``, in place of any the caller sent."""
    listed = _connection_listed(raw)
    out: list[tuple[bytes, bytes]] = [(b"host", host)]
    length: int | None = None
    chunked = False
    for name, value in raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            chunked = True
        elif lower == b"content-length":
            length = int(value) if value.strip().isdigit() else None
        if lower in _NOT_UPSTREAM or lower in listed:
            continue
        out.append((name, value))
    if chunked:
        length = None
        out = [(n, v) for n, v in out if n.lower() != b"content-length"]
    if authorization is not None:
        out.append((b"authorization", authorization.encode("latin-1")))
    if client:
        out.append((b"x-forwarded-for", client.encode("latin-1")))
    return out, length, chunked


def _downstream_headers(raw: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], int | None]:
    """The reply's headers less hop-by-hop ones, and its length (None: not given)."""
    listed = _connection_listed(raw)
    out: list[tuple[bytes, bytes]] = []
    length: int | None = None
    for name, value in raw:
        lower = name.lower()
        if lower in _NOT_DOWNSTREAM or lower in listed:
            continue
        if lower == b"content-length" and value.strip().isdigit():
            length = int(value)
        out.append((lower, value))
    return out, length


def _connection_listed(raw: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """The header names ``Connection`` lists (hop-by-hop by declaration)."""
    listed: set[bytes] = set()
    for name, value in raw:
        if name.lower() == b"connection":
            listed.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return listed


async def _read_body(receive: Receive) -> bytes:
    parts = [chunk async for chunk in _body_stream(receive)]
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _body_stream(receive: Receive) -> AsyncIterator[bytes]:
    """The request body as the ASGI server hands it over (it stops reading from the caller while
    the cluster is slower, so memory stays bounded)."""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _CallerGone
        more = bool(message.get("more_body", False))
        chunk = message.get("body", b"")
        if chunk:
            yield chunk


async def _stream_reply(send: Send, response: httpx.Response, scope: Scope) -> bool:
    """Pass the reply's raw bytes on; False if the cluster failed mid-reply."""
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError as exc:
        log.warning("%s %s: the index cluster's reply broke off: %s", scope["method"], scope["path"], _reason(exc))
        return False
    return True


async def _stream_watched(send: Send, receive: Receive, response: httpx.Response, scope: Scope) -> bool:
    """As :func:`_stream_reply`, but stop (False) as soon as the caller disconnects."""
    streaming = asyncio.ensure_future(_stream_reply(send, response, scope))
    watching = asyncio.ensure_future(_caller_left(receive))
    try:
        await asyncio.wait((streaming, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watching, streaming):
            task.cancel()
        # Both are finished before the reply is closed under them.
        await asyncio.gather(watching, streaming, return_exceptions=True)
    if streaming.cancelled():
        log.debug("%s %s: the caller left mid-reply", scope["method"], scope["path"])
        return False
    return streaming.result()


async def _caller_left(receive: Receive) -> None:
    """Returns when the caller disconnects (any request body not read yet is discarded)."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


def _reason(exc: Exception) -> str:
    """A short cause, without the URL (httpx puts none in these messages; the URL may hold
    credentials, so none is added)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
