"""Scheduled runs: each tick's claim, its launch as a REFRESH of the index's owner, and its end.

What one look at one schedule does (:meth:`ScheduledRuns.look_at`), by its state (the schedule is
read again by id first: the search that found it lags writes):

- **pending** (armed by a CREATE): enabled, its first run due at once, when the index exists and
  its CREATE has committed; disabled when the index is not a scheduled one after all; removed
  when no index came of it within :data:`PENDING_GRACE_MS`;
- **enabled**, due: the datasource checked (deleted or disabled: the index dropped or altered to
  manual refresh, as the reference's housekeeper does), the index's options checked (no longer
  scheduled: disabled), the source tables fingerprinted (:mod:`.probe`; unchanged since the last
  successful run: no job, the turn recorded ``unchanged``). Then the run is **claimed** with one
  conditional write (``enabled → running``, the next run moved on: of several plugin processes one
  wins) and **launched**: ``REFRESH`` submitted through the service as the schedule's owner
  (:mod:`.owners`), so the authorization, the owner's and the deployment's refresh shares and the
  batch job are a manual REFRESH's. No share free: the turn is recorded ``waiting`` and the run
  waits for the next tick;
- **running**: the run's statement and session read by id, the session's liveness checked (a job
  killed outright is confirmed gone by its launcher, its statement failed). Still running at the
  next tick: that tick is ``skipped``. Ended: settled ``success`` or ``failed`` (a failed run's index
  left ``refreshing`` by its killed job is rolled back to ``active`` with the cause, never left
  ``refreshing``); a failure is retried at the next tick, and each further one in a row waits twice
  as long, up to the back-off bound. A claim never launched (its process stopped) fails after
  :data:`UNLAUNCHED_GRACE_MS`.

Every time here is the scheduler's clock (epoch ms), so tests drive it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from async_query import metrics
from async_query.datasources import DatasourceRegistry
from async_query.handlers.base import SubmitRequest, Submitted, fail_if_orphaned
from async_query.liveness import LivenessChecker
from async_query.scheduler.operations import ScheduleOperations
from async_query.scheduler.owners import Owners
from async_query.scheduler.probe import SourceProbe
from query_core.errors import AsyncQueryError, TooManyRequestsError
from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.naming import latest_id
from query_core.flint.scheduling import interval_ms, is_scheduled, refresh_statement, source_tables
from query_core.index_ops import repair_stalled
from query_core.models import RunOutcome, ScheduleDoc, StatementDoc, Versioned
from query_core.states import FlintIndexState, ScheduleState, StatementState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

#: A claimed run not launched within this long was claimed by a process that stopped.
UNLAUNCHED_GRACE_MS = 120_000
#: A pending schedule whose index did not come within this long is removed (its CREATE failed).
PENDING_GRACE_MS = 3_600_000


@dataclass(frozen=True)
class RunTimes:
    """How often a schedule is looked at while something is under way, and the back-off bound."""

    tick_ms: int
    max_backoff_ms: int


class ScheduledRuns:
    """One plugin process's part in every schedule (see the module's documentation); ``name``
    says which process claimed a run."""

    def __init__(
        self,
        store: Store,
        datasources: DatasourceRegistry,
        submit: Callable[[SubmitRequest], Submitted],
        liveness: LivenessChecker,
        owners: Owners,
        operations: ScheduleOperations,
        times: RunTimes,
        name: str,
        probe: SourceProbe | None = None,
    ) -> None:
        self.store = store
        self.datasources = datasources
        self.submit = submit
        self.liveness = liveness
        self.owners = owners
        self.operations = operations
        self.times = times
        self.name = name
        self.probe = probe

    def look_at(self, seen: Versioned[ScheduleDoc], now: int) -> int | None:
        """Do what the schedule needs at ``now``; when it needs the next look (epoch ms; None:
        no time of its own)."""
        if seen.doc.state == ScheduleState.ENABLED and seen.doc.next_run_time > now:
            return seen.doc.next_run_time
        current = self.store.schedules.of(seen.doc.index_name)
        if current is None:
            return None
        state = current.doc.state
        if state == ScheduleState.PENDING:
            return self._pending(current, now)
        if state == ScheduleState.RUNNING:
            return self._watch(current, now)
        if state == ScheduleState.ENABLED:
            return self._start(current, now) if current.doc.next_run_time <= now else current.doc.next_run_time
        return None

    # -- pending --------------------------------------------------------------------------------

    def _pending(self, current: Versioned[ScheduleDoc], now: int) -> int | None:
        doc = current.doc
        meta = self._meta(doc.index_name)
        if meta is None:
            if now - doc.last_update_time > PENDING_GRACE_MS:
                self.store.schedules.remove(doc.index_name)
                log.info("pending schedule of %s removed: no index came of its CREATE", doc.index_name)
                return None
            return now + self.times.tick_ms
        if not is_scheduled(meta.options):
            self.store.schedules.disable(doc.index_name, "the index is not refreshed by the scheduler")
            return None
        state = self.store.index_states.get(doc.data_source_name, latest_id(doc.index_name))
        if state is None or state.doc.state in (FlintIndexState.EMPTY, FlintIndexState.CREATING):
            return now + self.times.tick_ms  # its CREATE has not committed yet
        interval = meta.options["refresh_interval"]
        query = refresh_statement(meta)
        if self.store.schedules.activate(current, query, interval, interval_ms(interval), next_run=now, now=now):
            log.info("index %s created: its refresh is scheduled every %s", doc.index_name, interval)
        return now

    # -- a run's start --------------------------------------------------------------------------

    def _start(self, current: Versioned[ScheduleDoc], now: int) -> int | None:
        doc = current.doc
        meta = self._meta(doc.index_name)
        if meta is None or not is_scheduled(meta.options):
            why = "no longer exists" if meta is None else "is no longer refreshed by the scheduler"
            self.store.schedules.disable(doc.index_name, f"index {doc.index_name} {why}")
            return None
        datasource = self.datasources.find(doc.data_source_name)
        if datasource is None or datasource.status != "ACTIVE":
            self.operations.datasource_ended(doc.data_source_name, doc.index_name, deleted=datasource is None)
            return None
        next_run = following_tick(doc.next_run_time, doc.interval_millis, now)
        digest = self.probe.fingerprint(datasource, source_tables(meta)) if self.probe is not None else None
        if digest is not None and digest == doc.refreshed_digest:
            unchanged = RunOutcome.UNCHANGED
            if self.store.schedules.pass_turn(current, unchanged, "no source table changed", next_run, now=now):
                metrics.scheduled_run(doc.data_source_name, unchanged.value)
            return next_run
        claimed = self.store.schedules.claim(current, self.name, next_run, digest or "", now=now)
        if claimed is None:
            return None  # another process claimed it, or the schedule moved
        lag_s = (now - doc.next_run_time) / 1000
        try:
            principal = self.owners.principal(doc)
            submitted = self.submit(SubmitRequest(datasource.name, "sql", refresh_statement(meta), principal=principal))
        except TooManyRequestsError as exc:
            return self._settle(claimed, RunOutcome.WAITING, f"no refresh share was free: {exc.message}", now)
        except AsyncQueryError as exc:
            return self._settle(claimed, RunOutcome.FAILED, f"the refresh could not be submitted: {exc.message}", now)
        metrics.scheduled_run(doc.data_source_name, "launched", lag_s)
        session = self.store.sessions.get(datasource.name, submitted.session_id)
        job_id = session.doc.job_id if session is not None else ""
        self.store.schedules.launched(claimed, submitted.query_id, submitted.session_id, job_id, now=now)
        log.info("scheduled refresh of %s launched: query %s, job %s", doc.index_name, submitted.query_id, job_id)
        return now + self.times.tick_ms

    # -- a run under way, and its end -----------------------------------------------------------

    def _watch(self, current: Versioned[ScheduleDoc], now: int) -> int | None:
        doc, run = current.doc, current.doc.run
        if not run.query_id:
            if now - run.claim_time > UNLAUNCHED_GRACE_MS:
                why = "the plugin process that claimed this run stopped before launching it"
                return self._settle(current, RunOutcome.FAILED, why, now)
            return now + self.times.tick_ms
        ended = self._ended(doc)
        if ended is None:
            if doc.next_run_time > now:
                return min(doc.next_run_time, now + self.times.tick_ms)
            next_run = following_tick(doc.next_run_time, doc.interval_millis, now)
            if self.store.schedules.pass_turn(current, RunOutcome.SKIPPED, "", next_run, now=now):
                metrics.scheduled_run(doc.data_source_name, RunOutcome.SKIPPED.value)
                log.info("scheduled refresh of %s skipped: the previous run still runs", doc.index_name)
            return min(next_run, now + self.times.tick_ms)
        outcome, error = ended
        if outcome is RunOutcome.FAILED:
            self._repair_index(doc, error)
        return self._settle(current, outcome, error, now)

    def _ended(self, doc: ScheduleDoc) -> tuple[RunOutcome, str] | None:
        """How the run ended; None while it runs. A session confirmed gone fails its statement."""
        ds, run = doc.data_source_name, doc.run
        statement = self.store.statements.get(ds, run.query_id)
        session = self.store.sessions.get(ds, run.session_id) if run.session_id else None
        if session is not None and not is_terminal(session.doc.state):
            session = self.liveness.check(session)
        if statement is not None:
            statement = fail_if_orphaned(self.store, statement, session)
            return _outcome_of(statement.doc)
        if session is None or is_terminal(session.doc.state):
            return RunOutcome.FAILED, f"the run's query {run.query_id} is gone"
        return None

    def _repair_index(self, doc: ScheduleDoc, error: str) -> None:
        """A failed run's index, left ``refreshing`` by its job (killed before its rollback),
        rolled back to ``active`` with the cause."""
        state = self.store.index_states.get(doc.data_source_name, latest_id(doc.index_name))
        if state is None or state.doc.state != FlintIndexState.REFRESHING or state.doc.job_id != doc.run.job_id:
            return
        reason = f"The scheduled refresh (job {doc.run.job_id}) failed: {error}"
        if repair_stalled(self.store, state, reason) is not None:
            log.warning("index %s rolled back to active: %s", doc.index_name, reason)

    def _settle(self, current: Versioned[ScheduleDoc], outcome: RunOutcome, error: str, now: int) -> int | None:
        """The claimed run's turn recorded; the next run at its tick, or later past repeated
        failures (twice the interval, four times... up to the back-off bound)."""
        doc = current.doc
        next_run = doc.next_run_time
        if outcome is RunOutcome.FAILED and doc.failures >= 1:
            bound = max(self.times.max_backoff_ms, doc.interval_millis)
            next_run = max(next_run, now + min(doc.interval_millis * 2**doc.failures, bound))
        settled = self.store.schedules.settle(current, outcome.value, error, next_run, now=now)
        if settled is None:
            return None
        metrics.scheduled_run(doc.data_source_name, outcome.value)
        log.log(
            logging.WARNING if outcome is RunOutcome.FAILED else logging.INFO,
            "scheduled refresh of %s: %s%s",
            doc.index_name,
            outcome.value,
            f": {error}" if error else "",
        )
        return next_run

    def _meta(self, index_name: str) -> IndexMeta | None:
        raw = flint_meta(self.store.admin, index_name)
        return IndexMeta.from_meta(index_name, raw) if raw else None


def following_tick(due: int, interval: int, now: int) -> int:
    """The first tick after ``now`` of a schedule due at ``due`` every ``interval`` ms: ticks
    missed (the service was down, a run ran long) are not made up for."""
    if interval <= 0:
        return now
    return due + interval * max(1, (now - due) // interval + 1)


def _outcome_of(statement: StatementDoc) -> tuple[RunOutcome, str] | None:
    if statement.state == StatementState.SUCCESS:
        return RunOutcome.SUCCESS, ""
    if is_terminal(statement.state):
        return RunOutcome.FAILED, statement.error or f"the refresh ended {statement.state.value}"
    return None
