"""The embedded index keeps every write it acknowledged: across graceful stops, across kill -9 of
its processes at any moment (journal replayed on the last snapshot), across compactions; and a read
never shows a write that a crash could still lose."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.embedded.index import EmbeddedIndex, IndexCredential, JournalOptions
from async_query.embedded.journal import MAGIC, frame, list_segments, read_segment
from query_core.flint.metas import flint_metas
from query_core.store import IndexClient, Query, Range
from tests.conftest import REAL_CLUSTER
from tests.support import wait_for

pytestmark = pytest.mark.skipif(bool(REAL_CLUSTER), reason="the embedded index, not a real cluster")

REQUESTS = ".query_execution_request_local"
RESULTS = "query_execution_result_local"


#: The credential of every index server these tests start (restarts included).
CREDENTIAL = IndexCredential.generate()
AUTH = (CREDENTIAL.username, CREDENTIAL.password)


def client_of(embedded: EmbeddedIndex) -> IndexClient:
    return IndexClient(embedded.config(retry_seconds=2.0))


@pytest.fixture
def servers() -> Iterator[list[EmbeddedIndex]]:
    """Index servers a test starts (restarts append); all stopped at the end."""
    started: list[EmbeddedIndex] = []
    yield started
    for server in started:
        server.close()


def start(servers: list[EmbeddedIndex], directory: Path, **options: Any) -> EmbeddedIndex:
    server = EmbeddedIndex.start(directory, options=JournalOptions(**options), credential=CREDENTIAL)
    servers.append(server)
    return server


def fill(store: IndexClient) -> None:
    store.create(
        REQUESTS, "s1", {"type": "statement", "state": "waiting", "query": "SELECT 'it''s' -- é", "submitTime": 1}
    )
    store.create(REQUESTS, "s2", {"type": "statement", "state": "waiting", "query": "SELECT 2", "submitTime": 2})
    found = store.get(REQUESTS, "s1")
    assert found is not None
    store.update_if(REQUESTS, "s1", {"state": "success"}, found.version)
    store.put(RESULTS, "s1", {"status": "SUCCESS", "result": ["{'a':1}"], "schema": [], "extra": {"n": [1, None]}})
    store.create("scratch", "x", {"n": 1})
    store.driver.indices.delete(index="scratch")
    store.admin.create_index("flint_x", {"mappings": {"_meta": {"kind": "mv"}, "properties": {"n": {"type": "long"}}}})
    store.admin.put_mapping_meta("flint_x", {"kind": "mv", "latestId": "abc"})
    store.admin.bulk_index("flint_x", [(str(i), {"n": i}) for i in range(50)])
    assert store.admin.delete_all("flint_x") == 50
    store.admin.bulk_index("flint_x", [("kept", {"n": 7})])


def check_filled(store: IndexClient) -> None:
    s1, s2 = store.get(REQUESTS, "s1"), store.get(REQUESTS, "s2")
    assert s1 is not None and s1.source["state"] == "success" and s1.source["query"] == "SELECT 'it''s' -- é"
    assert s2 is not None and s2.source["state"] == "waiting"
    result = store.get(RESULTS, "s1")
    assert result is not None and result.source["extra"] == {"n": [1, None]}
    assert not store.admin.index_exists("scratch")  # a deleted index stays deleted
    assert flint_metas(store.admin, "flint_x") == {"flint_x": {"kind": "mv", "latestId": "abc"}}
    store.refresh("flint_x")
    assert [found.doc_id for found in store.search("flint_x", Query(size=100))] == ["kept"]
    mapping = store.driver.indices.get_mapping(index=REQUESTS)[REQUESTS]["mappings"]
    assert mapping["dynamic"] in (False, "false")
    assert store.driver.indices.exists_index_template(name="async-query-request-index")


def test_a_graceful_stop_keeps_everything_without_a_snapshot(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    first = start(servers, tmp_path / "index")
    store = client_of(first)
    fill(store)
    store.close()
    first.close()
    assert not any(p.name.startswith("snap-") for p in (tmp_path / "index").iterdir())  # all in the journal

    again = start(servers, tmp_path / "index")
    assert again.replayed["failures"] == 0 and again.replayed["records"] > 0
    store = client_of(again)
    check_filled(store)
    again.compact()  # and after a compaction, from the snapshot alone
    store.close()
    again.close()

    third = start(servers, tmp_path / "index")
    assert third.replayed["records"] == 0
    store = client_of(third)
    check_filled(store)
    store.close()


# -- kill -9 at a random moment of a write storm ------------------------------------------------


@dataclass
class Ledger:
    """What the writers were told (acknowledged) and what they had sent when the server died."""

    acked: dict[str, Any] = field(default_factory=dict)
    in_flight: dict[str, list[Any]] = field(default_factory=dict)
    shared: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, doc_id: str, value: Any) -> None:
        with self.lock:
            self.in_flight.setdefault(doc_id, []).append(value)

    def ok(self, doc_id: str, value: Any, seq_no: int | None = None) -> None:
        with self.lock:
            self.in_flight[doc_id].remove(value)
            if seq_no is None:
                self.acked[doc_id] = value
            else:
                self.shared.setdefault(doc_id, []).append((seq_no, value))
            self.count += 1


class Writer(threading.Thread):
    """Owns some documents and moves them through creates, conditional updates, deletes and bulk
    writes, one at a time; also overwrites documents shared with the other writers."""

    def __init__(self, url: str, name: str, ledger: Ledger, rng: random.Random) -> None:
        super().__init__(name=name, daemon=True)
        self.http = httpx.Client(base_url=url, auth=AUTH, timeout=10)
        self.ledger = ledger
        self.rng = rng
        self.versions: dict[str, tuple[int, int]] = {}

    def run(self) -> None:
        try:
            for step in range(100_000):
                self.step(step)
        except (httpx.HTTPError, AssertionError, KeyError):
            return  # the server died

    def step(self, step: int) -> None:
        doc_id = f"{self.name}-{self.rng.randrange(40)}"
        choice = self.rng.random()
        if doc_id not in self.versions:
            self.write(doc_id, {"v": step}, "PUT", f"/{REQUESTS}/_create/{doc_id}")
        elif choice < 0.5:
            seq, term = self.versions[doc_id]
            path = f"/{REQUESTS}/_update/{doc_id}?if_seq_no={seq}&if_primary_term={term}"
            self.write(doc_id, {"v": step}, "POST", path, {"doc": {"v": step}})
        elif choice < 0.6:
            self.write(doc_id, None, "DELETE", f"/{REQUESTS}/_doc/{doc_id}")
        elif choice < 0.8:
            shared = f"shared-{self.rng.randrange(5)}"
            self.ledger.sent(shared, {"by": self.name, "v": step})
            reply = self.http.put(f"/{RESULTS}/_doc/{shared}", json={"by": self.name, "v": step})
            assert reply.status_code in (200, 201), reply.text
            self.ledger.ok(shared, {"by": self.name, "v": step}, reply.json()["_seq_no"])
        else:
            self.bulk(step)

    def write(self, doc_id: str, value: Any, method: str, path: str, body: Any = None) -> None:
        self.ledger.sent(doc_id, value)
        reply = self.http.request(method, path, json=value if body is None and value is not None else body)
        assert reply.status_code in (200, 201), reply.text
        if value is None:
            del self.versions[doc_id]
        else:
            self.versions[doc_id] = (reply.json()["_seq_no"], reply.json()["_primary_term"])
        self.ledger.ok(doc_id, value)

    def bulk(self, step: int) -> None:
        ids = [f"{self.name}-bulk-{self.rng.randrange(20)}" for _ in range(5)]
        lines = []
        for doc_id in dict.fromkeys(ids):
            self.ledger.sent(doc_id, {"b": step})
            lines += [json.dumps({"index": {"_index": "flint_storm", "_id": doc_id}}), json.dumps({"b": step})]
        reply = self.http.post(
            "/_bulk", content="\n".join(lines) + "\n", headers={"Content-Type": "application/x-ndjson"}
        )
        assert reply.status_code == 200 and not reply.json()["errors"], reply.text
        for doc_id in dict.fromkeys(ids):
            self.ledger.ok(doc_id, {"b": step})


def storm_and_kill(server: EmbeddedIndex, seed: int, writers: int = 4) -> Ledger:
    """Writers run until the server is killed after a random number of acknowledged writes."""
    rng = random.Random(seed)
    kill_after = rng.randrange(150, 600)
    print(f"seed {seed}: kill -9 after {kill_after} acknowledged writes")
    ledger = Ledger()
    threads = [Writer(server.url, f"w{i}", ledger, random.Random(seed * 100 + i)) for i in range(writers)]
    for thread in threads:
        thread.start()
    wait_for(lambda: ledger.count >= kill_after, timeout=120, what=f"{kill_after} acknowledged writes")
    server.kill()
    for thread in threads:
        thread.join(timeout=30)
    return ledger


def read(http: httpx.Client, index: str, doc_id: str) -> Any:
    reply = http.get(f"/{index}/_doc/{doc_id}")
    assert reply.status_code in (200, 404), reply.text
    found = reply.json()
    return found["_source"] if found.get("found") else None


def check_ledger(url: str, ledger: Ledger) -> int:
    """Every acknowledged write is there (or one that was in flight when the server died)."""
    lost = 0
    with httpx.Client(base_url=url, auth=AUTH, timeout=10) as http:
        for doc_id, value in ledger.acked.items():
            index = "flint_storm" if "-bulk-" in doc_id else REQUESTS
            now = read(http, index, doc_id)
            if now != value and now not in ledger.in_flight.get(doc_id, []):
                lost += 1
                print(f"lost: {doc_id} is {now}, acknowledged {value}")
        for doc_id, writes in ledger.shared.items():
            last = max(writes, key=lambda w: w[0])[1]  # the server's order: by seq_no
            now = read(http, RESULTS, doc_id)
            if now != last and now not in ledger.in_flight.get(doc_id, []):
                lost += 1
                print(f"lost: {doc_id} is {now}, acknowledged last {last}")
    return lost


def tear_tail(directory: Path) -> None:
    """What a crash in the middle of a journal write leaves: half a record after the last one."""
    _, newest = list_segments(directory / "journal")[-1]
    end = read_segment(newest).valid_bytes
    with open(newest, "r+b") as out:
        out.seek(end)
        out.write(frame(b'{"o":"d","it":[]}\n')[:7])


@pytest.mark.parametrize("seed", [11, 29])
def test_kill_9_in_a_write_storm_loses_nothing_acknowledged(
    tmp_path: Path, servers: list[EmbeddedIndex], seed: int
) -> None:
    directory = tmp_path / "index"
    # Commits wait 20 ms for company: an answer given before its commit would be lost by the kill.
    first = start(servers, directory, compact_min_bytes=64 << 10, compact_ratio=0.5, commit_window_ms=20)
    store = client_of(first)
    store.admin.create_index(REQUESTS, {"mappings": {"dynamic": False, "properties": {"v": {"type": "long"}}}})
    store.close()
    ledger = storm_and_kill(first, seed)
    tear_tail(directory)

    again = start(servers, directory)
    assert again.replayed["torn_bytes"] == 7
    assert again.replayed["failures"] == 0
    lost = check_ledger(again.url, ledger)
    print(f"acknowledged {ledger.count}, lost {lost}")
    assert ledger.count > 0 and lost == 0


def compacted(server: EmbeddedIndex, times: int) -> bool:
    return int(server.stats()["compaction"]["compactions"]) >= times


def test_compactions_follow_the_journal_and_a_crash_after_them_loses_nothing(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    directory = tmp_path / "index"
    first = start(servers, directory, compact_min_bytes=32 << 10, compact_ratio=0.5)
    store = client_of(first)
    for round_ in (1, 2):  # each round's journal outgrows the threshold the snapshot before set
        for i in range(200 * (round_ - 1), 200 * round_):
            store.put(RESULTS, f"r{i}", {"status": "SUCCESS", "result": ["x" * 200], "updateTime": i})
        wait_for(partial(compacted, first, round_), timeout=60, what=f"compaction {round_}")
    store.refresh(RESULTS)
    assert store.delete_by_query(RESULTS, Query((Range("updateTime", lt=100),))) == 100
    store.close()
    stats = first.stats()
    assert stats["journal"]["uncompacted_bytes"] < 4 * stats["journal"]["threshold_bytes"]
    snapshots = [p.name for p in directory.iterdir() if p.name.startswith("snap-")]
    assert snapshots == [stats["snapshot"]["snapshot"]]  # older snapshots are gone
    assert all(n >= stats["snapshot"]["journal_from"] for n, _ in list_segments(directory / "journal"))
    first.kill()

    again = start(servers, directory)
    with httpx.Client(base_url=again.url, auth=AUTH) as http:
        count = http.get(f"/{RESULTS}/_count").json()["count"]
        assert count == 300
        assert read(http, RESULTS, "r99") is None and read(http, RESULTS, "r399")["updateTime"] == 399


def test_a_read_never_shows_a_write_a_crash_could_still_lose(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    """Commits wait 400 ms here, so a write sits applied but not durable. A GET through the
    proxy that sees it returns only once it is durable: a kill right after loses nothing."""
    directory = tmp_path / "index"
    first = start(servers, directory, commit_window_ms=400, isolate_network=False)  # read behind it
    writing = threading.Thread(
        target=lambda: httpx.put(f"{first.url}/{REQUESTS}/_doc/seen", json={"state": "success"}, auth=AUTH, timeout=30)
    )
    writing.start()
    with httpx.Client(base_url=first.private_url) as behind:
        wait_for(lambda: read(behind, REQUESTS, "seen"), timeout=10, what="the write applied")
    with httpx.Client(base_url=first.url, auth=AUTH) as http:
        assert read(http, REQUESTS, "seen") == {"state": "success"}
        first.kill()
    writing.join(timeout=10)

    again = start(servers, directory)
    with httpx.Client(base_url=again.url, auth=AUTH) as http:
        assert read(http, REQUESTS, "seen") == {"state": "success"}


def test_replay_orders_writes_of_one_document_by_the_servers_seq_no(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """Records that reached the journal in another order than the server applied them."""
    from async_query.embedded.effects import OP_INDEX, OP_UPDATE

    directory = tmp_path / "index"
    (directory / "journal").mkdir(parents=True)
    update, index = b'{"doc":{"state":"ok"}}', b'{"a":"b"}'
    records = [
        ({"o": "d", "it": [[OP_UPDATE, "ix", "d", 2, len(update)]]}, update),  # applied after the next
        ({"o": "d", "it": [[OP_INDEX, "ix", "d", 1, len(index)]]}, index),
    ]
    payloads = [json.dumps(header).encode() + b"\n" + body for header, body in records]
    (directory / "journal" / "000000000000.wal").write_bytes(MAGIC + b"".join(frame(p) for p in payloads))

    server = start(servers, directory)
    with httpx.Client(base_url=server.url, auth=AUTH) as http:
        assert read(http, "ix", "d") == {"a": "b", "state": "ok"}


def test_the_proxy_speaks_http_as_the_server_does(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    server = start(servers, tmp_path / "index")
    with httpx.Client(base_url=server.url, auth=AUTH) as http:
        assert http.put("/big/_doc/1", json={"n": 1}).status_code == 201
        assert http.head("/big").status_code == 200 and http.head("/missing").status_code == 404
        assert http.get("/big/_doc/none").status_code == 404
        bulk = "".join(
            json.dumps({"index": {"_id": str(i)}}) + "\n" + json.dumps({"x": "y" * 300}) + "\n" for i in range(3000)
        )
        assert (
            http.post("/big/_bulk", content=bulk, headers={"Content-Type": "application/x-ndjson"}).status_code == 200
        )
        hits = http.post("/big/_search", json={"size": 3000}).json()["hits"]["hits"]
        assert len(hits) == 3000  # a reply of about 1 MB, relayed as it came
        assert (
            http.put("/big/_doc/1", content=b"not json", headers={"Content-Type": "application/json"}).status_code
            == 400
        )
    host, port = "127.0.0.1", server.port
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.sendall(
            b"PUT /big/_doc/chunked HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: {CREDENTIAL.header()}\r\n".encode()
            + b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
            b'5\r\n{"n":\r\n2\r\n9}\r\n0\r\n\r\n'
        )
        answer = _read_all(raw)
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201")
    assert httpx.get(f"{server.url}/big/_doc/chunked", auth=AUTH).json()["_source"] == {"n": 9}
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert _read_all(raw).startswith(b"HTTP/1.1 400")


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_an_unloadable_snapshot_is_set_aside_not_lost(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    directory = tmp_path / "index"
    directory.mkdir()
    (directory / f"{REQUESTS}.index.json").write_text('{"mappings": {"properties": {"n": {"type": "long"}}}}')
    (directory / f"{REQUESTS}.ndjson").write_text('{"index": {"_id": "a"}}\n{"n": "not a number"}\n')
    embedded = start(servers, directory)
    store = client_of(embedded)
    assert store.get(REQUESTS, "a") is None
    store.close()
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("index.unloadable-")]
    assert len(kept) == 1 and (kept[0] / f"{REQUESTS}.ndjson").exists()


def test_a_data_directory_of_the_earlier_layout_is_loaded_then_replaced(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    directory = tmp_path / "index"
    directory.mkdir()
    (directory / f"{REQUESTS}.index.json").write_text(
        '{"mappings": {"dynamic": false, "properties": {"n": {"type": "long"}}}}'
    )
    (directory / f"{REQUESTS}.ndjson").write_text('{"index": {"_id": "old"}}\n{"n": 1}\n')
    first = start(servers, directory)
    first.compact()
    assert not (directory / f"{REQUESTS}.ndjson").exists()
    first.close()
    again = start(servers, directory)
    with httpx.Client(base_url=again.url, auth=AUTH) as http:
        assert read(http, REQUESTS, "old") == {"n": 1}
    modes = {oct(p.stat().st_mode & 0o777) for p in directory.rglob("*") if p.name != "LOCK"}
    assert modes <= {oct(0o600), oct(0o700)}, modes
    assert oct(os.stat(directory / "journal").st_mode & 0o777) == oct(0o700)


def test_ctrl_c_leaves_the_index_to_the_services_own_shutdown(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    """SIGINT (a terminal's Ctrl-C reaches the whole process group) stops neither the index
    server nor osmem-server: the service still writes while it shuts down."""
    server = start(servers, tmp_path / "index")
    # osmem-server handles SIGINT itself: it runs in a session of its own, out of the terminal's reach.
    assert os.getpgid(server.osmem_pid) != os.getpgid(server.process.pid) == os.getpgid(0)
    os.kill(server.process.pid, signal.SIGINT)
    with httpx.Client(base_url=server.url, auth=AUTH) as http:
        for i in range(20):
            assert http.put(f"/after_ctrl_c/_doc/{i}", json={"n": i}).status_code == 201
    assert server.process.poll() is None
    server.close()
    assert server.process.returncode == 0


def test_a_request_without_the_credential_reads_and_writes_nothing(tmp_path: Path) -> None:
    """The credential is generated at start and reaches the index server on its stdin: it is on no
    command line and in no reply; a local process without it is refused before anything is
    forwarded."""
    server = EmbeddedIndex.start(tmp_path / "index", options=JournalOptions(isolate_network=False))  # read behind it
    try:
        with httpx.Client(base_url=server.url, auth=server.auth, timeout=10) as http:
            assert http.put(f"/{REQUESTS}/_doc/secret", json={"query": "mine"}).status_code == 201
        wrong = httpx.BasicAuth(server.credential.username, "guessed")
        for auth in (None, wrong):
            with httpx.Client(base_url=server.url, auth=auth, timeout=10) as http:
                refused = [
                    http.get(f"/{REQUESTS}/_doc/secret"),
                    http.post(f"/{REQUESTS}/_search", json={"query": {"match_all": {}}}),
                    http.put(f"/{REQUESTS}/_doc/planted", json={"query": "theirs"}),
                    http.delete(f"/{REQUESTS}"),
                    http.get("/_embedded/journal"),
                ]
            assert [r.status_code for r in refused] == [401] * len(refused)
            assert all(server.credential.password not in r.text for r in refused)
        with httpx.Client(base_url=server.private_url, timeout=10) as behind:
            assert read(behind, REQUESTS, "planted") is None and read(behind, REQUESTS, "secret") == {"query": "mine"}
        for pid in (server.process.pid, server.osmem_pid):
            assert server.credential.password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert server.stats()["requests"]["refused"] == 10
    finally:
        server.close()


def test_a_liveness_write_is_answered_without_the_journal_and_a_crash_may_lose_it(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """Heartbeats are marked liveness writes: never journaled (a crash loses them, and the job they
    spoke for died with it); every other write is, before its answer."""
    directory = tmp_path / "index"
    first = start(servers, directory)
    store = client_of(first)
    store.create(REQUESTS, "sess", {"type": "session", "state": "running", "lastUpdateTime": 1})
    current = store.get(REQUESTS, "sess")
    assert current is not None
    records = first.stats()["journal"]["records"]
    version = current.version
    for beat in range(2, 12):
        version = store.update_liveness_if(REQUESTS, "sess", {"lastUpdateTime": beat}, version)
    after_beats = first.stats()
    assert after_beats["journal"]["records"] == records and after_beats["requests"]["liveness"] == 10
    found = store.get(REQUESTS, "sess")
    assert found is not None and found.source["lastUpdateTime"] == 11  # read back at once, as any write
    store.update_if(REQUESTS, "sess", {"state": "dead"}, version)  # a state change: durable
    store.close()
    first.kill()

    again = start(servers, directory)
    with httpx.Client(base_url=again.url, auth=AUTH) as http:
        assert read(http, REQUESTS, "sess") == {"type": "session", "state": "dead", "lastUpdateTime": 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs CAP_SYS_ADMIN")
def test_osmem_server_is_out_of_every_other_local_process_s_reach(tmp_path: Path, servers: list[EmbeddedIndex]) -> None:
    """osmem-server has no authentication: it runs in a network namespace of its own, where no
    other local process can connect; the index server's public port stays on the host's loopback."""
    from async_query.embedded.isolation import network_namespace

    server = start(servers, tmp_path / "index")
    assert server.isolated
    ours = network_namespace()
    assert network_namespace(server.osmem_pid) == network_namespace(server.process.pid) != ours
    port = int(server.private_url.rsplit(":", 1)[1])
    with socket.socket() as probe:  # nothing on the host's loopback answers as the index
        probe.settimeout(2)
        reached = probe.connect_ex(("127.0.0.1", port)) == 0
    if reached:  # another process of the host happens to hold that port number: not the index
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{server.private_url}/{REQUESTS}/_count", timeout=2).raise_for_status()
    with httpx.Client(base_url=server.url, auth=AUTH, timeout=10) as http:
        assert http.put(f"/{REQUESTS}/_doc/a", json={"n": 1}).status_code == 201
        assert read(http, REQUESTS, "a") == {"n": 1}
    server.compact()  # the snapshot worker reaches osmem-server inside, as the index server does
    server.close()
    again = start(servers, tmp_path / "index")
    with httpx.Client(base_url=again.url, auth=AUTH, timeout=10) as http:
        assert read(http, REQUESTS, "a") == {"n": 1}


def test_an_empty_index_in_a_snapshot_does_not_lose_the_rest_at_the_next_start(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """An attack: an analyst's empty Flint index, then a result large enough to write a snapshot,
    and at the next start the server refused the snapshot's empty documents file, set everything
    aside and started empty (every query, result and datasource gone). An empty index now has no
    documents file, and a snapshot written with one (before) is loaded all the same."""
    directory = tmp_path / "index"
    first = start(servers, directory, compact_min_bytes=32 << 10, compact_ratio=0.5)
    store = client_of(first)
    store.admin.create_index("flint_lake_default_e_ci_index", {"mappings": {"properties": {"a": {"type": "keyword"}}}})
    for i in range(200):
        store.put(RESULTS, f"r{i}", {"status": "SUCCESS", "result": ["x" * 200], "updateTime": i})
    wait_for(partial(compacted, first, 1), timeout=60, what="a snapshot")
    store.close()
    first.close()
    snapshot = next(p for p in directory.iterdir() if p.name.startswith("snap-"))
    assert (snapshot / "flint_lake_default_e_ci_index.index.json").exists()
    assert not (snapshot / "flint_lake_default_e_ci_index.ndjson").exists()
    # A snapshot as the earlier version wrote it: an empty documents file.
    (snapshot / "flint_lake_default_e_ci_index.ndjson").write_text("")

    again = start(servers, directory)
    with httpx.Client(base_url=again.url, auth=AUTH) as http:
        assert http.get(f"/{RESULTS}/_doc/r199").json()["_source"]["updateTime"] == 199
        assert http.get("/flint_lake_default_e_ci_index/_count").json()["count"] == 0
    assert not any(p.name.startswith("index.unloadable") for p in tmp_path.iterdir())
