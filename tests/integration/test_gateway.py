"""Gateway mode over real HTTP: the service in front of a real OpenSearch node, and, where a
test must see exactly what arrives upstream or make the cluster misbehave, in front of a small real
HTTP server (:class:`Upstream`) or a socket that refuses or never answers.

The calls OpenSearch Dashboards makes are sent with the bodies it sends, once through the gateway
and once directly to the cluster, emptied of what the first round made, and must come back the
same.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.cli import main
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.gateway import (
    Gateway,
    GatewayConfigError,
    GatewayLimits,
    PassPolicy,
    Refusal,
    caller_credentials,
    owns,
    service_credentials,
)
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.states import StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL, index_client, index_config
from tests.support import RecordingLauncher, free_port, serve_http, wait_for

SECRET = "s3cret-password"
NDJSON = {"Content-Type": "application/x-ndjson"}

# -- a real upstream that records what reaches it ---------------------------------------------------


@dataclass
class Seen:
    """One request as the upstream received it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    chunked: bool

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


@dataclass
class Reply:
    """What the upstream answers: ``chunks`` sent chunked, or under a Content-Length (``declared``
    overrides it, to send fewer bytes than promised and hang up); ``hold`` waits before the
    chunks after the first."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("Content-Type", "application/json")])
    chunks: list[bytes] = field(default_factory=lambda: [b'{"ok":true}'])
    chunked: bool = False
    declared: int | None = None
    hold: threading.Event | None = None
    #: After the first chunk, wait (up to 10 s) for the gateway to close the connection.
    await_close: bool = False


class Upstream:
    """A real HTTP/1.1 server on a free loopback port (a thread per connection)."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.answer: Callable[[Seen], Reply] = lambda seen: Reply()
        #: Set when the first chunk of a chunked request body has arrived.
        self.first_chunk = threading.Event()
        #: Set when the gateway closed a connection whose reply was not finished.
        self.dropped = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _read_chunked(self) -> bytes:
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()
                    upstream.first_chunk.set()

            def _any(self) -> None:
                chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
                length = int(self.headers.get("Content-Length") or 0)
                body = self._read_chunked() if chunked else self.rfile.read(length)
                seen = Seen(self.command, self.path, list(self.headers.items()), body, chunked)
                upstream.seen.append(seen)
                self._send(upstream.answer(seen))

            def _send(self, reply: Reply) -> None:
                self.send_response_only(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    length = reply.declared if reply.declared is not None else sum(map(len, reply.chunks))
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                if self.command == "HEAD":
                    return
                for i, chunk in enumerate(reply.chunks):
                    if i == 1 and reply.hold is not None:
                        assert reply.hold.wait(30), "the test never released the reply"
                    if i == 1 and reply.await_close:
                        self.close_connection = True
                        self.connection.settimeout(10)
                        if self.rfile.read(1) == b"":
                            upstream.dropped.set()
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if reply.chunked else chunk)
                    self.wfile.flush()
                if reply.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                if reply.declared is not None:
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any  # noqa: N815 - http.server's names

        return Handler


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


# -- the service in gateway mode -------------------------------------------------------------------


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin()


