"""PPL translation time next to Spark's own parse-and-analyze time of the translated SQL, and the
same for the 22 TPC-H queries: their PPL's translation next to Spark's parse-and-analyze of the
standard SQL queries.

``python -m bench.ppl [--quick] [--out PATH]``: a seeded corpus of PPL queries (300; ``--quick``
30) over every command the translator supports is built against two small temp views in a local
Spark session (``local[2]``, in this process). Each query is checked at build time: those that do
not translate, or whose SQL Spark does not accept, are dropped and counted. After a warm-up pass,
each query is timed once: ``parse_ppl``; ``to_spark_sql`` with the job's real ``columns``
callback (``spark.sql(sql).columns``), split into time inside the callback and in the translator
itself; and ``spark.sql`` of the translated text, which in classic (not Connect) PySpark parses and
analyzes eagerly without executing (checked at start-up; ``.schema`` forces it otherwise).

TPC-H: the tables at scale factor 0.01 (tpchgen-cli) as temp views; each of the 22 queries in PPL
(``bench/tpch``) is translated and the standard SQL query parsed and analyzed ``--tpch-rounds``
times (5; the median is kept), after a warm-up round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import tpch
from bench.report import Figure, Target, close_report, new_report, run_summary
from bench.stats import percentile, summary
from query_core.ppl import PplSemanticError, PplSyntaxError, parse_ppl, to_spark_sql

SECTION = "PPL translation"
TPCH_SECTION = "PPL translation, TPC-H"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ppl.json"
PEOPLE = "bench_ppl_people"
DEPTS = "bench_ppl_depts"
PEOPLE_SCHEMA = "id INT, name STRING, dept STRING, age INT, salary DOUBLE, ts TIMESTAMP, msg STRING, email STRING"
DEPT_SCHEMA = "dept STRING, floor INT, manager STRING, building STRING"
DEPT_NAMES = ["eng", "ops", "sales", "hr", None]
VERBS = ["GET", "POST", "PUT"]

Gen = Callable[[random.Random], str]


# -- data ----------------------------------------------------------------------------------------


def _person(i: int) -> tuple[Any, ...]:
    """A row like tests/integration/test_ppl_spark.py's, with nulls sprinkled in every column."""
    age = None if i % 9 == 4 else 20 + (i * 7) % 40
    salary = None if i % 11 == 6 else 1000.0 + i * 250.5
    ts = dt.datetime(2024, 1 + i % 3, 1 + i % 5, i % 24, (i * 13) % 60, 0)
    msg = f"10.0.{i % 4}.{i % 250} {VERBS[i % 3]} {200 + (i % 3) * 100} /path/{i}"
    email = None if i % 8 == 7 else f"user{i}@host{i % 3}.example.com"
    return (i, f"name{i:03d}", DEPT_NAMES[i % 5], age, salary, ts, msg, email)


@contextmanager
def views(spark: Any, rows: int = 300) -> Iterator[None]:
    """Temp views ``bench_ppl_people`` (``rows`` rows) and ``bench_ppl_depts``, dropped afterwards."""
    spark.createDataFrame([_person(i) for i in range(rows)], PEOPLE_SCHEMA).createOrReplaceTempView(PEOPLE)
    depts = [("eng", 3, "ann", None), ("ops", 1, None, "b1"), ("hr", 2, "hal", "b2"), ("legal", 4, "lee", "b3")]
    spark.createDataFrame(depts, DEPT_SCHEMA).createOrReplaceTempView(DEPTS)
    try:
        yield
    finally:
        spark.catalog.dropTempView(PEOPLE)
        spark.catalog.dropTempView(DEPTS)


# -- corpus --------------------------------------------------------------------------------------


def _pick(rng: random.Random, items: list[str], most: int) -> list[str]:
    return rng.sample(items, rng.randint(1, min(most, len(items))))


