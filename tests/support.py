"""Helpers shared by the test tiers (fixtures live in conftest.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import uvicorn

from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher

T = TypeVar("T")


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
