"""The embedded index: one real OpenSearch 2.19 node, a child process of the service.

Without ``OPENSEARCH_URL`` the service keeps its queries, sessions and results in an OpenSearch node
of its own: a JVM started from OpenSearch's jars (resolved once into a cache:
:mod:`async_query.embedded.node_jars`) by ``IndexNode.java``, its data under ``<data_dir>/index``,
bound to the loopback address, a single node (no replicas, so every index is green; disk
watermarks in absolute sizes that fit a laptop). Durability is the engine's own: a write is
acknowledged once it is in the shard's translog on disk (``index.translog.durability: request``,
OpenSearch's default), so kill -9 of everything loses nothing acknowledged. ``docs/durability.md``.

Who may use it: every HTTP request must carry a credential generated at each start (basic
authentication, user ``async-query``), checked inside the node before any handler runs; the node's
transport port takes no request from another process. The credential reaches the node as one line
on its standard input (never a command line, file or environment) and the service's jobs in their
environment. Where the service runs as root the node runs as the index user
(:mod:`async_query.security.accounts`), in a private view where that user cannot pass to what it
needs (:mod:`async_query.security.views`). docs/security.md ("The embedded index").

The node stops when its standard input closes (the service stopped it) and is killed with the
service (``PR_SET_PDEATHSIG``); one that dies under a running service is started again on the same
port with the same credential, so the service and its jobs ride it out.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from async_query.embedded.archive import ChildArchive
from async_query.embedded.java import JANINO_MAIN, janino_classpath, place_source, write_file_for
from async_query.embedded.node_jars import NodeJars
from async_query.security import views
from async_query.security.job_user import JobUser, JobUserError, find_java
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError
from query_core.peer import checked_transport

log = logging.getLogger(__name__)

#: The user name of the embedded index's credential.
INDEX_USER = "async-query"
SOURCE = "IndexNode.java"
MAIN_CLASS = "asyncquery.jvm.IndexNode"
#: How long the node may take to bring its shards up (a first start, a large translog to replay).
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
#: A node that died is started again after this long, and again (doubling) while it keeps dying.
RESTART_BACKOFF_S = (1.0, 30.0)
#: Environment variables the node inherits: what Java needs, no secret of the service's.
NODE_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "JAVA_HOME", "JAVA_TOOL_OPTIONS")


class IndexStartError(AsyncQueryError):
    """The embedded index could not be started."""


@dataclass(frozen=True)
class IndexCredential:
    """What a client of the embedded index must send (basic authentication)."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def generate(cls) -> IndexCredential:
        return cls(INDEX_USER, secrets.token_urlsafe(32))

    def header(self) -> str:
        """The ``Authorization`` header's value."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


@dataclass(frozen=True)
class NodeOptions:
    """How the node runs (from :class:`async_query.settings.Settings`)."""

    heap_mb: int = 512
    #: The user it runs as (None: the service's own).
    user: JobUser | None = None
    #: Extra JVM options (the tests' quick-start JIT, say).
    java_options: tuple[str, ...] = ()
    #: Disk watermarks: free space below which shards stop being placed, then move, then indexes
    #: turn read-only (absolute sizes: a laptop's disk, not a server's percentage).
    watermarks: tuple[str, str, str] = ("1gb", "512mb", "256mb")
    #: Where the node's class archive is kept (the service's directory, shared by its data
    #: directories; :mod:`async_query.embedded.archive`); None: the node starts without one.
    class_archive: Path | None = None


def node_archive(jars: NodeJars, options: NodeOptions) -> ChildArchive | None:
    """The class archive of a node running from ``jars`` with ``options`` (None: none kept)."""
    if options.class_archive is None:
        return None
    classpath = [*sorted(jars.directory.glob("*.jar")), *map(Path, janino_classpath())]
    return ChildArchive(options.class_archive, "opensearch-node", classpath)


class EmbeddedIndex:
    """The running node serving ``directory``; :attr:`url` is the one to hand out, with
    :attr:`credential` (:meth:`config` makes a connection of both)."""

    def __init__(self, directory: Path, jars: NodeJars, options: NodeOptions, credential: IndexCredential, port: int) -> None:
        self.directory = directory
        self.jars = jars
        self.options = options
        self.credential = credential
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.transport_port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        #: How many times the node was started again after it died.
        self.restarts = 0
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.archive = node_archive(jars, options)

    @property
    def auth(self) -> tuple[str, str]:
        """(user, password), as HTTP clients take basic authentication."""
        return self.credential.username, self.credential.password

    def config(self, **overrides: Any) -> OpenSearchConfig:
        """A connection to this index (``overrides``: other :class:`OpenSearchConfig` fields)."""
        return OpenSearchConfig(**{**overrides, **self.connection_fields()})

    @property
    def peer_uid(self) -> int:
        """The uid the node runs as, which its listener belongs to: every client checks it before
        sending the credential (:mod:`query_core.peer`; docs/security.md)."""
        return self.options.user.uid if self.options.user is not None else os.geteuid()

    def connection_fields(self) -> dict[str, Any]:
        """The :class:`OpenSearchConfig` fields that reach this index: URL, credential, and the
        uid its listener must belong to."""
        return {
            "url": self.url,
            "auth": "basic",
            "username": self.credential.username,
            "password": self.credential.password,
            "peer_uid": self.peer_uid,
        }

    def _http(self, timeout: float) -> httpx.Client:
        """A client of the node for its start: each connection checked, as the service's are."""
        return httpx.Client(
            base_url=self.url,
            auth=self.auth,
            timeout=timeout,
            transport=checked_transport(httpx.HTTPTransport(), self.peer_uid),
            trust_env=False,
        )

    @classmethod
    def start(
        cls,
        directory: Path,
        jars: NodeJars,
        options: NodeOptions | None = None,
        *,
        port: int = 0,
        credential: IndexCredential | None = None,
        watch: bool = True,
    ) -> EmbeddedIndex:
        """Start the node on ``directory`` and return once its shards are up. ``port`` 0 takes a
        free one; a fixed port and the previous ``credential`` let clients keep theirs. With
        ``watch``, a node that dies is started again (:meth:`close` ends that)."""
        directory = directory.resolve()
        credential = credential or IndexCredential.generate()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            node = cls(directory, jars, options or NodeOptions(), credential, port or _free_port())
            node._prepare()
            began = time.monotonic()
            node._launch()
            try:
                node._wait_ready(began)
                break
            except IndexStartError as exc:
                # A port found free was taken before the node bound it (another process's listener,
                # or an outgoing connection's local port): ports of our choosing are chosen again.
                if port or attempt == PORT_ATTEMPTS or "BindException" not in str(exc):
                    raise
                log.warning("embedded index: a port was taken before the node bound it; trying others")
        node._settle()
        log.info("embedded index: OpenSearch at %s (%s) ready in %.1f s", node.url, directory, time.monotonic() - began)
        if watch:
            node._watcher = threading.Thread(target=node._watch, name="index-watch", daemon=True)
            node._watcher.start()
        return node

    # -- start --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """The node's directory (its user's, 0700), its settings and its source, written by the
        service into it; a node left running on it by an earlier service is stopped first."""
        user = self.options.user
        if user is not None:
            user.own(self.directory)
        else:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _stop_leftover(self.directory)
        for sub in ("data", "logs", "tmp", "config"):
            (self.directory / sub).mkdir(exist_ok=True, mode=0o700)
            if user is not None and user.switches:
                os.chown(self.directory / sub, user.uid, user.gid, follow_symlinks=False)
        owner = user or JobUser.resolve(str(os.geteuid()))
        place_source(self.directory, SOURCE, owner)
        write_file_for(self.directory / "node.yml", self._settings(), owner)

    def _settings(self) -> str:
        low, high, flood = self.options.watermarks
        lines = {
            "cluster.name": "async-query",
            "node.name": "embedded",
            "path.data": str(self.directory / "data"),
            "path.logs": str(self.directory / "logs"),
            "network.host": "127.0.0.1",
            "http.port": str(self.port),
            # Netty's, with the credential checked on each request's head (IndexNode.java).
            "http.type": "asyncquery-guarded",
            "transport.port": str(self.transport_port),
            "discovery.type": "single-node",
            "cluster.routing.allocation.disk.watermark.low": low,
            "cluster.routing.allocation.disk.watermark.high": high,
            "cluster.routing.allocation.disk.watermark.flood_stage": flood,
            "action.destructive_requires_name": "true",
        }
        return "".join(f"{key}: {_yaml(value)}\n" for key, value in lines.items())

    def command(self) -> list[str]:
        java = [
            find_java(),
            f"-Xms{self.options.heap_mb}m",
            f"-Xmx{self.options.heap_mb}m",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Djava.io.tmpdir={self.directory / 'tmp'}",
            "-Dfile.encoding=UTF-8",
            "-Dlog4j2.disable.jmx=true",
            "-Dopensearch.index.max_number_of_shards_per_index=1024",
            *self.options.java_options,
            *(self.archive.java_options(self.directory / "tmp") if self.archive is not None else []),
            "-cp",
            os.pathsep.join([self.jars.classpath, *janino_classpath()]),
        ]
        return [*java, JANINO_MAIN, str(self.directory / SOURCE), MAIN_CLASS, str(self.directory), str(self.directory / "node.yml")]

    def _launch(self) -> None:
        user = self.options.user or JobUser.resolve(str(os.geteuid()))
        java_home = Path(os.path.realpath(find_java())).parent.parent
        reads = [self.jars.directory, java_home, *map(Path, janino_classpath())]
        if self.archive is not None and self.archive.path.exists():
            reads.append(self.archive.path)
        view = views.plan_view(user, reads, [self.directory])
        try:
            views.check(user, view, reads)
        except JobUserError as exc:
            raise IndexStartError(f"cannot start the embedded index: {exc.message}") from exc
        out = os.open(self._log_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            self.process = views.spawn(
                self.command(),
                user,
                view=view,
                cwd=self.directory,
                env={k: v for k, v in os.environ.items() if k in NODE_ENV},
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                die_with_parent=signal.SIGKILL,
                ignore_stop_signals=True,
            )
        except (OSError, JobUserError) as exc:
            raise IndexStartError(f"cannot start the embedded index: {exc}") from exc
        finally:
            os.close(out)
        _pid_file(self.directory).write_text(str(self.process.pid))
        assert self.process.stdin is not None
        try:  # the credential's one way in
            self.process.stdin.write((self.credential.header() + "\n").encode())
            self.process.stdin.flush()
        except OSError:
            pass  # it exited already: the wait says why

    def _log_path(self) -> Path:
        """The node's output: ``<directory>.log`` beside its directory, a file of the service's."""
        return self.directory.with_name(self.directory.name + ".log")

    def _wait_ready(self, began: float) -> None:
        """Return once every primary shard is active (the node answers yellow or green); raise
        with the node's own reason if it does not within :data:`START_TIMEOUT_S`."""
        status = "no answer"
        with self._http(5) as client:
            while time.monotonic() - began < START_TIMEOUT_S:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise IndexStartError(f"the embedded index exited with code {self.process.returncode} at start{self._last_lines()}")
                try:
                    reply = client.get("/_cluster/health", params={"wait_for_status": "yellow", "timeout": "1s"})
                    status = str(reply.json().get("status", reply.status_code))
                    if reply.status_code == 200:
                        return
                except (httpx.HTTPError, ValueError) as exc:
                    status = str(exc) or type(exc).__name__  # the last failure, for the error below
                time.sleep(0.2)
            reason = _unassigned_reason(client)
        self.kill()
        raise IndexStartError(
            f"the embedded index did not come up within {START_TIMEOUT_S:.0f} s (health {status}{reason}){self._last_lines()}"
        )

    def _settle(self) -> None:
        """What a single node needs, applied at each start: no replica for an index that names
        none (a cluster setting, kept in its state), and none for an index that has one already
        (made elsewhere, or before): every index green, none waiting for a second node."""
        with self._http(30) as client:
            reply = client.put("/_cluster/settings", json={"persistent": {"cluster.default_number_of_replicas": 0}})
            if reply.status_code != 200:
                raise IndexStartError(f"the embedded index refused its cluster settings: {reply.status_code} {reply.text[:300]}")
            settings = client.get("/_all/_settings/index.number_of_replicas,index.auto_expand_replicas", params={"expand_wildcards": "all"})
            for name, entry in (settings.json() if settings.status_code == 200 else {}).items():
                index = entry.get("settings", {}).get("index", {})
                if index.get("number_of_replicas", "0") != "0" and index.get("auto_expand_replicas", "false") == "false":
                    log.info("embedded index: %s had replicas, which one node cannot place; it has none now", name)
                    client.put(f"/{name}/_settings", json={"index": {"number_of_replicas": 0}})

    def _last_lines(self) -> str:
        try:
            lines = [line for line in self._log_path().read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        shown = [line for line in lines if "ERROR" in line or "Exception" in line] or lines
        return f" (log: {self._log_path()}; {shown[-1].strip()[:300]})" if shown else f" (log: {self._log_path()})"

    # -- watch, stop --------------------------------------------------------------------------

    def _watch(self) -> None:
        """Start the node again whenever it dies under a running service."""
        backoff = RESTART_BACKOFF_S[0]
        while not self._closing.is_set():
            process = self.process
            assert process is not None
            code = process.wait()
            if self._closing.is_set():
                return
            log.error("the embedded index exited with code %s; starting it again%s", code, self._last_lines())
            if self._closing.wait(backoff):
                return
            try:
                with self._lock:
                    if self._closing.is_set():
                        return
                    self._launch()
                self._wait_ready(time.monotonic())
                self.restarts += 1
                backoff = RESTART_BACKOFF_S[0]
                log.info("embedded index: started again at %s", self.url)
            except AsyncQueryError as exc:
                log.error("%s", exc)
                backoff = min(backoff * 2, RESTART_BACKOFF_S[1])

    def close(self) -> None:
        """Stop the node (its standard input closed: it closes its shards and exits); every write
        it acknowledged is already durable. Idempotent."""
        self._closing.set()
        with self._lock:
            process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.closed:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("the embedded index did not stop in %.0f s; killing it", STOP_TIMEOUT_S)
            process.kill()
            process.wait()
        _pid_file(self.directory).unlink(missing_ok=True)
        if process.returncode == 0 and self.archive is not None:
            self.archive.adopt(self.directory / "tmp", self.peer_uid)

    def kill(self) -> None:
        """SIGKILL the node, as a crash would (tests; the watcher starts it again unless closed)."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _unassigned_reason(client: httpx.Client) -> str:
    """Why a shard is not placed, as the node explains it (empty: it cannot say)."""
    try:
        explained = client.get("/_cluster/allocation/explain").json()
    except (httpx.HTTPError, ValueError):
        return ""
    detail = explained.get("allocate_explanation") or explained.get("unassigned_info", {}).get("details", "")
    return f"; {explained.get('index', '')}: {str(detail)[:300]}" if detail else ""


#: Starts of a node whose ports were taken before it bound them (see :meth:`EmbeddedIndex.start`).
PORT_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _yaml(value: str) -> str:
    """A YAML scalar, quoted (paths may hold anything)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pid_file(directory: Path) -> Path:
    """The node's pid: ``<directory>.pid`` beside its directory, a file of the service's."""
    return directory.with_name(directory.name + ".pid")


def _stop_leftover(directory: Path) -> None:
    """Stop a node of ``directory`` left running by a service that did not stop it (it holds the
    data's lock)."""
    try:
        pid = int(_pid_file(directory).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if MAIN_CLASS.encode() not in cmdline or str(directory).encode() not in cmdline:
        return
    log.warning("stopping an embedded index left running by an earlier service (pid %d)", pid)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
        if stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"]):
            return
        time.sleep(0.1)
