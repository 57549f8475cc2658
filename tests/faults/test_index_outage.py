"""The index goes away during a run: paused (it takes connections and answers nothing) or stopped
(nothing listens) and back (tests/faults/procs.py, FixedPortIndex):

- A *pause* is the outage after which state must survive: the job keeps retrying its index calls
  and carries on; every statement accepted with 201 reaches a terminal state.
- A *stop* shows the plugin answering 503 in the error shape (promptly, never 500) while nothing
  listens, and once it is back on the same port, the service and its running job carry on with
  the documents as they were; an index that came back empty gets its mappings back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.ids import new_id, request_index
from query_core.states import SessionState
from query_core.store import Store
from tests.e2e.conftest import TERMINAL, Api
from tests.faults.conftest import close_service, fault_service
from tests.faults.procs import FixedPortIndex, is_job_process, job_pid, kill_all_jobs
from tests.node import CLIENT_SSL, auth_fields, index_auth
from tests.support import RecordingLauncher, serve_http, wait_for

DS = "local"
#: How long the plugin retries a failing index call (connection refused, a timeout) before its 503.
RETRY_S = 0.5
#: How long one index request of the plugin, and of the job, may take: the long outage below
#: outlasts it, the short one does not.
REQUEST_TIMEOUT_S = 3.0
#: The short outage, during which a POST is held (shorter than the request timeout).
SHORT_OUTAGE_S = 1.5
#: Runs for hours on any machine (a count over a cross join of two ranges), until cancelled.
SLEEP_10_MIN = "SELECT count(*) AS n FROM range(10000000) a, range(10000000) b"


def assert_error_shape(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, (reply.status_code, reply.text)
    body = reply.json()
    assert set(body) == {"status", "error"} and body["status"] == status, body
    assert set(body["error"]) == {"type", "reason", "details"}, body
    assert all(isinstance(v, str) and v for v in body["error"].values()), body
    return dict(body)


@dataclass
class Outage:
    index: FixedPortIndex
    plugin: Plugin
    api: Api
    sessions: list[str] = field(default_factory=list)

    def warm_session(self) -> str:
        """A running session of this module (started by the first test that needs one)."""
        for sid in self.sessions:
            session = self.plugin.store.sessions.get(DS, sid)
            if session is not None and session.doc.state == SessionState.RUNNING:
                return sid
        submitted, reply = self.api.run("SELECT 1", timeout=120)
        assert reply["status"] == "SUCCESS", reply
        self.sessions.append(submitted["sessionId"])
        return str(submitted["sessionId"])

    def job_log(self, sid: str) -> str:
        path = self.plugin.settings.data_dir / "logs" / f"{sid}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    tmp = tmp_path_factory.mktemp("outage")
    index = FixedPortIndex()
    plugin = None
    try:
        plugin = fault_service(
            index.url,
            tmp,
            DS,
            opensearch_retry_seconds=RETRY_S,
            opensearch_request_timeout_s=REQUEST_TIMEOUT_S,
            job_index_request_timeout_s=REQUEST_TIMEOUT_S,
            heartbeat_running_ms=500,
            # Stale after 6 s idle: the short outage below must not make the session look dead.
            heartbeat_idle_ms=2_000,
            stale_heartbeats=3,
            liveness_cache_s=1,
        )
        with serve_http(create_app(plugin)) as url:
            yield Outage(index, plugin, Api(url, DS))
    finally:
        index.resume()
        if plugin is not None:
            close_service(plugin)
            kill_all_jobs(plugin.settings.data_dir)
        index.close()


def _retries(log: str) -> int:
    """Index calls the job retried after a failure (tenacity's before-sleep warnings)."""
    return sum(1 for line in log.splitlines() if "index call" in line and "failed (" in line and "retry" in line)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["reply"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported by the test's assertion
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.e2e
def test_job_rides_out_a_paused_index_server_and_no_accepted_statement_is_lost(outage: Outage) -> None:
    api, plugin, index = outage.api, outage.plugin, outage.index
    sid = outage.warm_session()
    job_id = plugin.store.sessions.get(DS, sid).doc.job_id  # type: ignore[union-attr]
    pid = job_pid(plugin.settings.data_dir, job_id)
    retries_before = _retries(outage.job_log(sid))

    # -- a long outage (longer than the index request timeout of plugin and job) -----------------
    # A few seconds of Spark work (a count over a cross join of two ranges), about as long as the
    # outage: the statement finishes during it, or soon after.
    running = api.submit("SELECT count(*) AS n, 'a' AS tag FROM range(12000) x, range(12000) y", sid)
    api.wait_status(running["queryId"], {"RUNNING"})
    queued = api.submit("SELECT 'b' AS tag", sid)  # accepted, waiting behind the running one
    index.pause()
    try:
        body = {"datasource": DS, "lang": "sql", "query": "SELECT 'c' AS tag", "sessionId": sid}
        post, posted = _in_thread(lambda: api.http.post(BASE, json=body))
        get, got = _in_thread(lambda: api.raw(running["queryId"]))
        # The outage lasts until the job has demonstrably had an index call fail and is retrying
        # it (its statement finished meanwhile: its result and state writes wait for the index).
        wait_for(
            lambda: _retries(outage.job_log(sid)) > retries_before,
            timeout=60,
            interval=0.2,
            what="the job to retry a failed index call",
        )
        post.join(timeout=60)
        get.join(timeout=60)
        assert not post.is_alive() and not get.is_alive(), "the plugin hung on a paused index server"
    finally:
        index.resume()
    # The plugin gave up on its own index calls after its request timeout: 503, never 500.
    assert_error_shape(posted["reply"], 503)
    assert_error_shape(got["reply"], 503)

    a = api.wait_status(running["queryId"], TERMINAL, timeout=60)
    assert a["status"] == "SUCCESS" and a["datarows"] == [[144_000_000, "a"]], a
    b = api.wait_status(queued["queryId"], TERMINAL, timeout=60)
    assert b["status"] == "SUCCESS" and b["datarows"] == [["b"]], b

    # -- a short outage: a POST made during it is held, answered 201 after it, and runs ---------
    # It starts once the job's heartbeat has caught up with the long outage: idle (advertising its
    # 2 s interval, stale after 6 s) and fresh. A heartbeat gone stale during the outage would make
    # the POST start a new session (see test_job_killed's stalled-job test).
    def idle_and_fresh() -> bool:
        doc = plugin.store.sessions.get(DS, sid).doc  # type: ignore[union-attr]
        return not doc.running_statements and doc.heartbeat_interval_millis == 2_000 and plugin.liveness.staleness.is_fresh(doc)

    wait_for(idle_and_fresh, timeout=30, what="an idle, fresh heartbeat")
    index.pause()
    try:
        post, posted = _in_thread(lambda: api.http.post(BASE, json={**body, "query": "SELECT 'd' AS tag"}))
        # Deliberate delay: the length of the outage (shorter than the request timeout).
        time.sleep(SHORT_OUTAGE_S)
        assert post.is_alive(), f"the POST did not wait for the paused index: {posted}"
    finally:
        index.resume()
    post.join(timeout=30)
    assert not post.is_alive()
    reply = posted["reply"]
    assert reply.status_code == 201, reply.text
    assert reply.json()["sessionId"] == sid
    d = api.wait_status(reply.json()["queryId"], TERMINAL, timeout=60)
    assert d["status"] == "SUCCESS" and d["datarows"] == [["d"]], d

    # The job survived both outages and still owns its session; the plugin did not declare it dead
    # although its heartbeat went stale during the outage.
    assert _retries(outage.job_log(sid)) > retries_before
    assert is_job_process(pid, job_id)
    session = plugin.store.sessions.get(DS, sid)
    assert session is not None and session.doc.state == SessionState.RUNNING and session.doc.job_id == job_id
    after, e = api.run("SELECT 'e' AS tag", sid, timeout=60)
    assert after["sessionId"] == sid and e["datarows"] == [["e"]], e


@pytest.mark.e2e
def test_plugin_answers_503_while_the_index_server_is_down_and_recovers_when_it_is_back(outage: Outage) -> None:
    api, plugin, index = outage.api, outage.plugin, outage.index
    sid = outage.warm_session()
    long = api.submit(SLEEP_10_MIN, sid)
    api.wait_status(long["queryId"], {"RUNNING"})
    jobs_before = sorted((plugin.settings.data_dir / "jobs").glob("*.pid"))

    index.stop()
    body = {"datasource": DS, "lang": "sql", "query": "SELECT 1"}
    calls = [
        ("GET", f"{BASE}/{long['queryId']}", None),
        ("GET", f"{BASE}/{new_id(DS)}", None),
        ("DELETE", f"{BASE}/{long['queryId']}", None),
        ("POST", BASE, body),
        ("POST", BASE, {**body, "sessionId": sid}),
        ("GET", f"{BASE}/_sessions", None),
    ]
    for method, path, payload in calls:
        started = time.monotonic()
        reply = api.http.request(method, path, json=payload)
        elapsed = time.monotonic() - started
        error = assert_error_shape(reply, 503)["error"]
        assert error["reason"] == "Service Unavailable" and error["type"] == "IndexUnavailableException", error
        assert elapsed < RETRY_S + 5, f"{method} {path} took {elapsed:.1f} s to answer 503"
    # A POST refused for want of the index started no Spark job.
    assert sorted((plugin.settings.data_dir / "jobs").glob("*.pid")) == jobs_before

    index.start()  # the same port, and every document as it was
    still = api.raw(long["queryId"])
    assert still.status_code == 200 and still.json()["status"] == "RUNNING", still.text
    assert api.http.delete(f"{BASE}/{long['queryId']}").status_code == 204
    api.wait_status(long["queryId"], {"CANCELLED"}, timeout=120)
    again, result = api.run("SELECT 'back' AS x", sid, timeout=120)
    assert again["sessionId"] == sid  # the session and its job outlived the outage
    assert result["status"] == "SUCCESS" and result["datarows"] == [["back"]], result


def test_request_index_gets_its_mappings_back_after_the_index_server_lost_it(tmp_path: Path) -> None:
    index = FixedPortIndex()
    store = None
    plugin = None
    try:
        settings = Settings(data_dir=tmp_path / "var", opensearch_retry_seconds=RETRY_S)
        opensearch = settings.opensearch(index.url).model_copy(update=auth_fields(index.url))
        store = Store.connect(opensearch)
        datasource = local_datasource()
        plugin = build_plugin(
            settings, store, DatasourceRegistry([datasource]), {"local": RecordingLauncher()}, opensearch
        )
        with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http:

            def submit_and_check() -> None:
                reply = http.post(BASE, json={"datasource": DS, "lang": "sql", "query": "SELECT 1"})
                assert reply.status_code == 201, reply.text
                submitted = reply.json()
                mapping = httpx.get(f"{index.url}/{request_index(DS)}/_mapping", auth=index_auth(index.url), timeout=10, verify=CLIENT_SSL).json()
                mappings = mapping[request_index(DS)]["mappings"]
                assert str(mappings.get("dynamic")).lower() == "false", mappings
                assert mappings["properties"]["sessionId"]["type"] == "keyword", mappings
                # The reference job finds waiting statements by this search (after a refresh).
                wait_for(
                    lambda: (
                        [
                            s.doc.statement_id
                            for s in store.statements.find_waiting(DS, submitted["sessionId"])  # type: ignore[union-attr]
                        ]
                        == [submitted["queryId"]]
                    ),
                    timeout=10,
                    what="the search for waiting statements to find the new statement",
                )

            submit_and_check()  # the index as the product creates it
            index.stop()
            index.start(empty=True)  # same port, nothing in it: a cluster restored empty
            submit_and_check()
    finally:
        if plugin is not None:
            plugin.close()
        if store is not None:
            store.close()
        index.close()
