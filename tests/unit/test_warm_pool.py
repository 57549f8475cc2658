"""The warm pool on the plugin's side, with launchers that start nothing: which pool a datasource
claims from, the keeper's refills, checks, scale-down and stop, the claim (one conditional write,
one winner), and the fresh start of a session whose claimed job died before it took it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from async_query.datasources import Datasource, local_datasource
from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.launcher.local import LocalLauncher
from async_query.pool import Pool
from async_query.runtime import Plugin
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from query_core.config import OpenSearchConfig
from query_core.errors import LauncherError
from query_core.ids import DEPLOYMENT_INDEX, default_result_index
from query_core.jobconf import KEYS, PASSWORD_KEY, POOL_SLOT_KEY, is_claim_key
from query_core.models import PoolJobDoc, SessionDoc, Versioned, now_millis
from query_core.states import PoolJobState, SessionState, StatementState
from query_core.store import Store, Version
from query_core.store.pool import slot_id
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher


@dataclass
class JobsLauncher(RecordingLauncher):
    """A recording launcher that answers ``describe`` per job (running unless told otherwise)."""

    states: dict[str, JobRunState] = field(default_factory=dict)
    refuse: bool = False

    def start(self, request: JobRequest) -> str:
        if self.refuse:
            raise LauncherError("no capacity")
        return super().start(request)

    def describe(self, job_id: str) -> JobDescription:
        self.described.append(job_id)
        return JobDescription(job_id, self.states.get(job_id, JobRunState.RUNNING))


def pooled(make_plugin: PluginFactory, launcher: Launcher | None = None, **settings: Any) -> Plugin:
    return make_plugin(launcher or JobsLauncher(), **{"warm_pool_size": 1, **settings})


def only_pool(plugin: Plugin) -> Pool:
    [pool] = plugin.pools.all()
    return pool


def slot_of(plugin: Plugin, n: int = 0) -> Versioned[PoolJobDoc]:
    found = plugin.store.pool.slot(slot_id(only_pool(plugin).key, n))
    assert found is not None
    return found


def ready(plugin: Plugin, n: int = 0, interval_ms: int = 30_000) -> Versioned[PoolJobDoc]:
    """The slot's job reports ready, as the pool job does once warmed up."""
    done = plugin.store.pool.ready(slot_of(plugin, n), interval_ms)
    assert done is not None
    return done


def silent_slot(plugin: Plugin, n: int, for_ms: int, field: str = "lastUpdateTime") -> None:
    """The slot's job last beat (or, with ``field`` ``jobStartTime``, was launched) ``for_ms`` ago,
    written as the index would hold it."""
    slot = slot_of(plugin, n)
    version = Version(slot.seq_no, slot.primary_term)
    plugin.store.index.update_if(DEPLOYMENT_INDEX, slot.doc.slot_id, {field: now_millis() - for_ms}, version)


def new_session(plugin: Plugin, query: str = "SELECT 1") -> tuple[str, SessionDoc]:
    ds = plugin.datasources.all()[0].name
    submitted = plugin.service.submit(SubmitRequest(ds, "sql", query))
    session = plugin.store.sessions.get(ds, submitted.session_id)
    assert session is not None
    return submitted.query_id, session.doc


# -- which pool -----------------------------------------------------------------------------------


def key(plugin: Plugin, datasource: Datasource) -> str | None:
    return plugin.pools.key_of(datasource, plugin.launchers.for_datasource(datasource))


def test_start_up_settings_decide_the_pool_runtime_ones_do_not(make_plugin: PluginFactory, tmp_path: Path) -> None:
    plugin = pooled(make_plugin, LocalLauncher(tmp_path, "aq"))

    def variant(name: str = "a", **update: object) -> Datasource:
        return local_datasource(name).model_copy(update=update)

    base = variant()
    same = variant(spark_conf={"spark.sql.shuffle.partitions": "4"})
    allowed = variant(properties={"engine": "local", "validation.allow": "FILE"})
    memory = variant(spark_conf={"spark.driver.memory": "2g"})
    catalog = variant(spark_conf={"spark.sql.catalogImplementation": "in-memory"})
    master = variant(properties={"engine": "local", "master": "local[1]"})
    assert key(plugin, base) == key(plugin, same) == key(plugin, allowed)
    assert len({key(plugin, base), key(plugin, memory), key(plugin, catalog), key(plugin, master)}) == 4
    # Each local datasource has a catalog of its own: another one never claims from this pool.
    assert key(plugin, variant("other")) != key(plugin, base)


