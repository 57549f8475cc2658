"""The warm pool with real spark-submit jobs: claimed by new sessions, refilled, replaced when
killed, failed over when a claimed job dies before it takes its session, and one session per job.

One service (pool of 1, its keeper running) is shared by the module; each test waits for the pool's
one job to be idle, so the tests follow one another while the pool refills between them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from async_query.api import create_app
from async_query.runtime import Plugin
from query_core.models import PoolJobDoc, SessionDoc, Versioned
from query_core.states import PoolJobState, SessionState
from query_core.store.pool import slot_id
from tests.conftest import REAL_CLUSTER
from tests.e2e.conftest import BASE, Api, e2e_service
from tests.faults.procs import group_members, job_pid, kill_all_jobs
from tests.support import serve_http, wait_for

pytestmark = pytest.mark.e2e

#: How long a pool job may take to be ready (a JVM start and the warm-up, on a busy machine).
READY_S = 180


@dataclass
class Pooled:
    api: Api
    plugin: Plugin

    @property
    def ds(self) -> str:
        return self.api.datasource

    @property
    def slot(self) -> str:
        pool = self.plugin.pools.of(self.plugin.datasources.get(self.ds))
        assert pool is not None and pool.size == 1
        return slot_id(pool.key, 0)

    def read_slot(self) -> Versioned[PoolJobDoc] | None:
        return self.plugin.store.pool.slot(self.slot)

    def idle_job(self, not_one_of: frozenset[str] = frozenset()) -> str:
        """The pool's job, once it is idle (and not one of ``not_one_of``)."""

        def idle() -> str | None:
            found = self.read_slot()
            if found is None or found.doc.state != PoolJobState.IDLE or found.doc.job_id in not_one_of:
                return None
            return found.doc.job_id

        return wait_for(idle, timeout=READY_S, interval=0.1, what="an idle pool job")

    def session(self, session_id: str) -> SessionDoc:
        found = self.plugin.store.sessions.get(self.ds, session_id)
        assert found is not None
        return found.doc

    def pid(self, job_id: str) -> int:
        return job_pid(self.plugin.settings.data_dir, job_id)


@pytest.fixture(scope="module")
def pooled(module_index_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pooled]:
    import secrets

    ds = f"p{secrets.token_hex(3)}" if REAL_CLUSTER else "local"
    plugin = e2e_service(
        module_index_url,
        tmp_path_factory.mktemp("pool"),
        ds,
        warm_pool_size=1,
        warm_pool_interval_s=0.5,
        heartbeat_idle_ms=1_000,
        stale_heartbeats=3,
        liveness_cache_s=0.5,
        inactivity_limit_ms=60_000,
    )
    plugin.pool_keeper.start()
    try:
        with serve_http(create_app(plugin)) as url:
            yield Pooled(Api(url, ds), plugin)
    finally:
        plugin.close()
        kill_all_jobs(plugin.settings.data_dir)


def test_a_new_session_s_first_query_is_answered_by_the_pool_job(pooled: Pooled) -> None:
    api = pooled.api
    job = pooled.idle_job()
    submitted, reply = api.run("SELECT 1 AS one")
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [[1]], reply

    session = pooled.session(submitted["sessionId"])
    assert (session.job_id, session.pool_slot, session.state) == (job, pooled.slot, SessionState.RUNNING)
    statement = pooled.plugin.store.statements.get(api.datasource, submitted["queryId"])
    assert statement is not None and statement.doc.job_id == job
    slot = pooled.read_slot()
    assert slot is not None
    if slot.doc.job_id == job:  # not refilled yet
        assert slot.doc.state == PoolJobState.SERVED and slot.doc.claim is not None
        assert slot.doc.claim.session_id == submitted["sessionId"]
    # the pool refills, and the session API lists its job as a pool job
    refill = pooled.idle_job(frozenset({job}))
    listed = api.http.get(f"{BASE}/_sessions").json()
    assert refill in [p["jobId"] for p in listed["poolJobs"]], listed
    assert all(p["state"] in ("starting", "idle", "claimed") for p in listed["poolJobs"])


