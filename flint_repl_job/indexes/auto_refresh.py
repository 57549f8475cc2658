"""Auto refresh as a Flint engine runs it: the stream a CREATE, ALTER or RECOVER starts, in a
streaming job only (docs/flint.md, "Auto refresh"), handed to the job once its statement is done."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from flint_repl_job.indexes.output import FlintIndexError
from flint_repl_job.indexes.snapshots import forget_snapshot
from flint_repl_job.indexes.streaming import (
    IndexStream,
    StreamOptionError,
    StreamSettings,
    check_stream_options,
    checkpoint_location,
    delete_checkpoint,
    start_stream,
)
from flint_repl_job.opensearch_source import source_options
from query_core.config import OpenSearchConfig
from query_core.flint.index_meta import IndexMeta
from query_core.states import SessionState
from query_core.store import Store
from query_core.validation import Checks, ValidationPolicy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: How long RECOVER waits for the job that ran the index's stream before to stop it.
RECOVER_WAIT_S = 60.0


class AutoRefresh:
    """The streams of one engine: enabled by a streaming job, which watches and stops them."""

    def __init__(
        self,
        spark: SparkSession,
        store: Store,
        datasource: str,
        opensearch: OpenSearchConfig,
        write: Callable[[DataFrame, IndexMeta], None],
        register_source: Callable[[], None],
        validation: ValidationPolicy,
    ) -> None:
        self.spark = spark
        self.store = store
        self.datasource = datasource
        self.opensearch = opensearch
        #: Appends a micro-batch's rows to the index (the data source registered first).
        self.write = write
        #: Registers the index data source a stream writes through (before the stream starts).
        self.register_source = register_source
        #: What statements may hold: a stream writes, and VACUUM deletes, no checkpoint outside
        #: the checkpoint root.
        self.validation = validation
        self._settings: StreamSettings | None = None
        self._stream: IndexStream | None = None

    def enable(self, settings: StreamSettings) -> None:
        """Let the engine start auto refreshes (CREATE/ALTER with auto refresh, RECOVER): only a
        streaming job, which watches and stops the stream, does."""
        self._settings = settings

    @property
    def enabled(self) -> bool:
        return self._settings is not None

    def settings(self) -> StreamSettings:
        """The streaming job's settings, or those of the Spark conf (a batch job's VACUUM)."""
        if self._settings is not None:
            return self._settings
        conf = self.spark.conf
        return StreamSettings.from_conf(lambda key: conf.get(key, None))

    def hold(self, stream: IndexStream) -> None:
        """The stream the statement started, kept for the job."""
        self._stream = stream

    def take(self) -> IndexStream | None:
        """The stream the last statement started, handed over to the caller (once)."""
        stream, self._stream = self._stream, None
        return stream

    def check(self, meta: IndexMeta, incremental: bool = False) -> None:
        """The index's stream options, as a statement's error."""
        try:
            check_stream_options(meta, self.settings(), incremental=incremental)
        except StreamOptionError as exc:
            raise FlintIndexError(str(exc)) from None

    @functools.cached_property
    def _checkpoint_checks(self) -> Checks:
        """The checks of checkpoint locations, read as this job's Hadoop reads them."""
        from flint_repl_job.guard import StatementGuard

        return StatementGuard(self.spark, self.validation).checks

    def check_checkpoint(self, location: str) -> None:
        """Refuse a checkpoint location the datasource's validation does not allow."""
        self._checkpoint_checks.checkpoint(location)

    def clear_checkpoint(self, meta: IndexMeta) -> None:
        """Delete the checkpoint the index's stream would resume from: a new scheduled index
        starts afresh, as a new stream does (one left by a dropped index of the same name that
        was never vacuumed would otherwise skip the files it had seen)."""
        location = checkpoint_location(meta.options, meta.index_name, self.settings())
        if location:
            if meta.options.get("checkpoint_location"):
                self.check_checkpoint(location)
            delete_checkpoint(self.spark, location)

    def start(self, meta: IndexMeta, fresh: bool, available_now: bool = False) -> IndexStream:
        """Start the index's stream (from a fresh checkpoint, or its own)."""
        checkpoint = checkpoint_location(meta.options, meta.index_name, self.settings())
        if checkpoint and meta.options.get("checkpoint_location"):
            # The stream writes there (and a fresh one deletes what is there first), whoever wrote
            # the index's options: an ALTER or a RECOVER reads them from the index.
            self.check_checkpoint(checkpoint)
        forget_snapshot(self.store.admin, meta)
        write = self.write
        self.register_source()
        try:
            return start_stream(
                self.spark,
                meta,
                self.datasource,
                self.settings(),
                source_options(self.opensearch),
                lambda frame: write(frame, meta),
                fresh=fresh,
                available_now=available_now,
            )
        except StreamOptionError as exc:
            raise FlintIndexError(str(exc)) from None

    def wait_for_job_to_stop(self, job_id: str, index_name: str) -> None:
        """Two streams must never share a checkpoint: wait until the job that last ran this
        index's stream has no live session (the move to ``recovering`` asked it to stop)."""
        deadline = time.monotonic() + RECOVER_WAIT_S
        live = [SessionState.NOT_STARTED, SessionState.RUNNING]
        while self.store.sessions.find(self.datasource, live, job_id=job_id):
            if time.monotonic() >= deadline:
                raise FlintIndexError(
                    f"job {job_id} still runs the stream of {index_name} after {RECOVER_WAIT_S:g} s; "
                    "stop it first (ALTER ... WITH (auto_refresh = false))"
                )
            time.sleep(0.5)
