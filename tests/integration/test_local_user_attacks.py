"""What another local user of the machine can do to the embedded index and the metastores without
any credential (docs/security.md, "What listens where"; docs/durability.md, "Who may use it").

Found by an attack as a second local user against ``serve --gateway`` (basic auth, two local
datasources, a warm pool), with only the README, ``docs/`` and a shell:

- Eight unauthenticated POSTs of 95 MB each to the index node's HTTP port killed the node
  (``java.lang.OutOfMemoryError: Java heap space``, 2.7 s): the guard answers 401 only once the
  node has gathered the whole body in its heap.
- While the node was down (killed so, or by any crash) the attacker bound its port: the node is
  started again on the same port, and in the meantime the service, its gateway and its jobs kept
  sending their requests, each with the index's credential in its ``Authorization`` header, to the
  attacker. With the credential the attacker read every user's statements and results from the
  restarted node.
- A metastore's Thrift port is on its command line (``... LoopbackMetastore <port>``), readable by
  every local user in ``/proc/<pid>/cmdline``, many seconds before the metastore binds it (a cold
  start took 69.5 s). Another user who binds it first is taken for the metastore: the service's
  start sees the port listening and reports it ready, and the jobs and the catalog read model talk
  to the impostor.
- One connection to a metastore's bulk-read port that sends half a request holds that port (it
  serves one connection at a time, for up to 30 s each): every browse of the datasource waited
  for the 10 s bulk-read limit before reading through Thrift (SHOW TABLE EXTENDED: 0.9 s -> 10.6 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query.catalog.bulk import read_tables
from async_query.catalog.readers import HiveMetastoreReader
from async_query.embedded.index import EmbeddedIndex, IndexCredential
from async_query.embedded.metastore import Metastore, MetastoreError
from async_query.embedded.node_jars import NodeJars
from query_core.store import IndexClient
from tests.conftest import REAL_CLUSTER
from tests.node import CLIENT_SSL, node_options
from tests.support import wait_for

pytestmark = [pytest.mark.skipif(bool(REAL_CLUSTER), reason="the embedded index, not a real cluster"), pytest.mark.slow]

CREDENTIAL = IndexCredential.generate()
AUTH = (CREDENTIAL.username, CREDENTIAL.password)
#: A uid with no account on the machine: "another local user" (only root can switch to it).
OTHER_UID = 54321


@pytest.fixture
def servers() -> Iterator[list[EmbeddedIndex]]:
    started: list[EmbeddedIndex] = []
    yield started
    for server in started:
        server.close()


def start(servers: list[EmbeddedIndex], directory: Path) -> EmbeddedIndex:
    server = EmbeddedIndex.start(directory, NodeJars.resolve(), node_options(), credential=CREDENTIAL, watch=True)
    servers.append(server)
    return server


def _unauthenticated_body(port: int, megabytes: int) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            head = f"POST /_bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {megabytes << 20}\r\n\r\n"
            conn.sendall(head.encode())
            chunk = b"a" * (1 << 20)
            for _ in range(megabytes):
                conn.sendall(chunk)
            conn.recv(512)
    except OSError:
        pass


def test_large_bodies_without_the_credential_do_not_take_the_node_down(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    server = start(servers, tmp_path / "index")
    assert server.process is not None
    first = server.process
    senders = [threading.Thread(target=_unauthenticated_body, args=(server.port, 95)) for _ in range(8)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout=120)
    # The senders' connections end when the node answers them, or when it dies of them.
    with httpx.Client(base_url=server.url, auth=AUTH, timeout=10, verify=CLIENT_SSL) as http:
        try:
            answered: object = http.get("/").status_code
        except httpx.TransportError as exc:
            answered = exc
    assert server.restarts == 0 and first.poll() is None, "unauthenticated request bodies killed the node"
    assert answered == 200


SQUATTER = r"""
import socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + 60
server = None
print("TRYING", flush=True)
while time.monotonic() < deadline:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port)); s.listen(64); server = s; break
    except OSError:
        s.close(); time.sleep(0.002)
if server is None:
    print("NEVER BOUND", flush=True); sys.exit(0)
print("BOUND", flush=True)
server.settimeout(0.5)
end = time.monotonic() + 8
while time.monotonic() < end:
    try:
        conn, _ = server.accept()
    except socket.timeout:
        continue
    conn.settimeout(1)
    try:
        data = conn.recv(65536)
    except OSError:
        data = b""
    sys.stdout.write("GOT " + data.hex() + "\n"); sys.stdout.flush()
    try:
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    except OSError:
        pass
    conn.close()
