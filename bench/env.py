"""The system under test: an index node and the service as a separate process.

The service runs as ``async-query serve`` in its own process (uvicorn, as deployed), so the bench's
load generators do not share its interpreter. The bench starts the index itself (a real OpenSearch
node, as the service would start its embedded index: :mod:`bench.index_node`) and hands its URL
and credential to the service in its environment, so that the bench can read documents directly;
``OPENSEARCH_URL`` (or ``ASYNC_QUERY_OPENSEARCH_URL``) is used instead when set.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import httpx

from bench.index_node import IndexNode, index_node, process_files
from query_core.config import OpenSearchConfig
from query_core.store import Store

log = logging.getLogger(__name__)

#: The service gets this long to stop (and stop its Spark jobs) on SIGINT before it is killed.
STOP_GRACE_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchEnv:
    """Index node + service process + a store on the same index. Use as a context manager."""

    def __init__(self, service_env: dict[str, str] | None = None, keep_dir: bool = False) -> None:
        self.service_env = service_env or {}
        self.keep_dir = keep_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._index: ExitStack | None = None
        self.data_dir = Path()
        #: The index (its URL, a connection with its credential, the node if started here).
        self.index: IndexNode | None = None
        self.index_url = ""
        self.store: Store | None = None
        self.opensearch: OpenSearchConfig | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.log_path = Path()

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> BenchEnv:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="aq-bench-")
        self.data_dir = Path(self._tmp.name)
        # Run as root, the service runs its metastores and jobs as the job user, who must pass
        # through this directory to their places in the service's data directory.
        self.data_dir.chmod(0o711)
        self._index = ExitStack()
        self.index = self._index.enter_context(index_node(self.data_dir / "node"))
        self.index_url = self.index.url
        self.opensearch = self.index.config
        self.store = Store.connect(self.opensearch)
        self.start_service()

    def start_service(self) -> None:
        port = free_port()
        assert self.index is not None
        # The index's URL and credential reach the service in its environment, as any index's would.
        env = self.index.service_env(os.environ)
        env.update(
            ASYNC_QUERY_DATA_DIR=str(self.data_dir / "service"),
            SPARK_LOCAL_IP=env.get("SPARK_LOCAL_IP", "127.0.0.1"),
        )
        # No warm pool unless a bench asks for one (bench.pool measures it): its job's start would
        # take CPU from the sections measured, and "cold start" means a job started for the session.
        env.setdefault("ASYNC_QUERY_WARM_POOL_SIZE", "0")
        env.update(self.service_env)
        self.log_path = self.data_dir / "service.log"
        command = [sys.executable, "-m", "async_query.cli", "serve", "--port", str(port), "--log-level", "warning"]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.base_url = f"http://127.0.0.1:{port}"
        wait_serving(self.proc, self.base_url, self.log_path, interval=0.1)
        log.info("service pid %d at %s (index %s)", self.proc.pid, self.base_url, self.index_url)

    def close(self) -> None:
        self.stop_service()
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._index is not None:
            self._index.close()
            self._index = None
            self.index = None
        if self._tmp is not None and not self.keep_dir:
            self._tmp.cleanup()
            self._tmp = None

    def stop_service(self) -> None:
        """SIGINT (the service's shutdown stops its Spark jobs), then make sure nothing is left."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        stop_services([proc], STOP_GRACE_S)
        self._kill_leftover_jobs()

    def _kill_leftover_jobs(self) -> None:
        kill_leftover_jobs(self.data_dir / "service" / "jobs")

    # -- helpers ----------------------------------------------------------------------------

    def require_store(self) -> Store:
        if self.store is None:
            raise RuntimeError("the bench environment is not started")
        return self.store

    def service_log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_serving(
    proc: subprocess.Popen[bytes],
    base_url: str,
    log_path: Path,
    headers: dict[str, str] | None = None,
    interval: float = 0.02,
) -> None:
    """Return once the ``async-query serve`` process ``proc`` answers its session listing at
    ``base_url``; fail if it exits first or has not answered within 60 s (its log: ``log_path``)."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with {proc.returncode}; see {log_path}")
        try:
            if httpx.get(f"{base_url}/_plugins/_async_query/_sessions", headers=headers, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not answer within 60 s; see {log_path}")
        time.sleep(interval)


def stop_services(procs: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGINT to every ``async-query serve`` process still running (its shutdown stops its Spark
    jobs), then a kill for any that has not stopped within ``grace_s`` of it."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGINT)
    for proc in running:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.warning("the service did not stop on SIGINT; killing it (pid %d)", proc.pid)
            proc.kill()
            proc.wait()


def kill_leftover_jobs(jobs: Path) -> int:
    """Kill the processes of the Spark jobs a bench's service launched that are still alive (its
    sessions' jobs can outlive it, and a job's JVM its Python); returns how many.

    The local launcher records each job under ``<data dir>/jobs``; every process of a job has the
    job's id in its environment (a pid used again by another process has not).
    """
    names = {f"SERVERLESS_EMR_JOB_ID={pid_file.stem}".encode() for pid_file in jobs.glob("*.pid")} if jobs.exists() else set()
    killed = 0
    for pid, environ in process_files("environ") if names else []:
        if names & set(environ.split(b"\0")):
            log.info("process %d of a job outlived the service; killing it", pid)
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (from each process's parent in ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for pid, stat in process_files("stat"):
        try:
            parent = int(stat.rpartition(b")")[2].split()[1])
        except (ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found
