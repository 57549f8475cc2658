"""Malformed and oversized requests, generated with hypothesis, against the real HTTP service.

No Spark: the service starts sessions through a RecordingLauncher; the index is real. Whatever
arrives, the service never answers 5xx, answers every 4xx in the error shape, and never hangs
(every request has a client timeout of a few seconds). POST bodies are also checked against a
small model of the contract: a request is accepted (201) exactly when it is a valid one.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import string
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import quote, unquote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from async_query.api import BASE, create_app
from async_query.http_errors import REASONS
from query_core.ids import new_id
from query_core.ppl import PplSyntaxError, parse_ppl
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import serve_http

TIMEOUT = 5.0
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,  # nothing written outside the test's own directories
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Small limits for the generated requests, so that hypothesis crosses them often.
MAX_BODY = 8 * 1024
MAX_QUERY = 2 * 1024
#: Bodies are read as JSON only under a JSON content type (FastAPI's strict content type; the
#: reference refuses other content types too).
JSON_TYPES = {"application/json", "application/json; charset=utf-8", "application/vnd.api+json"}
CONTENT_TYPES = [*sorted(JSON_TYPES), "text/plain", "text/json", "application/x-www-form-urlencoded"]


def check_error_shape(status: int, body: bytes, what: object) -> None:
    try:
        parsed = json.loads(body)
    except ValueError:
        raise AssertionError(f"{status} without a JSON body for {what!r}: {body[:300]!r}") from None
    assert isinstance(parsed, dict) and set(parsed) == {"status", "error"}, (what, parsed)
    assert parsed["status"] == status, (what, parsed)
    error = parsed["error"]
    assert isinstance(error, dict) and set(error) == {"type", "reason", "details"}, (what, parsed)
    assert all(isinstance(v, str) for v in error.values()), (what, parsed)
    assert error["reason"] == REASONS.get(status, "There was internal problem at backend"), (what, parsed)


def check_reply(status: int, body: bytes, what: object) -> None:
    assert status < 500, f"{status} for {what!r}: {body[:500]!r}"
    if 400 <= status < 500:
        check_error_shape(status, body, what)


@dataclass
class Target:
    url: str
    http: httpx.Client
    datasource: str
    live_session: str
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@pytest.fixture
def target(make_plugin: PluginFactory, ds_name: str) -> Iterator[Target]:
    plugin = make_plugin(max_sessions=1_000, max_body_bytes=MAX_BODY, max_query_chars=MAX_QUERY)
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=TIMEOUT, verify=CLIENT_SSL) as client:
        first = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT 1"})
        assert first.status_code == 201, first.text
        yield Target(url, client, ds_name, first.json()["sessionId"])


# -- POST bodies ------------------------------------------------------------------------------------

surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50) | surrogates
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)  # fmt: skip
MISSING = object()


def post_bodies(ds: str, live_session: str) -> st.SearchStrategy[dict[str, Any]]:
    """Objects near the valid shape: each field mostly valid, else close to valid, missing, or any
    JSON value; sometimes with extra fields."""

    @st.composite
    def field(draw: st.DrawFn, valid: st.SearchStrategy[Any], near: st.SearchStrategy[Any]) -> Any:
        pick = draw(st.integers(0, 9))  # mostly valid, so that whole requests are often valid
        if pick < 8:
            return draw(valid)
        return draw(near) if pick == 8 else draw(st.just(MISSING) | json_values)

    datasource = field(st.just(ds), st.sampled_from([ds.upper(), "", "nosuch", "local-", "a" * 200, "../local"]))
    lang = field(
        st.sampled_from(["sql", "SQL", "ppl", "PpL"]), st.sampled_from(["sparksql", "", "sql ", "\uff53\uff51\uff4c"])
    )
    query = field(
        st.one_of(
            st.text(min_size=1, max_size=200),
            st.sampled_from(
                ["SELECT 1", "source = t | head 1", " ", "'; DROP TABLE x; --", "\x00", "\u2028", "🚀" * 50]
            ),
            st.integers(MAX_QUERY - 2, MAX_QUERY).map(lambda n: "x" * n),
        ),
        st.one_of(
            st.just(""),
            st.integers(MAX_QUERY + 1, MAX_QUERY + 2).map(lambda n: "x" * n),
            st.tuples(st.text(max_size=20), surrogates).map("".join),
        ),
    )
    session = field(
        st.sampled_from([live_session, live_session, "", "not-an-id", new_id(ds), new_id("other"), "🚀" * 20])
        | st.none(),
        st.sampled_from([[live_session], {"id": live_session}, 1, True]),
    )
    extra = st.dictionaries(
        st.text(max_size=15).filter(lambda k: k not in {"datasource", "lang", "query", "sessionId"}),
        json_values,
        min_size=1,
        max_size=2,
    )

    def build(d: Any, lang_: Any, q: Any, s: Any, more: dict[str, Any]) -> dict[str, Any]:
        body = {
            k: v for k, v in (("datasource", d), ("lang", lang_), ("query", q), ("sessionId", s)) if v is not MISSING
        }
        return {**body, **more}

    extras = st.integers(0, 4).flatmap(lambda pick: extra if pick == 0 else st.just({}))
    return st.builds(build, datasource, lang, query, session, extras)


def accepted(raw: bytes, content_type: str | None, ds: str) -> bool:
    """The model: True exactly when the contract says this POST is a valid request."""
    if len(raw) > MAX_BODY or not raw or content_type not in JSON_TYPES:
        return False
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    if not isinstance(body, dict) or not set(body) <= {"datasource", "lang", "query", "sessionId"}:
        return False
    lang, query, session = body.get("lang"), body.get("query"), body.get("sessionId")
    return (
        body.get("datasource") == ds
        and is_text(lang)
        and lang.lower() in ("sql", "ppl")
        and is_text(query)
        and 1 <= len(query) <= MAX_QUERY
        and (session is None or is_text(session))
        and (lang.lower() != "ppl" or parses_as_ppl(query))
    )


def parses_as_ppl(query: str) -> bool:
    """PPL is parsed at POST: text that is no PPL query is a 400 (SQL is parsed only when it
    starts like a Flint statement, which generated text hardly ever does)."""
    try:
        parse_ppl(query)
    except PplSyntaxError:
        return False
    return True


def is_text(value: Any) -> TypeGuard[str]:
    """A JSON string that is text: a lone surrogate (\\ud800) is refused, it has no UTF-8 form."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def post_raw(target: Target, raw: bytes, content_type: str | None) -> httpx.Response:
    headers = {b"content-type": content_type.encode()} if content_type else {}
    return target.http.post(BASE, content=raw, headers=headers)


