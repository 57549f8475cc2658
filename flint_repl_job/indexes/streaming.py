"""Auto refresh: a Flint index kept fresh by a Structured Streaming query (``docs/job.md``, ``docs/flint.md``).

The stream reads the index's source tables as streams (``spark.readStream.table``: schema and
files from the catalog) and writes into the index through this project's ``opensearch`` data
source (:mod:`flint_repl_job.opensearch_source`):

- **covering index**: the table's new rows, filtered by the WHERE, the listed columns; document
  ids from ``id_expression`` when given, else the server's (append);
- **materialized view**: the view's query with each source table read as a stream (a temporary
  view over ``readStream.table``, watermarked on the window's time column when the query has a
  window) and ``TUMBLE(...)`` spelled as Spark's ``window(...)``. In append mode a windowed
  aggregation emits each window once, after the watermark passed it; its rows get the sha1 of
  their values as ids unless ``id_expression`` gives them, so a replayed micro-batch overwrites
  its documents instead of adding them again. ``output_mode = complete`` needs ``id_expression``;
- **skipping index**: ``foreachBatch``: each micro-batch's files get their skipping documents
  (ids are the sha1 of the file path) through the batch writer.

The options are the reference's (``AutoIndexRefresh``): ``refresh_interval`` is the
processing-time trigger (Spark's default trigger without it), ``checkpoint_location`` (else
``<spark.flint.index.checkpointLocation.rootDir>/<index>``; none at all is refused while
``spark.flint.index.checkpoint.mandatory`` holds), ``extra_options`` (``{"<source table>": {...},
"<index name>": {...}}``; ``"sink"`` is accepted for the index), ``watermark_delay`` and
``output_mode`` for materialized views. ``incremental_refresh`` cannot be combined with it.

The pure functions (option checks, query rewrites) need no Spark; :func:`start_stream` and
:class:`IndexStream` do.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flint_repl_job.catalog import dotted_names, session_sql, significant, tokenize
from flint_repl_job.errors import clean
from flint_repl_job.indexes.builders import (
    ID_COLUMN,
    TUMBLE,
    call_positions,
    session_table,
    skipping_frame,
    tumble_to_window,
)
from query_core.errors import InvalidRequestError
from query_core.flint import IndexKind, QualifiedName
from query_core.flint.index_meta import IndexMeta
from query_core.flint.scheduling import SchedulerPolicy, altered_to_auto
from query_core.jobconf import key_of
from query_core.models import StreamProgress
from query_core.validation import allowlists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

log = logging.getLogger(__name__)

CHECKPOINT_MANDATORY_KEY = key_of("checkpoint_mandatory")
CHECKPOINT_ROOT_KEY = key_of("checkpoint_root")

#: The reference's messages (``AutoIndexRefresh.validate``, ``FlintSparkMaterializedView``).
INCREMENTAL_WITH_AUTO = "Incremental refresh cannot be enabled if auto refresh is enabled"
CHECKPOINT_REQUIRED = f"Checkpoint location is required if {CHECKPOINT_MANDATORY_KEY} option enabled"
INCREMENTAL_NEEDS_CHECKPOINT = "Checkpoint location is required by incremental refresh"
WINDOW_REQUIRED = "A windowing function is required for incremental refresh with aggregation"
WATERMARK_REQUIRED = "watermark delay is required for auto refresh and incremental refresh with aggregation"
COMPLETE_NEEDS_ID = (
    "output_mode = complete writes the whole result every micro-batch: it needs id_expression "
    "(the grouping key) so that each micro-batch overwrites the documents of the last"
)
OUTPUT_MODES = ("append", "complete")

#: Options checked as if there were no external scheduler (:func:`auto_refresh_options`).
STREAMS_ONLY = SchedulerPolicy(enabled=False)

#: How long a graceful stop waits for the micro-batch in flight, and how long a start waits for
#: the stream to leave its initialization (its first failure then fails the start).
STOP_GRACE_S = 30.0
START_WAIT_S = 120.0
#: Longest failure text kept from a dead stream.
MAX_FAILURE = 500

_AGGREGATES = frozenset(
    {"COUNT", "SUM", "AVG", "MIN", "MAX", "COLLECT_LIST", "COLLECT_SET", "APPROX_COUNT_DISTINCT", "FIRST", "LAST"}
)


class StreamOptionError(ValueError):
    """An auto refresh that cannot start as the index's options say."""


