"""The job's check of each statement on Spark's own parse (flint_repl_job/guard.py), with Spark in
this process: a refused statement fails with the plugin's words before anything runs, including
statements the plugin's parser let through, and VACUUM deletes no checkpoint outside its root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.errors import classify
from flint_repl_job.executor import SparkExecutor
from flint_repl_job.guard import StatementGuard
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from query_core.config import OpenSearchConfig
from query_core.flint import parse
from query_core.flint.naming import latest_id
from query_core.states import FlintIndexState
from query_core.store import Store
from query_core.validation import Profile, QueryRefusedError, ValidationPolicy, Verdict, policy_for, validate_query
from tests.support import driver

pytestmark = pytest.mark.spark


def local_policy(root: Path) -> ValidationPolicy:
    return policy_for({}, Profile.LOCAL, (root / "warehouse").as_uri(), str(root / "checkpoints"))


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM text.`/etc/hostname`", "File is not allowed."),
        ("SELECT reflect('java.lang.System', 'getProperty', 'user.name')", "Misc functions (reflect) is not allowed."),
        ("SELECT x FROM t WHERE x IN (SELECT java_method('a', 'b'))", "Misc functions (java_method) is not allowed."),
        ("SELECT TRANSFORM(id) USING 'cat' AS (x) FROM range(3)", "TRANSFORM is not allowed."),
        ("ADD JAR /tmp/evil.jar", "Resource management statements is not allowed."),
        ("ADD ARCHIVE /tmp/evil.zip", "Resource management statements is not allowed."),
        ("CREATE FUNCTION evil AS 'com.example.Evil' USING JAR '/tmp/e.jar'", "CREATE FUNCTION is not allowed."),
        (
            "CREATE TABLE t (a INT) USING parquet LOCATION '/etc'",
            "LOCATION outside the warehouse (/etc) is not allowed.",
        ),
        ("CREATE DATABASE d LOCATION '/etc'", "LOCATION outside the warehouse (/etc) is not allowed."),
        (
            "CREATE TEMPORARY VIEW v USING text OPTIONS (path '/etc/hostname')",
            "LOCATION outside the warehouse (/etc/hostname) is not allowed.",
        ),
        ("INSERT OVERWRITE LOCAL DIRECTORY '/tmp/out' SELECT 1", "INSERT OVERWRITE DIRECTORY is not allowed."),
        ("SET spark.sql.runSQLOnFiles=true", "SET/RESET of a protected key (spark.sql.runSQLOnFiles) is not allowed."),
        ("EXECUTE IMMEDIATE 'SELECT reflect(1)'", "Misc functions (reflect) is not allowed."),
        ("EXECUTE IMMEDIATE stmt", "A statement or name built at run time (EXECUTE IMMEDIATE) is not allowed."),
        (
            "SELECT * FROM IDENTIFIER(concat('text.', '`/etc/hostname`'))",
            "A statement or name built at run time (IDENTIFIER) is not allowed.",
        ),
        ("BEGIN SELECT reflect('a', 'b'); END", "Misc functions (reflect) is not allowed."),
        # sqlglot cannot parse `window(...)`: the plugin lets this through, Spark's parse does not.
        ("SELECT reflect('a', 'b') FROM t GROUP BY window(ts, '1 minute')", "Misc functions (reflect) is not allowed."),
    ],
)
def test_the_job_refuses_on_sparks_parse_in_the_plugins_words(
    spark: Any, tmp_path: Path, sql: str, message: str
) -> None:
    with pytest.raises(QueryRefusedError) as refused:
        StatementGuard(spark, local_policy(tmp_path)).check_sql(sql)
    assert refused.value.message == message


def test_what_the_plugin_let_through_the_job_refuses(spark: Any, tmp_path: Path) -> None:
    sql = "BEGIN CREATE TEMPORARY VIEW v USING jdbc OPTIONS (url 'jdbc:derby:memory:x'); END"
    # A compound statement's statements are not read at the plugin: left to the job.
    assert validate_query(local_policy(tmp_path), "sql", sql) is Verdict.LEFT_TO_JOB
    with pytest.raises(QueryRefusedError):
        StatementGuard(spark, local_policy(tmp_path)).check_sql(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM range(1000) a, range(1000) b",
        "CREATE TABLE IF NOT EXISTS default.guard_ok (id INT, item STRING) USING parquet PARTITIONED BY (item)",
        "INSERT INTO default.guard_ok VALUES (1, 'tea')",
        "SELECT item, count(*) FROM default.guard_ok GROUP BY item ORDER BY item",
        "SHOW TABLE EXTENDED IN default LIKE '*'",
        "SET spark.sql.shuffle.partitions=2",
        "SELECT date_format(current_date(), 'yyyy'), explode(array(1, 2)), bit_count(3)",
    ],
)
def test_the_job_lets_the_readme_statements_through(spark: Any, tmp_path: Path, sql: str) -> None:
    StatementGuard(spark, local_policy(tmp_path)).check_sql(sql)


def test_a_refused_statement_fails_with_the_message_and_never_runs(spark: Any, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    executor = SparkExecutor(spark, "", None, local_policy(tmp_path))
    try:
        running = executor.start(
            "q-guard", f"CREATE TABLE default.guard_outside (a INT) USING parquet LOCATION '{outside}'"
        )
        exc = running.future.exception(timeout=60)
        assert isinstance(exc, QueryRefusedError)
        assert classify(exc) == f"LOCATION outside the warehouse ({outside}) is not allowed."
        assert not spark.catalog.tableExists("default.guard_outside")
        ppl = executor.start("q-ppl", "source = text.`/etc/hostname`", "ppl")
        refused = ppl.future.exception(timeout=60)
        assert refused is not None and classify(refused) == "File is not allowed."
    finally:
        executor.close()


@pytest.mark.parametrize(
    "location",
    [
        "{tmp}/precious",
        "{tmp}/checkpoints/x?/../../precious",  # Hadoop keeps the ? in the path, and climbs
        "file:{tmp}/checkpoints/x#/../../precious",
        "{tmp}/checkpoints/%2e%2e/precious",
        "{tmp}/checkpoints/../precious",
    ],
)
def test_vacuum_deletes_no_checkpoint_outside_the_root(
    spark: Any, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path, location: str
) -> None:
    """The index's options may name any checkpoint (written before the check, or by another
    plugin): VACUUM reads it as Hadoop does and deletes nothing outside the checkpoint root."""
    spark.sql("CREATE TABLE IF NOT EXISTS default.guard_sales (id INT, region STRING) USING parquet")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("not a checkpoint")
    (tmp_path / "checkpoints").mkdir()
    checkpoint = location.format(tmp=tmp_path)
    engine = FlintEngine(FlintContext(spark, store, opensearch_config, "lake", validation=local_policy(tmp_path)))
    index = "flint_lake_default_guard_sales_by_region_index"
    for sql in (
        f"CREATE INDEX by_region ON default.guard_sales (region) WITH (checkpoint_location = '{checkpoint}')",
        "DROP INDEX by_region ON default.guard_sales",
    ):
        statement = parse(sql)
        assert statement is not None
        engine.run(statement)
    vacuum = parse("VACUUM INDEX by_region ON default.guard_sales")
    assert vacuum is not None
    with pytest.raises(QueryRefusedError, match="checkpoint_location outside the checkpoint root"):
        engine.run(vacuum)
    assert (outside / "keep.txt").read_text() == "not a checkpoint"
    assert store.admin.index_exists(index)
    found = store.index_states.get("lake", latest_id(index))
    assert found is not None and found.doc.state is FlintIndexState.DELETED
    spark.sql("DROP TABLE IF EXISTS default.guard_sales")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('{"number_of_shards": 900}', r"index_settings: number_of_shards 900, not 1 to 5"),
        ('{"index": {"number_of_replicas": 900}}', r"index_settings: index.number_of_replicas 900, not 0 to 2"),
        ('{"index.max_result_window": 2147483647}', r"index_settings: index.max_result_window\)"),
    ],
)
def test_the_engine_creates_no_index_whose_settings_are_refused(
    spark: Any, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path, settings: str, message: str
) -> None:
    """The second wall: the index's settings are checked again where the engine creates it,
    whatever checked the statement (here nothing did), with the plugin's words; nothing is made."""
    spark.sql("CREATE TABLE IF NOT EXISTS default.guard_sales (id INT, region STRING) USING parquet")
    engine = FlintEngine(FlintContext(spark, store, opensearch_config, "lake", validation=local_policy(tmp_path)))
    index = "flint_lake_default_guard_sales_by_region_index"
    statement = parse(f"CREATE INDEX by_region ON default.guard_sales (region) WITH (index_settings = '{settings}')")
    assert statement is not None
    with pytest.raises(QueryRefusedError, match=message):
        engine.run(statement)
    assert not store.admin.index_exists(index)
    assert store.index_states.get("lake", latest_id(index)) is None


