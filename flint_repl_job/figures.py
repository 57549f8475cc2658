"""What a job counts about its own work, for its heartbeat to carry (``docs/job.md``, ``docs/metrics.md``).

Every figure is cumulative for the life of the job: the plugin differences them per session, so
a heartbeat that is lost or written twice loses or repeats nothing. The job writes no document
for them: they ride on the heartbeat's one write per interval and on the session's end.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from flint_repl_job.acceleration.report import Acceleration
from query_core.models import PICKUP_BUCKETS_S, RUN_BUCKETS_S, Histogram, JobFigures, StatementDoc, StreamProgress


@dataclass(frozen=True)
class SparkIo:
    """Spark's input and output metrics of one statement's stages."""

    rows_read: int = 0
    bytes_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0


class _Buckets:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> Histogram:
        return Histogram(counts=list(self.counts), sum=round(self.sum, 6))


class JobCounters:
    """The job's figures, fed from the statement runner, the store's listeners and the stream;
    thread-safe (the heartbeat reads them from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statements: dict[str, int] = {}
        self._calls: dict[str, int] = {}
        self._pickup = _Buckets(PICKUP_BUCKETS_S)
        self._run = _Buckets(RUN_BUCKETS_S)
        self._io = SparkIo()
        self._micro_batches = 0
        self._stream_lag_ms = 0
        self._accelerated: dict[str, int] = {}
        self._files_skipped = 0

    # -- feeds ------------------------------------------------------------------------------

    def statement_ended(self, doc: StatementDoc) -> None:
        """A statement this job moved to a terminal state (the store's end listener)."""
        with self._lock:
            self._statements[doc.state.value] = self._statements.get(doc.state.value, 0) + 1

    def index_call(self, operation: str, outcome: str, retries: int) -> None:
        """One call of the job's index client (its call listener)."""
        with self._lock:
            self._calls[outcome] = self._calls.get(outcome, 0) + 1

    def statement_ran(self, pickup_ms: int | None, run_ms: int) -> None:
        """A statement ran for ``run_ms``, ``pickup_ms`` after it was submitted (None: it has no
        statement document to tell)."""
        with self._lock:
            if pickup_ms is not None:
                self._pickup.observe(max(pickup_ms, 0) / 1000)
            self._run.observe(max(run_ms, 0) / 1000)

    def add_io(self, io: SparkIo) -> None:
        with self._lock:
            mine = self._io
            self._io = SparkIo(
                mine.rows_read + io.rows_read,
                mine.bytes_read + io.bytes_read,
                mine.rows_written + io.rows_written,
                mine.bytes_written + io.bytes_written,
            )

    def accelerated(self, report: Acceleration) -> None:
        """A query's use of Flint indexes: counted once per kind of index that changed what it
        read (a skipping index that skipped no file does not count)."""
        kinds = {use.kind for use in report.used if use.kind != "skipping" or use.skipped > 0}
        with self._lock:
            for kind in kinds:
                self._accelerated[kind] = self._accelerated.get(kind, 0) + 1
            self._files_skipped += sum(use.skipped for use in report.used)

    def stream(self, progress: StreamProgress) -> None:
        """The stream's latest progress: micro-batches run, and the latest one's lag."""
        with self._lock:
            self._micro_batches = max(self._micro_batches, progress.batches)
            if progress.latest_offset_time and progress.batch_time:
                self._stream_lag_ms = max(0, progress.batch_time - progress.latest_offset_time)

    # -- the heartbeat's read ---------------------------------------------------------------

    def snapshot(self) -> JobFigures:
        with self._lock:
            io = self._io
            return JobFigures(
                statements=dict(self._statements),
                pickup=self._pickup.snapshot(),
                run=self._run.snapshot(),
                rows_read=io.rows_read,
                bytes_read=io.bytes_read,
                rows_written=io.rows_written,
                bytes_written=io.bytes_written,
                opensearch_calls=dict(self._calls),
                micro_batches=self._micro_batches,
                stream_lag_millis=self._stream_lag_ms,
                accelerated_queries=dict(self._accelerated),
                files_skipped=self._files_skipped,
            )
