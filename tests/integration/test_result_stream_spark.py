"""A statement's rows streamed from Spark into result documents, with Spark in this process: the
rows and their encodings are those ``collect()`` gives, partitions are read one after the other
and only as far as the caps need, and a cancel reaches the streaming jobs."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from flint_repl_job.executor import ResultTarget, SparkExecutor
from flint_repl_job.result_stream import ResultLimits, stream_frame
from flint_repl_job.results import encode
from query_core.store import MemoryIndex, ResultRepository

pytestmark = pytest.mark.spark

EVERY_TYPE = """
SELECT true AS b, CAST(-7 AS TINYINT) AS i8, 9223372036854775807 AS i64, CAST(1.1 AS FLOAT) AS f32,
  0.1D AS f64, CAST('12345678901234567890.123456789' AS DECIMAL(38, 9)) AS dec,
  'it''s "quoted", ünïcødé 🚀' AS s, CAST(NULL AS STRING) AS nul, DATE'2024-02-29' AS d,
  TIMESTAMP'2024-01-02 03:04:05.123456' AS ts, array(1, NULL, 3) AS arr, map('k1', 1, 'k2', NULL) AS m,
  named_struct('x', 1, 'y', array('a')) AS st, X'00FF10' AS bin
FROM range(3)
"""


class Chunks:
    def __init__(self) -> None:
        self.written: list[tuple[int, str, int]] = []

    def __call__(self, chunk: int, datarows: str, rows: int) -> None:
        self.written.append((chunk, datarows, rows))


def limits(max_rows: int = 10**6, chunk_rows: int = 10**4, max_bytes: int = 64 * 2**20) -> ResultLimits:
    return ResultLimits(max_rows, max_bytes, chunk_rows, 4 * 2**20)


def test_streamed_rows_are_encoded_exactly_as_collected_rows(spark: Any) -> None:
    frame = spark.sql(EVERY_TYPE)
    reference, schema, lossless = encode(frame.schema, frame.collect())
    streamed = stream_frame(spark.sql(EVERY_TYPE), limits(), Chunks())
    assert (streamed.result, streamed.schema, streamed.lossless) == (reference, schema, lossless)
    assert streamed.chunks is None


def test_partitions_are_read_in_order_and_no_further_than_the_cap(spark: Any) -> None:
    sc = spark.sparkContext
    sc.setJobGroup("stream-cap", "a capped result")
    try:
        chunks = Chunks()
        # Five partitions of 500 rows; the cap falls inside the second.
        streamed = stream_frame(spark.sql("SELECT id FROM range(0, 2500, 1, 5)"), limits(900, 300), chunks)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert streamed.chunks is not None
    assert (streamed.chunks.rows, streamed.chunks.chunk_rows, streamed.chunks.truncated) == (900, [300, 300], True)
    rows = json.loads(streamed.lossless.datarows) + [r for _, text, _ in chunks.written for r in json.loads(text)]
    assert rows == [[i] for i in range(900)]
    # One Spark job per partition read: the partitions past the cap were never computed.
    assert len(sc.statusTracker().getJobIdsForGroup("stream-cap")) == 2


class NotingResults(ResultRepository):
    """The result repository of an in-memory index, counting the chunks written."""

    def __init__(self) -> None:
        super().__init__(MemoryIndex())
        self.chunks = 0
        self.wrote = threading.Event()

    def put_chunk(self, result_index: str, query_id: str, chunk: int, datarows: str, rows: int) -> None:
        super().put_chunk(result_index, query_id, chunk, datarows, rows)
        self.chunks += 1
        self.wrote.set()


def test_a_cancel_stops_the_streaming_jobs(spark: Any) -> None:
    """The partitions are computed by jobs the JVM starts for the iterator: they belong to the
    statement's job group, so its cancel stops them, and no chunk is written after it."""
    results = NotingResults()
    executor = SparkExecutor(spark, results=ResultTarget(limits(chunk_rows=1), results, "results"))
    try:
        # Forty one-row partitions, each a job: long enough to be cancelled midway.
        running = executor.start("q-stream-cancel", "SELECT id FROM range(0, 40, 1, 40)")
        assert results.wrote.wait(timeout=60), "no chunk was written"
        assert executor.cancel(running, grace_s=60, poll_s=0.05)
        assert running.future.exception(timeout=60) is not None
        written = results.chunks
        assert 1 <= written < 39
        assert not spark.sparkContext.statusTracker().getActiveJobsIds()
        assert results.chunks == written
    finally:
        executor.close()


def test_a_result_of_one_page_is_taken_at_once_and_a_larger_one_is_streamed(spark: Any) -> None:
    """A page's worth of rows is taken as Spark's LIMIT takes it: a command's output or literal
    rows without a Spark job, a query's in parallel, without streaming; only a larger result is
    streamed (one job per partition read)."""
    results = NotingResults()
    tracker = spark.sparkContext.statusTracker()
    executor = SparkExecutor(spark, results=ResultTarget(limits(max_rows=250, chunk_rows=100), results, "results"))
    try:
        literal = executor.start("q-literal", "VALUES (1, 'a'), (2, 'b'), (3, 'c')").future.result(timeout=60)
        shown = executor.start("q-command", "SHOW DATABASES").future.result(timeout=60)
        small = executor.start("q-small", "SELECT id FROM range(0, 100, 1, 10)").future.result(timeout=60)
        large = executor.start("q-large", "SELECT id FROM range(0, 1000, 1, 10)").future.result(timeout=60)
    finally:
        executor.close()
    assert not tracker.getJobIdsForGroup("q-literal") and not tracker.getJobIdsForGroup("q-command")
    assert literal.lossless.datarows == '[[1,"a"],[2,"b"],[3,"c"]]' and literal.chunks is None
    assert literal.result == ["{'col1':1,'col2':'a'}", "{'col1':2,'col2':'b'}", "{'col1':3,'col2':'c'}"]
    assert shown.lossless.datarows.startswith('[["default"]')
    assert json.loads(small.lossless.datarows) == [[i] for i in range(100)] and small.chunks is None
    assert large.chunks is not None and (large.chunks.rows, large.chunks.truncated) == (250, True)
    assert results.chunks == 2
    # One job took the small result's page; the large one's took two (one partition, then four
    # more, as Spark's LIMIT scales up), then one per partition the cap needs (100 + 100 + 50).
    assert len(tracker.getJobIdsForGroup("q-small")) == 1
    assert len(tracker.getJobIdsForGroup("q-large")) == 2 + 3