def test_the_engine_creates_an_index_with_settings_within_their_bounds(
    spark: Any, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path
) -> None:
    spark.sql("CREATE TABLE IF NOT EXISTS default.guard_sales (id INT, region STRING) USING parquet")
    engine = FlintEngine(FlintContext(spark, store, opensearch_config, "lake", validation=local_policy(tmp_path)))
    index = "flint_lake_default_guard_sales_by_id_index"
    settings = '{"index.number_of_shards": 2, "number_of_replicas": 0, "refresh_interval": "5s"}'
    for sql in (
        f"CREATE INDEX by_id ON default.guard_sales (id) WITH (index_settings = '{settings}')",
        "DROP INDEX by_id ON default.guard_sales",
        "VACUUM INDEX by_id ON default.guard_sales",
    ):
        statement = parse(sql)
        assert statement is not None
        engine.run(statement)
        if sql.startswith("CREATE"):
            made = driver(store).indices.get_settings(index=index)[index]["settings"]["index"]
            assert (str(made["number_of_shards"]), str(made["refresh_interval"])) == ("2", "5s")
    assert not store.admin.index_exists(index)


def test_the_function_table_is_the_running_sparks(spark: Any) -> None:
    """query_core/validation/spark_functions.json lists Spark's built-ins and their groups; a Spark
    upgrade that adds or regroups functions must regenerate it (the plugin types functions by it)."""
    from query_core.validation.elements import spark_function_groups

    jvm = spark._jvm
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    expressions = convert.asJava(jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.expressions())
    live = {str(name): str(expressions.get(name)._1().getGroup() or "") for name in expressions.keySet()}
    tables = convert.asJava(jvm.org.apache.spark.sql.catalyst.analysis.TableFunctionRegistry.logicalPlans())
    for name in tables.keySet():
        live.setdefault(str(name), "table_funcs")
    assert spark_function_groups() == live
