"""The local jobs' processes: started here or by an earlier plugin process (found again by their
pid files), described, stopped (SIGTERM to the process group, SIGKILL after a grace period) and
pruned once finished. :class:`~async_query.launcher.local.LocalLauncher` starts them; this is
what it knows of them afterwards."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from async_query.launcher.base import JobDescription, JobRunState
from async_query.security.job_user import JobUser

log = logging.getLogger(__name__)

#: A job's temporary directory younger than this is never pruned (its job may be starting).
TMP_GRACE_S = 600.0


class LocalJobs:
    """The processes of local jobs, by job id."""

    def __init__(self, data_dir: Path, job_user: JobUser, stop_grace_s: float) -> None:
        self.data_dir = data_dir
        self.job_user = job_user
        #: How long a cancelled job gets to stop on SIGTERM before its process group is killed.
        self.stop_grace_s = stop_grace_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Path] = {}
        self._lock = threading.Lock()

    def add(self, job_id: str, proc: subprocess.Popen[bytes], log_file: Path) -> None:
        """A job just started: kept, and its pid recorded for a later plugin process."""
        with self._lock:
            self._procs[job_id] = proc
            self._logs[job_id] = log_file
        self.pid_file(job_id).write_text(str(proc.pid))

    def process(self, job_id: str) -> subprocess.Popen[bytes] | None:
        """The process of a job started by this plugin process (None: another's, or gone)."""
        with self._lock:
            return self._procs.get(job_id)

    def pid_file(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / f"{job_id}.pid"

    def pid(self, job_id: str) -> int | None:
        with self._lock:
            proc = self._procs.get(job_id)
        if proc is not None:
            return proc.pid if proc.poll() is None else None
        try:
            pid = int(self.pid_file(job_id).read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid, job_id) else None

    def live(self) -> list[str]:
        """The jobs whose process runs, of every plugin process sharing this data directory (by
        their pid files), sorted: what runs on this machine's Spark now."""
        jobs = self.data_dir / "jobs"
        found = sorted(p.stem for p in jobs.glob("*.pid")) if jobs.is_dir() else []
        return [job_id for job_id in found if self.pid(job_id) is not None]

    def describe(self, job_id: str) -> JobDescription:
        with self._lock:
            proc = self._procs.get(job_id)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return JobDescription(job_id, JobRunState.RUNNING)
            state = JobRunState.SUCCESS if code == 0 else JobRunState.FAILED
            return JobDescription(job_id, state, self._exit_details(job_id, code))
        if self.pid(job_id) is not None:
            return JobDescription(job_id, JobRunState.RUNNING)
        return JobDescription(job_id, JobRunState.UNKNOWN, "no such local job is running")

    def _exit_details(self, job_id: str, code: int) -> str:
        """How the job ended, with the last line of its log (often the reason, e.g. no Java)."""
        log_file = self._logs.get(job_id)
        details = f"spark-submit exited with code {code}"
        if log_file is None:
            return details
        try:
            with open(log_file, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        last = f"; last log line: {lines[-1][:300]}" if lines else ""
        return f"{details} (log: {log_file}){last}"

    def cancel(self, job_id: str) -> None:
        pid = self.pid(job_id)
        if pid is None:
            return
        threading.Thread(target=self._stop, args=(job_id, pid), name=f"stop-{job_id}", daemon=True).start()

    def _stop(self, job_id: str, pid: int) -> None:
        """SIGTERM the job's process group, SIGKILL it after the grace period."""
        _signal_group(pid, signal.SIGTERM)
        with self._lock:
            proc = self._procs.get(job_id)
        try:
            if proc is not None:
                proc.wait(timeout=self.stop_grace_s)
            else:
                _wait_gone(pid, self.stop_grace_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(pid, signal.SIGKILL)
        if proc is not None:
            proc.wait()

    def prune(self, keep_s: float) -> int:
        """Forget the jobs that finished ``keep_s`` seconds ago or more (their log's last write),
        then delete the pid files and logs of jobs no longer running not written since then."""
        cutoff = time.time() - keep_s
        with self._lock:
            done = [
                job_id
                for job_id, proc in self._procs.items()
                if proc.poll() is not None and _mtime(self._logs.get(job_id)) < cutoff
            ]
            for job_id in done:
                del self._procs[job_id]
                self._logs.pop(job_id, None)
            running = [job_id for job_id, proc in self._procs.items() if proc.poll() is None]
            running_logs = {self._logs[job_id].resolve() for job_id in running if job_id in self._logs}
        removed = len(done)
        for pid_file in _old_files(self.data_dir / "jobs", "*.pid", 0):
            pid = self.pid(pid_file.stem)
            if pid is not None:
                running_logs.add(_stdout_of(pid))
            elif _mtime(pid_file) < cutoff:
                removed += _unlink(pid_file)
        for log_file in _old_files(self.data_dir / "logs", "*.log", cutoff):
            if log_file.resolve() not in running_logs:
                removed += _unlink(log_file)
        removed += self._prune_job_dirs()
        if removed:
            log.info("housekeeping removed %d finished local jobs' entries and files", removed)
        return removed

    def _prune_job_dirs(self) -> int:
        """Delete the temporary directories of jobs no longer running (Spark's shuffle files among
        them: nothing there outlives its job); a young one may belong to a job being started."""
        removed = 0
        for tmp in _old_files(self.data_dir / "tmp", "*", time.time() - TMP_GRACE_S):
            if self.pid(tmp.name) is None:
                self.job_user.remove(tmp)
                removed += 1
        return removed

    def close(self) -> None:
        """Stop every job started here, and wait (boundedly) for them to go."""
        with self._lock:
            procs = dict(self._procs)
        for proc in procs.values():
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        for job_id, proc in procs.items():
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                log.warning("job %s did not stop on SIGTERM; killing it", job_id)
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            self.job_user.remove(self.data_dir / "tmp" / job_id)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int, job_id: str) -> bool:
    """True if ``pid`` runs and is this job (its environment names the job id)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"SERVERLESS_EMR_JOB_ID={job_id}".encode() in environ


def _mtime(path: Path | None) -> float:
    """When ``path`` was last written (0: it is gone, or there is none)."""
    try:
        return path.stat().st_mtime if path is not None else 0.0
    except OSError:
        return 0.0


def _old_files(directory: Path, pattern: str, cutoff: float) -> list[Path]:
    """The files of ``directory`` matching ``pattern`` last written before ``cutoff`` (0: all)."""
    try:
        found = list(directory.glob(pattern))
    except OSError:
        return []
    return [path for path in found if not cutoff or _mtime(path) < cutoff]


def _stdout_of(pid: int) -> Path:
    """The file a running job writes its output to (its log), as the kernel knows it."""
    try:
        return Path(os.readlink(f"/proc/{pid}/fd/1")).resolve()
    except OSError:
        return Path()


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.warning("cannot delete %s: %s", path, exc)
        return 0


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
