"""The journaling proxy in front of ``osmem-server``: every index call of every writer passes here.

HTTP/1.1 with keep-alive on both sides, on asyncio protocols with ``httptools`` parsing both ways.
Each client connection is served in order; requests go to the index server over pooled keep-alive
connections. What happens to a request depends on its kind (:func:`~async_query.embedded.effects.route`):

- **reads** are forwarded and their replies relayed as they arrive, once the *read barrier* allows;
- **document writes** (index, create, update, delete, ``_bulk``) are forwarded; once the server
  answered, their effect is appended to the journal, and the reply released when it is durable;
- **liveness writes** (an update marked ``X-Async-Query-Durability: liveness``: a heartbeat) are
  forwarded and answered as they come, not journaled (a crash may lose them: ``docs/durability.md``);
- **other requests that may change something** (index creation, mappings, templates, aliases,
  ``_delete_by_query``...) run alone: in-flight writes drain first and new ones wait until the
  request is answered and recorded. A compaction cut takes the same exclusive turn.

Every request must carry the index server's credential (``Authorization``, compared in constant
time; the header is not passed on): one without it is a 401, and nothing is forwarded.

Read barrier: a reply is released only once every write that the server may have applied before
producing it is durable, i.e. every write to the same index (any index, for a request naming no
single one) that was forwarded before the reply arrived, and every record of that index already
appended. Otherwise a reader could see a write that a crash then loses (a GET showing ``SUCCESS``
whose record was still in memory). With no such write pending, which is the common case, the reply
is relayed at once. A write's own success reply needs only its own record durable.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httptools

from async_query.embedded.effects import (
    BulkMismatchError,
    Kind,
    Route,
    bulk_effect,
    bulk_failed_items,
    bulk_scope,
    document_effect,
    kept_changes,
    raw_effect,
    route,
)
from async_query.embedded.journal import Journal

log = logging.getLogger(__name__)

#: Headers not passed on: those of one hop that the proxy sets itself on the other, and the
#: caller's credential.
_HOP_BY_HOP = frozenset(
    {
        b"authorization",
        b"x-async-query-durability",
        b"connection",
        b"keep-alive",
        b"content-length",
        b"transfer-encoding",
        b"expect",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
MAX_IDLE_UPSTREAM = 64
#: Answers the proxy's own endpoints: (method, path, body) -> (status, JSON payload).
Control = Callable[[str, str, bytes], Awaitable[tuple[int, Any]]]
#: Told which indexes each journal record changed (None: possibly any).
OnAppend = Callable[[set[str] | None], None]


@dataclass(slots=True)
class Request:
    method: str
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool
    authorization: bytes | None = None
    #: Marked as a write a crash may lose (a heartbeat).
    liveness: bool = False

    def encode(self) -> bytes:
        """The request as sent to the index server (keep-alive, a fixed-length body)."""
        head = [self.method.encode(), b" ", self.target, b" HTTP/1.1\r\n"]
        for name, value in self.headers:
            if name.lower() not in _HOP_BY_HOP:
                head += [name, b": ", value, b"\r\n"]
        if self.body or self.method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: %d\r\n" % len(self.body))
        head += [b"\r\n", self.body]
        return b"".join(head)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> bytes:
    body = json.dumps(payload).encode()
    reason = HTTPStatus(status).phrase
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Reply:
    """One reply of the index server as it arrives: raw bytes (relayed as they are, or kept until
    the reply may be released), the body when the journal needs it, and its end."""

    __slots__ = ("body", "chunks", "done", "head_only", "keep_alive", "on_first", "parser", "sink", "status")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        head_only: bool = False,
        keep_body: bool = False,
        on_first: Callable[[], Callable[[bytes], None] | None] | None = None,
    ) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        self.chunks: list[bytes] = []
        self.body: list[bytes] | None = [] if keep_body else None
        self.status = 0
        self.keep_alive = False
        self.head_only = head_only
        #: Called at the first byte: returns where to relay the reply from now on, or None to keep it.
        self.on_first = on_first
        self.sink: Callable[[bytes], None] | None = None
        self.parser: Any = None if head_only else httptools.HttpResponseParser(self)

    def feed(self, data: bytes) -> None:
        if self.done.done():
            return
        if self.on_first is not None:
            hook, self.on_first = self.on_first, None
            self.sink = hook()
        if self.sink is not None:
            self.sink(data)
        else:
            self.chunks.append(data)
        if self.parser is None:
            self._feed_head()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(exc)

    def _feed_head(self) -> None:
        """A reply to HEAD: headers only (a Content-Length it carries announces no body)."""
        head = b"".join(self.chunks)
        end = head.find(b"\r\n\r\n")
        if end < 0:
            return
        first, _, rest = head[:end].partition(b"\r\n")
        self.status = int(first.split(b" ", 2)[1])
        self.keep_alive = b"connection: close" not in rest.lower()
        self.done.set_result(None)

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = bool(self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self.body is not None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)

    def json(self) -> Any:
        try:
            return json.loads(b"".join(self.body or []))
        except ValueError:
            return None


class _Upstream(asyncio.Protocol):
    """One keep-alive connection to the index server, one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reply: _Reply | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.reply is not None:
            self.reply.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.reply is not None:
            self.reply.fail(exc or ConnectionResetError("the index server closed the connection"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Client(asyncio.Protocol):
    """One client connection: requests parsed by httptools, served one after another."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._authorization: bytes | None = None
        self._liveness = False

    # -- transport --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.proxy.clients.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.clients.discard(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.write(
                json_response(400, {"error": {"type": "parse_exception", "reason": "bad HTTP request"}, "status": 400})
            )
            self.close()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._authorization, self._liveness = b"", [], [], None, False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        if len(name) == 13 and name.lower() == b"authorization":
            self._authorization = value
        elif len(name) == 24 and name.lower() == b"x-async-query-durability":
            self._liveness = value.strip().lower() == b"liveness"

    def on_headers_complete(self) -> None:
        if any(n.lower() == b"expect" and v.lower() == b"100-continue" for n, v in self._headers):
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode("ascii", "replace")
        body = b"".join(self._body)
        keep_alive = bool(self.parser.should_keep_alive())
        request = Request(method, self._url, self._headers, body, keep_alive, self._authorization, self._liveness)
        self.queue.append(request)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        try:
            while self.queue:
                request = self.queue.popleft()
                await self.proxy.serve(request, self)
                if not request.keep_alive:
                    self.close()
                    return
        finally:
            self.task = None


@dataclass(slots=True, eq=False)
class _Inflight:
    """A write forwarded and not yet recorded; ``done`` gets its record's number (0: none)."""

    scope: frozenset[str] | None
    done: asyncio.Future[int]


class WriteGate:
    """Document writes share it; a kept request or a compaction cut takes it alone (new shared
    holders wait behind a waiting exclusive one, so a stream of writes cannot starve it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.shared = 0
        self.exclusive = False
        self._exclusive_waiters: deque[asyncio.Future[None]] = deque()
        self._shared_waiters: list[asyncio.Future[None]] = []
        self._drained: asyncio.Future[None] | None = None

    async def acquire_shared(self) -> None:
        while self.exclusive or self._exclusive_waiters:
            waiter = self._loop.create_future()
            self._shared_waiters.append(waiter)
            await waiter
        self.shared += 1

    def release_shared(self) -> None:
        self.shared -= 1
        if self.shared == 0 and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def acquire_exclusive(self) -> None:
        if self.exclusive or self._exclusive_waiters:
            waiter = self._loop.create_future()
            self._exclusive_waiters.append(waiter)
            await waiter  # handed over by the holder: ``exclusive`` stays set
        self.exclusive = True
        while self.shared:
            self._drained = self._loop.create_future()
            await self._drained

    def release_exclusive(self) -> None:
        while self._exclusive_waiters:
            waiter = self._exclusive_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.exclusive = False
        waiters, self._shared_waiters = self._shared_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


_UNAUTHORIZED = {
    "error": {"type": "security_exception", "reason": "missing or wrong credentials for the embedded index"},
    "status": 401,
}


class Proxy:
    def __init__(
        self,
        upstream: tuple[str, int],
        journal: Journal,
        control: Control,
        on_append: OnAppend,
        authorization: bytes | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        #: The ``Authorization`` header every request must carry (None: none asked).
        self.authorization = authorization
        self.upstream = upstream
        self.journal = journal
        self.control = control
        self.on_append = on_append
        self.gate = WriteGate(self.loop)
        self.inflight: set[_Inflight] = set()
        #: Per index, the last journal record that changed it; ``_last_any`` for kept requests.
        self._last: dict[str, int] = {}
        self._last_any = 0
        self.aliases: frozenset[str] = frozenset()
        self.clients: set[_Client] = set()
        self._idle: list[_Upstream] = []
        self._server: asyncio.base_events.Server | None = None
        self.active = 0
        self._quiet = asyncio.Event()
        #: Requests served, by kind (``read``, ``index``, ``bulk``, ``raw``...).
        self.served: dict[str, int] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> int:
        """Listen on ``host:port`` (0: a free port), or on ``sock`` (bound already); returns the port."""
        await self._load_aliases()
        if sock is not None:
            self._server = await self.loop.create_server(lambda: _Client(self), sock=sock, backlog=1024)
        else:
            self._server = await self.loop.create_server(lambda: _Client(self), host, port, backlog=1024)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop listening, let the requests under way finish (within ``grace_s``), close all."""
        if self._server is not None:
            self._server.close()
        if self.active:
            self._quiet.clear()
            try:
                await asyncio.wait_for(self._quiet.wait(), grace_s)
            except TimeoutError:
                log.warning("%d index requests still under way at shutdown", self.active)
        for client in list(self.clients):
            client.close()
        for upstream in self._idle:
            upstream.close()
        self._idle.clear()

    @asynccontextmanager
    async def paused(self) -> Any:
        """No write in flight, none starting: a clean cut of the journal."""
        await self.gate.acquire_exclusive()
        try:
            yield
        finally:
            self.gate.release_exclusive()

    # -- serving ----------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        expected = self.authorization
        if expected is None:
            return True
        return request.authorization is not None and hmac.compare_digest(request.authorization, expected)

    async def serve(self, request: Request, client: _Client) -> None:
        if not self.authorized(request):
            self.served["refused"] = self.served.get("refused", 0) + 1
            client.write(json_response(401, _UNAUTHORIZED, {"WWW-Authenticate": 'Basic realm="embedded index"'}))
            return
        self.active += 1
        try:
            path = request.target.split(b"?", 1)[0].decode("utf-8", "replace")
            where = route(request.method, path, self.aliases)
            self.served[where.kind.value] = self.served.get(where.kind.value, 0) + 1
            if where.kind is Kind.READ:
                await self._read(request, where.scope, client)
            elif where.kind is Kind.CONTROL:
                status, payload = await self.control(request.method, path, request.body)
                client.write(json_response(status, payload))
            elif where.kind is Kind.RAW:
                await self._kept(request, client)
            elif request.liveness and where.kind is Kind.UPDATE:
                await self._liveness_write(request, where.scope, client)
            else:
                await self._write(request, where, client)
        except Exception:
            log.exception("index request %s %s failed in the proxy", request.method, request.target[:200])
            client.write(
                json_response(500, {"error": {"type": "proxy_exception", "reason": "internal error"}, "status": 500})
            )
            client.close()
        finally:
            self.active -= 1
            if not self.active:
                self._quiet.set()

    async def _read(self, request: Request, scope: frozenset[str] | None, client: _Client) -> None:
        head_only = request.method == "HEAD"

        def relay_now() -> Callable[[bytes], None] | None:
            return client.write if self._barrier(scope) is None else None

        reply = _Reply(self.loop, head_only, on_first=None if head_only else relay_now)
        if not await self._exchange(request.encode(), reply):
            self._unavailable(client, reply)
            return
        if reply.sink is None:
            await self._wait(self._barrier(scope))
            client.write(b"".join(reply.chunks))

    async def _write(self, request: Request, where: Route, client: _Client) -> None:
        scope = bulk_scope(where.index, request.body, self.aliases) if where.kind is Kind.BULK else where.scope
        await self.gate.acquire_shared()
        inflight = _Inflight(scope, self.loop.create_future())
        self.inflight.add(inflight)
        reply = _Reply(self.loop, keep_body=True)
        answered, lsn, clean = False, 0, False
        try:
            answered = await self._exchange(request.encode(), reply)
            if answered:
                lsn, clean = self._record(request, where, reply, scope)
        finally:
            self.inflight.discard(inflight)
            inflight.done.set_result(lsn)
            self.gate.release_shared()
        if not answered:
            self._unavailable(client, reply)
            return
        if clean:
            await self.journal.wait_durable(lsn)
        else:  # an error or a partial failure tells about other writes: as a read would
            await self._wait(self._barrier(scope))
        client.write(b"".join(reply.chunks))

    async def _liveness_write(self, request: Request, scope: frozenset[str] | None, client: _Client) -> None:
        """A write a crash may lose: forwarded and answered, never journaled, and not waited for
        by reads (they may see it before a crash loses it: what it says is only that its writer
        was alive). An error reply (a conflict) can tell about other writes: it waits as a read's."""
        self.served["liveness"] = self.served.get("liveness", 0) + 1
        reply = _Reply(self.loop)
        if not await self._exchange(request.encode(), reply):
            self._unavailable(client, reply)
            return
        if reply.status >= 300:
            await self._wait(self._barrier(scope))
        client.write(b"".join(reply.chunks))

    def _record(self, request: Request, where: Route, reply: _Reply, scope: frozenset[str] | None) -> tuple[int, bool]:
        """Append what the server applied; returns (record number or 0, whether it all succeeded)."""
        answer = reply.json()
        found: tuple[bytes, set[str] | None] | None
        if where.kind is Kind.BULK:
            clean = reply.status == 200 and not bulk_failed_items(answer)
            try:
                found = bulk_effect(request.body, answer)
            except BulkMismatchError as exc:  # cannot tell items apart: keep the whole request
                log.error("a bulk reply did not match its request (%s); journaling the request as it was", exc)
                target = request.target.decode("utf-8", "replace")
                found = (raw_effect(request.method, target, request.body), None) if reply.status == 200 else None
        else:
            found = document_effect(where.kind, request.body, reply.status, answer)
            clean = found is not None
        if found is None:
            return 0, False
        payload, indexes = found
        lsn = self.journal.append(payload)
        self._appended(lsn, indexes, scope)
        self.on_append(indexes)
        return lsn, clean

    async def _kept(self, request: Request, client: _Client) -> None:
        """A request that may change anything: alone, recorded as it was."""
        await self.gate.acquire_exclusive()
        inflight = _Inflight(None, self.loop.create_future())
        self.inflight.add(inflight)
        reply = _Reply(self.loop)
        answered, lsn = False, 0
        try:
            answered = await self._exchange(request.encode(), reply)
            if answered and reply.status < 300:
                target = request.target.decode("utf-8", "replace")
                lsn = self.journal.append(raw_effect(request.method, target, request.body))
                self._last_any = lsn
                self.on_append(kept_changes(target))
                await self._load_aliases()
        finally:
            self.inflight.discard(inflight)
            inflight.done.set_result(lsn)
            self.gate.release_exclusive()
        if not answered:
            self._unavailable(client, reply)
            return
        await (self.journal.wait_durable(lsn) if lsn else self._wait(self._barrier(None)))
        client.write(b"".join(reply.chunks))

    # -- the read barrier -------------------------------------------------------------------

    def _appended(self, lsn: int, indexes: set[str] | None, scope: frozenset[str] | None) -> None:
        if indexes is None:
            self._last_any = lsn
            return
        for name in indexes:
            self._last[name] = lsn
        for name in scope or ():  # an alias a write named, as well as the index it reached
            self._last[name] = lsn

    def _barrier(self, scope: frozenset[str] | None) -> tuple[list[asyncio.Future[int]], int] | None:
        """What a reply about ``scope`` must wait for, or None when it may go at once."""
        pending = [w.done for w in self.inflight if scope is None or w.scope is None or not w.scope.isdisjoint(scope)]
        if scope is None:
            need = self.journal.appended
        else:
            need = max(self._last_any, max((self._last.get(name, 0) for name in scope), default=0))
        if not pending and need <= self.journal.durable:
            return None
        return pending, need

    async def _wait(self, barrier: tuple[list[asyncio.Future[int]], int] | None) -> None:
        if barrier is None:
            return
        pending, need = barrier
        for write in pending:
            need = max(need, await write)
        await self.journal.wait_durable(need)

    # -- the index server side --------------------------------------------------------------

    async def _exchange(self, request: bytes, reply: _Reply) -> bool:
        """Send one request and wait for its whole reply; False if the server did not answer."""
        try:
            upstream = await self._upstream()
        except OSError as exc:
            reply.fail(exc)
            return False
        upstream.reply = reply
        assert upstream.transport is not None
        upstream.transport.write(request)
        try:
            await reply.done
        except (OSError, httptools.HttpParserError) as exc:
            log.warning("the index server did not answer: %s", exc)
            upstream.close()
            return False
        except BaseException:
            upstream.close()
            raise
        finally:
            upstream.reply = None
        if reply.keep_alive and not upstream.closed and len(self._idle) < MAX_IDLE_UPSTREAM:
            self._idle.append(upstream)
        else:
            upstream.close()
        return True

    async def _upstream(self) -> _Upstream:
        while self._idle:
            upstream = self._idle.pop()
            if not upstream.closed:
                return upstream
        _, protocol = await self.loop.create_connection(_Upstream, *self.upstream)
        return protocol

    def _unavailable(self, client: _Client, reply: _Reply) -> None:
        if reply.sink is not None:  # part of the reply went out already: the connection is spoilt
            client.close()
            return
        error = {"type": "index_server_unavailable", "reason": "the index server did not answer"}
        client.write(json_response(502, {"error": error, "status": 502}))

    async def _load_aliases(self) -> None:
        reply = _Reply(self.loop, keep_body=True)
        host = f"{self.upstream[0]}:{self.upstream[1]}".encode()
        if await self._exchange(b"GET /_alias HTTP/1.1\r\nHost: " + host + b"\r\n\r\n", reply) and reply.status == 200:
            found = reply.json() or {}
            self.aliases = frozenset(a for entry in found.values() for a in entry.get("aliases", {}))
