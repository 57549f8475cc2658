"""Real processes for fault tests: Spark jobs found by their pid files, the index on a fixed port
that can go away (paused, or stopped and back), and the plugin as its own ``async-query serve``
process.

Every helper here cleans up what it started; the tests call them from ``finally`` blocks and
fixtures so that a failing test leaves no process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from tests import node
from tests.support import free_port, wait_for

VENV_BIN = Path(sys.executable).parent
#: Settings the test run gives every local job (tests/conftest.py: one shared class archive, the
#: quick-starting JIT tier, no warm pool), which plugin processes started by the tests keep too.
SHARED_JOB_SETTINGS = (
    "ASYNC_QUERY_LOCAL_JOB_CLASS_ARCHIVE_DIR",
    "ASYNC_QUERY_LOCAL_JOB_JAVA_OPTIONS",
    "ASYNC_QUERY_WARM_POOL_SIZE",
    "ASYNC_QUERY_EXTERNAL_SCHEDULER_ENABLED",
)


def plugin_env() -> dict[str, str]:
    """This process's environment for a plugin process, without the index connection and the
    service settings (the test names those) but for :data:`SHARED_JOB_SETTINGS`."""
    return {
        k: v
        for k, v in os.environ.items()
        if k in SHARED_JOB_SETTINGS or not k.startswith(("OPENSEARCH_", "ASYNC_QUERY_"))
    }


# -- Spark jobs, by the local launcher's pid files --------------------------------------------------


def job_pid(data_dir: Path, job_id: str) -> int:
    """The pid (and process group id) the local launcher recorded for ``job_id``."""
    return int((data_dir / "jobs" / f"{job_id}.pid").read_text())


def is_job_process(pid: int, job_id: str) -> bool:
    """True while ``pid`` runs and is this job (its environment names the job id; no pid reuse)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and f"SERVERLESS_EMR_JOB_ID={job_id}".encode() in environ


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def kill_job(data_dir: Path, job_id: str, timeout: float = 15.0) -> None:
    """SIGKILL the job's whole process group (if it still is that job) and wait until it is gone."""
    try:
        pid = job_pid(data_dir, job_id)
    except (OSError, ValueError):
        return
    if not is_job_process(pid, job_id) and not group_members(pid):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_for(lambda: not group_members(pid), timeout=timeout, what=f"job {job_id} (pgid {pid}) to be gone")


def kill_all_jobs(data_dir: Path) -> None:
    """Teardown: kill every job recorded under ``data_dir`` that still runs."""
    jobs = data_dir / "jobs"
    if not jobs.is_dir():
        return
    for pid_file in jobs.glob("*.pid"):
        kill_job(data_dir, pid_file.stem)


# -- an index server on a fixed port ---------------------------------------------------------------


class FixedPortIndex:
    """The test process's OpenSearch node behind a port of its own that can go away: an outage as
    the index's clients see it, without restarting the node (whose own crashes and restarts are
    tested in tests/integration/test_embedded_index.py).

    :meth:`stop` closes the port and every connection through it (connection refused, as a
    stopped server); :meth:`start` listens again on the same port, the documents as they were
    (``empty=True``: every index gone, as a cluster restored empty). :meth:`pause` keeps the port
    and the connections but forwards nothing (requests hang, as a server stopped with SIGSTOP);
    :meth:`resume` lets them through.
    """

    def __init__(self) -> None:
        self.node = node.start_node()
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        node.alias(self.url)
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def paused(self) -> bool:
        return not self._flowing.is_set()

    def config(self, **overrides: Any) -> Any:
        """A connection through this port, with the node's credential."""
        return node.index_config(self.url, **overrides)

    def start(self, empty: bool = False) -> None:
        if empty:
            node.wipe(self.node)
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="outage-accept").start()

    def stop(self) -> None:
        self.resume()
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        if listener is not None:
            with contextlib.suppress(OSError):  # wakes the accepting thread: a close alone would not
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.node.port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True, name="outage-pump").start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


# -- the plugin as a process -----------------------------------------------------------------------


class PluginProcess:
    """``async-query serve`` as a child process, with its output in a log file.

    ``own_group`` starts it as the leader of a process group of its own (with its children: the
    embedded OpenSearch node, the metastore), which :meth:`kill_group` kills at once.
    """

    def __init__(self, port: int, env: dict[str, str], log_path: Path, own_group: bool = False) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.own_group = own_group
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "async-query"), "serve", "--port", str(port), "--log-level", "info"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=own_group,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the plugin exited with {self.proc.returncode}:\n{self.log()}")
            try:
                reply = httpx.get(f"{self.url}/_plugins/_async_query/_sessions?size=1", timeout=5, verify=node.CLIENT_SSL)
                return reply.status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=timeout, interval=0.2, what="the plugin to answer")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def kill_group(self, timeout: float = 30.0) -> None:
        """kill -9 of the plugin and every process of its group, at once (needs ``own_group``);
        returns once none of them is left."""
        assert self.own_group, "the plugin shares the test's process group"
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        wait_for(lambda: not group_members(self.proc.pid), timeout=timeout, what="the plugin's process group to be gone")

    def terminate(self, timeout: float = 30.0) -> int:
        """A graceful stop (SIGTERM); returns the exit code, killing it if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(f"the plugin did not stop within {timeout} s of SIGTERM") from None
        return self.proc.returncode
