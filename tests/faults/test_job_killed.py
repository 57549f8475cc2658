"""The job of a session dies (kill -9) or stalls (SIGSTOP) in the middle of a statement.

A killed job writes nothing more: the plugin must find out by itself (stale heartbeat -> one
launcher ``describe`` -> session ``dead``, its unfinished statements ``failed``), and a client that
keeps the old ``sessionId`` must be moved to a new, working session. A stalled job is still alive:
the plugin must not give up on it on the heartbeat alone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from async_query.api import create_app
from async_query.runtime import Plugin
from query_core.states import SessionState, StatementState
from tests.e2e.conftest import TERMINAL, Api
from tests.faults.conftest import close_service, fault_service
from tests.faults.procs import group_members, is_job_process, job_pid, kill_all_jobs
from tests.support import serve_http, wait_for

pytestmark = pytest.mark.e2e

#: Runs for hours on any machine (a count over a cross join of two ranges), until cancelled.
SLEEP_10_MIN = "SELECT count(*) AS n FROM range(10000000) a, range(10000000) b"


@dataclass
class Jobs:
    plugin: Plugin
    api: Api
    ds: str
    sessions: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.plugin.settings.data_dir

    def warm_session(self) -> str:
        """A running session of this module (the first test that needs one starts it)."""
        for sid in reversed(self.sessions):
            session = self.plugin.store.sessions.get(self.ds, sid)
            if session is not None and session.doc.state == SessionState.RUNNING:
                return sid
        submitted, reply = self.api.run("SELECT 1", timeout=120)
        assert reply["status"] == "SUCCESS", reply
        self.sessions.append(submitted["sessionId"])
        return str(submitted["sessionId"])

    def job_of(self, sid: str) -> tuple[str, int]:
        session = self.plugin.store.sessions.get(self.ds, sid)
        assert session is not None and session.doc.job_id
        return session.doc.job_id, job_pid(self.data_dir, session.doc.job_id)


@pytest.fixture(scope="module")
def jobs(module_index_url: str, module_ds_name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    plugin = fault_service(
        module_index_url,
        tmp_path_factory.mktemp("jobs"),
        module_ds_name,
        heartbeat_running_ms=500,
        heartbeat_idle_ms=1_000,
        stale_heartbeats=3,
        liveness_cache_s=0.5,
    )
    try:
        with serve_http(create_app(plugin)) as url:
            yield Jobs(plugin, Api(url, module_ds_name), module_ds_name)
    finally:
        close_service(plugin)
        kill_all_jobs(plugin.settings.data_dir)


def test_killed_job_fails_its_statements_ends_its_session_and_a_new_session_takes_over(jobs: Jobs) -> None:
    api, store, ds = jobs.api, jobs.plugin.store, jobs.ds
    sid = jobs.warm_session()
    long = api.submit(SLEEP_10_MIN, sid)
    api.wait_status(long["queryId"], {"RUNNING"}, timeout=60)
    queued = api.submit("SELECT 'queued' AS q", sid)
    assert queued["sessionId"] == sid
    assert api.get(queued["queryId"])["status"] == "WAITING"
    job_id, pid = jobs.job_of(sid)
    assert is_job_process(pid, job_id)

    os.killpg(pid, signal.SIGKILL)  # the whole job: spark-submit's JVM and its Python driver
    wait_for(lambda: not group_members(pid), timeout=15, what="the killed job's processes to go")

    failed = api.wait_status(long["queryId"], TERMINAL, timeout=60)
    assert failed["status"] == "FAILED", failed
    error = failed["error"]
    assert sid in error and job_id in error and "session" in error.lower(), error
    # The statement waiting behind it can never run either: it fails too, not left waiting.
    queued_reply = api.wait_status(queued["queryId"], TERMINAL, timeout=30)
    assert queued_reply["status"] == "FAILED" and sid in queued_reply["error"], queued_reply

    ended = store.sessions.get(ds, sid)
    assert ended is not None and ended.doc.state == SessionState.DEAD, ended
    assert job_id in ended.doc.error and ended.doc.running_statements == []
    for q in (long, queued):
        doc = store.statements.get(ds, q["queryId"])
        assert doc is not None and doc.doc.state == StatementState.FAILED, doc

    # A client still holding the dead session's id gets a new session, and its query runs.
    again, reply = api.run("SELECT 'after the kill' AS x", sid, timeout=120)
    assert again["sessionId"] != sid
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [["after the kill"]], reply
    jobs.sessions.append(again["sessionId"])
    new_job, _ = jobs.job_of(again["sessionId"])
    assert new_job != job_id
    # The dead session's statements stay failed.
    assert api.get(long["queryId"])["status"] == "FAILED"
    assert store.statements.get(ds, long["queryId"]).doc.state == StatementState.FAILED  # type: ignore[union-attr]


def test_stalled_job_keeps_its_session_for_post_as_it_does_for_get(jobs: Jobs) -> None:
    api, plugin, ds = jobs.api, jobs.plugin, jobs.ds
    sid = jobs.warm_session()
    long = api.submit(SLEEP_10_MIN, sid)
    api.wait_status(long["queryId"], {"RUNNING"}, timeout=60)
    job_id, pid = jobs.job_of(sid)
    os.killpg(pid, signal.SIGSTOP)  # the job stalls (a long GC pause, an overloaded host)
    try:

        def stale() -> bool:
            session = plugin.store.sessions.get(ds, sid)
            return session is not None and not plugin.liveness.staleness.is_fresh(session.doc)

        wait_for(stale, timeout=30, what="the stalled job's heartbeat to go stale")
        # GET suspects the session, asks the launcher once, and keeps it: the job is there.
        assert plugin.launchers.shared["local"].describe(job_id).state.value == "RUNNING"
        assert api.get(long["queryId"])["status"] == "RUNNING"
        session = plugin.store.sessions.get(ds, sid)
        assert session is not None and session.doc.state == SessionState.RUNNING
        # POST should come to the same conclusion, and keep the client in its session.
        again = api.submit("SELECT 'same session' AS x", sid)
        if again["sessionId"] != sid:
            jobs.sessions.append(again["sessionId"])  # a second job now runs for this client
        assert again["sessionId"] == sid, "POST abandoned a live session on a stale heartbeat alone"
    finally:
        os.killpg(pid, signal.SIGCONT)
        api.cancel(long["queryId"])


def test_cancel_is_escalated_when_the_job_hangs_before_its_heartbeat_reports_the_statement(
    module_index_url: str, module_ds_name: str, tmp_path: Path
) -> None:
    # Long heartbeat intervals: the job's heartbeat will not report the statement for ~20 s.
    plugin = fault_service(
        module_index_url,
        tmp_path,
        module_ds_name,
        heartbeat_running_ms=20_000,
        heartbeat_idle_ms=30_000,
        cancel_deadline_s=1,
        # The hung job cannot act on SIGTERM: the SIGKILL after the grace is what stops it.
        local_job_stop_grace_s=0.5,
    )
    plugin.start_workers()
    pid = 0
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, module_ds_name)
            submitted = api.submit(SLEEP_10_MIN)
            qid, sid = submitted["queryId"], submitted["sessionId"]
            api.wait_status(qid, {"RUNNING"}, timeout=120)
            session = plugin.store.sessions.get(module_ds_name, sid)
            assert session is not None and not session.doc.running_statements  # not reported yet
            pid = job_pid(plugin.settings.data_dir, session.doc.job_id)
            os.killpg(pid, signal.SIGSTOP)  # the job hangs: it cannot honour the cancel

            assert api.cancel(qid).status_code == 204

            def ended() -> bool:
                current = plugin.store.sessions.get(module_ds_name, sid)
                return current is not None and current.doc.state == SessionState.DEAD

            # Deadline 1 s; the supervisor checks every 0.2 s.
            wait_for(ended, timeout=10, what="the supervisor to cancel the hung job and end its session")
            wait_for(lambda: not group_members(pid), timeout=15, what="the hung job to be stopped")
    finally:
        if pid and group_members(pid):
            os.killpg(pid, signal.SIGCONT)
        close_service(plugin)
        kill_all_jobs(plugin.settings.data_dir)
