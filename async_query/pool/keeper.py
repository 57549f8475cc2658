"""Keeps the warm pools full, and their jobs accounted for: a worker loop in each plugin process.

Every ``warm_pool_interval_s`` (at once after a claim, and every quarter second while a claim
waits for its job to take it), for each pool of the deployment (:mod:`.pools`):

- each slot whose job has ended (or never existed) takes a new job: the slot is taken first, with
  a conditional write (of two processes refilling one slot, one wins), then the job is launched and
  the slot names it; a failed launch ends the slot with the error, and the pool backs off;
- each live job whose documents no longer vouch for it (an idle job silent past its heartbeat
  limit, a starting one past the start-up limit, a claim not taken) is asked about with one
  ``describe`` (where asking is free, a local job, every round): gone, its slot ends ``dead`` and
  is refilled; running but stuck past its limit, it is stopped;
- slots beyond the pool's size, and pools no datasource uses any more, have their jobs stopped
  (scale-down); a job a session has claimed is left to its session.

On the service's stop (:meth:`PoolKeeper.close`) the idle and starting jobs this process launched
are stopped; a restarted service finds their slots' jobs gone and refills them.
"""

from __future__ import annotations

import logging
import time

from async_query import metrics
from async_query.caches import Cache
from async_query.launcher.base import JobDescription, JobRequest, Launcher, stop_job_within
from async_query.pool.claims import SessionJobs
from async_query.pool.pools import Pool, Pools, is_fresh
from async_query.workers import Worker
from query_core.errors import AsyncQueryError
from query_core.jobconf import KEYS, is_claim_key
from query_core.models import PoolJobDoc, Versioned, now_millis
from query_core.states import PoolJobState, SessionType, is_terminal
from query_core.store import Store
from query_core.store.pool import slot_id

log = logging.getLogger(__name__)

_P = PoolJobState
#: A slot taken for a job whose launch was never recorded (its process stopped meanwhile) is
#: given up after this long.
UNRECORDED_LAUNCH_MS = 120_000
#: The longest a pool waits before it launches again after jobs that died before they were ready.
MAX_BACKOFF_S = 300.0
#: How soon the keeper looks again while a claim waits for its job to take it.
CLAIM_WATCH_S = 0.25