@dataclass(frozen=True)
class StreamSettings:
    """The job's settings of streams: where checkpoints go when the index names none, and how long
    a stream that found nothing new waits before it looks again (0: Spark's own delay)."""

    checkpoint_root: str = ""
    checkpoint_mandatory: bool = True
    idle_poll_ms: int = 0

    @classmethod
    def from_conf(cls, get: Callable[[str], str | None]) -> StreamSettings:
        """From Spark conf keys (a VACUUM run by a batch job finds the root there too)."""
        mandatory = (get(CHECKPOINT_MANDATORY_KEY) or "true").strip().lower() != "false"
        return cls(checkpoint_root=(get(CHECKPOINT_ROOT_KEY) or "").strip(), checkpoint_mandatory=mandatory)


# -- options ---------------------------------------------------------------------------------------


def checkpoint_location(options: Mapping[str, str], index_name: str, settings: StreamSettings) -> str | None:
    """The index's checkpoint: its ``checkpoint_location``, else ``<root>/<index>``, else None."""
    location = options.get("checkpoint_location", "").strip()
    if location:
        return location
    if settings.checkpoint_root:
        return settings.checkpoint_root.rstrip("/") + "/" + index_name
    return None


def output_mode(options: Mapping[str, str]) -> str:
    mode = options.get("output_mode", "").strip().lower() or "append"
    if mode == "update":
        raise StreamOptionError(
            "output_mode = update is not supported by the index sink: use append (with watermark_delay) "
            "or complete (with id_expression)"
        )
    if mode not in OUTPUT_MODES:
        raise StreamOptionError(f"output_mode {mode!r} is invalid: use one of {', '.join(OUTPUT_MODES)}")
    return mode


def check_stream_options(meta: IndexMeta, settings: StreamSettings, *, incremental: bool = False) -> None:
    """Refuse an auto refresh (or, ``incremental``, a manual incremental refresh of a covering
    index or view: one stream run to the end) the index's options do not allow, before anything
    starts."""
    options = meta.options
    checkpoint = checkpoint_location(options, meta.index_name, settings)
    if incremental:
        if checkpoint is None:
            raise StreamOptionError(INCREMENTAL_NEEDS_CHECKPOINT)
    elif meta.incremental_refresh:
        raise StreamOptionError(INCREMENTAL_WITH_AUTO)
    elif checkpoint is None and settings.checkpoint_mandatory:
        raise StreamOptionError(CHECKPOINT_REQUIRED)
    mode = output_mode(options)
    has_id = bool(options.get("id_expression", "").strip())
    if mode == "complete" and not has_id:
        raise StreamOptionError(COMPLETE_NEEDS_ID)
    if meta.kind is IndexKind.MV and mode == "append" and is_aggregating(meta.source):
        if not has_window(meta.source):
            raise StreamOptionError(WINDOW_REQUIRED)
        if not options.get("watermark_delay", "").strip():
            raise StreamOptionError(WATERMARK_REQUIRED)


def auto_refresh_options(existing: Mapping[str, str], provided: Mapping[str, str]) -> dict[str, str]:
    """The ``_meta.options`` of an index altered to auto refresh by a stream, as the reference
    checks them (:func:`query_core.flint.scheduling.altered_to_auto`, the external scheduler left
    out): ``existing`` with ``provided`` merged in and ``auto_refresh`` true."""
    try:
        return altered_to_auto(existing, provided, STREAMS_ONLY)
    except InvalidRequestError as exc:
        raise StreamOptionError(exc.message) from None