def check_post(target: Target, raw: bytes, content_type: str | None) -> None:
    reply = post_raw(target, raw, content_type)
    target.statuses[reply.status_code] += 1
    what = (raw[:200], content_type)
    check_reply(reply.status_code, reply.content, what)
    should = accepted(raw, content_type, target.datasource)
    assert (reply.status_code == 201) == should, (reply.status_code, reply.text[:300], what)
    if reply.status_code == 201:
        ids = reply.json()
        assert set(ids) == {"queryId", "sessionId"} and all(isinstance(v, str) for v in ids.values()), ids
        if json.loads(raw).get("sessionId") == target.live_session:
            assert ids["sessionId"] == target.live_session
        got = target.http.get(f"{BASE}/{ids['queryId']}")
        assert got.status_code == 200 and got.json() == {"status": "WAITING"}, got.text
    elif len(raw) > MAX_BODY:
        assert reply.status_code == 413, reply.text


def test_fuzzed_json_bodies(target: Target) -> None:
    @FUZZ
    @given(
        body=st.integers(0, 4).flatmap(
            lambda pick: json_values if pick == 0 else post_bodies(target.datasource, target.live_session)
        ),
        content_type=st.integers(0, 9).flatmap(
            lambda pick: st.sampled_from([None, *CONTENT_TYPES]) if pick == 0 else st.just("application/json")
        ),
        pad=st.integers(0, 9).map(lambda pick: MAX_BODY if pick == 0 else 0),
        ascii_only=st.booleans(),
    )
    def run(body: Any, content_type: str | None, pad: int, ascii_only: bool) -> None:
        # Lone surrogates become \udxxx escapes (valid JSON) or, unescaped, invalid UTF-8.
        raw = json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
        if pad and isinstance(body, dict):  # push the same object over the body limit with whitespace
            raw = raw[:-1] + b" " * (pad - len(raw) + 1) + raw[-1:]
        check_post(target, raw, content_type)

    run()
    print(f"\nPOST statuses for generated JSON bodies: {dict(target.statuses)}")
    assert target.statuses[201] >= 10 and target.statuses[400] >= 10 and target.statuses[413] >= 1, target.statuses


