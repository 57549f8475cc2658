"""Dead streams noticed within their own staleness limit, not at the next housekeeping sweep.

A streaming job killed outright writes nothing more: its session stays ``running`` and its index
``refreshing`` until someone looks. Live streaming sessions are few (the refresh-job limit bounds
them), so every plugin process watches them: one search finds them, and each is looked at again
when its own staleness limit passes (:class:`async_query.liveness.Staleness`). A session stale by
the search is read again by id (the search lags writes); if still stale, one coalesced
``describe`` (:class:`async_query.liveness.LivenessChecker`) says whether its job runs. A confirmed
death ends the session ``dead`` and fails each index its job kept ``refreshing``, with the cause,
as the housekeeping sweep would (``docs/documents.md``): with the defaults (a beat every 10 s,
stale after 3), within about 30 s of the kill.

No lease: a lease whose holder died would delay the notice by its length. Every write is
conditional, so processes watching the same session at once change it once.
"""

from __future__ import annotations

import logging

from async_query.liveness import LivenessChecker
from async_query.workers import Worker, owner_ended
from query_core.errors import AsyncQueryError
from query_core.flint.naming import index_name_of
from query_core.index_ops import repair_stalled
from query_core.models import SessionDoc, Versioned
from query_core.states import FlintIndexState, SessionState, SessionType, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

#: The shortest wait between rounds, and how far past a session's staleness limit it is looked at.
MIN_WAIT_S = 0.5
MARGIN_S = 0.05


class StreamWatcher(Worker):
    """Watches live streaming sessions at their own staleness limit (see the module's documentation).

    Each round searches every request index once; the next comes when the first session seen
    would turn stale, or after ``interval_s`` at most (new sessions are found then).
    """

    name = "stream-watcher"

    def __init__(self, store: Store, liveness: LivenessChecker, interval_s: float) -> None:
        super().__init__(interval_s)
        self.store = store
        self.liveness = liveness
        #: The indexes failed so far, by name.
        self.failed: list[str] = []
        self._next_s = interval_s

    def wait_s(self) -> float:
        return self._next_s

    def run_once(self) -> None:
        waits = [self.interval_s]
        try:
            live = self.store.sessions.find(
                None, [SessionState.NOT_STARTED, SessionState.RUNNING], session_type=SessionType.STREAMING
            )
        except AsyncQueryError as exc:
            log.warning("cannot search the live streaming sessions: %s", exc)
            live = []
        for session in live:
            try:
                wait = self.watch(session)
            except AsyncQueryError as exc:
                log.warning("cannot watch streaming session %s: %s", session.doc.session_id, exc)
                wait = MIN_WAIT_S
            if wait is not None:
                waits.append(wait)
        self._next_s = max(MIN_WAIT_S, min(waits))

    def watch(self, session: Versioned[SessionDoc]) -> float | None:
        """Look at one session; seconds until it needs another look (None: it has ended)."""
        fresh_ms = self.liveness.staleness.fresh_for_ms(session.doc)
        if fresh_ms > 0:
            return fresh_ms / 1000 + MARGIN_S
        doc = session.doc
        current = self.store.sessions.get(doc.data_source_name, doc.session_id)
        if current is None:
            return None
        if not is_terminal(current.doc.state):
            fresh_ms = self.liveness.staleness.fresh_for_ms(current.doc)
            if fresh_ms > 0:
                return fresh_ms / 1000 + MARGIN_S
            current = self.liveness.check(current)
            if not is_terminal(current.doc.state):
                return self.liveness.cache_s  # running, or the launcher cannot tell: ask again later
        self.fail_indexes(current.doc)
        return None

    def fail_indexes(self, ended: SessionDoc) -> None:
        """Fail each index the ended session's job kept ``refreshing``, with the cause."""
        if not ended.job_id:
            return
        for state in self.store.index_states.find(
            ended.data_source_name, [FlintIndexState.REFRESHING], job_id=ended.job_id
        ):
            if repair_stalled(self.store, state, owner_ended(state.doc, ended, True), streaming=True) is None:
                continue
            index = index_name_of(state.doc.latest_id, state.doc.index_name)
            self.failed.append(index)
            log.warning("index %s failed: its stream's job %s ended %s", index, ended.job_id, ended.state.value)
