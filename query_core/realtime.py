"""GET by id on the hot path: keep-alive connections (a socket per thread, or a pool per event
loop) whose replies httptools parses.

A GET of a running statement costs one real-time read. Through opensearch-py that read costs
about three times the CPU of the same request on a bare socket with a C HTTP parser (measured on
this product's bench machine), most of it in urllib3's and http.client's request and response
layers (http.client parses every response's headers with the ``email`` package).
:class:`RealtimeReader` makes only that one kind of request, with the driver's own settings (URL,
basic auth, TLS verification, timeout), parses the reply with ``httptools`` (the parser uvicorn
serves this product with), and answers only what it fully understands: a 200 with a document,
or a 404. A blocking read's timeout is the driver's own ``ConnectionTimeout`` (the store's retry
policy decides, as for any read); an event-loop read's is :class:`ReadTimedOut`. Anything else (a connection error, another status, a body it cannot parse) is
:class:`ReadNotServed`, and the store then makes the same read through the driver, with its
retries and error translation. SigV4-signed clusters are always read through the driver.

Only :mod:`query_core.store` uses this module.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import select
import socket
import ssl
import threading
import weakref
from typing import Any
from urllib.parse import quote, urlsplit

from opensearchpy.exceptions import ConnectionError as DriverConnectionError
from opensearchpy.exceptions import ConnectionTimeout

try:
    import httptools
except ImportError:  # a job image without it (it is no job requirement): reads go through the driver
    httptools = None  # type: ignore[assignment]

from query_core.config import OpenSearchConfig
from query_core.peer import PeerRefusedError, check_peer, refusal

#: Largest reply read (a statement or session document is a few KB; a big query text may be 1 MB).
MAX_REPLY_BYTES = 16 * 1024 * 1024


#: Names that need no percent-encoding in a URL path (this product's ids and index names).
_PLAIN = re.compile(r"[A-Za-z0-9._\-]+")


def _quoted(name: str) -> str:
    return name if _PLAIN.fullmatch(name) else quote(name, safe="")


class ReadNotServed(Exception):  # noqa: N818 - a signal to fall back, not an error to report
    """The reader could not give a sure answer; read through the driver instead."""


class MisdirectedReply(ReadNotServed):
    """A reply about another document than the one asked for: its connection is not to be trusted."""


class ReadTimedOut(ReadNotServed):
    """The index server did not answer within the request timeout: reading again at once would
    wait as long again."""


class _Reply:
    """httptools callbacks: the body, whether the message is complete, and whether the server
    keeps the connection open (known only while the parser is inside the message)."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.complete = False
        self.keep_alive = False
        self.parser: Any = None

    def on_headers_complete(self) -> None:
        self.keep_alive = bool(self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def _document(status: int, body: bytes, doc_id: str) -> dict[str, Any] | None:
    """A GET's reply as the driver returns it; None for a 404; ReadNotServed for anything else.

    A document must be the one asked for (its ``_id``): a reply about another one (a keep-alive
    connection that carried an earlier request's reply over) is never handed to the caller."""
    if status == 404:
        return None
    if status != 200:
        raise ReadNotServed(f"status {status}")
    try:
        reply = json.loads(body)
    except ValueError as exc:
        raise ReadNotServed("unparsable reply") from exc
    if not isinstance(reply, dict):
        raise ReadNotServed("unexpected reply")
    if reply.get("_id") != doc_id:
        raise MisdirectedReply("a reply about another document")
    return reply


class RealtimeReader:
    """Real-time GETs by id over a per-thread keep-alive connection."""

    def __init__(self, cfg: OpenSearchConfig) -> None:
        parts = urlsplit(cfg.url)
        self._address = (cfg.host, cfg.port)
        self._prefix = parts.path.rstrip("/")
        self._timeout = cfg.request_timeout
        host = cfg.host if cfg.port in (80, 443) else f"{cfg.host}:{cfg.port}"
        headers = [f"Host: {host}", "Accept: application/json", "Connection: keep-alive"]
        if cfg.auth == "basic":
            token = base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()
            headers.append(f"Authorization: Basic {token}")
        self._headers = ("\r\n".join(headers) + "\r\n\r\n").encode()
        self._context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._context = ssl.create_default_context(cafile=cfg.ca_certs or None)
            if not cfg.verify_certs:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        self._local = threading.local()
        #: The uid the index's listener must belong to (:mod:`query_core.peer`; None: not checked).
        self.peer_uid = cfg.peer_uid

    @staticmethod
    def usable(cfg: OpenSearchConfig) -> bool:
        """Whether the cluster can be read this way: not when requests must be SigV4-signed, nor
        without ``httptools`` (a plugin dependency, not one of the job's)."""
        return cfg.auth != "sigv4" and httptools is not None

    def request(self, index: str, doc_id: str) -> bytes:
        """The bytes of a GET of ``doc_id`` in ``index``."""
        return f"GET {self._prefix}/{_quoted(index)}/_doc/{_quoted(doc_id)} HTTP/1.1\r\n".encode() + self._headers

    def write(self, method: str, path: str, body: bytes, extra_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One document write on this thread's connection: ``method`` ``path`` (below the URL's
        prefix, query string included) with a JSON ``body``; returns the status and the reply's body.

        Whether the server applied a write whose exchange failed cannot be known: a failure is the
        driver's own connection error (a timeout: ``ConnectionTimeout``), for the store's retry
        policy, which treats it as the driver's (a retried create that finds its own document
        counts as written; a retried conditional write that conflicts re-reads)."""
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n"
        for name, value in (extra_headers or {}).items():
            head += f"{name}: {value}\r\n"
        try:
            return self._exchange(head.encode() + self._headers + body)
        except TimeoutError as exc:
            self._drop()
            raise ConnectionTimeout("TIMEOUT", f"no reply within {self._timeout} s", exc) from exc
        except (OSError, httptools.HttpParserError) as exc:
            self._drop()
            raise DriverConnectionError("N/A", f"{type(exc).__name__}: {exc}", exc) from exc

    def get(self, index: str, doc_id: str) -> dict[str, Any] | None:
        """The driver's ``get`` reply (``_source``, ``_seq_no``, ...) or None when there is no such
        document or index. Raises :class:`ReadNotServed` for anything else."""
        try:
            status, body = self._exchange(self.request(index, doc_id))
        except TimeoutError as exc:
            # The server took the whole request timeout: reading again through the driver would
            # wait as long once more. This is the driver's own timeout error, for the store's
            # retry policy to decide on.
            self._drop()
            raise ConnectionTimeout("TIMEOUT", f"no reply within {self._timeout} s", exc) from exc
        except (OSError, httptools.HttpParserError) as exc:
            self._drop()
            raise ReadNotServed(type(exc).__name__) from exc
        try:
            return _document(status, body, doc_id)
        except MisdirectedReply:
            self._drop()
            raise

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send one request on this thread's connection and read its whole reply.

        A connection the server closed while idle fails on the send or on the first read; it is
        dropped (the caller falls back to the driver, and the next read connects afresh).
        """
        sock = self._socket()
        sock.sendall(request)
        reply = _Reply()
        parser = reply.parser = httptools.HttpResponseParser(reply)
        while not reply.complete:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("the index server closed the connection")
            parser.feed_data(chunk)
            if len(reply.body) > MAX_REPLY_BYTES:
                raise OSError("reply too large for the hot path")
        if not reply.keep_alive:
            self._drop()
        return parser.get_status_code(), bytes(reply.body)

    def _socket(self) -> socket.socket:
        sock: socket.socket | None = getattr(self._local, "sock", None)
        if sock is not None and _readable(sock):
            # Idle, yet readable: the server closed it (or sent bytes no request asked for).
            self._drop()
            sock = None
        if sock is None:
            sock = socket.create_connection(self._address, timeout=self._timeout)
            check_peer(sock, self.peer_uid)  # before a byte of the credential is sent
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._address[0])
            self._local.sock = sock
        return sock

    def _drop(self) -> None:
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close this thread's connection (the others close with their threads' objects)."""
        self._drop()


def _readable(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


class _GetProtocol(asyncio.Protocol):
    """One keep-alive connection's side of the exchange: bytes in, fed straight to httptools;
    the reply completes a future. Cheaper than asyncio's streams, which buffer and wake a
    coroutine per chunk."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.reply = _Reply()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A write transport, but not necessarily an asyncio.Transport (uvloop's is its own class).
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes, waiter: asyncio.Future[tuple[int, bytes, bool]]) -> None:
        self.waiter = waiter
        self.reply = _Reply()
        self.reply.parser = httptools.HttpResponseParser(self.reply)
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        waiter, reply = self.waiter, self.reply
        if waiter is None or waiter.done():
            return
        try:
            reply.parser.feed_data(data)
            if len(reply.body) > MAX_REPLY_BYTES:
                raise OSError("reply too large for the hot path")
        except (httptools.HttpParserError, OSError) as exc:
            waiter.set_exception(exc)
            return
        if reply.complete:
            waiter.set_result((reply.parser.get_status_code(), bytes(reply.body), reply.keep_alive))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionResetError("the index server closed the connection"))


