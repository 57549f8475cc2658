"""The warm pool runner: a job started with no session, that waits for one to claim it.

The plugin launches it with its pool slot (``spark.flint.job.poolSlot``) and the start-up part of
a job's conf (docs/job.md). The job waits for its slot document to name its job run, warms its
Spark session up (unless a session claimed it meanwhile: that session's first statement is then
what warms it, and the warm-up would only delay it), moves the slot ``starting → idle``, and then loops: read the slot by id every
loop period, beat it every idle heartbeat interval. When a new session has claimed it (the slot is
``claimed``, one conditional write of the plugin), it moves the slot to ``served`` and becomes that
session's interactive job, configured from the claim: session, datasource, result index, request
index, validation policy and the session's runtime Spark settings. It serves that one session and
exits with it, so nothing of one session can reach another.

It ends without a session when its slot is ended (scale-down, the service's stop) or taken by
another job, when it is left unclaimed longer than ``spark.flint.job.poolIdleLimitMillis``, or on
SIGTERM. The loop is explicit and testable: :meth:`PoolJob.step` is one look at the slot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from flint_repl_job.config import JobConfig
from query_core.errors import AsyncQueryError
from query_core.jobconf import POOL_IDLE_LIMIT_MS
from query_core.models import PoolClaim, PoolJobDoc, Versioned
from query_core.states import PoolJobState, SessionState
from query_core.store import Store

log = logging.getLogger(__name__)

_P = PoolJobState

#: Runs the session a claim names; returns the state it ended in (None: it was never the job's).
Become = Callable[[PoolClaim], SessionState | None]


class SlotLostError(Exception):
    """The slot no longer holds this job: the job ends without a session."""


class PoolJob:
    """One warm pool job: wait for a claim, then become the claiming session's job."""

    def __init__(
        self,
        cfg: JobConfig,
        store: Store,
        become: Become,
        stop_event: threading.Event | None = None,
        warm_up: Callable[[], None] = lambda: None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.become = become
        self.stop_event = stop_event or threading.Event()
        self.warm_up = warm_up
        #: When the job became idle (monotonic seconds), and when its next beat is due.
        self.idle_since = 0.0
        self.next_beat = 0.0
        #: The claim this job served (None until then).
        self.claim: PoolClaim | None = None

    @property
    def slot_id(self) -> str:
        return self.cfg.pool_slot

    def read(self) -> Versioned[PoolJobDoc]:
        """The slot, as long as it holds this job."""
        slot = self.store.pool.slot(self.slot_id)
        if slot is None:
            raise SlotLostError(f"pool slot {self.slot_id} disappeared")
        if slot.doc.job_id != self.cfg.job_id:
            raise SlotLostError(f"pool slot {self.slot_id} holds job {slot.doc.job_id or '(being launched)'}")
        return slot

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> SessionState | None:
        """Wait for a claim and run its session; returns the session's end state (None: the job
        ended without one)."""
        try:
            slot = self.wait_for_slot()
            if slot.doc.state != _P.CLAIMED:  # else a session waits: its first statement warms the job up
                self._warm_up()
            claim = self.wait_for_claim(slot)
        except SlotLostError as exc:
            log.warning("pool job ends without a session: %s", exc)
            return None
        except AsyncQueryError as exc:
            log.error("pool job ends without a session: %s", exc)
            return None
        if claim is None:
            return None
        log.info("pool job %s claimed by session %s of %s", self.cfg.job_id, claim.session_id, claim.data_source_name)
        return self.become(claim)

    def _warm_up(self) -> None:
        """Warm up; a failure only costs the first statement its speed (a job started for its
        session would meet the same cause there, and report it), so the job still gets ready."""
        try:
            self.warm_up()
        except Exception as exc:  # noqa: BLE001 - Py4J and Spark errors alike
            log.warning("warm-up failed, ready without it: %s: %s", type(exc).__name__, exc)

    def wait_for_slot(self) -> Versioned[PoolJobDoc]:
        """The slot, once it names this job (the plugin writes the job id after the launch)."""
        deadline = time.monotonic() + self.cfg.session_wait_ms / 1000
        while True:
            try:
                return self.read()
            except SlotLostError:
                found = self.store.pool.slot(self.slot_id)
                if found is not None and found.doc.job_id:  # another job's: never ours
                    raise
                if time.monotonic() >= deadline or self.stop_event.wait(self.cfg.loop_frequency_ms / 1000):
                    raise

    def wait_for_claim(self, slot: Versioned[PoolJobDoc]) -> PoolClaim | None:
        """Announce the job ready, then look at the slot every loop period until a claim comes
        (returned, after the slot is moved to ``served``) or the job is to end (None)."""
        interval = self.cfg.heartbeat_idle_ms
        self.store.pool.ready(slot, interval)
        self.idle_since = time.monotonic()
        self.next_beat = self.idle_since + interval / 1000
        while not self.stop_event.is_set():
            done, claim = self.step()
            if done:
                return claim
            self.stop_event.wait(self.cfg.loop_pause_s(time.monotonic() - self.idle_since))
        self._end("the job was stopped")
        return None

    def step(self) -> tuple[bool, PoolClaim | None]:
        """One look at the slot: (True, the claim) when the job is claimed, (True, None) when it
        must end, (False, None) to look again."""
        slot = self.read()
        state = slot.doc.state
        if state == _P.CLAIMED:
            served = self.store.pool.serve(slot)
            if served is None:
                return False, None  # ended meanwhile: the next look says so
            self.claim = slot.doc.claim
            return True, self.claim
        if state in (_P.SERVED, _P.DEAD):
            log.info("pool slot %s is %s: ending", self.slot_id, state.value)
            return True, None
        if state == _P.STARTING:
            self.store.pool.ready(slot, self.cfg.heartbeat_idle_ms)
            return False, None
        now = time.monotonic()
        limit_ms = self.cfg.pool_idle_limit_ms or POOL_IDLE_LIMIT_MS
        if now - self.idle_since >= limit_ms / 1000:
            self._end(f"unclaimed for {limit_ms} ms: the pool starts a fresh job")
            return True, None
        if now >= self.next_beat:
            self.next_beat = now + self.cfg.heartbeat_idle_ms / 1000
            self.store.pool.beat(slot, self.cfg.heartbeat_idle_ms)
        return False, None

    def _end(self, why: str) -> None:
        """End the slot's job ``dead``, unless a session claimed it first."""
        try:
            slot = self.read()
        except (SlotLostError, AsyncQueryError):
            return
        if self.store.pool.end(slot, why, unless_claimed=True) is not None:
            log.info("pool job %s ended: %s", self.cfg.job_id, why)