def test_a_set_or_temporary_view_of_one_session_is_not_seen_by_the_next_claiming_session(pooled: Pooled) -> None:
    api = pooled.api
    first_job = pooled.idle_job()
    first, reply = api.run("SET spark.sql.shuffle.partitions=7")
    assert reply["status"] == "SUCCESS", reply
    sid = first["sessionId"]
    _, reply = api.run("CREATE TEMPORARY VIEW pool_private AS SELECT 42 AS answer", sid)
    assert reply["status"] == "SUCCESS", reply
    _, reply = api.run("SELECT answer FROM pool_private", sid)
    assert reply["datarows"] == [[42]], reply
    assert pooled.session(sid).job_id == first_job

    second_job = pooled.idle_job(frozenset({first_job}))
    second, reply = api.run("SET spark.sql.shuffle.partitions")
    assert pooled.session(second["sessionId"]).job_id == second_job != first_job
    assert reply["status"] == "SUCCESS" and reply["datarows"][0][1] != "7", reply
    _, reply = api.run("SELECT answer FROM pool_private", second["sessionId"])
    assert reply["status"] == "FAILED" and "pool_private" in reply["error"], reply
    # The first session's job still runs, and still has its view: the second is another job.
    _, reply = api.run("SELECT answer FROM pool_private", sid)
    assert reply["datarows"] == [[42]], reply
    assert pooled.session(sid).state == SessionState.RUNNING


def test_two_concurrent_new_sessions_with_a_pool_of_one_one_claims_the_idle_job_the_other_another(
    pooled: Pooled,
) -> None:
    api = pooled.api
    job = pooled.idle_job()
    with ThreadPoolExecutor(2) as threads:
        runs = list(threads.map(lambda n: api.run(f"SELECT {n} AS n"), (1, 2)))
    assert [reply["datarows"] for _, reply in runs] == [[[1]], [[2]]], runs
    sessions = [pooled.session(submitted["sessionId"]) for submitted, _ in runs]
    [on_idle] = [s for s in sessions if s.job_id == job]
    assert on_idle.pool_slot == pooled.slot
    # The other started a job of its own, or claimed the one refilling the slot when it looked
    # (a starting job is claimed before a cold start: docs/pool.md).
    [other] = [s for s in sessions if s.job_id != job]
    assert other.job_id and other.pool_slot in (None, pooled.slot)


def test_a_pool_job_killed_while_idle_is_replaced(pooled: Pooled) -> None:
    job = pooled.idle_job()
    pid = pooled.pid(job)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not group_members(pid), timeout=15, what="the killed job's processes to go")
    replacement = pooled.idle_job(frozenset({job}))
    assert replacement != job
    _, reply = pooled.api.run("SELECT 'warm' AS w")
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [["warm"]], reply


def test_a_pool_job_killed_between_its_claim_and_its_first_beat_fails_over_and_the_statement_answers(
    pooled: Pooled,
) -> None:
    api = pooled.api
    job = pooled.idle_job()
    pid = pooled.pid(job)
    os.killpg(pid, signal.SIGSTOP)  # it can no longer read its slot: the claim stays untaken
    try:
        submitted = api.submit("SELECT 'after the failover' AS x")
        session = pooled.session(submitted["sessionId"])
        assert (session.job_id, session.pool_slot, session.state) == (job, pooled.slot, SessionState.NOT_STARTED)
    finally:
        os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not group_members(pid), timeout=15, what="the killed job's processes to go")

    reply = api.wait_status(submitted["queryId"], {"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=READY_S)
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [["after the failover"]], reply
    after = pooled.session(submitted["sessionId"])
    assert after.job_id != job and job in after.exclude_job_ids and after.pool_slot == ""
    assert after.state == SessionState.RUNNING
