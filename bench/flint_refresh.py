"""Refresh throughput of Flint indexes next to the index server's own bulk ceiling.

``python -m bench.flint_refresh [--rows N] [--partitions P] [--table DB.NAME]``: a parquet table
of N rows (default 1,000,000; named ``default.events`` unless told) is written by Spark (local
mode, in this process, or the session :func:`main` is given); a covering index over all its
columns (ids from ``id_expression``) is created and refreshed by the job's Flint engine, which
writes through the ``opensearch`` PySpark data source. The ceiling is the same documents, with the
same ids and mapping, bulk-indexed from one Python process in batches of the data source's size.
A skipping index refresh (one document per file) is timed too. The index is a real OpenSearch node
(:mod:`bench.index_node`), or ``OPENSEARCH_URL``. Prints every figure and the ratio of refresh to ceiling.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import tempfile
import time
from typing import Any

from bench.index_node import index_node
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from flint_repl_job.opensearch_source import DEFAULT_BATCH, index_body, register, to_source
from query_core.flint import parse
from query_core.store import Store, quiet_driver_logs

log = logging.getLogger(__name__)
CEILING = "bench_bulk_ceiling"
TABLE = "default.events"


def spark_session(warehouse: str, partitions: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bench-flint-refresh")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.warehouse.dir", warehouse)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def make_table(spark: Any, rows: int, partitions: int, table: str = TABLE) -> float:
    began = time.monotonic()
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    frame = spark.range(rows, numPartitions=partitions).selectExpr(
        "id",
        "concat('r', cast(id % 7 as string)) AS region",
        "id % 1000 AS qty",
        "cast(id as double) / 3 AS price",
        "date_add(DATE'2024-01-01', cast(id % 365 as int)) AS day",
    )
    frame.write.format("parquet").saveAsTable(table)
    return time.monotonic() - began


def run(engine: FlintEngine, sql: str) -> float:
    statement = parse(sql)
    assert statement is not None
    began = time.monotonic()
    engine.run(statement)
    return time.monotonic() - began


def bulk_ceiling(spark: Any, store: Store, table: str = TABLE) -> tuple[float, int]:
    """Seconds to bulk-index the covering index's documents from this one process."""
    frame = spark.read.table(table)
    body = index_body(frame.schema, {}, {})
    store.admin.delete_index(CEILING)
    store.admin.create_index(CEILING, body)
    fields = frame.schema.fields
    docs: list[tuple[str | None, dict[str, Any]]] = [
        (str(row[0]), {f.name: to_source(row[i], f.dataType) for i, f in enumerate(fields)})
        for row in frame.toLocalIterator()
    ]
    began = time.monotonic()
    for start in range(0, len(docs), DEFAULT_BATCH):
        store.admin.bulk_index(CEILING, docs[start : start + DEFAULT_BATCH])
    return time.monotonic() - began, len(docs)


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """The bench; on ``spark`` when given (the caller's session, left running, its logging left as
    it is, the table dropped at the end), else on a session of its own."""
    parser = argparse.ArgumentParser(prog="python -m bench.flint_refresh", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4, help="source files (and write tasks)")
    parser.add_argument("--table", default=TABLE, help="the source table to (re)create, as DB.NAME")
    args = parser.parse_args(argv)
    table = args.table
    own_session = spark is None
    if own_session:
        logging.basicConfig(level=logging.WARNING)
        quiet_driver_logs()

    with index_node() as index, tempfile.TemporaryDirectory(prefix="bench-flint-") as warehouse:
        store = Store.connect(index.config)
        if own_session:
            spark = spark_session(warehouse, args.partitions)
        try:
            table_s = make_table(spark, args.rows, args.partitions, table)
            print(f"source table: {args.rows:,} rows in {args.partitions} parquet files, written in {table_s:.1f} s")
            # The ceiling first, and its index dropped before the refresh: the node holds one copy
            # of the documents at a time.
            ceiling_s, docs = bulk_ceiling(spark, store, table)
            store.admin.delete_index(CEILING)
            print(f"bulk ceiling measured: {docs:,} documents in {ceiling_s:.1f} s", flush=True)
            # A datasource of its own per run, so that a real cluster's leftovers never interfere.
            datasource = f"bench{secrets.token_hex(3)}"
            engine = FlintEngine(FlintContext(spark, store, index.config, datasource))
            prefix = f"flint_{datasource}_{table.replace('.', '_')}"
            covering = f"{prefix}_all_index"
            run(engine, f"CREATE INDEX all ON {table} (id, region, qty, price, day) WITH (id_expression = 'id')")
            refresh_s = run(engine, f"REFRESH INDEX all ON {table}")
            indexed = sum(1 for _ in store.admin.scan(covering))
            store.admin.delete_index(covering)
            print(f"covering index refreshed: {indexed:,} documents in {refresh_s:.1f} s", flush=True)
            run(engine, f"CREATE SKIPPING INDEX ON {table} (region VALUE_SET, qty MIN_MAX, id BLOOM_FILTER)")
            skipping_s = run(engine, f"REFRESH SKIPPING INDEX ON {table}")
            store.admin.delete_index(f"{prefix}_skipping_index")
        finally:
            if own_session:
                spark.stop()
            else:
                spark.sql(f"DROP TABLE IF EXISTS {table}")
            store.close()
    refresh_rate = indexed / refresh_s
    ceiling_rate = docs / ceiling_s
    print(f"covering index refresh: {indexed:,} documents in {refresh_s:.1f} s = {refresh_rate:,.0f} rows/s")
    print(f"bulk ceiling (one Python process, batches of {DEFAULT_BATCH}): {docs:,} documents in {ceiling_s:.1f} s")
    print(f"  = {ceiling_rate:,.0f} docs/s")
    print(f"refresh / ceiling: {refresh_rate / ceiling_rate:.2f}")
    print(f"skipping index refresh (VALUE_SET, MIN_MAX, BLOOM_FILTER over {args.partitions} files): {skipping_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
