"""Liveness from documents, launcher calls only for suspects, bounded cancel, session limit."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from async_query.launcher.base import JobDescription, JobRunState
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from query_core.errors import QueryNotFoundError, TooManyRequestsError
from query_core.ids import REQUEST_INDEX_PATTERN, request_index
from query_core.models import RunningStatement, SessionDoc, StatementDoc, StatementProgress, Versioned, now_millis
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, job_beats, wait_for


def heartbeat(
    store: Store,
    plugin: Plugin,
    session_id: str,
    age_ms: int = 0,
    running: list[str] | None = None,
    state: SessionState = SessionState.RUNNING,
) -> Versioned[SessionDoc]:
    """Write a heartbeat as the job would (``age_ms`` in the past)."""
    ds = plugin.datasources.all()[0].name
    current = store.sessions.get(ds, session_id)
    assert current is not None
    report = [
        RunningStatement(
            query_id=q, start_time=now_millis(), progress=StatementProgress(tasks_total=4, tasks_completed=1)
        )
        for q in running or []
    ]
    if state != SessionState.RUNNING:  # the job's last write
        ended = store.sessions.end(current, state)
        assert ended is not None
        return ended
    return job_beats(store, current, age_ms, running_statements=report, heartbeat_interval_millis=1_000)


def submit(plugin: Plugin, query: str = "SELECT 1", session_id: str | None = None) -> tuple[str, str]:
    ds = plugin.datasources.all()[0].name
    done = plugin.service.submit(SubmitRequest(ds, "sql", query, session_id))
    return done.query_id, done.session_id


def status(plugin: Plugin, query_id: str) -> dict[str, object]:
    return dict(json.loads(plugin.service.get(query_id)))


def test_no_launcher_call_for_1000_gets_of_healthy_sessions(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    queries = []
    for _ in range(5):
        qid, sid = submit(plugin)
        heartbeat(store, plugin, sid, running=[qid])
        queries.append(qid)
    for i in range(1000):
        assert status(plugin, queries[i % 5])["status"] in ("WAITING", "RUNNING")
    assert launcher.described == []


def test_a_dead_job_is_confirmed_once_for_50_concurrent_pollers(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.FAILED)
    plugin = make_plugin(launcher)
    qid, sid = submit(plugin)
    heartbeat(store, plugin, sid, age_ms=60_000, running=[qid])  # stale: 60 missed beats
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(lambda _: status(plugin, qid), range(50)))
    assert len(launcher.described) == 1
    assert {r["status"] for r in replies} == {"FAILED"}
    assert "is failed" in str(replies[0]["error"])
    session = store.sessions.get(plugin.datasources.all()[0].name, sid)
    assert session is not None and session.doc.state == SessionState.DEAD


@dataclass
class BrokenDescribeLauncher(RecordingLauncher):
    """``describe`` waits until the test releases it, then fails with an error no launcher is
    meant to raise (a bug, or a driver error nobody translated)."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def describe(self, job_id: str) -> JobDescription:
        self.described.append(job_id)
        self.entered.set()
        self.release.wait(timeout=30)
        raise RuntimeError("describe broke")


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, threading.Event, dict[str, Any]]:
    """Run ``fn`` in a thread; the event is set when it has returned or raised."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, outcome


def waiting_on_a_future(thread: threading.Thread) -> bool:
    """True while ``thread`` is blocked in ``concurrent.futures.Future.result``."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "result" and code.co_filename.replace("\\", "/").endswith("concurrent/futures/_base.py"):
            return True
        frame = frame.f_back
    return False


def test_a_describe_that_raises_anything_releases_the_callers_waiting_for_it(
    make_plugin: PluginFactory, store: Store
) -> None:
    """Two GETs of a stale session share one describe. When it raises an unexpected error, the
    one waiting for it returns at once (the job's state is unknown: the statement is left as it
    is), instead of staying blocked for the shared call's 60 s limit."""
    launcher = BrokenDescribeLauncher()
    plugin = make_plugin(launcher)
    qid, sid = submit(plugin)
    heartbeat(store, plugin, sid, age_ms=60_000)  # stale: the next GETs ask the launcher

    _, owner_done, owner = in_thread(lambda: status(plugin, qid))
    assert launcher.entered.wait(timeout=10), "the first GET never asked the launcher"
    waiter_thread, waiter_done, waiter = in_thread(lambda: status(plugin, qid))
    wait_for(lambda: waiting_on_a_future(waiter_thread), timeout=10, what="the second GET to wait for the first")
    launcher.release.set()

    assert waiter_done.wait(timeout=5), "the waiting GET is still blocked after the describe failed"
    assert owner_done.wait(timeout=5)
    assert waiter == {"value": {"status": "WAITING"}}
    assert owner == {"value": {"status": "WAITING"}}
    assert launcher.described == ["job-1"]  # one call for both
    session = store.sessions.get(plugin.datasources.all()[0].name, sid)
    assert session is not None and session.doc.state == SessionState.RUNNING  # unknown is not dead


