"""The interactive session limit, held race-free by slot documents (the mechanism of the refresh-job
limit, :mod:`async_query.slots`): the count and the claim one conditional write, the job launched
after the claim, a failed launch giving its slot back."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query.slots import INTERACTIVE_SESSIONS, REFRESHING_JOBS, SLOTS_INDEX, Slots
from query_core.errors import LauncherError, TooManyRequestsError
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
