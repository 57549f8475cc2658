"""Runs one statement at a time on Spark, in a worker thread, so the job's loop stays free to
watch for cancellation, enforce the execution timeout and report progress."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError

from flint_repl_job.acceleration.accelerator import Accelerator, Prepared
from flint_repl_job.acceleration.report import Acceleration
from flint_repl_job.catalog import session_sql
from flint_repl_job.catalog_changes import has_temporary_views, listen
from flint_repl_job.figures import SparkIo
from flint_repl_job.flint_statements import FlintStatementError, flint_statement
from flint_repl_job.guard import StatementGuard
from flint_repl_job.result_stream import (
    ChunkWriter,
    EncodedResult,
    QueryCancelledError,
    ResultLimits,
    ResultWriteError,
    stream_frame,
    stream_rows,
)
from query_core.errors import AsyncQueryError
from query_core.jobconf import DEFAULTS
from query_core.models import LosslessResult, ResultChunks, StatementProgress
from query_core.ppl import to_spark_sql
from query_core.store import ResultRepository
from query_core.store.catalog_changes import CatalogChange
from query_core.validation import ALLOW_ALL, StatementLimits, ValidationPolicy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from flint_repl_job.indexes.engine import FlintEngine


log = logging.getLogger(__name__)

__all__ = ["QueryCancelledError", "QueryOutput", "ResultTarget", "RunningQuery", "SparkExecutor"]

log = logging.getLogger(__name__)


@dataclass
class QueryOutput:
    """A statement's result for its first document; ``chunks`` when it continues in further
    documents (already written) or was cut at the cap."""

    result: list[str]
    schema: list[str]
    lossless: LosslessResult
    chunks: ResultChunks | None = None

    @classmethod
    def of(cls, encoded: EncodedResult) -> QueryOutput:
        return cls(encoded.result, encoded.schema, encoded.lossless, encoded.chunks)


#: The contract's default caps (``docs/job.md``).
DEFAULT_LIMITS = ResultLimits(
    DEFAULTS.max_result_rows, DEFAULTS.max_result_bytes, DEFAULTS.result_chunk_rows, DEFAULTS.result_chunk_bytes
)


@dataclass(frozen=True)
class ResultTarget:
    """Where the documents of a result after its first go (``docs/results.md``), and its caps.

    Without ``results``, a result that needs more than one document fails its statement."""

    limits: ResultLimits = DEFAULT_LIMITS
    results: ResultRepository | None = None
    index: str = ""

    def writer(self, query_id: str) -> ChunkWriter:
        """Writes ``query_id``'s chunk documents; a failed write is a :class:`ResultWriteError`."""

        def write(chunk: int, datarows: str, rows: int) -> None:
            if self.results is None:
                raise ResultWriteError("no result index to write a result of more than one document to")
            try:
                self.results.put_chunk(self.index, query_id, chunk, datarows, rows)
            except AsyncQueryError as exc:
                raise ResultWriteError(exc.message) from exc

        return write


@dataclass
class RunningQuery:
    query_id: str
    future: Future[QueryOutput]
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Set once the statement is parsed and analyzed, or its first Spark job has started.
    prepared: threading.Event = field(default_factory=threading.Event)
    #: Seconds it may take to get there (0: no limit); past it, it fails alone (:meth:`SparkExecutor.abandon`).
    prepare_timeout_s: float = 0.0


