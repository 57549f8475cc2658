"""The job of a new session: a warm pool job claimed, or one started for it (a cold start).

:meth:`SessionJobs.start` is the one call a handler makes for a new session's job. An interactive
session claims an idle (or, failing that, a starting) job of its datasource's pool with one
conditional write of the job's slot, carrying what the job learns from it: the session, the
datasource, the result index and the session's part of the job conf (its contract keys and runtime
Spark settings, never a secret). Of two sessions claiming one job, one wins; the other tries the
next slot, and with none left starts a job as before. Other session types always start their own.

A claimed job that dies before it starts its session leaves the session ``not_started``: its
liveness check (one ``describe`` once the job is silent past its heartbeat limit) finds the job
gone and calls :meth:`SessionJobs.restart`, which starts a job for the same session and gives it
to the session (the dead one excluded), so the statements waiting in it run there.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from async_query import metrics
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import JobRequest, Launcher
from async_query.pool.pools import Pool, Pools, is_fresh
from query_core.errors import AsyncQueryError
from query_core.jobconf import split_conf
from query_core.models import PoolClaim, PoolJobDoc, SessionDoc, Versioned
from query_core.states import PoolJobState, SessionState, SessionType
from query_core.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartedJob:
    """A new session's job: its launcher and job run, and, when it was claimed from a warm pool,
    its slot and the heartbeat interval it advertised (0 while it was still starting)."""

    launcher: Launcher
    job_id: str
    pool_slot: str | None = None
    heartbeat_interval_millis: int = 0


class SessionJobs:
    """Starts new sessions' jobs: claimed from a warm pool where one waits, else launched."""

    def __init__(
        self,
        store: Store,
        pools: Pools,
        datasources: DatasourceRegistry,
        on_claim: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.pools = pools
        self.settings = pools.settings
        self.datasources = datasources
        #: Told after each claim (the pool keeper refills the slot).
        self.on_claim = on_claim
        self._restarting = threading.Lock()

    # -- a new session's job ----------------------------------------------------------------

    def start(
        self, datasource: Datasource, session_id: str, session_type: SessionType, *, name_suffix: str = "", **statement: str
    ) -> StartedJob:
        """The job of the new session ``session_id``: claimed from the datasource's warm pool
        when the session is interactive and the pool has a job, else launched. ``statement``
        (``query_id``, ``query``) names a batch or streaming job's one statement, ``name_suffix``
        ends the job's name (a streaming job's index)."""
        launcher = self.pools.launchers.for_datasource(datasource)
        conf, secret = self.pools.conf(datasource, launcher, session_id, session_type, **statement)
        if session_type == SessionType.INTERACTIVE and not statement:
            claimed = self.claim(datasource, session_id, launcher, conf)
            if claimed is not None:
                return claimed
        request = JobRequest(session_id, datasource, session_type, conf, secret, name_suffix=name_suffix)
        return StartedJob(launcher, self.launch(launcher, request))

    def launch(self, launcher: Launcher, request: JobRequest) -> str:
        """Start ``request``'s job (a cold start); returns its job id."""
        job_id = metrics.launcher_call(launcher, "start", lambda: launcher.start(request))
        metrics.job_started(request.datasource.name, request.kind, launcher.kind or type(launcher).__name__.lower())
        return job_id

    def claim(
        self, datasource: Datasource, session_id: str, launcher: Launcher, conf: dict[str, str]
    ) -> StartedJob | None:
        """Claim a job of the datasource's pool for the session (None: none to claim)."""
        pool = self.pools.of(datasource)
        if pool is None:
            return None
        claim = PoolClaim(
            session_id=session_id,
            data_source_name=datasource.name,
            result_index=datasource.results,
            conf=split_conf(conf)[1],
        )
        for slot in self.candidates(pool):
            won = self.store.pool.claim(slot, claim)
            if won is not None:
                metrics.pool_claimed(datasource.name, "claimed")
                log.info("session %s claimed pool job %s (%s)", session_id, slot.doc.job_id, slot.doc.slot_id)
                self.on_claim()
                idle = slot.doc.state == PoolJobState.IDLE
                interval = slot.doc.heartbeat_interval_millis if idle else 0
                return StartedJob(launcher, slot.doc.job_id, slot.doc.slot_id, interval)
        metrics.pool_claimed(datasource.name, "empty")
        return None

    def candidates(self, pool: Pool) -> list[Versioned[PoolJobDoc]]:
        """The pool's jobs a session may claim, best first: idle ones (in a random order, so that
        racing claims seldom meet), then starting ones, oldest first (the nearest to ready).
        Where asking costs nothing (a local job), a job whose process is gone is left out."""
        slots = [s for s in self.store.pool.slots(pool.key, pool.size) if s is not None and s.doc.job_id]
        live = [s for s in slots if is_fresh(s.doc, self.settings) and s.doc.state != PoolJobState.CLAIMED]
        if pool.launcher.describe_is_free:
            live = [s for s in live if not pool.launcher.describe(s.doc.job_id).state.finished]
        idle = [s for s in live if s.doc.state == PoolJobState.IDLE]
        random.shuffle(idle)
        starting = sorted((s for s in live if s.doc.state == PoolJobState.STARTING), key=lambda s: s.doc.job_start_time)
        return [*idle, *starting]

    # -- a claimed job that died before it started its session ------------------------------

    def restart(self, session: Versioned[SessionDoc], why: str) -> Versioned[SessionDoc] | None:
        """Give a session whose claimed pool job is gone before it started the session a job of
        its own (the statements waiting in it stay). Returns the session with its new job, or None
        when it cannot be had (the caller ends the session)."""
        doc = session.doc
        with self._restarting:  # one restart at a time in this process; others find it done
            current = self.store.sessions.reread(doc)
            if current is None or current.doc.state != SessionState.NOT_STARTED:
                return None
            if current.doc.job_id != doc.job_id:
                return current  # restarted meanwhile
            datasource = self.datasources.get(doc.data_source_name)
            launcher = self.pools.launchers.for_datasource(datasource)
            conf, secret = self.pools.conf(datasource, launcher, doc.session_id, SessionType.INTERACTIVE)
            request = JobRequest(doc.session_id, datasource, SessionType.INTERACTIVE, conf, secret)
            job_id = self.launch(launcher, request)
            try:
                replaced = self.store.sessions.replace_job(current, job_id, launcher.application_id)
            except AsyncQueryError:
                replaced = None
            if replaced is None:
                _stop_quietly(launcher, job_id)
                return self.store.sessions.reread(doc)
        log.warning(
            "session %s: its claimed pool job %s is gone before it started the session (%s); job %s takes over",
            doc.session_id,
            doc.job_id,
            why,
            job_id,
        )
        metrics.pool_claimed(doc.data_source_name, "failed_over")
        return replaced


def _stop_quietly(launcher: Launcher, job_id: str) -> None:
    try:
        metrics.launcher_call(launcher, "cancel", lambda: launcher.cancel(job_id))
    except AsyncQueryError as exc:
        log.warning("cannot stop job %s, started for nothing: %s", job_id, exc)
