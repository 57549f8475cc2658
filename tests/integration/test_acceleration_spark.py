"""Query acceleration with Spark in this process and a real index server (``docs/acceleration.md``):
a skipping index prunes the files a query reads (per kind and operator), the rows are those of the
whole table, files added or removed since the refresh are handled, the shapes that fall back read
everything; covering indexes answer the queries they cover and only those; EXPLAIN, PPL, the
session's switches, and an index lookup failure."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.acceleration.accelerator import Accelerator
from flint_repl_job.acceleration.plans import files_read
from flint_repl_job.acceleration.report import Acceleration
from flint_repl_job.acceleration.switches import COVERING_ENABLED, HYBRID_SCAN_ENABLED, OPTIMIZER_ENABLED
from flint_repl_job.executor import SparkExecutor
from flint_repl_job.indexes.bloom import might_contain
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from query_core.config import OpenSearchConfig
from query_core.flint import parse
from query_core.store import Store
from tests.node import index_config

pytestmark = pytest.mark.spark

DS = "lake"
EVENTS = "accel_events"
SKIPPING = f"flint_lake_default_{EVENTS}_skipping_index"
FILES = 8
ROWS_PER_FILE = 12
BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def event_rows(file: int) -> list[tuple[Any, ...]]:
    """The rows of one file: each file has its own range of ids, times, days and prices, one
    region and status (file 7 has more statuses than the value set keeps), hosts of its own."""
    rows = []
    for i in range(ROWS_PER_FILE):
        status = 700 + i if file == 7 else 200 + file
        rows.append(
            (
                file * 1000 + i,
                "eu" if file < 4 else "us",
                status,
                f"host-{file}-{i % 4}",
                BASE + dt.timedelta(days=file, minutes=i),
                (BASE + dt.timedelta(days=file)).date(),
                Decimal(f"{file * 10}.{i:02d}"),
            )
        )
    return rows


SCHEMA = "id BIGINT, region STRING, status INT, host STRING, ts TIMESTAMP, day DATE, price DECIMAL(10,2)"
INDEX_COLUMNS = (
    "region PARTITION, status VALUE_SET(5), id MIN_MAX, host BLOOM_FILTER, ts MIN_MAX, day MIN_MAX, price MIN_MAX"
)


@dataclass
class Env:
    spark: Any
    store: Store
    engine: FlintEngine
    executor: SparkExecutor

    @property
    def accelerator(self) -> Accelerator:
        assert self.executor.accelerator is not None
        return self.executor.accelerator

    def flint(self, sql: str) -> None:
        statement = parse(sql)
        assert statement is not None, sql
        self.engine.run(statement)

    def query(self, sql: str) -> tuple[list[Any], Acceleration]:
        """The rows of ``sql`` as the job runs it, and what acceleration did."""
        prepared = self.accelerator.sql(self.executor.spark_sql(sql))
        assert prepared.acceleration is not None
        return sorted(prepared.frame.collect()), prepared.acceleration

    def plain(self, sql: str) -> list[Any]:
        """The rows of ``sql`` with the rules off (Spark alone)."""
        return sorted(self.spark.sql(self.executor.spark_sql(sql)).collect())


def write_table(spark: Any, name: str, files: list[list[tuple[Any, ...]]]) -> None:
    spark.sql(f"DROP TABLE IF EXISTS default.{name}")
    for rows in files:
        append(spark, name, rows)


def append(spark: Any, name: str, rows: list[tuple[Any, ...]]) -> None:
    """One more file of ``rows`` in table ``name``."""
    frame = spark.createDataFrame(rows, SCHEMA).coalesce(1)
    frame.write.format("parquet").mode("append").saveAsTable(f"default.{name}")


@pytest.fixture(scope="module")
def env(spark: Any, module_index_url: str) -> Iterator[Env]:
    cfg = index_config(module_index_url, retry_seconds=2.0)
    store = Store.connect(cfg)
    engine = FlintEngine(FlintContext(spark, store, cfg, DS))
    executor = SparkExecutor(spark, DS, engine)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    write_table(spark, EVENTS, [event_rows(f) for f in range(FILES)])
    env = Env(spark, store, engine, executor)
    env.flint(f"CREATE SKIPPING INDEX ON {DS}.default.{EVENTS} ({INDEX_COLUMNS})")
    env.flint(f"REFRESH SKIPPING INDEX ON {DS}.default.{EVENTS}")
    yield env
    spark.sql(f"DROP TABLE IF EXISTS default.{EVENTS}")
    executor.close()
    store.close()


def skipping_use(report: Acceleration) -> tuple[int, int]:
    """(kept, listed) of the one skipping index the query used."""
    uses = [u for u in report.used if u.kind == "skipping"]
    assert len(uses) == 1, report
    return uses[0].kept, uses[0].listed


# -- each kind and operator ----------------------------------------------------------------------------

T = "timestamp'2024-01-04 00:05:00'"
CASES = [
    # (condition, files kept of 8)
    ("region = 'us'", 4),  # PARTITION
    ("status = 203", 2),  # VALUE_SET: file 3, and file 7 whose set overflowed
    ("status = 299", 1),  # VALUE_SET: only the overflowed file 7
    ("id = 2005", 1),  # MIN_MAX =
    ("id < 1000", 1),
    ("id <= 1000", 2),
    ("id > 6011", 1),
    ("id >= 6011", 2),
    ("id IN (5, 3010)", 4),  # MIN_MAX IN: by the range of the values, files 0 to 3
    ("id IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)", 1),  # an IN Spark turns into InSet
    ("2005 = id", 1),  # the literal on the left
    ("1000 > id", 1),
    (f"ts = {T}", 1),  # timestamps
    (f"ts > {T}", 5),
    ("day = date'2024-01-03'", 1),  # dates
    ("day <= date'2024-01-02'", 2),
    ("price = 20.05", 1),  # decimals
    ("price <= 20.00", 3),
    ("price < 20.00", 3),  # compared as doubles: < reads as <=, file 2 (min 20.00) is kept
    ("status = 203 AND id > 3005", 2),  # AND: each conjunct by its strategy
    ("status = 203 AND upper(host) = 'X'", 2),  # an unsupported conjunct prunes nothing, the rest does
]


@pytest.mark.parametrize(("condition", "kept"), CASES)
def test_each_kind_and_operator_keeps_the_files_the_index_implies(env: Env, condition: str, kept: int) -> None:
    sql = f"SELECT * FROM {DS}.default.{EVENTS} WHERE {condition}"
    rows, report = env.query(sql)
    assert rows == env.plain(sql)
    assert skipping_use(report) == (kept, FILES)
    assert report.used[0].index_name == SKIPPING


def test_a_bloom_filter_keeps_the_files_whose_filter_may_hold_the_value(env: Env) -> None:
    from pyspark.sql import functions as sf

    value = "host-4-2"
    item = env.spark.range(1).select(sf.xxhash64(sf.lit(value))).first()[0]
    docs = [source for _, source in env.store.admin.scan(SKIPPING)]
    implied = sum(1 for d in docs if might_contain(__import__("base64").b64decode(d["host"]), item))
    sql = f"SELECT * FROM {DS}.default.{EVENTS} WHERE host = '{value}'"
    rows, report = env.query(sql)
    assert rows == env.plain(sql) and len(rows) == 3
    assert skipping_use(report) == (implied, FILES)
    assert 1 <= implied <= 2


# -- shapes that fall back -----------------------------------------------------------------------------

FALLBACKS = [
    ("status = 203 OR id = 5", "has an OR"),
    ("status = 203 AND rand(7) < 0.5", "not deterministic"),
    ("upper(host) = 'HOST-4-2'", "no condition"),
    ("status <> 203", "no condition"),
    (f"id = (SELECT max(id) FROM {DS}.default.{EVENTS} WHERE status = 201)", "no condition"),
]


@pytest.mark.parametrize(("condition", "why"), FALLBACKS)
def test_shapes_the_index_cannot_answer_read_every_file(env: Env, condition: str, why: str) -> None:
    sql = f"SELECT * FROM {DS}.default.{EVENTS} WHERE {condition}"
    prepared = env.accelerator.sql(env.executor.spark_sql(sql))
    report = prepared.acceleration
    assert report is not None and not report.accelerated
    assert any(why in note for note in report.notes), report.notes
    rows = prepared.frame.collect()
    if "rand" not in condition:
        assert sorted(rows) == env.plain(sql)
    assert files_read(prepared.frame) >= FILES  # the subquery's own scan reads every file as well


def test_a_tables_reached_through_a_view_or_its_unqualified_name_is_pruned(env: Env) -> None:
    env.spark.sql(
        f"CREATE OR REPLACE TEMP VIEW recent AS SELECT id, status, host FROM default.{EVENTS} WHERE region = 'us'"
    )
    env.spark.sql(f"CREATE OR REPLACE VIEW default.accel_view AS SELECT * FROM default.{EVENTS}")
    try:
        for sql, kept in [
            ("SELECT * FROM recent WHERE id < 5000", 1),  # region = 'us' AND id < 5000: file 4
            (f"SELECT id FROM {EVENTS} WHERE status = 205", 2),  # and file 7, whose set overflowed
            (f"SELECT count(*) FROM default.{EVENTS} WHERE id >= 6000", 2),
            (f"SELECT * FROM {DS}.default.accel_view WHERE status = 206", 2),
            (f"WITH e AS (SELECT * FROM {EVENTS} WHERE status = 201) SELECT id FROM e ORDER BY id LIMIT 3", 2),
        ]:
            rows, report = env.query(sql)
            assert rows == env.plain(sql), sql
            assert skipping_use(report) == (kept, FILES), sql
    finally:
        env.spark.sql("DROP VIEW IF EXISTS recent")
        env.spark.sql("DROP VIEW IF EXISTS default.accel_view")


def test_each_side_of_a_join_is_pruned_on_its_own_conjuncts(env: Env) -> None:
    sql = f"SELECT a.id, b.id FROM {EVENTS} a JOIN {EVENTS} b ON a.host = b.host WHERE a.id < 1000 AND b.status = 200"
    prepared = env.accelerator.sql(env.executor.spark_sql(sql))
    rows = sorted(prepared.frame.collect())
    assert rows == env.plain(sql) and rows
    report = prepared.acceleration
    assert report is not None
    assert sorted((u.kept, u.listed) for u in report.used) == [(1, FILES), (2, FILES)]
    assert files_read(prepared.frame) == 3
    union = f"SELECT id FROM {EVENTS} WHERE id = 5 UNION ALL SELECT id FROM {EVENTS} WHERE status = 206"
    rows, report = env.query(union)
    assert rows == env.plain(union) and sorted(u.kept for u in report.used) == [1, 2]


def test_aggregates_sorts_and_windows_above_the_filter_do_not_matter(env: Env) -> None:
    for sql in [
        f"SELECT status, count(*), max(ts) FROM {EVENTS} WHERE day = date'2024-01-03' GROUP BY status",
        f"SELECT id, row_number() OVER (PARTITION BY host ORDER BY id) FROM {EVENTS} WHERE id > 6011",
        f"SELECT host FROM {EVENTS} WHERE price <= 20.00 ORDER BY host DESC LIMIT 4",
    ]:
        prepared = env.accelerator.sql(env.executor.spark_sql(sql))
        assert sorted(prepared.frame.collect()) == env.plain(sql)
        assert prepared.acceleration is not None and prepared.acceleration.accelerated, sql
        assert files_read(prepared.frame) < FILES


# -- an index behind its table ---------------------------------------------------------------------------


@pytest.fixture
def behind(env: Env) -> Iterator[str]:
    """A copy of the events table with its own refreshed skipping index (changed by the test)."""
    name = "accel_behind"
    write_table(env.spark, name, [event_rows(f) for f in range(4)])
    env.flint(f"CREATE SKIPPING INDEX ON {DS}.default.{name} ({INDEX_COLUMNS})")
    env.flint(f"REFRESH SKIPPING INDEX ON {DS}.default.{name}")
    yield name
    env.flint(f"DROP SKIPPING INDEX ON {DS}.default.{name}")
    env.flint(f"VACUUM SKIPPING INDEX ON {DS}.default.{name}")
    env.spark.sql(f"DROP TABLE IF EXISTS default.{name}")


def test_files_added_since_the_refresh_are_read(env: Env, behind: str) -> None:
    sql = f"SELECT * FROM {behind} WHERE status = 202"
    listings = env.accelerator.listings
    assert skipping_use(env.query(sql)[1]) == (1, 4)
    reads = listings.reads
    assert skipping_use(env.query(sql)[1]) == (1, 4) and listings.reads == reads  # the listing kept
    late = [(r[0] + 100_000, *r[1:]) for r in event_rows(2)]  # status 202 again, in a new file
    append(env.spark, behind, late)
    rows, report = env.query(sql)
    assert rows == env.plain(sql) and len(rows) == 2 * ROWS_PER_FILE
    assert skipping_use(report) == (2, 5)  # file 2 and the unindexed new file
    assert listings.reads == reads + 1  # the new listing, read anew
    env.spark.conf.set(HYBRID_SCAN_ENABLED, "false")
    try:
        rows, report = env.query(sql)  # the reference's default: files the index does not know are skipped
    finally:
        env.spark.conf.unset(HYBRID_SCAN_ENABLED)
    assert len(rows) == ROWS_PER_FILE and skipping_use(report) == (1, 5)


def test_a_file_that_left_the_table_is_never_read(env: Env, behind: str, tmp_path: Path) -> None:
    location = Path(
        env.spark.sql(f"DESC FORMATTED default.{behind}").where("col_name = 'Location'").first()[1].replace("file:", "")
    )
    sql = f"SELECT * FROM {behind} WHERE status = 201"
    victim = next(p for p in sorted(location.glob("*.parquet")) if _holds(env, p, 201))
    assert skipping_use(env.query(sql)[1]) == (1, 4)  # its listing is kept for the next query
    shutil.move(str(victim), tmp_path / victim.name)
    env.spark.sql(f"REFRESH TABLE default.{behind}")
    rows, report = env.query(sql)
    assert rows == env.plain(sql) == []
    assert skipping_use(report) == (0, 3)  # the index still names the file; only the listing counts
    shutil.move(str(tmp_path / victim.name), victim)
    env.spark.sql(f"REFRESH TABLE default.{behind}")


def _holds(env: Env, path: Path, status: int) -> bool:
    return bool(env.spark.read.parquet(str(path)).where(f"status = {status}").count())


# -- EXPLAIN, PPL, the switches, failures -------------------------------------------------------------------


def test_explain_names_the_index_and_the_files_kept(env: Env) -> None:
    sql = f"EXPLAIN EXTENDED SELECT id FROM {DS}.default.{EVENTS} WHERE status = 203"
    frame = env.executor.frame("q-explain", env.executor.spark_sql(sql))
    [row] = frame.collect()
    text = row["plan"]
    assert text.startswith("== Flint Acceleration ==\n")
    assert f"{SKIPPING}: skipping index, kept 2 of {FILES} files of {DS}.default.{EVENTS}" in text
    assert "== Optimized Logical Plan ==" in text and "KeptFiles" in text  # the scan's file index
    report = env.executor.acceleration("q-explain")
    assert report is not None and report.used[0].kept == 2
    plain = env.executor.frame(
        "q-plain", env.executor.spark_sql(f"EXPLAIN SELECT id FROM {EVENTS} WHERE status = 203 OR id = 1")
    )
    assert "no Flint index used" in plain.collect()[0]["plan"]


def test_ppl_where_is_pruned_like_sql(env: Env) -> None:
    ppl = f"source = {DS}.default.{EVENTS} | where status = 203 and id > 3005 | fields id, host"
    sql = env.executor.ppl_sql(ppl)
    rows, report = env.query(sql)
    assert rows == env.plain(sql) and len(rows) > 0
    assert skipping_use(report) == (2, FILES)


def test_the_switches_turn_the_rules_off_for_the_session(env: Env) -> None:
    sql = f"SELECT * FROM {EVENTS} WHERE status = 203"
    env.executor.frame("q-set", env.executor.spark_sql(f"SET {OPTIMIZER_ENABLED} = false")).collect()
    try:
        prepared = env.accelerator.sql(env.executor.spark_sql(sql))
        assert prepared.acceleration is None
        prepared.frame.collect()
        assert files_read(prepared.frame) == FILES
    finally:
        env.spark.sql(f"RESET {OPTIMIZER_ENABLED}")
    _, report = env.query(sql)
    assert skipping_use(report) == (2, FILES)


def test_an_index_lookup_failure_reads_the_whole_table_with_a_warning(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    dead = OpenSearchConfig(url="http://127.0.0.1:9", retry_attempts=1, retry_seconds=0.1)
    accelerator = Accelerator(env.spark, Store.connect(dead), dead, DS)
    sql = env.executor.spark_sql(f"SELECT * FROM {EVENTS} WHERE status = 203")
    with caplog.at_level(logging.WARNING):
        prepared = accelerator.sql(sql)
        rows = sorted(prepared.frame.collect())
    assert rows == env.plain(sql)
    assert files_read(prepared.frame) == FILES
    assert any("not used" in r.getMessage() and EVENTS in r.getMessage() for r in caplog.records)


def test_commands_run_as_before(env: Env) -> None:
    name = "accel_copy"
    try:
        env.spark.sql(f"CREATE TABLE default.{name} (id BIGINT) USING parquet")
        explained = env.accelerator.sql(f"EXPLAIN INSERT INTO default.{name} SELECT id FROM {EVENTS} WHERE id = 1")
        assert "Flint" not in explained.frame.collect()[0][0]
        assert env.spark.table(f"default.{name}").count() == 0  # explained, not run
        env.spark.sql(f"DROP TABLE default.{name}")
        prepared = env.accelerator.sql(
            f"CREATE TABLE default.{name} USING parquet AS SELECT * FROM {EVENTS} WHERE status = 203"
        )
        assert prepared.acceleration is None
        assert env.spark.table(f"default.{name}").count() == ROWS_PER_FILE
    finally:
        env.spark.sql(f"DROP TABLE IF EXISTS default.{name}")


# -- covering indexes ------------------------------------------------------------------------------------


@contextmanager
def table_with_index(env: Env, name: str, files: int, index: str, body: str) -> Iterator[str]:
    """A table of ``files`` event files with the covering index ``CREATE INDEX <index> ON <table>
    <body>``, refreshed; dropped and vacuumed afterwards."""
    write_table(env.spark, name, [event_rows(f) for f in range(files)])
    table = f"{DS}.default.{name}"
    env.flint(f"CREATE INDEX {index} ON {table} {body}")
    env.flint(f"REFRESH INDEX {index} ON {table}")
    try:
        yield name
    finally:
        env.flint(f"DROP INDEX {index} ON {table}")
        env.flint(f"VACUUM INDEX {index} ON {table}")
        env.spark.sql(f"DROP TABLE IF EXISTS default.{name}")


def covering_used(report: Acceleration) -> list[str]:
    return [u.index_name for u in report.used if u.kind == "covering"]


def test_a_fresh_covering_index_answers_what_it_covers_and_nothing_else(env: Env) -> None:
    with table_with_index(env, "accel_orders", 3, "cov", "(id, status, host, ts, day)") as name:
        index = f"flint_lake_default_{name}_cov_index"
        for sql in [
            f"SELECT id, host FROM {name} WHERE status = 201",
            f"SELECT count(*) FROM {name}",
            f"SELECT status, max(ts), min(day) FROM {name} WHERE id > 5 GROUP BY status",
            f"SELECT * FROM (SELECT id, host FROM {DS}.default.{name}) WHERE host = 'host-1-1'",
        ]:
            prepared = env.accelerator.sql(env.executor.spark_sql(sql))
            assert sorted(prepared.frame.collect()) == env.plain(sql), sql
            assert prepared.acceleration is not None and covering_used(prepared.acceleration) == [index], sql
            assert files_read(prepared.frame) == 0, sql  # the table's files are not read at all
        uncovered = f"SELECT id, price FROM {name} WHERE status = 201"  # price is not in the index
        rows, report = env.query(uncovered)
        assert rows == env.plain(uncovered) and covering_used(report) == []
        assert any("does not hold column price" in n for n in report.notes)

        append(env.spark, name, event_rows(5))  # the table changed since the refresh
        covered = f"SELECT id, host FROM {name} WHERE status = 205"
        rows, report = env.query(covered)
        assert len(rows) == ROWS_PER_FILE and rows == env.plain(covered) and covering_used(report) == []
        assert any("not fresh" in n for n in report.notes)
        env.flint(f"REFRESH INDEX cov ON {DS}.default.{name}")
        rows, report = env.query(covered)
        assert len(rows) == ROWS_PER_FILE and covering_used(report) == [index]

        env.spark.conf.set(COVERING_ENABLED, "false")
        try:
            _, report = env.query(covered)
        finally:
            env.spark.conf.unset(COVERING_ENABLED)
        assert covering_used(report) == []


def test_a_partial_covering_index_never_serves_what_its_where_does_not_imply(env: Env) -> None:
    with table_with_index(env, "accel_partial", 3, "busy", "(id, status) WHERE status >= 201") as name:
        for sql, used in [
            (f"SELECT id FROM {name}", False),  # no filter: a partial index never serves it
            (f"SELECT id FROM {name} WHERE status = 200", False),
            (f"SELECT id FROM {name} WHERE status > 201", True),
            (f"SELECT id, status FROM {name} WHERE status IN (201, 202) AND id > 1005", True),
        ]:
            rows, report = env.query(sql)
            assert rows == env.plain(sql), sql
            assert bool(covering_used(report)) is used, (sql, report.notes)


def test_a_covering_index_that_fails_at_run_time_leaves_the_query_to_its_table(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with table_with_index(env, "accel_vanishing", 2, "gone", "(id, status)") as name:
        index = f"flint_lake_default_{name}_gone_index"
        mappings = env.store.admin.mappings(index)[index]
        prepare = env.executor.prepare

        def prepare_then_lose_the_index(query_id: str, text: str, analyzed: Any = None) -> Any:
            prepared = prepare(query_id, text, analyzed)
            env.store.admin.delete_index(index)  # gone between planning and running
            return prepared

        monkeypatch.setattr(env.executor, "prepare", prepare_then_lose_the_index)
        sql = f"SELECT id FROM {name} WHERE status = 201"
        with caplog.at_level(logging.WARNING):
            output = env.executor.start("q-vanishing", sql).future.result(timeout=120)
        assert len(output.result) == ROWS_PER_FILE
        assert any("run again on its tables" in r.getMessage() for r in caplog.records)
        report = env.executor.acceleration("q-vanishing")
        assert report is not None and covering_used(report) == [index]
        env.store.admin.create_index(index, {"mappings": mappings})  # for the fixture's drop and vacuum