def test_datasources_of_one_pool_share_it_at_the_largest_size_asked(make_plugin: PluginFactory) -> None:
    small = local_datasource("a").model_copy(update={"properties": {"engine": "local", "warmPoolSize": "0"}})
    large = local_datasource("b").model_copy(update={"properties": {"engine": "local", "warmPoolSize": "3"}})
    plugin = make_plugin(JobsLauncher(), datasources=[small, large])
    [pool] = plugin.pools.all()
    assert (pool.size, pool.datasource.name) == (3, "a")
    # the datasource that asks for none may still claim from the pool its settings share
    assert plugin.pools.of(small) == pool


@pytest.mark.parametrize("size", ["-1", "65", "two", "1.5", "٣"])
def test_a_pool_size_property_must_be_a_small_whole_number(size: str) -> None:
    with pytest.raises(ValidationError, match="warmPoolSize"):
        local_datasource("a").model_copy(update={"properties": {}}).model_validate(
            {"name": "a", "connector": "local", "properties": {"warmPoolSize": size}}
        )


def test_the_deployment_default_is_one_for_local_spark(make_plugin: PluginFactory) -> None:
    plugin = make_plugin(JobsLauncher(), warm_pool_size=None)
    assert only_pool(plugin).size == 1
    assert [pool.size for pool in make_plugin(JobsLauncher(), warm_pool_size=0).pools.all()] == [0]


# -- the keeper: refills ----------------------------------------------------------------------------


