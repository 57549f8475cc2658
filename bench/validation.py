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
* **POST, hostile worst cases**: the statements of up to a megabyte (100 KB of PPL) that cost
  validation the most (:func:`worst_cases`: an 880 KB IN list, comments nested 2,000 deep or a
  megabyte of nested comments, strings of separators, a megabyte of parentheses, ...; and
  statements just within the token budget), each through what POST does before it writes
  anything (the limits, the classification, the check, with the ``LOCAL`` and the ``S3GLUE``
  profile): the CPU time of the slowest, against the target of 0.5 s.
* **job, hostile corpus**: every statement of ``tests/hostile.py``, and the worst cases, run by
  the job's executor (:class:`flint_repl_job.executor.SparkExecutor`, the ``LOCAL`` policy) as a
  job runs a statement: its prepare time, from the start to its Spark work starting (its check,
  Spark's parse and analysis) or to its refusal; the slowest against the target of 5 s.
* **what the catalog holds** (the job's check of the tables, views and partitions a statement
  reaches, on Spark's analysis: :meth:`StatementGuard.resolve`): what it adds to Spark's analysis
  of each statement of the corpus; a query's preparation before it (check, then ``spark.sql``)
  and now (check, then the checked analysis, then the DataFrame over it); queries over a table of
  many partitions, run whole (their partitions are listed into the plan and checked); and the
  job's preparation of each statement of the hostile corpus (``tests/hostile.py``, planted tables,
  views and partitions included), which must stay under 5 s.
"""

from __future__ import annotations

import argparse
import logging
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


# -- hostile statements -----------------------------------------------------------------------------


def worst_cases(max_tokens: int | None = None) -> dict[str, tuple[str, str]]:
    """Named statements (language, text) that cost validation the most: up to the statement
    size limit (1 MB; PPL 100 KB), and just within the token budget (allowed: what the budget
    lets through is what Spark then analyzes)."""
    from query_core.validation.limits import DEFAULT_MAX_CHARS, DEFAULT_MAX_PPL_CHARS, DEFAULT_MAX_TOKENS

    mb, ppl_kb = DEFAULT_MAX_CHARS - 64, DEFAULT_MAX_PPL_CHARS - 64
    budget = (max_tokens or DEFAULT_MAX_TOKENS) - 64

    def fill(head: str, unit: str, tail: str = "", size: int = mb) -> str:
        return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail

    return {
        "IN list, 880 KB": ("sql", "SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * 440_000) + ")"),
        "IN list, 1 MB": ("sql", fill("SELECT * FROM range(1) WHERE id IN (1", ",1", ")")),
        "comments nested 2,000 deep (8 KB)": ("sql", "SELECT 1 " + "/*" * 2000 + " x " + "*/" * 2000),
        "comments nested 2 deep, 1 MB": ("sql", fill("SELECT 1 ", "/*/**/*/ ")),
        "comments nested 32 deep, 1 MB": ("sql", fill("SELECT 1 ", "/*" * 32 + "x" + "*/" * 32 + " ")),
        "unclosed comment nesting, 1 MB": ("sql", fill("SELECT 1 ", "/*")),
        "line comments, 1 MB": ("sql", fill("SELECT 1 ", "--x\n")),
        "comments, 1 MB": ("sql", fill("SELECT 1 ", "/**/")),
        "string of separators, 1 MB": ("sql", fill("SELECT length('", ",", "')")),
        "string of text, 1 MB": ("sql", fill("SELECT length('", "a", "')")),
        "EXECUTE IMMEDIATE of an IN list, 1 MB": ("sql", fill("EXECUTE IMMEDIATE 'SELECT 1 IN (1", ",1", ")'")),
        "parentheses, 1 MB": ("sql", "SELECT " + "(" * (mb // 2 - 8) + "1" + ")" * (mb // 2 - 8)),
        "select list, 1 MB": ("sql", fill("SELECT a", "+a", " FROM t")),
        "one word, 1 MB": ("sql", fill("SELECT ", "a")),
        "dereference chain, 1 MB": ("sql", fill("SELECT a", ".a", " FROM t")),
        "adjacent strings, 1 MB": ("sql", fill("SELECT ", "'a' ")),
        "whitespace, 1 MB": ("sql", fill("SELECT ", " ", "1")),
        "IN list at the budget": (
            "sql",
            "SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * (budget // 2)) + ")",
        ),
        "select list at the budget": (
            "sql",
            "SELECT " + ",".join(f"id+{i}" for i in range(budget // 4)) + " FROM range(1)",
        ),
        "function calls at the budget": ("sql", "SELECT " + ",".join(["abs(id)"] * (budget // 5)) + " FROM range(1)"),
        "CASE at the budget": (
            "sql",
            "SELECT CASE " + " ".join(f"WHEN id = {i} THEN {i}" for i in range(budget // 8)) + " END FROM range(1)",
        ),
        "windows at the budget": (
            "sql",
            "SELECT " + ", ".join(["sum(id) OVER (PARTITION BY id ORDER BY id)"] * (budget // 14)) + " FROM range(1)",
        ),
        "PPL eval, 100 KB": ("ppl", fill("source = t | eval c0 = a", ", c = a", size=ppl_kb)),
        "PPL IN list, 100 KB": ("ppl", fill("source = t | where a in (1", ",1", ")", size=ppl_kb)),
        "PPL string, 100 KB": ("ppl", fill("source = t | where a = '", "x", "'", size=ppl_kb)),
        "PPL eval at the budget": (
            "ppl",
            "source = t | eval " + ", ".join(f"c{i} = a" for i in range(budget // 5 // 4)),
        ),
    }


def _post_cpu(lang: str, text: str, policy: Any, limits: StatementLimits) -> tuple[float, str]:
    """What POST does with a statement before writing anything (``AsyncQueryService.submit``: the
    limits, the classification, the check): its CPU seconds, and the outcome."""
    from async_query.dispatch import classify
    from query_core.errors import InvalidRequestError

    began = time.thread_time()
    try:
        tokens = check_limits(text, lang, limits)
        classified = classify(lang, text)
        validate_query(policy, lang, text, classified.statement, tokens=tokens)
        outcome = "allowed"
    except InvalidRequestError as exc:
        outcome = f"400: {exc.message[:90]}"
    return time.thread_time() - began, outcome


def post_worst_bench(warehouse: str, rounds: int = 3) -> tuple[list[Figure], dict[str, Any]]:
    limits = StatementLimits()
    profiles = {
        "LOCAL": policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints"),
        "S3GLUE": policy_for({}, Profile.S3GLUE),
    }
    details: dict[str, Any] = {}
    slowest: dict[str, tuple[float, str]] = {}
    for name, (lang, text) in worst_cases().items():
        for profile, policy in profiles.items():
            samples = []
            outcome = ""
            for _ in range(rounds):
                cpu, outcome = _post_cpu(lang, text, policy, limits)
                samples.append(cpu)
            cpu = sorted(samples)[len(samples) // 2]
            details[f"{name} [{profile}]"] = {"chars": len(text), "cpu_s": round(cpu, 4), "outcome": outcome}
            if cpu > slowest.get(profile, (-1.0, ""))[0]:
                slowest[profile] = (cpu, name)
    figures = [
        Figure(
            SECTION,
            f"POST: hostile worst cases, slowest, {profile} profile",
            round(cpu, 3),
            "s",
            Target("<", 0.5),
            f"CPU; {name}; {len(details) // len(profiles)} cases up to 1 MB, median of {rounds}",
        )
        for profile, (cpu, name) in slowest.items()
    ]
    return figures, {"post_worst_cases": details}


def _prepare_s(executor: Any, query_id: str, text: str, lang: str, timeout: float = 60.0) -> tuple[float, str]:
    """How long the job's executor takes to prepare ``text`` (its check, Spark's parse and
    analysis) or to refuse it; the statement then runs to its end (or is abandoned past
    ``timeout``) before the next one starts."""
    began = time.monotonic()
    running = executor.start(query_id, text, lang)
    while not running.prepared.wait(0.002) and not running.future.done():
        if time.monotonic() - began > timeout:
            executor.abandon(running)
            return time.monotonic() - began, f"abandoned after {timeout:g} s"
    took = time.monotonic() - began
    error = running.future.exception(timeout=600)
    return took, "ran" if error is None else f"{type(error).__name__}: {str(error)[:90]}"


def job_hostile_bench(spark: Any, warehouse: str) -> tuple[list[Figure], dict[str, Any]]:
    """The hostile corpus (tests/hostile.py) and :func:`worst_cases`, prepared by the job's
    executor as a job prepares a statement."""
    import os

    from flint_repl_job.executor import SparkExecutor
    from flint_repl_job.flint_statements import flint_statement
    from tests import hostile
    from tests.support import Listener

    base = Path(warehouse).parent / "hostile"
    cp, outside = base / "checkpoints", base / "outside"
    (outside / "keep").mkdir(parents=True, exist_ok=True)
    cp.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text("the secret")
    Path(warehouse).mkdir(parents=True, exist_ok=True)
    link = Path(warehouse) / "hostile_link"
    if not link.exists():
        os.symlink(outside, link)
    listener = Listener()
    for sql in (
        "CREATE TABLE IF NOT EXISTS default.wh_ok (a INT) USING parquet",
        "CREATE TABLE IF NOT EXISTS default.wh_part (a INT, k INT) USING parquet PARTITIONED BY (k)",
        "CREATE TABLE IF NOT EXISTS default.stored_jdbc USING jdbc "
        "OPTIONS (url 'jdbc:derby:memory:hostile;create=true', dbtable 'SYS.SYSTABLES')",
        "CREATE OR REPLACE VIEW default.over_stored_jdbc AS SELECT * FROM default.stored_jdbc",
    ):
        spark.sql(sql)
    policy = policy_for({}, Profile.LOCAL, Path(warehouse).as_uri(), str(cp))
    executor = SparkExecutor(spark, "", None, policy, limits=StatementLimits())
    # Hostile statements fail by design, and those at the budget make Spark's code generator give
    # up: both loudly, in the JVM's log and in PySpark's own logger.
    spark.sparkContext.setLogLevel("OFF")
    pyspark_log = logging.getLogger("SQLQueryContextLogger")
    pyspark_level = pyspark_log.level
    pyspark_log.setLevel(logging.CRITICAL)
    places = {"wh": warehouse, "cp": cp, "outside": outside, "link": link, "port": listener.port}
    corpus: dict[str, float] = {}
    details: dict[str, Any] = {}
    try:
        _prepare_s(executor, "warm-up", "SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * 5_000) + ")", "sql")
        for i, case in enumerate(hostile.ALL):
            text = case.fill(**places)
            statement = flint_statement(text) if case.lang == "sql" else None
            if statement is not None:  # run by the Flint engine: its prepare is its check
                began = time.monotonic()
                try:
                    executor.guard.check_flint(statement)
                    outcome = "allowed"
                except Exception as exc:  # noqa: BLE001 - a refusal is an outcome here
                    outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
                took = time.monotonic() - began
            else:
                took, outcome = _prepare_s(executor, f"hostile-{i}", text, case.lang)
            corpus[case.id] = took
            details[f"corpus {i}: {case.id}"] = {"prepare_s": round(took, 3), "outcome": outcome}
        worst: dict[str, float] = {}
        for i, (name, (lang, text)) in enumerate(worst_cases().items()):
            took, outcome = _prepare_s(executor, f"worst-{i}", text, lang)
            worst[name] = took
            details[name] = {"prepare_s": round(took, 3), "outcome": outcome}
    finally:
        executor.close()
        spark.sparkContext.setLogLevel("ERROR")
        pyspark_log.setLevel(pyspark_level)
        listener.close()
        for table in ("wh_ok", "wh_part", "wh_new", "wh_loc", "wh_csv", "wh_ctas", "wh_tbl"):
            spark.sql(f"DROP TABLE IF EXISTS default.{table}")
        spark.sql("DROP VIEW IF EXISTS default.over_stored_jdbc")
        spark.sql("DROP TABLE IF EXISTS default.stored_jdbc")
        link.unlink(missing_ok=True)
    slow_case = max(corpus, key=corpus.__getitem__)
    slow_worst = max(worst, key=worst.__getitem__)
    figures = [
        Figure(
            SECTION,
            "job: prepare, hostile corpus, slowest",
            round(corpus[slow_case], 3),
            "s",
            Target("<=", 5.0),
            f"{slow_case[:50]}; {len(corpus)} cases",
        ),
        Figure(SECTION, "job: prepare, hostile corpus, p50", round(percentile(list(corpus.values()), 50) * 1e3, 1), "ms"),
        Figure(
            SECTION,
            "job: prepare, worst cases, slowest",
            round(worst[slow_worst], 3),
            "s",
            Target("<=", 5.0),
            f"{slow_worst}; {len(worst)} cases",
        ),
    ]
    return figures, {"job_hostile": details}
def _analyses(analysis: Any, item: Any) -> bool:
    """Whether Spark analyses the statement (a few of the corpus's CTAS repeat a column name)."""
    try:
        analysis(item)
    except Exception:  # noqa: BLE001 - Spark's AnalysisException: not a statement a job would prepare
        return False
    return True


def _paired(first: Any, second: Any, items: list[Any]) -> tuple[list[float], list[float]]:
    """``first(item)`` and ``second(item)`` timed for each item, the order alternating."""
    a: list[float] = []
    b: list[float] = []
    for i, item in enumerate(items):
        for fn, out in ((first, a), (second, b)) if i % 2 == 0 else ((second, b), (first, a)):
            began = time.perf_counter()
            fn(item)
            out.append((time.perf_counter() - began) * 1e3)
    return a, b


def catalog_bench(
    spark: Any, statements: list[str], warehouse: str, partitions: int
) -> tuple[list[Figure], dict[str, Any]]:
    """What the job's check of what the catalog holds adds (see the module's documentation)."""
    from flint_repl_job.executor import SparkExecutor
    from flint_repl_job.guard import StatementGuard
    from flint_repl_job.jvm import prepare

    prepare(spark).join()
    sales, people = TABLES
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS default.{sales} (id INT, amount DOUBLE, ts TIMESTAMP, region STRING, item STRING) USING parquet"
    )
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.{people} (id INT, name STRING) USING parquet")
    policy = policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints")
    guard = StatementGuard(spark, policy)
    executor = SparkExecutor(spark, "", None, policy)
    state, skip, _ = guard._analysis_handles()
    try:
        filled = [s.replace(WAREHOUSE_TOKEN, warehouse) for s in statements]

        def analysis(item: tuple[str, Any]) -> None:
            state.executePlan(item[1].parsed, skip).analyzed()

        checked = [item for item in ((text, guard.check_sql(text)) for text in filled) if _analyses(analysis, item)]

        def resolved(item: tuple[str, Any]) -> None:
            guard.resolve(item[0], item[1])

        _paired(analysis, resolved, checked)  # warm-up
        analysis_ms, resolve_ms = _paired(analysis, resolved, checked)
        added = [r - a for a, r in zip(analysis_ms, resolve_ms, strict=True)]
        queries = [text for text, _ in checked if text.startswith(("SELECT", "WITH"))]

        def before(text: str) -> None:
            guard.check_sql(text)
            spark.sql(text)

        def now(text: str) -> None:
            executor.frame_of(text, guard.resolve(text, guard.check_sql(text)))

        before_ms, now_ms = _paired(before, now, queries)
        parted = _partitioned(spark, guard, executor, partitions)
    finally:
        executor.close()
        for table in (*TABLES, PARTED):
            spark.sql(f"DROP TABLE IF EXISTS default.{table}")
    figures = [
        Figure(
            SECTION,
            "job: catalog check added to Spark's analysis, p50",
            round(percentile(added, 50), 3),
            "ms",
            note="resolve() - analysis alone, same statements, same run",
        ),
        Figure(
            SECTION,
            "job: catalog check added to Spark's analysis, p99",
            round(percentile(added, 99), 3),
            "ms",
            note=f"n={len(added)}",
        ),
        Figure(
            SECTION,
            "job: query prepare before (check + spark.sql), p50",
            round(percentile(before_ms, 50), 3),
            "ms",
            note=f"n={len(queries)}",
        ),
        Figure(
            SECTION,
            "job: query prepare now (check + checked analysis + DataFrame), p50",
            round(percentile(now_ms, 50), 3),
            "ms",
            note="same queries, same run",
        ),
        Figure(
            SECTION,
            "job: query prepare now / before, p50 ratio",
            round(percentile(now_ms, 50) / percentile(before_ms, 50), 2),
            "x",
        ),
        *parted[0],
    ]
    return figures, {
        "catalog_added_ms": summary(added),
        "analysis_ms": summary(analysis_ms),
        "resolve_ms": summary(resolve_ms),
        "query_prepare_before_ms": summary(before_ms),
        "query_prepare_now_ms": summary(now_ms),
        **parted[1],
    }


