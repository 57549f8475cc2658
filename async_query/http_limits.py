"""The HTTP server's limits, so that no client, however slow or numerous, exhausts the service.

uvicorn bounds neither how long a request's head may take to arrive (a connection that sends its
headers a byte at a time, or nothing at all, is kept for ever) nor its size, and its concurrency
limit answers in plain text. Here (``docs/security.md``, "Resource limits"):

- at most ``http_max_connections`` open client connections per process: when a new connection
  would pass the cap, the connection that has waited longest without a request in progress
  (still reading a request head, or idle between requests) is closed to make room; only when every
  connection has a request in progress is the new one closed as soon as it is accepted. Holding
  connections that never finish a head thus cannot keep out a client that sends a whole one
  (docs/security.md, "Resource limits");
- a request's head (request line and headers) must arrive within ``http_header_timeout_s`` of the
  connection or of the request's first byte, and its body within ``http_body_timeout_s`` of its
  head; a slower connection is cut (a 408 in the error shape when nothing was answered yet);
- a head over ``http_max_header_bytes`` is a 431 and the connection is closed;
- at most ``http_max_concurrency`` requests are handled at once; one beyond is a 503 in the
  error shape (:class:`ConcurrencyLimit`, outermost in the app);
- an idle keep-alive connection is closed after ``http_keep_alive_s``, and a stop waits at most
  ``http_shutdown_timeout_s`` for the requests in progress.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from async_query.http_errors import REASONS, error_bytes
from async_query.settings import Settings

log = logging.getLogger(__name__)

#: The order in which connections began to wait (the event loop's clock may tick by milliseconds:
#: connections accepted together would tie).
_TURNS = itertools.count()


def raw_reply(status: int, error_type: str, details: str) -> bytes:
    """A whole HTTP/1.1 error reply that closes the connection, for the protocol to write itself."""
    body = error_bytes(status, error_type, details)
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap, a head timeout, a head size cap and a
    body timeout. The limits are class attributes: :func:`protocol_for` makes a subclass with
    the settings' values."""

    max_connections = 512
    header_timeout_s = 10.0
    body_timeout_s = 60.0
    max_header_bytes = 65_536

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = False
        self._head_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        #: When (in the order of :data:`_TURNS`) the connection began to wait for a request head:
        #: at its start, then at each reply's end; the longest waiting one makes room at the cap.
        self._waiting_since = next(_TURNS)

    # -- the connection -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._waiting_since = next(_TURNS)
        super().connection_made(transport)
        if not self._make_room():
            log.warning("refused a connection: %d open already, each with a request in progress", self.max_connections)
            transport.close()
            return
        self._expect_head()

    def _make_room(self) -> bool:
        """Whether this new connection may stay: the cap is not passed, or the connection that
        has waited longest without a request in progress was closed for it."""
        others = [c for c in self.connections if c is not self and not c.transport.is_closing()]
        if len(others) < self.max_connections:
            return True
        idle = [c for c in others if isinstance(c, LimitedHttpProtocol) and c._between_requests()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._waiting_since)
        log.info("closed a connection without a request in progress to make room (http_max_connections)")
        oldest._disarm()
        oldest.transport.close()
        return True

    def _between_requests(self) -> bool:
        """No request in progress: reading a head, or idle after a reply (keep-alive)."""
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    def on_response_complete(self) -> None:
        self._waiting_since = next(_TURNS)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        pending = self._awaiting_head
        super().data_received(data)
        # Only bytes that arrived wholly before the head was complete count (a chunk in which a
        # new request began is not split): the size is bounded to within one read.
        if pending and self._awaiting_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                details = f"the request head is larger than {self.max_header_bytes} bytes"
                self._refuse(431, "RequestHeaderFieldsTooLargeException", details)

    # -- the parser's callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._awaiting_head:  # a keep-alive connection's next request: its head is timed from here
            self._expect_head()

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._arm(self.body_timeout_s, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    # -- the timers -------------------------------------------------------------------------

    def _expect_head(self) -> None:
        self._awaiting_head = True
        self._head_bytes = 0
        self._arm(self.header_timeout_s, self._head_timed_out)

    def _arm(self, delay_s: float, action: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay_s, action)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if not self._awaiting_head or self.transport.is_closing():
            return
        if self._head_bytes or self.headers:
            details = f"the request head did not arrive within {self.header_timeout_s:g} s"
            self._refuse(408, "RequestTimeoutException", details)
        else:
            self.transport.close()  # a connection that sent nothing: nothing to answer

    def _body_timed_out(self) -> None:
        """The body is late: the endpoint, already running, sees the client disconnect."""
        self._timer = None
        if not self.transport.is_closing():
            log.info("cut a connection whose request body did not arrive within %g s", self.body_timeout_s)
            self.transport.close()

    def _refuse(self, status: int, error_type: str, details: str) -> None:
        self._disarm()
        self._awaiting_head = False
        log.info("cut a connection: %s", details)
        self.transport.write(raw_reply(status, error_type, details))
        self.transport.close()


def protocol_for(settings: Settings) -> type[LimitedHttpProtocol]:
    """The protocol class with the settings' limits."""
    return type(
        "ConfiguredHttpProtocol",
        (LimitedHttpProtocol,),
        {
            "max_connections": settings.http_max_connections,
            "header_timeout_s": settings.http_header_timeout_s,
            "body_timeout_s": settings.http_body_timeout_s,
            "max_header_bytes": settings.http_max_header_bytes,
        },
    )


def uvicorn_limits(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.Config``/``uvicorn.run`` that apply the limits."""
    return {
        "http": protocol_for(settings),
        "timeout_keep_alive": settings.http_keep_alive_s,
        "timeout_graceful_shutdown": settings.http_shutdown_timeout_s,
        "h11_max_incomplete_event_size": settings.http_max_header_bytes,
    }


class ConcurrencyLimit:
    """ASGI middleware: at most ``limit`` requests handled at once; one more is a 503 in the error
    shape, answered without reading its body. Outermost, so that it bounds everything behind it
    (authentication included)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active = 0
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            self.refused += 1
            await _busy(send, self.limit)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


async def _busy(send: Send, limit: int) -> None:
    body = error_bytes(503, "ServiceUnavailableException", f"more than {limit} requests at once; try again later")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
