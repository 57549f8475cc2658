"""Spark's input and output metrics of a statement, as the job adds them to its figures
(``SparkExecutor.io``), with Spark in this process."""

from __future__ import annotations

from typing import Any

import pytest

from flint_repl_job.executor import SparkExecutor

pytestmark = pytest.mark.spark


def test_a_statement_s_rows_and_bytes_read_and_written_are_spark_s(spark: Any) -> None:
    executor = SparkExecutor(spark)
    try:
        spark.sql("DROP TABLE IF EXISTS default.figures_io")
        executor.start("q-write", "CREATE TABLE default.figures_io USING parquet AS SELECT id FROM range(1000)").future.result(120)
        written = executor.io("q-write")
        executor.start("q-read", "SELECT count(*) AS n, max(id) AS m FROM default.figures_io").future.result(120)
        read = executor.io("q-read")
        nothing = executor.io("q-unknown")
    finally:
        spark.sql("DROP TABLE IF EXISTS default.figures_io")
        executor.close()
    assert written.rows_written == 1000 and written.bytes_written > 0
    assert read.rows_read == 1000 and read.bytes_read > 0 and read.rows_written == 0
    assert (nothing.rows_read, nothing.bytes_read, nothing.rows_written, nothing.bytes_written) == (0, 0, 0, 0)