def _source(rng: random.Random) -> str:
    filters = [
        "",
        f" age > {rng.randint(20, 50)}",
        f" dept = '{rng.choice(DEPT_NAMES[:4])}'",
        f" id < {rng.randint(5, 250)}",
    ]
    head = rng.choice(["source=", "source = ", "search source="])
    return f"{head}{PEOPLE}{rng.choice(filters)}{rng.choice(filters)}"


def _where(rng: random.Random) -> str:
    return rng.choice(
        [
            f"where age > {rng.randint(20, 55)} and dept = '{rng.choice(DEPT_NAMES[:4])}'",
            f"where salary between {rng.randint(1, 5000)} and {rng.randint(5000, 60000)}",
            "where dept in ('eng', 'ops') or isnull(age)",
            f"where like(name, 'name{rng.randint(0, 2)}%') and isnotnull(email)",
            f"where (age >= {rng.randint(20, 50)} or dept = 'hr') and not id in (1, 2, 3)",
            f"where dept in [ source = {DEPTS} | where floor > {rng.randint(0, 3)} | fields dept ]",
        ]
    )


def _eval(rng: random.Random) -> str:
    n = rng.randint(0, 999)
    return rng.choice(
        [
            f"eval x{n} = age * {rng.randint(2, 9)}, y{n} = x{n} + 1",
            f"eval u{n} = upper(name), l{n} = length(name) + abs(-2)",
            f"eval band{n} = case(age < 30, 'young', age < 50, 'mid' else 'old')",
            f"eval c{n} = coalesce(email, 'none'), age = age + {rng.randint(1, 100)}",
        ]
    )


def _sort(rng: random.Random) -> str:
    return f"sort {rng.choice(['- age, id', '+ dept, - id', 'salary', 'name, - ts'])}"


def _stats(rng: random.Random, event: bool = False) -> str:
    aggs = [
        "count()",
        "sum(salary)",
        "avg(age)",
        "min(age)",
        "max(salary)",
        "dc(dept)",
        f"percentile(age, {rng.choice([50, 90, 99])})",
        "stddev_samp(salary)",
        "var_pop(age)",
    ]
    chosen = _pick(rng, aggs, 4)
    items = [f"{a} as a{i}" if rng.random() < 0.3 else a for i, a in enumerate(chosen)]
    by_items = ["dept", "span(age, 10)", f"span(ts, {rng.choice(['1h', '1d', '15m', '1M'])})", "name"]
    by = _pick(rng, by_items, 2) if rng.random() < 0.8 else []
    if event:
        by = [b for b in by if not b.startswith("span")]
    verb = "eventstats" if event else "stats"
    return f"{verb} {', '.join(items)}" + (f" by {', '.join(by)}" if by else "")


def _trendline(rng: random.Random) -> str:
    func = rng.choice(["sma", "wma"])
    return f"trendline sort id {func}({rng.randint(1, 5)}, {rng.choice(['age', 'salary'])}) as t{rng.randint(0, 99)}"


