"""A Hive Metastore (Thrift) server: the catalog of a local datasource's Spark jobs.

It runs from the jars PySpark ships (Hive 2.3's metastore with an embedded Derby database), as a
child process on a free port of the loopback address. The jobs of its datasource connect to it
(``spark.sql.catalogImplementation=hive``, ``hive.metastore.uris``), so databases, tables, views
and partitions created by one session are seen by the others and survive restarts. Each local
datasource has its own (:mod:`async_query.embedded.catalogs`).

It runs as the job user (:mod:`async_query.security.job_user`): it creates and drops the table
directories its jobs fill, so it owns what they own, its Derby database included; its log and pid
file are the service's, in a directory of the service's (``files``), where the job user cannot
replace them with links to files of the service's. Where the job user cannot pass to what it needs
(Java, Spark's jars, its home), it runs in a private view (:mod:`async_query.security.views`).

What matters:

- Hive 2.3's own entry point listens on every interface and has no authentication short of
  Kerberos: the metastore is started by ``LoopbackMetastore.java`` instead (compiled at start by
  the Janino compiler in Spark's jars), Hive's same server bound to 127.0.0.1, which refuses a
  connection whose socket belongs to another user than its own (the job user's jobs) and root
  (the service). See docs/security.md, "What listens where".
- Hive switches log4j to its asynchronous context selector unless told otherwise, and PySpark
  does not ship the LMAX disruptor that selector needs: ``hive.async.log.enabled=false``.
- Beside Hive's Thrift port, the metastore answers the catalog read model's bulk reads of a
  database's tables on a loopback port of its own, to callers that hold the token the service
  gave it (``MetastoreTables.java``, compiled as it starts; docs/catalog.md). A metastore whose
  bulk reads cannot start serves without them.
- Its Thrift port is on its command line, which every local user can read, seconds before it binds
  it: another user may bind it first. So it is ready when a socket of its own user listens on its
  port (:mod:`query_core.peer`), never when merely something does; a metastore
  that found its port taken (and exited) is started again on another port, a few times at most.
  The service's own clients (the catalog reader, the bulk reads) check their peer's user too
  before they send anything (docs/security.md, "What listens where").
- Its JVM starts from a class archive of the classes it loads (recorded in its home by a metastore
  that stops on SIGTERM while there is none, adopted by the service:
  :mod:`async_query.embedded.archive`): about 1 CPU-s less per start.
- Derby allows one process per database. A metastore left behind by a crashed service would hold
  the lock, so the pid of each metastore is recorded and a leftover one is stopped before a new one
  starts; on Linux the child also gets SIGTERM when the thread that started it ends
  (``PR_SET_PDEATHSIG``): start metastores from a thread that lives as long as the service.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from async_query.catalog.bulk import TablesEndpoint
from async_query.embedded.archive import RECORDS, ChildArchive
from async_query.embedded.java import JANINO_MAIN, place_source, pyspark_jars
from async_query.security import views
from async_query.security.job_user import JobUser, JobUserError
from async_query.security.job_user import find_java as _find_java
from query_core.errors import AsyncQueryError
from query_core.peer import listener_owners, listens_as

log = logging.getLogger(__name__)

#: Hive's own entry point (a metastore of an earlier version of the service was started by it).
MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
#: The metastore's start here: Hive's server bound to the loopback address, answering its own user
#: and root only (``LoopbackMetastore.java``; docs/security.md, "What listens where").
LOOPBACK_SOURCE = "LoopbackMetastore.java"
LOOPBACK_CLASS = "asyncquery.jvm.LoopbackMetastore"
TABLES_SOURCE = "MetastoreTables.java"
#: How long the metastore may take to listen (a first start creates the schema: ~5 s).
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
#: A metastore recording its class archive writes it as it stops: some seconds more, once.
RECORDING_GRACE_S = 60.0
#: The exit codes of a JVM that stopped on its own or on SIGTERM (after its shutdown hooks).
STOPPED_CLEANLY = (0, 128 + signal.SIGTERM)
#: The warm-up's time limit of one call.
WARMUP_CALL_TIMEOUT_S = 60.0
#: How many times a metastore whose port another user took first is started on another one.
PORT_ATTEMPTS = 3
#: A catalog smaller than the warm-up is read at most this many times over (its cold listing is
#: short: what it needs warming is the first calls' class loading, not the JIT's peak).
WARMUP_PASSES = 5


class MetastoreError(AsyncQueryError):
    """The embedded metastore could not be started."""


def find_java() -> str:
    try:
        return _find_java()
    except JobUserError as exc:
        raise MetastoreError(f"the embedded metastore: {exc.message}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class _Launch:
    """What a metastore is launched with."""

    home: Path
    warehouse: str
    heap_mb: int
    user: JobUser
    files: Path
    #: Its JVM's class archive (:mod:`async_query.embedded.archive`; None: none kept).
    archive: ChildArchive | None = None

    def view(self) -> views.View:
        """What the metastore sees where the job user cannot pass: Java, Spark's jars (and the
        class archive of them), its home and its warehouse (:mod:`async_query.security.views`)."""
        reads = [Path(os.path.realpath(find_java())).parent.parent, pyspark_jars()]
        if self.archive is not None and self.archive.path.exists():
            reads.append(self.archive.path)
        writes = [self.home]
        if self.warehouse.startswith("file:"):
            writes.append(Path(urllib.parse.urlparse(self.warehouse).path))
        return views.plan_view(self.user, reads, writes)


def metastore_archive(directory: Path) -> ChildArchive:
    """The class archive of a metastore's JVM (running from Spark's jars), kept in ``directory``."""
    return ChildArchive(directory, "hive-metastore", sorted(pyspark_jars().glob("*.jar")))


class Metastore:
    """One running metastore; :meth:`start` it, read :attr:`uri`, :meth:`close` it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        port: int,
        home: Path,
        launched: float,
        files: Path | None = None,
        tables: TablesEndpoint | None = None,
        launch: _Launch | None = None,
    ) -> None:
        self.proc = proc
        self.port = port
        #: The uid its sockets must belong to (its user's); and how it was launched (to start it
        #: again on another port).
        self.owner = launch.user.uid if launch is not None else os.geteuid()
        self._launch = launch
        #: Where it answers bulk reads of tables (None: it does not).
        self.tables = tables
        #: Its Derby home (the database is ``metastore_db`` in it).
        self.home = home
        #: Where its log (``metastore.log``) and pid file (``metastore.pid``) are.
        self.files = files or home
        self.launched = launched
        #: Seconds from launch until it accepted connections.
        self.started_s = 0.0
        #: Its JVM's class archive, and whether the JVM records it (as it stops).
        self.archive = launch.archive if launch is not None else None
        self.recording = False

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.files / "metastore.log"

    @classmethod
    def start(
        cls,
        home: Path,
        warehouse: Path | str,
        heap_mb: int = 512,
        *,
        user: JobUser | None = None,
        files: Path | None = None,
        class_archive: Path | None = None,
    ) -> Metastore:
        """Start the metastore and wait until it accepts connections (see :meth:`launch`)."""
        metastore = cls.launch(home, warehouse, heap_mb, user=user, files=files, class_archive=class_archive)
        metastore.wait_ready()
        return metastore

    @classmethod
    def launch(
        cls,
        home: Path,
        warehouse: Path | str,
        heap_mb: int = 512,
        *,
        user: JobUser | None = None,
        files: Path | None = None,
        bulk_reads: bool = True,
        class_archive: Path | None = None,
    ) -> Metastore:
        """Launch the metastore whose database lives in ``home`` and whose default database's
        tables go under ``warehouse`` (a path, made if missing, or a URI), as ``user`` (default:
        the job user, :meth:`JobUser.resolve`), without waiting for it (other start-up work can go
        on meanwhile). ``home`` and a ``warehouse`` path become ``user``'s; its log and pid file
        go in ``files`` (default: ``home``, which only a metastore of the service's own user may
        use). Its JVM starts from the class archive kept in ``class_archive`` (the service's
        directory), or records it there as it stops when there is none. Call from the thread that
        lives as long as the service: on Linux the child is stopped when that thread ends."""
        user = user or JobUser.resolve()
        home = user.own(home.resolve())
        if files is None:
            if user.switches:
                raise MetastoreError("a metastore run as the job user keeps its log and pid file apart: name files")
            files = home
        files = files.resolve()
        files.mkdir(parents=True, exist_ok=True, mode=0o700)
        if isinstance(warehouse, Path):
            warehouse = user.own(warehouse.resolve()).as_uri()
        _stop_leftover(home, files)
        archive = metastore_archive(class_archive) if class_archive is not None else None
        launch = _Launch(home, warehouse, heap_mb, user, files, archive)
        return cls._spawn(launch, bulk_reads)

    @classmethod
    def _spawn(cls, launch: _Launch, bulk_reads: bool, port: int | None = None) -> Metastore:
        home, files = launch.home, launch.files
        port = port or free_port()
        cmd = [
            find_java(),
            f"-Xmx{launch.heap_mb}m",
            *(launch.archive.java_options(home) if launch.archive is not None else []),
            "-cp",
            f"{pyspark_jars()}/*",
            "-Dhive.async.log.enabled=false",
            f"-Djavax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
            "-Ddatanucleus.schema.autoCreateAll=true",
            "-Dhive.metastore.schema.verification=false",
            f"-Dhive.metastore.warehouse.dir={launch.warehouse}",
            f"-Dderby.system.home={home}",
        ]
        cmd += [JANINO_MAIN, str(place_source(home, LOOPBACK_SOURCE, launch.user)), LOOPBACK_CLASS, str(port)]
        env = dict(os.environ)
        tables = None
        if bulk_reads:
            tables = TablesEndpoint(free_port(), secrets.token_urlsafe(24), owner=launch.user.uid)
            cmd.append(str(_place_source(home, launch.user)))
            env.update(ASYNC_QUERY_TABLES_PORT=str(tables.port), ASYNC_QUERY_TABLES_TOKEN=tables.token)
        out = os.open(
            files / "metastore.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            proc = views.spawn(
                cmd,
                launch.user,
                view=launch.view(),
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                die_with_parent=signal.SIGTERM,
            )
        except (OSError, JobUserError) as exc:
            raise MetastoreError(f"cannot start the metastore ({cmd[0]}): {exc}") from exc
        finally:
            os.close(out)
        (files / "metastore.pid").write_text(str(proc.pid))
        started = cls(proc, port, home, time.monotonic(), files, tables, launch)
        started.recording = any(option.startswith(RECORDS) for option in cmd)
        return started

    def wait_ready(self) -> None:
        """Return once the metastore accepts connections; raise (and stop it) if it cannot. Its
        bulk reads start before it listens: where they did not, it serves without them."""
        self._wait_listening(self.launched)
        if self.tables is not None and not listens_as(self.tables.port, self.owner):
            log.warning("the metastore serves without its bulk reads%s", self._last_log_line())
            self.tables = None
        self.started_s = time.monotonic() - self.launched
        log.info("metastore at %s (started in %.1f s; log %s)", self.uri, self.started_s, self.log_path)

    def _wait_listening(self, began: float) -> None:
        attempts = 1
        while time.monotonic() - began < START_TIMEOUT_S:
            code = self.proc.poll()
            if code is not None and attempts < PORT_ATTEMPTS and self._port_taken():
                attempts += 1
                self._start_elsewhere()
                continue
            if code is not None:
                raise MetastoreError(f"the metastore exited with code {code} at start-up{self._last_log_line()}")
            if listens_as(self.port, self.owner):
                return
            time.sleep(0.1)
        self.close()
        raise MetastoreError(f"the metastore did not listen within {START_TIMEOUT_S:.0f} s{self._last_log_line()}")

    def _port_taken(self) -> bool:
        """Whether a socket of another user than the metastore's listens on its port."""
        return bool(listener_owners(self.port) - {self.owner})

    def _start_elsewhere(self) -> None:
        """Launch it again on another port: another user bound its port before it could."""
        log.warning(
            "the metastore's port %d was taken by another user's socket; starting it on another port", self.port
        )
        if self._launch is None:
            raise MetastoreError(f"the metastore's port {self.port} was taken by another user's socket")
        again = self._spawn(self._launch, self.tables is not None)
        self.proc, self.port, self.tables = again.proc, again.port, again.tables

    def warm_up(self, tables: int) -> int:
        """Exercise the metastore's table reads ``tables`` times in all, as a cold SHOW TABLE
        EXTENDED reads them (the bulk reads where it has them, else Thrift's batched calls), over
        the first tables it holds (read again, at most :data:`WARMUP_PASSES` times, where it holds
        fewer): a fresh JVM answers its first listing several times slower than a warmed one
        (class loading and the JIT compiling the paths), so the warm-up takes that cost off the
        first browse. Nothing fetched is kept. Returns how many tables were fetched; gives up
        quietly on any error (the metastore is then no colder than without)."""
        from async_query.catalog.readers import CatalogUnavailableError, HiveMetastoreReader

        reader = HiveMetastoreReader(self.uri, WARMUP_CALL_TIMEOUT_S, bulk=self.tables, owner=self.owner)
        fetched = 0
        try:
            listings = [(database, reader.table_names(database) or []) for database in reader.databases()]
            limit = min(tables, WARMUP_PASSES * sum(len(names) for _, names in listings))
            while fetched < limit and self.proc.poll() is None:
                for database, names in listings:
                    part = names[: limit - fetched]
                    if part:
                        reader.tables(database, part)
                        fetched += len(part)
                    if fetched >= limit:
                        break
        except (CatalogUnavailableError, LookupError, OSError) as exc:
            log.info("metastore warm-up stopped after %d tables: %s", fetched, exc)
        finally:
            reader.close()
        return fetched

    def problem(self) -> str | None:
        """The health check: None while it runs and listens (a socket of its own user on its port),
        else what is wrong."""
        code = self.proc.poll()
        if code is not None:
            return f"the metastore exited with code {code}"
        owners = listener_owners(self.port)
        if owners == {self.owner}:
            return None
        if owners:
            return f"port {self.port} of the metastore is held by another user's socket (uid {sorted(owners - {self.owner})})"
        return f"the metastore does not listen on port {self.port}"

    def _last_log_line(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        errors = [line for line in lines if "ERROR" in line or "Exception" in line]
        shown = (errors or lines or [""])[-1].strip()[:300]
        return f" (log: {self.log_path}; {shown})" if shown else f" (log: {self.log_path})"

    def close(self) -> None:
        """Stop the metastore (SIGTERM, then SIGKILL after a grace period); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_GRACE_S + (RECORDING_GRACE_S if self.recording else 0.0))
            except subprocess.TimeoutExpired:
                log.warning("metastore did not stop on SIGTERM; killing it")
                self.proc.kill()
                self.proc.wait()
        try:
            (self.files / "metastore.pid").unlink()
        except OSError:
            pass
        if self.archive is not None and self.proc.returncode in STOPPED_CLEANLY:
            self.archive.adopt(self.home, self.owner)


def _place_source(home: Path, owner: JobUser) -> Path:
    """The bulk reads' source, placed in the metastore's home."""
    return place_source(home, TABLES_SOURCE, owner)


def _stop_leftover(home: Path, files: Path) -> None:
    """Stop a metastore of this ``home`` left running by a service that did not stop cleanly."""
    try:
        pid = int((files / "metastore.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if not any(name.encode() in cmdline for name in (MAIN_CLASS, LOOPBACK_CLASS)) or str(home).encode() not in cmdline:
        return
    log.warning("stopping a metastore left running by an earlier service (pid %d)", pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if not _running(pid):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: a process that has exited is gone once reaped, and until then a
    zombie (state ``Z``), which holds no file and no lock any more (its parent, alive but not the
    one stopping it, reaps it when it likes)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ")"
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])
