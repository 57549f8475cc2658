"""Real processes for fault tests: Spark jobs found by their pid files, an index server on a fixed
port that can be paused or restarted, and the plugin as its own ``async-query serve`` process.

Every helper here cleans up what it started; the tests call them from ``finally`` blocks and
fixtures so that a failing test leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

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
    """``osmem-server`` on a port that stays the same across restarts, so clients keep their URL.

    osmem keeps documents in memory: :meth:`restart` loses them all. :meth:`pause` (SIGSTOP) and
    :meth:`resume` (SIGCONT) make an outage that keeps them.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.server: Any = None
        self.paused = False
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from osmem_server import OsmemServer

        self.server = OsmemServer.start(addr=f"127.0.0.1:{self.port}", japanese=False)

    def stop(self) -> None:
        if self.server is not None:
            self.resume()
            self.server.close(grace=5.0)
            self.server = None

    def pause(self) -> None:
        os.kill(self.server.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.server is not None:
            os.kill(self.server.process.pid, signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        self.stop()


# -- the plugin as a process -----------------------------------------------------------------------


class PluginProcess:
    """``async-query serve`` as a child process, with its output in a log file.

    ``own_group`` starts it as the leader of a process group of its own (with its children: the
    embedded index server, ``osmem-server``, the metastore), which :meth:`kill_group` kills at once.
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
                return httpx.get(f"{self.url}/_plugins/_async_query/_sessions?size=1", timeout=5).status_code == 200
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