class AsyncRealtimeReader:
    """The same reads for code running on an asyncio event loop (the REST layer's GET), so that a
    read does not hold a worker thread through its round trip, nor hand the interpreter back and
    forth with the loop while it waits.

    Keep-alive connections (:class:`_GetProtocol`) are pooled per event loop. Every failure is
    :class:`ReadNotServed`: the caller then serves the request the blocking way, whose reads have
    the store's retries. A timeout is :class:`ReadTimedOut`, which the store reports as the index
    being unavailable rather than waiting as long again.
    """

    def __init__(self, reader: RealtimeReader, max_idle: int = 64) -> None:
        self._reader = reader
        self._max_idle = max_idle
        # Connections belong to the loop that opened them; a loop's pool goes with the loop.
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_GetProtocol]] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self, index: str, doc_id: str) -> dict[str, Any] | None:
        """As :meth:`RealtimeReader.get`, on the running event loop."""
        loop = asyncio.get_running_loop()
        idle = self._idle.setdefault(loop, [])
        conn = idle.pop() if idle else None
        timeout = self._reader._timeout
        waiter: asyncio.Future[tuple[int, bytes, bool]] = loop.create_future()
        expiry = loop.call_later(timeout, _expire, waiter, timeout)
        try:
            if conn is None or conn.closed:
                conn = await asyncio.wait_for(self._connect(loop), timeout)
            conn.send(self._reader.request(index, doc_id), waiter)
            status, body, keep = await waiter
        except TimeoutError as exc:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            raise ReadTimedOut(f"no reply within {timeout} s") from exc
        except (OSError, httptools.HttpParserError) as exc:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            raise ReadNotServed(type(exc).__name__) from exc
        except asyncio.CancelledError:  # the request was abandoned: its connection is mid-reply
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            raise
        finally:
            expiry.cancel()
        try:
            found = _document(status, body, doc_id)
        except MisdirectedReply:
            keep = False
            raise
        finally:
            if keep and not conn.closed and len(idle) < self._max_idle:
                idle.append(conn)
            elif conn.transport is not None:
                conn.transport.close()
        return found

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _GetProtocol:
        host, port = self._reader._address
        context = self._reader._context
        transport, protocol = await loop.create_connection(
            _GetProtocol, host, port, ssl=context, server_hostname=host if context else None
        )
        reason = refusal(transport.get_extra_info("socket"), self._reader.peer_uid)
        if reason is not None:  # nothing was sent yet: requests are sent once connected
            transport.close()
            raise PeerRefusedError(reason)
        return protocol


def _expire(waiter: asyncio.Future[tuple[int, bytes, bool]], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"no reply within {timeout} s"))
