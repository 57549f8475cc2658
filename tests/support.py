"""Helpers shared by the test tiers (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from argon2 import PasswordHasher
from opensearchpy import OpenSearch

from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.security.proxies import SERVER_OPTIONS
from query_core.models import FlintIndexStateDoc, SessionDoc, StatementDoc, Versioned, now_millis
from query_core.states import SessionState
from query_core.store import DocumentRepository, IndexClient, Store

T = TypeVar("T")


D = TypeVar("D", StatementDoc, SessionDoc, FlintIndexStateDoc)

#: argon2id at its least cost, for the users files of tests about what follows a password check
#: (accepted, refused, cached, audited), not about the check's cost: a check reads its parameters
#: from the hash, so these users are checked in microseconds instead of 0.1 s each. Unknown names
#: are still checked against the product's own dummy hash, at full cost.
FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


def seed(store: Store, doc: D) -> Versioned[D]:
    """Write ``doc`` as it stands, in whatever state: a document another process (a job, another
    plugin) left behind. The product itself creates documents in their initial states only."""
    repo: DocumentRepository[Any] = (
        store.statements if isinstance(doc, StatementDoc) else store.sessions if isinstance(doc, SessionDoc) else store.index_states
    )
    version = store.index.create(repo.index_for(doc.data_source_name), repo.doc_id(doc), doc.to_source(), recheck=True)
    return Versioned(doc, version.seq_no, version.primary_term)


def job_beats(store: Store, session: Versioned[SessionDoc], age_ms: int = 0, **fields: Any) -> Versioned[SessionDoc]:
    """A heartbeat of ``session`` as its job writes it, ``age_ms`` in the past, carrying ``fields``
    (running statements, interval...). A session not started yet is claimed first, as the job does
    when it starts (under the job run the plugin launched)."""
    if session.doc.state == SessionState.NOT_STARTED:
        claimed = store.sessions.claim(session, session.doc.job_id)
        assert claimed is not None, f"session {session.doc.session_id} is gone"
        session = claimed
    beaten = store.sessions.beat(session, at=now_millis() - age_ms, **fields)
    assert beaten is not None, f"session {session.doc.session_id} is gone"
    return beaten


def client_of(store: Store) -> IndexClient:
    """The cluster client under ``store``, for tests that look at the index server itself."""
    assert isinstance(store.index, IndexClient), "this test needs an index server, not the in-memory twin"
    return store.index


def driver(store: Store) -> OpenSearch:
    """opensearch-py itself, for tests that read what the server holds (``_version``, stats)."""
    return client_of(store).driver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: :func:`wait_for` without an interval polls first after this long, then each time half as long
#: again, up to :data:`POLL_MAX_S`: a condition met at once is seen at once, and a long wait (a
#: Spark job's) asks a few times a second rather than twenty. Each poll of a running query costs a
#: request of the service and a read of the node, and the run is bound by CPU (bench/README.md).
POLL_FIRST_S = 0.05
POLL_MAX_S = 0.25


def wait_for(
    probe: Callable[[], T | None], timeout: float = 30.0, interval: float | None = None, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout`` seconds; every
    ``interval`` seconds when given (a race that wants tight polling), else ever less often (see
    :data:`POLL_FIRST_S`)."""
    deadline = time.monotonic() + timeout
    pause = POLL_FIRST_S if interval is None else interval
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(pause)
        if interval is None:
            pause = min(pause * 1.5, POLL_MAX_S)


@dataclass
class RecordingLauncher(Launcher):
    """A launcher that starts nothing: it records requests and reports a chosen job state.

    For tests of the plugin's own logic; tests of real jobs use ``LocalLauncher``.
    """

    application_id: str = "test-app"
    state: JobRunState = JobRunState.RUNNING
    started: list[JobRequest] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    described: list[str] = field(default_factory=list)

    def start(self, request: JobRequest) -> str:
        self.started.append(request)
        return f"job-{len(self.started)}"

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def describe(self, job_id: str) -> JobDescription:
        self.described.append(job_id)
        return JobDescription(job_id, self.state)


class _PromptServer(uvicorn.Server):
    """uvicorn's server, whose main loop wakes as soon as it is told to exit (:meth:`stop`) instead
    of at its next 0.1 s tick, and whose shutdown skips the pause for open connections to finish
    when there are none (else it is uvicorn's own)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections or self.server_state.tasks or self.force_exit:
            await super().shutdown(sockets)
            return
        # uvicorn's shutdown, less its fixed 0.1 s pause for open connections to finish: none is open
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()

    def stop(self) -> None:
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone
                loop.call_soon_threadsafe(wake.set)


@contextmanager
def serve_http(app: object, **options: Any) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port in a thread (``options``: more of
    ``uvicorn.Config``'s; without them, as ``serve`` runs it: no proxy headers believed but those
    the app's settings trust); yields its base URL."""
    port = free_port()
    options = {**SERVER_OPTIONS, **options}
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **options)  # type: ignore[arg-type]
    server = _PromptServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), timeout=10, interval=0.002, what="uvicorn to start")
    if not server.started:
        raise RuntimeError("uvicorn did not start (its error is logged above)")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        thread.join(timeout=10)