#: The command under test in each query, in turn (so every command gets its share of the corpus).
FEATURED: dict[str, Gen] = {
    "where": _where,
    "fields +": lambda r: f"fields {', '.join(_pick(r, ['id', 'name', 'dept', 'age', 'salary', 'ts'], 4))}",
    "fields -": lambda r: f"fields - {', '.join(_pick(r, ['msg', 'email', 'ts', 'salary'], 3))}",
    "stats": _stats,
    "eventstats": lambda r: _stats(r, event=True),
    "sort": _sort,
    "head": lambda r: f"head {r.randint(1, 50)}" + (f" from {r.randint(1, 9)}" if r.random() < 0.5 else ""),
    "eval": _eval,
    "dedup": lambda r: r.choice(["dedup dept", "dedup 2 dept keepempty=true", "dedup dept, age", "dedup email"]),
    "rename": lambda r: r.choice(["rename name as who, dept as team", "rename msg as m", "rename age as years"]),
    "top/rare": lambda r: f"{r.choice(['top', 'rare'])} {r.randint(1, 10)} {r.choice(['dept', 'age', 'dept by age'])}",
    "parse": lambda r: r.choice(
        [r"parse email '(?<user>[a-z0-9]+)@(?<host_name>.+)'", r"parse msg '\S+ (?<verb>\w+) (?<code>\d+) .*'"]
    ),
    "grok": lambda r: r.choice(
        [
            "grok msg '%{IP:ip} %{WORD:verb} %{INT:code} %{GREEDYDATA:rest}'",
            "grok email '%{USERNAME:user}@%{HOSTNAME:host}'",
        ]
    ),
    "fillnull": lambda r: r.choice(
        ["fillnull with 'none' in dept, email", f"fillnull using age = {r.randint(0, 9)}, dept = 'x'"]
    ),
    "trendline": _trendline,
    "lookup": lambda r: r.choice(
        [
            f"lookup {DEPTS} dept replace floor, manager as boss",
            f"eval boss = if(id < 5, 'own', null) | lookup {DEPTS} dept append manager as boss",
            f"lookup {DEPTS} dept",
        ]
    ),
    "join": lambda r: r.choice(
        [
            f"join left = p right = d ON p.dept = d.dept {DEPTS}",
            f"left join left = p right = d ON p.dept = d.dept [ source = {DEPTS} | where floor > 1 ]",
            f"semi join left = p right = d ON p.dept = d.dept {DEPTS}",
        ]
    ),
}
#: Pipeline-free forms: ``describe`` alone, ``explain`` in front of a pipeline.
SPECIAL = ("describe", "explain")
#: Stages that keep every column of the source, so the featured command after them still applies.
PREFIX: list[Gen] = [_where, _eval, _sort, lambda r: f"head {r.randint(50, 250)}"]


def _query(rng: random.Random, command: str) -> str:
    if command == "describe":
        return f"describe {PEOPLE}"
    if command == "explain":
        return f"explain {rng.choice(['simple', 'extended', 'cost'])} | {_query(rng, rng.choice(list(FEATURED)))}"
    stages = [_source(rng), *(gen(rng) for gen in rng.sample(PREFIX, rng.randint(0, 2))), FEATURED[command](rng)]
    if rng.random() < 0.25:
        stages.append(f"head {rng.randint(1, 20)}")
    return " | ".join(stages)


def generate(count: int, seed: int = 20261122) -> list[tuple[str, str]]:
    """``count`` (command, PPL text) pairs, the same for the same seed."""
    rng = random.Random(seed)
    commands = [*FEATURED, *SPECIAL]
    return [(commands[i % len(commands)], _query(rng, commands[i % len(commands)])) for i in range(count)]


# -- measurement ---------------------------------------------------------------------------------


@dataclass
class _Callback:
    """The job's ``columns`` callback, timed: seconds spent in it and calls, since the last reset."""

    spark: Any
    seconds: float = 0.0
    calls: int = 0

    def __call__(self, sql: str) -> list[str]:
        began = time.perf_counter()
        try:
            return list(self.spark.sql(sql).columns)
        finally:
            self.seconds += time.perf_counter() - began
            self.calls += 1

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


@dataclass
class Sample:
    command: str
    parse_ms: float
    translate_ms: float
    callback_ms: float
    callbacks: int
    spark_ms: float

    @property
    def translator_ms(self) -> float:
        return self.translate_ms - self.callback_ms


@dataclass
class Corpus:
    queries: list[tuple[str, str]] = field(default_factory=list)
    untranslatable: list[tuple[str, str, str]] = field(default_factory=list)
    rejected_by_spark: list[tuple[str, str, str]] = field(default_factory=list)


def spark_sql_is_eager(spark: Any) -> bool:
    """Whether ``spark.sql`` analyzes at once: an unknown column must raise before any action."""
    try:
        spark.sql(f"SELECT no_such_column FROM {PEOPLE}")
    except Exception:  # noqa: BLE001 - AnalysisException (pyspark's class differs by version)
        return True
    return False