server.close()
"""


def test_a_process_that_takes_the_node_s_port_while_it_is_down_never_receives_the_credential(
    tmp_path: Path, servers: list[EmbeddedIndex]
) -> None:
    """The node is started again on its port after it dies; until then anyone may bind that port.
    The service's clients (its store, the node's watcher, the gateway, the jobs) must not hand the
    credential to whoever listens there."""
    server = start(servers, tmp_path / "index")
    assert server.process is not None
    script = tmp_path / "squatter.py"
    script.write_text(SQUATTER)
    script.chmod(0o755)
    tmp_path.chmod(0o755)
    squatter = subprocess.Popen(
        [
            shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable,
            "-S",
            str(script),
            str(server.port),
        ],
        stdout=subprocess.PIPE,
        text=True,
        user=OTHER_UID if os.geteuid() == 0 else None,
        group=OTHER_UID if os.geteuid() == 0 else None,
        extra_groups=[] if os.geteuid() == 0 else None,
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "TRYING"
        os.kill(server.process.pid, signal.SIGKILL)
        store = IndexClient(server.config(retry_seconds=3.0))
        try:
            wait_for(lambda: server.restarts >= 1, timeout=300, what="the node to be started again")
            for _ in range(3):
                try:
                    store.get(".query_execution_request_local", "any")
                except Exception:  # noqa: BLE001 - refused or unavailable: what matters is what was sent
                    pass
        finally:
            store.close()
        out, _ = squatter.communicate(timeout=120)
    finally:
        if squatter.poll() is None:
            squatter.kill()
    received = b"".join(bytes.fromhex(line[4:]) for line in out.splitlines() if line.startswith("GOT "))
    print(out.splitlines()[:1], f"{received.count(b'HTTP/1.1')} requests received by the squatter")
    leaked = CREDENTIAL.header().split(" ")[-1].encode() in received or CREDENTIAL.password.encode() in received
    assert not leaked, "the index's credential went to another user's listener on the node's port"


@pytest.fixture
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metastore]:
    home = tmp_path_factory.mktemp("bulk-hold")
    started = Metastore.start(home / "ms", home / "warehouse", files=home / "files")
    yield started
    started.close()


def test_a_connection_that_holds_the_bulk_read_port_does_not_stall_the_service_s_reads(metastore: Metastore) -> None:
    assert metastore.tables is not None
    held = [socket.create_connection(("127.0.0.1", metastore.tables.port), timeout=5) for _ in range(3)]
    try:
        for conn in held:
            conn.sendall(b'{"tok')  # half a request, never finished
        # The service's reads must not queue behind connections that never finish their request.
        answered = read_tables(metastore.tables, "default", None, timeout_s=5)
    finally:
        for conn in held:
            conn.close()
    assert answered == []


METASTORE_SQUATTER = r"""
import os, socket, sys, time
marker, deadline = sys.argv[1], time.monotonic() + 240
print("TRYING", flush=True)
server = None
while server is None and time.monotonic() < deadline:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(marker in a for a in args) and "asyncquery.jvm.LoopbackMetastore" in args:
            port = int(args[args.index("asyncquery.jvm.LoopbackMetastore") + 1])
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port)); s.listen(64); server = s
            except OSError:
                s.close()
            break
    time.sleep(0.001)
if server is None:
    print("NEVER BOUND", flush=True); sys.exit(0)
print("BOUND", flush=True)
server.settimeout(0.5)
end = time.monotonic() + 30
while time.monotonic() < end:
    try:
        conn, _ = server.accept()
    except socket.timeout:
        continue
    print("ACCEPTED", flush=True)
    conn.close()
"""


def test_a_process_that_takes_a_metastore_s_port_first_is_not_taken_for_the_metastore(tmp_path: Path) -> None:
    home = tmp_path / "catalog-of-lake"
    script = tmp_path / "metastore_squatter.py"
    script.write_text(METASTORE_SQUATTER)
    tmp_path.chmod(0o755)
    script.chmod(0o755)
    squatter = subprocess.Popen(
        [shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable, "-S", str(script), str(home)],
        stdout=subprocess.PIPE,
        text=True,
        user=OTHER_UID if os.geteuid() == 0 else None,
        group=OTHER_UID if os.geteuid() == 0 else None,
        extra_groups=[] if os.geteuid() == 0 else None,
    )
    started: Metastore | None = None
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "TRYING"
        try:
            started = Metastore.start(home / "ms", home / "warehouse", files=home / "files")
        except MetastoreError:
            started = None  # refusing to start on a port someone else holds is an answer too
        if started is not None:
            reader = HiveMetastoreReader(started.uri, timeout_s=5)
            try:
                reader.databases()
            except Exception:  # noqa: BLE001 - what matters is who was asked
                pass
            finally:
                reader.close()
        out, _ = squatter.communicate(timeout=120)
    finally:
        if squatter.poll() is None:
            squatter.kill()
        if started is not None:
            started.close()
    print(out.splitlines()[:2])
    assert "ACCEPTED" not in out.splitlines(), "the service took another user's listener for its metastore"
