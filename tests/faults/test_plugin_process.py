"""The plugin as a real ``async-query serve`` process: killed with -9 mid-statement and replaced,
stopped by a signal, and relied on to supervise a cancel that the job does not honour.

The plugin keeps no state of its own (docs/documents.md): the job runs in its own process group and
outlives the plugin; a new plugin on the same data directory and index answers for the statement,
reuses the session, and can still describe the job through the launcher's pid file.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query.api import BASE
from async_query.launcher.base import JobRunState
from async_query.launcher.local import LocalLauncher
from query_core.states import SessionState
from query_core.store import Store
from tests.e2e.conftest import TERMINAL, Api
from tests.faults.procs import (
    FixedPortIndex,
    PluginProcess,
    group_members,
    is_job_process,
    job_pid,
    kill_all_jobs,
    plugin_env,
)
from tests.node import CLIENT_SSL, index_env
from tests.support import free_port, wait_for

pytestmark = pytest.mark.e2e

DS = "local"
#: Some seconds of Spark work (a count over a cross join of two ranges), then a known answer.
LONG = "SELECT count(*) AS n, 42 AS answer FROM range(15000) a, range(15000) b"
#: Runs for hours on any machine (a count over a cross join of two ranges), until cancelled.
SLEEP_10_MIN = "SELECT count(*) AS n FROM range(10000000) a, range(10000000) b"


@pytest.fixture(scope="module")
def index() -> Iterator[FixedPortIndex]:
    server = FixedPortIndex()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def store(index: FixedPortIndex) -> Iterator[Store]:
    s = Store.connect(index.config())
    yield s
    s.close()


@pytest.fixture
def plugins(tmp_path: Path) -> Iterator[list[PluginProcess]]:
    """Plugin processes a test starts; all killed, and all their jobs too, whatever happens."""
    started: list[PluginProcess] = []
    try:
        yield started
    finally:
        for plugin in started:
            plugin.kill()
        kill_all_jobs(tmp_path / "var")


def start_plugin(
    plugins: list[PluginProcess], index: FixedPortIndex, tmp_path: Path, port: int, **settings: str
) -> PluginProcess:
    env = plugin_env()
    env.update(
        **index_env(index.url),
        ASYNC_QUERY_DATA_DIR=str(tmp_path / "var"),
        ASYNC_QUERY_SPARK_MASTER="local[2]",
        ASYNC_QUERY_LOCAL_CATALOG="in-memory",
        ASYNC_QUERY_HEARTBEAT_RUNNING_MS="500",
        ASYNC_QUERY_HEARTBEAT_IDLE_MS="2000",
        ASYNC_QUERY_LIVENESS_CACHE_S="1",
        ASYNC_QUERY_OPENSEARCH_RETRY_SECONDS="5",
        SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    )
    env.update({f"ASYNC_QUERY_{k.upper()}": v for k, v in settings.items()})
    plugin = PluginProcess(port, env, tmp_path / f"plugin-{len(plugins) + 1}.log")
    plugins.append(plugin)
    plugin.wait_ready()
    return plugin


def session_job(store: Store, data_dir: Path, sid: str) -> tuple[str, int]:
    session = store.sessions.get(DS, sid)
    assert session is not None and session.doc.job_id, session
    return session.doc.job_id, job_pid(data_dir, session.doc.job_id)


def test_statement_survives_a_plugin_kill_and_a_new_plugin_serves_it(
    index: FixedPortIndex, store: Store, plugins: list[PluginProcess], tmp_path: Path
) -> None:
    data_dir = tmp_path / "var"
    port = free_port()
    first = start_plugin(plugins, index, tmp_path, port)
    api = Api(first.url, DS)
    submitted = api.submit(LONG)
    qid, sid = submitted["queryId"], submitted["sessionId"]
    assert api.wait_status(qid, TERMINAL | {"RUNNING"}, timeout=120)["status"] == "RUNNING"
    job_id, pid = session_job(store, data_dir, sid)
    assert is_job_process(pid, job_id)

    first.kill()  # kill -9 in the middle of the statement: no shutdown code runs
    assert first.proc.returncode == -signal.SIGKILL
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{first.url}{BASE}/{qid}", timeout=5, verify=CLIENT_SSL)
    # The job is in its own process group: it outlived the plugin.
    assert is_job_process(pid, job_id)
    # What a restarted plugin knows of the job, it knows from the pid file alone.
    assert LocalLauncher(data_dir, "async-query").describe(job_id).state == JobRunState.RUNNING

    second = start_plugin(plugins, index, tmp_path, port)  # same port, data dir and index
    api = Api(second.url, DS)
    done = api.wait_status(qid, TERMINAL, timeout=120)
    assert done["status"] == "SUCCESS", done
    assert done["schema"] == [{"name": "n", "type": "long"}, {"name": "answer", "type": "integer"}]
    assert done["datarows"] == [[225_000_000, 42]], done

    again, reply = api.run("SELECT 'reused' AS x", sid, timeout=60)
    assert again["sessionId"] == sid
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [["reused"]], reply
    assert store.statements.get(DS, again["queryId"]).doc.job_id == job_id  # type: ignore[union-attr]

    # A stop of the new plugin does not touch the job it inherited from the killed one (it did
    # not start it); the test's teardown stops that orphan through its pid file.
    second.terminate()
    assert is_job_process(pid, job_id)
    kill_all_jobs(data_dir)
    assert not group_members(pid)
    assert LocalLauncher(data_dir, "async-query").describe(job_id).state == JobRunState.UNKNOWN


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
    ],
)
def test_plugin_stopped_by_a_signal_stops_the_jobs_it_started(
    sig: signal.Signals, index: FixedPortIndex, store: Store, plugins: list[PluginProcess], tmp_path: Path
) -> None:
    plugin = start_plugin(plugins, index, tmp_path, free_port())
    submitted = Api(plugin.url, DS).submit("SELECT 1")
    job_id, pid = session_job(store, tmp_path / "var", submitted["sessionId"])
    # spark-submit is starting up: while it execs its next program, /proc shows no environment.
    wait_for(lambda: is_job_process(pid, job_id), timeout=10, what="the job's process")

    plugin.proc.send_signal(sig)
    plugin.proc.wait(timeout=30)
    # Stopping its jobs is part of the plugin's shutdown: they are gone when it has exited.
    assert not is_job_process(pid, job_id), f"the plugin exited ({plugin.proc.returncode}) and left its job running"
    wait_for(lambda: not group_members(pid), timeout=5, what="the job's other processes to go")


def test_served_plugin_escalates_a_cancel_the_job_does_not_honour(
    index: FixedPortIndex, store: Store, plugins: list[PluginProcess], tmp_path: Path
) -> None:
    # The hung job cannot act on SIGTERM: the SIGKILL after the grace is what stops it.
    plugin = start_plugin(plugins, index, tmp_path, free_port(), cancel_deadline_s="1", local_job_stop_grace_s="0.5")
    api = Api(plugin.url, DS)
    submitted = api.submit(SLEEP_10_MIN)
    qid, sid = submitted["queryId"], submitted["sessionId"]
    assert api.wait_status(qid, TERMINAL | {"RUNNING"}, timeout=120)["status"] == "RUNNING"
    _, pid = session_job(store, tmp_path / "var", sid)

    def reported_running() -> bool:
        session = store.sessions.get(DS, sid)
        return session is not None and any(r.query_id == qid for r in session.doc.running_statements)

    # Once its heartbeat reports the statement running (what the supervisor watches), the job hangs
    # and cannot honour the cancel.
    wait_for(reported_running, timeout=30, what="the heartbeat to report the statement running")
    os.killpg(pid, signal.SIGSTOP)
    try:
        assert api.cancel(qid).status_code == 204
        assert api.get(qid)["status"] == "CANCELLED"

        def ended() -> bool:
            session = store.sessions.get(DS, sid)
            return session is not None and session.doc.state == SessionState.DEAD

        # Deadline 1 s, then the supervisor cancels the job and ends the session.
        wait_for(ended, timeout=15, what="the supervisor to end the session of the hung job")
        assert "did not stop within" in store.sessions.get(DS, sid).doc.error  # type: ignore[union-attr]
        wait_for(lambda: not group_members(pid), timeout=15, what="the hung job to be stopped")
    finally:
        if group_members(pid):
            os.killpg(pid, signal.SIGCONT)
