"""The index work of statements on indexes the scheduler refreshes, as the plugin does it (no Spark).

Each is an :class:`~query_core.index_ops.IndexTransaction` on the index's state document (the
operations of ``docs/documents.md``; a scheduled index idles ``active``), with the schedule
changed inside it, so it changes only when the operation goes ahead:

- ALTER ... WITH (auto_refresh = true ...) to the scheduler (``schedule refresh``): from a manual
  index, or from a stream, which is stopped first; ``_meta.options`` rewritten, the schedule
  enabled as the caller's, its first run due at once;
- ALTER of a scheduled index's interval: ``_meta.options`` and the schedule's interval rewritten,
  no state move (a run in progress goes on); the next run falls one new interval after the last;
- ALTER ... WITH (auto_refresh = false) (``unschedule refresh``): a run in progress stopped, the
  schedule disabled, ``_meta`` as the reference's ALTER to manual refresh writes it;
- RECOVER INDEX JOB (``recover scheduled refresh``): the schedule enabled again, failures
  forgotten, a run due at once;
- DROP: the schedule disabled (:meth:`ScheduleOperations.dropped`); VACUUM (a job) removes it;
- a datasource deleted or disabled (the reference's housekeeper): its scheduled indexes dropped, or
  altered to manual refresh, when their next run falls due (:meth:`ScheduleOperations.datasource_ended`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from async_query.scheduler.owners import owner_of
from async_query.security.principal import Principal
from async_query.streams import RefreshStopper
from query_core.errors import AsyncQueryError, InvalidRequestError
from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.refresh_options import manual_refresh_options
from query_core.flint.scheduling import SchedulerPolicy, altered_to_auto, interval_ms, is_scheduled, refresh_statement
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import FlintIndexStateDoc, Versioned, now_millis
from query_core.states import ScheduleState
from query_core.store import ScheduleTerms, Store

log = logging.getLogger(__name__)


class ScheduleOperations:
    """ALTER, RECOVER, DROP and a datasource's end, for scheduled indexes (see the module's
    documentation). ``wake`` tells this process's scheduler a run may be due at once."""

    def __init__(
        self,
        store: Store,
        policy: SchedulerPolicy,
        refreshes: RefreshStopper,
        clock: Callable[[], int] = now_millis,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.policy = policy
        #: Stops the job refreshing an index (a stream, or a scheduled run).
        self.refreshes = refreshes
        self.clock = clock
        self.wake = wake

    # -- ALTER ----------------------------------------------------------------------------------

    def alter_to_auto(
        self, datasource: str, index_name: str, raw: Mapping[str, Any], provided: Mapping[str, str], owner: Principal
    ) -> None:
        """ALTER ... WITH (auto_refresh = true, ...) of an index the ALTER hands to the scheduler."""
        existing = _options(raw)
        options = altered_to_auto(existing, provided, self.policy)
        if not is_scheduled(options):
            raise InvalidRequestError(f"Index {index_name} would not be refreshed by the scheduler: a stream alters it")
        if is_scheduled(existing):
            self._reschedule(datasource, index_name, raw, options, owner)
            return
        transaction = IndexTransaction(self.store, IndexTarget(datasource, index_name))
        before = transaction.current()
        terms = self._terms(datasource, index_name, raw, options, owner)

        def work() -> None:
            self.refreshes.stop(datasource, before)  # the stream it had, if any
            self._put_options(index_name, options)
            self.store.schedules.enable(terms, next_run=self.clock())

        transaction.run("schedule refresh", work)
        log.info("index %s is refreshed by the scheduler every %s", index_name, terms.interval)
        self.wake()

    def _reschedule(
        self, datasource: str, index_name: str, raw: Mapping[str, Any], options: dict[str, str], owner: Principal
    ) -> None:
        """A scheduled index's new interval (or mode spelled again): its next run one new
        interval after the last (at once if that is past)."""
        self._put_options(index_name, options)
        interval = options["refresh_interval"]
        millis = interval_ms(interval)
        current = self.store.schedules.of(index_name)
        now = self.clock()
        if current is None or current.doc.state not in (ScheduleState.ENABLED, ScheduleState.RUNNING):
            self.store.schedules.enable(self._terms(datasource, index_name, raw, options, owner), next_run=now)
        else:
            last = max(current.doc.last_run_time, current.doc.enabled_time)
            self.store.schedules.change_interval(index_name, interval, millis, max(now, last + millis), now=now)
        log.info("index %s: its scheduled refresh now runs every %s", index_name, interval)
        self.wake()

    def alter_to_manual(
        self, datasource: str, index_name: str, raw: Mapping[str, Any], provided: Mapping[str, str], reason: str
    ) -> None:
        """ALTER ... WITH (auto_refresh = false) of a scheduled index (or its disabled datasource):
        a run in progress stopped, the schedule disabled, ``_meta`` made manual."""
        options = manual_refresh_options(raw, provided)  # refused before the index moves
        transaction = IndexTransaction(self.store, IndexTarget(datasource, index_name))
        before = transaction.current()

        def work() -> None:
            self.stop_runs(datasource, index_name, before)
            self._put_options(index_name, options)
            self.store.schedules.disable(index_name, reason)

        transaction.run("unschedule refresh", work)
        log.info("index %s is no longer refreshed by the scheduler: %s", index_name, reason)

    # -- RECOVER, DROP, a datasource's end -----------------------------------------------------

    def recover(self, datasource: str, index_name: str, raw: Mapping[str, Any], owner: Principal) -> None:
        """RECOVER INDEX JOB of a scheduled index: its schedule enabled again, a run due at once
        (failures and their back-off forgotten). The runs stay its owner's if it has a schedule."""
        options = _options(raw)
        current = self.store.schedules.of(index_name)
        terms = self._terms(datasource, index_name, raw, options, owner)
        if current is not None and current.doc.owner:
            terms = ScheduleTerms(
                datasource, index_name, terms.interval, terms.interval_millis,
                current.doc.owner, tuple(current.doc.owner_roles), terms.scheduled_query,
            )  # fmt: skip
        IndexTransaction(self.store, IndexTarget(datasource, index_name)).run(
            "recover scheduled refresh", lambda: self.store.schedules.enable(terms, next_run=self.clock())
        )
        log.info("index %s recovered: its scheduled refresh runs again", index_name)
        self.wake()

    def dropped(self, datasource: str, index_name: str, before: Versioned[FlintIndexStateDoc] | None) -> None:
        """DROP of an index: the job refreshing it stopped, its schedule (if any) disabled.
        VACUUM removes the schedule."""
        self.stop_runs(datasource, index_name, before)
        self.store.schedules.disable(index_name, "the index was dropped")

    def stop_runs(self, datasource: str, index_name: str, before: Versioned[FlintIndexStateDoc] | None) -> None:
        """Stop the job refreshing the index as its state document named it before the operation,
        and its scheduled run's job, which may not have reached the index yet."""
        self.refreshes.stop(datasource, before)
        current = self.store.schedules.of(index_name)
        if current is None or current.doc.state != ScheduleState.RUNNING or not current.doc.run.job_id:
            return
        job_id = current.doc.run.job_id
        if before is not None and before.doc.job_id == job_id:
            return  # stopped above
        try:
            self.refreshes.stop_job(datasource, job_id)
        except AsyncQueryError as exc:
            log.warning("cannot stop job %s of the scheduled refresh of %s: %s", job_id, index_name, exc)

    def datasource_ended(self, datasource: str, index_name: str, deleted: bool) -> None:
        """The reference's housekeeping of a scheduled index whose datasource was deleted (the
        index is dropped: ``deleting → deleted``, its data kept until VACUUM) or disabled (it is
        altered to manual refresh)."""
        if not deleted:
            raw = self._meta(index_name)
            self.alter_to_manual(datasource, index_name, raw, {}, f"datasource {datasource} is disabled")
            return
        transaction = IndexTransaction(self.store, IndexTarget(datasource, index_name))
        before = transaction.current()

        def work() -> None:
            self.stop_runs(datasource, index_name, before)
            self.store.schedules.disable(index_name, f"datasource {datasource} was deleted")

        transaction.run("drop", work)
        log.info("index %s dropped: datasource %s was deleted", index_name, datasource)

    # -- helpers --------------------------------------------------------------------------------

    def _terms(
        self, datasource: str, index_name: str, raw: Mapping[str, Any], options: dict[str, str], owner: Principal
    ) -> ScheduleTerms:
        interval = options["refresh_interval"]
        meta = IndexMeta.from_meta(index_name, {**raw, "options": options})
        name, roles = owner_of(owner)
        query = refresh_statement(meta) if meta is not None else ""
        return ScheduleTerms(datasource, index_name, interval, interval_ms(interval), name, roles, query)

    def _meta(self, index_name: str) -> dict[str, Any]:
        raw = flint_meta(self.store.admin, index_name)
        if not raw:
            raise InvalidRequestError(f"Couldn't fetch flint index: {index_name} details")
        return raw

    def _put_options(self, index_name: str, options: dict[str, str]) -> None:
        """``_meta.options`` rewritten (the rest of ``_meta`` read again and kept as it is)."""
        current = self._meta(index_name)
        self.store.admin.put_mapping_meta(index_name, {**current, "options": options})


def _options(raw: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(raw.get("options") or {}).items()}
