"""The index work of DROP and ALTER to manual refresh, as the plugin does it (no Spark).

Each runs as an :class:`~query_core.index_ops.IndexTransaction` on the index's state document:

- DROP (``→ deleting → deleted``): stop the job refreshing the index, if any, and disable its
  schedule. The index and its data stay until VACUUM, as in the reference.
- ALTER ... WITH (auto_refresh = false) (``refreshing → updating → active``): stop the streaming
  job, then rewrite ``_meta.options`` with the ALTER's options merged in and ``auto_refresh``
  false.

The statements about indexes the service's scheduler refreshes (an ALTER that hands an index to
it or changes its interval, an ALTER to manual refresh of a scheduled index, RECOVER INDEX JOB of
one) are :class:`async_query.scheduler.operations.ScheduleOperations`'.

Messages are the reference's: a missing index is ``Couldn't fetch flint index: <name> details``
(the SQL plugin's ``IndexDMLHandler``); an ALTER that does not change ``auto_refresh`` is
``auto_refresh option must be updated`` (opensearch-spark's ``validateUpdateAllowed``); the
options an ALTER to manual refresh may set are checked as the SQL plugin's
``FlintIndexMetadataServiceImpl`` does, with its messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from async_query.scheduler.operations import ScheduleOperations
from async_query.security.principal import ANONYMOUS, Principal
from async_query.streams import RefreshStopper
from query_core.errors import InvalidRequestError
from query_core.flint import AlterIndex, DropIndex, RecoverIndexJob, check_index_catalog, flint_index_name
from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.naming import sanitize_index_name
from query_core.flint.refresh_options import manual_refresh_options
from query_core.flint.scheduling import is_scheduled
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import FlintIndexStateDoc, SessionDoc, Versioned
from query_core.store import Store

log = logging.getLogger(__name__)

IndexDmlStatement = DropIndex | AlterIndex | RecoverIndexJob


def missing_index(index_name: str) -> str:
    return f"Couldn't fetch flint index: {index_name} details"


class IndexDmlOperations:
    """Runs DROP and ALTER to manual refresh on a datasource's Flint indexes.

    ``stop_job(datasource, job_id)`` asks the launcher to stop a job, bounded in time; it raises
    an :class:`AsyncQueryError` when it cannot (the operation then rolls back).
    ``stop_stream(session)`` stops a streaming session's job: the operation's move of the index
    out of ``refreshing`` asked it to stop, and this waits for it, boundedly
    (:class:`async_query.streams.StreamStopper`).
    """

    def __init__(
        self,
        store: Store,
        stop_job: Callable[[str, str], None],
        stop_stream: Callable[[Versioned[SessionDoc]], object],
        schedules: ScheduleOperations | None = None,
    ) -> None:
        self.store = store
        self.refreshes = RefreshStopper(store, stop_job, stop_stream)
        #: The statements about scheduled indexes (None: this service has no scheduler).
        self.schedules = schedules

    def run(self, datasource: str, statement: IndexDmlStatement, owner: Principal = ANONYMOUS) -> None:
        """Run ``statement`` on ``datasource``'s index, for ``owner`` (who owns the runs of a
        schedule the statement turns on)."""
        index_name = _index_name(statement, datasource)
        meta = flint_meta(self.store.admin, index_name)
        if not meta or "kind" not in meta:  # no such index, or not a Flint index (no Flint ``_meta``)
            raise InvalidRequestError(missing_index(index_name))
        if self._scheduled(statement, datasource, index_name, meta, owner):
            return
        assert not isinstance(statement, RecoverIndexJob)  # a stream's recovery is a streaming job's
        transaction = IndexTransaction(self.store, IndexTarget(datasource, index_name))
        before = transaction.current()
        if isinstance(statement, DropIndex):
            transaction.run("drop", lambda: self._drop(datasource, index_name, before))
            log.info("dropped index %s", index_name)
            return
        provided = dict(statement.options.raw)
        manual_refresh_options(meta, provided)  # refused before the index moves
        transaction.run("alter to manual refresh", lambda: self._alter(datasource, index_name, before, provided))
        log.info("index %s altered to manual refresh", index_name)

    def _scheduled(
        self, statement: IndexDmlStatement, datasource: str, index_name: str, meta: dict[str, Any], owner: Principal
    ) -> bool:
        """Run the statements about indexes the scheduler refreshes (:mod:`async_query.scheduler.
        operations`); False for the others."""
        if isinstance(statement, DropIndex):
            return False
        options = {str(k): str(v) for k, v in dict(meta.get("options") or {}).items()}
        if isinstance(statement, AlterIndex) and not statement.options.auto_refresh and not is_scheduled(options):
            return False  # a stream's ALTER to manual refresh
        if self.schedules is None:
            raise InvalidRequestError("this service has no scheduler: the statement is a streaming job's")
        if isinstance(statement, RecoverIndexJob):
            found = IndexMeta.from_meta(index_name, meta)
            if found is not None:  # its name may be another datasource's: its table decides
                check_index_catalog(found, datasource)
            self.schedules.recover(datasource, index_name, meta, owner)
        elif statement.options.auto_refresh:
            self.schedules.alter_to_auto(datasource, index_name, meta, dict(statement.options.raw), owner)
        else:
            provided = dict(statement.options.raw)
            self.schedules.alter_to_manual(datasource, index_name, meta, provided, "altered to manual refresh")
        return True

    def _drop(self, datasource: str, index_name: str, before: Versioned[FlintIndexStateDoc] | None) -> None:
        """Stop the job refreshing the index; its schedule, if any, is disabled."""
        if self.schedules is not None:
            self.schedules.dropped(datasource, index_name, before)
        else:
            self._stop_refresh(datasource, before)

    def _alter(
        self, datasource: str, index_name: str, before: Versioned[FlintIndexStateDoc] | None, provided: dict[str, str]
    ) -> None:
        """Stop the stream, then rewrite ``_meta`` (read again: the rest of it is kept as it is)."""
        self._stop_refresh(datasource, before)
        current = flint_meta(self.store.admin, index_name)
        if not current:
            raise InvalidRequestError(missing_index(index_name))
        self.store.admin.put_mapping_meta(index_name, {**current, "options": manual_refresh_options(current, provided)})

    def _stop_refresh(self, datasource: str, before: Versioned[FlintIndexStateDoc] | None) -> None:
        self.refreshes.stop(datasource, before)


def _index_name(statement: IndexDmlStatement, datasource: str) -> str:
    if isinstance(statement, RecoverIndexJob):
        return sanitize_index_name(statement.index_name.strip("`"))
    return flint_index_name(statement.index, datasource)
