"""The stream watcher: a streaming job gone silent is confirmed dead with one ``describe`` once its
own staleness limit passes, and its index fails with the cause, without the housekeeping sweep.
The streaming jobs are played by the test (their heartbeats are written here)."""

from __future__ import annotations

import threading

from async_query.launcher.base import JobRunState
from async_query.runtime import Plugin
from query_core.flint import latest_id
from query_core.models import FlintIndexStateDoc, SessionDoc, now_millis
from query_core.states import FlintIndexState, SessionState, SessionType
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, seed, wait_for

INDEX = "flint_local_default_events_pages_index"


def live_stream(store: Store, ds: str, interval_ms: int, job_id: str = "job-s") -> str:
    """A running streaming session beating every ``interval_ms`` and the index its job refreshes."""
    session = seed(
        store,
        SessionDoc(
            session_id="s-stream",
            session_type=SessionType.STREAMING,
            data_source_name=ds,
            state=SessionState.RUNNING,
            job_id=job_id,
            heartbeat_interval_millis=interval_ms,
        ),
    )
    seed(
        store,
        FlintIndexStateDoc(
            latest_id=latest_id(INDEX),
            data_source_name=ds,
            index_name=INDEX,
            state=FlintIndexState.REFRESHING,
            job_id=job_id,
        ),
    )
    store.index.refresh("*")  # the watcher and the index lookup search
    return session.doc.session_id


def age(store: Store, ds: str, session_id: str, ms: int) -> None:
    """The session's last heartbeat, ``ms`` ago."""
    current = store.sessions.get(ds, session_id)
    assert current is not None
    store.sessions.beat(current, at=now_millis() - ms)


def index_state(store: Store, ds: str) -> FlintIndexStateDoc:
    found = store.index_states.get(ds, latest_id(INDEX))
    assert found is not None
    return found.doc


def setup(
    make_plugin: PluginFactory, state: JobRunState, **settings: float
) -> tuple[Plugin, RecordingLauncher, str]:
    launcher = RecordingLauncher(state=state)
    plugin = make_plugin(launcher, **settings)
    return plugin, launcher, plugin.datasources.all()[0].name


def test_a_silent_stream_whose_job_is_gone_fails_its_index_with_the_cause(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin, launcher, ds = setup(make_plugin, JobRunState.FAILED, stream_watch_interval_s=60)
    session_id = live_stream(store, ds, interval_ms=10_000)
    watcher = plugin.stream_watcher

    watcher.run_once()  # fresh: nothing asked, and the next look is due when it would turn stale
    assert launcher.described == [] and index_state(store, ds).state == FlintIndexState.REFRESHING
    assert 29 < watcher.wait_s() <= 30.1  # three beats of 10 s

    age(store, ds, session_id, 31_000)  # the job was killed: no beat since
    store.index.refresh("*")
    watcher.run_once()

    assert launcher.described == ["job-s"]
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.DEAD
    state = index_state(store, ds)
    assert state.state == FlintIndexState.FAILED
    assert state.error.startswith("The stream refreshing this index stopped: job job-s (streaming session s-stream)")
    assert "is failed" in state.error  # the launcher's word on the job
    assert watcher.failed == [INDEX]
    assert plugin.housekeeper.stalled_indexes.repaired == 0


def test_a_silent_stream_whose_job_still_runs_is_left_alone(make_plugin: PluginFactory, store: Store) -> None:
    plugin, launcher, ds = setup(make_plugin, JobRunState.RUNNING)
    session_id = live_stream(store, ds, interval_ms=10_000)
    age(store, ds, session_id, 31_000)
    store.index.refresh("*")

    plugin.stream_watcher.run_once()
    plugin.stream_watcher.run_once()  # the launcher's answer is reused

    assert launcher.described == ["job-s"]
    session = store.sessions.get(ds, session_id)
    assert session is not None and session.doc.state == SessionState.RUNNING
    assert index_state(store, ds).state == FlintIndexState.REFRESHING


def test_a_stale_search_hit_is_read_again_before_the_launcher_is_asked(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin, launcher, ds = setup(make_plugin, JobRunState.FAILED)
    session_id = live_stream(store, ds, interval_ms=10_000)
    age(store, ds, session_id, 31_000)
    store.index.refresh("*")
    age(store, ds, session_id, 0)  # a beat the search does not see yet

    plugin.stream_watcher.run_once()

    assert launcher.described == []
    assert index_state(store, ds).state == FlintIndexState.REFRESHING


def test_a_session_another_process_ended_has_its_index_failed_without_asking_the_launcher(
    make_plugin: PluginFactory, store: Store
) -> None:
    """Another plugin process (a GET's liveness check, say) ended the session; the search still
    shows it running and stale: its index is failed with that end's cause."""
    plugin, launcher, ds = setup(make_plugin, JobRunState.FAILED)
    session_id = live_stream(store, ds, interval_ms=10_000)
    age(store, ds, session_id, 31_000)
    store.index.refresh("*")
    current = store.sessions.get(ds, session_id)
    assert current is not None
    store.sessions.end(current, SessionState.DEAD, "Job job-s of session s-stream is failed")

    plugin.stream_watcher.run_once()

    assert launcher.described == []
    state = index_state(store, ds)
    assert state.state == FlintIndexState.FAILED
    assert state.error.endswith("ended dead: Job job-s of session s-stream is failed")


def test_the_watcher_wakes_at_the_staleness_limit_not_at_its_interval(
    make_plugin: PluginFactory, store: Store
) -> None:
    """A stream beating every 200 ms is killed: with a one-minute search interval, the running
    watcher still fails its index once three beats are missed."""
    plugin, launcher, ds = setup(make_plugin, JobRunState.RUNNING, stream_watch_interval_s=60)
    session_id = live_stream(store, ds, interval_ms=200)
    killed = threading.Event()

    def beat() -> None:
        while not killed.wait(0.1):
            age(store, ds, session_id, 0)

    job = threading.Thread(target=beat, daemon=True)
    job.start()
    plugin.stream_watcher.start()
    try:
        wait_for(lambda: plugin.stream_watcher.wait_s() < 1, timeout=10, what="the watcher to see the stream")
        killed.set()
        job.join(timeout=5)
        launcher.state = JobRunState.FAILED
        wait_for(
            lambda: index_state(store, ds).state == FlintIndexState.FAILED, timeout=30, what="the index to fail"
        )
    finally:
        killed.set()
        plugin.stream_watcher.stop()
    assert launcher.described == ["job-s"]
