"""Scheduled refresh through the REST API alone, with real spark-submit jobs and the shared catalog
(docs/flint.md, "Scheduled refresh"): a covering index created with ``auto_refresh = true`` is
built and then refreshed by batch jobs at each tick, with no job running between ticks (the
launcher's list of live jobs says so); a refresh killed with ``kill -9`` is recorded failed and the
next tick runs; the schedule survives a restart of the service, and two plugin processes on one
index launch each tick once; an ALTER of the interval takes effect at the next tick; ALTER to
manual refresh, DROP and VACUUM end it.

The tests run in order on one index (each tick a Spark job: they share what they can). The
interval is short (a test setting allows it) and the scheduler looks every half second. The
source is fingerprinted through the catalog (its files): a tick that finds it unchanged starts no job.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest

from async_query.embedded.metastore import Metastore
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin
from query_core.flint.naming import latest_id
from query_core.models import ScheduleDoc
from query_core.states import FlintIndexState, ScheduleState, SessionType
from query_core.store import Query, Term
from tests.e2e.conftest import Api, shared_catalog_service
from tests.faults.procs import group_members, job_pid
from tests.support import wait_for

pytestmark = pytest.mark.e2e
T = TypeVar("T")
DS = "local"
TABLE = f"{DS}.default.scheduled_events"
INDEX = f"flint_{DS}_default_scheduled_events_pages_index"
INTERVAL_MS = 10_000
SETTINGS: dict[str, Any] = {
    "external_scheduler_enabled": True,
    "external_scheduler_interval": "10 seconds",
    "external_scheduler_min_interval": "5 seconds",
    "external_scheduler_test_intervals": True,
    "external_scheduler_tick_s": 0.5,
    "liveness_cache_s": 0.5,
    # A run's job beats every 2 s however idle: its death is confirmed within seconds.
    "heartbeat_idle_ms": 2_000,
}
#: A run: a JVM's start, then the refresh (the machine may be busy with other tests' jobs).
RUN_S = 150


class Deployment:
    """Plugin processes of one deployment over one index, catalog and data directory, each running
    its scheduler; stopped at the end (or when a test restarts them)."""

    def __init__(self, metastore: Metastore, index_url: str, tmp: Path) -> None:
        self.metastore, self.index_url, self.tmp = metastore, index_url, tmp
        self.stacks: list[ExitStack] = []
        self.services: list[tuple[Api, Plugin]] = []

    def start(self) -> tuple[Api, Plugin]:
        stack = ExitStack()
        served = stack.enter_context(shared_catalog_service(self.metastore, self.index_url, self.tmp, DS, **SETTINGS))
        served[1].scheduler.start()
        self.stacks.append(stack)
        self.services.append(served)
        return served

    def stop_all(self) -> None:
        while self.stacks:
            self.stacks.pop().close()
        self.services.clear()


@pytest.fixture(scope="module")
def deployment(
    metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    found = Deployment(metastore, module_index_url, tmp_path_factory.mktemp("scheduled"))
    found.start()
    try:
        yield found
    finally:
        found.stop_all()


def api_and_plugin(deployment: Deployment) -> tuple[Api, Plugin]:
    return deployment.services[0]


def ok(api: Api, query: str, session_id: str | None = None) -> dict[str, Any]:
    submitted, reply = api.run(query, session_id, timeout=RUN_S)
    assert reply["status"] == "SUCCESS", (query, reply)
    return submitted


class Events:
    """The source table, written from an interactive session of the deployment's first service
    (a new one after a restart)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.session = ""
        self.count = 0
        self._run(f"CREATE TABLE {TABLE} (page STRING, n INT) USING parquet")

    def _run(self, query: str) -> None:
        submitted = ok(api_and_plugin(self.deployment)[0], query, self.session or None)
        self.session = str(submitted["sessionId"])

    def insert(self, n: int = 1) -> list[str]:
        pages = [f"/p{self.count + i}" for i in range(n)]
        self.count += n
        self._run(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"('{p}', 1)" for p in pages))
        return pages


@pytest.fixture(scope="module")
def events(deployment: Deployment) -> Events:
    return Events(deployment)


def schedule(svc: Plugin) -> ScheduleDoc:
    found = svc.store.schedules.of(INDEX)
    assert found is not None
    return found.doc