@contextmanager
def through(
    plugin: Plugin, upstream: str, policy: PassPolicy | None = None, limits: GatewayLimits | None = None
) -> Iterator[httpx.Client]:
    """An HTTP client of ``service`` served in gateway mode in front of ``upstream``."""
    gateway = Gateway(upstream, policy or service_credentials(index_config(upstream)), limits)
    with serve_http(create_app(plugin, gateway=gateway)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
        yield client


@pytest.fixture
def gateway(plugin: Plugin, index_url: str) -> Iterator[httpx.Client]:
    """The service in gateway mode in front of this test's index server."""
    with through(plugin, index_url) as client:
        yield client


@pytest.fixture
def direct(index_url: str) -> Iterator[httpx.Client]:
    with index_client(index_url) as client:
        yield client


# -- what OpenSearch Dashboards sends --------------------------------------------------------------

KIBANA_INDEX = {
    "mappings": {
        "dynamic": False,
        "properties": {
            "type": {"type": "keyword"},
            "updated_at": {"type": "date"},
            "config": {"dynamic": False, "properties": {"buildNum": {"type": "keyword"}}},
            "index-pattern": {"dynamic": False, "properties": {"title": {"type": "text"}}},
        },
    },
    "settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
}
CONFIG_DOC = {
    "config": {"buildNum": 7850, "defaultIndex": "logs"},
    "type": "config",
    "references": [],
    "migrationVersion": {"config": "7.9.0"},
    "updated_at": "2026-01-01T00:00:00.000Z",
}
SEARCH = {
    "size": 100,
    "from": 0,
    "seq_no_primary_term": True,
    "query": {"bool": {"filter": [{"term": {"type": "index-pattern"}}]}},
}


@dataclass(frozen=True)
class Names:
    """The indexes a test writes: fixed names on the test process's wiped node, names of the test's own on
    a shared real cluster (where ``.kibana_1`` may be a real Dashboards' index)."""

    kibana: str = ".kibana_1"
    logs: str = "logs-2026.01.01"
    big: str = "big"
    chunks: str = "chunks"
    wide: str = "wide"

    def all(self) -> list[str]:
        return [self.kibana, self.logs, self.big, self.chunks, self.wide]

    def bulk(self) -> bytes:
        """A ``_bulk`` as Dashboards sends one (a saved object) next to two log lines."""
        return (
            f'{{"index":{{"_index":"{self.kibana}","_id":"index-pattern:logs"}}}}\n'
            '{"index-pattern":{"title":"logs-*","timeFieldName":"@timestamp"},"type":"index-pattern",'
            '"references":[],"updated_at":"2026-01-01T00:00:00.000Z"}\n'
            f'{{"index":{{"_index":"{self.logs}","_id":"1"}}}}\n'
            '{"@timestamp":"2026-01-01T00:00:00Z","message":"GET /index.html 200","level":"info"}\n'
            f'{{"create":{{"_index":"{self.logs}","_id":"2"}}}}\n'
            '{"@timestamp":"2026-01-01T00:00:01Z","message":"GET /missing 404","level":"warn"}\n'
        ).encode()

    def dashboards_calls(self) -> list[tuple[str, str, Any, dict[str, str]]]:
        """(method, path, body bytes or JSON, extra headers), in the order Dashboards sends them."""
        kibana = f"/{self.kibana}"
        return [
            ("GET", "/", None, {}),
            ("GET", "/_cluster/health", None, {}),
            ("HEAD", kibana, None, {}),
            ("PUT", kibana, KIBANA_INDEX, {}),
            ("HEAD", kibana, None, {}),
            ("PUT", f"{kibana}/_doc/config:2.17.0?refresh=true", CONFIG_DOC, {}),
            ("GET", f"{kibana}/_doc/config:2.17.0", None, {}),
            ("GET", f"{kibana}/_doc/config:missing", None, {}),
            ("POST", "/_bulk?refresh=true", self.bulk(), NDJSON),
            ("POST", f"{kibana}/_search", SEARCH, {}),
            (
                "POST",
                f"/{self.logs}/_search?ignore_unavailable=true",
                {"query": {"match_all": {}}, "sort": ["_id"]},
                {},
            ),
            ("GET", "/_cluster/health?wait_for_status=yellow&timeout=30s", None, {}),
        ]


@pytest.fixture
def names(index_server: Any, index_url: str) -> Iterator[Names]:
    if index_server is not None:
        yield Names()
        return
    tag = secrets.token_hex(4)
    mine = Names(f".kibana_t{tag}", f"logs-t{tag}", f"big-t{tag}", f"chunks-t{tag}", f"wide-t{tag}")
    yield mine
    with index_client(index_url) as client:
        for index in mine.all():
            client.delete(f"/{index}")


def _send(client: httpx.Client, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers=headers)
    if body is None:
        return client.request(method, path, headers=headers)
    return client.request(method, path, json=body, headers=headers)


def _comparable(reply: httpx.Response) -> tuple[int, dict[str, str], Any]:
    """Status, headers (less those each server stamps itself) and body (less timings, and so
    less the length that a timing's digits change)."""
    headers = {k: v for k, v in reply.headers.items() if k not in ("date", "server")}
    body: Any = reply.content
    if reply.content and reply.headers.get("content-type", "").startswith("application/json"):
        body = reply.json()
        if isinstance(body, dict) and body.pop("took", None) is not None:
            headers.pop("content-length", None)
    return reply.status_code, headers, body


def test_dashboards_calls_answer_as_the_cluster_does(
    gateway: httpx.Client, direct: httpx.Client, index_server: Any
) -> None:
    """Dashboards' calls through the gateway, then the same calls straight to the cluster once
    what the first round made is gone: the same answers."""
    if index_server is None:
        pytest.skip("deletes Dashboards' own index names, not on a shared real cluster")
    calls = Names().dashboards_calls()
    through_gateway = [_send(gateway, method, path, body, headers) for method, path, body, headers in calls]
    for index in Names().all():
        direct.delete(f"/{index}", params={"ignore_unavailable": "true"})
    straight = [_send(direct, method, path, body, headers) for method, path, body, headers in calls]
    for (method, path, _, _), passed, answered in zip(calls, through_gateway, straight, strict=True):
        assert _comparable(passed) == _comparable(answered), (method, path, passed.text)
        assert passed.status_code < 500, (method, path, passed.text)


def test_documents_written_through_the_gateway_are_in_the_cluster(
    gateway: httpx.Client, direct: httpx.Client, names: Names
) -> None:
    kibana = f"/{names.kibana}"
    assert gateway.put(kibana, json=KIBANA_INDEX).status_code == 200
    assert gateway.put(f"{kibana}/_doc/config:2.17.0?refresh=true", json=CONFIG_DOC).status_code == 201
    bulk = gateway.post("/_bulk?refresh=true", content=names.bulk(), headers=NDJSON)
    assert bulk.status_code == 200 and bulk.json()["errors"] is False
    assert direct.get(f"{kibana}/_doc/config:2.17.0").json()["_source"] == CONFIG_DOC
    assert direct.get(f"/{names.logs}/_count").json()["count"] == 2
    found = gateway.post(f"{kibana}/_search", json=SEARCH).json()
    assert [h["_id"] for h in found["hits"]["hits"]] == ["index-pattern:logs"]


def test_head_passes_with_no_body(gateway: httpx.Client, direct: httpx.Client, names: Names) -> None:
    direct.put(f"/{names.kibana}", json=KIBANA_INDEX)
    there = gateway.head(f"/{names.kibana}")
    missing = gateway.head(f"/{names.kibana}_missing")
    assert (there.status_code, there.content) == (200, b"")
    assert (missing.status_code, missing.content) == (404, b"")
    assert there.headers.get("content-type") == direct.head(f"/{names.kibana}").headers.get("content-type")


def test_large_bodies_pass_but_the_services_own_endpoints_keep_their_limit(
    gateway: httpx.Client, direct: httpx.Client, plugin: Plugin, names: Names
) -> None:
    """A ``_bulk`` is NDJSON and may be far larger than the service's own request limit."""
    lines = []
    for i in range(3000):
        lines += [json.dumps({"index": {"_index": names.big, "_id": str(i)}}), json.dumps({"n": i, "pad": "x" * 1000})]
    body = ("\n".join(lines) + "\n").encode()
    assert len(body) > plugin.settings.max_body_bytes
    reply = gateway.post("/_bulk?refresh=true", content=body, headers=NDJSON)
    assert reply.status_code == 200 and reply.json()["errors"] is False, reply.text[:300]
    assert direct.get(f"/{names.big}/_count").json()["count"] == 3000

    too_big = gateway.post(BASE, content=body, headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
    not_json = gateway.post(BASE, content=b"SELECT 1", headers={"Content-Type": "text/plain"})
    assert not_json.status_code == 406
    assert not_json.json()["error"]["reason"] == "Invalid Request"


def test_chunked_upload_streams_to_the_cluster(plugin: Plugin, upstream: Upstream) -> None:
    """The caller's second chunk is only sent once the upstream has the first: a gateway that
    held the body whole before passing it on would never let this request finish."""

    def body() -> Iterator[bytes]:
        yield b'{"index":{"_index":"logs","_id":"1"}}\n{"n":1}\n'
        assert upstream.first_chunk.wait(10), "the first chunk never reached the upstream"
        yield b'{"index":{"_index":"logs","_id":"2"}}\n{"n":2}\n'

    with through(plugin, upstream.url) as client:
        reply = client.post("/_bulk", content=body(), headers=NDJSON)
    assert reply.status_code == 200
    (seen,) = upstream.seen
    assert seen.chunked and seen.header("content-length") == []
    assert (
        seen.body == b'{"index":{"_index":"logs","_id":"1"}}\n{"n":1}\n{"index":{"_index":"logs","_id":"2"}}\n{"n":2}\n'
    )


def test_chunked_upload_to_a_real_cluster(gateway: httpx.Client, direct: httpx.Client, names: Names) -> None:
    def body() -> Iterator[bytes]:
        for i in range(50):
            yield json.dumps({"index": {"_index": names.chunks, "_id": str(i)}}).encode() + b"\n"
            yield json.dumps({"n": i}).encode() + b"\n"

    reply = gateway.post("/_bulk?refresh=true", content=body(), headers=NDJSON)
    assert reply.status_code == 200 and reply.json()["errors"] is False
    assert direct.get(f"/{names.chunks}/_count").json()["count"] == 50


def test_a_chunked_reply_streams_back(plugin: Plugin, upstream: Upstream) -> None:
    """The upstream sends its first chunk and waits for the caller to have it before the rest."""
    release = threading.Event()
    upstream.answer = lambda seen: Reply(chunks=[b'{"hits":[', b"1,2,3", b"]}"], chunked=True, hold=release)
    with through(plugin, upstream.url) as client, client.stream("GET", "/logs/_search") as reply:
        assert reply.status_code == 200
        assert "content-length" not in reply.headers
        assert reply.headers["transfer-encoding"] == "chunked"
        parts = reply.iter_raw()
        first = next(parts)
        release.set()
        assert first + b"".join(parts) == b'{"hits":[1,2,3]}'


def test_a_caller_leaving_mid_reply_drops_the_upstream_connection(
    plugin: Plugin, upstream: Upstream
) -> None:
    """A reply nobody reads any more stops being read from the cluster (here the cluster would
    otherwise wait for ever to send the rest)."""
    upstream.answer = lambda seen: Reply(chunks=[b'{"hits":[', b"]}"], chunked=True, await_close=True)
    with through(plugin, upstream.url) as client:
        with client.stream("GET", "/logs/_search") as reply:
            assert next(reply.iter_raw()) == b'{"hits":['
        # Leaving the block closed the caller's connection mid-reply.
        wait_for(upstream.dropped.is_set, timeout=15, what="the gateway to drop the upstream connection")
        upstream.answer = lambda seen: Reply()
        assert client.get("/_cluster/health").json() == {"ok": True}


def test_a_large_reply_is_passed_whole(gateway: httpx.Client, direct: httpx.Client, names: Names) -> None:
    lines = []
    for i in range(2500):
        lines += [json.dumps({"index": {"_index": names.wide, "_id": str(i)}}), json.dumps({"n": i, "pad": "y" * 800})]
    assert direct.post("/_bulk?refresh=true", content="\n".join(lines) + "\n", headers=NDJSON).status_code == 200
    query = {"size": 2500, "query": {"match_all": {}}, "sort": ["n"]}
    expected = direct.post(f"/{names.wide}/_search", json=query)
    with gateway.stream("POST", f"/{names.wide}/_search", json=query) as reply:
        raw = b"".join(reply.iter_raw())
        if "content-length" in reply.headers:  # as the cluster framed it: its length, or chunks
            assert reply.headers["content-length"] == str(len(raw))
        else:
            assert reply.headers["transfer-encoding"] == "chunked"
        received = gzip.decompress(raw) if reply.headers.get("content-encoding") == "gzip" else raw
    assert len(received) > 2_000_000
    assert json.loads(received)["hits"]["hits"] == expected.json()["hits"]["hits"]


def test_compressed_replies_pass_untouched(plugin: Plugin, upstream: Upstream) -> None:
    packed = gzip.compress(b'{"status":"green"}')
    upstream.answer = lambda seen: Reply(
        headers=[("Content-Type", "application/json"), ("Content-Encoding", "gzip")], chunks=[packed]
    )
    with (
        through(plugin, upstream.url) as client,
        client.stream("GET", "/_cluster/health", headers={"Accept-Encoding": "gzip"}) as reply,
    ):
        raw = b"".join(reply.iter_raw())
    assert raw == packed and reply.headers["content-encoding"] == "gzip"
    assert upstream.seen[0].header("accept-encoding") == ["gzip"]


def test_method_path_and_query_pass_unchanged(plugin: Plugin, upstream: Upstream) -> None:
    with through(plugin, upstream.url) as client:
        reply = client.request("DELETE", "/my%2Findex/_doc/a%20b?routing=x&refresh=wait_for&pretty")
    assert reply.status_code == 200
    (seen,) = upstream.seen
    assert (seen.method, seen.target) == ("DELETE", "/my%2Findex/_doc/a%20b?routing=x&refresh=wait_for&pretty")
    assert seen.header("host") == [upstream.url.removeprefix("http://")]


def test_hop_by_hop_headers_are_dropped_both_ways(plugin: Plugin, upstream: Upstream) -> None:
    upstream.answer = lambda seen: Reply(
        headers=[
            ("Content-Type", "application/json"),
            ("Connection", "X-Upstream-Hop"),
            ("X-Upstream-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", 'Basic realm="x"'),
            ("Upgrade", "h2c"),
            ("Trailer", "X-Checksum"),
            ("X-Opaque-Id", "kept"),
        ],
        chunks=[b'{"a":', b"1}"],
        chunked=True,
    )
    caller_headers = {
        "Connection": "keep-alive, X-Caller-Hop",
        "X-Caller-Hop": "1",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic cHJveHk6cHJveHk=",
        "Proxy-Connection": "keep-alive",
        "TE": "trailers",
        "Upgrade": "h2c",
        "Expect": "100-continue",
        "X-Opaque-Id": "dashboards-1",
        "securitytenant": "global",
    }
    with through(plugin, upstream.url) as client:
        reply = client.post("/_msearch", content=b"{}\n{}\n", headers={**caller_headers, **NDJSON})
    assert reply.status_code == 200 and reply.json() == {"a": 1}
    (seen,) = upstream.seen
    sent = {k.lower() for k, _ in seen.headers}
    for dropped in ("x-caller-hop", "keep-alive", "proxy-authorization", "proxy-connection", "te", "upgrade", "expect"):
        assert dropped not in sent, dropped
    assert "connection" not in sent or seen.header("connection") == ["keep-alive"]  # the pool's own
    assert seen.header("x-opaque-id") == ["dashboards-1"] and seen.header("securitytenant") == ["global"]
    assert seen.header("content-type") == ["application/x-ndjson"] and seen.header("content-length") == ["6"]
    for dropped in ("x-upstream-hop", "keep-alive", "proxy-authenticate", "upgrade", "trailer"):
        assert dropped not in reply.headers, dropped
    assert reply.headers.get("connection", "keep-alive") == "keep-alive"
    assert reply.headers["x-opaque-id"] == "kept"


# -- whose credentials go upstream -----------------------------------------------------------------


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_service_credentials_replace_the_callers(plugin: Plugin, upstream: Upstream) -> None:
    config = OpenSearchConfig(url=upstream.url, auth="basic", username="svc", password=SECRET)
    with through(plugin, upstream.url, service_credentials(config)) as client:
        client.get("/_cluster/health", headers={"Authorization": _basic("mallory", "guess")})
        client.get("/_cluster/health")
    assert [s.header("authorization") for s in upstream.seen] == [[_basic("svc", SECRET)]] * 2


def test_without_service_credentials_none_go_upstream(plugin: Plugin, upstream: Upstream) -> None:
    with through(plugin, upstream.url, service_credentials(index_config(upstream.url))) as client:
        client.get("/_cluster/health", headers={"Authorization": _basic("mallory", "guess")})
    assert upstream.seen[0].header("authorization") == []


def test_caller_credentials_go_upstream_as_sent(plugin: Plugin, upstream: Upstream) -> None:
    with through(plugin, upstream.url, caller_credentials()) as client:
        client.get("/_cluster/health", headers={"Authorization": _basic("alice", "pw")})
        client.get("/_cluster/health")
    assert [s.header("authorization") for s in upstream.seen] == [[_basic("alice", "pw")], []]


def test_a_refusal_is_answered_in_the_error_shape_and_sends_nothing(
    plugin: Plugin, upstream: Upstream
) -> None:
    def admins_only(scope: Any) -> Refusal:
        return Refusal(403, "only admins may reach the index cluster through this service")

    with through(plugin, upstream.url, admins_only) as client:
        reply = client.get("/.kibana_1/_search")
        own = client.get(f"{BASE}/_sessions")
    assert reply.status_code == 403
    assert reply.json() == {
        "status": 403,
        "error": {
            "type": "SecurityException",
            "reason": "Forbidden",
            "details": "only admins may reach the index cluster through this service",
        },
    }
    assert upstream.seen == []
    assert own.status_code == 200  # the service's own paths never ask the policy


def test_a_sigv4_cluster_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(GatewayConfigError, match="SigV4"):
        service_credentials(OpenSearchConfig(url="https://search.example:443", auth="sigv4"))
    monkeypatch.setenv("OPENSEARCH_URL", "https://search.example:443")
    monkeypatch.setenv("ASYNC_QUERY_OPENSEARCH_AUTH", "sigv4")
    monkeypatch.setenv("ASYNC_QUERY_DATA_DIR", str(tmp_path / "var"))
    assert main(["serve", "--gateway", "--port", str(free_port())]) == 2
    assert "cannot pass requests to a SigV4-signed cluster" in capsys.readouterr().err
    assert not (tmp_path / "var").exists()  # refused before anything started


# -- an upstream that is down, hangs, or breaks off ------------------------------------------------


def _assert_gateway_error(reply: httpx.Response, status: int, error_type: str, reason: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"status", "error"} and body["status"] == status
    assert body["error"]["type"] == error_type and body["error"]["reason"] == reason
    assert "Traceback" not in reply.text
    assert SECRET not in reply.text and base64.b64encode(f"svc:{SECRET}".encode()).decode() not in reply.text
    return dict(body)


def test_an_upstream_that_is_down_is_a_502(plugin: Plugin) -> None:
    port = free_port()  # nothing listens there: connections are refused
    config = OpenSearchConfig(
        url=f"http://svc:{SECRET}@127.0.0.1:{port}", auth="basic", username="svc", password=SECRET
    )
    with through(plugin, config.url, service_credentials(config)) as client:
        reply = client.get("/_cluster/health")
        own = client.get(f"{BASE}/_sessions")
    body = _assert_gateway_error(reply, 502, "BadGatewayException", "Bad Gateway")
    assert body["error"]["details"].startswith(f"the index cluster at http://127.0.0.1:{port} cannot be reached")
    assert own.status_code == 200


def test_an_upstream_that_never_answers_is_a_504(plugin: Plugin) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the kernel; nothing ever reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        limits = GatewayLimits(connect_timeout_s=5, read_timeout_s=0.3)
        with through(plugin, url, limits=limits) as client:
            reply = client.post("/.kibana_1/_search", json=SEARCH)
    body = _assert_gateway_error(reply, 504, "GatewayTimeoutException", "Gateway Timeout")
    assert body["error"]["details"].endswith("did not answer in time (read timeout, 0.3 s)")


def test_a_reply_cut_short_upstream_is_cut_short_for_the_caller(plugin: Plugin, upstream: Upstream) -> None:
    upstream.answer = lambda seen: Reply(chunks=[b'{"hits":'], declared=1000)
    with through(plugin, upstream.url) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/logs/_search")
        # The gateway itself carries on.
        upstream.answer = lambda seen: Reply()
        assert client.get("/logs/_search").json() == {"ok": True}


# -- which paths are the service's own -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "owned"),
    [
        ("/_plugins/_async_query", True),
        ("/_plugins/_async_query/", True),
        ("/_plugins/_async_query/abc", True),
        ("/_plugins/_async_query/_sessions", True),
        ("/_plugins/_query/_datasources", True),
        ("/_plugins/_query/_datasources/local", True),
        ("/_plugins/_async_queryx", False),
        ("/_plugins/_query", False),
        ("/_plugins/_sql", False),
        ("/_plugins/_ppl", False),
        ("/metrics", True),
        ("/_plugins/_sql/stats", True),
        ("/_plugins/_ppl/stats", True),
        ("/_plugins/_sql/_explain", False),
        ("/", False),
        ("/.kibana_1/_doc/config:2.17.0", False),
    ],
)
def test_owned_paths(path: str, owned: bool) -> None:
    assert owns(path) is owned


def test_without_gateway_mode_other_paths_are_not_found(plugin: Plugin) -> None:
    with serve_http(create_app(plugin)) as url:
        reply = httpx.get(f"{url}/_cluster/health", verify=CLIENT_SSL)
    assert reply.status_code == 404
    assert reply.json()["error"]["reason"] == "Invalid Request"


def test_gateway_mode_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNC_QUERY_GATEWAY", "true")
    assert Settings().gateway is True


# -- finished replies Dashboards keeps polling -----------------------------------------------------


class CountingProxy:
    """An ASGI app: this product's gateway, counting the requests it passes to the index."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.requests: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # startup
            await self.gateway.open()
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await self.gateway.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.requests.append(f"{scope['method']} {scope['path']}")
        await self.gateway(scope, receive, send)


def test_cancelled_and_timed_out_replies_come_from_the_reply_cache(
    make_plugin: PluginFactory,
    store: Store,
    datasource: Datasource,
    index_url: str,
    opensearch_config: OpenSearchConfig,
) -> None:
    """Dashboards polls a CANCELLED or TIMEOUT query every 2 s for as long as its page is open:
    after the first GET, each answer costs no index request."""
    proxy = CountingProxy(Gateway(index_url, caller_credentials()))
    with serve_http(proxy) as proxy_url:
        counted = opensearch_config.model_copy(update={"url": proxy_url})
        counted_store = Store.connect(counted)
        writer = make_plugin()  # writes through the uncounted store
        registry = DatasourceRegistry([datasource], counted_store)
        reader = build_plugin(writer.settings, counted_store, registry, {"local": RecordingLauncher()}, counted)
        try:
            with serve_http(create_app(writer)) as writer_url, serve_http(create_app(reader)) as reader_url:
                query = {"datasource": datasource.name, "lang": "sql", "query": "SELECT 1"}
                cancelled, timed_out, waiting = (
                    httpx.post(f"{writer_url}{BASE}", json=query, verify=CLIENT_SSL).json()["queryId"] for _ in range(3)
                )
                assert httpx.delete(f"{writer_url}{BASE}/{cancelled}", verify=CLIENT_SSL).status_code == 204
                statement = store.statements.get(datasource.name, timed_out)
                assert statement is not None
                running = store.statements.start(statement)
                assert running is not None
                store.statements.settle(running, StatementState.TIMEOUT, error="Query timed out after 1800 s")

                def poll(query_id: str, times: int) -> tuple[set[str], int]:
                    before = len(proxy.requests)
                    statuses = {httpx.get(f"{reader_url}{BASE}/{query_id}", verify=CLIENT_SSL).json()["status"] for _ in range(times)}
                    return statuses, len(proxy.requests) - before

                for query_id, status in ((cancelled, "CANCELLED"), (timed_out, "TIMEOUT")):
                    first, first_reads = poll(query_id, 1)
                    assert first == {status} and first_reads >= 1  # the first GET reads the index
                    again, reads = poll(query_id, 20)
                    assert again == {status} and reads == 0, proxy.requests[-reads:]
                # The counter does see reads: a query still waiting is read on every GET.
                statuses, reads = poll(waiting, 3)
                assert statuses == {"WAITING"} and reads >= 3
        finally:
            reader.close()
            counted_store.close()


# -- serve --gateway on the embedded default -------------------------------------------------------


@pytest.mark.slow
def test_serve_gateway_on_the_embedded_default(tmp_path: Path) -> None:
    """``async-query serve --gateway`` with no cluster configured: the embedded index server
    answers Dashboards' calls through the service's port, next to the service's own API."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSEARCH_", "ASYNC_QUERY_"))}
    env.update(
        ASYNC_QUERY_DATA_DIR=str(tmp_path / "var"), ASYNC_QUERY_LOCAL_CATALOG="in-memory", ASYNC_QUERY_WARM_POOL_SIZE="0"
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "async_query.cli",
                "serve",
                "--gateway",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log_path.read_text()
        try:
            return httpx.get(f"{url}/_cluster/health", timeout=5, verify=CLIENT_SSL).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, timeout=240, interval=0.1, what="serve --gateway to answer")
        with httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
            root = client.get("/").json()
            assert root["version"]["distribution"] == "opensearch" and "tagline" in root
            assert client.get("/_cluster/health").json()["status"] in ("green", "yellow")
            for method, path, body, headers in Names().dashboards_calls()[2:]:
                reply = _send(client, method, path, body, headers)
                assert reply.status_code in (200, 201, 404), (method, path, reply.text)
            assert client.head("/.kibana_1").status_code == 200
            assert client.get("/.kibana_1/_doc/config:2.17.0").json()["_source"] == CONFIG_DOC
            assert client.get("/logs-2026.01.01/_count").json()["count"] == 2
            assert client.get(f"{BASE}/_sessions").json() == {"sessions": [], "poolJobs": []}
        assert "gateway: every other path" in log_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
