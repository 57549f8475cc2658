"""What the catalog holds is checked as what a caller sends is (flint_repl_job/stored.py,
docs/validation.md "What the catalog holds"), with Spark in this process.

Tables, views, partitions and a database are planted in the session's catalog by Spark itself,
without the job's check (as anything with a direct connection to a metastore can write them):
pointing at another datasource's data (a directory of parquet files outside the warehouse) and at
a file outside every root. Run by the job's executor, in SQL and PPL, reads and writes that reach
them fail with the refusal's words before any Spark job runs: no row returned, nothing written,
no table made. What reads only the warehouse keeps working, metadata statements too, and the
plan checked is the plan run: a catalog changed after the check changes nothing of what is read.
(A real metastore written through Hive's Thrift API: tests/e2e/test_isolation.py.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.errors import classify
from flint_repl_job.executor import SparkExecutor
from query_core.validation import Profile, QueryRefusedError, ValidationPolicy, policy_for

pytestmark = pytest.mark.spark

OUTSIDE = "LOCATION outside the warehouse"


@dataclass
class Planted:
    wh: Path
    lake: Path  # another datasource's table: parquet files outside this warehouse
    outside: Path  # outside every root: holds secret.txt

    def policy(self) -> ValidationPolicy:
        return policy_for({}, Profile.LOCAL, self.wh.as_uri(), str(self.wh.parent / "st-checkpoints"))

    def state(self) -> dict[str, str]:
        """Every file outside the warehouse and its content's hash."""
        return {
            str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in (self.lake, self.outside)
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }


@pytest.fixture(scope="module")
def planted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planted]:
    wh = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    base = tmp_path_factory.mktemp("stored")
    lake, outside = base / "lake" / "secrets", base / "outside"
    spark.createDataFrame([(1, "lake only")], "id INT, v STRING").write.parquet(str(lake))
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret\n")
    sql = spark.sql  # the catalog written straight, no check: as a metastore's other writers do
    sql("CREATE TABLE default.st_ok (a INT) USING parquet")
    sql("INSERT INTO default.st_ok VALUES (1)")
    sql(f"CREATE TABLE default.st_planted (id INT, v STRING) USING parquet LOCATION '{lake}'")
    sql(f"CREATE TABLE default.st_file (value STRING) USING text LOCATION '{outside / 'secret.txt'}'")
    sql("CREATE TABLE default.st_part (a INT, k INT) USING parquet PARTITIONED BY (k)")
    sql("INSERT INTO default.st_part VALUES (1, 1)")
    sql(f"ALTER TABLE default.st_part ADD PARTITION (k = 7) LOCATION '{lake}'")
    sql(f"ALTER TABLE default.st_part ADD PARTITION (k = 8) LOCATION '{outside}'")
    sql("CREATE VIEW default.st_view_over AS SELECT v FROM default.st_planted")
    sql(f"CREATE VIEW default.st_view_file AS SELECT * FROM text.`{outside / 'secret.txt'}`")
    sql("CREATE VIEW default.st_view_reflect AS SELECT reflect('java.lang.System', 'getProperty', 'user.name') AS u")
    sql(f"CREATE DATABASE st_elsewhere LOCATION '{outside / 'db'}'")
    yield Planted(wh, lake, outside)
    for view in ("st_view_over", "st_view_file", "st_view_reflect"):
        sql(f"DROP VIEW IF EXISTS default.{view}")
    for table in ("st_ok", "st_planted", "st_file", "st_part", "st_moved", "st_pinned", "st_new", "st_drop_ext"):
        sql(f"DROP TABLE IF EXISTS default.{table}")
    sql("DROP DATABASE IF EXISTS st_elsewhere CASCADE")