def _qualified(name: str, datasource: str) -> str:
    parts = tuple(p.strip("`") for p in name.split("."))
    try:
        return str(QualifiedName(parts).qualify(datasource))
    except ValueError:
        return name


def _extra(options: Mapping[str, str], keys: Callable[[str], bool], allowed: frozenset[str]) -> dict[str, str]:
    """The ``extra_options`` entries of the targets ``keys`` selects, with only the ``allowed`` option
    names (compared in lower case, as Spark reads options): the statement was checked against the
    same list, but an index's options may have been written before that check, or elsewhere."""
    text = options.get("extra_options", "").strip()
    if not text:
        return {}
    found: dict[str, str] = {}
    for key, entry in dict(json.loads(text)).items():
        if isinstance(entry, dict) and keys(str(key)):
            for name, value in entry.items():
                if str(name).lower() not in allowed:
                    log.warning("extra_options of %s: %r is not an allowed option; ignored", key, name)
                    continue
                found[str(name)] = value if isinstance(value, str) else json.dumps(value)
    return found


def extra_source_options(options: Mapping[str, str], table: str, datasource: str) -> dict[str, str]:
    """``extra_options`` of one source table (``table`` qualified; keys may be written shorter)."""
    return _extra(options, lambda key: _qualified(key, datasource) == table, allowlists.EXTRA_SOURCE_OPTIONS)


def extra_sink_options(options: Mapping[str, str], index_name: str) -> dict[str, str]:
    """``extra_options`` of the index (keyed by its name, as the reference does, or ``sink``): how
    it is written, never where (no connection setting)."""
    return _extra(options, lambda key: key in (index_name, *allowlists.SINK_KEYS), allowlists.EXTRA_SINK_OPTIONS)


