"""The heartbeat's extension (a streaming session's own interval and fields), on the in-memory index."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import RunningQuery
from flint_repl_job.heartbeat import Heartbeat
from query_core.models import SessionDoc, StatementProgress, StreamProgress, Versioned
from query_core.store import Store

CFG = JobConfig(
    session_id="s-1",
    datasource="lake",
    result_index="r",
    request_index="q",
    heartbeat_running_ms=100,
    heartbeat_idle_ms=5_000,
    heartbeat_streaming_ms=10_000,
)


class Host:
    """A runner's side of the heartbeat over the in-memory twin of the index."""

    def __init__(self) -> None:
        self.cfg = CFG
        self.store = Store.in_memory().bound_to(CFG.request_index)
        self.store.sessions.create(SessionDoc(session_id="s-1", data_source_name="lake"))
        self.executor = self
        self.stop_event = threading.Event()
        self.running: RunningQuery | None = None
        self.running_since = 0
        self.failed: list[str] = []

    def progress(self, query_id: str) -> StatementProgress:
        return StatementProgress()

    def read_session(self) -> Versioned[SessionDoc] | None:
        return self.store.sessions.get("lake", "s-1")

    def session(self) -> SessionDoc:
        found = self.read_session()
        assert found is not None
        return found.doc

    def check_owner(self, session: SessionDoc) -> None:
        pass

    def fail(self, reason: str) -> None:
        self.failed.append(reason)


class Stream:
    def __init__(self, fail: bool = False) -> None:
        self.active = True
        self.fail = fail
        self.batch = 0

    def beat_interval_ms(self) -> int | None:
        return CFG.heartbeat_streaming_ms if self.active else None

    def beat_fields(self) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("py4j: Answer from Java side is empty")
        return {"stream_progress": StreamProgress(index_name="i", batch_id=self.batch)} if self.active else {}


def test_without_an_extension_a_beat_is_as_before() -> None:
    host = Host()
    beat = Heartbeat(host)
    assert beat.interval_ms() == CFG.heartbeat_idle_ms
    beat.beat()
    session = host.session()
    assert beat.writes == 1 and session.heartbeat_interval_millis == CFG.heartbeat_idle_ms
    assert session.stream_progress is None


def test_a_stream_sets_the_quiet_interval_and_rides_on_each_beat() -> None:
    host, stream = Host(), Stream()
    beat = Heartbeat(host, extension=stream)
    assert beat.interval_ms() == CFG.heartbeat_streaming_ms
    seen = []
    for batch in (3, 9):
        stream.batch = batch
        beat.beat()
        session = host.session()
        assert session.stream_progress is not None
        seen.append((session.stream_progress.batch_id, session.heartbeat_interval_millis))
    assert seen == [(3, CFG.heartbeat_streaming_ms), (9, CFG.heartbeat_streaming_ms)]
    assert beat.writes == 2

    # A statement running takes the short interval; a stream gone, the idle one.
    host.running = RunningQuery("q-1", Future())
    assert beat.interval_ms() == CFG.heartbeat_running_ms
    host.running, stream.active = None, False
    beat.beat()
    assert beat.interval_ms() == CFG.heartbeat_idle_ms
    assert host.session().heartbeat_interval_millis == CFG.heartbeat_idle_ms


def test_a_failing_extension_does_not_stop_the_beat() -> None:
    host = Host()
    beat = Heartbeat(host, extension=Stream(fail=True))
    beat.beat()
    session = host.session()
    assert beat.writes == 1 and session.stream_progress is None
    assert session.heartbeat_interval_millis == CFG.heartbeat_streaming_ms
    assert host.failed == []