#: (statement, language, the start of its refusal)
REFUSED = [
    ("SELECT * FROM default.st_planted", "sql", OUTSIDE),
    ("SELECT count(*) FROM st_planted", "sql", OUTSIDE),
    ("SELECT * FROM st_file", "sql", OUTSIDE),
    ("SELECT a FROM st_ok WHERE a IN (SELECT id FROM st_planted)", "sql", OUTSIDE),
    ("WITH w AS (SELECT * FROM st_planted) SELECT v FROM w", "sql", OUTSIDE),
    ("EXECUTE IMMEDIATE 'SELECT * FROM st_planted'", "sql", OUTSIDE),
    ("BEGIN SELECT * FROM st_planted; END", "sql", OUTSIDE),
    ("SELECT * FROM st_view_over", "sql", OUTSIDE),
    ("SELECT * FROM st_view_file", "sql", "File (in the stored view spark_catalog.default.st_view_file)"),
    ("SELECT u FROM st_view_reflect", "sql", "Misc functions (reflect, in the stored view"),
    ("SELECT * FROM st_part", "sql", OUTSIDE),
    ("SELECT * FROM st_part WHERE k = 7", "sql", OUTSIDE),
    ("SELECT count(*) FROM st_part WHERE k IN (SELECT 8)", "sql", OUTSIDE),
    ("INSERT INTO st_planted VALUES (2, 'written')", "sql", OUTSIDE),
    ("INSERT OVERWRITE st_part PARTITION (k = 8) SELECT 2", "sql", OUTSIDE),
    ("INSERT INTO st_part PARTITION (k = 1) SELECT 2", "sql", OUTSIDE),
    ("ALTER TABLE st_part DROP PARTITION (k = 8)", "sql", OUTSIDE),
    ("TRUNCATE TABLE st_planted", "sql", OUTSIDE),
    ("CACHE TABLE st_planted", "sql", OUTSIDE),
    ("CREATE TABLE default.st_copy USING parquet AS SELECT * FROM st_planted", "sql", OUTSIDE),
    ("CREATE TABLE st_elsewhere.t USING parquet AS SELECT 1 AS a", "sql", OUTSIDE),
    ("CREATE TABLE st_elsewhere.t2 (a INT) USING parquet", "sql", OUTSIDE),
    ("source = default.st_planted", "ppl", OUTSIDE),
    ("source = default.st_view_over | fields v", "ppl", OUTSIDE),
    ("source = default.st_part | where k = 7 | fields a", "ppl", OUTSIDE),
]


def test_what_the_catalog_holds_is_refused_before_anything_is_read_or_written(spark: Any, planted: Planted) -> None:
    executor = SparkExecutor(spark, "", None, planted.policy())
    tables = {(t.namespace[0] if t.namespace else "", t.name) for t in spark.catalog.listTables("default")}
    before = planted.state()
    try:
        for i, (statement, lang, refusal) in enumerate(REFUSED):
            query_id = f"stored-{i}"
            error = executor.start(query_id, statement, lang).future.exception(timeout=120)
            assert isinstance(error, QueryRefusedError), (statement, error)
            assert classify(error).startswith(refusal), (statement, classify(error))
            # No Spark job ran for it: nothing was read, so no row can have been returned.
            assert not spark.sparkContext.statusTracker().getJobIdsForGroup(query_id), statement
    finally:
        executor.close()
    assert planted.state() == before
    assert {(t.namespace[0] if t.namespace else "", t.name) for t in spark.catalog.listTables("default")} == tables
    assert not spark.catalog.tableExists("st_elsewhere.t")
    assert not any((planted.outside / "db").iterdir())  # no table's directory made there


def test_the_refusal_names_the_place_and_what_holds_it(spark: Any, planted: Planted) -> None:
    executor = SparkExecutor(spark, "", None, planted.policy())
    try:
        table = executor.start("named-table", "SELECT * FROM st_planted").future.exception(timeout=60)
        partition = executor.start("named-part", "INSERT INTO st_part PARTITION (k = 1) SELECT 3").future.exception(
            timeout=60
        )
    finally:
        executor.close()
    assert table is not None and classify(table) == (
        f"{OUTSIDE} (file://{planted.lake}, of the stored table spark_catalog.default.st_planted) is not allowed."
    )
    assert partition is not None and classify(partition) == (
        f"{OUTSIDE} (file:{planted.lake}, of the partition (k=7) of the stored table spark_catalog.default.st_part) "
        "is not allowed."
    )