def check_corpus(spark: Any, generated: list[tuple[str, str]], eager: bool) -> Corpus:
    """Keep the queries that translate and whose SQL Spark accepts; record the others with why."""
    corpus = Corpus()
    columns = _Callback(spark)
    for command, text in generated:
        try:
            sql = to_spark_sql(text, columns)
        except (PplSyntaxError, PplSemanticError) as exc:
            corpus.untranslatable.append((command, text, str(exc)[:200]))
            continue
        try:
            _analyze(spark, sql, eager)
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException / ParseException
            corpus.rejected_by_spark.append((command, text, str(exc)[:200]))
            continue
        corpus.queries.append((command, text))
    return corpus


def _analyze(spark: Any, sql: str, eager: bool) -> None:
    frame = spark.sql(sql)
    if not eager:
        _ = frame.schema


def measure(spark: Any, queries: list[tuple[str, str]], eager: bool) -> list[Sample]:
    """One timed pass over ``queries`` (perf_counter around each step).

    The translation comes first, as in the job (``to_spark_sql`` parses the text itself: parsing is
    part of the translator-only time); ``parse_ppl`` alone is timed last, after Spark's call, so
    that neither PPL timing follows the other over the same text with warm caches.
    """
    columns = _Callback(spark)
    samples = []
    for command, text in queries:
        columns.reset()
        t0 = time.perf_counter()
        sql = to_spark_sql(text, columns)
        t1 = time.perf_counter()
        _analyze(spark, sql, eager)
        t2 = time.perf_counter()
        parse_ppl(text)
        t3 = time.perf_counter()
        samples.append(
            Sample(command, (t3 - t2) * 1e3, (t1 - t0) * 1e3, columns.seconds * 1e3, columns.calls, (t2 - t1) * 1e3)
        )
    return samples


def _ms(name: str, values: list[float], q: float, note: str = "") -> Figure:
    return Figure(SECTION, f"{name} p{q:g}", round(percentile(values, q), 3), "ms", note=note)


def figures(samples: list[Sample]) -> list[Figure]:
    """The printed figures: p50/p99 of each time, the ratio, and how many queries used the callback."""
    n = len(samples)
    translator = [s.translator_ms for s in samples]
    full = [s.translate_ms for s in samples]
    spark = [s.spark_ms for s in samples]
    with_cb = [s for s in samples if s.callbacks]
    callback = [s.callback_ms for s in with_cb]
    share = sum(callback) / sum(full) if sum(full) else float("nan")
    ratio = percentile(translator, 50) / percentile(spark, 50) if spark else float("nan")
    out = [
        _ms("parse_ppl", [s.parse_ms for s in samples], 50),
        _ms("parse_ppl", [s.parse_ms for s in samples], 99, f"n={n}"),
        _ms("translation, translator only", translator, 50, "to_spark_sql minus time in columns()"),
        _ms("translation, translator only", translator, 99, f"n={n}"),
        _ms("translation incl. columns callbacks", full, 50),
        _ms("translation incl. columns callbacks", full, 99, f"n={n}"),
        _ms("columns callbacks per query that used them", callback, 50, "Spark analysis of the input relation"),
        _ms("columns callbacks per query that used them", callback, 99, f"n={len(with_cb)}"),
        Figure(SECTION, "share of translation time in columns callbacks", round(100 * share, 1), "%"),
        _ms("Spark parse+analyze of the translated SQL", spark, 50, "spark.sql(sql), not executed"),
        _ms("Spark parse+analyze of the translated SQL", spark, 99, f"n={n}"),
        Figure(SECTION, "translator-only p50 / Spark p50", round(ratio, 3), "x"),
        Figure(
            SECTION,
            "queries that needed the columns callback",
            len(with_cb),
            "queries",
            note=f"of {n}; {sum(s.callbacks for s in samples)} calls in all",
        ),
    ]
    return out


