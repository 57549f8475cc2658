"""Scheduled refresh, the plugin's side (docs/flint.md, "Scheduled refresh"): statements routed by
their index's refresh mode, each tick claimed once and launched as a REFRESH of the index's owner
through the batch path, watched to its end, skipped, waiting, backed off; ALTER, DROP, RECOVER and
a disabled datasource changing the schedule. The in-memory twin, a RecordingLauncher and the
scheduler's clock driven by hand: the jobs' parts are played by writing their documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE
from async_query.datasources import Datasource, local_datasource
from async_query.launcher.base import JobRunState
from async_query.runtime import Plugin
from async_query.scheduler.owners import Owners
from async_query.scheduler.probe import SourceProbe
from async_query.scheduler.runs import PENDING_GRACE_MS, UNLAUNCHED_GRACE_MS, following_tick
from async_query.security.errors import ForbiddenError
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from query_core.errors import InvalidRequestError
from query_core.flint.metas import flint_meta
from query_core.flint.naming import latest_id
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import ResultDoc, ScheduleDoc, Versioned, now_millis
from query_core.states import FlintIndexState, ScheduleState, SessionState, SessionType, StatementState
from query_core.store import ScheduleTerms, Store
from tests.conftest import PluginFactory
from tests.support import FAST_HASHER, RecordingLauncher, job_beats, wait_for

DS = "local"
TABLE = f"{DS}.default.t"
INDEX = f"flint_{DS}_default_t_by_a_index"
MINUTE = 60_000
SCHEDULER = {
    "external_scheduler_enabled": True,
    "external_scheduler_interval": "1 minute",
    "external_scheduler_min_interval": "10 seconds",
    "external_scheduler_test_intervals": True,
    "external_scheduler_max_backoff": "5 minutes",
}


class Clock:
    """The scheduler's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = now_millis()

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def plugin(make_plugin: PluginFactory, clock: Clock) -> Plugin:
    return scheduled(make_plugin(**SCHEDULER), clock)


def scheduled(plugin: Plugin, clock: Clock) -> Plugin:
    """``plugin`` with its scheduler (and the statements' schedule writes) on ``clock``."""
    plugin.scheduler.clock = clock
    plugin.scheduler.runs.operations.clock = clock
    return plugin


# -- playing the jobs' parts ---------------------------------------------------------------------


def make_index(store: Store, options: dict[str, str], name: str = INDEX, source: str = TABLE) -> None:
    """What a CREATE's job leaves: the index with its ``_meta``, its state ``active``."""
    meta = {
        "version": "1.0.0",
        "name": "by_a",
        "kind": "covering",
        "source": source,
        "indexedColumns": [{"columnName": "a", "columnType": "int"}],
        "options": {"auto_refresh": "false", "incremental_refresh": "false", **options},
        "latestId": latest_id(name),
        "properties": {},
    }
    store.admin.create_index(name, {"mappings": {"_meta": meta, "properties": {}}})
    IndexTransaction(store, IndexTarget(DS, name), job_id="create-job").run("create", lambda: None)


SCHEDULED = {"auto_refresh": "true", "scheduler_mode": "external", "refresh_interval": "1 minute"}


def scheduled_index(plugin: Plugin, clock: Clock, owner: str = "") -> Versioned[ScheduleDoc]:
    """A scheduled index whose schedule is enabled, its first run due now."""
    make_index(plugin.store, SCHEDULED)
    terms = ScheduleTerms(DS, INDEX, "1 minute", MINUTE, owner, ("analyst",) if owner else (), refresh_of(INDEX))
    return plugin.store.schedules.enable(terms, next_run=clock.now, now=clock.now)


def refresh_of(index: str) -> str:
    return "REFRESH INDEX `by_a` ON `local`.`default`.`t`"


def schedule(store: Store) -> ScheduleDoc:
    found = store.schedules.of(INDEX)
    assert found is not None
    return found.doc


