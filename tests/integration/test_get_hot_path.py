"""GET's hot path on a real index server: the lean real-time read and its fall-backs, the session
cache (the statement is never answered stale; the session at most ``session_cache_ms`` old, and
never older than this process's own write), and a confirmed-running suspect trusted for an
interval."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from query_core.config import OpenSearchConfig
from query_core.errors import IndexUnavailableError
from query_core.models import RunningStatement, StatementProgress, now_millis
from query_core.realtime import ReadNotServed, RealtimeReader
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import index_config
from tests.support import RecordingLauncher, client_of, driver

# -- the lean reader --------------------------------------------------------------------------


def test_the_lean_reader_answers_as_the_driver_does(store: Store, index_url: str) -> None:
    store.index.create("lean-read", "a", {"type": "x", "n": 1})
    reader = RealtimeReader(index_config(index_url))
    found = reader.get("lean-read", "a")
    through_driver = driver(store).get(index="lean-read", id="a")
    assert found is not None
    assert {k: found[k] for k in ("_id", "_source", "_seq_no", "_primary_term", "found")} == {
        k: through_driver[k] for k in ("_id", "_source", "_seq_no", "_primary_term", "found")
    }
    assert reader.get("lean-read", "missing") is None
    assert reader.get("no-such-index", "a") is None
    first = reader._local.sock
    assert first is not None, "the connection is kept alive after a read"
    for _ in range(3):
        reader.get("lean-read", "a")
    assert reader._local.sock is first, "the same connection serves the next reads"
    reader.close()


@contextmanager
def fake_server(reply: bytes | None) -> Iterator[tuple[str, list[int]]]:
    """A loopback server that answers every request with ``reply`` (None: never answers; b"":
    closes at once). Yields its URL and a list counting the connections it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            if reply is None:
                held.append(conn)  # silent: keep it open, say nothing
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize(
    "reply",
    [b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", b"", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n[1]"],
    ids=["status", "closed", "not-a-document"],
)
def test_a_reply_the_lean_reader_cannot_vouch_for_is_read_again_through_the_driver(
    store: Store, reply: bytes
) -> None:
    store.index.create("lean-read", "a", {"type": "x", "n": 2})
    with fake_server(reply) as (url, accepted):
        lean = RealtimeReader(OpenSearchConfig(url=url))
        with pytest.raises(ReadNotServed):
            lean.get("lean-read", "a")
        # The store's lean reader (a fresh one: its own connection) talks to the fake; its driver
        # to the index server.
        client_of(store)._reader = RealtimeReader(OpenSearchConfig(url=url))
        found = store.index.get("lean-read", "a")
    assert found is not None and found.source == {"type": "x", "n": 2}
    assert len(accepted) == 2


def test_a_lean_read_that_times_out_is_retried_by_the_policy_not_read_again_at_once(store: Store) -> None:
    with fake_server(None) as (url, accepted):
        silent = OpenSearchConfig(url=url, request_timeout=0.3, retry_attempts=2, retry_seconds=5)
        slow = Store.connect(silent)
        try:
            with pytest.raises(IndexUnavailableError):
                slow.index.get("lean-read", "a")
        finally:
            slow.close()
    # Two attempts of the policy, each one lean read that timed out: no driver read after a timeout.
    assert len(accepted) == 2


def test_an_event_loop_read_that_times_out_is_a_503_not_a_second_wait() -> None:
    with fake_server(None) as (url, accepted):
        silent = Store.connect(OpenSearchConfig(url=url, request_timeout=0.3, retry_attempts=3, retry_seconds=5))
        try:
            with pytest.raises(IndexUnavailableError):
                asyncio.run(silent.statement_and_session_async("local", "a"))
        finally:
            silent.close()
    assert len(accepted) == 1


# -- the session cache ------------------------------------------------------------------------


def job_heartbeat(job_store: Store, ds: str, session_id: str, query_id: str, done: int) -> None:
    """A heartbeat written by the job, another process with its own connection."""
    current = job_store.sessions.get(ds, session_id)
    assert current is not None
    progress = StatementProgress(tasks_total=10, tasks_completed=done)
    job_store.sessions.beat(
        current,
        running_statements=[RunningStatement(query_id=query_id, start_time=now_millis(), progress=progress)],
        heartbeat_interval_millis=2_000,
    )


def reply(plugin: Plugin, query_id: str) -> dict[str, object]:
    return dict(json.loads(plugin.service.get(query_id)))


@pytest.fixture
def job_store(opensearch_config: OpenSearchConfig) -> Iterator[Store]:
    other = Store.connect(opensearch_config)
    yield other
    other.close()


def start_running(plugin: Plugin, job_store: Store) -> tuple[str, str, str]:
    ds = plugin.datasources.all()[0].name
    submitted = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1"))
    statement = job_store.statements.get(ds, submitted.query_id)
    assert statement is not None
    job_store.statements.start(statement)
    session = job_store.sessions.get(ds, submitted.session_id)
    assert session is not None
    job_store.sessions.claim(session, session.doc.job_id)
    job_heartbeat(job_store, ds, submitted.session_id, submitted.query_id, done=1)
    return ds, submitted.query_id, submitted.session_id


