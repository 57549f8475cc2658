"""What statement validation costs: at POST (the plugin's check, no Spark) and in the job (the
check on Spark's own parse, per statement), on a corpus of distinct statements of about 1 kB.

``python -m bench.validation [--quick] [--out PATH] [--skip-spark]``:

* **POST**: a seeded corpus of distinct SQL statements, each padded to 1 kB with more select items
  and predicates (queries, CTAS, INSERT, DDL with options and locations, Dashboards' browse
  statements), is checked by what POST adds for validation: the limits on the statement's tokens
  (:func:`query_core.validation.check_limits`) and :func:`query_core.validation.validate_query`
  with the ``LOCAL`` profile, on those tokens; each statement timed once after a warm-up pass. The
  same with the reference's ``S3GLUE`` profile (read on sqlglot's syntax tree) for comparison.
* **job**: the same statements, checked by the job's :class:`flint_repl_job.guard.StatementGuard`
  in a local Spark session (``local[2]``, in this process), tables created first so that the
  catalog lookups are real; next to Spark's own parse-and-analyze (``spark.sql``, not executed) of
  the same text, for scale.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Figure, Target, close_report, new_report, print_report
from bench.stats import percentile, summary
from query_core.flint import parse
from query_core.validation import (
    Profile,
    QueryRefusedError,
    StatementLimits,
    check_limits,
    policy_for,
    validate_query,
)

SECTION = "statement validation"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "validation.json"
TABLES = ("bench_v_sales", "bench_v_people")
WAREHOUSE_TOKEN = "{wh}"


def _pad(rng: random.Random, head: str, tail: str, size: int) -> str:
    """``head`` + select items or predicates until the statement is about ``size`` characters."""
    items: list[str] = []
    while len(head) + len(tail) + sum(len(i) + 2 for i in items) < size:
        n = rng.randint(0, 9_999)
        items.append(
            rng.choice(
                [
                    f"coalesce(amount, {n}) * {rng.randint(1, 9)} AS c{n}",
                    f"date_format(ts, 'yyyy-MM-dd') AS d{n}",
                    f"CASE WHEN region = 'r{n}' THEN upper(item) ELSE lower(item) END AS k{n}",
                    f"round(amount / {rng.randint(2, 99)}, 2) AS r{n}",
                    f"concat_ws('-', item, region, '{n}') AS s{n}",
                ]
            )
        )
    return head + ", ".join(items) + tail


def corpus(count: int, seed: int = 20261127, size: int = 1_000) -> list[str]:
    """``count`` distinct statements of about ``size`` characters over :data:`TABLES`."""
    rng = random.Random(seed)
    sales, people = TABLES
    out: list[str] = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            text = _pad(
                rng, "SELECT id, ", f" FROM default.{sales} WHERE amount > {rng.randint(0, 500)} LIMIT 10", size
            )
        elif kind == 1:
            text = _pad(
                rng,
                "SELECT s.id, p.name, ",
                f" FROM default.{sales} s JOIN default.{people} p ON s.id = p.id "
                f"WHERE s.region IN ('eu', 'us') GROUP BY s.id, p.name, amount, ts, region, item",
                size,
            )
        elif kind == 2:
            text = _pad(
                rng,
                f"CREATE TABLE default.ctas_{i} USING parquet OPTIONS (compression 'zstd') "
                f"LOCATION '{WAREHOUSE_TOKEN}/ctas_{i}' AS SELECT id, ",
                f" FROM default.{sales}",
                size,
            )
        elif kind == 3:
            text = _pad(
                rng,
                f"INSERT INTO default.{sales} SELECT id, amount, ts, region, item FROM (SELECT *, ",
                f" FROM default.{sales})",
                size,
            )
        else:
            text = _pad(
                rng,
                f"WITH recent AS (SELECT * FROM default.{sales} WHERE ts > current_date() - {rng.randint(1, 90)}) SELECT ",
                " FROM recent ORDER BY 1",
                size,
            )
        out.append(text)
    return out


def _time(fn: Any, statements: list[str]) -> list[float]:
    samples = []
    for text in statements:
        began = time.perf_counter()
        fn(text)
        samples.append((time.perf_counter() - began) * 1e3)
    return samples


def post_bench(statements: list[str], warehouse: str) -> tuple[list[Figure], dict[str, Any]]:
    limits = StatementLimits()
    local = policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints")
    s3glue = policy_for({}, Profile.S3GLUE)

    def check(policy: Any) -> Any:
        def run(text: str) -> None:
            tokens = check_limits(text, "sql", limits)
            try:
                validate_query(
                    policy, "sql", text, parse(text) if text.startswith("CREATE INDEX") else None, tokens=tokens
                )
            except QueryRefusedError:
                pass  # the reference's profile refuses INSERT and CTAS: its work is done all the same

        return run

    filled = [s.replace(WAREHOUSE_TOKEN, warehouse) for s in statements]
    _time(check(local), filled)  # warm-up
    local_ms = _time(check(local), filled)
    _time(check(s3glue), filled)
    s3glue_ms = _time(check(s3glue), filled)
    n = len(filled)
    mean_size = round(sum(map(len, filled)) / n)
    figures = [
        Figure(
            SECTION,
            "POST: limits + check, LOCAL profile, p50",
            round(percentile(local_ms, 50), 3),
            "ms",
            Target("<", 1.0),
            f"{mean_size}-char statements",
        ),
        Figure(
            SECTION, "POST: limits + check, LOCAL profile, p99", round(percentile(local_ms, 99), 3), "ms", note=f"n={n}"
        ),
        Figure(
            SECTION,
            "POST: limits + check, S3GLUE profile (sqlglot tree), p50",
            round(percentile(s3glue_ms, 50), 3),
            "ms",
            note="the reference's profile, for comparison",
        ),
        Figure(
            SECTION,
            "POST: LOCAL check / S3GLUE check, p50 ratio",
            round(percentile(local_ms, 50) / percentile(s3glue_ms, 50), 2),
            "x",
            note="same run",
        ),
    ]
    return figures, {
        "statements": n,
        "mean_chars": mean_size,
        "local_ms": summary(local_ms),
        "s3glue_ms": summary(s3glue_ms),
    }


def job_bench(spark: Any, statements: list[str], warehouse: str) -> tuple[list[Figure], dict[str, Any]]:
    from flint_repl_job.guard import StatementGuard
    from flint_repl_job.jvm import prepare

    sales, people = TABLES
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS default.{sales} (id INT, amount DOUBLE, ts TIMESTAMP, region STRING, item STRING) USING parquet"
    )
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.{people} (id INT, name STRING) USING parquet")
    try:
        policy = policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints")
        filled = [s.replace(WAREHOUSE_TOKEN, warehouse) for s in statements]
        # As before the JVM helpers: Spark writes each plan's JSON, py4j replies as it always did.
        guard = StatementGuard(spark, policy)
        guard._json = lambda plan: str(plan.toJSON())  # type: ignore[assignment]
        _time(guard.check_sql, filled)  # warm-up: JIT, the catalog's first reads
        before_ms = _time(guard.check_sql, filled)
        # As a job runs it: the helpers prepared at the job's start (flint_repl_job/jvm).
        prepare(spark).join()
        guard = StatementGuard(spark, policy)
        _time(guard.check_sql, filled)
        guard_ms = _time(guard.check_sql, filled)
        queries = [s for s in filled if s.startswith(("SELECT", "WITH"))]
        spark_ms = _time(lambda text: spark.sql(text), queries)
    finally:
        for table in TABLES:
            spark.sql(f"DROP TABLE IF EXISTS default.{table}")
    figures = [
        Figure(
            SECTION,
            "job: check on Spark's parse, p50",
            round(percentile(guard_ms, 50), 3),
            "ms",
            Target("<", 5.0),
            "parse + JSON + catalog lookups",
        ),
        Figure(
            SECTION,
            "job: check on Spark's parse, p99",
            round(percentile(guard_ms, 99), 3),
            "ms",
            note=f"n={len(filled)}",
        ),
        Figure(
            SECTION,
            "job: check without the JVM helpers, p50",
            round(percentile(before_ms, 50), 3),
            "ms",
            note="Spark's toJSON, py4j replies delayed: as before, same run",
        ),
        Figure(
            SECTION,
            "job: Spark's own parse + analyze of the queries, p50",
            round(percentile(spark_ms, 50), 3),
            "ms",
            note="spark.sql(text), not executed: for scale",
        ),
        Figure(
            SECTION,
            "job: check / Spark's parse + analyze, p50 ratio",
            round(percentile(guard_ms, 50) / percentile(spark_ms, 50), 2),
            "x",
            note="same run",
        ),
    ]
    return figures, {
        "guard_ms": summary(guard_ms),
        "guard_without_helpers_ms": summary(before_ms),
        "spark_analyze_ms": summary(spark_ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validation", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 statements instead of 1,000")
    parser.add_argument("--skip-spark", action="store_true", help="only the POST figures")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    statements = corpus(100 if args.quick else 1_000)
    report = new_report(quick=args.quick)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as work:
        warehouse = str(Path(work) / "warehouse")
        figures, details = post_bench(statements, warehouse)
        report.add(figures)
        report.details[SECTION] = details
        if not args.skip_spark:
            from bench.ppl import spark_session

            spark = spark_session(warehouse)
            try:
                report.meta["spark"] = spark.version
                figures, job_details = job_bench(spark, statements, warehouse)
            finally:
                spark.stop()
            report.add(figures)
            report.details[SECTION].update(job_details)
    close_report(report, started, args.out)
    return print_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