def tick(plugin: Plugin) -> None:
    """One round of the scheduler (the searches see every write: the twin refreshes now)."""
    plugin.store.index.refresh("*")
    plugin.scheduler.run_once()


def refreshes(launcher: RecordingLauncher) -> list[str]:
    return [r.conf.get("spark.flint.job.query", "") for r in launcher.started if r.session_type == SessionType.BATCH]


def finish_run(store: Store, success: bool = True, error: str = "boom") -> None:
    """The run's batch job: starts its session and statement, then ends both (the refresh's index
    operation moves ``active → refreshing → active`` meanwhile, as the job's does)."""
    run = schedule(store).run
    session = store.sessions.get(DS, run.session_id)
    assert session is not None
    session = job_beats(store, session)
    statement = store.statements.get(DS, run.query_id)
    assert statement is not None
    running = store.statements.start(statement)
    assert running is not None
    transaction = IndexTransaction(store, IndexTarget(DS, INDEX), job_id=run.job_id)
    if success:
        transaction.run("refresh", lambda: None)
        result = ResultDoc(query_id=run.query_id, status="SUCCESS", data_source_name=DS, job_type="batch")
        store.statements.settle(running, StatementState.SUCCESS, result=(f"query_execution_result_{DS}", result))
    else:
        with pytest.raises(RuntimeError):
            transaction.run("refresh", lambda: (_ for _ in ()).throw(RuntimeError(error)))
        store.statements.settle(running, StatementState.FAILED, error=error)
    store.sessions.end(session, SessionState.DEAD)


def kill_run(store: Store, launcher: RecordingLauncher) -> None:
    """The run's job killed -9 mid-refresh: its index left ``refreshing``, its heartbeat silent,
    its launcher saying it failed."""
    run = schedule(store).run
    session = store.sessions.get(DS, run.session_id)
    assert session is not None
    job_beats(store, session, age_ms=10 * MINUTE)
    current = IndexTransaction(store, IndexTarget(DS, INDEX)).current()
    assert current is not None
    from query_core.states import INDEX_OPERATIONS

    store.index_states.begin(current, INDEX_OPERATIONS["refresh"], job_id=run.job_id)
    launcher.state = JobRunState.FAILED


def index_state(store: Store) -> tuple[FlintIndexState, str]:
    found = store.index_states.get(DS, latest_id(INDEX))
    assert found is not None
    return found.doc.state, found.doc.error


def post(client: httpx.Client, query: str) -> httpx.Response:
    return client.post(BASE, json={"datasource": DS, "lang": "sql", "query": query})


def finished(plugin: Plugin, query_id: str) -> StatementState:
    """Wait for an index DML query (the plugin's own thread) to end; its state."""

    def ended() -> StatementState | None:
        found = plugin.store.statements.get(DS, query_id)
        return found.doc.state if found is not None and found.doc.state.value in ("success", "failed") else None

    return wait_for(ended, timeout=10, what=f"query {query_id} to end")


# -- a CREATE, its first run, and the runs that follow -------------------------------------------