def test_get_takes_the_session_from_the_cache_but_the_statement_always_from_the_index(
    make_plugin: PluginFactory, job_store: Store
) -> None:
    plugin = make_plugin(session_cache_ms=600_000)  # long enough that the test never races it
    ds, query_id, session_id = start_running(plugin, job_store)
    assert reply(plugin, query_id)["progress"] == {
        "stagesCompleted": 0,
        "stagesTotal": 0,
        "tasksCompleted": 1,
        "tasksTotal": 10,
    }

    job_heartbeat(job_store, ds, session_id, query_id, done=5)
    assert reply(plugin, query_id)["progress"]["tasksCompleted"] == 1  # type: ignore[index]

    # The statement's state is read on every GET: its end shows at once.
    statement = job_store.statements.get(ds, query_id)
    assert statement is not None
    job_store.statements.fail(statement, "boom")
    assert reply(plugin, query_id) == {"status": "FAILED", "error": "boom"}


def test_a_session_write_of_this_process_is_never_answered_with_an_older_copy(
    make_plugin: PluginFactory, store: Store, job_store: Store
) -> None:
    plugin = make_plugin(session_cache_ms=600_000)
    ds, query_id, session_id = start_running(plugin, job_store)
    reply(plugin, query_id)  # cached with 1 task done
    job_heartbeat(store, ds, session_id, query_id, done=7)  # the service's own store writes
    assert reply(plugin, query_id)["progress"]["tasksCompleted"] == 7  # type: ignore[index]


def test_with_the_cache_off_every_get_reads_the_session(make_plugin: PluginFactory, job_store: Store) -> None:
    plugin = make_plugin(session_cache_ms=0)
    ds, query_id, session_id = start_running(plugin, job_store)
    reply(plugin, query_id)
    job_heartbeat(job_store, ds, session_id, query_id, done=9)
    assert reply(plugin, query_id)["progress"]["tasksCompleted"] == 9  # type: ignore[index]


# -- a suspect confirmed running is trusted for an interval ---------------------------------------


def test_a_stale_session_whose_job_runs_is_asked_about_once_per_interval_not_per_get(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, liveness_cache_s=0.0, session_cache_ms=0)
    ds = plugin.datasources.all()[0].name
    submitted = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1"))
    session = store.sessions.get(ds, submitted.session_id)
    assert session is not None
    # Running, advertising a 60 s interval, last beat 10 minutes ago: suspect on every GET.
    claimed = store.sessions.claim(session, session.doc.job_id)
    assert claimed is not None
    stale = store.sessions.beat(claimed, at=now_millis() - 600_000, heartbeat_interval_millis=60_000)
    assert stale is not None
    assert not plugin.liveness.staleness.is_fresh(stale.doc)
    for _ in range(100):
        assert reply(plugin, submitted.query_id)["status"] == "WAITING"
    assert launcher.described == [stale.doc.job_id]
    after = store.sessions.get(ds, submitted.session_id)
    assert after is not None and after.doc.state == SessionState.RUNNING


# -- GET on the event loop ----------------------------------------------------------------------


def test_a_statement_going_in_a_live_session_is_answered_on_the_event_loop(
    make_plugin: PluginFactory, job_store: Store
) -> None:
    plugin = make_plugin()
    _, query_id, _ = start_running(plugin, job_store)
    on_loop = asyncio.run(plugin.service.get_without_blocking(query_id))
    assert on_loop is not None
    assert json.loads(on_loop) == reply(plugin, query_id)
    assert json.loads(on_loop)["status"] == "RUNNING"


def test_what_may_block_is_left_to_a_worker_thread(
    make_plugin: PluginFactory, store: Store, job_store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, session_cache_ms=0)
    ds, query_id, session_id = start_running(plugin, job_store)
    assert asyncio.run(plugin.service.get_without_blocking(query_id)) is not None

    # A stale heartbeat needs the launcher: not on the loop, and the loop asked it nothing.
    session = job_store.sessions.get(ds, session_id)
    assert session is not None
    job_store.sessions.beat(session, at=now_millis() - 600_000)
    assert asyncio.run(plugin.service.get_without_blocking(query_id)) is None
    assert launcher.described == []

    # A finished statement not yet in the reply cache needs its result read.
    statement = job_store.statements.get(ds, query_id)
    assert statement is not None
    job_store.statements.fail(statement, "boom")
    assert asyncio.run(plugin.service.get_without_blocking(query_id)) is None
    assert reply(plugin, query_id)["status"] == "FAILED"  # the worker-thread path; now cached
    assert json.loads(asyncio.run(plugin.service.get_without_blocking(query_id)) or b"{}") == {
        "status": "FAILED",
        "error": "boom",
    }

    # A query this process has not seen yet (no session known for it).
    other = make_plugin(launcher)
    assert asyncio.run(other.service.get_without_blocking(query_id)) is None


def test_with_no_lean_reader_every_get_takes_the_worker_thread(
    make_plugin: PluginFactory, store: Store, job_store: Store
) -> None:
    plugin = make_plugin()
    _, query_id, _ = start_running(plugin, job_store)
    client = client_of(store)
    client._reader = client._async_reader = None  # as for a SigV4-signed cluster
    assert asyncio.run(plugin.service.get_without_blocking(query_id)) is None
    assert reply(plugin, query_id)["status"] == "RUNNING"