def test_fuzzed_raw_bytes(target: Target) -> None:
    @FUZZ
    @given(
        raw=st.binary(max_size=300)
        | st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass"))
        | st.sampled_from([b"[" * 50_000, b'{"a":' * 5_000, b"\xef\xbb\xbf{}", b"\x00" * 10, b"null", b"{}"]),
        content_type=st.sampled_from([None, *CONTENT_TYPES, "multipart/form-data; boundary=x", "\u00e9/\u00e9"]),
    )
    def run(raw: bytes, content_type: str | None) -> None:
        check_post(target, raw, content_type)

    run()
    print(f"\nPOST statuses for generated raw bodies: {dict(target.statuses)}")


# -- paths --------------------------------------------------------------------------------------


def raw_request(port: int, method: str, target_path: str) -> tuple[int, str, bytes]:
    """One request with the path sent exactly as given (httpx would normalise '..' away)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request(method, target_path, headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, response.getheader("location", ""), response.read()
    finally:
        conn.close()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


segments = st.one_of(
    st.text(max_size=200).map(lambda s: quote(s, safe="")),
    st.text(alphabet=string.printable, max_size=100).map(lambda s: quote(s, safe="/.")),
    st.sampled_from(
        [
            "..",
            ".",
            "../..",
            "%2e%2e",
            "..%2F..%2Fetc%2Fpasswd",
            "%2F",
            "",
            "/",
            "//",
            "_sessions",
            "%00",
            "%FF%FE",
            "a/b",
            "a/../b",
            "%C0%AE%C0%AE",
            "%25",
            "?",
            "#",
            "%3F%23",
            "AAAA" * 4,
            "=" * 20,
        ]
    ),
    st.integers(1_000, 8_000).map(lambda n: "A" * n),
    st.text(min_size=200, max_size=600).map(lambda s: quote(s, safe="")),
    st.tuples(
        st.text(alphabet=string.ascii_letters + string.digits, min_size=0, max_size=20), st.text(max_size=40)
    ).map(lambda t: quote(b64((t[0] + t[1]).encode("utf-8", "surrogatepass")), safe="")),
    st.binary(min_size=1, max_size=300).map(lambda b: quote(b64(b), safe="")),
    st.text(alphabet=string.ascii_letters + string.digits, min_size=10, max_size=10).map(
        lambda r: b64((r + "local").encode())
    ),
)


def test_fuzzed_paths(target: Target) -> None:
    @FUZZ
    @given(
        method=st.sampled_from(["GET", "GET", "DELETE", "DELETE", "PUT", "PATCH", "OPTIONS"]),
        prefix=st.sampled_from([BASE + "/", BASE + "/", BASE, "/_plugins/", "/", BASE + "//"]),
        segment=segments,
        query=st.none() | st.text(max_size=50).map(lambda s: "?" + quote(s, safe="=&")),
    )
    @example(method="GET", prefix=BASE + "/", segment="#", query=None)  # a raw fragment
    def run(method: str, prefix: str, segment: str, query: str | None) -> None:
        path = prefix + segment + (query or "")
        status, location, body = raw_request(target.port, method, path)
        target.statuses[status] += 1
        check_reply(status, body, (method, path[:300]))
        if status == 307:
            # Starlette's redirect of a trailing slash to the route without it, nothing else.
            # A raw '#' starts a fragment, which the HTTP parser drops from the path.
            bare = unquote(path.split("?")[0].split("#")[0])
            assert bare.endswith("/") and unquote(location.split("?")[0]).endswith(bare.rstrip("/")), (path, location)
        elif 200 <= status < 300:
            # The one readable thing at these paths is the sessions listing.
            assert method == "GET" and path.split("?")[0] == f"{BASE}/_sessions", (status, method, path[:300])
        else:
            assert 400 <= status < 500, (status, method, path[:300], body[:200])

    run()
    print(f"\nstatuses for generated paths: {dict(target.statuses)}")
    assert target.statuses[400] >= 10 and target.statuses[405] >= 1, target.statuses


# -- huge requests at the default limits --------------------------------------------------------


@pytest.fixture
def default_target(make_plugin: PluginFactory, ds_name: str) -> Iterator[Target]:
    plugin = make_plugin()
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as client:
        yield Target(url, client, ds_name, "")


def test_huge_requests_are_refused_promptly(default_target: Target) -> None:
    target = default_target
    limit = 2_000_000
    ok = {"datasource": target.datasource, "lang": "sql"}
    # A query over the 1,000,000 character limit, in a body under the byte limit.
    reply = target.http.post(BASE, json={**ok, "query": "x" * 1_000_001})
    check_reply(reply.status_code, reply.content, "long query")
    assert reply.status_code == 400 and "longer than" in reply.json()["error"]["details"]
    # The same at the limit is accepted.
    reply = target.http.post(BASE, json={**ok, "query": "x" * 1_000_000})
    assert reply.status_code == 201, reply.text[:300]
    # A body over the byte limit, announced by Content-Length.
    big = json.dumps({**ok, "query": "y" * (limit + 10)}).encode()
    reply = target.http.post(BASE, content=big, headers={"content-type": "application/json"})
    check_reply(reply.status_code, reply.content, "big body")
    assert reply.status_code == 413
    # A body over the byte limit sent chunked (no Content-Length): counted as it is read.
    chunk = b" " * 65_536

    def chunks() -> Iterator[bytes]:
        yield b'{"datasource": "local", "lang": "sql", "query": "z"'
        for _ in range(limit // len(chunk) + 2):
            yield chunk
        yield b"}"

    try:
        reply = target.http.post(BASE, content=chunks(), headers={"content-type": "application/json"})
    except httpx.WriteError:
        pytest.fail("the service closed the connection without answering the oversized chunked body")
    check_reply(reply.status_code, reply.content, "big chunked body")
    assert reply.status_code == 413
    # Deep nesting within the limits.
    reply = target.http.post(BASE, content=b"[" * 1_000_000, headers={"content-type": "application/json"})
    check_reply(reply.status_code, reply.content, "deep nesting")
    assert reply.status_code == 400
    # Very long ids, for GET and DELETE.
    for method in ("GET", "DELETE"):
        for length in (20_000, 60_000):
            status, _, body = raw_request(target.port, method, f"{BASE}/{'A' * length}")
            check_reply(status, body, (method, length))
            assert status == 400, (method, length, status, body[:200])
    # The service still answers normally afterwards.
    reply = target.http.get(f"{BASE}/{new_id(target.datasource)}")
    check_reply(reply.status_code, reply.content, "unknown id")
    assert reply.status_code == 400


def raw_exchange(port: int, request: bytes) -> bytes:
    """Send bytes as they are; the answer's status line, headers and body (by Content-Length, or
    until the server closes the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65_536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")),
            None,
        )
        while (length is None or len(body) < length) and (chunk := sock.recv(65_536)):
            body += chunk
    return head + b"\r\n\r\n" + body if head else b""


