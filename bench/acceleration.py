"""Query acceleration by Flint indexes: the same queries with and without the indexes, same run.

``python -m bench.acceleration [--quick] [--out PATH]``: Spark in local mode (``local[2]``) in the
bench process writes a parquet table of 1,000 small files (``--quick``: 200), each file its own
range of ``id`` (MIN_MAX), one ``status`` of 100 (VALUE_SET) and ``host`` names of its own
(BLOOM_FILTER); a skipping index over the three and a covering index over ``(status, v)`` are
created and refreshed by the job's Flint engine on a real OpenSearch node (or ``OPENSEARCH_URL``).

Each query runs as the job runs it (``Accelerator.sql``, then collect), in rounds that alternate
the rules on and off (``spark.flint.optimizer.enabled``, and the covering rule alone for the
covered query); the figures are medians over the rounds, after a warm-up of each:

- a selective predicate (1 % of the files) on each skipping kind: time with the index / without,
  files read / files (Spark's own scan metric), and the index lookup's cost (the index's
  documents read, the table's listing, the files chosen); and, as the floor any file pruning
  can reach, Spark alone over the same files named by hand / without;
- a covered query: time reading the covering index / reading the whole table (both rules off);
- a predicate that keeps every file: time with the rules on / off (the lookup is all it adds);
- the job's preparation of these queries (its check on Spark's parse, then the accelerated
  DataFrame) with the check of what the catalog holds (Spark's analysis checked, and run) and
  without it (``spark.sql``, as before): what the check adds to an accelerated query.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.index_node import index_node
from bench.report import Figure, Target, run_standalone
from flint_repl_job.acceleration.accelerator import Accelerator
from flint_repl_job.acceleration.plans import files_read
from flint_repl_job.acceleration.switches import COVERING_ENABLED, OPTIMIZER_ENABLED
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from flint_repl_job.jvm import prepare
from flint_repl_job.opensearch_source import register
from query_core.config import OpenSearchConfig
from query_core.flint import parse
from query_core.store import Store, quiet_driver_logs

SECTION = "acceleration"
DEFAULT_OUT = Path("bench/results/acceleration.json")
DS = "bench"
TABLE = "default.accel_bench"


def spark_session(warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bench-acceleration")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    prepare(session).join()  # the JVM helpers, as a job prepares them at its start (docs/job.md)
    return session


def make_table(spark: Any, files: int, rows_per_file: int) -> None:
    """``files`` parquet files of ``rows_per_file`` rows: file ``f`` holds ids ``f * rows`` to
    ``(f + 1) * rows - 1``, status ``f % 100``, hosts ``h<f % 100>-<0..6>``."""
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    per = rows_per_file
    frame = spark.range(0, files * per, 1, files).selectExpr(
        "id",
        f"cast(floor(id / {per}) % 100 as int) AS status",
        f"concat('h', cast(floor(id / {per}) % 100 as string), '-', cast(id % 7 as string)) AS host",
        "cast(id as double) * 0.5 AS v",
    )
    frame.write.format("parquet").saveAsTable(TABLE)


class Bench:
    def __init__(self, spark: Any, store: Store, cfg: OpenSearchConfig) -> None:
        self.spark = spark
        self.engine = FlintEngine(FlintContext(spark, store, cfg, DS))
        self.accelerator = Accelerator(spark, store, cfg, DS)

    def flint(self, sql: str) -> float:
        statement = parse(sql)
        assert statement is not None
        began = time.monotonic()
        self.engine.run(statement)
        return time.monotonic() - began

    def run_once(self, sql: str, switch: str, on: bool) -> dict[str, Any]:
        """One run of ``sql`` as the job runs it, with ``switch`` on or off."""
        self.spark.conf.set(switch, "true" if on else "false")
        try:
            began = time.perf_counter()
            prepared = self.accelerator.sql(sql)
            rows = prepared.frame.collect()
            seconds = time.perf_counter() - began
        finally:
            self.spark.conf.unset(switch)
        report = prepared.acceleration
        return {
            "seconds": seconds,
            "rows": sorted(tuple(r) for r in rows),
            "files_read": files_read(prepared.frame),
            "lookup_ms": report.lookup_ms if report else 0.0,
            "total_ms": report.total_ms if report else 0.0,
            "used": report.summary() if report else "",
        }

    def prepare_cost(self, queries: list[str], rounds: int) -> dict[str, Any]:
        """The job's preparation of each query (not run), with the check of what the catalog holds
        and without it, in rounds alternating which goes first: medians in ms."""
        from flint_repl_job.guard import StatementGuard
        from query_core.validation import Profile, policy_for

        warehouse = str(self.spark.conf.get("spark.sql.warehouse.dir"))
        guard = StatementGuard(self.spark, policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints"))

        def checked(sql: str) -> None:
            self.accelerator.sql(sql, guard.resolve(sql, guard.check_sql(sql)))

        def unchecked(sql: str) -> None:
            guard.check_sql(sql)
            self.accelerator.sql(sql)

        timed: dict[bool, list[float]] = {True: [], False: []}
        for i in range(rounds + 1):
            for sql in queries:
                for flag in (True, False) if i % 2 == 0 else (False, True):
                    began = time.perf_counter()
                    checked(sql) if flag else unchecked(sql)
                    if i:  # the first round warms up
                        timed[flag].append((time.perf_counter() - began) * 1e3)
        return {
            "with_ms": statistics.median(timed[True]),
            "without_ms": statistics.median(timed[False]),
            "added_ms": statistics.median(a - b for a, b in zip(timed[True], timed[False], strict=True)),
            "n": len(timed[True]),
        }

    def compare(self, sql: str, switch: str, rounds: int, floor_sql: str | None = None) -> dict[str, Any]:
        """Rounds alternating on and off (which goes first alternates too), after a warm-up of each;
        with ``floor_sql`` (the query with the kept files named by hand), that too, rules off,
        after each pair: what Spark alone takes to read only those files."""
        self.run_once(sql, switch, True)
        self.run_once(sql, switch, False)
        if floor_sql is not None:
            self.run_once(floor_sql, switch, False)
        on: list[dict[str, Any]] = []
        off: list[dict[str, Any]] = []
        floor: list[dict[str, Any]] = []
        for i in range(rounds):
            for flag in (True, False) if i % 2 == 0 else (False, True):
                (on if flag else off).append(self.run_once(sql, switch, flag))
            if floor_sql is not None:
                floor.append(self.run_once(floor_sql, switch, False))
        if any(r["rows"] != off[0]["rows"] for r in on + off + floor):
            raise AssertionError(f"rows differ with the rules on and off: {sql}")
        return {
            "floor_s": statistics.median(r["seconds"] for r in floor) if floor else None,
            "sql": sql,
            "on_s": statistics.median(r["seconds"] for r in on),
            "off_s": statistics.median(r["seconds"] for r in off),
            "files_read_on": on[0]["files_read"],
            "files_read_off": off[0]["files_read"],
            "lookup_ms": statistics.median(r["lookup_ms"] for r in on),
            "total_ms": statistics.median(r["total_ms"] for r in on),
            "used": on[0]["used"],
            "rounds": rounds,
        }


def run(quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    files, per, rounds = (200, 20, 2) if quick else (1000, 50, 5)
    quiet_driver_logs()
    with tempfile.TemporaryDirectory(prefix="warehouse-", dir=work) as warehouse, index_node(work / "index") as index:
        spark = spark_session(warehouse)
        cfg = index.config
        store = Store.connect(cfg)
        try:
            return measure(Bench(spark, store, cfg), spark, files, per, rounds)
        finally:
            store.close()
            spark.stop()


def measure(bench: Bench, spark: Any, files: int, per: int, rounds: int) -> tuple[list[Figure], dict[str, Any]]:
    began = time.monotonic()
    make_table(spark, files, per)
    details: dict[str, Any] = {"files": files, "rows_per_file": per, "table_s": round(time.monotonic() - began, 1)}
    bench.flint(f"CREATE SKIPPING INDEX ON {TABLE} (status VALUE_SET, id MIN_MAX, host BLOOM_FILTER)")
    details["skipping_refresh_s"] = round(bench.flint(f"REFRESH SKIPPING INDEX ON {TABLE}"), 1)
    bench.flint(f"CREATE INDEX by_status ON {TABLE} (status, v)")
    details["covering_refresh_s"] = round(bench.flint(f"REFRESH INDEX by_status ON {TABLE}"), 1)
    selected = files // 100  # 1 % of the files
    low = (files // 2) * per
    selective = {
        "MIN_MAX": f"id >= {low} AND id < {low + selected * per}",
        "VALUE_SET": "status = 42",
        "BLOOM_FILTER": "host = 'h42-3'",
    }
    figures: list[Figure] = []
    for kind, predicate in selective.items():
        sql = f"SELECT count(*), sum(v) FROM {TABLE} WHERE {predicate}"
        # The covering index could answer these too: the skipping index is what is measured here.
        spark.conf.set(COVERING_ENABLED, "false")
        try:
            result = bench.compare(sql, OPTIMIZER_ENABLED, rounds, floor_sql=by_hand(spark, predicate))
        finally:
            spark.conf.unset(COVERING_ENABLED)
        details[kind] = result
        figures += [
            Figure(
                SECTION, f"{kind}: time with index / without", result["on_s"] / result["off_s"], "", Target("<=", 0.2)
            ),
            Figure(
                SECTION,
                f"{kind}: files read / files",
                result["files_read_on"] / files,
                "",
                Target("<=", selected / files),
                note=f"{result['files_read_on']} of {files}; the predicate selects {selected}",
            ),
            Figure(SECTION, f"{kind}: index lookup", result["lookup_ms"], "ms", Target("<", 100.0)),
            Figure(
                SECTION,
                f"{kind}: Spark alone over the same files / without",
                result["floor_s"] / result["off_s"],
                "",
                note="the kept files named by hand (_metadata.file_path IN ...), no index: the floor",
            ),
        ]
    # Both rules on (the covering rule goes first and answers it) against both off (the whole table).
    covered = bench.compare(
        f"SELECT status, sum(v) FROM {TABLE} WHERE status = 42 GROUP BY status", OPTIMIZER_ENABLED, rounds
    )
    details["covered"] = covered
    figures.append(
        Figure(
            SECTION,
            "covered query: index / table",
            covered["on_s"] / covered["off_s"],
            "",
            note=f"{covered['files_read_off']} files read without the index",
        )
    )
    spark.conf.set(COVERING_ENABLED, "false")
    try:
        every = bench.compare(f"SELECT count(*), sum(v) FROM {TABLE} WHERE id >= 0", OPTIMIZER_ENABLED, rounds)
    finally:
        spark.conf.unset(COVERING_ENABLED)
    details["non_selective"] = every
    figures.append(
        Figure(
            SECTION,
            "non-selective predicate: time on / off",
            every["on_s"] / every["off_s"],
            "",
            Target("<=", 1.1),
            note=f"{every['files_read_on']} of {files} files read; lookup {every['lookup_ms']:.0f} ms",
        )
    )
    queries = [str(details[kind]["sql"]) for kind in selective] + [str(covered["sql"])]
    cost = bench.prepare_cost(queries, rounds * 2)
    details["prepare"] = cost
    figures += [
        Figure(
            SECTION,
            "job's prepare of an accelerated query, with the catalog check, p50",
            cost["with_ms"],
            "ms",
            note=f"check + checked analysis + acceleration, not run; n={cost['n']}",
        ),
        Figure(SECTION, "job's prepare of an accelerated query, without it, p50", cost["without_ms"], "ms"),
        Figure(
            SECTION, "catalog check added to the prepare, p50", cost["added_ms"], "ms", note="same queries, same run"
        ),
    ]
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    return figures, details


def by_hand(spark: Any, predicate: str) -> str:
    """The selective query with the files holding matching rows named by hand, as a filter on
    ``_metadata.file_path``: Spark reading only those files, with no index involved."""
    files = sorted(
        r[0] for r in spark.sql(f"SELECT DISTINCT _metadata.file_path FROM {TABLE} WHERE {predicate}").collect()
    )
    named = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"SELECT count(*), sum(v) FROM {TABLE} WHERE {predicate} AND _metadata.file_path IN ({named})"


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv, prog="python -m bench.acceleration", doc=__doc__, default_out=DEFAULT_OUT, section=SECTION, run=run
    )


if __name__ == "__main__":
    sys.exit(main())