class PoolKeeper(Worker):
    """Refills the pools, ends silent jobs' slots, stops jobs on scale-down and on the stop."""

    name = "warm-pool"

    def __init__(self, store: Store, pools: Pools, jobs: SessionJobs) -> None:
        super().__init__(pools.settings.warm_pool_interval_s)
        self.store = store
        self.pools = pools
        self.jobs = jobs
        self.settings = pools.settings
        #: The slot of each job this process launched (stopped on close unless claimed).
        self.launched: dict[str, str] = {}
        #: Launcher answers about pool jobs, each kept for a while (see :meth:`describe`).
        self._answers: Cache[str, JobDescription] = Cache(1000)
        #: Per pool: launches in a row whose job died before it was ready, and when the next may go.
        self._failures: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._claim_waiting = False

    def wait_s(self) -> float:
        return CLAIM_WATCH_S if self._claim_waiting else self.interval_s

    def run_once(self) -> None:
        self._claim_waiting = False
        pools = self.pools.all()
        for pool in pools:
            try:
                self.keep(pool)
            except AsyncQueryError as exc:
                log.warning("warm pool %s: %s", pool.key, exc)
        self.retire_unused({pool.key: pool for pool in pools})

    # -- one pool ---------------------------------------------------------------------------

    def keep(self, pool: Pool) -> None:
        """Check each slot of ``pool``; refill those whose job has ended."""
        for n, slot in enumerate(self.store.pool.slots(pool.key, pool.size)):
            checked = self.check(pool, slot) if slot is not None else None
            if checked is None or is_terminal(checked.doc.state):
                self.refill(pool, n, checked)

    def check(self, pool: Pool, slot: Versioned[PoolJobDoc]) -> Versioned[PoolJobDoc] | None:
        """The slot, its job ended ``dead`` if it is gone or stuck past its limit."""
        doc = slot.doc
        if is_terminal(doc.state):
            return slot
        if doc.state == _P.CLAIMED:
            self._claim_waiting = True
        elif doc.state == _P.IDLE:
            self._failures.pop(pool.key, None)
        if not doc.job_id:
            if now_millis() - doc.job_start_time < UNRECORDED_LAUNCH_MS:
                return slot
            return self.end(slot, "the job's launch was never recorded")
        fresh = is_fresh(doc, self.settings)
        if fresh and not pool.launcher.describe_is_free:
            return slot
        described = self.describe(pool.launcher, doc)
        if described is not None and described.state.finished:
            if doc.state == _P.STARTING:
                self._failed(pool.key)  # it died before it was ever ready
            detail = f": {described.details}" if described.details else ""
            return self.end(slot, f"job {doc.job_id} is {described.state.value.lower()}{detail}")
        if fresh or described is None:
            return slot
        # Running, and past its limit: stuck.
        ended = self.end(slot, f"job {doc.job_id} did not {_duty(doc.state)} in time")
        self.stop_job(pool.launcher, doc.job_id)
        return ended

    def describe(self, launcher: Launcher, doc: PoolJobDoc) -> JobDescription | None:
        """One launcher answer about the job, reused for its heartbeat interval (None: unknown)."""
        cached = self._answers.get(doc.job_id)
        if cached is not None:
            return cached
        try:
            described = metrics.launcher_call(launcher, "describe", lambda: launcher.describe(doc.job_id))
        except AsyncQueryError as exc:
            log.warning("cannot describe pool job %s: %s", doc.job_id, exc)
            return None
        if not launcher.describe_is_free:
            keep_s = (doc.heartbeat_interval_millis or self.settings.heartbeat_idle_ms) / 1000
            self._answers.put(doc.job_id, described, ttl_s=keep_s)
        return described

    def end(self, slot: Versioned[PoolJobDoc], why: str) -> Versioned[PoolJobDoc] | None:
        ended = self.store.pool.end(slot, why)
        if ended is not None:
            log.warning("warm pool slot %s: %s", slot.doc.slot_id, why)
        return ended or self.store.pool.slot(slot.doc.slot_id)

    def refill(self, pool: Pool, n: int, found: Versioned[PoolJobDoc] | None) -> None:
        """Take slot ``n`` for a new job and launch it (unless the pool backs off)."""
        if time.monotonic() < self._not_before.get(pool.key, 0.0):
            return
        launcher = pool.launcher
        new = PoolJobDoc(
            slot_id=slot_id(pool.key, n),
            pool_key=pool.key,
            slot=n,
            engine=launcher.kind or type(launcher).__name__.lower(),
            application_id=launcher.application_id,
        )
        reserved = self.store.pool.reserve(found, new)
        if reserved is None:
            return  # another process refills it
        try:
            job_id = self.jobs.launch(launcher, self.request(pool, new.slot_id))
        except AsyncQueryError as exc:
            self.store.pool.end(reserved, f"the job could not be launched: {exc.message}")
            self._failed(pool.key)
            return
        self.launched = {job: at for job, at in self.launched.items() if at != new.slot_id}
        self.launched[job_id] = new.slot_id
        if self.store.pool.launched(reserved, job_id, launcher.application_id) is None:
            self.stop_job(launcher, job_id)  # the slot was ended meanwhile (scale-down)
            return
        log.info("warm pool %s: job %s started in slot %d", pool.key, job_id, n)

    def request(self, pool: Pool, slot: str) -> JobRequest:
        """A pool job's launch: the start-up part of a job's conf of the pool's datasource (its
        connection, timeouts and start-up Spark settings; no session, no runtime setting)."""
        conf, secret = self.pools.conf(pool.datasource, pool.launcher, "", SessionType.INTERACTIVE, pool_slot=slot)
        startup = {k: v for k, v in conf.items() if k in KEYS or not is_claim_key(k)}
        return JobRequest(slot, pool.datasource, SessionType.INTERACTIVE, startup, secret, pool_slot=slot)

    def _failed(self, key: str) -> None:
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self._not_before[key] = time.monotonic() + min(self.interval_s * 2 ** (failures - 1), MAX_BACKOFF_S)

    # -- scale-down and the stop ------------------------------------------------------------

    def retire_unused(self, pools: dict[str, Pool]) -> None:
        """Stop the live jobs of slots beyond their pool's size, and of pools no longer used."""
        for slot in self.store.pool.live():
            pool = pools.get(slot.doc.pool_key)
            if pool is None or slot.doc.slot >= pool.size:
                self.retire(slot, "the pool was made smaller" if pool else "no datasource uses this pool any more")

    def retire(self, slot: Versioned[PoolJobDoc], why: str) -> None:
        """End an unclaimed job's slot and stop the job (a claimed one is its session's)."""
        current = self.store.pool.slot(slot.doc.slot_id)
        if current is None or current.doc.job_id != slot.doc.job_id:
            return
        if self.store.pool.end(current, why, unless_claimed=True) is None:
            return
        log.info("warm pool slot %s: job %s stopped: %s", slot.doc.slot_id, slot.doc.job_id, why)
        launcher = self._launcher_of(current.doc)
        if launcher is not None and current.doc.job_id:
            self.stop_job(launcher, current.doc.job_id)

    def _launcher_of(self, doc: PoolJobDoc) -> Launcher | None:
        engine = doc.engine
        for launcher in self.pools.launchers.all():
            if (launcher.kind or type(launcher).__name__.lower()) == engine and launcher.application_id == doc.application_id:
                return launcher
        return None

    def stop_job(self, launcher: Launcher, job_id: str) -> None:
        try:
            stop_job_within(launcher, job_id, self.settings.stop_job_timeout_s)
        except AsyncQueryError as exc:
            log.warning("cannot stop pool job %s: %s", job_id, exc)

    def close(self) -> None:
        """The service stops: stop the loop, then the unclaimed jobs this process launched."""
        self.stop()
        self.retire_launched("the service stopped")

    def retire_launched(self, why: str) -> None:
        """Stop the unclaimed jobs this process launched (their slots end, and are refilled by
        the next round unless the loop has stopped)."""
        for job_id, slot_id_ in list(self.launched.items()):
            try:
                slot = self.store.pool.slot(slot_id_)
                if slot is not None and slot.doc.job_id == job_id:
                    self.retire(slot, why)
            except AsyncQueryError as exc:
                log.warning("cannot stop pool job %s: %s", job_id, exc)


def _duty(state: PoolJobState) -> str:
    return "take its claim" if state == _P.CLAIMED else "become ready"
