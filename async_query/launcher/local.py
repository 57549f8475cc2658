"""Runs each session's job with a local ``spark-submit``, as a child process group.

The command is an argument list (no shell), the query text never appears on it (the job reads
statements from the index), and secrets never do: the index password travels in the environment,
a datasource's confidential Spark conf (docs/datasources.md) in a properties file of the job's own.
The job's environment is not the service's: only what Spark, Java and Python need to run, the ids
EMR Serverless would set, and the index credentials the job itself needs (docs/datasources.md).

Jobs run as the job user (:mod:`async_query.security.job_user`; never as root unless a setting
says so), with a umask of 077 and Hadoop's own umask at 077, so what Spark writes is 0600 in 0700
directories. Each job has a temporary directory of its own, ``<data_dir>/tmp/<job id>`` (its
``TMPDIR``, Java's temporary directory, Spark's local directories, Hive's scratch directories),
removed once the job has ended. Its catalog is its datasource's own
(:mod:`async_query.embedded.catalogs`).

Spark's output goes to ``<data_dir>/logs/<session id>.log``. Each job's pid is recorded in
``<data_dir>/jobs/<job id>.pid`` so that a restarted plugin can still describe and stop it.
Housekeeping prunes both (:meth:`LocalJobs.prune <async_query.launcher.local_jobs.LocalJobs.prune>`): files of jobs no longer running, not
written for ``job_files_retention_days``, go, and so do the launcher's entries of jobs that
finished that long ago.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from async_query import datasource_dialect as dialect
from async_query.catalog.bulk import TablesEndpoint
from async_query.datasources import Datasource
from async_query.embedded.catalogs import LocalCatalogs, catalog_settings
from async_query.launcher.base import JobDescription, JobRequest, Launcher
from async_query.launcher.class_archive import ClassArchive
from async_query.launcher.job_process import JobProcesses
from async_query.launcher.local_jobs import LocalJobs
from async_query.security import views
from async_query.security.files import private_dir
from async_query.security.job_user import JobPython, JobUser, JobUserError, job_python
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

#: A second wall behind the statement check, in every local job's JVMs: XML parsers fetch no
#: external DTD, schema or stylesheet (``xpath_string('<!DOCTYPE a SYSTEM "http://...">...')``
#: otherwise made the job connect anywhere and expand the entities it fetched; docs/security.md).
XML_WALL = (
    "-Djavax.xml.accessExternalDTD=",
    "-Djavax.xml.accessExternalSchema=",
    "-Djavax.xml.accessExternalStylesheet=",
)
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
#: Masters whose driver makes the job's RPC secret itself: ``local``, ``local[N]``, ``local[*]``,
#: ``local[N,F]``, ``local-cluster[...]``.
LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?|local-cluster\[[^\]]*\]")
#: The daemon of a local job's Python workers (``flint_repl_job/worker_daemon.py``).
DAEMON_MODULE_KEY = "spark.python.daemon.module"
WORKER_DAEMON = "flint_repl_job.worker_daemon"

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

__all__ = ["LocalLauncher", "catalog_settings", "job_environment"]


def job_environment(
    request: JobRequest, job_id: str, application_id: str, service: Mapping[str, str]
) -> dict[str, str]:
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


def pyspark_home() -> str:
    """Where pyspark is installed: the ``SPARK_HOME`` of its ``spark-submit`` (else that script
    runs Python to find it, with the job's environment)."""
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


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


def job_files_conf(tmp: Path) -> dict[str, str]:
    """Spark conf of a job's own files: its local and scratch directories in its temporary
    directory, and Hadoop's umask at 077 (Hadoop sets the modes of the files it writes itself, by
    default 0644 whatever the process's umask)."""
    return {
        "spark.local.dir": str(tmp / "spark"),
        "spark.hadoop.fs.permissions.umask-mode": "077",
        "spark.hadoop.hive.exec.scratchdir": str(tmp / "hive"),
        "spark.hadoop.hive.exec.local.scratchdir": str(tmp / "hive-local"),
        "spark.hadoop.hive.downloaded.resources.dir": str(tmp / "hive-resources"),
    }


def properties_text(conf: Mapping[str, str]) -> str:
    """``conf`` as a Java properties file, UTF-8 (what ``spark-submit --properties-file`` reads)."""

    def escaped(text: str, key: bool) -> str:
        out = []
        for i, char in enumerate(text):
            if char == "\\":
                out.append("\\\\")
            elif char in "\n\r\t\f":
                out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[char])
            elif (key and char in "=: #!") or (char == " " and i == 0):
                out.append("\\" + char)
            else:
                out.append(char)
        return "".join(out)

    return "".join(f"{escaped(key, True)}={escaped(value, False)}\n" for key, value in conf.items())


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
        class_archive_cache: Path | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        catalogs: LocalCatalogs | None = None,
        job_user: JobUser | None = None,
        python: str = "",
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.cluster_name = cluster_name
        #: The master of datasources that name none (``properties.master``).
        self.spark_master = spark_master
        self.spark_submit = find_spark_submit(spark_submit)
        #: Who jobs run as, and the Python they run (raises JobUserError: root, or unreachable).
        self.job_user = job_user or (catalogs.user if catalogs is not None else JobUser.resolve())
        self.python: JobPython = job_python(python)
        #: How their processes start (as that user, in a private view where it needs one).
        self.processes = JobProcesses(self.job_user, self.python, self.spark_submit, None if spark_submit else pyspark_home())
        #: Each datasource's catalog (by default Spark's in-memory one, per job, in its own warehouse).
        self.catalogs = catalogs or LocalCatalogs(self.data_dir, self.job_user, metastores=False)
        #: One catalog for every datasource's jobs instead, when given (a deployment's own metastore).
        self.shared_catalog = catalog_conf
        legacy = self.catalogs.place("local")
        self.checkpoint_root = str(legacy.checkpoints.resolve())
        self.warehouse_root = (catalog_conf or {}).get("spark.sql.warehouse.dir") or legacy.warehouse.resolve().as_uri()
        #: JVM options of every job's driver (``local_job_java_options``).
        self.java_options = java_options.split()
        #: The class-data sharing archive of the jobs' JVM (:mod:`.class_archive`): in the directory
        #: named, else the installation's (:func:`usable_cache`), else ``<data_dir>/jvm``; the job
        #: user records it.
        archive_dir = class_archive or usable_cache(self.job_user, class_archive_cache) or self.data_dir / "jvm"
        if class_archive is None or not archive_dir.exists():
            self.job_user.own(archive_dir)
        self.class_archive = ClassArchive(archive_dir, log_file=self.data_dir / "logs" / "class-archive.log", warmup=WARMUP_FILE)
        #: Whether the job user may record the class archive there (through its view where it needs one).
        self._archive_recordable = views.reaches(self.job_user, archive_dir, 7)
        if not self._archive_recordable and not self.class_archive.path.exists():
            log.warning(
                "the job user %s cannot write the class archive's directory %s: local jobs start "
                "without an archive, at about twice the CPU (docs/job.md)",
                self.job_user.name,
                archive_dir,
            )
        #: How long a cancelled job gets to stop on SIGTERM before its process group is killed.
        self.stop_grace_s = stop_grace_s
        #: The jobs' processes (started here, or found again by their pid files).
        self.jobs = LocalJobs(self.data_dir, self.job_user, stop_grace_s)
        private_dir(self.data_dir / "logs")
        private_dir(self.data_dir / "jobs")
        self.job_user.pass_through(self.data_dir / "tmp")

    def warehouse_of(self, datasource: Datasource) -> str:
        if self.shared_catalog is not None:
            return self.warehouse_root
        return self.catalogs.warehouse_of(datasource)

    def checkpoints_of(self, datasource: Datasource) -> str:
        return self.catalogs.checkpoints_of(datasource)

    def catalog_conf(self, datasource: Datasource) -> dict[str, str]:
        """The Spark conf of the datasource's catalog (its metastore is started if need be)."""
        if self.shared_catalog is not None:
            self.catalogs.prepared(datasource.name)
            return dict(self.shared_catalog)
        return self.catalogs.conf(datasource)

    def catalog_conf_for(self, datasource: Datasource) -> dict[str, str]:
        return self.catalog_conf(datasource)

    def tables_endpoint(self, metastore_uri: str) -> TablesEndpoint | None:
        return self.catalogs.tables_endpoint(metastore_uri)

    def metastore_owner(self, metastore_uri: str) -> int | None:
        return self.catalogs.owner_of(metastore_uri)

    def master(self, request: JobRequest) -> str:
        return self.master_of(request.datasource)

    def master_of(self, datasource: Datasource) -> str:
        return datasource.properties.get("master") or self.spark_master

    def startup_settings(self, datasource: Datasource) -> dict[str, str]:
        """The master and the catalog: jobs of datasources that differ in either never share a
        warm pool."""
        return {"master": self.master_of(datasource), **self.catalog_conf(datasource)}

    def command(
        self,
        request: JobRequest,
        java_options: list[str] | None = None,
        *,
        tmp: Path | None = None,
        properties_file: Path | None = None,
    ) -> list[str]:
        """The ``spark-submit`` command of ``request``'s job; with its temporary directory ``tmp``,
        its files go there; confidential conf keys are left to ``properties_file``."""
        cmd = [self.spark_submit, "--master", self.master(request), "--name", request.job_name(self.cluster_name)]
        options = [*XML_WALL, *self.java_options, *(java_options or [])]
        if tmp is not None:
            options.append(f"-Djava.io.tmpdir={tmp}")
        if options:
            cmd += ["--driver-java-options", " ".join(_quoted(option) for option in options)]
        if properties_file is not None:
            cmd += ["--properties-file", str(properties_file)]
        for key, value in self._conf(request, tmp).items():
            if not dialect.holds_credential(key, value):
                cmd += ["--conf", f"{key}={value}"]
        cmd += [*_listening_conf(self.master(request)), str(ENTRY_FILE), request.result_index]
        return cmd

    def _conf(self, request: JobRequest, tmp: Path | None) -> dict[str, str]:
        """The catalog's conf, the request's over it, the job's own files' over both."""
        conf = {**self.catalog_conf(request.datasource), **request.conf}
        executors = conf.get(EXECUTOR_JAVA_OPTIONS, "")  # on a cluster, the executors' JVMs too
        conf[EXECUTOR_JAVA_OPTIONS] = " ".join([*XML_WALL, *([executors] if executors else [])])
        if tmp is not None:
            conf.update(job_files_conf(tmp))
        if self.python.path:
            # Executors of a cluster on this machine run the same Python, and need the same path.
            conf["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(self.python.path)
        if LOCAL_MASTER.fullmatch(self.master(request)):
            # Workers that import the installed, compiled PySpark (docs/job.md): where this
            # project's modules are known to be on the workers' path.
            conf[DAEMON_MODULE_KEY] = WORKER_DAEMON
        return conf

    def log_path(self, session_id: str) -> Path:
        return self.data_dir / "logs" / f"{session_id}.log"

    def start(self, request: JobRequest) -> str:
        problem = self.processes.problem(self._places(self.data_dir / "tmp", None))
        if problem:
            raise JobUserError(f"cannot start a local job: {problem}")
        job_id = "local-" + secrets.token_hex(8)
        tmp = self._job_dir(job_id)
        conf = self._conf(request, tmp)
        secret = {key: value for key, value in conf.items() if dialect.holds_credential(key, value)}
        properties = tmp / "spark-secret.properties" if secret else None
        if properties is not None:
            fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(properties_text(secret))
        self._hand_over(tmp)
        env = {**job_environment(request, job_id, self.application_id, os.environ), **self.processes.environment(tmp)}
        archive = self.class_archive.java_options(self._warmup if self._archive_recordable else None)
        command = self.command(request, archive, tmp=tmp, properties_file=properties)
        try:
            proc = self.processes.spawn(command, env, tmp, self.log_path(request.session_id), self._places(tmp, request.datasource))
        except OSError as exc:
            self.job_user.remove(tmp)
            raise LauncherError(f"cannot start spark-submit ({self.spark_submit}): {exc}") from exc
        self.jobs.add(job_id, proc, self.log_path(request.session_id))
        log.info(
            "started job %s (pid %d) as %s for session %s", job_id, proc.pid, self.job_user.name, request.session_id
        )
        return job_id

    def _job_dir(self, name: str) -> Path:
        """A new temporary directory for a job (made by the service, handed to the job user
        once its files are in: :meth:`_hand_over`)."""
        tmp = self.data_dir / "tmp" / name
        tmp.mkdir(mode=0o700)
        return tmp

    def _hand_over(self, tmp: Path) -> None:
        if self.job_user.switches:
            for path in [*tmp.iterdir(), tmp]:
                os.chown(path, self.job_user.uid, self.job_user.gid, follow_symlinks=False)

    def _places(self, tmp: Path, datasource: Datasource | None) -> list[Path]:
        """Where a job writes: its own directory, the class archive's, and its datasource's
        warehouse and checkpoints (no other datasource's: what its private view shows)."""
        places = [tmp, self.class_archive.directory]
        if datasource is not None:
            warehouse = self.warehouse_of(datasource)
            places.append(Path(self.checkpoints_of(datasource)))
            if warehouse.startswith("file:") or "://" not in warehouse:
                places.append(Path(urllib.parse.urlparse(warehouse).path))
        return places

    def record_class_archive(self) -> bool:
        """Record the jobs' class archive now unless there is one, and wait for it: True when jobs
        start from an archive. For a start that can wait the half minute, so that no job starts
        without it (the tests' first Spark job)."""
        if not self._archive_recordable:
            return self.class_archive.path.exists()
        return self.class_archive.record_now(self._warmup)

    def _warmup(self, java_options: list[str], log_file: Path) -> subprocess.Popen[bytes]:
        """Start the warm-up that records the class archive (:mod:`.class_archive`). It uses a
        catalog of its own (Spark's in-memory one, in its temporary directory) and adopts its
        recording itself: it needs nothing of the service's, which may stop before it ends."""
        tmp = self._job_dir(f"warmup-{secrets.token_hex(4)}")
        self._hand_over(tmp)
        options = " ".join(_quoted(o) for o in [*self.java_options, *java_options, f"-Djava.io.tmpdir={tmp}"])
        cmd = [self.spark_submit, "--master", "local[1]", "--driver-java-options", options]
        for key, value in {**catalog_settings(tmp / "warehouse"), **job_files_conf(tmp)}.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += [*_listening_conf("local[1]"), str(WARMUP_FILE)]
        cmd = adopting(cmd, java_options, self.class_archive.path)
        env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV or k.startswith(INHERITED_PREFIXES)}
        env.update(TZ="UTC", **self.processes.environment(tmp))
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return self.processes.spawn(cmd, env, tmp, log_file, self._places(tmp, None))

    def describe(self, job_id: str) -> JobDescription:
        return self.jobs.describe(job_id)

    def live_jobs(self) -> list[str]:
        """The local jobs running now (their ids), whichever plugin process started them."""
        return self.jobs.live()

    def cancel(self, job_id: str) -> None:
        self.jobs.cancel(job_id)

    def prune(self, keep_s: float) -> int:
        return self.jobs.prune(keep_s)

    def close(self) -> None:
        """Stop every job this launcher started, and wait (boundedly) for them to go."""
        self.jobs.close()

    def check(self) -> str | None:
        """``spark-submit`` is there and the job user may run it, and reach its places."""
        if not os.access(self.spark_submit, os.X_OK):
            return f"spark-submit is missing or not executable: {self.spark_submit}"
        return self.processes.problem(self._places(self.data_dir / "tmp", None))



