"""A small closed-loop HTTP/1.1 load generator over loopback.

Each simulated client is one keep-alive connection that sends its next request as soon as the
previous answer is in (no think time), so throughput at N clients is the server's capacity at
that concurrency. The client side is hand-rolled on asyncio streams on purpose: a full HTTP
client costs more CPU per request than the server under test, and on a 2-core machine that would
measure the client. Latency is taken per request from just before the write to the last body byte.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.stats import summary

log = logging.getLogger(__name__)

#: Builds the i-th request of client ``c``: (method, path, JSON body bytes or None).
RequestFactory = Callable[[int, int], tuple[str, str, bytes | None]]
#: Sees every recorded reply: (client, status, body).
ReplyHook = Callable[[int, int, bytes], None]


@dataclass
class LoadResult:
    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    elapsed_s: float = 0.0
    #: The last body seen per status code (to explain unexpected statuses).
    samples: dict[int, bytes] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    @property
    def throughput(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "latency_ms": summary(self.latencies_ms),
            "throughput_per_s": round(self.throughput, 1),
            "elapsed_s": round(self.elapsed_s, 3),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "errors": self.errors,
        }


class HttpProtocolError(Exception):
    """The server's reply could not be read by this minimal client."""


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            raise HttpProtocolError("chunked replies are not supported by the load generator")
    body = await reader.readexactly(length) if length else b""
    return status, body


def _encode(method: str, host: str, path: str, body: bytes | None, extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: bench\r\n{extra}"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


async def _client(
    index: int,
    host: str,
    port: int,
    make: RequestFactory,
    result: LoadResult,
    deadline: float | None,
    count: int | None,
    record_after: float,
    on_reply: ReplyHook | None,
    headers: dict[str, str],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    hostport = f"{host}:{port}"
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    try:
        i = 0
        measured = False  # a request of this client's started after the warm-up
        while (count is None or i < count) and (deadline is None or time.perf_counter() < deadline or not measured):
            method, path, body = make(index, i)
            i += 1
            data = _encode(method, hostport, path, body, extra)
            started = time.perf_counter()
            measured = measured or started >= record_after
            try:
                writer.write(data)
                await writer.drain()
                status, reply = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError, HttpProtocolError) as exc:
                result.errors += 1
                log.warning("client %d: %s", index, exc)
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            done = time.perf_counter()
            if started >= record_after:
                result.latencies_ms.append((done - started) * 1000)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status not in result.samples or status >= 400:
                    result.samples[status] = reply[:500]
                if on_reply is not None:
                    on_reply(index, status, reply)
    finally:
        writer.close()


async def _run(
    base_url: str,
    make: RequestFactory,
    clients: int,
    duration: float | None,
    count: int | None,
    warmup: float,
    on_reply: ReplyHook | None,
    headers: dict[str, str],
) -> LoadResult:
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    result = LoadResult(clients)
    start = time.perf_counter()
    record_after = start + warmup
    deadline = None if duration is None else record_after + duration
    await asyncio.gather(
        *(
            _client(c, host, port, make, result, deadline, count, record_after, on_reply, headers)
            for c in range(clients)
        )
    )
    result.elapsed_s = time.perf_counter() - record_after
    return result


def run_load(
    base_url: str,
    make: RequestFactory,
    clients: int,
    duration: float | None = None,
    count: int | None = None,
    warmup: float = 0.0,
    on_reply: ReplyHook | None = None,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """Run ``clients`` closed-loop clients for ``duration`` seconds (after ``warmup``) or ``count``
    requests each; requests started during the warm-up are sent but not recorded. ``headers`` go
    with every request (an ``Authorization``, say).

    A timed run records at least one request of each client: a client whose warm-up request is
    still unanswered at the deadline sends one more, so a server slower than the run's window is
    measured as slow rather than as silent."""
    if duration is None and count is None:
        raise ValueError("give a duration or a count")
    return asyncio.run(_run(base_url, make, clients, duration, count, warmup, on_reply, headers or {}))