def test_a_create_to_be_scheduled_is_a_batch_job_whose_index_is_then_refreshed_every_interval(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher, clock: Clock
) -> None:
    created = post(client, f"CREATE INDEX by_a ON {TABLE} (a) WITH (auto_refresh = true)")
    assert created.status_code == 201, created.text
    [create] = launcher.started
    assert create.session_type == SessionType.BATCH  # no stream: the index's refreshes are the scheduler's
    assert create.conf["spark.flint.job.externalScheduler.enabled"] == "true"
    armed = schedule(plugin.store)
    assert (armed.state, armed.interval, armed.interval_millis) == (ScheduleState.PENDING, "1 minute", MINUTE)

    tick(plugin)  # the index does not exist yet: nothing happens
    assert schedule(plugin.store).state == ScheduleState.PENDING
    make_index(plugin.store, SCHEDULED)
    tick(plugin)  # the CREATE has committed: enabled, its first run (the build) due at once
    enabled = schedule(plugin.store)
    assert (enabled.state, enabled.next_run_time) == (ScheduleState.ENABLED, clock.now)
    assert enabled.scheduled_query == refresh_of(INDEX)
    tick(plugin)
    assert refreshes(launcher) == [created_query(create), refresh_of(INDEX)]
    running = schedule(plugin.store)
    assert running.state == ScheduleState.RUNNING and running.run.query_id and running.runs == 1
    assert running.next_run_time == clock.now + MINUTE

    finish_run(plugin.store)
    tick(plugin)
    done = schedule(plugin.store)
    assert (done.state, done.last_outcome, done.failures) == (ScheduleState.ENABLED, "success", 0)
    assert index_state(plugin.store) == (FlintIndexState.ACTIVE, "")
    # No job between ticks: rounds before the next run launch nothing.
    for _ in range(3):
        clock.advance(15_000)
        tick(plugin)
    assert len(refreshes(launcher)) == 2
    clock.advance(MINUTE - 45_000)
    tick(plugin)
    assert len(refreshes(launcher)) == 3


def created_query(request: Any) -> str:
    return str(request.conf["spark.flint.job.query"])


def test_the_scheduler_s_refusals_are_400s_and_a_short_interval_streams(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher
) -> None:
    refused = post(client, f"CREATE INDEX by_a ON {TABLE} (a) WITH (auto_refresh = true, scheduler_mode = 'external', refresh_interval = '1 second')")
    assert refused.status_code == 400
    assert "required above the interval threshold of external scheduler: 10 seconds" in refused.json()["error"]["details"]
    assert launcher.started == [] and plugin.store.schedules.of(INDEX) is None
    streams = post(client, f"CREATE INDEX by_a ON {TABLE} (a) WITH (auto_refresh = true, refresh_interval = '1 second')")
    assert streams.status_code == 201
    assert [r.session_type for r in launcher.started] == [SessionType.STREAMING]
    internal = post(client, f"CREATE INDEX by_b ON {TABLE} (a) WITH (auto_refresh = true, scheduler_mode = 'internal')")
    assert internal.status_code == 201
    assert [r.session_type for r in launcher.started][-1] == SessionType.STREAMING


def test_with_the_scheduler_off_every_auto_refresh_streams_and_external_is_refused(make_plugin: PluginFactory) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, external_scheduler_enabled=False)
    plugin.service.submit(SubmitRequest(DS, "sql", f"CREATE INDEX by_a ON {TABLE} (a) WITH (auto_refresh = true)"))
    assert [r.session_type for r in launcher.started] == [SessionType.STREAMING]
    with pytest.raises(InvalidRequestError, match="external_scheduler_enabled is false but scheduler_mode is set to external"):
        plugin.service.submit(
            SubmitRequest(DS, "sql", f"CREATE INDEX by_b ON {TABLE} (a) WITH (auto_refresh = true, scheduler_mode = 'external')")
        )


# -- a run at a time, once across processes ---------------------------------------------------------