def test_the_keeper_takes_each_slot_then_launches_its_job_with_the_start_up_conf_alone(
    make_plugin: PluginFactory,
) -> None:
    launcher = JobsLauncher()
    spark_conf = {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"}
    ds = local_datasource("local").model_copy(update={"spark_conf": spark_conf})
    plugin = make_plugin(launcher, datasources=[ds], warm_pool_size=2)
    plugin.pool_keeper.run_once()

    assert len(launcher.started) == 2
    for n, request in enumerate(launcher.started):
        slot = slot_of(plugin, n)
        assert (slot.doc.state, slot.doc.job_id, slot.doc.slot) == (PoolJobState.STARTING, f"job-{n + 1}", n)
        assert request.pool_slot == request.conf[POOL_SLOT_KEY] == slot.doc.slot_id
        assert request.result_index == "-" and request.job_name("aq") == f"aq:pool:{slot.doc.slot_id}"
        # no session, no datasource, no runtime setting: those come with the claim
        assert "spark.flint.job.sessionId" not in request.conf and "spark.flint.datasource.name" not in request.conf
        assert request.conf["spark.driver.memory"] == "2g"
        assert not [k for k in request.conf if k not in KEYS and is_claim_key(k)]
    plugin.pool_keeper.run_once()
    assert len(launcher.started) == 2  # the slots hold live jobs


def test_two_plugin_processes_refilling_one_slot_launch_one_job(make_plugin: PluginFactory) -> None:
    launchers = [JobsLauncher(), JobsLauncher()]
    plugins = [pooled(make_plugin, launcher) for launcher in launchers]
    start = threading.Barrier(2)

    def refill(plugin: Plugin) -> None:
        start.wait()
        plugin.pool_keeper.run_once()

    threads = [threading.Thread(target=refill, args=(p,)) for p in plugins]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sum(len(launcher.started) for launcher in launchers) == 1


def test_a_failed_launch_ends_the_slot_with_its_error_and_the_pool_backs_off(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher(refuse=True)
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    slot = slot_of(plugin)
    assert slot.doc.state == PoolJobState.DEAD and "no capacity" in slot.doc.error
    launcher.refuse = False
    plugin.pool_keeper.run_once()
    assert launcher.started == [] and slot_of(plugin).doc.state == PoolJobState.DEAD  # backing off
    plugin.pool_keeper._not_before.clear()
    plugin.pool_keeper.run_once()
    assert len(launcher.started) == 1 and slot_of(plugin).doc.state == PoolJobState.STARTING


def test_an_idle_job_gone_silent_is_confirmed_dead_with_one_describe_and_replaced(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    ready(plugin, interval_ms=30_000)
    plugin.pool_keeper.run_once()
    assert launcher.described == []  # fresh: its documents vouch for it

    silent_slot(plugin, 0, 100_000)  # past its heartbeat limit (3 beats of 30 s)
    launcher.states["job-1"] = JobRunState.FAILED
    plugin.pool_keeper.run_once()
    assert launcher.described == ["job-1"]
    assert [r.pool_slot for r in launcher.started] == [slot_of(plugin).doc.slot_id] * 2
    assert (slot_of(plugin).doc.state, slot_of(plugin).doc.job_id) == (PoolJobState.STARTING, "job-2")


def test_a_job_that_never_gets_ready_is_stopped_past_the_start_up_limit(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher, session_start_timeout_s=60)
    plugin.pool_keeper.run_once()
    silent_slot(plugin, 0, 100_000, "jobStartTime")  # launched past the start-up limit, never ready
    plugin.pool_keeper.run_once()
    assert "job-1" in launcher.cancelled
    assert [r.pool_slot for r in launcher.started][-1] == slot_of(plugin).doc.slot_id
    assert slot_of(plugin).doc.job_id != "job-1"


def test_scale_down_ends_and_stops_the_unclaimed_jobs_of_the_slots_beyond_the_size(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = JobsLauncher()
    plugin = make_plugin(launcher, datasources=[local_datasource("local")], warm_pool_size=0)
    plugin.datasources.create(Datasource(name="lake", connector="local", properties={"warmPoolSize": "3"}))
    plugin.pool_keeper.run_once()
    for n in range(3):
        ready(plugin, n)
    _, session = new_session_in(plugin, "lake")
    store.index.refresh("*")

    plugin.datasources.update(Datasource(name="lake", connector="local", properties={"warmPoolSize": "1"}))
    plugin.pool_keeper.run_once()
    for n in range(3):
        doc = slot_of(plugin, n).doc
        if doc.slot_id == session.pool_slot:
            assert doc.state == PoolJobState.CLAIMED and doc.job_id not in launcher.cancelled  # its session's
        elif n == 0:
            assert doc.state == PoolJobState.IDLE and doc.job_id not in launcher.cancelled
        else:
            assert doc.state == PoolJobState.DEAD and "smaller" in doc.error and doc.job_id in launcher.cancelled
    assert len(launcher.started) == 3  # nothing refilled beyond the size


def new_session_in(plugin: Plugin, ds: str) -> tuple[str, SessionDoc]:
    submitted = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1"))
    session = plugin.store.sessions.get(ds, submitted.session_id)
    assert session is not None
    return submitted.query_id, session.doc


def test_a_pool_no_datasource_uses_any_more_is_stopped(make_plugin: PluginFactory, store: Store) -> None:
    launcher = JobsLauncher()
    plugin = make_plugin(launcher, datasources=[local_datasource("local")], warm_pool_size=0)
    own = {"spark.driver.memory": "2g"}  # start-up settings of its own: a pool of its own
    plugin.datasources.create(
        Datasource(name="lake", connector="local", properties={"warmPoolSize": "1"}, spark_conf=own)
    )
    plugin.pool_keeper.run_once()
    [pool] = [p for p in plugin.pools.all() if p.size]
    store.index.refresh("*")
    plugin.datasources.delete("lake")
    plugin.pool_keeper.run_once()
    slot = plugin.store.pool.slot(slot_id(pool.key, 0))
    assert slot is not None and slot.doc.state == PoolJobState.DEAD and "no datasource" in slot.doc.error
    assert launcher.cancelled == ["job-1"]


def test_the_service_s_stop_stops_the_unclaimed_jobs_it_launched(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher, warm_pool_size=2)
    plugin.pool_keeper.run_once()
    ready(plugin, 0)
    ready(plugin, 1)
    _, session = new_session(plugin)
    plugin.close()
    docs = [slot_of(plugin, n).doc for n in range(2)]
    claimed = [d for d in docs if d.slot_id == session.pool_slot]
    stopped = [d for d in docs if d.slot_id != session.pool_slot]
    assert [d.state for d in claimed] == [PoolJobState.CLAIMED]
    assert [(d.state, d.error) for d in stopped] == [(PoolJobState.DEAD, "the service stopped")]
    assert launcher.cancelled == [stopped[0].job_id]


# -- the claim --------------------------------------------------------------------------------------


def test_a_new_session_claims_the_idle_job_with_what_it_must_learn_and_no_secret(
    make_plugin: PluginFactory, store: Store, datasource: Datasource, tmp_path: Any
) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    ready(plugin, interval_ms=4_000)
    query_id, session = new_session(plugin)

    assert len(launcher.started) == 1  # the pool job: no cold start
    slot = slot_of(plugin)
    assert (session.job_id, session.pool_slot, session.state) == ("job-1", slot.doc.slot_id, SessionState.NOT_STARTED)
    assert session.heartbeat_interval_millis == 4_000 and session.application_id == "test-app"
    claim = slot.doc.claim
    assert slot.doc.state == PoolJobState.CLAIMED and claim is not None
    assert (claim.session_id, claim.data_source_name, claim.result_index) == (
        session.session_id,
        datasource.name,
        default_result_index(datasource.name),
    )
    assert claim.conf["spark.flint.job.sessionId"] == session.session_id
    assert claim.conf["spark.flint.datasource.name"] == datasource.name
    assert claim.conf["spark.sql.session.timeZone"] == "UTC"
    assert all(is_claim_key(k) for k in claim.conf)
    statement = store.statements.get(datasource.name, query_id)
    assert statement is not None and statement.doc.job_id == "job-1"
    # the keeper, woken, refills the slot once the job has taken its claim
    assert plugin.store.pool.serve(slot) is not None
    plugin.pool_keeper.run_once()
    assert [r.pool_slot for r in launcher.started] == [slot.doc.slot_id] * 2


def test_a_claim_never_carries_the_index_password(make_plugin: PluginFactory, store: Store, tmp_path: Any) -> None:
    from async_query.datasources import DatasourceRegistry
    from async_query.runtime import build_plugin
    from async_query.settings import Settings

    launcher = JobsLauncher()
    opensearch = OpenSearchConfig(url="http://127.0.0.1:9", auth="basic", username="svc", password="pa55-w0rd")
    settings = Settings(data_dir=tmp_path / "var", warm_pool_size=1)
    plugin = build_plugin(
        settings, store, DatasourceRegistry([local_datasource()], store), {"local": launcher}, opensearch
    )
    try:
        plugin.pool_keeper.run_once()
        assert launcher.started[0].secret_conf == {PASSWORD_KEY: "pa55-w0rd"}
        assert PASSWORD_KEY not in launcher.started[0].conf
        ready(plugin)
        new_session(plugin)
        assert "pa55-w0rd" not in str(
            store.index.get(".query_execution_request__deployment", slot_of(plugin).doc.slot_id)
        )
    finally:
        plugin.close()


def test_a_starting_job_is_claimed_when_none_is_idle(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    _, session = new_session(plugin)
    assert (session.job_id, session.heartbeat_interval_millis) == ("job-1", 0)  # its start-up limit applies
    assert len(launcher.started) == 1


def test_an_empty_pool_means_a_cold_start(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    _, session = new_session(plugin)
    assert session.pool_slot is None and session.heartbeat_interval_millis == plugin.settings.heartbeat_idle_ms
    [request] = launcher.started
    assert request.pool_slot == "" and request.conf["spark.flint.job.sessionId"] == session.session_id


def test_two_new_sessions_racing_for_a_pool_of_one_one_claims_the_other_starts_cold(
    make_plugin: PluginFactory,
) -> None:
    launchers = [JobsLauncher(), JobsLauncher()]
    plugins = [pooled(make_plugin, launcher) for launcher in launchers]
    plugins[0].pool_keeper.run_once()
    ready(plugins[0])
    start = threading.Barrier(2)
    sessions: list[SessionDoc] = []

    def post(plugin: Plugin) -> None:
        start.wait()
        sessions.append(new_session(plugin)[1])

    threads = [threading.Thread(target=post, args=(p,)) for p in plugins]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(s.pool_slot is not None for s in sessions) == [False, True]
    assert sum(len(launcher.started) for launcher in launchers) == 2  # the pool job, one cold job


def test_a_job_whose_process_is_gone_is_not_claimed_where_asking_is_free(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    launcher.describe_is_free = True
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    ready(plugin)
    launcher.states["job-1"] = JobRunState.FAILED
    _, session = new_session(plugin)
    assert session.pool_slot is None and session.job_id == "job-2"


def test_a_batch_query_never_claims(make_plugin: PluginFactory) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()
    ready(plugin)
    plugin.service.submit(SubmitRequest("local", "sql", "REFRESH SKIPPING INDEX ON t"))
    assert slot_of(plugin).doc.state == PoolJobState.IDLE and len(launcher.started) == 2


# -- a claimed job dies before it takes its session ---------------------------------------------------


def silent(store: Store, session: SessionDoc, for_ms: int) -> None:
    """Nothing has moved the session for ``for_ms``: its claim (or launch) lies that far back."""
    current = store.sessions.get(session.data_source_name, session.session_id)
    assert current is not None
    store.sessions.beat(current, at=now_millis() - for_ms)


def test_a_claimed_job_gone_before_it_started_the_session_is_replaced_and_the_statement_stays(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher, liveness_cache_s=0)
    plugin.pool_keeper.run_once()
    ready(plugin, interval_ms=1_000)
    query_id, session = new_session(plugin)
    silent(store, session, 10_000)  # past its heartbeat limit (3 beats of the job's 1 s), not taken
    launcher.states["job-1"] = JobRunState.FAILED

    reply = plugin.service.get(query_id)
    assert b'"WAITING"' in reply
    plugin.signals.flush()
    after = store.sessions.get("local", session.session_id)
    assert after is not None
    doc = after.doc
    assert (doc.state, doc.job_id, doc.exclude_job_ids, doc.pool_slot) == (
        SessionState.NOT_STARTED,
        "job-2",
        ["job-1"],
        "",
    )
    cold = launcher.started[-1]
    assert cold.pool_slot == "" and cold.conf["spark.flint.job.sessionId"] == session.session_id
    statement = store.statements.get("local", query_id)
    assert statement is not None and statement.doc.state == StatementState.WAITING
    assert query_id in doc.pending_statement_ids
    # the new job is the session's: if it too dies at start-up, the session ends as before
    silent(store, doc, int(plugin.settings.session_start_timeout_s * 1000) + 1_000)
    launcher.states["job-2"] = JobRunState.FAILED
    current = store.sessions.get("local", doc.session_id)
    assert current is not None and plugin.liveness.check(current).doc.state == SessionState.DEAD


def test_a_job_started_for_its_session_that_dies_at_start_up_still_ends_it(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher, liveness_cache_s=0, session_start_timeout_s=5)
    query_id, session = new_session(plugin)
    silent(store, session, 10_000)
    launcher.states[session.job_id] = JobRunState.FAILED
    assert b'"FAILED"' in plugin.service.get(query_id)
    assert len(launcher.started) == 1


# -- listing -----------------------------------------------------------------------------------------


def test_pool_jobs_are_listed_for_admins_only(make_plugin: PluginFactory, store: Store) -> None:
    plugin = pooled(make_plugin)
    plugin.pool_keeper.run_once()
    store.index.refresh("*")
    [listed] = plugin.service.pool_jobs()
    assert listed.state == PoolJobState.STARTING and listed.job_id == "job-1"
    assert plugin.service.pool_jobs(principal=Principal.of("bob", ["analysts"])) == []


@dataclass
class MovingMetastore:
    """A ``local`` metastore that, while the service waits for it, starts again on another port
    (another user took its first one), as :class:`async_query.embedded.metastore.Metastore` does."""

    uri: str = "thrift://127.0.0.1:40001"


@dataclass
class MovingCatalogs:
    metastore: MovingMetastore = field(default_factory=MovingMetastore)
    moves: bool = True

    def running(self) -> dict[str, MovingMetastore]:
        return {"local": self.metastore}

    def wait_ready(self, datasource: str) -> None:
        if self.moves:
            self.metastore.uri = "thrift://127.0.0.1:40002"


@pytest.mark.parametrize("moves", [True, False])
def test_pool_jobs_launched_before_their_metastore_moved_are_replaced(make_plugin: PluginFactory, moves: bool) -> None:
    from async_query.runtime import _wait_for_metastore

    launcher = JobsLauncher()
    plugin = pooled(make_plugin, launcher)
    plugin.pool_keeper.run_once()  # launched at the service's start, beside the metastore's
    first = slot_of(plugin).doc.job_id
    _wait_for_metastore(MovingCatalogs(moves=moves), plugin)  # type: ignore[arg-type]
    if not moves:
        assert launcher.cancelled == [] and slot_of(plugin).doc.state != PoolJobState.DEAD
        return
    assert launcher.cancelled == [first]
    assert slot_of(plugin).doc.state == PoolJobState.DEAD and "another port" in slot_of(plugin).doc.error
    plugin.pool_keeper.run_once()
    assert slot_of(plugin).doc.job_id not in ("", first)  # refilled: a job given the new address
