"""The interactive session limit, held race-free by slot documents (the mechanism of the refresh-job
limit, :mod:`async_query.slots`): the count and the claim one conditional write, the job launched
after the claim, a failed launch giving its slot back."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from async_query.datasources import Datasource
from async_query.runtime import Plugin
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from async_query.settings import Settings
from async_query.slots import (
    INTERACTIVE_SESSIONS,
    REFRESHING_JOBS,
    SLOTS_INDEX,
    USER_SESSIONS,
    Slots,
    user_scope,
)
from query_core.errors import ConflictError, LauncherError, TooManyRequestsError
from query_core.ids import request_index
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher

REFUSAL = "domain concurrent active session can not exceed 3"


def new_session(plugin: Plugin) -> str:
    ds = plugin.datasources.all()[0].name
    return plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1")).session_id


def test_two_plugin_processes_race_new_sessions_and_exactly_the_limit_launch(
    make_plugin: PluginFactory, store: Store
) -> None:
    """Two services on one index (two plugin processes' state) race 12 POSTs for 3 sessions:
    exactly 3 jobs launch, although none of the new sessions is searchable when the others count."""
    launchers = [RecordingLauncher(), RecordingLauncher()]
    plugins = [make_plugin(launcher, max_sessions=3) for launcher in launchers]
    start = threading.Barrier(12)
    outcomes: list[str] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        start.wait()
        try:
            new_session(plugins[n % 2])
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

    assert sorted(outcomes) == ["accepted"] * 3 + [REFUSAL] * 9
    assert sum(len(launcher.started) for launcher in launchers) == 3
    holders = Slots(store, INTERACTIVE_SESSIONS, lambda: 3).holders()
    assert all(holder is not None for holder in holders)
    assert store.index.get(SLOTS_INDEX, "session-slot-0") is not None
    # The other limit's slots are its own: no refresh slot was taken.
    assert store.index.get(SLOTS_INDEX, "refresh-slot-0") is None
    assert Slots(store, REFRESHING_JOBS, lambda: 3).holders() == [None, None, None]


def test_a_failed_launch_gives_its_session_slot_back_and_an_ended_session_frees_its_own(
    make_plugin: PluginFactory, store: Store
) -> None:
    class FailingOnce(RecordingLauncher):
        failed = False

        def start(self, request: Any) -> str:
            if not self.failed:
                self.failed = True
                raise LauncherError("no capacity")
            return super().start(request)

    launcher = FailingOnce()
    plugin = make_plugin(launcher, max_sessions=1)
    ds = plugin.datasources.all()[0].name
    with pytest.raises(LauncherError):
        new_session(plugin)
    first = new_session(plugin)  # the failed launch released the slot at once
    with pytest.raises(TooManyRequestsError, match="can not exceed 1"):
        new_session(plugin)
    assert len(launcher.started) == 1

    session = store.sessions.get(ds, first)
    assert session is not None
    store.sessions.end(session, SessionState.DEAD)  # the job ended it (idle, say): no search refresh
    second = new_session(plugin)
    assert second != first and len(launcher.started) == 2


# -- a user's fair share ------------------------------------------------------------------------

BOB = Principal.of("bob", ["analysts"])
CAROL = Principal.of("carol", ["analysts"])
USER_REFUSAL = "user concurrent active session can not exceed 2"


def session_of(plugin: Plugin, who: Principal) -> str:
    ds = plugin.datasources.all()[0].name
    return plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", principal=who)).session_id


def test_the_per_user_share_defaults_to_half_the_deployment_s_rounded_up() -> None:
    assert Settings(max_sessions=10).sessions_per_user == 5
    assert Settings(max_sessions=5).sessions_per_user == 3
    assert Settings(max_sessions=1).sessions_per_user == 1
    assert Settings(max_sessions=10, max_sessions_per_user=10).sessions_per_user == 10


def test_one_user_cannot_fill_the_deployment_and_another_still_gets_sessions(
    make_plugin: PluginFactory, store: Store
) -> None:
    """Four sessions in all, two per user: bob's third is refused with the per-user message, carol
    still gets her two, and then the deployment is full for everyone."""
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, max_sessions=4, datasources=[Datasource(name="local", connector="local", allowed_roles=["analysts"])])
    bobs = [session_of(plugin, BOB) for _ in range(2)]
    with pytest.raises(TooManyRequestsError) as refused:
        session_of(plugin, BOB)
    assert refused.value.message == USER_REFUSAL and refused.value.http_status == 429
    carols = [session_of(plugin, CAROL) for _ in range(2)]
    assert len({*bobs, *carols}) == 4 and len(launcher.started) == 4
    with pytest.raises(TooManyRequestsError, match="can not exceed 2"):
        session_of(plugin, CAROL)
    # A user's own session is never refused for this reason: statements join it.
    joined = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 2", bobs[0], principal=BOB))
    assert joined.session_id == bobs[0]
    # One of bob's ends: bob has room again (the deployment's slot of that session is free too).
    ended = store.sessions.get("local", bobs[1])
    assert ended is not None
    store.sessions.end(ended, SessionState.DEAD)
    assert session_of(plugin, BOB) not in bobs
    assert len(launcher.started) == 5


def test_a_user_racing_from_two_plugin_processes_gets_exactly_the_share(
    make_plugin: PluginFactory, store: Store
) -> None:
    launchers = [RecordingLauncher(), RecordingLauncher()]
    ds = [Datasource(name="local", connector="local", allowed_roles=["analysts"])]
    plugins = [make_plugin(launcher, max_sessions=10, max_sessions_per_user=2, datasources=ds) for launcher in launchers]
    start = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        start.wait()
        try:
            session_of(plugins[n % 2], BOB)
            outcome = "accepted"
        except TooManyRequestsError as exc:
            outcome = exc.message
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["accepted"] * 2 + [USER_REFUSAL] * 6
    assert sum(len(launcher.started) for launcher in launchers) == 2
    # Bob's failed attempts gave their deployment slots back: 2 of 10 held.
    held = Slots(store, INTERACTIVE_SESSIONS, lambda: 10).holders()
    assert sum(holder is not None for holder in held) == 2


def test_the_anonymous_caller_of_none_has_no_share_but_the_deployment_s(make_plugin: PluginFactory) -> None:
    plugin = make_plugin(RecordingLauncher(), max_sessions=3)
    assert len({new_session(plugin) for _ in range(3)}) == 3
    with pytest.raises(TooManyRequestsError, match="domain concurrent active session can not exceed 3"):
        new_session(plugin)


# -- a POST that fails holds no slot --------------------------------------------------------------


class ClashingLauncher(RecordingLauncher):
    """Launches, and meanwhile another writer records a document under the new session's id, so
    the POST's own write of it fails (a 409) after the job was launched and its slots taken."""

    store: Store | None = None

    def start(self, request: Any) -> str:
        job_id = super().start(request)
        assert self.store is not None
        self.store.index.create(request_index(request.datasource.name), request.session_id, {"type": "session"})
        return job_id


@pytest.mark.parametrize("query", ["SELECT 1", "REFRESH SKIPPING INDEX ON local.default.t"])
def test_a_post_failing_after_its_launch_stops_its_job_and_frees_its_slots_at_once(
    make_plugin: PluginFactory, store: Store, query: str
) -> None:
    launcher = ClashingLauncher()
    launcher.store = store
    ds = [Datasource(name="local", connector="local", allowed_roles=["analysts"])]
    plugin = make_plugin(launcher, max_sessions=1, max_refreshing_jobs=1, datasources=ds)
    for _ in range(3):  # each failure frees what it took, or the second would be a 429
        with pytest.raises(ConflictError) as failed:
            plugin.service.submit(SubmitRequest("local", "sql", query, principal=BOB))
        assert failed.value.http_status == 409
    assert len(launcher.started) == 3
    assert launcher.cancelled == ["job-1", "job-2", "job-3"]
    limits = [Slots(store, limit, lambda: 1) for limit in (INTERACTIVE_SESSIONS, REFRESHING_JOBS)]
    assert [slots.holders() for slots in limits] == [[None], [None]]
    user = Slots(store, USER_SESSIONS, lambda: 1, scope=user_scope("bob"))
    assert user.holders() == [None]
    # The slots are free for the next POST, on a launcher that does not clash.
    ok = make_plugin(RecordingLauncher(), max_sessions=1, max_refreshing_jobs=1, datasources=ds)
    assert ok.service.submit(SubmitRequest("local", "sql", query, principal=BOB)).query_id


# -- a user's share of refresh jobs ----------------------------------------------------------------


def refresh_of(plugin: Plugin, who: Principal, table: str) -> str:
    request = SubmitRequest("local", "sql", f"REFRESH SKIPPING INDEX ON local.default.{table}", principal=who)
    return plugin.service.submit(request).query_id


def test_one_user_cannot_take_every_refresh_job_and_another_still_gets_one(make_plugin: PluginFactory) -> None:
    """Five refresh jobs in all, three per user by default: bob's fourth is refused with the
    per-user message, carol still gets hers (the attack: one analyst's auto-refreshed indexes kept
    everyone else's refreshes out)."""
    assert Settings(max_refreshing_jobs=5).refreshing_jobs_per_user == 3
    assert Settings(max_refreshing_jobs=5, max_refreshing_jobs_per_user=5).refreshing_jobs_per_user == 5
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, datasources=[Datasource(name="local", connector="local", allowed_roles=["analysts"])])
    for n in range(3):
        refresh_of(plugin, BOB, f"t{n}")
    with pytest.raises(TooManyRequestsError) as refused:
        refresh_of(plugin, BOB, "t3")
    assert refused.value.message == "user concurrent refresh job can not exceed 3" and refused.value.http_status == 429
    refresh_of(plugin, CAROL, "t4")
    assert len(launcher.started) == 4