def test_a_tick_is_skipped_while_the_previous_run_still_runs(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    tick(plugin)
    assert len(refreshes(launcher)) == 1
    run = schedule(plugin.store).run
    job_beats(plugin.store, plugin.store.sessions.get(DS, run.session_id))  # type: ignore[arg-type]
    clock.advance(MINUTE + 1)
    tick(plugin)
    skipped = schedule(plugin.store)
    assert (skipped.state, skipped.skips, skipped.run.query_id) == (ScheduleState.RUNNING, 1, run.query_id)
    assert skipped.next_run_time == clock.now - 1 + MINUTE
    assert len(refreshes(launcher)) == 1


def test_two_plugin_processes_launch_each_tick_once(
    make_plugin: PluginFactory, clock: Clock, store: Store
) -> None:
    first_launcher, second_launcher = RecordingLauncher(), RecordingLauncher()
    first = scheduled(make_plugin(first_launcher, **SCHEDULER), clock)
    second = scheduled(make_plugin(second_launcher, **SCHEDULER), clock)
    scheduled_index(first, clock)
    for n in range(3):
        tick(first)
        tick(second)
        assert len(refreshes(first_launcher)) + len(refreshes(second_launcher)) == n + 1
        finish_run(store)
        for plugin in (second, first):  # the run of one is settled by whichever looks first
            tick(plugin)
        assert schedule(store).last_outcome == "success"
        clock.advance(MINUTE)
    assert schedule(store).runs == 3


def test_a_run_claimed_by_a_process_that_stopped_before_launching_fails_after_a_grace(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    found = scheduled_index(plugin, clock)
    plugin.store.schedules.claim(found, "gone-process", clock.now + MINUTE, now=clock.now)
    tick(plugin)
    assert schedule(plugin.store).state == ScheduleState.RUNNING
    clock.advance(UNLAUNCHED_GRACE_MS + 1)
    tick(plugin)
    failed = schedule(plugin.store)
    assert failed.last_outcome == "failed" and "stopped before launching" in failed.last_error
    assert refreshes(launcher) == []


def test_a_restarted_service_settles_the_run_its_predecessor_launched(
    make_plugin: PluginFactory, clock: Clock, store: Store
) -> None:
    before = scheduled(make_plugin(**SCHEDULER), clock)
    scheduled_index(before, clock)
    tick(before)
    before.close()
    finish_run(store)
    after = scheduled(make_plugin(**SCHEDULER), clock)
    tick(after)
    assert (schedule(store).state, schedule(store).last_outcome) == (ScheduleState.ENABLED, "success")


# -- failures, killed runs, back-off -----------------------------------------------------------------


def test_a_killed_run_is_recorded_failed_on_the_schedule_and_the_index_and_retried_at_the_next_tick(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    tick(plugin)
    query_id = schedule(plugin.store).run.query_id
    kill_run(plugin.store, launcher)
    tick(plugin)
    failed = schedule(plugin.store)
    assert (failed.state, failed.last_outcome, failed.failures) == (ScheduleState.ENABLED, "failed", 1)
    assert "is failed" in failed.last_error
    state, error = index_state(plugin.store)
    assert state == FlintIndexState.ACTIVE and "scheduled refresh" in error  # never left refreshing
    statement = plugin.store.statements.get(DS, query_id)
    assert statement is not None and statement.doc.state == StatementState.FAILED
    assert failed.next_run_time == clock.now + MINUTE  # the next tick, no back-off after one failure
    launcher.state = JobRunState.RUNNING
    clock.advance(MINUTE)
    tick(plugin)
    assert len(refreshes(launcher)) == 2


def test_repeated_failures_back_off_doubling_up_to_the_bound(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    waits = []
    for _ in range(5):
        tick(plugin)
        finish_run(plugin.store, success=False)
        tick(plugin)
        doc = schedule(plugin.store)
        waits.append(doc.next_run_time - clock.now)
        clock.now = doc.next_run_time
    assert waits == [MINUTE, 2 * MINUTE, 4 * MINUTE, 5 * MINUTE, 5 * MINUTE]
    assert schedule(plugin.store).failures == 5
    assert index_state(plugin.store) == (FlintIndexState.ACTIVE, "boom")  # the job's rollback recorded it
    tick(plugin)
    finish_run(plugin.store)
    tick(plugin)
    assert (schedule(plugin.store).failures, schedule(plugin.store).next_run_time - clock.now) == (0, MINUTE)


def test_a_run_without_a_free_refresh_share_waits_for_the_next_tick_with_the_reason(
    make_plugin: PluginFactory, clock: Clock
) -> None:
    launcher = RecordingLauncher()
    plugin = scheduled(make_plugin(launcher, max_refreshing_jobs=1, **SCHEDULER), clock)
    plugin.service.submit(SubmitRequest(DS, "sql", "REFRESH INDEX other ON t"))  # holds the one share
    scheduled_index(plugin, clock)
    tick(plugin)
    waiting = schedule(plugin.store)
    assert (waiting.state, waiting.last_outcome, waiting.failures) == (ScheduleState.ENABLED, "waiting", 0)
    assert "domain concurrent refresh job can not exceed 1" in waiting.last_error
    assert waiting.next_run_time == clock.now + MINUTE
    assert len(launcher.started) == 1


# -- owners ---------------------------------------------------------------------------------------


def test_a_run_is_its_owner_s_and_never_more_than_the_owner_may_do(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    hashed = FAST_HASHER.hash("password-1")
    users.write_text(json.dumps({"version": 1, "users": [{"name": "ana", "roles": ["analyst"], "hash": hashed}]}))
    owners = Owners("basic", users, ["all_access"])
    doc = ScheduleDoc(index_name=INDEX, data_source_name=DS, owner="ana", owner_roles=["all_access"])
    principal = owners.principal(doc)
    assert (principal.name, principal.roles, principal.is_admin) == ("ana", frozenset({"analyst"}), False)
    with pytest.raises(ForbiddenError, match=r"bob, the owner of .* is no longer a user"):
        owners.principal(doc.model_copy(update={"owner": "bob"}))
    cluster = Owners("cluster", users, ["all_access"]).principal(doc.model_copy(update={"owner_roles": ["analyst"]}))
    assert cluster.roles == frozenset({"analyst"})  # what was recorded when the schedule was turned on
    with pytest.raises(ForbiddenError, match="turned on without authentication"):
        Owners("basic", users, ["all_access"]).principal(doc.model_copy(update={"owner": ""}))


def test_a_run_whose_owner_lost_the_datasource_fails_with_the_reason(make_plugin: PluginFactory, clock: Clock) -> None:
    launcher = RecordingLauncher()
    guarded = local_datasource(DS).model_copy(update={"allowed_roles": ["lake-readers"]})
    plugin = scheduled(make_plugin(launcher, datasources=[guarded], **SCHEDULER), clock)
    plugin.scheduler.runs.owners = Owners("cluster", Path("unused"), ["all_access"])
    scheduled_index(plugin, clock, owner="ana")
    tick(plugin)
    failed = schedule(plugin.store)
    assert failed.last_outcome == "failed" and "not authorized to access datasource" in failed.last_error
    assert launcher.started == []


def test_the_batch_path_counts_a_run_against_its_owner_s_share(make_plugin: PluginFactory, clock: Clock) -> None:
    open_to_analysts = local_datasource(DS).model_copy(update={"allowed_roles": ["analyst"]})
    limits = {"max_refreshing_jobs": 4, "max_refreshing_jobs_per_user": 1}
    plugin = scheduled(make_plugin(datasources=[open_to_analysts], **limits, **SCHEDULER), clock)
    plugin.scheduler.runs.owners = Owners("cluster", Path("unused"), ["all_access"])
    ana = Principal.of("ana", ["analyst"])
    plugin.service.submit(SubmitRequest(DS, "sql", "REFRESH INDEX other ON t", principal=ana))
    scheduled_index(plugin, clock, owner="ana")
    tick(plugin)
    assert "user concurrent refresh job can not exceed 1" in schedule(plugin.store).last_error
    statement_owners = {s.doc.submitted_by for s in plugin.store.statements.search(DS)}
    assert statement_owners == {"ana"}


# -- statements that change a schedule -------------------------------------------------------------


def test_alter_of_the_interval_takes_effect_at_the_next_tick(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    tick(plugin)
    finish_run(plugin.store)
    tick(plugin)
    launched_at = schedule(plugin.store).last_run_time
    altered = post(client, f"ALTER INDEX by_a ON {TABLE} WITH (auto_refresh = true, refresh_interval = '5 minutes')")
    assert finished(plugin, altered.json()["queryId"]) == StatementState.SUCCESS
    assert len(launcher.started) == 1  # the plugin's own work: no job
    doc = schedule(plugin.store)
    assert (doc.interval, doc.interval_millis, doc.next_run_time) == ("5 minutes", 5 * MINUTE, launched_at + 5 * MINUTE)
    assert flint_meta(plugin.store.admin, INDEX)["options"]["refresh_interval"] == "5 minutes"  # type: ignore[index]
    clock.advance(MINUTE)
    tick(plugin)
    assert len(refreshes(launcher)) == 1  # the old interval's tick passed: nothing
    clock.now = launched_at + 5 * MINUTE
    tick(plugin)
    assert len(refreshes(launcher)) == 2


def test_alter_to_manual_refresh_and_drop_stop_the_schedule(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    tick(plugin)  # a run is on: the ALTER stops its job
    run = schedule(plugin.store).run
    job_beats(plugin.store, plugin.store.sessions.get(DS, run.session_id))  # type: ignore[arg-type]
    altered = post(client, f"ALTER INDEX by_a ON {TABLE} WITH (auto_refresh = false)")
    assert finished(plugin, altered.json()["queryId"]) == StatementState.SUCCESS
    assert launcher.cancelled == [run.job_id]
    assert schedule(plugin.store).state == ScheduleState.DISABLED
    assert flint_meta(plugin.store.admin, INDEX)["options"]["auto_refresh"] == "false"  # type: ignore[index]
    assert index_state(plugin.store)[0] == FlintIndexState.ACTIVE
    clock.advance(10 * MINUTE)
    tick(plugin)
    assert len(refreshes(launcher)) == 1
    # DROP of a scheduled index disables its schedule too (VACUUM, a job, removes it).
    plugin.store.schedules.enable(ScheduleTerms(DS, INDEX, "1 minute", MINUTE), next_run=clock.now)
    dropped = post(client, f"DROP INDEX by_a ON {TABLE}")
    assert finished(plugin, dropped.json()["queryId"]) == StatementState.SUCCESS
    assert schedule(plugin.store).state == ScheduleState.DISABLED
    tick(plugin)
    assert len(refreshes(launcher)) == 1


def test_alter_hands_a_manual_index_to_the_scheduler_and_back_to_a_stream(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher, clock: Clock
) -> None:
    make_index(plugin.store, {})
    to_scheduler = post(client, f"ALTER INDEX by_a ON {TABLE} WITH (auto_refresh = true, refresh_interval = '2 minutes')")
    assert finished(plugin, to_scheduler.json()["queryId"]) == StatementState.SUCCESS
    assert launcher.started == []
    doc = schedule(plugin.store)
    assert (doc.state, doc.interval, doc.next_run_time) == (ScheduleState.ENABLED, "2 minutes", clock.now)
    options = flint_meta(plugin.store.admin, INDEX)["options"]  # type: ignore[index]
    assert (options["scheduler_mode"], options["auto_refresh"]) == ("external", "true")
    to_stream = post(client, f"ALTER INDEX by_a ON {TABLE} WITH (auto_refresh = true, scheduler_mode = 'internal')")
    assert to_stream.status_code == 201
    assert [r.session_type for r in launcher.started] == [SessionType.STREAMING]
    # Its job writes the stream's options: the scheduler then finds the index no longer its own.
    meta = flint_meta(plugin.store.admin, INDEX) or {}
    plugin.store.admin.put_mapping_meta(INDEX, {**meta, "options": {**options, "scheduler_mode": "internal"}})
    tick(plugin)
    assert schedule(plugin.store).state == ScheduleState.DISABLED
    assert refreshes(launcher) == []


def test_recover_enables_a_scheduled_index_again_and_forgets_its_failures(
    plugin: Plugin, client: httpx.Client, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock, owner="ana")
    tick(plugin)
    finish_run(plugin.store, success=False)
    tick(plugin)
    plugin.store.schedules.disable(INDEX, "datasource disabled for a while")
    recovered = post(client, f"RECOVER INDEX JOB {INDEX}")
    assert finished(plugin, recovered.json()["queryId"]) == StatementState.SUCCESS
    doc = schedule(plugin.store)
    assert (doc.state, doc.failures, doc.next_run_time, doc.owner) == (ScheduleState.ENABLED, 0, clock.now, "ana")
    assert len(launcher.started) == 1  # the plugin's own work


def test_recover_of_a_scheduled_index_whose_table_is_another_catalog_s_is_refused(
    plugin: Plugin, client: httpx.Client
) -> None:
    # Its name begins as this datasource's indexes' do; its table is in catalog local_x.
    make_index(plugin.store, SCHEDULED, source="local_x.default.t")
    recovered = post(client, f"RECOVER INDEX JOB {INDEX}")
    assert finished(plugin, recovered.json()["queryId"]) == StatementState.FAILED
    statement = plugin.store.statements.get(DS, recovered.json()["queryId"])
    assert statement is not None and "is of catalog 'local_x'" in statement.doc.error
    assert plugin.store.schedules.of(INDEX) is None


def test_a_disabled_datasource_alters_its_scheduled_indexes_to_manual_and_a_deleted_one_drops_them(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    disabled = plugin.datasources.get(DS).model_copy(update={"status": "DISABLED"})
    plugin.datasources.find = lambda name: disabled if name == DS else None  # type: ignore[method-assign]
    tick(plugin)
    assert schedule(plugin.store).state == ScheduleState.DISABLED
    assert f"datasource {DS} is disabled" in schedule(plugin.store).last_error
    assert flint_meta(plugin.store.admin, INDEX)["options"]["auto_refresh"] == "false"  # type: ignore[index]
    assert refreshes(launcher) == []
    meta = flint_meta(plugin.store.admin, INDEX) or {}
    plugin.store.admin.put_mapping_meta(INDEX, {**meta, "options": {**meta["options"], **SCHEDULED}})
    plugin.store.schedules.enable(ScheduleTerms(DS, INDEX, "1 minute", MINUTE), next_run=clock.now)
    plugin.datasources.find = lambda name: None  # type: ignore[method-assign]
    tick(plugin)
    assert index_state(plugin.store)[0] == FlintIndexState.DELETED
    assert schedule(plugin.store).state == ScheduleState.DISABLED


def test_a_schedule_whose_index_is_gone_is_disabled_at_its_tick(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock
) -> None:
    scheduled_index(plugin, clock)
    plugin.store.admin.delete_index(INDEX)
    tick(plugin)
    gone = schedule(plugin.store)
    assert gone.state == ScheduleState.DISABLED and f"index {INDEX} no longer exists" in gone.last_error
    assert refreshes(launcher) == []


def test_a_pending_schedule_whose_create_made_no_index_is_removed_after_a_grace(
    plugin: Plugin, client: httpx.Client, clock: Clock
) -> None:
    assert post(client, f"CREATE INDEX by_a ON {TABLE} (a) WITH (auto_refresh = true)").status_code == 201
    clock.advance(PENDING_GRACE_MS - 1000)
    tick(plugin)
    assert schedule(plugin.store).state == ScheduleState.PENDING
    clock.advance(PENDING_GRACE_MS)
    tick(plugin)
    assert plugin.store.schedules.of(INDEX) is None


# -- the source probe --------------------------------------------------------------------------------


def test_an_unchanged_source_launches_no_job_and_a_change_does(
    plugin: Plugin, launcher: RecordingLauncher, clock: Clock, tmp_path: Path
) -> None:
    table_dir = tmp_path / "warehouse" / "t"
    table_dir.mkdir(parents=True)
    (table_dir / "part-0.parquet").write_bytes(b"0")
    (table_dir / "_SUCCESS").write_bytes(b"")
    plugin.scheduler.runs.probe = SourceProbe(lambda ds, table: table_dir.as_uri() if table == TABLE else None)
    scheduled_index(plugin, clock)
    tick(plugin)
    finish_run(plugin.store)
    tick(plugin)
    for _ in range(3):
        clock.advance(MINUTE)
        tick(plugin)
    idle = schedule(plugin.store)
    assert len(refreshes(launcher)) == 1 and idle.last_outcome == "unchanged"
    (table_dir / "part-1.parquet").write_bytes(b"1")
    clock.advance(MINUTE)
    tick(plugin)
    assert len(refreshes(launcher)) == 2


def test_the_probe_tells_changes_and_cannot_tell_what_it_does_not_see(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (table / "year=2025").mkdir(parents=True)
    (table / "year=2025" / "a.parquet").write_bytes(b"a")
    probe = SourceProbe(lambda ds, name: table.as_uri())
    ds = Datasource(name=DS)
    first = probe.fingerprint(ds, [TABLE])
    assert first is not None and first == probe.fingerprint(ds, [TABLE])
    (table / "_temporary").mkdir()
    (table / ".a.parquet.crc").write_bytes(b"x")
    assert probe.fingerprint(ds, [TABLE]) == first  # Hadoop's hidden files are not data
    (table / "year=2025" / "a.parquet").write_bytes(b"ab")
    assert probe.fingerprint(ds, [TABLE]) != first
    assert SourceProbe(lambda ds, name: "s3://bucket/t").fingerprint(ds, [TABLE]) is None
    assert SourceProbe(lambda ds, name: None).fingerprint(ds, [TABLE]) is None
    assert SourceProbe(lambda ds, name: table.as_uri(), max_files=0).fingerprint(ds, [TABLE]) is None
    assert probe.fingerprint(ds, []) is None


# -- what is shown ----------------------------------------------------------------------------------


def test_show_flint_indexes_extended_shows_mode_interval_and_runs(plugin: Plugin, clock: Clock) -> None:
    from async_query.catalog.statements import ShowFlintIndex

    assert plugin.catalog is not None
    scheduled_index(plugin, clock)
    tick(plugin)
    finish_run(plugin.store)
    tick(plugin)
    answer = plugin.catalog.answer(plugin.datasources.get(DS), ShowFlintIndex(None, True))
    assert answer is not None
    names = [name for name, _ in answer.columns]
    row = dict(zip(names, answer.rows[0], strict=True))
    assert (row["scheduler_mode"], row["refresh_interval"], row["last_run_outcome"]) == ("external", "1 minute", "success")
    assert row["last_run_time"].endswith("Z") and row["next_run_time"] > row["last_run_time"]


# -- the schedule's arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("due", "now", "expected"),
    [(0, 0, 10), (0, 5, 10), (0, 10, 20), (0, 35, 40), (50, 20, 60)],
)
def test_missed_ticks_are_not_made_up_for(due: int, now: int, expected: int) -> None:
    assert following_tick(due, 10, now) == expected


def test_of_two_claims_of_one_tick_at_one_version_one_wins() -> None:
    store = Store.in_memory(0)
    terms = ScheduleTerms(DS, INDEX, "1 minute", MINUTE, "ana", ("analyst",), refresh_of(INDEX))
    enabled = store.schedules.enable(terms, next_run=1000, now=1000)
    claims = [store.schedules.claim(enabled, f"p{n}", 61_000, now=1000) for n in range(2)]
    assert [c is not None for c in claims] == [True, False]
    assert schedule(store).run.claimed_by == "p0" and schedule(store).next_run_time == 61_000
