"""Helpers shared by the test tiers (fixtures live in conftest.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import uvicorn
from opensearchpy import OpenSearch

from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from query_core.models import FlintIndexStateDoc, SessionDoc, StatementDoc, Versioned
from query_core.store import DocumentRepository, IndexClient, Store

T = TypeVar("T")


D = TypeVar("D", StatementDoc, SessionDoc, FlintIndexStateDoc)


def seed(store: Store, doc: D) -> Versioned[D]:
    """Write ``doc`` as it stands, in whatever state: a document another process (a job, another
    plugin) left behind. The product itself creates documents in their initial states only."""
    repo: DocumentRepository[Any] = (
        store.statements if isinstance(doc, StatementDoc) else store.sessions if isinstance(doc, SessionDoc) else store.index_states
    )
    version = store.index.create(repo.index_for(doc.data_source_name), repo.doc_id(doc), doc.to_source(), recheck=True)
    return Versioned(doc, version.seq_no, version.primary_term)


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


def wait_for(
    probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


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


@contextmanager
def serve_http(app: object) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=10, what="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
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
                self.store.sessions.update(session, SessionState.DEAD)
            self.stopped.set()
            return
