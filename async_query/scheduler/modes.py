"""Which handler a Flint statement goes to, given how its index is (to be) refreshed.

The classifier (:mod:`async_query.dispatch`) reads the statement alone; whether an auto-refresh
index streams or is scheduled also depends on the deployment's scheduler and, for ALTER and
RECOVER, on the index's own options. :meth:`RefreshModes.route` decides, after the classifier and
before the handler (``docs/flint.md``, "Dispatch"):

- CREATE with ``auto_refresh = true`` that is to be scheduled is **batch**: a job creates the
  index (its refreshes are the scheduler's, no stream); its schedule is armed here, as the
  caller's, and enabled by the scheduler once the index exists;
- ALTER with ``auto_refresh = true`` that hands the index to the scheduler, or changes a scheduled
  index's interval, and RECOVER INDEX JOB of a scheduled index, are **index DML**: the plugin does
  them (:mod:`async_query.scheduler.operations`);
- everything else keeps its kind (a stream's CREATE, ALTER and RECOVER are streaming).

The job, given the same scheduler settings, makes the same choice (:func:`query_core.flint.
scheduling.with_schedule`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from async_query.dispatch import Classified, QueryKind
from async_query.scheduler.owners import owner_of
from async_query.security.principal import Principal
from query_core.errors import InvalidRequestError
from query_core.flint import AlterIndex, CreateStatement, RecoverIndexJob, flint_index_name
from query_core.flint.metas import flint_meta
from query_core.flint.naming import sanitize_index_name
from query_core.flint.scheduling import SchedulerPolicy, altered_to_auto, interval_ms, is_scheduled, with_schedule
from query_core.models import now_millis
from query_core.store import ScheduleTerms, Store

log = logging.getLogger(__name__)


class RefreshModes:
    """Routes a classified POST by its index's refresh mode (see the module's documentation)."""

    def __init__(self, store: Store, policy: SchedulerPolicy) -> None:
        self.store = store
        self.policy = policy

    def route(self, classified: Classified, datasource: str, caller: Principal) -> Classified:
        """The kind that runs ``classified`` on ``datasource``; a CREATE to be scheduled arms its
        schedule for ``caller``. Raises :class:`InvalidRequestError` (a 400) for a CREATE whose
        schedule the scheduler refuses (an interval below its bound with ``'external'``)."""
        statement = classified.statement
        if isinstance(statement, CreateStatement) and statement.options.auto_refresh:
            options = with_schedule(statement.options.with_defaults(), self.policy)
            if not is_scheduled(options):
                return classified
            self._arm(datasource, flint_index_name(statement.index, datasource), options, caller)
            return dataclasses.replace(classified, kind=QueryKind.BATCH)
        if isinstance(statement, AlterIndex) and statement.options.auto_refresh:
            index_name = flint_index_name(statement.index, datasource)
            return self._index_dml_if(classified, index_name, lambda options: self._to_scheduler(options, statement))
        if isinstance(statement, RecoverIndexJob):
            index_name = sanitize_index_name(statement.index_name.strip("`"))
            return self._index_dml_if(classified, index_name, is_scheduled)
        return classified

    def _to_scheduler(self, options: dict[str, str], statement: AlterIndex) -> bool:
        """The ALTER leaves the index scheduled. One the scheduler would refuse is left to the
        stream's job, which reports it in the reference's words, as before there was a scheduler."""
        try:
            return is_scheduled(altered_to_auto(options, statement.options.raw, self.policy))
        except InvalidRequestError:
            return False

    def _index_dml_if(
        self, classified: Classified, index_name: str, scheduled: Callable[[dict[str, str]], bool]
    ) -> Classified:
        raw = flint_meta(self.store.admin, index_name)
        if not raw or "kind" not in raw:
            return classified  # no such index: its handler says so, in the reference's words
        options = {str(k): str(v) for k, v in dict(raw.get("options") or {}).items()}
        if not scheduled(options):
            return classified
        return dataclasses.replace(classified, kind=QueryKind.INDEX_DML)

    def _arm(self, datasource: str, index_name: str, options: dict[str, str], caller: Principal) -> None:
        """The new index's schedule, ``pending`` until its CREATE has made it. An index that is
        scheduled already keeps its schedule (the CREATE fails, or does nothing IF NOT EXISTS)."""
        interval = options["refresh_interval"]
        owner, roles = owner_of(caller)
        terms = ScheduleTerms(datasource, index_name, interval, interval_ms(interval), owner, roles)
        if self.store.schedules.arm(terms, now=now_millis()) is None:
            log.info("index %s is scheduled already: its schedule is kept", index_name)
