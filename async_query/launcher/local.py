"""Runs each session's job with a local ``spark-submit``, as a child process group.

The command is an argument list (no shell), the query text never appears on it (the job reads
statements from the index), and the password travels in the environment, not in ``--conf``. The
job's environment is not the service's: only what Spark, Java and Python need to run, the ids EMR
Serverless would set, and the index credentials the job itself needs (docs/datasources.md).
Spark's output goes to ``<data_dir>/logs/<session id>.log``. Each job's pid is recorded in
``<data_dir>/jobs/<job id>.pid`` so that a restarted plugin can still describe and stop it.
Housekeeping prunes both (:meth:`LocalLauncher.prune`): files of jobs no longer running, not
written for ``job_files_retention_days``, go, and so do the launcher's entries of jobs that
finished that long ago.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from async_query.datasources import Datasource
from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.launcher.class_archive import ClassArchive
from query_core.errors import LauncherError
from query_core.jobconf import (
    APPLICATION_ID_ENV,
    ENTRY_FILE_NAME,
    JOB_ID_ENV,
    PASSWORD_ENV,
    PASSWORD_KEY,
    WARMUP_FILE_NAME,
    job_package_dir,
    key_of,
)

log = logging.getLogger(__name__)

#: How long a cancelled job gets to stop on SIGTERM before it is killed (by default; the setting
#: ``local_job_stop_grace_s``).
STOP_GRACE_S = 5.0
ENTRY_FILE = job_package_dir() / ENTRY_FILE_NAME
WARMUP_FILE = ENTRY_FILE.with_name(WARMUP_FILE_NAME)
#: Environment variables a job inherits from the service, by name and by prefix: what Spark, Java,
#: Python, Hadoop clients and TLS need to run, and where AWS is (never a credential).
INHERITED_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "LANG",
        "LANGUAGE",
        "JAVA_HOME",
        "PYTHONPATH",
        "HADOOP_HOME",
        "HADOOP_CONF_DIR",
        "YARN_CONF_DIR",
        "KUBECONFIG",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_CA_BUNDLE",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    }
)
INHERITED_PREFIXES = ("LC_", "SPARK_", "AWS_ENDPOINT_URL")
#: AWS credentials in the environment: only a job that signs its index requests (SigV4) gets them.
AWS_CREDENTIALS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
AUTH_KEY = key_of("auth")


def job_environment(request: JobRequest, job_id: str, application_id: str, service: Mapping[str, str]) -> dict[str, str]:
    """The environment of ``request``'s job, from the service's own ``service``: the inherited
    variables, the ids EMR Serverless sets, Python and Spark settings, the basic-auth password
    when the job has one, and AWS credentials when it signs with SigV4."""
    env = {k: v for k, v in service.items() if k in INHERITED_ENV or k.startswith(INHERITED_PREFIXES)}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP=env.get("SPARK_LOCAL_IP", "127.0.0.1"),
        TZ="UTC",
    )
    env[APPLICATION_ID_ENV] = application_id
    env[JOB_ID_ENV] = job_id
    password = request.secret_conf.get(PASSWORD_KEY)
    if password:
        env[PASSWORD_ENV] = password
    if request.conf.get(AUTH_KEY) == "sigv4":
        env.update({k: service[k] for k in AWS_CREDENTIALS_ENV if k in service})
    return env


def find_spark_submit(configured: str = "") -> str:
    """The ``spark-submit`` to use: the configured one, else pyspark's beside this interpreter."""
    if configured:
        return configured
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if found:
        return found
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def catalog_settings(warehouse: Path, metastore_uri: str = "") -> dict[str, str]:
    """Spark conf of the local catalog: the shared metastore at ``metastore_uri``, or without one
    Spark's in-memory catalog (each job its own, forgotten when it ends)."""
    conf = {"spark.sql.warehouse.dir": warehouse.resolve().as_uri()}
    if metastore_uri:
        conf.update({"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": metastore_uri})
    else:
        conf["spark.sql.catalogImplementation"] = "in-memory"
    return conf