PARTED = "bench_v_parted"


def _partitioned(spark: Any, guard: Any, executor: Any, partitions: int) -> tuple[list[Figure], dict[str, Any]]:
    """Queries over a table of ``partitions`` partitions, run whole, before (check + spark.sql)
    and now (their partitions listed, checked and put into the plan)."""
    spark.sql(f"CREATE TABLE default.{PARTED} (v INT, k INT) USING parquet PARTITIONED BY (k)")
    spark.sql(f"INSERT INTO default.{PARTED} SELECT id, id FROM range({partitions})")
    queries = [f"SELECT count(*) FROM default.{PARTED}", f"SELECT sum(v) FROM default.{PARTED} WHERE k < 10"] * 10

    def before(text: str) -> None:
        guard.check_sql(text)
        spark.sql(text).collect()

    def now(text: str) -> None:
        executor.frame_of(text, guard.resolve(text, guard.check_sql(text))).collect()

    _paired(before, now, queries[:4])  # warm-up
    before_ms, now_ms = _paired(before, now, queries)
    figures = [
        Figure(
            SECTION,
            f"job: query of {partitions} partitions run whole, before, p50",
            round(percentile(before_ms, 50), 1),
            "ms",
            note="check + spark.sql + collect",
        ),
        Figure(
            SECTION,
            f"job: query of {partitions} partitions run whole, now, p50",
            round(percentile(now_ms, 50), 1),
            "ms",
            note="partitions listed, checked and put into the plan; same run",
        ),
    ]
    return figures, {"parted_before_ms": summary(before_ms), "parted_now_ms": summary(now_ms), "partitions": partitions}