#: Runs the warm-up (``"$@"``), then, when it exits cleanly having written its recording, puts the
#: recording in the archive's place: the archive is adopted even if the service stopped meanwhile.
ADOPT_SCRIPT = 'rec=$1; final=$2; shift 2; "$@" || exit $?; [ -s "$rec" ] && mv -f "$rec" "$final"'


def adopting(command: list[str], java_options: list[str], archive: Path) -> list[str]:
    """``command`` (the warm-up's) run so that it adopts the recording it makes (named in
    ``java_options``) as ``archive`` itself."""
    prefix = "-XX:ArchiveClassesAtExit="
    recording = next((o[len(prefix) :] for o in java_options if o.startswith(prefix)), None)
    if recording is None:
        return command
    return ["/bin/sh", "-c", ADOPT_SCRIPT, "sh", recording, str(archive), *command]


def usable_cache(user: JobUser, cache: Path | None) -> Path | None:
    """``cache`` (the installation's directory for the class archive, shared by every data
    directory) when the job ``user`` can have it: it is missing or that user's, and the jobs reach
    it, directly or through a private view this machine can make (else None: the archive is kept
    in the data directory, as a data directory's own)."""
    if cache is None or (cache.exists() and not views.reaches(user, cache, 7)):
        return None
    if views.veil_of(user, os.path.realpath(cache)) is not None:
        try:
            views.available()
        except views.ViewUnavailableError:
            return None
    return cache


def _listening_conf(master: str) -> list[str]:
    """What a job's ports answer (docs/security.md, "What listens where"): no web UI; and on a local
    master, Spark's RPC and block transfers only with the secret Spark makes for the job itself
    (``spark.authenticate``; on a cluster's master the cluster's own secret applies, the
    datasource's to set). They listen on the loopback address (``SPARK_LOCAL_IP``)."""
    conf = ["--conf", "spark.ui.enabled=false"]
    if LOCAL_MASTER.fullmatch(master):
        conf += ["--conf", "spark.authenticate=true"]
    return conf


def _quoted(option: str) -> str:
    """A JVM option as ``--driver-java-options`` splits them: on spaces, double quotes grouping."""
    return f'"{option}"' if any(c.isspace() for c in option) else option