def test_a_stale_session_whose_job_still_runs_is_left_alone(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher(state=JobRunState.RUNNING)
    plugin = make_plugin(launcher)
    qid, sid = submit(plugin)
    heartbeat(store, plugin, sid, age_ms=60_000)
    for _ in range(20):
        assert status(plugin, qid)["status"] == "WAITING"
    assert len(launcher.described) == 1  # cached for liveness_cache_s


def test_a_session_that_never_starts_is_confirmed_dead_after_its_start_limit(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher(state=JobRunState.UNKNOWN)
    plugin = make_plugin(launcher, session_start_timeout_s=0.0)
    qid, sid = submit(plugin)
    reply = status(plugin, qid)
    assert reply["status"] == "FAILED" and "Session ended before the statement finished" in str(reply["error"])
    session = store.sessions.get(plugin.datasources.all()[0].name, sid)
    assert session is not None and session.doc.state == SessionState.DEAD
    assert launcher.described == ["job-1"]


def test_a_post_naming_a_dead_session_gets_a_new_one(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher(state=JobRunState.CANCELLED)
    plugin = make_plugin(launcher)
    _, sid = submit(plugin)
    heartbeat(store, plugin, sid, state=SessionState.DEAD)
    _, sid2 = submit(plugin, session_id=sid)
    assert sid2 != sid and len(launcher.started) == 2


def delete_statement(store: Store, ds: str, query_id: str) -> None:
    """Delete a statement document as housekeeping (or an operator) would."""
    store.index.delete(request_index(ds), query_id)


def test_cancel_of_a_statement_deleted_before_the_write_is_not_found(
    make_plugin: PluginFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = make_plugin()
    qid, _ = submit(plugin)
    ds = plugin.datasources.all()[0].name
    read = plugin.reads._statement

    def read_then_delete(query_id: str) -> Versioned[StatementDoc]:
        found = read(query_id)
        delete_statement(store, ds, query_id)
        return found

    monkeypatch.setattr(plugin.reads, "_statement", read_then_delete)
    with pytest.raises(QueryNotFoundError, match=f"no async query with id {qid}"):
        plugin.service.cancel(qid)


def test_cancel_of_a_statement_deleted_before_the_reread_is_not_found(
    make_plugin: PluginFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first conditional write loses to the job (it started the statement); the re-read
    then finds nothing, because the document was deleted meanwhile."""
    plugin = make_plugin()
    qid, _ = submit(plugin)
    ds = plugin.datasources.all()[0].name
    statements = plugin.store.statements
    read, reread = plugin.reads._statement, statements.reread

    def read_then_start(query_id: str) -> Versioned[StatementDoc]:
        found = read(query_id)
        store.statements.start(found)  # the job, between the read and the write
        return found

    def delete_then_reread(doc: StatementDoc) -> Versioned[StatementDoc] | None:
        delete_statement(store, ds, doc.statement_id)
        return reread(doc)

    monkeypatch.setattr(plugin.reads, "_statement", read_then_start)
    monkeypatch.setattr(statements, "reread", delete_then_reread)
    with pytest.raises(QueryNotFoundError, match=f"no async query with id {qid}"):
        plugin.service.cancel(qid)
    assert plugin.supervisor.pending == 0  # nothing left to supervise


def test_cancel_of_a_statement_the_job_ignores_escalates_after_the_deadline(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, cancel_deadline_s=1.0)
    qid, sid = submit(plugin)
    other, _ = submit(plugin, "SELECT 2", sid)
    ds = plugin.datasources.all()[0].name
    statement = store.statements.get(ds, qid)
    assert statement is not None
    store.statements.start(statement)
    heartbeat(store, plugin, sid, running=[qid])  # the job reports it running, and keeps doing so

    plugin.supervisor.start()
    started = time.monotonic()
    plugin.service.cancel(qid)
    assert status(plugin, qid)["status"] == "CANCELLED"  # DELETE answers at once
    wait_for(lambda: plugin.supervisor.escalations == 1, timeout=10, what="the cancel to be escalated")
    took = time.monotonic() - started
    assert took >= 1.0  # not before the deadline
    assert launcher.cancelled == ["job-1"] and plugin.supervisor.escalations == 1
    session = store.sessions.get(ds, sid)
    assert session is not None and session.doc.state == SessionState.DEAD
    assert "did not stop" in session.doc.error
    assert status(plugin, qid)["status"] == "CANCELLED"  # stays cancelled
    reply = status(plugin, other)
    assert reply["status"] == "FAILED" and "did not stop" in str(reply["error"])


def test_cancel_the_job_honours_needs_no_escalation(make_plugin: PluginFactory, store: Store) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, cancel_deadline_s=0.5)
    qid, sid = submit(plugin)
    statement = store.statements.get(plugin.datasources.all()[0].name, qid)
    assert statement is not None
    store.statements.start(statement)
    heartbeat(store, plugin, sid, running=[qid])
    plugin.service.cancel(qid)
    plugin.supervisor.run_once()
    assert plugin.supervisor.pending == 1  # no heartbeat since the cancel yet
    heartbeat(store, plugin, sid, running=[])  # the job stopped it
    plugin.supervisor.run_once()
    assert plugin.supervisor.pending == 0
    assert launcher.cancelled == [] and plugin.supervisor.escalations == 0


def test_session_limit_refuses_new_sessions_but_never_submissions_into_live_ones(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = make_plugin(RecordingLauncher(), max_sessions=2)
    _, first = submit(plugin)
    _, second = submit(plugin)
    store.index.refresh(REQUEST_INDEX_PATTERN)  # the limit is counted by a search
    with pytest.raises(TooManyRequestsError, match="can not exceed 2"):
        submit(plugin)
    _, again = submit(plugin, "SELECT 3", first)
    assert again == first
    heartbeat(store, plugin, second, state=SessionState.DEAD)
    store.index.refresh(REQUEST_INDEX_PATTERN)
    _, third = submit(plugin)
    assert third not in (first, second)


def test_a_cancel_nobody_watches_is_picked_up_by_the_housekeeping_sweep(
    make_plugin: PluginFactory, store: Store
) -> None:
    """A plugin restarted after a DELETE still bounds the cancel: the sweep finds the heartbeat
    listing a cancelled statement and supervises it."""
    launcher = RecordingLauncher()
    before_restart = make_plugin(launcher)
    qid, sid = submit(before_restart)
    ds = before_restart.datasources.all()[0].name
    statement = store.statements.get(ds, qid)
    assert statement is not None
    running = store.statements.start(statement)
    assert running is not None
    store.statements.cancel(running)
    heartbeat(store, before_restart, sid, running=[qid])

    after_restart = make_plugin(launcher, cancel_deadline_s=0.0)
    assert after_restart.supervisor.pending == 0
    store.index.refresh(REQUEST_INDEX_PATTERN)  # the sweep finds sessions by a search
    after_restart.housekeeper.run_once()
    assert after_restart.supervisor.pending == 1
    after_restart.supervisor.run_once()
    assert launcher.cancelled == ["job-1"]
    session = store.sessions.get(ds, sid)
    assert session is not None and session.doc.state == SessionState.DEAD


def test_a_local_job_that_dies_at_start_up_is_reported_at_once(make_plugin: PluginFactory, tmp_path: Path) -> None:
    """spark-submit failing straight away (here: not spark-submit at all) ends the statement
    FAILED on the next GET, with the job's last log line, not after the start-up limit."""
    fake_submit = tmp_path / "spark-submit"
    fake_submit.write_text("#!/bin/sh\necho 'JAVA_HOME is not set' >&2\nexit 1\n")
    fake_submit.chmod(0o755)
    launcher = LocalLauncher(tmp_path / "var", "test", spark_submit=str(fake_submit))
    # the first GET may find the job still starting: its answer is reused only briefly here
    plugin = make_plugin(launcher, liveness_cache_s=0.1)
    qid, _ = submit(plugin)
    reply = wait_for(
        lambda: r if (r := status(plugin, qid))["status"] == "FAILED" else None, timeout=10, what="the failure to show"
    )
    assert "exited with code 1" in str(reply["error"]) and "JAVA_HOME is not set" in str(reply["error"])