class SparkExecutor:
    """Starts statements under a Spark job group named by the query id, and cancels that group.

    Statements name the session catalog by the datasource's name (see :mod:`.catalog`); Flint
    statements are run by ``flint`` (:mod:`.indexes.engine`), and queries read the datasource's
    Flint indexes where they help (:mod:`.acceleration`; with ``flint`` only, which reaches the
    index cluster)."""

    #: How many statements' acceleration reports are kept for :meth:`acceleration`.
    KEPT_REPORTS = 16

    def __init__(
        self,
        spark: SparkSession,
        datasource: str = "",
        flint: FlintEngine | None = None,
        policy: ValidationPolicy = ALLOW_ALL,
        results: ResultTarget | None = None,
        *,
        limits: StatementLimits | None = None,
        prepare_timeout_s: float = 0.0,
        report_catalog: bool = False,
    ) -> None:
        self.spark = spark
        #: Where results go past their first document, and their caps.
        self.results = results or ResultTarget()
        self.datasource = datasource
        self.flint = flint
        #: Checks each statement on Spark's own parse, and what it reaches of the catalog on
        #: Spark's analysis, before it runs (docs/validation.md).
        self.guard = StatementGuard(spark, policy, limits, spark_sql=self.spark_sql)
        #: Seconds a statement may take to be parsed and analyzed (0: no limit).
        self.prepare_timeout_s = prepare_timeout_s
        self.accelerator = (
            Accelerator.connect(spark, flint.context.opensearch, datasource) if flint is not None else None
        )
        self._accelerations: dict[str, Acceleration] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="statement")
        #: The JVM thread each running statement's calls run on (PySpark pins one per Python thread).
        self._jvm_threads: dict[str, Any] = {}
        #: What each statement changes in the catalog, as Spark's catalog reports it (docs/catalog.md).
        self.catalog_listener = listen(spark) if report_catalog else None
        self._temporary_views = False
        #: ``Dataset.ofRows``, looked up once (each step of a JVM name is a round trip).
        self._of_rows: Any = None

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery:
        """Run ``sql`` (or, with ``lang`` ``ppl``, a PPL query) in the statement thread."""
        self.catalog_changes()  # anything seen between statements is no statement's
        running = RunningQuery(query_id, Future(), prepare_timeout_s=self.prepare_timeout_s)
        running.future = self._pool.submit(self._run, query_id, sql, lang, running)
        return running

    def _run(self, query_id: str, sql: str, lang: str, running: RunningQuery) -> QueryOutput:
        cancelled = running.cancelled
        sc = self.spark.sparkContext
        sc.setJobGroup(query_id, f"statement {query_id}", interruptOnCancel=True)
        self._jvm_threads[query_id] = self.spark._jvm.java.lang.Thread.currentThread()  # type: ignore[union-attr]
        try:
            if cancelled.is_set():
                raise QueryCancelledError(query_id)
            if lang == "ppl":
                self.guard.check_ppl(sql)
                sql = self.ppl_sql(sql)
            statement = flint_statement(sql) if lang == "sql" else None
            if statement is not None:
                if self.flint is None:
                    raise FlintStatementError("Flint statements need a job connected to the index cluster")
                self.guard.check_flint(statement)
                running.prepared.set()  # Flint statements run their own bounded steps
                output = self.flint.run(statement)
                write = self.results.writer(query_id)
                return QueryOutput.of(stream_rows(output.schema, output.rows, self.results.limits, write, cancelled))
            text = self.spark_sql(sql)
            checked = self.guard.check_sql(text, cancelled)
            analyzed = self.guard.resolve(text, checked, cancelled)
            prepared = self.prepare(query_id, text, analyzed)
            running.prepared.set()
            try:
                return self.output(self.guard.visible(prepared.frame, checked), query_id, cancelled)
            except (QueryCancelledError, ResultWriteError):
                raise
            except Exception as exc:
                if prepared.original is None or cancelled.is_set():
                    raise
                # A covering index read at run time (the index cluster gone meanwhile, say): the
                # query runs again on its tables, as if it had no index (docs/acceleration.md).
                log.warning("statement %s failed on its accelerated plan, run again on its tables: %s", query_id, exc)
                return self.output(self.guard.visible(prepared.original, checked), query_id, cancelled)
        finally:
            self._jvm_threads.pop(query_id, None)
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def prepare(self, query_id: str, text: str, analyzed: Any = None) -> Prepared:
        """The statement's DataFrame, through the accelerator when there is one: over
        ``analyzed``, the statement's plan as the guard checked it (a command runs now), or
        Spark's reading of ``text`` when the guard left it as it is."""
        if self.accelerator is None:
            return Prepared(self.frame_of(text, analyzed))
        prepared = self.accelerator.sql(text, analyzed)
        if prepared.acceleration is not None:
            self._accelerations[query_id] = prepared.acceleration
            while len(self._accelerations) > self.KEPT_REPORTS:
                del self._accelerations[next(iter(self._accelerations))]
        return prepared

    def frame(self, query_id: str, text: str) -> DataFrame:
        return self.prepare(query_id, text).frame

    def frame_of(self, text: str, analyzed: Any = None) -> DataFrame:
        """``spark.sql(text)``, or the DataFrame over the analysed plan ``analyzed`` of it."""
        if analyzed is None:
            return self.spark.sql(text)
        from pyspark.sql import DataFrame

        if self._of_rows is None:
            self._of_rows = self.spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows  # type: ignore[union-attr]
        return DataFrame(self._of_rows(self.spark._jsparkSession, analyzed), self.spark)

    def acceleration(self, query_id: str) -> Acceleration | None:
        """What acceleration did for the statement (once: the report is handed over)."""
        return self._accelerations.pop(query_id, None)

    def output(self, frame: DataFrame, query_id: str, cancelled: threading.Event) -> QueryOutput:
        """A statement's rows, written as its result (docs/results.md), never collected whole.

        Most results fit one page: its rows (``result_chunk_rows`` and one more, to know) are
        taken first, as Spark's own LIMIT takes them (in parallel, scanning partitions only until
        it has them, no Python worker). A result larger than that is run again and streamed from
        the executors, partition after partition, up to the caps."""
        limits = self.results.limits
        write = self.results.writer(query_id)
        page = frame.limit(limits.chunk_rows + 1).collect()
        if len(page) <= limits.chunk_rows:
            return QueryOutput.of(stream_rows(frame.schema, page, limits, write, cancelled))
        return QueryOutput.of(stream_frame(frame, limits, write, cancelled))

    def catalog_changes(self) -> list[CatalogChange]:
        """The catalog changes of the statement that just ended (taken once)."""
        return self.catalog_listener.take() if self.catalog_listener is not None else []

    def temporary_views(self) -> bool:
        """Whether the session holds temporary views (once seen, for good: it is then not asked again)."""
        if not self._temporary_views:
            self._temporary_views = has_temporary_views(self.spark)
        return self._temporary_views

    def ppl_sql(self, ppl: str) -> str:
        """A PPL query as the Spark SQL it translates to. Commands that need their input's columns
        (``fields -``, ``rename``, ...) get them from Spark's analysis of the query so far.

        Raises :class:`query_core.ppl.PplSemanticError` (classified as an analysis failure) and,
        for text the plugin did not check, :class:`query_core.ppl.PplSyntaxError`.
        """
        return to_spark_sql(ppl, lambda sql: list(self.spark.sql(self.spark_sql(sql)).columns))

    def spark_sql(self, sql: str) -> str:
        """Plain Spark SQL as Spark runs it: the datasource's name as the session catalog."""
        return session_sql(sql, self.datasource) if self.datasource else sql

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool:
        """Stop the statement's Spark work; True once it has stopped, False after ``grace_s``.

        ``cancelJobGroup`` only reaches jobs already submitted, and a cancel can arrive between
        the statement starting and its first Spark job: so it is repeated until the statement's
        thread returns. A statement not yet at Spark sees the flag and does not start.
        """
        running.cancelled.set()
        deadline = time.monotonic() + grace_s
        while True:
            self.spark.sparkContext.cancelJobGroup(running.query_id)
            try:
                running.future.result(timeout=poll_s)
            except Exception:  # noqa: BLE001 - a cancelled job group raises; that is the point
                pass
            if running.future.done():
                return True
            if time.monotonic() >= deadline:
                return False

    def prepare_overdue(self, running: RunningQuery, elapsed_s: float) -> bool:
        """Whether ``running`` has been parsed and analyzed for longer than it may be: not yet
        prepared, no Spark job of its own started, and past its limit."""
        if running.prepared.is_set() or not running.prepare_timeout_s or elapsed_s <= running.prepare_timeout_s:
            return False
        if self.spark.sparkContext.statusTracker().getJobIdsForGroup(running.query_id):
            running.prepared.set()  # its Spark work has started: the execution timeout applies now
            return False
        return True

    def abandon(self, running: RunningQuery, grace_s: float = 5.0) -> None:
        """Stop a statement stuck in Spark's parser or analyzer, which no job-group cancel reaches:
        its JVM thread is interrupted, then stopped, and later statements run on a new statement
        thread (the old one's connection to the JVM went with its JVM thread). Should the stuck
        thread still not return, it is left behind: the session goes on either way."""
        running.cancelled.set()
        thread = self._jvm_threads.get(running.query_id)
        for stop in ("interrupt", "stop") if thread is not None else ():
            try:
                getattr(thread, stop)()
            except Exception as exc:  # noqa: BLE001 - a JVM that no longer stops threads
                log.warning("could not %s the thread of statement %s: %s", stop, running.query_id, exc)
            try:
                running.future.exception(timeout=grace_s)
            except Exception:  # noqa: BLE001 - not done yet
                pass
            if running.future.done():
                break
        if not running.future.done():
            log.error(
                "statement %s is stuck in Spark's parser or analyzer: its thread is left behind", running.query_id
            )
        stuck, self._pool = self._pool, ThreadPoolExecutor(max_workers=1, thread_name_prefix="statement")
        stuck.shutdown(wait=False, cancel_futures=True)

    def progress(self, query_id: str) -> StatementProgress:
        """Stages and tasks done/total of the Spark jobs in this statement's job group."""
        tracker = self.spark.sparkContext.statusTracker()
        progress = StatementProgress()
        for job_id in tracker.getJobIdsForGroup(query_id):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                progress.stages_total += 1
                if stage is None:  # forgotten by the tracker: it finished long ago
                    progress.stages_completed += 1
                    continue
                progress.tasks_total += stage.numTasks
                progress.tasks_completed += stage.numCompletedTasks
                if stage.numTasks and stage.numCompletedTasks >= stage.numTasks:
                    progress.stages_completed += 1
        return progress

    def io(self, query_id: str) -> SparkIo:
        """Spark's input and output metrics (rows and bytes read and written) of the stages of
        this statement's job group, from Spark's status store (kept whether or not the UI runs)."""
        sc = self.spark.sparkContext
        store: Any = sc._jsc.sc().statusStore()  # type: ignore[union-attr]
        no_tasks, no_quantiles = getattr(store, "stageData$default$3")(), getattr(store, "stageData$default$5")()
        tracker = sc.statusTracker()
        rows_read = bytes_read = rows_written = bytes_written = 0
        for job_id in tracker.getJobIdsForGroup(query_id):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                try:
                    attempts = store.stageData(stage_id, False, no_tasks, False, no_quantiles)
                except Py4JError:  # forgotten by the store
                    continue
                for i in range(attempts.size()):
                    stage = attempts.apply(i)
                    rows_read += stage.inputRecords()
                    bytes_read += stage.inputBytes()
                    rows_written += stage.outputRecords()
                    bytes_written += stage.outputBytes()
        return SparkIo(rows_read, bytes_read, rows_written, bytes_written)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.accelerator is not None:
            self.accelerator.close()