def hostile_bench(spark: Any, warehouse: str, cases: list[Any] | None = None) -> tuple[list[Figure], dict[str, Any]]:
    """The job's preparation of each statement of the hostile corpus (``tests/hostile.py``), as
    the job prepares it before running it: the limits, the check on Spark's parse (on PPL's tree,
    then on the SQL it translates to), Spark's analysis and the check of what the catalog holds
    (with a query's partitions listed into its plan). Refused or not, nothing is run. ``cases``:
    a part of the corpus (all of it by default)."""
    from flint_repl_job.flint_statements import flint_statement
    from flint_repl_job.guard import StatementGuard
    from flint_repl_job.jvm import prepare
    from query_core.ppl import to_spark_sql
    from tests import hostile
    from tests.support import free_port

    prepare(spark).join()
    wh = Path(warehouse)
    base = wh.parent / "hostile"
    cp, outside = base / "checkpoints", base / "outside"
    link = hostile.make_places(wh, cp, outside)
    hostile.make_catalog(spark, outside)
    guard = StatementGuard(spark, policy_for({}, Profile.LOCAL, wh.as_uri(), str(cp)))
    state, skip, _ = guard._analysis_handles()
    port = free_port()

    def prepare_case(text: str, lang: str, catalog: bool) -> None:
        try:
            if lang == "ppl":
                guard.check_ppl(text)
                text = to_spark_sql(text, lambda query: list(spark.sql(query).columns))
            elif (statement := flint_statement(text)) is not None:
                guard.check_flint(statement)
                return
            checked = guard.check_sql(text)
            if catalog:
                guard.resolve(text, checked)
            else:
                state.executePlan(checked.parsed, skip).analyzed()
        except Exception:  # noqa: BLE001 - a refusal, a limit or Spark's own error: prepared all the same
            pass

    timed: list[tuple[str, float, float]] = []
    try:
        filled = [(c.fill(wh=wh, cp=cp, outside=outside, link=link, port=port), c.lang) for c in cases or hostile.ALL]
        for text, lang in filled:  # warm-up
            prepare_case(text, lang, True)
        for i, (text, lang) in enumerate(filled):
            pair: dict[bool, float] = {}
            for catalog in (True, False) if i % 2 == 0 else (False, True):
                began = time.perf_counter()
                prepare_case(text, lang, catalog)
                pair[catalog] = (time.perf_counter() - began) * 1e3
            timed.append((text[:80], pair[True], pair[False]))
    finally:
        hostile.drop_catalog(spark)
        link.unlink()
    now_ms = [t[1] for t in timed]
    added = [t[1] - t[2] for t in timed]
    slowest = max(timed, key=lambda t: t[1])
    figures = [
        Figure(
            SECTION,
            "job: hostile corpus, prepare of the slowest case",
            round(slowest[1], 1),
            "ms",
            Target("<", 5000.0),
            slowest[0][:60],
        ),
        Figure(
            SECTION,
            "job: hostile corpus, cases prepared in over 5 s",
            sum(t > 5000 for t in now_ms),
            "",
            Target("<=", 0),
            f"of {len(timed)}",
        ),
        Figure(SECTION, "job: hostile corpus, prepare, p50", round(percentile(now_ms, 50), 2), "ms"),
        Figure(
            SECTION,
            "job: hostile corpus, catalog check added, p50",
            round(percentile(added, 50), 2),
            "ms",
            note="with the check of what the catalog holds - with analysis alone, same case",
        ),
        Figure(SECTION, "job: hostile corpus, catalog check added, max", round(max(added), 2), "ms"),
    ]
    return figures, {
        "hostile_prepare_ms": summary(now_ms),
        "hostile_catalog_added_ms": summary(added),
        "hostile_slowest": slowest[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validation", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 statements instead of 1,000")
    parser.add_argument("--skip-spark", action="store_true", help="only the POST figures")
    parser.add_argument("--skip-corpus", action="store_true", help="without the hostile statements")
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
        if not args.skip_corpus:
            figures, worst_details = post_worst_bench(warehouse)
            report.add(figures)
            report.details[SECTION].update(worst_details)
        if not args.skip_spark:
            from bench.ppl import spark_session

            spark = spark_session(warehouse)
            try:
                report.meta["spark"] = spark.version
                figures, job_details = job_bench(spark, statements, warehouse)
                catalog_figures, catalog_details = catalog_bench(
                    spark, statements, warehouse, 50 if args.quick else 200
                )
                hostile_figures, hostile_details = hostile_bench(spark, warehouse)
                if not args.skip_corpus:
                    more, more_details = job_hostile_bench(spark, warehouse)
                    hostile_figures += more
                    hostile_details.update(more_details)
            finally:
                spark.stop()
            report.add(figures + catalog_figures + hostile_figures)
            report.details[SECTION].update({**job_details, **catalog_details, **hostile_details})
    close_report(report, started, args.out)
    return print_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