def _per_command(samples: list[Sample]) -> dict[str, Any]:
    grouped: dict[str, list[Sample]] = {}
    for s in samples:
        grouped.setdefault(s.command, []).append(s)
    return {
        command: {
            "n": len(group),
            "translator_p50_ms": round(percentile([s.translator_ms for s in group], 50), 3),
            "callbacks": sum(s.callbacks for s in group),
            "spark_p50_ms": round(percentile([s.spark_ms for s in group], 50), 3),
        }
        for command, group in sorted(grouped.items())
    }


@contextmanager
def _quiet_query_errors() -> Iterator[None]:
    """PySpark 4 logs every AnalysisException with its stack; the bench provokes some on purpose.

    The logger is PySpark's own class: one made here by ``logging.getLogger`` first would be a plain
    logger, which PySpark later gets back and calls with keywords a plain logger refuses."""
    from pyspark.logger import PySparkLogger

    logger = PySparkLogger.getLogger("SQLQueryContextLogger")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_bench(spark: Any, count: int, seed: int = 20261122, rows: int = 300) -> tuple[list[Figure], dict[str, Any]]:
    """The whole bench on an existing session (its temp views are created and dropped here)."""
    with views(spark, rows), _quiet_query_errors():
        eager = spark_sql_is_eager(spark)
        corpus = check_corpus(spark, generate(count, seed), eager)
        print(
            f"corpus: {len(corpus.queries)} of {count} queries kept; {len(corpus.untranslatable)} did not translate,"
            f" {len(corpus.rejected_by_spark)} translated but rejected by Spark",
            file=sys.stderr,
            flush=True,
        )
        measure(spark, corpus.queries, eager)  # warm-up: JIT, Lark's caches, Spark's analyzer
        samples = measure(spark, corpus.queries, eager)
    details = {
        "generated": count,
        "seed": seed,
        "rows": rows,
        "kept": len(corpus.queries),
        "untranslatable": corpus.untranslatable,
        "rejected_by_spark": corpus.rejected_by_spark,
        "spark_sql_is_eager": eager,
        "parse_ms": summary([s.parse_ms for s in samples]),
        "translator_ms": summary([s.translator_ms for s in samples]),
        "translate_with_callbacks_ms": summary([s.translate_ms for s in samples]),
        "callback_ms": summary([s.callback_ms for s in samples if s.callbacks]),
        "spark_analyze_ms": summary([s.spark_ms for s in samples]),
        "per_command": _per_command(samples),
    }
    return figures(samples), details


# -- TPC-H ---------------------------------------------------------------------------------------


@dataclass
class TpchSample:
    """Median times of one TPC-H query (milliseconds)."""

    number: int
    translate_ms: float
    callback_ms: float
    callbacks: int
    sql_analyze_ms: float
    ppl_analyze_ms: float

    @property
    def translator_ms(self) -> float:
        return self.translate_ms - self.callback_ms


@contextmanager
def tpch_views(spark: Any, directory: Path) -> Iterator[None]:
    """The TPC-H tables at scale factor 0.01 as temp views, dropped afterwards."""
    for table, path in tpch.generate(directory).items():
        spark.read.parquet(str(path)).createOrReplaceTempView(table)
    try:
        yield
    finally:
        for table in tpch.TABLES:
            spark.catalog.dropTempView(table)


def _median(values: list[float]) -> float:
    return percentile(values, 50)


