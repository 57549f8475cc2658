"""The lean real-time readers' keep-alive connections never hand one request another's reply.

A read that times out leaves its connection with a reply still on its way; if that connection
served the next read, the late reply (another document, maybe another user's) would be taken for
the next one's. Here a server stalls the first reply of its first connection past the reader's
timeout, then sends the rest of it before reading the next request on that connection: the next
read must get its own document. A server that answers with another document than the one asked is
refused too (the reply is checked against the request), whatever the connection's history.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from opensearchpy.exceptions import ConnectionTimeout

from query_core.config import OpenSearchConfig
from query_core.realtime import AsyncRealtimeReader, ReadNotServed, ReadTimedOut, RealtimeReader

TIMEOUT_S = 0.3


def document_reply(index: str, doc_id: str) -> bytes:
    body = json.dumps(
        {
            "_index": index,
            "_id": doc_id,
            "_version": 1,
            "_seq_no": 0,
            "_primary_term": 1,
            "found": True,
            "_source": {"id": doc_id},
        }
    ).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def asked(request: bytes) -> tuple[str, str]:
    """(index, id) of ``GET /<index>/_doc/<id> HTTP/1.1``."""
    path = request.split(b" ", 2)[1].decode()
    index, _, doc_id = path.strip("/").split("/", 2)
    return index, doc_id


@dataclass
class StallingServer:
    """Answers each GET with the document asked, in order, except the first request of the first
    connection: ``head`` bytes of its reply at once, and the rest only once ``release`` is set and
    the next request has come on that connection (as a slow server would: the late reply goes out
    first, then the next one's). With ``wrong_id``, every reply names that document instead."""

    head: int
    wrong_id: str | None = None
    release: threading.Event = field(default_factory=threading.Event)
    connections: int = 0

    def serve(self, conn: socket.socket, first: bool) -> None:
        with conn:
            buffered = b""
            late = b""
            while True:
                while b"\r\n\r\n" not in buffered:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:  # the reader closed the connection
                        return
                    if not chunk:
                        return
                    buffered += chunk
                request, _, buffered = buffered.partition(b"\r\n\r\n")
                index, doc_id = asked(request)
                reply = document_reply(index, self.wrong_id or doc_id)
                if first:
                    first = False
                    conn.sendall(reply[: self.head])
                    self.release.wait(10)
                    late = reply[self.head :]  # goes out before the next request's reply
                    continue
                try:
                    conn.sendall(late + reply)
                except OSError:
                    return
                late = b""


@contextmanager
def stalling_server(head: int, wrong_id: str | None = None) -> Iterator[tuple[str, StallingServer]]:
    server = StallingServer(head, wrong_id)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            server.connections += 1
            thread = threading.Thread(target=server.serve, args=(conn, server.connections == 1), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", server
    finally:
        server.release.set()
        stop.set()
        acceptor.join(timeout=5)
        listener.close()


#: Where the first reply stalls: before its first byte, within its head, within its body.
STALLS = pytest.mark.parametrize("head", [0, 20, 150], ids=["before-reply", "mid-head", "mid-body"])


@STALLS
def test_a_blocking_read_after_a_timeout_mid_reply_gets_its_own_document(head: int) -> None:
    with stalling_server(head) as (url, server):
        reader = RealtimeReader(OpenSearchConfig(url=url, request_timeout=TIMEOUT_S))
        with pytest.raises(ConnectionTimeout):
            reader.get("requests", "alice-query")
        server.release.set()
        found = reader.get("requests", "bob-query")
        reader.close()
    assert found is not None and found["_id"] == "bob-query" and found["_source"] == {"id": "bob-query"}


@STALLS
def test_an_event_loop_read_after_a_timeout_mid_reply_gets_its_own_document(head: int) -> None:
    async def reads(url: str, server: StallingServer) -> dict[str, object] | None:
        reader = AsyncRealtimeReader(RealtimeReader(OpenSearchConfig(url=url, request_timeout=TIMEOUT_S)))
        with pytest.raises(ReadTimedOut):
            await reader.get("requests", "alice-query")
        server.release.set()
        return await reader.get("requests", "bob-query")

    with stalling_server(head) as (url, server):
        found = asyncio.run(reads(url, server))
    assert found is not None and found["_id"] == "bob-query" and found["_source"] == {"id": "bob-query"}


def test_a_reply_about_another_document_is_refused_by_both_readers() -> None:
    with stalling_server(head=10_000, wrong_id="alice-query") as (url, server):
        server.release.set()
        reader = RealtimeReader(OpenSearchConfig(url=url, request_timeout=TIMEOUT_S))
        with pytest.raises(ReadNotServed):
            reader.get("requests", "bob-query")
        assert reader._local.sock is None, "a connection that answered for another document is dropped"

        async def read() -> None:
            await AsyncRealtimeReader(reader).get("requests", "bob-query")

        with pytest.raises(ReadNotServed):
            asyncio.run(read())


# -- writes on the lean connection ---------------------------------------------------------------


@contextmanager
def recording_server(replies: list[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """Answers the requests of one connection with ``replies`` in turn (an empty one: closes the
    connection without answering); records each request's head."""
    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        for reply in replies:
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                while len(body) < length:
                    body += conn.recv(65536)
                heads.append(head)
                if reply:
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", heads
    finally:
        thread.join(timeout=5)
        listener.close()


def json_reply(status: int, payload: Mapping[str, object]) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


def test_a_write_whose_reply_is_lost_is_retried_and_a_create_finding_its_own_document_counts() -> None:
    """The lean write cannot know whether a write whose connection dropped was applied: it is the
    driver's connection error, retried by the store's policy, and a create that then finds the
    document it wrote counts as written (the driver's rule, kept)."""
    from query_core.store import IndexClient, Version

    created = {"_index": "requests", "_id": "q1", "_seq_no": 4, "_primary_term": 1, "result": "created"}
    conflict = {"error": {"type": "version_conflict_engine_exception", "reason": "[q1]: document already exists"}}
    updated = {"_index": "requests", "_id": "q1", "_seq_no": 5, "_primary_term": 1, "result": "updated"}
    replies = [b"", json_reply(409, conflict), json_reply(200, updated)]
    with recording_server(replies) as (url, heads):
        client = IndexClient(OpenSearchConfig(url=url, retry_attempts=3, retry_seconds=10, request_timeout=5))
        client._product_indexes._known_indexes.add("requests")  # no index checks: the writes alone
        client._source_is = lambda index, doc_id, source: True  # type: ignore[method-assign]
        client._client.get = lambda **kw: {**created, "found": True}  # type: ignore[method-assign]
        version = client.create("requests", "q1", {"type": "statement"})
        beat = client.update_if("requests", "q1", {"lastUpdateTime": 9}, version)
        client.close()
    assert version == Version(4, 1) and beat == Version(5, 1)
    assert [h.split(b"\r\n", 1)[0] for h in heads] == [
        b"PUT /requests/_create/q1 HTTP/1.1",
        b"PUT /requests/_create/q1 HTTP/1.1",
        b"POST /requests/_update/q1?if_seq_no=4&if_primary_term=1 HTTP/1.1",
    ]
