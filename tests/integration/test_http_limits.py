"""The HTTP server's limits with real sockets (``async_query/http_limits.py``): clients that send
their request head a byte at a time, or nothing, are cut off while others are still answered;
at the cap, the connection waiting longest for a head makes room, and only connections beyond a cap
of requests in progress are closed at once; a head too large is a 431; a body that stalls is
cut."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.http_limits import uvicorn_limits
from async_query.runtime import Plugin
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, serve_http, wait_for

HEAD = b"GET /_plugins/_async_query/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"


class SlowClient(threading.Thread):
    """Sends ``head`` a byte every ``every_s`` (nothing at all if empty) until the server answers or
    closes; then reads until the connection ends."""

    def __init__(self, port: int, head: bytes, every_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.head = head
        self.every_s = every_s
        self.sent = 0
        self.reply = b""
        self.ended = threading.Event()

    def run(self) -> None:
        with self.sock:
            for byte in self.head:
                readable, _, _ = select.select([self.sock], [], [], self.every_s)
                if readable:
                    break  # the server answered or closed
                try:
                    self.sock.sendall(bytes([byte]))
                except OSError:
                    break
                self.sent += 1
            self.sock.settimeout(30)
            try:
                while chunk := self.sock.recv(4096):
                    self.reply += chunk
            except OSError:
                pass
        self.ended.set()


def error_of(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _serve_limited(make_plugin: PluginFactory, timeout_s: float) -> Iterator[tuple[str, int, Plugin]]:
    plugin = make_plugin(
        http_header_timeout_s=timeout_s, http_body_timeout_s=timeout_s, http_max_connections=16, http_max_header_bytes=4096
    )
    with serve_http(create_app(plugin), **uvicorn_limits(plugin.settings)) as url:
        yield url, int(url.rsplit(":", 1)[1]), plugin


@pytest.fixture
def limited(make_plugin: PluginFactory) -> Iterator[tuple[str, int, Plugin]]:
    yield from _serve_limited(make_plugin, timeout_s=1.0)


@pytest.fixture
def patient(make_plugin: PluginFactory) -> Iterator[tuple[str, int, Plugin]]:
    """As :func:`limited`, with a head and a body that may each take 30 s."""
    yield from _serve_limited(make_plugin, timeout_s=30.0)


def test_slow_and_silent_clients_are_cut_off_while_others_are_answered(
    limited: tuple[str, int, Plugin],
) -> None:
    url, port, _ = limited
    slow = [SlowClient(port, HEAD) for _ in range(8)]  # a head of 88 bytes would take 8.8 s each
    silent = [SlowClient(port, b"") for _ in range(4)]
    for client in slow + silent:
        client.start()

    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:
        answered = [http.get(f"{BASE}/_sessions").status_code for _ in range(20)]
        assert all(not c.ended.is_set() for c in slow)  # they were all still connected meanwhile
    assert answered == [200] * 20

    for client in slow + silent:
        assert client.ended.wait(10), "a slow client was never cut off"
    for client in slow:
        assert client.sent < len(HEAD)
        status, body = error_of(client.reply)
        assert status == 408
        assert body == {
            "status": 408,
            "error": {
                "type": "RequestTimeoutException",
                "reason": "Request Timeout",
                "details": "the request head did not arrive within 1 s",
            },
        }
    assert all(client.reply == b"" for client in silent)  # nothing asked, nothing answered


def test_at_the_cap_the_longest_waiting_connection_without_a_request_makes_room(
    patient: tuple[str, int, Plugin],
) -> None:
    """At the cap a new connection is kept and the one that has waited longest for a head is
    closed instead: connections that never send a whole head cannot keep every client out."""
    url, port, _ = patient
    holding = [SlowClient(port, b"") for _ in range(16)]  # connected in this order
    for client in holding:
        client.start()
    wait_for(lambda: all(c.is_alive() for c in holding), what="the connections to open")

    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:
        assert http.get(f"{BASE}/_sessions").status_code == 200
    assert holding[0].ended.wait(10) and holding[0].reply == b""  # the first one made room
    assert [i for i, c in enumerate(holding) if c.ended.is_set()] == [0]  # one was enough


def _in_progress(port: int) -> socket.socket:
    """A connection whose request is in progress: its head came whole, and the endpoint waits for
    a body that does not come (the ``100 Continue`` says the endpoint reads it)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        f"POST {BASE} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    )
    conn.sendall(head.encode())
    assert conn.recv(64).startswith(b"HTTP/1.1 100 Continue")
    return conn


def test_connections_beyond_the_cap_are_closed_at_once_while_every_one_has_a_request_in_progress(
    patient: tuple[str, int, Plugin],
) -> None:
    url, port, _ = patient
    busy = [_in_progress(port) for _ in range(16)]
    try:
        extra = SlowClient(port, HEAD, every_s=0.5)  # beyond the cap: closed before it can send much
        extra.start()
        assert extra.ended.wait(10)
        assert extra.reply == b"" and extra.sent < len(HEAD)
    finally:
        for conn in busy:
            conn.close()
    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:  # served again once they are gone
        assert wait_for(lambda: _answered(http), what="a connection to be served again")


def _answered(http: httpx.Client) -> bool:
    try:
        return http.get(f"{BASE}/_sessions").status_code == 200
    except httpx.TransportError:
        return False


def test_a_head_over_the_limit_is_a_431_in_the_error_shape(limited: tuple[str, int, Plugin]) -> None:
    url, port, _ = limited
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /_plugins/_async_query/_sessions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192)
        sock.settimeout(10)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    status, body = error_of(reply)
    assert status == 431
    assert body["error"]["details"] == "the request head is larger than 4096 bytes"
    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:
        assert http.get(f"{BASE}/_sessions", headers={"X-Fine": "a" * 1000}).status_code == 200


def test_a_body_that_stalls_is_cut_and_writes_nothing(
    limited: tuple[str, int, Plugin],
) -> None:
    url, port, plugin = limited
    body = json.dumps({"datasource": "local", "lang": "sql", "query": "SELECT 1"}).encode()
    head = (
        f"POST {BASE} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head.encode() + body[:10])  # and then nothing more
        sock.settimeout(10)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply == b""  # cut: the endpoint saw the client go
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher) and launcher.started == []  # no session started
    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:
        assert http.get(f"{BASE}/_sessions").status_code == 200


def test_a_trailing_slash_is_read_as_the_path_without_it_and_nothing_redirects(
    limited: tuple[str, int, Plugin],
) -> None:
    """Starlette answered a path with a trailing slash by a redirect to a URL it built from the
    request's Host header (``Host: evil.example`` led the caller there); the path is now read as
    the same path without the slash, by every layer."""
    url, _, _ = limited
    with httpx.Client(base_url=url, timeout=10, follow_redirects=False, verify=CLIENT_SSL) as client:
        plain = client.get("/_plugins/_query/_datasources")
        slashed = client.get("/_plugins/_query/_datasources/")
        assert slashed.status_code == plain.status_code == 200
        assert slashed.json() == plain.json() and "location" not in slashed.headers
        # (Under ``none`` a Host that is not the loopback's is refused anyway: a 403, no redirect.)
        for method in ("GET", "POST"):
            elsewhere = client.request(
                method, "/_plugins/_query/_datasources/", headers={"Host": "evil.example:1234"}, json={"name": "x"}
            )
            assert elsewhere.status_code != 307 and "location" not in elsewhere.headers
        missing = client.get(BASE + "/no-such-query/")
        assert missing.status_code in (400, 404) and "location" not in missing.headers