def merged_sink_options(own: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The index writer's options: ``extra`` (the index's allowed ``extra_options``) under the job's
    ``own`` (the index connection, the index's name), which always win, whatever the case of a key."""
    mine = {key.lower() for key in own}
    return {**{k: v for k, v in extra.items() if k.lower() not in mine}, **own}


# -- view queries ----------------------------------------------------------------------------------


def has_window(query: str) -> bool:
    """True when the query calls ``TUMBLE(...)`` or ``window(...)``."""
    return bool(call_positions(query, TUMBLE) or call_positions(query, "WINDOW"))


def window_column(query: str) -> str | None:
    """The time column of the query's first ``TUMBLE``/``window`` call when it is a plain column
    (its last name part), else None."""
    tokens = significant(tokenize(query))
    calls = sorted(call_positions(query, TUMBLE) + call_positions(query, "WINDOW"))
    if not calls:
        return None
    argument: list[Any] = []
    for token in tokens[calls[0] + 2 :]:
        if token.text in (",", ")"):
            break
        argument.append(token)
    names = [t for t in argument if t.kind != "dot"]
    if not names or any(t.name is None for t in names) or len(argument) != 2 * len(names) - 1:
        return None
    return names[-1].name


def is_aggregating(query: str) -> bool:
    """A token scan: GROUP BY, or a call of a common aggregate function."""
    tokens = significant(tokenize(query))
    words = [t.text.upper() if t.kind == "word" else t.text for t in tokens]
    if any(a == "GROUP" and b == "BY" for a, b in itertools.pairwise(words)):
        return True
    return any(w in _AGGREGATES and nxt == "(" for w, nxt in itertools.pairwise(words))


def streaming_query(query: str, datasource: str, views: Mapping[str, str]) -> str:
    """The view's query as Spark runs it over streams: each table after FROM/JOIN whose qualified
    name is in ``views`` reads that (temporary) view instead, ``TUMBLE`` is ``window``, and the
    datasource's other catalog references name the session catalog."""
    tokens = significant(tokenize(query))
    out, pos = [], 0
    for before, parts in dotted_names(tokens):
        follows = tokens[before].text.upper() if before >= 0 and tokens[before].kind == "word" else ""
        if follows not in ("FROM", "JOIN") or len(parts) > 3:
            continue
        name = str(QualifiedName(tuple(p.name or "" for p in parts)).qualify(datasource))
        if name not in views:
            continue
        end = parts[-1].start + len(parts[-1].text)
        out += [query[pos : parts[0].start], "`" + views[name].replace("`", "``") + "`"]
        pos = end
    rewritten = "".join(out) + query[pos:]
    return session_sql(tumble_to_window(rewritten), datasource)


# -- the running stream ----------------------------------------------------------------------------


def batches_that_ran(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The progress events of micro-batches that ran (they time ``addBatch``), by batch id. A
    trigger that found no data reports the id of the next batch, which has not run: left out."""
    ran = [e for e in events if "addBatch" in (e.get("durationMs") or {})]
    return sorted(ran, key=lambda e: int(e.get("batchId", -1)))


def _epoch_ms(timestamp: str) -> int:
    try:
        return int(dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def failure_text(exc: Any) -> str:
    """A dead stream's cause, short and readable (first line, no plan or JVM stack)."""
    desc = getattr(exc, "desc", None) or str(exc)
    text = clean(str(desc)).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "") or type(exc).__name__
    return first[:MAX_FAILURE]


#: Reads a text file by its (Hadoop) path; None when there is no such file.
TextReader = Callable[[str], "str | None"]


def file_log_offset(end_offset: Any) -> int | None:
    """The file source's log offset of a source progress's ``endOffset`` (JSON text or a dict),
    None for another kind of source."""
    if isinstance(end_offset, str):
        try:
            end_offset = json.loads(end_offset)
        except ValueError:
            return None
    if isinstance(end_offset, dict) and isinstance(end_offset.get("logOffset"), int):
        return int(end_offset["logOffset"])
    return None


def newest_file_time(log_text: str) -> int:
    """The newest modification time (epoch ms) among the files of a file-source log entry: its
    first line is the log's version, then one JSON object per file (``path``, ``timestamp``...)."""
    newest = 0
    for line in log_text.splitlines()[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("timestamp"), int):
            newest = max(newest, int(entry["timestamp"]))
    return newest


def hadoop_text_reader(spark: SparkSession) -> TextReader:
    """A :data:`TextReader` over Hadoop's file system (local, HDFS, S3), as the checkpoint is."""

    def read(location: str) -> str | None:
        jvm: Any = spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(location)
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[union-attr]
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    return read


@dataclass
class IndexStream:
    """A started auto refresh: the streaming query and what it refreshes."""

    query: StreamingQuery
    index_name: str
    checkpoint: str | None
    #: The qualified tables it reads (checked for existence by the job).
    source_tables: list[str] = field(default_factory=list)
    #: Reads the checkpoint's file-source logs (for ``latest_offset_time``); None: not reported.
    read_text: TextReader | None = None
    _first_batch: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _offset_times: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def stream_id(self) -> str:
        return str(self.query.id)

    def failure(self) -> str | None:
        """Why the stream died, or None while it runs (or was stopped by us).

        Whether it runs is read before its error: Spark records a failed query's cause before it
        marks the query terminated, so a query seen terminated has its cause to read, while one
        that dies between the two reads is still seen running (and its cause read at the next
        look)."""
        active = self.query.isActive
        exc = self.query.exception()
        if exc is not None:
            return f"Streaming refresh of {self.index_name} failed: {failure_text(exc)}"
        if not active:
            return f"Streaming refresh of {self.index_name} stopped unexpectedly"
        return None

    def progress(self) -> StreamProgress:
        """The latest micro-batch's figures (one report, however many batches ran).

        Only progress events of batches that ran count (they time ``addBatch``): Spark's event for
        a trigger that found no data carries the id of the *next* batch, which has not run."""
        report = StreamProgress(stream_id=self.stream_id, index_name=self.index_name)
        exc = self.query.exception()
        if exc is not None:
            report.last_error = failure_text(exc)
        ran = batches_that_ran(self.query.recentProgress or [])
        if not ran:
            return report
        last = ran[-1]
        batch = int(last.get("batchId", -1))
        with self._lock:
            if self._first_batch is None:
                self._first_batch = min(int(p.get("batchId", batch)) for p in ran)
            first = self._first_batch
        report.batch_id = batch
        report.num_input_rows = int(last.get("numInputRows", 0) or 0)
        report.input_rows_per_second = float(last.get("inputRowsPerSecond", 0.0) or 0.0)
        report.processed_rows_per_second = float(last.get("processedRowsPerSecond", 0.0) or 0.0)
        report.batch_time = _epoch_ms(str(last.get("timestamp", "")))
        report.batches = max(0, batch - first + 1)
        report.latest_offset_time = self._latest_offset_time(last)
        return report

    def _latest_offset_time(self, last: Mapping[str, Any]) -> int:
        """When the newest file the stream has read was written: from the checkpoint's log of the
        file source's latest offset (read once per offset). 0 for other sources or without logs."""
        if not self.checkpoint or self.read_text is None:
            return 0
        newest = 0
        for i, source in enumerate(last.get("sources") or []):
            offset = file_log_offset(source.get("endOffset"))
            if offset is None:
                continue
            if (i, offset) not in self._offset_times:
                base = f"{self.checkpoint.rstrip('/')}/sources/{i}/{offset}"
                text = self.read_text(base) or self.read_text(base + ".compact") or ""
                self._offset_times[(i, offset)] = newest_file_time(text)
            newest = max(newest, self._offset_times[(i, offset)])
        return newest

    def stop_gracefully(self, grace_s: float = STOP_GRACE_S, poll_s: float = 0.05) -> bool:
        """Stop the stream between micro-batches; True when none was in flight at the stop.

        A micro-batch is committed to the checkpoint only after its documents were written, so
        stopping between two micro-batches leaves checkpoint and index in step: a later stream
        from the same checkpoint resumes with the next micro-batch, with no gap and no duplicate.
        This waits (up to ``grace_s``) for the trigger in flight to end before ``stop()``.

        The residual window: a trigger can begin between the last check and ``stop()``. Spark then
        interrupts that micro-batch before its commit, and the next stream runs it again from the
        checkpoint: documents with ids (skipping indexes, windowed views, ``id_expression``)
        overwrite themselves; documents without ids from that one micro-batch can be indexed twice.
        With a processing-time trigger the next trigger is an interval away, so the window is
        a few milliseconds per stop; a stream that stays busy past ``grace_s`` is stopped anyway.
        """
        query = self.query
        deadline = time.monotonic() + grace_s
        wait = threading.Event()
        settled = False
        while query.isActive:
            if not bool(query.status.get("isTriggerActive", False)):
                settled = True
                break
            if time.monotonic() >= deadline:
                log.warning("stream of %s still busy after %.0f s: stopping it mid-batch", self.index_name, grace_s)
                break
            wait.wait(poll_s)
        query.stop()
        log.info("stream of %s stopped (%s)", self.index_name, "between batches" if settled else "mid-batch")
        return settled


# -- building and starting -------------------------------------------------------------------------


def delete_checkpoint(spark: SparkSession, location: str) -> bool:
    """Delete a checkpoint directory through Hadoop's file system (local, HDFS, S3); True if it existed."""
    jvm: Any = spark._jvm  # Hadoop's FileSystem has no Python API
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[union-attr]
    if not fs.exists(path):
        return False
    fs.delete(path, True)
    log.info("deleted checkpoint %s", location)
    return True


def _read(spark: SparkSession, table: str, datasource: str, options: Mapping[str, str]) -> DataFrame:
    extra = extra_source_options(options, table, datasource)
    return spark.readStream.options(**extra).table(session_table(table, datasource))


def _column(name: str) -> Any:
    from pyspark.sql import functions as sf

    return sf.col("`" + name.replace("`", "``") + "`")


def covering_stream(spark: SparkSession, meta: IndexMeta, datasource: str) -> DataFrame:
    frame = _read(spark, meta.source, datasource, meta.options)
    if meta.filter_condition:
        frame = frame.where(meta.filter_condition)
    return _with_id(frame.select(*[_column(c["columnName"]) for c in meta.indexed_columns]), meta, hashed=False)


def mv_stream(spark: SparkSession, meta: IndexMeta, datasource: str, views: dict[str, str]) -> DataFrame:
    """The view's query over streams of its source tables, each a temporary view, whose names are
    added to ``views`` (by table): the caller drops them once the stream has started."""
    query = meta.source
    time_column = window_column(query)
    delay = meta.options.get("watermark_delay", "").strip()
    for table in _view_sources(meta, datasource):
        frame = _read(spark, table, datasource, meta.options)
        if time_column and delay and time_column in frame.columns:
            frame = frame.withWatermark(time_column, delay)
        view = f"__flint_stream_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(view)
        views[table] = view
    frame = spark.sql(streaming_query(query, datasource, views))
    windowed = has_window(query) and is_aggregating(query)
    return _with_id(frame, meta, hashed=windowed)


def _view_sources(meta: IndexMeta, datasource: str) -> list[str]:
    from flint_repl_job.indexes.builders import source_tables

    recorded = meta.properties.get("sourceTables")
    if isinstance(recorded, list) and recorded:
        return [str(t) for t in recorded]
    return source_tables(meta.source, datasource)


def _with_id(frame: DataFrame, meta: IndexMeta, *, hashed: bool) -> DataFrame:
    """Add :data:`ID_COLUMN` from ``id_expression``, or the sha1 of the row's values (``hashed``)."""
    from pyspark.sql import functions as sf

    id_expression = meta.options.get("id_expression", "").strip()
    if id_expression:
        return frame.withColumn(ID_COLUMN, sf.expr(id_expression))
    if hashed:
        return frame.withColumn(ID_COLUMN, sf.sha1(sf.to_json(sf.struct(*[_column(c) for c in frame.columns]))))
    return frame


def _sink_common(
    writer: DataStreamWriter, meta: IndexMeta, checkpoint: str | None, available_now: bool
) -> DataStreamWriter:
    writer = writer.queryName(meta.index_name)
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    interval = meta.options.get("refresh_interval", "").strip()
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif interval:
        writer = writer.trigger(processingTime=interval)
    return writer


#: How long a stream waits before it looks at its source again when its last look found nothing.
POLLING_DELAY_KEY = "spark.sql.streaming.pollingDelay"


def set_idle_poll(spark: SparkSession, idle_poll_ms: int) -> None:
    """Streams started from now on in ``spark`` look at their source again ``idle_poll_ms`` after a
    look that found nothing new, unless the job's Spark conf names that delay itself.

    Spark's own delay is 10 ms: a stream without a refresh interval (the default trigger) then
    lists its source a hundred times a second while nothing comes, about a fifth of a core per idle
    stream; at 250 ms about 3 %, for at most a quarter of a second before new data is noticed. With
    data coming, batches follow each other without the delay (docs/flint.md)."""
    if not spark.sparkContext.getConf().contains(POLLING_DELAY_KEY):
        spark.conf.set(POLLING_DELAY_KEY, f"{idle_poll_ms}ms")


def start_stream(
    spark: SparkSession,
    meta: IndexMeta,
    datasource: str,
    settings: StreamSettings,
    sink_options: Mapping[str, str],
    write_batch: Callable[[DataFrame], None],
    *,
    fresh: bool,
    available_now: bool = False,
) -> IndexStream:
    """Start the index's auto refresh and wait until it is past its initialization.

    ``available_now`` (a manual incremental refresh): the stream processes what is new since its
    checkpoint, then ends by itself; this returns at once, the caller awaits its termination.

    ``fresh`` (CREATE): an existing checkpoint (left by a dropped index of the same name that was
    never vacuumed) is deleted first; otherwise (ALTER, RECOVER) the stream resumes from it.
    ``sink_options`` name the index connection; ``write_batch`` writes one skipping micro-batch's
    documents with the batch writer. Raises :class:`StreamOptionError` for refused options, and
    the stream's own failure when it dies while starting.
    """
    check_stream_options(meta, settings, incremental=available_now)
    checkpoint = checkpoint_location(meta.options, meta.index_name, settings)
    if fresh and checkpoint:
        delete_checkpoint(spark, checkpoint)
    # Statements run in a worker thread whose JVM thread has no active session: Python data
    # sources registered in the session would not be found (see FlintEngine.write).
    jvm: Any = spark._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    if settings.idle_poll_ms:
        set_idle_poll(spark, settings.idle_poll_ms)
    views: dict[str, str] = {}
    try:
        writer = _writer(spark, meta, datasource, checkpoint, sink_options, write_batch, views)
        query = _sink_common(writer, meta, checkpoint, available_now).start()
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)
    tables = [meta.source] if meta.kind is not IndexKind.MV else _view_sources(meta, datasource)
    stream = IndexStream(query, meta.index_name, checkpoint, tables, read_text=hadoop_text_reader(spark))
    if not available_now:
        _await_start(stream)
    log.info("stream %s of %s started (checkpoint %s)", stream.stream_id, meta.index_name, checkpoint or "none")
    return stream


