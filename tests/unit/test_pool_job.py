"""The warm pool job's side, without Spark: it waits for its slot, announces itself ready, beats,
takes a claim and becomes the claiming session's job; it ends on its slot's end, its idle limit or
a stop. The session it learns from its claim is configured from the claim alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from flint_repl_job.config import JobConfig
from flint_repl_job.runners import apply_runtime_conf
from flint_repl_job.runners.pool import PoolJob
from query_core.jobconf import JobConf, render_conf, split_conf
from query_core.models import PoolClaim, PoolJobDoc, Versioned
from query_core.states import PoolJobState, SessionState, SessionType
from query_core.store import Store
from query_core.store.pool import slot_id
from tests.support import wait_for

SLOT = slot_id("0123456789abcdef", 0)
JOB = "job-7"


def pool_config(**fields: Any) -> JobConfig:
    return JobConfig(
        session_id="",
        datasource="",
        result_index="-",
        request_index="",
        job_id=JOB,
        pool_slot=SLOT,
        loop_frequency_ms=5,
        heartbeat_idle_ms=30,
        session_wait_ms=2_000,
        **fields,
    )


@dataclass
class Run:
    """A pool job run in a thread; ``became`` holds the claims it ran."""

    job: PoolJob
    thread: threading.Thread
    became: list[PoolClaim] = field(default_factory=list)
    result: list[SessionState | None] = field(default_factory=list)

    def ended(self) -> bool:
        return not self.thread.is_alive()


@pytest.fixture
def run_job(store: Store) -> Iterator[Any]:
    runs: list[Run] = []

    def start(cfg: JobConfig | None = None, warm_up: Any = lambda: None) -> Run:
        became: list[PoolClaim] = []

        def become(claim: PoolClaim) -> SessionState:
            became.append(claim)
            return SessionState.DEAD

        job = PoolJob(cfg or pool_config(), store, become, warm_up=warm_up)
        run = Run(job, threading.Thread(target=lambda: run.result.append(job.run()), daemon=True), became)
        run.thread.start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.job.stop_event.set()
        run.thread.join(timeout=10)


def reserve(store: Store, job_id: str = JOB) -> Versioned[PoolJobDoc]:
    """The slot as the keeper writes it: taken, then naming the launched job."""
    reserved = store.pool.reserve(None, PoolJobDoc(slot_id=SLOT, pool_key="0123456789abcdef", slot=0))
    assert reserved is not None
    launched = store.pool.launched(reserved, job_id, "app-1")
    assert launched is not None
    return launched


def current(store: Store) -> PoolJobDoc:
    found = store.pool.slot(SLOT)
    assert found is not None
    return found.doc


def claim_for(session_id: str = "c2Vzc2lvbjE=") -> PoolClaim:
    return PoolClaim(session_id=session_id, data_source_name="lake", result_index="query_execution_result_lake")


def test_the_job_gets_ready_beats_and_becomes_the_claiming_session_s_job(store: Store, run_job: Any) -> None:
    reserve(store)
    run = run_job()
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")
    first = current(store).last_update_time
    wait_for(lambda: current(store).last_update_time > first, timeout=10, what="a heartbeat")
    assert current(store).heartbeat_interval_millis == 30

    found = store.pool.slot(SLOT)
    assert found is not None
    assert store.pool.claim(found, claim_for()) is not None
    wait_for(run.ended, timeout=10, what="the job to run its session")
    assert run.became == [claim_for()] and run.result == [SessionState.DEAD]
    assert current(store).state == PoolJobState.SERVED


def test_a_failed_warm_up_still_leaves_the_job_ready(store: Store, run_job: Any) -> None:
    def broken() -> None:
        raise RuntimeError("metastore unreachable")

    reserve(store)
    run_job(warm_up=broken)
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")


def test_a_job_claimed_while_it_was_starting_takes_the_claim_without_warming_up(store: Store, run_job: Any) -> None:
    """A session waits already: the warm-up would only delay its first statement, which warms the
    job up as well."""
    warmed: list[bool] = []
    launched = reserve(store)
    assert store.pool.claim(launched, claim_for()) is not None
    run = run_job(warm_up=lambda: warmed.append(True))
    wait_for(run.ended, timeout=10, what="the job to run its session")
    assert run.became == [claim_for()] and current(store).state == PoolJobState.SERVED
    assert warmed == []


def test_an_unclaimed_job_warms_up_before_it_is_ready(store: Store, run_job: Any) -> None:
    warmed: list[PoolJobState] = []
    reserve(store)
    run_job(warm_up=lambda: warmed.append(current(store).state))
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")
    assert warmed == [PoolJobState.STARTING]


def test_the_job_waits_for_its_slot_to_name_it(store: Store, run_job: Any) -> None:
    reserved = store.pool.reserve(None, PoolJobDoc(slot_id=SLOT, pool_key="0123456789abcdef", slot=0))
    assert reserved is not None
    run = run_job()
    assert not run.ended() and current(store).state == PoolJobState.STARTING  # still being launched
    assert store.pool.launched(reserved, JOB, "app-1") is not None
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")


def test_a_slot_holding_another_job_ends_the_job_without_touching_it(store: Store, run_job: Any) -> None:
    reserve(store, job_id="job-other")
    run = run_job()
    wait_for(run.ended, timeout=10, what="the job to end")
    assert run.result == [None] and run.became == []
    assert (current(store).state, current(store).job_id) == (PoolJobState.STARTING, "job-other")


def test_a_slot_ended_by_the_plugin_ends_the_job(store: Store, run_job: Any) -> None:
    reserve(store)
    run = run_job()
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")
    found = store.pool.slot(SLOT)
    assert found is not None and store.pool.end(found, "the pool was made smaller") is not None
    wait_for(run.ended, timeout=10, what="the job to end")
    assert run.result == [None] and run.became == []


def test_an_unclaimed_job_ends_itself_at_its_idle_limit(store: Store, run_job: Any) -> None:
    reserve(store)
    run = run_job(pool_config(pool_idle_limit_ms=50))
    wait_for(run.ended, timeout=10, what="the job to end")
    assert run.result == [None]
    assert current(store).state == PoolJobState.DEAD and "unclaimed" in current(store).error


def test_a_stopped_job_ends_its_slot(store: Store, run_job: Any) -> None:
    reserve(store)
    run = run_job()
    wait_for(lambda: current(store).state == PoolJobState.IDLE, timeout=10, what="the job to be ready")
    run.job.stop_event.set()
    wait_for(run.ended, timeout=10, what="the job to end")
    assert current(store).state == PoolJobState.DEAD and current(store).error == "the job was stopped"


# -- what the claimed session is configured from ------------------------------------------------------


def test_the_claimed_session_reads_the_claim_s_keys_from_the_claim_alone() -> None:
    started = render_conf(
        JobConf(
            pool_slot=SLOT,
            host="search.internal",
            port=9201,
            inactivity_limit_ms=5_000,
            validation_denied=("FILE",),
            heartbeat_idle_ms=1_000,
        )
    )
    session_conf = render_conf(
        JobConf(session_id="c2Vzc2lvbjE=", datasource="lake", job_type=SessionType.INTERACTIVE, heartbeat_idle_ms=2_000)
    )
    startup, claimed = split_conf({**session_conf, "spark.sql.shuffle.partitions": "3", "spark.driver.memory": "4g"})
    assert "spark.driver.memory" in startup and "spark.sql.shuffle.partitions" in claimed
    cfg = JobConfig.claimed(
        started.get,
        PoolClaim(
            session_id="c2Vzc2lvbjE=", data_source_name="lake", result_index="query_execution_result_lake", conf=claimed
        ),
        {},
    )
    assert (cfg.session_id, cfg.datasource, cfg.result_index) == ("c2Vzc2lvbjE=", "lake", "query_execution_result_lake")
    assert cfg.request_index == ".query_execution_request_lake"
    assert cfg.opensearch.url == "http://search.internal:9201"  # the start-up connection kept
    assert cfg.heartbeat_idle_ms == 2_000  # the claim's
    assert cfg.inactivity_limit_ms == 180_000  # absent from the claim: the default, not the start-up value
    assert cfg.validation.denied == frozenset()  # nor the start-up denied list


class RecordedConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeSpark:
    def __init__(self) -> None:
        self.conf = RecordedConf()


def test_a_claim_sets_runtime_settings_and_can_set_nothing_fixed_at_start_up() -> None:
    spark = FakeSpark()
    apply_runtime_conf(spark, {"spark.flint.job.sessionId": "s", "spark.sql.shuffle.partitions": "3"})
    assert spark.conf.values == {"spark.sql.shuffle.partitions": "3"}
    with pytest.raises(ValueError, match=r"spark\.jars"):
        apply_runtime_conf(spark, {"spark.jars": "/tmp/evil.jar"})