class LocalLauncher(Launcher):
    application_id = "local"
    describe_is_free = True
    kind = "local"
    call_names: ClassVar[dict[str, str]] = {"start": "start", "describe": "describe", "cancel": "kill"}
    #: Streams keep their checkpoints under the data directory unless their index names a place.
    checkpoint_mandatory = False

    def __init__(
        self,
        data_dir: Path,
        cluster_name: str,
        spark_master: str = "local[*]",
        spark_submit: str = "",
        catalog_conf: dict[str, str] | None = None,
        *,
        java_options: str = "",
        class_archive: Path | None = None,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.cluster_name = cluster_name
        #: The master of datasources that name none (``properties.master``).
        self.spark_master = spark_master
        self.spark_submit = find_spark_submit(spark_submit)
        #: The catalog every job gets unless its datasource's Spark conf says otherwise.
        self.catalog_conf = catalog_conf if catalog_conf is not None else catalog_settings(self.data_dir / "warehouse")
        self.checkpoint_root = str(self.data_dir / "checkpoints")
        self.warehouse_root = self.catalog_conf.get("spark.sql.warehouse.dir", "")
        #: JVM options of every job's driver (``local_job_java_options``).
        self.java_options = java_options.split()
        #: The class-data sharing archive of the jobs' JVM (:mod:`.class_archive`), under
        #: ``<data_dir>/jvm`` unless another (shared) directory is named.
        self.class_archive = ClassArchive(class_archive or self.data_dir / "jvm")
        #: How long a cancelled job gets to stop on SIGTERM before its process group is killed.
        self.stop_grace_s = stop_grace_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Path] = {}
        self._lock = threading.Lock()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "jobs").mkdir(parents=True, exist_ok=True)

    def catalog_conf_for(self, datasource: Datasource) -> dict[str, str]:
        return dict(self.catalog_conf)

    def master(self, request: JobRequest) -> str:
        return request.datasource.properties.get("master") or self.spark_master

    def command(self, request: JobRequest, java_options: list[str] | None = None) -> list[str]:
        cmd = [self.spark_submit, "--master", self.master(request), "--name", request.job_name(self.cluster_name)]
        options = [*self.java_options, *(java_options or [])]
        if options:
            cmd += ["--driver-java-options", " ".join(_quoted(option) for option in options)]
        for key, value in {**self.catalog_conf, **request.conf}.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--conf", "spark.ui.enabled=false", str(ENTRY_FILE), request.result_index]
        return cmd

    def log_path(self, session_id: str) -> Path:
        return self.data_dir / "logs" / f"{session_id}.log"

    def start(self, request: JobRequest) -> str:
        job_id = "local-" + secrets.token_hex(8)
        env = job_environment(request, job_id, self.application_id, os.environ)
        archive = self.class_archive.java_options(self._start_warmup)
        try:
            with open(self.log_path(request.session_id), "ab") as out:
                proc = subprocess.Popen(
                    self.command(request, archive),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    cwd=self.data_dir,
                )
        except OSError as exc:
            raise LauncherError(f"cannot start spark-submit ({self.spark_submit}): {exc}") from exc
        with self._lock:
            self._procs[job_id] = proc
            self._logs[job_id] = self.log_path(request.session_id)
        self._pid_file(job_id).write_text(str(proc.pid))
        log.info("started job %s (pid %d) for session %s", job_id, proc.pid, request.session_id)
        return job_id

    def _start_warmup(self, java_options: list[str], log_file: Path) -> subprocess.Popen[bytes]:
        """The warm-up run that records the class archive (:mod:`.class_archive`)."""
        options = " ".join(_quoted(option) for option in [*self.java_options, *java_options])
        cmd = [self.spark_submit, "--master", "local[1]", "--driver-java-options", options]
        for key, value in self.catalog_conf.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--conf", "spark.ui.enabled=false", str(WARMUP_FILE)]
        env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV or k.startswith(INHERITED_PREFIXES)}
        env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TZ="UTC")
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with open(log_file, "ab") as out:
            return subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.data_dir
            )

    def _pid_file(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / f"{job_id}.pid"

    def _pid(self, job_id: str) -> int | None:
        with self._lock:
            proc = self._procs.get(job_id)
        if proc is not None:
            return proc.pid if proc.poll() is None else None
        try:
            pid = int(self._pid_file(job_id).read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid, job_id) else None

    def describe(self, job_id: str) -> JobDescription:
        with self._lock:
            proc = self._procs.get(job_id)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return JobDescription(job_id, JobRunState.RUNNING)
            state = JobRunState.SUCCESS if code == 0 else JobRunState.FAILED
            return JobDescription(job_id, state, self._exit_details(job_id, code))
        if self._pid(job_id) is not None:
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
        pid = self._pid(job_id)
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
            pid = self._pid(pid_file.stem)
            if pid is not None:
                running_logs.add(_stdout_of(pid))
            elif _mtime(pid_file) < cutoff:
                removed += _unlink(pid_file)
        for log_file in _old_files(self.data_dir / "logs", "*.log", cutoff):
            if log_file.resolve() not in running_logs:
                removed += _unlink(log_file)
        if removed:
            log.info("housekeeping removed %d finished local jobs' entries and files", removed)
        return removed

    def check(self) -> str | None:
        """``spark-submit`` is there and may be run."""
        if not os.access(self.spark_submit, os.X_OK):
            return f"spark-submit is missing or not executable: {self.spark_submit}"
        return None

    def close(self) -> None:
        """Stop every job this launcher started, and wait (boundedly) for them to go."""
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


def _quoted(option: str) -> str:
    """A JVM option as ``--driver-java-options`` splits them: on spaces, double quotes grouping."""
    return f'"{option}"' if any(c.isspace() for c in option) else option


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
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