def indexed(svc: Plugin) -> set[str]:
    if not svc.store.admin.index_exists(INDEX):
        return set()
    return {str(source["page"]) for _, source in svc.store.admin.scan(INDEX)}


def until(probe: Callable[[], T | None], what: str, timeout: float = RUN_S) -> T:
    return wait_for(probe, timeout=timeout, interval=0.1, what=what)


def refresh_jobs_running(svc: Plugin) -> list[str]:
    """The live local jobs (the launcher's list) that are this index's refreshes or its CREATE."""
    launcher = svc.launchers.shared["local"]
    assert isinstance(launcher, LocalLauncher)
    live = set(launcher.live_jobs())
    svc.store.index.refresh(f".query_execution_request_{DS}")
    batch = svc.store.sessions.search(DS, Term("sessionType", SessionType.BATCH.value), size=1000)
    return sorted(s.doc.job_id for s in batch if s.doc.job_id in live)


def refresh_statements(svc: Plugin) -> list[str]:
    """The REFRESH statements submitted for the index (a search: refreshed first)."""
    svc.store.index.refresh(f".query_execution_request_{DS}")
    found = svc.store.index.search(f".query_execution_request_{DS}", Query((Term("type", "statement"),), size=1000))
    return [f.doc_id for f in found if str(f.source.get("query", "")).startswith("REFRESH INDEX `pages`")]


def settled_after(svc: Plugin, runs: int, outcome: str = "success") -> Callable[[], ScheduleDoc | None]:
    """The schedule once its ``runs``-th run has ended with ``outcome``."""

    def probe() -> ScheduleDoc | None:
        doc = schedule(svc)
        return doc if doc.runs >= runs and doc.state == ScheduleState.ENABLED and doc.last_outcome == outcome else None

    return probe


def mid_refresh(svc: Plugin, runs: int) -> Callable[[], ScheduleDoc | None]:
    """The schedule once a run after the ``runs``-th is mid-refresh (its job has moved the index to
    ``refreshing``), or has ended already."""

    def probe() -> ScheduleDoc | None:
        doc = schedule(svc)
        if doc.runs <= runs:
            return None
        state = svc.store.index_states.get(DS, latest_id(INDEX))
        refreshing = state is not None and state.doc.state is FlintIndexState.REFRESHING
        if doc.state == ScheduleState.RUNNING and refreshing and state is not None and doc.run.job_id == state.doc.job_id:
            return doc
        return doc if doc.state == ScheduleState.ENABLED else None

    return probe


def round_after(svc: Plugin, at: float) -> Callable[[], bool]:
    return lambda: svc.scheduler.last_run_ms > at


def ticked_after(svc: Plugin, tick: int) -> Callable[[], ScheduleDoc | None]:
    """The schedule once its next run is past ``tick``."""

    def probe() -> ScheduleDoc | None:
        doc = schedule(svc)
        return doc if doc.next_run_time > tick else None

    return probe


# -- the tests, in order ---------------------------------------------------------------------------


def test_rows_added_to_the_source_appear_after_the_next_tick_with_no_job_running_between_ticks(
    deployment: Deployment, events: Events
) -> None:
    api, svc = api_and_plugin(deployment)
    first = events.insert(2)
    created = ok(api, f"CREATE INDEX pages ON {TABLE} (page, n) WITH (auto_refresh = true)")
    assert set(created) == {"queryId"}
    built = until(settled_after(svc, 1), "the index's first scheduled run (its build)")
    assert (built.interval, built.owner) == ("10 seconds", "")
    assert indexed(svc) == set(first)
    state = svc.store.index_states.get(DS, latest_id(INDEX))
    assert state is not None and state.doc.state is FlintIndexState.ACTIVE  # idle between runs, no stream

    # Between ticks no refresh job runs: once the run's job has exited, and through the next tick,
    # which finds the source unchanged (no job is started for it).
    until(lambda: not refresh_jobs_running(svc), "the first run's job to exit", timeout=30)
    while (doc := schedule(svc)).last_outcome != "unchanged":
        assert refresh_jobs_running(svc) == [], "a job ran between ticks"
        assert doc.state == ScheduleState.ENABLED and doc.runs == built.runs
        assert time.time() * 1000 < built.next_run_time + 2 * INTERVAL_MS, "no tick came"
        time.sleep(0.2)
    assert refresh_jobs_running(svc) == [] and schedule(svc).runs == built.runs

    added = events.insert(1)
    written = time.monotonic()
    until(lambda: set(added) <= indexed(svc), "the new row in the index")
    lag_ms = (time.monotonic() - written) * 1000
    done = until(settled_after(svc, 2), "the second run to settle")
    took = done.last_end_time - done.last_run_time
    assert lag_ms <= INTERVAL_MS + took + 5_000, (lag_ms, took)  # the next tick, and one refresh