def test_what_reads_only_the_warehouse_and_what_shows_metadata_still_run(spark: Any, planted: Planted) -> None:
    executor = SparkExecutor(spark, "", None, planted.policy())
    try:
        ok = {
            "SELECT count(*) FROM st_ok": "[[1]]",
            "SELECT a FROM st_ok WHERE a > 0": "[[1]]",
            "source = default.st_ok | where a > 0 | fields a": "[[1]]",
        }
        for i, (statement, rows) in enumerate(ok.items()):
            lang = "ppl" if statement.startswith("source") else "sql"
            assert executor.start(f"ok-{i}", statement, lang).future.result(timeout=60).lossless.datarows == rows
        for i, statement in enumerate(
            (
                "DESCRIBE TABLE EXTENDED st_planted",
                "SHOW TABLE EXTENDED IN default LIKE 'st_*'",
                "SHOW PARTITIONS st_part",
                "SHOW CREATE TABLE st_planted",
                "EXPLAIN SELECT * FROM st_planted",
                "INSERT INTO st_ok VALUES (2)",
                "CREATE TABLE default.st_new USING parquet AS SELECT 1 AS a",
            )
        ):
            running = executor.start(f"meta-{i}", statement)
            assert running.future.exception(timeout=60) is None, statement
    finally:
        executor.close()


def test_the_plan_checked_is_the_plan_run(spark: Any, planted: Planted) -> None:
    """The catalog is changed between the check and the run (as a racing writer of the
    metastore would change it): what runs is what was checked, so nothing outside is read."""
    from flint_repl_job.guard import StatementGuard

    spark.sql("CREATE TABLE default.st_moved (id INT, v STRING) USING parquet")
    spark.sql("INSERT INTO default.st_moved VALUES (2, 'warehouse')")
    spark.sql("CREATE TABLE default.st_pinned (a INT, k INT) USING parquet PARTITIONED BY (k)")
    spark.sql("INSERT INTO default.st_pinned VALUES (1, 1)")
    guard = StatementGuard(spark, planted.policy())
    executor = SparkExecutor(spark, "", None, planted.policy())
    try:
        moved = guard.resolve("SELECT v FROM default.st_moved")
        pinned = guard.resolve("SELECT a, k FROM default.st_pinned")
        spark.sql(f"ALTER TABLE default.st_moved SET LOCATION '{planted.lake}'")
        spark.sql(f"ALTER TABLE default.st_pinned ADD PARTITION (k = 7) LOCATION '{planted.lake}'")
        assert [r[0] for r in executor.frame_of("", moved).collect()] == ["warehouse"]
        assert [tuple(r) for r in executor.frame_of("", pinned).collect()] == [(1, 1)]
        # Checked again, the tables as they are now are refused.
        for statement in ("SELECT v FROM default.st_moved", "SELECT a, k FROM default.st_pinned"):
            with pytest.raises(QueryRefusedError, match=OUTSIDE):
                guard.resolve(statement)
    finally:
        executor.close()


def test_dropping_a_planted_table_deletes_nothing_outside(spark: Any, planted: Planted) -> None:
    """A DROP reads nothing: an external table planted outside may be dropped (its files stay),
    a managed one located outside may not (its files would be deleted)."""
    spark.sql(f"CREATE TABLE default.st_drop_ext (id INT, v STRING) USING parquet LOCATION '{planted.lake}'")
    executor = SparkExecutor(spark, "", None, planted.policy())
    before = planted.state()
    try:
        assert executor.start("drop-ext", "DROP TABLE default.st_drop_ext").future.exception(timeout=60) is None
        refused = executor.start("drop-managed", "DROP TABLE default.st_part").future.exception(timeout=60)
        assert refused is not None and classify(refused).startswith(OUTSIDE)
    finally:
        executor.close()
    assert not spark.catalog.tableExists("default.st_drop_ext")
    assert spark.catalog.tableExists("default.st_part")
    assert planted.state() == before
