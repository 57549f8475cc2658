"""Streaming queries on the plugin's side, against a real index server: the limit of refreshing
jobs held race-free by slot documents across plugin processes, GET from documents without
launcher calls, and the streaming housekeeper stopping streams whose datasource or index is gone
or disabled. The streaming jobs are played by the test (:class:`tests.support.StandInStream`)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import JobRunState
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query.slots import REFRESHING_JOBS, SLOTS_INDEX, Holder, Slots
from query_core.errors import LauncherError, TooManyRequestsError
from query_core.flint import latest_id
from query_core.flint.metas import flint_metas
from query_core.models import FlintIndexStateDoc, SessionDoc, now_millis
from query_core.states import FlintIndexState, SessionState, SessionType
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, StandInStream, job_beats, seed

CREATE = "CREATE INDEX idx{n} ON local.default.t (a) WITH (auto_refresh = true)"
F = FlintIndexState


def create(plugin: Plugin, n: int = 0, ds: str | None = None) -> str:
    ds = ds or plugin.datasources.all()[0].name
    return plugin.service.submit(SubmitRequest(ds, "sql", CREATE.format(n=n))).query_id


# -- the limit of refreshing jobs --------------------------------------------------------------------


def test_two_plugin_processes_never_take_more_slots_than_the_limit(
    make_plugin: PluginFactory, store: Store
) -> None:
    """Two services on one index (two plugin processes) race 12 CREATEs for 3 slots: exactly 3 run,
    although none of the new sessions is searchable when the others count."""
    launchers = [RecordingLauncher(), RecordingLauncher()]
    plugins = [make_plugin(launcher, max_refreshing_jobs=3) for launcher in launchers]
    start = threading.Barrier(12)
    outcomes: list[str] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        plugin = plugins[n % 2]
        start.wait()
        try:
            create(plugin, n)
            outcome = "accepted"
        except TooManyRequestsError as exc:
            outcome = exc.message
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["accepted"] * 3 + ["domain concurrent refresh job can not exceed 3"] * 9
    assert sum(len(launcher.started) for launcher in launchers) == 3
    assert len([h for h in Slots(store, REFRESHING_JOBS, lambda: 3).holders() if h is not None]) == 3


def test_a_slot_frees_when_its_session_ends_or_its_launch_fails(
    make_plugin: PluginFactory, store: Store
) -> None:
    class FailingOnce(RecordingLauncher):
        failed = False

        def start(self, request: Any) -> str:
            if not self.failed:
                self.failed = True
                raise LauncherError("no capacity")
            return super().start(request)

    plugin = make_plugin(FailingOnce(), max_refreshing_jobs=1)
    ds = plugin.datasources.all()[0].name
    with pytest.raises(LauncherError):
        create(plugin)
    first = create(plugin)  # the failed launch gave its slot back at once
    with pytest.raises(TooManyRequestsError):
        create(plugin, 1)

    statement = store.statements.get(ds, first)
    assert statement is not None
    session = store.sessions.get(ds, statement.doc.session_id)
    assert session is not None
    store.sessions.end(session, SessionState.DEAD)
    store.index.refresh("*")  # what follows finds them by a search
    assert not store.sessions.find(ds, [SessionState.NOT_STARTED])
    create(plugin, 2)  # no write released the slot: the ended session did


def test_a_slot_taken_for_a_session_never_recorded_is_free_after_the_grace(store: Store, ds_name: str) -> None:
    slots = Slots(store, REFRESHING_JOBS, lambda: 1)
    assert slots.take(Holder(ds_name, "never-written")) == 0
    with pytest.raises(TooManyRequestsError):
        slots.take(Holder(ds_name, "second"))
    found = store.index.get(SLOTS_INDEX, "refresh-slot-0")
    assert found is not None
    store.index.update_if(SLOTS_INDEX, "refresh-slot-0", {"lastUpdateTime": now_millis() - 600_000}, found.version)
    assert slots.take(Holder(ds_name, "second")) == 0


def test_a_slot_held_by_a_job_that_died_silently_is_taken_once_its_launcher_confirms(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, max_refreshing_jobs=1)
    ds = plugin.datasources.all()[0].name
    statement = store.statements.get(ds, create(plugin))
    assert statement is not None
    session = store.sessions.get(ds, statement.doc.session_id)
    assert session is not None
    job_beats(store, session, 600_000, heartbeat_interval_millis=1_000)
    launcher.state = JobRunState.FAILED  # killed: no heartbeat, and the launcher knows

    create(plugin, 1)

    assert launcher.described == ["job-1"]
    ended = store.sessions.get(ds, statement.doc.session_id)
    assert ended is not None and ended.doc.state == SessionState.DEAD
    assert len(launcher.started) == 2


# -- GET -----------------------------------------------------------------------------------------------


def test_get_of_a_streaming_query_asks_the_launcher_nothing_while_the_heartbeat_is_fresh(
    make_plugin: PluginFactory, store: Store
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher)
    ds = plugin.datasources.all()[0].name
    query_id = create(plugin)
    statement = store.statements.get(ds, query_id)
    assert statement is not None
    session = store.sessions.get(ds, statement.doc.session_id)
    assert session is not None
    job_beats(store, session, heartbeat_interval_millis=60_000)
    for _ in range(1_000):
        assert json.loads(plugin.service.get(query_id))["status"] == "WAITING"
    assert launcher.described == []


# -- the streaming housekeeper -------------------------------------------------------------------------


def streaming_index(store: Store, ds: str, index: str, job_id: str) -> str:
    """A live streaming session refreshing ``index`` (as the job leaves them); its session id."""
    assert store.admin.create_index(index, {"mappings": {"_meta": {"kind": "covering", "options": {"auto_refresh": "true"}}}})
    session = seed(store,
        SessionDoc(
            session_id=f"s-{index}",
            session_type=SessionType.STREAMING,
            data_source_name=ds,
            state=SessionState.RUNNING,
            job_id=job_id,
            heartbeat_interval_millis=60_000,
        )
    )
    seed(store,
        FlintIndexStateDoc(
            latest_id=latest_id(index), data_source_name=ds, index_name=index, state=F.REFRESHING, job_id=job_id
        )
    )
    store.index.refresh("*")  # what follows finds them by a search
    assert store.index_states.find(ds, [F.REFRESHING], job_id=job_id)
    return session.doc.session_id


def test_the_streaming_housekeeper_stops_streams_whose_datasource_or_index_went(
    make_plugin: PluginFactory, store: Store, datasource: Datasource
) -> None:
    plugin = make_plugin(RecordingLauncher(), stream_stop_timeout_s=10)
    configured = datasource.name
    plugin.datasources.create(Datasource(name="gone", connector="local"))
    plugin.datasources.create(Datasource(name="paused", connector="local"))
    streams = {
        "deleted": ("gone", "flint_gone_db_t_a_index", "job-1"),
        "disabled": ("paused", "flint_paused_db_t_a_index", "job-2"),
        "index gone": (configured, f"flint_{configured}_db_t_b_index", "job-3"),
        "healthy": (configured, f"flint_{configured}_db_t_c_index", "job-4"),
    }
    sessions = {name: streaming_index(store, ds, index, job) for name, (ds, index, job) in streams.items()}
    plugin.datasources.delete("gone")
    plugin.datasources.update(Datasource(name="paused", connector="local", status="DISABLED"))
    store.admin.delete_index(streams["index gone"][1])

    jobs = [StandInStream(store, ds, sessions[name], latest_id(index)) for name, (ds, index, _) in streams.items()]
    for job in jobs:
        job.__enter__()
    try:
        plugin.streaming_housekeeper.run_once()
    finally:
        for job in jobs:
            job.__exit__()

    def state(name: str) -> F:
        ds, index, _ = streams[name]
        found = store.index_states.get(ds, latest_id(index))
        assert found is not None
        return found.doc.state

    assert state("deleted") == F.DELETED
    assert state("disabled") == F.ACTIVE
    assert flint_metas(store.admin, streams["disabled"][1])[streams["disabled"][1]]["options"]["auto_refresh"] == "false"
    assert state("index gone") == F.DELETED
    assert state("healthy") == F.REFRESHING
    assert sorted(plugin.streaming_housekeeper.stopped) == [
        "datasource gone was deleted",
        "datasource paused is disabled",
        f"index {streams['index gone'][1]} no longer exists",
    ]
    assert [job.stopped.is_set() for job in jobs] == [True, True, True, False]
    assert plugin.stream_stopper.cancelled == 0
