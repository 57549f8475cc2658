"""The scheduler's loop: every plugin process looks after every schedule (docs/flint.md,
"Scheduled refresh").

Each round searches the active schedules once (:meth:`~query_core.store.schedules.
ScheduleRepository.active`) and looks at each that needs it (:class:`~async_query.scheduler.runs.
ScheduledRuns`); the next round comes when the soonest of them needs another look, after
``interval_s`` at most (new schedules are found then), or at once when this process changed a
schedule (:meth:`RefreshScheduler.wake`). No lease: every move of a schedule is a conditional
write, so processes looking at one tick at once launch it once, and a process that stops takes
nothing with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from async_query.scheduler.runs import ScheduledRuns
from async_query.workers import Worker
from query_core.errors import AsyncQueryError
from query_core.models import now_millis
from query_core.store import Store

log = logging.getLogger(__name__)

#: The shortest wait between rounds.
MIN_WAIT_S = 0.2


class RefreshScheduler(Worker):
    """Runs the scheduled refreshes (see the module's documentation). ``clock`` gives the
    scheduler's time in epoch ms (tests drive it); :meth:`run_once` is one round."""

    name = "refresh-scheduler"

    def __init__(
        self, store: Store, runs: ScheduledRuns, interval_s: float, clock: Callable[[], int] = now_millis
    ) -> None:
        super().__init__(interval_s)
        self.store = store
        self.runs = runs
        self.clock = clock
        self._next_s = interval_s
        #: Schedules whose look failed in the last round (their error logged), for the health check.
        self.failed_looks = 0

    def wait_s(self) -> float:
        return self._next_s

    def run_once(self) -> None:
        now = self.clock()
        self._next_s = self.interval_s
        try:
            active = self.store.schedules.active()
        except AsyncQueryError as exc:
            log.warning("cannot search the schedules: %s", exc)
            return
        soonest = now + int(self.interval_s * 1000)
        failed = 0
        for schedule in active:
            try:
                at = self.runs.look_at(schedule, now)
            except AsyncQueryError as exc:
                failed += 1
                log.warning("scheduled refresh of %s: %s", schedule.doc.index_name, exc)
                continue
            if at is not None:
                soonest = min(soonest, at)
        self.failed_looks = failed
        self._next_s = max(MIN_WAIT_S, (soonest - self.clock()) / 1000)