def _writer(
    spark: SparkSession,
    meta: IndexMeta,
    datasource: str,
    checkpoint: str | None,
    connection: Mapping[str, str],
    write_batch: Callable[[DataFrame], None],
    views: dict[str, str],
) -> DataStreamWriter:
    """The stream's writer, but for its name, checkpoint and trigger: foreachBatch for skipping,
    the index sink otherwise."""
    if meta.kind is IndexKind.SKIPPING:
        columns = meta.indexed_columns
        source = _read(spark, meta.source, datasource, meta.options)

        def each_batch(batch: DataFrame, batch_id: int) -> None:
            write_batch(skipping_frame(batch, columns))

        return source.writeStream.foreachBatch(each_batch)
    if meta.kind is IndexKind.COVERING:
        frame = covering_stream(spark, meta, datasource)
    else:
        frame = mv_stream(spark, meta, datasource, views)
    own = {**connection, "index": meta.index_name}
    if ID_COLUMN in frame.columns:
        own.update(id_column=ID_COLUMN, id_column_in_source="false")
    options = merged_sink_options(own, extra_sink_options(meta.options, meta.index_name))
    return frame.writeStream.format("opensearch").options(**options).outputMode(output_mode(meta.options))


def _await_start(stream: IndexStream, timeout_s: float = START_WAIT_S) -> None:
    """Wait until the stream has initialized its sources; raise if it died meanwhile."""
    query = stream.query
    deadline = time.monotonic() + timeout_s
    wait = threading.Event()
    while query.isActive and query.status.get("message") == "Initializing sources":
        if time.monotonic() >= deadline:
            log.warning("stream of %s still initializing after %.0f s", stream.index_name, timeout_s)
            return
        wait.wait(0.05)
    failure = stream.failure()
    if failure is not None:
        query.stop()
        raise RuntimeError(failure)


__all__ = [
    "CHECKPOINT_REQUIRED",
    "INCREMENTAL_WITH_AUTO",
    "WATERMARK_REQUIRED",
    "WINDOW_REQUIRED",
    "IndexStream",
    "StreamOptionError",
    "StreamSettings",
    "check_stream_options",
    "checkpoint_location",
    "delete_checkpoint",
    "extra_sink_options",
    "extra_source_options",
    "merged_sink_options",
    "start_stream",
    "streaming_query",
    "window_column",
]