class StandInStream:
    """Plays a streaming job's side of the stop protocol, without Spark: it watches the index's
    state document by id, and ends its session ``dead`` once the document leaves ``refreshing``
    (as the job does after stopping its stream between micro-batches). ``responsive=False``
    plays a job that never answers (hung, or cut off from the index)."""

    def __init__(
        self, store: Store, datasource: str, session_id: str, latest_id: str, responsive: bool = True
    ) -> None:
        self.store = store
        self.datasource = datasource
        self.session_id = session_id
        self.latest_id = latest_id
        self.responsive = responsive
        self.stopped = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stand-in-stream", daemon=True)

    def __enter__(self) -> StandInStream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from query_core.states import FlintIndexState, SessionState

        while not self._done.wait(0.05):
            state = self.store.index_states.get(self.datasource, self.latest_id)
            if state is None or state.doc.state == FlintIndexState.REFRESHING or not self.responsive:
                continue
            session = self.store.sessions.get(self.datasource, self.session_id)
            if session is not None:
                self.store.sessions.end(session, SessionState.DEAD)
            self.stopped.set()
            return


@dataclass(frozen=True)
class ClusterUser:
    password: str
    #: ``backend_roles`` of authinfo (from the authentication backend: internal users, LDAP groups...).
    backend_roles: tuple[str, ...] = ()
    #: ``roles`` of authinfo: the security roles the plugin's role mapping gave the user.
    roles: tuple[str, ...] = ()


class SecurityPluginStandIn:
    """Plays the one endpoint of the OpenSearch security plugin that ``cluster`` authentication
    calls, ``GET /_plugins/_security/authinfo``, over real HTTP on a loopback port.

    Known HTTP Basic credentials get the plugin's reply (the fields of its ``SecurityInfoAction``);
    anything else gets what the plugin answers then: 401 ``Unauthorized`` with its Basic challenge.
    ``calls`` counts the authinfo requests, ``headers`` keeps every request's headers.
    """

    def __init__(self, users: dict[str, ClusterUser]) -> None:
        self.users = users
        self.calls = 0
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stand_in._answer(self)

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="security-stand-in", daemon=True
        )

    def __enter__(self) -> SecurityPluginStandIn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.headers.append({k.lower(): v for k, v in handler.headers.items()})
        if handler.path.split("?", 1)[0] != "/_plugins/_security/authinfo":
            self._send(handler, 404, b'{"error":"no handler found"}', {})
            return
        with self._lock:
            self.calls += 1
        name = self._authenticated(handler.headers.get("Authorization", ""))
        if name is None:
            self._send(handler, 401, b"Unauthorized", {"WWW-Authenticate": 'Basic realm="OpenSearch Security"'})
            return
        user = self.users[name]
        client = handler.client_address
        info = {
            "user": f"User [name={name}, backend_roles=[{', '.join(user.backend_roles)}], requestedTenant=null]",
            "user_name": name,
            "user_requested_tenant": None,
            "remote_address": f"{client[0]}:{client[1]}",
            "backend_roles": list(user.backend_roles),
            "custom_attribute_names": [],
            "roles": list(user.roles),
            "tenants": {"global_tenant": True, name: True},
            "principal": None,
            "peer_certificates": "0",
            "sso_logout_url": None,
        }
        self._send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json; charset=UTF-8"})

    def _authenticated(self, header: str) -> str | None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except ValueError:
            return None
        user = self.users.get(name)
        return name if user is not None and user.password == password else None

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(body)


class Listener:
    """A listening socket that counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def mapped_files(pid: int) -> str:
    """The files process ``pid`` and its children map (``/proc/<pid>/maps``): a JVM started
    through a private view may be the child of the process started."""
    pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    return "".join(Path(f"/proc/{one}/maps").read_text() for one in pids)


def java_instance(spark: Any, source: str, class_name: str, parent: Any = None) -> Any:
    """An instance of ``class_name`` compiled from the Java ``source`` in ``spark``'s JVM with the
    Janino compiler Spark ships, as the job's helpers are (flint_repl_job/jvm); it sees the classes
    of the class loader ``parent`` when one is given."""
    compiler = spark._jvm.org.codehaus.janino.SimpleCompiler()
    if parent is not None:
        compiler.setParentClassLoader(parent)
    compiler.cook(source)
    return compiler.getClassLoader().loadClass(class_name).newInstance()