def test_a_refresh_killed_minus_9_is_recorded_failed_and_the_next_tick_runs(
    deployment: Deployment, events: Events
) -> None:
    _, svc = api_and_plugin(deployment)
    data_dir = Path(svc.settings.data_dir)
    for _ in range(3):  # a run that finishes before its kill is tried again at the next tick
        # Counted before the insert: a tick may claim the run for the new row before the insert's
        # statement is seen to end (its file is there first), and no tick after that run finds a
        # change to run for.
        runs = schedule(svc).runs
        added = events.insert(1)
        doc = until(mid_refresh(svc, runs), "a run to be mid-refresh")
        if doc.state == ScheduleState.RUNNING:
            break
    assert doc.state == ScheduleState.RUNNING, "no run could be caught mid-refresh"
    pgid = job_pid(data_dir, doc.run.job_id)
    os.killpg(pgid, signal.SIGKILL)
    until(lambda: not group_members(pgid), "the killed job to be gone", timeout=30)

    failed = until(settled_after(svc, doc.runs, "failed"), "the killed run to be recorded failed", timeout=60)
    assert failed.failures == 1 and doc.run.job_id in failed.last_error
    state = svc.store.index_states.get(DS, latest_id(INDEX))
    assert state is not None and state.doc.state is FlintIndexState.ACTIVE  # never left refreshing
    assert f"The scheduled refresh (job {doc.run.job_id}) failed" in state.doc.error
    until(lambda: set(added) <= indexed(svc), "the row, at the next tick")
    assert until(settled_after(svc, doc.runs + 1), "the next run to succeed").failures == 0


def test_the_schedule_survives_a_restart_two_processes_run_each_tick_once_and_alter_of_the_interval_takes_effect(
    deployment: Deployment, events: Events
) -> None:
    deployment.stop_all()  # the service stops; its schedule is in the index
    api, first = deployment.start()
    _, second = deployment.start()
    runs = schedule(first).runs
    assert runs == len(refresh_statements(first))

    ok(api, f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = true, refresh_interval = '5 seconds')")
    altered = schedule(first)
    assert (altered.interval, altered.interval_millis) == ("5 seconds", 5_000)
    # The next tick after the ALTER comes one new interval after the one before it.
    tick = altered.next_run_time
    passed = until(ticked_after(first, tick), "the tick after the ALTER")
    assert (passed.next_run_time - tick) % 5_000 == 0

    added = events.insert(1)
    until(lambda: set(added) <= indexed(first), "the row, after a restart, at a tick of the new interval")
    done = until(settled_after(first, runs + 1), "the run to settle")
    # Both processes looked at every tick; each launched REFRESH is one run, each run one REFRESH.
    assert first.scheduler.last_run_ms > 0 and second.scheduler.last_run_ms > 0
    assert len(refresh_statements(first)) == done.runs == runs + 1


def test_alter_to_manual_refresh_drop_and_vacuum_end_the_schedule(deployment: Deployment, events: Events) -> None:
    api, svc = deployment.services[0]
    ok(api, f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = false)")
    stopped = schedule(svc)
    assert stopped.state == ScheduleState.DISABLED
    added = events.insert(1)
    looked = time.time() * 1000 + 2 * 5_000
    for _, plugin in deployment.services:  # both schedulers ran a round past two ticks
        until(round_after(plugin, looked), "a scheduler round past two ticks", 60)
    assert schedule(svc).runs == stopped.runs and not set(added) & indexed(svc)
    assert refresh_jobs_running(svc) == []
    ok(api, f"DROP INDEX pages ON {TABLE}")
    assert schedule(svc).state == ScheduleState.DISABLED
    ok(api, f"VACUUM INDEX pages ON {TABLE}")
    assert svc.store.schedules.of(INDEX) is None and not svc.store.admin.index_exists(INDEX)
