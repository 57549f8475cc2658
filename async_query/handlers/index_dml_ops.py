"""The index work of DROP and ALTER to manual refresh, as the plugin does it (no Spark).

Each runs as an :class:`~query_core.index_ops.IndexTransaction` on the index's state document:

- DROP (``→ deleting → deleted``): stop the job refreshing the index, if any. The index and its
  data stay until VACUUM, as in the reference.
- ALTER ... WITH (auto_refresh = false) (``refreshing → updating → active``): stop the streaming
  job, then rewrite ``_meta.options`` with the ALTER's options merged in and ``auto_refresh``
  false.

Messages are the reference's: a missing index is ``Couldn't fetch flint index: <name> details``
(the SQL plugin's ``IndexDMLHandler``); an ALTER that does not change ``auto_refresh`` is
``auto_refresh option must be updated`` (opensearch-spark's ``validateUpdateAllowed``); the
options an ALTER to manual refresh may set are checked as the SQL plugin's
``FlintIndexMetadataServiceImpl`` does, with its messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from query_core.errors import AsyncQueryError, InvalidRequestError
from query_core.flint import AlterIndex, DropIndex, flint_index_name
from query_core.flint.metas import flint_meta
from query_core.flint.refresh_options import manual_refresh_options
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import FlintIndexStateDoc, SessionDoc, Versioned
from query_core.states import FlintIndexState, SessionState, SessionType, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

IndexDmlStatement = DropIndex | AlterIndex


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
    ) -> None:
        self.store = store
        self.stop_job = stop_job
        self.stop_stream = stop_stream

    def run(self, datasource: str, statement: IndexDmlStatement) -> None:
        index_name = flint_index_name(statement.index, datasource)
        meta = flint_meta(self.store.admin, index_name)
        if not meta or "kind" not in meta:  # no such index, or not a Flint index (no Flint ``_meta``)
            raise InvalidRequestError(missing_index(index_name))
        transaction = IndexTransaction(self.store, IndexTarget(datasource, index_name))
        before = transaction.current()
        if isinstance(statement, DropIndex):
            transaction.run("drop", lambda: self._stop_refresh(datasource, before))
            log.info("dropped index %s", index_name)
            return
        provided = dict(statement.options.raw)
        manual_refresh_options(meta, provided)  # refused before the index moves
        transaction.run("alter to manual refresh", lambda: self._alter(datasource, index_name, before, provided))
        log.info("index %s altered to manual refresh", index_name)

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
        """Stop the job the state document names, if its session is live.

        A job with no session document at all (started by the reference plugin, say) is asked to
        stop too when the index was ``refreshing``, on a best-effort basis: its state is unknown
        here. A job whose sessions all ended is left alone.
        """
        if before is None or not before.doc.job_id:
            return
        state = before.doc
        sessions = self.store.sessions.find(datasource, list(SessionState), job_id=state.job_id)
        live = [s for s in sessions if not is_terminal(s.doc.state)]
        streaming = [s for s in live if s.doc.session_type == SessionType.STREAMING]
        if streaming:
            for session in streaming:
                self.stop_stream(session)
            log.info("stopped the stream of job %s refreshing %s", state.job_id, state.index_name or state.latest_id)
        elif live:
            self.stop_job(datasource, state.job_id)
            log.info("stopped job %s refreshing index %s", state.job_id, state.index_name or state.latest_id)
        elif not sessions and state.state == FlintIndexState.REFRESHING:
            try:
                self.stop_job(datasource, state.job_id)
            except AsyncQueryError as exc:
                log.warning("cannot stop job %s (no session of it is known): %s", state.job_id, exc)