MALFORMED_HTTP = [
    b"GET " + BASE.encode() + b"/\xc3\xa9\xff HTTP/1.1\r\nHost: x\r\n\r\n",  # raw non-ASCII target
    b"POST " + BASE.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
    b"POST " + BASE.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
    b"GET " + BASE.encode() + b"/x HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET " + BASE.encode() + b"/x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    b"DELETE " + BASE.encode() + b"/" + b"A" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # past h11's line limit
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello on the plain port
    b"GARBAGE\r\n\r\n",
]


@pytest.mark.parametrize("request_bytes", MALFORMED_HTTP, ids=lambda b: repr(b[:30]))
def test_malformed_http_is_refused_without_5xx_or_hang(target: Target, request_bytes: bytes) -> None:
    """Requests that are not valid HTTP/1.1 (or exceed h11's 64 KiB limit on a request head) are
    refused by the HTTP server (uvicorn) before the app: a 4xx or a reset connection (uvicorn's body
    is plain text, not the API's error shape), and the service goes on."""
    try:
        answer = raw_exchange(target.port, request_bytes)
    except (ConnectionResetError, BrokenPipeError):
        answer = b""  # refused before it was read to the end
    if answer:
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, answer[:300]
    reply = target.http.get(f"{BASE}/{new_id(target.datasource)}")
    check_reply(reply.status_code, reply.content, "after malformed HTTP")
    assert reply.status_code == 400