def measure_tpch(spark: Any, rounds: int = 5) -> list[TpchSample]:
    """Each query's median over ``rounds`` timed rounds, after one warm-up round."""
    columns = _Callback(spark)
    samples = []
    for number in range(1, 23):
        text, sql = tpch.ppl_standard(number), tpch.SQL[number]
        runs: list[tuple[float, float, int, float, float]] = []
        for round_ in range(rounds + 1):
            columns.reset()
            t0 = time.perf_counter()
            translated = to_spark_sql(text, columns)
            t1 = time.perf_counter()
            spark.sql(sql).schema  # noqa: B018 - parse and analyze only
            t2 = time.perf_counter()
            spark.sql(translated).schema  # noqa: B018
            t3 = time.perf_counter()
            if round_:
                runs.append(((t1 - t0) * 1e3, columns.seconds * 1e3, columns.calls, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
        samples.append(
            TpchSample(
                number,
                _median([r[0] for r in runs]),
                _median([r[1] for r in runs]),
                runs[0][2],
                _median([r[3] for r in runs]),
                _median([r[4] for r in runs]),
            )
        )
    return samples


def tpch_figures(samples: list[TpchSample]) -> list[Figure]:
    """The TPC-H figures: medians over the 22 queries, and the ratio against the target."""
    translator = [s.translator_ms for s in samples]
    full = [s.translate_ms for s in samples]
    sql = [s.sql_analyze_ms for s in samples]
    ratios = [s.translator_ms / s.sql_analyze_ms for s in samples if s.sql_analyze_ms > 0]

    def ms(name: str, values: list[float], q: float, note: str = "") -> Figure:
        return Figure(TPCH_SECTION, f"{name} p{q:g}", round(percentile(values, q), 3), "ms", note=note)

    return [
        ms("translation, translator only", translator, 50, "to_spark_sql minus time in columns(); median of 5"),
        ms("translation, translator only", translator, 100, "the slowest of the 22"),
        ms("translation incl. columns callbacks", full, 50),
        ms("Spark parse+analyze of the standard SQL", sql, 50, "spark.sql(sql).schema"),
        ms("Spark parse+analyze of the standard SQL", sql, 100),
        ms("Spark parse+analyze of the translated SQL", [s.ppl_analyze_ms for s in samples], 50),
        Figure(
            TPCH_SECTION,
            "translator-only p50 / standard SQL p50",
            round(percentile(translator, 50) / percentile(sql, 50), 3),
            "x",
            Target("<", 0.1),
        ),
        Figure(TPCH_SECTION, "worst query: translator-only / its SQL", round(max(ratios), 3), "x"),
        Figure(
            TPCH_SECTION,
            "queries that needed the columns callback",
            sum(1 for s in samples if s.callbacks),
            "queries",
            note=f"of 22; {sum(s.callbacks for s in samples)} calls in all",
        ),
    ]


def run_tpch_bench(spark: Any, directory: Path, rounds: int = 5) -> tuple[list[Figure], dict[str, Any]]:
    """The TPC-H part on an existing session (its temp views are created and dropped here)."""
    with tpch_views(spark, directory), _quiet_query_errors():
        samples = measure_tpch(spark, rounds)
    details = {
        "rounds": rounds,
        "per_query": {
            f"q{s.number}": {
                "translator_ms": round(s.translator_ms, 3),
                "callback_ms": round(s.callback_ms, 3),
                "callbacks": s.callbacks,
                "sql_analyze_ms": round(s.sql_analyze_ms, 3),
                "ppl_analyze_ms": round(s.ppl_analyze_ms, 3),
            }
            for s in samples
        },
    }
    return tpch_figures(samples), details


# -- stand-alone ---------------------------------------------------------------------------------


def spark_session(warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bench-ppl")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", warehouse)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ppl", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="30 queries instead of 300")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--tpch-rounds", type=int, default=5, help="timed rounds per TPC-H query (default: 5)")
    args = parser.parse_args(argv)
    count = 30 if args.quick else 300
    report = new_report(quick=args.quick)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-ppl-") as warehouse:
        spark = spark_session(warehouse)
        try:
            report.meta["spark"] = spark.version
            found, details = run_bench(spark, count)
            tpch_found, tpch_details = run_tpch_bench(spark, Path(warehouse) / "tpch", args.tpch_rounds)
        finally:
            spark.stop()
    report.add(found)
    report.add(tpch_found)
    report.details[SECTION] = details
    report.details[TPCH_SECTION] = tpch_details
    close_report(report, started, args.out)
    print(report.table())
    print()
    print(
        f"{details['kept']} of {count} queries measured ({len(details['untranslatable'])} did not translate,"
        f" {len(details['rejected_by_spark'])} rejected by Spark); spark.sql eager: {details['spark_sql_is_eager']};"
        f" {run_summary(report, args.out)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
