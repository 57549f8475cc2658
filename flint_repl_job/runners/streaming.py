"""The streaming runner (``docs/job.md``): an auto-refreshed Flint index's job.

The plugin writes a statement (``CREATE ... WITH (auto_refresh = true)``, ``ALTER ... WITH
(auto_refresh = true)`` or ``RECOVER INDEX JOB``) and a ``streaming`` session, then launches this
job. :meth:`StreamingJob.work`:

1. runs the statement like a batch job does (result document, then the terminal state): the
   job's Flint engine, allowed to start streams here, creates or alters the index and starts its
   stream; the statement is SUCCESS once the stream runs;
2. watches the stream every ``stream_check_ms`` until it must stop:

   - the stream died (or the source table is gone, checked every :attr:`StreamingJob.table_check_s`):
     the index moves ``refreshing -> failed`` with the cause and the session ends ``fail``;
   - the index's state document is no longer ``refreshing`` under this job (ALTER to manual,
     DROP, the housekeeper): the stream stops gracefully and the session ends ``dead``; the
     state document is the plugin's operation's, this job does not write it;
   - the job is told to stop (SIGTERM, the heartbeat lost the session): the stream stops
     gracefully, the index state document is left alone (the plugin or the housekeeper repairs it);

3. meanwhile its heartbeat writes the session once per ``heartbeat_streaming_ms`` with the
   stream's progress (:class:`query_core.models.StreamProgress`), whatever the batch rate.

A statement that is none of these is failed at once (:data:`NOT_SUPPORTED`), without running.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from flint_repl_job.config import JobConfig
from flint_repl_job.flint_statements import FlintParseError, flint_statement
from flint_repl_job.indexes.builders import session_table
from flint_repl_job.indexes.engine import FlintEngine
from flint_repl_job.indexes.streaming import IndexStream, StreamSettings
from flint_repl_job.runners.batch import BatchJob
from flint_repl_job.statement import Executor
from query_core.errors import AsyncQueryError, ConflictError
from query_core.flint import (
    AlterIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    RecoverIndexJob,
)
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.states import FlintIndexState, SessionState, StatementState
from query_core.store import Store

log = logging.getLogger(__name__)

NOT_SUPPORTED = (
    "a streaming job runs CREATE ... WITH (auto_refresh = true), ALTER ... WITH (auto_refresh = true) "
    "and RECOVER INDEX JOB only"
)
#: How often the stream's source tables are looked up in the catalog.
TABLE_CHECK_S = 30.0


def is_streaming_statement(query: str) -> bool:
    """True for the statements a streaming job runs (see :data:`NOT_SUPPORTED`)."""
    try:
        statement = flint_statement(query)
    except FlintParseError:
        return False
    if isinstance(statement, CreateSkippingIndex | CreateCoveringIndex | CreateMaterializedView | AlterIndex):
        return statement.options.auto_refresh
    return isinstance(statement, RecoverIndexJob)


class StreamingJob(BatchJob):
    """A streaming session: start the index's stream, then keep it running until told to stop."""

    def __init__(
        self, cfg: JobConfig, store: Store, executor: Executor, stop_event: threading.Event | None = None
    ) -> None:
        super().__init__(cfg, store, executor, stop_event)
        self.stream: IndexStream | None = None
        #: Seconds between two catalog look-ups of the source tables.
        self.table_check_s = TABLE_CHECK_S
        self.heartbeat.extension = self

    # -- the heartbeat's extension ----------------------------------------------------------

    def beat_interval_ms(self) -> int | None:
        return self.cfg.heartbeat_streaming_ms if self.stream is not None else None

    def beat_fields(self) -> dict[str, Any]:
        stream = self.stream
        if stream is None:
            return {}
        progress = stream.progress()
        self.figures.stream(progress)
        return {"stream_progress": progress}

    # -- the work ---------------------------------------------------------------------------

    @property
    def engine(self) -> FlintEngine | None:
        """The executor's Flint engine (``SparkExecutor.flint``), None for other executors."""
        flint = getattr(self.executor, "flint", None)
        return flint if isinstance(flint, FlintEngine) else None

    def work(self) -> tuple[SessionState, str]:
        engine = self.engine
        if engine is not None:
            engine.streams.enable(
                StreamSettings(self.cfg.checkpoint_root, self.cfg.checkpoint_mandatory, self.cfg.stream_idle_poll_ms)
            )
        outcome = self.run_statement()
        stream = engine.streams.take() if engine is not None else None
        if outcome.state is not StatementState.SUCCESS:
            if stream is not None:  # started, then the statement did not succeed (cancelled, say)
                stream.stop_gracefully()
            if outcome.state is StatementState.CANCELLED:
                return SessionState.DEAD, ""
            return SessionState.FAIL, outcome.error or f"Statement ended {outcome.state.value}"
        if stream is None:
            log.info("statement done without a stream to run (the index existed already)")
            return SessionState.DEAD, ""
        return self.watch(stream)

    job_kind = "Streaming"

    def refusal(self, query: str) -> str | None:
        """A streaming job runs auto refreshes only (:data:`NOT_SUPPORTED`)."""
        if not is_streaming_statement(query) or self.engine is None:
            return f"Session failed: {NOT_SUPPORTED}"
        return None

    # -- watching the stream ----------------------------------------------------------------

    def index_transaction(self, index_name: str) -> IndexTransaction:
        target = IndexTarget(self.cfg.datasource, index_name)
        return IndexTransaction(self.store, target, application_id=self.cfg.application_id, job_id=self.cfg.job_id)

    def watch(self, stream: IndexStream) -> tuple[SessionState, str]:
        """Keep the stream running until it dies, the plugin asks it to stop, or the job stops."""
        self.stream = stream
        self.heartbeat.retime()
        transaction = self.index_transaction(stream.index_name)
        next_table_check = time.monotonic() + self.table_check_s
        try:
            while not self.stop_event.wait(self.cfg.stream_check_ms / 1000):
                failure = stream.failure()
                if failure is None and time.monotonic() >= next_table_check:
                    next_table_check = time.monotonic() + self.table_check_s
                    failure = self.missing_table(stream)
                if failure is not None:
                    return self.fail_stream(stream, transaction, failure)
                if self.stop_asked(transaction):
                    stream.stop_gracefully()
                    return SessionState.DEAD, ""
            log.info("job stopping: stopping the stream of %s", stream.index_name)
            stream.stop_gracefully()
            return SessionState.DEAD, ""
        finally:
            self.stream = None

    def stop_asked(self, transaction: IndexTransaction) -> bool:
        """True when the index's state document no longer says ``refreshing`` under this job."""
        try:
            current = transaction.current()
        except AsyncQueryError as exc:  # an index outage is not a stop request: look again later
            log.warning("cannot read the state of %s: %s", transaction.target.index_name, exc)
            return False
        if current is None:
            log.info("state of %s is gone: stopping its stream", transaction.target.index_name)
            return True
        doc = current.doc
        if doc.state is not FlintIndexState.REFRESHING or (doc.job_id and doc.job_id != self.cfg.job_id):
            log.info(
                "index %s is %s under job %s: stopping its stream",
                transaction.target.index_name,
                doc.state.value,
                doc.job_id or "none",
            )
            return True
        return False

    def missing_table(self, stream: IndexStream) -> str | None:
        """A failure text when one of the stream's source tables no longer exists."""
        engine = self.engine
        if engine is None:
            return None
        for table in stream.source_tables:
            try:
                exists = engine.spark.catalog.tableExists(session_table(table, self.cfg.datasource))
            except Exception as exc:  # noqa: BLE001 - a catalog hiccup is not a missing table
                log.warning("cannot look up %s: %s", table, exc)
                continue
            if not exists:
                return f"Streaming refresh of {stream.index_name} stopped: source table {table} no longer exists"
        return None

    def fail_stream(self, stream: IndexStream, transaction: IndexTransaction, failure: str) -> tuple[SessionState, str]:
        """The stream died: ``refreshing -> failed`` with the cause (when the index is still this
        job's), and the session ends ``fail`` with it.

        The index states' ``fail_stream`` rather than ``IndexTransaction.run``: that clears
        ``error`` on the end state of an operation without a transitioning state, and here the
        error is the point."""
        log.error("%s", failure)
        if stream.query.isActive:
            stream.query.stop()
        current = transaction.current()
        if current is not None:
            try:
                self.store.index_states.fail_stream(current, failure, job_id=self.cfg.job_id)
            except ConflictError:
                log.warning("state of %s moved meanwhile: left as it is", stream.index_name)
        return SessionState.FAIL, failure
