"""Statement validation at the plugin: the reference's grammar elements and deny lists
(S3GLUE exactly, its messages too), this product's local default, PPL, Flint statements, and the
``validation.*`` datasource properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from async_query.datasources import Datasource, parse_datasource
from async_query.launcher.base import job_conf, validation_policy
from query_core.config import OpenSearchConfig
from query_core.errors import InvalidRequestError
from query_core.flint import parse
from query_core.states import SessionType
from query_core.validation import (
    LOCAL_DENY_LIST,
    S3GLUE_DENY_LIST,
    SECURITY_LAKE_DENY_LIST,
    GrammarElement,
    PolicyError,
    Profile,
    QueryRefusedError,
    StatementLimitError,
    StatementLimits,
    ValidationPolicy,
    Verdict,
    is_under,
    policy_for,
    validate_query,
)
from query_core.validation.policy import is_protected_key
from query_core.validation.ppl import spark_calls

WAREHOUSE = "file:/srv/var/warehouse"
CHECKPOINTS = "/srv/var/checkpoints"
LOCAL = policy_for({}, Profile.LOCAL, WAREHOUSE, CHECKPOINTS)
S3GLUE = policy_for({}, Profile.S3GLUE)
SECURITY_LAKE = policy_for({}, Profile.SECURITY_LAKE)
DENY_ALL = ValidationPolicy(frozenset(GrammarElement))


def refusal(policy: ValidationPolicy, query: str, lang: str = "sql") -> str | None:
    """The refusal message of ``query``, or None when it is allowed."""
    statement = parse(query) if lang == "sql" else None
    try:
        validate_query(policy, lang, query, statement)
    except QueryRefusedError as exc:
        return exc.message
    return None


# -- the deny lists are the reference's --------------------------------------------------------


def test_the_s3glue_and_security_lake_lists_are_the_references() -> None:
    assert len(S3GLUE_DENY_LIST) == 31
    assert len(SECURITY_LAKE_DENY_LIST) == 51
    assert S3GLUE_DENY_LIST < SECURITY_LAKE_DENY_LIST | {GrammarElement.BITWISE_FUNCTIONS}
    assert GrammarElement.INSERT in S3GLUE_DENY_LIST and GrammarElement.CREATE_NAMESPACE not in S3GLUE_DENY_LIST


#: (query, S3GLUE's message or None when it allows it): one or more per reference element.
S3GLUE_CASES = [
    ("ALTER DATABASE inventory SET DBPROPERTIES ('owner' = 'ops')", None),
    ("ALTER TABLE people ADD COLUMNS (nickname STRING)", None),
    ("ALTER TABLE people RENAME TO persons", None),
    ("ALTER VIEW recent AS SELECT * FROM people", "ALTER VIEW is not allowed."),
    ("ALTER VIEW recent RENAME TO latest", "ALTER VIEW is not allowed."),
    ("CREATE DATABASE IF NOT EXISTS sales_db", None),
    ("CREATE FUNCTION to_upper AS 'com.example.ToUpper' USING JAR '/tmp/udf.jar'", "CREATE FUNCTION is not allowed."),
    ("CREATE TABLE people (id INT, name STRING) USING parquet", None),
    ("CREATE TABLE copy USING parquet AS SELECT * FROM people", None),
    ("CREATE VIEW adults AS SELECT * FROM people WHERE age > 17", "CREATE VIEW is not allowed."),
    ("DROP DATABASE sales_db CASCADE", None),
    ("DROP FUNCTION to_upper", "DROP FUNCTION is not allowed."),
    ("DROP TABLE people", None),
    ("DROP VIEW adults", "DROP VIEW is not allowed."),
    ("MSCK REPAIR TABLE people", None),
    ("TRUNCATE TABLE people", None),
    ("INSERT INTO people SELECT * FROM staging", "INSERT is not allowed."),
    ("INSERT OVERWRITE people SELECT * FROM staging", "INSERT is not allowed."),
    ("INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT * FROM people", "INSERT is not allowed."),
    ("LOAD DATA INPATH '/tmp/people' INTO TABLE people", "LOAD is not allowed."),
    ("SELECT 1", None),
    ("EXPLAIN SELECT * FROM people", None),
    ("WITH young AS (SELECT * FROM people WHERE age < 30) SELECT * FROM young", None),
    ("SELECT * FROM people CLUSTER BY age", "CLUSTER BY is not allowed."),
    ("SELECT * FROM people DISTRIBUTE BY age", "DISTRIBUTE BY is not allowed."),
    ("SELECT name, count(*) FROM people GROUP BY name HAVING count(*) > 1", None),
    ("SELECT /*+ BROADCAST(people) */ * FROM people", "HINTS is not allowed."),
    ("SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS pairs(id, tag)", "Inline Table(VALUES) is not allowed."),
    ("SELECT * FROM csv.`/data/people.csv`", "File is not allowed."),
    ("SELECT * FROM a INNER JOIN b ON a.id = b.id", None),
    ("SELECT * FROM a CROSS JOIN b", "CROSS JOIN is not allowed."),
    ("SELECT * FROM a LEFT OUTER JOIN b ON a.id = b.id", None),
    ("SELECT * FROM a LEFT SEMI JOIN b ON a.id = b.id", "LEFT SEMI JOIN is not allowed."),
    ("SELECT * FROM a RIGHT OUTER JOIN b ON a.id = b.id", "RIGHT OUTER JOIN is not allowed."),
    ("SELECT * FROM a FULL OUTER JOIN b ON a.id = b.id", "FULL OUTER JOIN is not allowed."),
    ("SELECT * FROM a LEFT ANTI JOIN b ON a.id = b.id", "LEFT ANTI JOIN is not allowed."),
    ("SELECT * FROM people TABLESAMPLE (5 PERCENT)", "TABLESAMPLE is not allowed."),
    ("SELECT * FROM range(10)", "Table-valued function is not allowed."),
    ("SELECT name, tag FROM people LATERAL VIEW explode(tags) t AS tag", None),
    ("SELECT * FROM a, LATERAL (SELECT * FROM b WHERE a.id = b.id)", None),
    ("SELECT TRANSFORM(id, name) USING 'cat' AS (x, y) FROM people", "TRANSFORM is not allowed."),
    ("ADD JAR /tmp/udf.jar", "Resource management statements is not allowed."),
    ("ADD FILE /tmp/data.txt", "Resource management statements is not allowed."),
    ("LIST JAR", "Resource management statements is not allowed."),
    ("ANALYZE TABLE people COMPUTE STATISTICS", None),
    ("CACHE TABLE people", None),
    ("CLEAR CACHE", None),
    ("DESCRIBE DATABASE sales_db", None),
    ("DESCRIBE FUNCTION upper", "DESCRIBE FUNCTION is not allowed."),
    ("DESCRIBE QUERY SELECT * FROM people", None),
    ("DESCRIBE TABLE people", None),
    ("REFRESH '/data/people'", "REFRESH is not allowed."),
    ("REFRESH TABLE people", None),
    ("REFRESH FUNCTION to_upper", "REFRESH FUNCTION is not allowed."),
    ("RESET", "RESET is not allowed."),
    ("RESET spark.sql.shuffle.partitions", "RESET is not allowed."),
    ("SET spark.sql.shuffle.partitions=4", "SET is not allowed."),
    ("SET -v", "SET is not allowed."),
    ("SHOW COLUMNS FROM people", None),
    ("SHOW CREATE TABLE people", None),
    ("SHOW DATABASES", None),
    ("SHOW FUNCTIONS", "SHOW FUNCTIONS is not allowed."),
    ("SHOW PARTITIONS people", None),
    ("SHOW TABLE EXTENDED LIKE 'peo*'", None),
    ("SHOW TABLES", None),
    ("SHOW TBLPROPERTIES people", None),
    ("SHOW VIEWS", "SHOW VIEWS is not allowed."),
    ("UNCACHE TABLE people", None),
    ("SELECT array_contains(array(1, 2), 2)", None),
    ("SELECT map_keys(map('a', 1))", None),
    ("SELECT date_format(current_date(), 'yyyy')", None),
    ("SELECT bit_count(42)", "Bitwise functions (bit_count) is not allowed."),
    ("SELECT from_csv('1,a', 'x INT, y STRING')", None),
    ("SELECT current_user()", "Misc functions (current_user) is not allowed."),
    ("SELECT reflect('java.lang.System', 'getProperty', 'user.name')", "Misc functions (reflect) is not allowed."),
    ("SELECT explode(array(1, 2))", None),
    ("SELECT named_struct('a', 1)", None),
    ("SELECT score_of(name) FROM people", "User Defined functions (score_of) is not allowed."),
    ("SELECT try_reflect('java.lang.System', 'getenv')", "User Defined functions (try_reflect) is not allowed."),
]


@pytest.mark.parametrize(("query", "expected"), S3GLUE_CASES)
def test_s3glue_refuses_what_the_reference_refuses_in_its_words(query: str, expected: str | None) -> None:
    assert refusal(S3GLUE, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("CREATE TABLE people (id INT) USING parquet", "CREATE (DATABASE|TABLE|NAMESPACE) is not allowed."),
        ("DROP TABLE people", "DROP (DATABASE|TABLE|NAMESPACE) is not allowed."),
        ("ALTER TABLE people ADD COLUMNS (x INT)", "ALTER (DATABASE|TABLE|NAMESPACE) is not allowed."),
        ("SHOW TABLES", "SHOW TABLES is not allowed."),
        ("DESC people", "DESCRIBE TABLE is not allowed."),
        ("SELECT from_csv('1', 'x INT')", "CSV functions (from_csv) is not allowed."),
        ("SELECT bit_count(1)", None),
        ("SELECT 1", None),
    ],
)
def test_security_lake_refuses_more(query: str, expected: str | None) -> None:
    assert refusal(SECURITY_LAKE, query) == expected


def test_a_policy_denying_everything_refuses_what_has_an_element() -> None:
    assert refusal(DENY_ALL, "SELECT named_struct('a', 1)") == "Other functions (named_struct) is not allowed."
    assert refusal(DENY_ALL, "SELECT name FROM people WHERE age > 3 ORDER BY name LIMIT 2") is None


# -- the local default ----------------------------------------------------------------------------

#: Each statement the local default refuses, with its message.
LOCAL_REFUSED = [
    ("SELECT * FROM text.`/etc/hostname`", "File is not allowed."),
    ("SELECT * FROM `parquet`.`/srv/var/warehouse/t`", "File is not allowed."),
    ("SELECT * FROM IDENTIFIER('text.`/etc/hostname`')", "File is not allowed."),
    ("SELECT reflect('java.lang.System', 'getProperty', 'user.name')", "Misc functions (reflect) is not allowed."),
    ("SELECT java_method('java.lang.System', 'getenv', 'HOME')", "Misc functions (java_method) is not allowed."),
    ("SELECT `java_method`('java.lang.System', 'getenv', 'HOME')", "Misc functions (java_method) is not allowed."),
    ("SELECT try_reflect('java.lang.System', 'getenv', 'HOME')", "Misc functions (try_reflect) is not allowed."),
    ("SELECT upper(name) FROM t WHERE id IN (SELECT reflect('a', 'b'))", "Misc functions (reflect) is not allowed."),
    ("SELECT input_file_name() FROM t", "Misc functions (input_file_name) is not allowed."),
    ("SELECT my_udf(x) FROM t", "User Defined functions (my_udf) is not allowed."),
    ("SELECT TRANSFORM(id) USING 'cat' AS (x) FROM range(3)", "TRANSFORM is not allowed."),
    ("SELECT TRANSFORM(*) USING 'sh -c id' FROM t", "TRANSFORM is not allowed."),
    ("ADD JAR /tmp/evil.jar", "Resource management statements is not allowed."),
    ("add jars '/tmp/a.jar' '/tmp/b.jar'", "Resource management statements is not allowed."),
    ("ADD FILE /tmp/x.py", "Resource management statements is not allowed."),
    ("ADD ARCHIVE /tmp/x.zip", "Resource management statements is not allowed."),
    ("CREATE FUNCTION evil AS 'com.example.Evil' USING JAR '/tmp/evil.jar'", "CREATE FUNCTION is not allowed."),
    ("CREATE TEMPORARY FUNCTION evil AS 'com.example.Evil'", "CREATE FUNCTION is not allowed."),
    (
        "CREATE TABLE t (id INT) USING parquet LOCATION '/etc'",
        "LOCATION outside the warehouse (/etc) is not allowed.",
    ),
    (
        "CREATE TABLE t (id INT) USING parquet LOCATION 'file:/srv/var/warehouse/../../../etc'",
        "LOCATION outside the warehouse (file:/srv/var/warehouse/../../../etc) is not allowed.",
    ),
    (
        "CREATE TABLE t USING csv OPTIONS (path '/etc/passwd')",
        "LOCATION outside the warehouse (/etc/passwd) is not allowed.",
    ),
    (
        "CREATE TEMPORARY VIEW v USING text OPTIONS (path '/etc/hostname')",
        "LOCATION outside the warehouse (/etc/hostname) is not allowed.",
    ),
    ("CREATE DATABASE d LOCATION '/tmp/d'", "LOCATION outside the warehouse (/tmp/d) is not allowed."),
    ("ALTER TABLE t SET LOCATION 's3://bucket/x'", "LOCATION outside the warehouse (s3://bucket/x) is not allowed."),
    (
        "ALTER TABLE t ADD PARTITION (p = 1) LOCATION '/tmp/p'",
        "LOCATION outside the warehouse (/tmp/p) is not allowed.",
    ),
    ("INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT * FROM t", "INSERT OVERWRITE DIRECTORY is not allowed."),
    (
        "INSERT OVERWRITE LOCAL DIRECTORY '/tmp/out' STORED AS orc SELECT * FROM t",
        "INSERT OVERWRITE DIRECTORY is not allowed.",
    ),
    ("LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE t", "LOAD is not allowed."),
    (
        "SET spark.sql.warehouse.dir=/tmp",
        "SET/RESET of a protected key (spark.sql.warehouse.dir) is not allowed.",
    ),
    (
        "SET spark.sql.catalog.evil=com.example.EvilCatalog",
        "SET/RESET of a protected key (spark.sql.catalog.evil) is not allowed.",
    ),
    (
        "SET `spark.hadoop.fs.s3a.endpoint` = http://elsewhere",
        "SET/RESET of a protected key (spark.hadoop.fs.s3a.endpoint) is not allowed.",
    ),
    (
        "SET spark.sql.runSQLOnFiles=true",
        "SET/RESET of a protected key (spark.sql.runSQLOnFiles) is not allowed.",
    ),
    (
        "RESET spark.flint.index.checkpointLocation.rootDir",
        "SET/RESET of a protected key (spark.flint.index.checkpointLocation.rootDir) is not allowed.",
    ),
    # RESET of every key puts back the defaults of the keys a job set for its session at run time.
    ("RESET", "SET/RESET of a protected key (RESET of every key) is not allowed."),
    ("EXECUTE IMMEDIATE 'RESET'", "SET/RESET of a protected key (RESET of every key) is not allowed."),
    # A skipping or covering index reads its source table: a path-based one is File.
    ("CREATE SKIPPING INDEX ON text.`/etc/passwd` (value VALUE_SET)", "File is not allowed."),
    ("CREATE INDEX leak ON parquet.`/srv/var/other` (a) WITH (auto_refresh = true)", "File is not allowed."),
    ("REFRESH INDEX leak ON text.`/etc`", "File is not allowed."),
    # Options of a table reference reach its data source: its path, Hadoop settings.
    ("SELECT * FROM t WITH ('PATH' = '/etc/passwd')", "Data source option (WITH options of a table) is not allowed."),
    (
        "INSERT INTO t WITH ('fs.defaultFS' = 'x') SELECT 1",
        "Data source option (WITH options of a table) is not allowed.",
    ),
    ("EXPLAIN EXTENDED SELECT reflect('a', 'b')", "Misc functions (reflect) is not allowed."),
    ("EXECUTE IMMEDIATE \"SELECT reflect('a', 'b')\"", "Misc functions (reflect) is not allowed."),
    ("EXECUTE IMMEDIATE stmt", "A statement or name built at run time (EXECUTE IMMEDIATE) is not allowed."),
    ("CREATE VIEW v AS SELECT java_method('a', 'b')", "Misc functions (java_method) is not allowed."),
]


@pytest.mark.parametrize(("query", "expected"), LOCAL_REFUSED)
def test_the_local_default_refuses_in_the_references_words(query: str, expected: str) -> None:
    assert refusal(LOCAL, query) == expected


#: What the README's examples and Dashboards' browsing need, which the local default allows.
LOCAL_ALLOWED = [
    "SELECT 1 AS one, 'hello' AS greeting",
    "CREATE TABLE sales (id INT, item STRING, region STRING) USING parquet PARTITIONED BY (region)",
    "INSERT INTO sales VALUES (1, 'tea', 'eu'), (2, 'cake', 'us')",
    "SELECT * FROM local.default.sales ORDER BY id",
    "SHOW SCHEMAS IN local",
    "SHOW TABLE EXTENDED IN local.default LIKE '*'",
    "DESC local.default.sales",
    "DROP TABLE sales",
    "CREATE DATABASE IF NOT EXISTS analytics",
    "CREATE TABLE t (id INT) USING parquet LOCATION 'file:/srv/var/warehouse/t'",
    "CREATE TABLE t (id INT) USING parquet LOCATION '/srv/var/warehouse/elsewhere/t'",
    "SELECT count(*) FROM range(100000) a, range(100000) b",
    "SELECT * FROM a CROSS JOIN b",
    "SELECT region, count(*) AS n FROM sales GROUP BY region",
    "SELECT window.start AS startTime, count(*) AS n FROM sales_events GROUP BY TUMBLE(ts, '1 Minute')",
    "SELECT date_format(ts, 'yyyy-MM-dd'), to_date(ts), nvl(a, b), coalesce(a, 1), cast(a AS INT) FROM t",
    "SELECT explode(array(1, 2)), map_keys(map('a', 1)), bit_count(3), transform(array(1), x -> x + 1)",
    "SET spark.sql.shuffle.partitions=4",
    "SET spark.flint.optimizer.enabled = false",
    "SET spark.flint.index.hybridscan.enabled=false",
    "SET",
    "RESET spark.sql.shuffle.partitions",
    "WITH w AS (SELECT 1 AS a) SELECT * FROM w",
    "CREATE SKIPPING INDEX ON default.people (year PARTITION)",
    "SELECT /*+ BROADCAST(t) */ * FROM t",
    "CACHE TABLE t",
]


@pytest.mark.parametrize("query", LOCAL_ALLOWED)
def test_the_local_default_keeps_what_the_readme_needs(query: str) -> None:
    assert refusal(LOCAL, query) is None


def test_the_local_default_is_the_documented_list() -> None:
    assert {e.name for e in LOCAL_DENY_LIST} == {
        "TRANSFORM", "MISC_FUNCTIONS", "UDF", "MANAGE_RESOURCE", "CREATE_FUNCTION", "FILE", "LOAD",
        "LOCATION", "CHECKPOINT_LOCATION", "INSERT_OVERWRITE_DIRECTORY", "PROTECTED_CONFIG", "DYNAMIC_SQL",
        "DATA_SOURCE", "DATA_SOURCE_OPTION", "TABLE_PROPERTY", "FLINT_OPTION",
    }  # fmt: skip


# -- Flint statements -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "CREATE MATERIALIZED VIEW mv AS SELECT reflect('java.lang.System', 'getenv', 'PATH') FROM t",
            "Misc functions (reflect) is not allowed.",
        ),
        (
            "CREATE MATERIALIZED VIEW mv AS SELECT TRANSFORM(id) USING 'cat' AS x FROM t",
            "TRANSFORM is not allowed.",
        ),
        ("CREATE MATERIALIZED VIEW mv AS SELECT * FROM json.`/etc`", "File is not allowed."),
        (
            "CREATE INDEX ix ON t (a) WHERE java_method('a', 'b') = 'x'",
            "Misc functions (java_method) is not allowed.",
        ),
        (
            'CREATE INDEX ix ON t (a) WITH (id_expression = \'reflect("a", "b")\')',
            "Misc functions (reflect) is not allowed.",
        ),
        (
            "CREATE SKIPPING INDEX ON t (a VALUE_SET) WITH (auto_refresh = true, checkpoint_location = '/home')",
            "checkpoint_location outside the checkpoint root (/home) is not allowed.",
        ),
        (
            "ALTER INDEX ix ON t WITH (auto_refresh = true, checkpoint_location = '/srv/var/checkpoints')",
            "checkpoint_location outside the checkpoint root (/srv/var/checkpoints) is not allowed.",
        ),
        ("CREATE MATERIALIZED VIEW mv AS SELECT a, count(*) FROM t GROUP BY a", None),
        (
            "CREATE INDEX ix ON t (a) WITH (auto_refresh = true, checkpoint_location = '/srv/var/checkpoints/ix')",
            None,
        ),
        ("VACUUM INDEX ix ON t", None),
        ("DROP MATERIALIZED VIEW mv", None),
    ],
)
def test_flint_statements_are_checked_on_what_they_hold(query: str, expected: str | None) -> None:
    assert parse(query) is not None
    assert refusal(LOCAL, query) == expected


def test_s3glue_checks_a_views_query_as_the_reference_does() -> None:
    query = "CREATE MATERIALIZED VIEW mv AS SELECT TRANSFORM(id) USING 'cmd' AS x FROM tbl"
    assert refusal(S3GLUE, query) == "TRANSFORM is not allowed."
    checkpoint = "CREATE INDEX ix ON t (a) WITH (auto_refresh = true, checkpoint_location = 's3://b/c')"
    assert refusal(S3GLUE, checkpoint) is None


# -- PPL ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("source = text.`/etc/hostname`", "File is not allowed."),
        ("search source = `csv`.`/etc/passwd` | head 1", "File is not allowed."),
        ("source = t | join left = l right = r ON l.a = r.a text.`/etc/x`", "File is not allowed."),
        ("describe text.`/etc/hostname`", "File is not allowed."),
        ("source = t | eval k = typeof(a)", "Misc functions (typeof) is not allowed."),
        ("source = local.default.sales | where region = 'eu' | stats count() by region", None),
        ("source = t | eval j = json_valid(a), c = cidrmatch(ip, '10.0.0.0/8')", None),
    ],
)
def test_ppl_is_checked_on_its_syntax_tree(query: str, expected: str | None) -> None:
    assert refusal(LOCAL, query, "ppl") == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("source = t | join ON t.a = o.a orders", "join command is not allowed."),
        ("source = t | lookup accounts id", "lookup command is not allowed."),
        ("source = t | where a > [ source = u | stats min(c) ]", "subquery command is not allowed."),
        ("source = t | fillnull with 0 in a", "fillnull command is not allowed."),
        ("describe t", "describe command is not allowed."),
        ("source = t | where cidrmatch(ip, '10.0.0.0/8')", "IP address functions is not allowed."),
        ("source = t | eval v = json_valid(a)", "JSON functions is not allowed."),
        ("source = t | where a > 1 | fields a, b | sort - a | head 5", None),
    ],
)
def test_the_references_ppl_elements(query: str, expected: str | None) -> None:
    assert refusal(DENY_ALL, query, "ppl") == expected


def test_a_ppl_functions_type_is_that_of_the_spark_functions_it_calls() -> None:
    assert spark_calls("typeof", 1) == ("typeof",)
    assert "upper" in spark_calls("upper", 1)


# -- the policy: properties, locations, keys ------------------------------------------------------------


def test_an_admin_loosens_a_datasources_list() -> None:
    loose = policy_for({"validation.allow": "misc_functions, FILE"}, Profile.LOCAL, WAREHOUSE, CHECKPOINTS)
    assert refusal(loose, "SELECT current_database(), * FROM text.`/data/x`") is None
    assert refusal(loose, "SELECT TRANSFORM(a) USING 'cat' FROM t") == "TRANSFORM is not allowed."


def test_a_datasource_may_start_from_another_profile() -> None:
    lake = policy_for({"validation.profile": "security_lake"}, Profile.LOCAL)
    assert refusal(lake, "SHOW TABLES") == "SHOW TABLES is not allowed."


@pytest.mark.parametrize(
    "properties",
    [{"validation.allow": "MISC_FUNCTION"}, {"validation.profile": "glue"}, {"validation.alow": "SET"}],
)
def test_validation_properties_are_read_strictly(properties: dict[str, str]) -> None:
    with pytest.raises(PolicyError):
        policy_for(properties, Profile.LOCAL)
    with pytest.raises(InvalidRequestError, match="validation"):
        parse_datasource({"name": "strict", "connector": "local", "properties": properties})


def test_emr_datasources_get_the_s3glue_list_and_local_ones_the_local_default() -> None:
    emr = Datasource(name="lake", connector="emr-serverless")
    assert validation_policy(emr).denied == S3GLUE_DENY_LIST
    glue = Datasource(name="glue", connector="s3glue", properties={"glue.auth.type": "iam_role", "engine": "local"})
    assert validation_policy(glue).denied == S3GLUE_DENY_LIST
    lake = Datasource(name="seclake", connector="security_lake", properties={"engine": "local"})
    assert validation_policy(lake).denied == SECURITY_LAKE_DENY_LIST
    local = Datasource(name="here", connector="local", spark_conf={"spark.sql.warehouse.dir": "hdfs://nn/wh"})
    policy = validation_policy(local, "file:/ignored", "/cp")
    assert policy.denied == LOCAL_DENY_LIST
    assert (policy.warehouse_root, policy.checkpoint_root) == ("hdfs://nn/wh", "/cp")


@pytest.mark.parametrize(
    ("location", "root", "under"),
    [
        ("/srv/wh/t", "file:/srv/wh", True),
        ("file:///srv/wh/db/t", "/srv/wh", True),
        ("/srv/wh", "/srv/wh", False),
        ("/srv/wh/../etc", "/srv/wh", False),
        ("/srv/wh/%2e%2e/etc", "/srv/wh", False),
        ("/srv/wh2/t", "/srv/wh", False),
        ("relative/t", "/srv/wh", False),
        ("s3://bucket/wh/t", "s3://bucket/wh", True),
        ("s3://other/wh/t", "s3://bucket/wh", False),
        ("/srv/wh/t", "s3://bucket/srv/wh", False),
        ("/srv/wh/t", "", False),
    ],
)
def test_locations_must_lie_below_their_root(location: str, root: str, under: bool) -> None:
    assert is_under(location, root) is under


@pytest.mark.parametrize(
    ("key", "protected"),
    [
        ("spark.sql.warehouse.dir", True),
        ("spark.sql.catalog.spark_catalog", True),
        ("spark.hadoop.fs.defaultFS", True),
        ("spark.jars.packages", True),
        ("spark.sql.sources.commitProtocolClass", True),
        ("spark.sql.streaming.stateStore.providerClass", True),
        ("spark.sql.variable.substitute", True),
        ("spark.sql.shuffle.partitions", False),
        ("spark.sql.ansi.enabled", False),
        ("spark.sql.session.timeZone", False),
        ("spark.flint.optimizer.enabled", False),
        ("spark.flint.optimizer.covering.enabled", False),
        ("spark.flint.index.hybridscan.enabled", False),
        ("SPARK.FLINT.INDEX.HYBRIDSCAN.ENABLED", True),  # keys are exact, as Spark reads them
        ("spark.flint.optimizer.enabled.extra", True),
        ("spark.flint.index.checkpointLocation.rootDir", True),
    ],
)
def test_protected_keys(key: str, protected: bool) -> None:
    assert is_protected_key(key) is protected


# -- the policy travels to the job, and wins over the datasource's Spark conf ---------------------------


def test_the_policy_travels_to_the_job_and_the_datasource_cannot_override_it() -> None:
    ds = Datasource(
        name="here",
        spark_conf={
            "spark.flint.validation.deniedElements": "",
            "spark.flint.validation.warehouseRoot": "file:/",
            "spark.sql.runSQLOnFiles": "true",
            "spark.sql.variable.substitute": "true",
            "spark.sql.shuffle.partitions": "7",
        },
    )
    policy = validation_policy(ds, WAREHOUSE, CHECKPOINTS)
    conf, _ = job_conf(_settings(), ds, OpenSearchConfig(), "sid", SessionType.INTERACTIVE, policy=policy)
    assert set(conf["spark.flint.validation.deniedElements"].split(",")) == {e.name for e in LOCAL_DENY_LIST}
    assert conf["spark.flint.validation.warehouseRoot"] == WAREHOUSE
    assert conf["spark.flint.validation.checkpointRoot"] == CHECKPOINTS
    assert conf["spark.sql.runSQLOnFiles"] == "false"
    assert conf["spark.sql.variable.substitute"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "7"  # other settings of the datasource still apply
    from flint_repl_job.config import JobConfig

    assert JobConfig.load(conf.get, ["results"], {}).validation == policy


def test_a_fully_loosened_datasource_sends_an_empty_list() -> None:
    every = ",".join(e.name for e in LOCAL_DENY_LIST)
    ds = Datasource(name="open", connector="local", properties={"validation.allow": every})
    conf, _ = job_conf(_settings(), ds, OpenSearchConfig(), "sid", SessionType.INTERACTIVE)
    assert "spark.flint.validation.deniedElements" not in conf
    assert "spark.sql.runSQLOnFiles" not in conf  # Spark's default (true): File is allowed


def _settings():  # type: ignore[no-untyped-def]
    from async_query.settings import Settings

    return Settings()


# -- the allow lists of the local profile -------------------------------------------------------------

#: Refused by the local profile's allow lists, with the message (WAREHOUSE is file:/srv/var/warehouse).
ALLOW_LIST_REFUSED = [
    (
        "CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:memory:x')",
        "Data source provider (jdbc) is not allowed.",
    ),
    ("CREATE TEMPORARY VIEW j USING JDBC OPTIONS (url 'x')", "Data source provider (JDBC) is not allowed."),
    ("CREATE TABLE j USING `jdbc` OPTIONS (url 'x')", "Data source provider (jdbc) is not allowed."),
    (
        "CREATE TABLE j USING org.apache.spark.sql.execution.datasources.jdbc.JdbcRelationProvider",
        "Data source provider (org.apache.spark.sql.execution.datasources.jdbc.JdbcRelationProvider) is not allowed.",
    ),
    ("REPLACE TABLE j USING jdbc AS SELECT 1", "Data source provider (jdbc) is not allowed."),
    ("EXPLAIN CREATE TABLE j USING jdbc", "Data source provider (jdbc) is not allowed."),
    ("EXECUTE IMMEDIATE 'CREATE TABLE j USING jdbc'", "Data source provider (jdbc) is not allowed."),
    (
        "CREATE TEMPORARY VIEW x USING opensearch OPTIONS (index 'i')",
        "Data source provider (opensearch) is not allowed.",
    ),
    ("CREATE TEMPORARY VIEW x USING xml OPTIONS (rowTag 'r')", "Data source provider (xml) is not allowed."),
    (
        "CREATE TABLE x (a INT) ROW FORMAT SERDE 'org.example.S'",
        "Data source provider (SERDE org.example.S) is not allowed.",
    ),
    ("CREATE TABLE x (a INT) STORED AS JSONFILE", "Data source provider (STORED AS JSONFILE) is not allowed."),
    ("ALTER TABLE t SET SERDE 'org.example.S'", "Data source provider (SERDE org.example.S) is not allowed."),
    (
        "CREATE TEMPORARY VIEW t USING text OPTIONS (PATH '/etc/' 'hostname')",
        "LOCATION outside the warehouse (/etc/hostname) is not allowed.",
    ),
    (
        "CREATE TEMPORARY VIEW t USING text OPTIONS ('path' '/srv/var/warehouse/' '../x')",
        "LOCATION outside the warehouse (/srv/var/warehouse/../x) is not allowed.",
    ),
    (
        "CREATE TABLE o (a INT) USING parquet OPTIONS ('fs.defaultFS' 'x')",
        "Data source option (parquet: fs.defaultFS) is not allowed.",
    ),
    (
        "CREATE TABLE o (a INT) USING csv OPTIONS (Header 'true', url 'x')",
        "Data source option (csv: url) is not allowed.",
    ),
    ("CREATE TABLE o (a INT) OPTIONS (paths '[]')", "Data source option (parquet: paths) is not allowed."),
    (
        "CREATE TABLE o (a INT) USING parquet TBLPROPERTIES ('avro.schema.url' = 'http://x')",
        "Table property (avro.schema.url) is not allowed.",
    ),
    ("ALTER TABLE t SET SERDEPROPERTIES ('path' = '/etc')", "LOCATION outside the warehouse (/etc) is not allowed."),
    ("ALTER DATABASE d SET DBPROPERTIES ('location' = '/etc')", "Table property (location) is not allowed."),
    (
        "CREATE TABLE p (a INT) USING parquet LOCATION '/srv/var/warehouse/x?/../../../outside'",
        "LOCATION outside the warehouse (/srv/var/warehouse/x?/../../../outside) is not allowed.",
    ),
    (
        "ALTER TABLE t PARTITION (p = 1) SET LOCATION '/srv/var/warehouse/%2e%2e/x'",
        "LOCATION outside the warehouse (/srv/var/warehouse/%2e%2e/x) is not allowed.",
    ),
    (
        "CREATE TEMPORARY VIEW v USING text OPTIONS (path R'/srv/var/warehouse/\\../\\../etc/passwd')",
        "LOCATION outside the warehouse (/srv/var/warehouse/\\../\\../etc/passwd) is not allowed.",
    ),
    (
        "CREATE TEMPORARY VIEW v USING text OPTIONS (path '/srv/var/warehouse/\\\\../x')",
        "LOCATION outside the warehouse (/srv/var/warehouse/\\../x) is not allowed.",
    ),
    (
        "CREATE TABLE g (a INT) USING parquet LOCATION '/srv/var/warehouse/logs-*'",
        "LOCATION outside the warehouse (/srv/var/warehouse/logs-*) is not allowed.",
    ),
    ("SET spark.sql.sources.default=jdbc", "SET/RESET of a protected key (spark.sql.sources.default) is not allowed."),
    (
        "SET Spark.SQL.Shuffle.Partitions=3",
        "SET/RESET of a protected key (Spark.SQL.Shuffle.Partitions) is not allowed.",
    ),
    ("SET spark.datasource.flint.host", "SET/RESET of a protected key (spark.datasource.flint.host) is not allowed."),
    (
        'CREATE INDEX ix ON t (a) WITH (extra_options = \'{"sink": {"host": "evil"}}\')',
        "Flint index option (extra_options sink: host) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (extra_options = \'{"t": {"cleanSource": "delete"}}\')',
        "Flint index option (extra_options t: cleanSource) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"index": {"routing": {"allocation.require._name": "n"}}}\')',
        "Flint index option (index_settings: index.routing.allocation.require._name) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_shards": {"x": 1}}\')',
        "Flint index option (index_settings: number_of_shards.x) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"index": {"number_of_shards": "6"}}\')',
        'Flint index option (index_settings: index.number_of_shards "6", not 1 to 5) is not allowed.',
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_shards": 0}\')',
        "Flint index option (index_settings: number_of_shards 0, not 1 to 5) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_shards": 2.0}\')',
        "Flint index option (index_settings: number_of_shards 2.0, not 1 to 5) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_replicas": 3}\')',
        "Flint index option (index_settings: number_of_replicas 3, not 0 to 2) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"refresh_interval": "999ms"}\')',
        'Flint index option (index_settings: refresh_interval "999ms", not -1 or at least 1s) is not allowed.',
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"refresh_interval": 5}\')',
        "Flint index option (index_settings: refresh_interval 5, not -1 or at least 1s) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"index.max_result_window": 2147483647}\')',
        "Flint index option (index_settings: index.max_result_window) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"auto_expand_replicas": "0-all"}\')',
        "Flint index option (index_settings: auto_expand_replicas) is not allowed.",
    ),
    (
        "CREATE TABLE t (a INT) USING parquet LOCATION '/srv/var/warehouse/t%00'",
        "LOCATION outside the warehouse (/srv/var/warehouse/t%00, which holds a control character) is not allowed.",
    ),
    (
        "CREATE TABLE t (a INT) USING parquet OPTIONS (path '/srv/var/warehouse/t\\nx')",
        "LOCATION outside the warehouse (/srv/var/warehouse/t\\u000ax, which holds a control character) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_mappings = \'{"properties": {"a": {"type": "keyword", "copy_to": "b"}}}\')',
        "Flint index option (index_mappings: a: copy_to) is not allowed.",
    ),
    (
        'CREATE INDEX ix ON t (a) WITH (index_mappings = \'{"a": {"type": "text", "fields": {"raw": {"type": "derived"}}}}\')',
        "Flint index option (index_mappings: a.raw: type derived) is not allowed.",
    ),
    ("INSERT INTO parquet.`/tmp/x` SELECT 1", "File is not allowed."),
    ("SELECT * FROM a, json.`/etc/passwd`", "File is not allowed."),
    ("SELECT * FROM t LATERAL VIEW my_udtf(x) u AS y", "User Defined functions (my_udtf) is not allowed."),
    ("SELECT * FROM t WHERE x IN (SELECT `reflect`('a', 'b'))", "Misc functions (reflect) is not allowed."),
    ("SELECT IDENTIFIER('reflect')('a', 'b')", "Misc functions (reflect) is not allowed."),
    ("SET VAR v = reflect('a', 'b')", "Misc functions (reflect) is not allowed."),
]


@pytest.mark.parametrize(("query", "expected"), ALLOW_LIST_REFUSED)
def test_the_local_allow_lists_refuse_what_they_do_not_name(query: str, expected: str) -> None:
    assert refusal(LOCAL, query) == expected


ALLOW_LIST_ALLOWED = [
    "CREATE TABLE t (a INT) USING PARQUET OPTIONS (mergeSchema 'true', Compression 'zstd')",
    "CREATE TABLE t (a INT) USING org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat",
    "CREATE TABLE t (a INT) USING csv OPTIONS (header = true, sep ',', 'inferSchema' 'false') LOCATION '/srv/var/warehouse/t'",
    "CREATE TEMPORARY VIEW v USING json OPTIONS (PATH '/srv/var/warehouse/' 'raw', multiLine 'true')",
    "CREATE TABLE t (a INT) STORED AS PARQUET TBLPROPERTIES ('owner' = 'ops', 'parquet.compression' = 'zstd')",
    "CREATE TABLE t (a STRING) ROW FORMAT DELIMITED FIELDS TERMINATED BY ',' STORED AS TEXTFILE",
    "CREATE TABLE t (a VARCHAR(10), b DECIMAL(3, 1)) USING parquet",
    "SELECT CAST(a AS DECIMAL(10, 2)), a::VARCHAR(3) FROM t AS x(a) JOIN range(3) r(b) ON a = b",
    "SELECT t.`my col`, `db`.`t`.x FROM t",
    "SELECT * FROM t WHERE x IN (1, 2) AND EXISTS (SELECT 1) AND transform(array(1), v -> v + 1)[0] = 2",
    "EXECUTE IMMEDIATE 'SELECT ?' USING 'a'",
    "SET TIME ZONE 'UTC'",
    "SET spark.flint.optimizer.covering.enabled=false",
    "SET spark.sql.session.timeZone",
    "SET -v",
    'CREATE INDEX ix ON t (a) WITH (extra_options = \'{"t": {"maxFilesPerTrigger": 5}, "sink": {"BATCH_SIZE": 9}}\')',
    'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_shards": 2, "index": {"refresh_interval": "5s"}}\')',
    'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"index.number_of_replicas": 0}\')',
    'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"number_of_shards": "5", "number_of_replicas": 2}\')',
    'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"refresh_interval": -1, "index.refresh_interval": "1000ms"}\')',
    'CREATE INDEX ix ON t (a) WITH (index_settings = \'{"refresh_interval": "-1"}\')',
    'CREATE INDEX ix ON t (a) WITH (index_mappings = \'{"properties": {"a": {"type": "keyword", "ignore_above": 256}}}\')',
    'CREATE INDEX ix ON t (a) WITH (index_mappings = \'{"a": {"type": "text", "fields": {"raw": {"type": "keyword"}}}}\')',
]


@pytest.mark.parametrize("query", ALLOW_LIST_ALLOWED)
def test_the_local_allow_lists_keep_what_they_name(query: str) -> None:
    assert refusal(LOCAL, query) is None


@pytest.mark.parametrize(
    "query",
    [
        "BEGIN SET spark.sql.warehouse.dir = /tmp; END",
        "SELECT 1; SELECT 2",
        "SELECT 'unterminated",
        "CREATE TABLE t2 LIKE t",
        "CREATE TABLE t (a INT) USING parquet OPTIONS (path = concat('/a', 'b'))",
        "CREATE TEMPORARY VIEW v USING csv OPTIONS (path '/srv/var/warehouse/a\\\\''b')",
    ],
)
def test_what_the_plugin_cannot_read_is_left_to_the_job_never_allowed(query: str) -> None:
    assert validate_query(LOCAL, "sql", query) is Verdict.LEFT_TO_JOB


def test_the_reference_profiles_read_the_tree_and_leave_what_sqlglot_cannot_parse() -> None:
    assert validate_query(S3GLUE, "sql", "SELECT a FROM t") is Verdict.ALLOWED
    assert (
        validate_query(S3GLUE, "sql", "SELECT count(*) FROM t GROUP BY window(ts, '1 minute')") is Verdict.LEFT_TO_JOB
    )


# -- limits -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "query", "deeper_than"),
    [
        ("sql", "SELECT " + "(" * 200 + "1" + ")" * 200, 128),
        ("sql", "SELECT " + " + ".join(["1"] * 200), 128),
        ("sql", "SELECT " + "- " * 200 + "1", 128),
        ("sql", "SELECT " + "NOT " * 200 + "true", 128),
        ("sql", " UNION ".join(["SELECT 1"] * 200), 128),
        ("sql", "SELECT * FROM " + "(SELECT * FROM " * 130 + "t" + ")" * 130, 128),
        ("sql", "SELECT " + "CASE WHEN a THEN " * 130 + "1" + " END" * 130, 128),
        ("sql", "SELECT a" + "[0]" * 200 + " FROM t", 128),
        ("ppl", "source = t | eval a = " + " + ".join(["1"] * 200), 128),
        ("ppl", "source = t | where " + " or ".join(["a = 1"] * 200), 128),
        ("ppl", "source = t" + " | eval a = 1" * 200, 128),
    ],
)
def test_deep_statements_are_refused_before_any_parser_reads_them(lang: str, query: str, deeper_than: int) -> None:
    with pytest.raises(StatementLimitError, match="nested too deeply"):
        validate_query(LOCAL, lang, query, limits=StatementLimits(max_depth=deeper_than))


@pytest.mark.parametrize(
    ("lang", "query"),
    [
        ("sql", "SELECT * FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(2_000))),  # Spark balances OR
        ("sql", "SELECT " + ", ".join(f"a + {i} AS c{i}" for i in range(2_000))),
        ("sql", "SELECT * FROM t WHERE a IN (" + ", ".join(map(str, range(10_000))) + ")"),
        ("sql", "SELECT " + "(" * 100 + "1" + ")" * 100),
        ("ppl", "source = t | where a = 1 or b = 2 | stats count() by c | sort - c | head 5"),
    ],
)
def test_wide_statements_are_not_deep(lang: str, query: str) -> None:
    validate_query(LOCAL, lang, query, limits=StatementLimits())


def test_a_statement_longer_than_its_limit_is_refused() -> None:
    with pytest.raises(StatementLimitError, match="longer than 100 characters"):
        validate_query(LOCAL, "sql", "SELECT '" + "x" * 200 + "'", limits=StatementLimits(max_chars=100))


def test_ppl_has_a_size_limit_and_a_token_budget_of_its_own() -> None:
    """A wide PPL statement (an eval of 20,000 terms) is refused before PPL's parser reads it; one
    of 2,000 terms is past PPL's token budget (a fifth of SQL's: its parser is Python's), and SQL
    of as many terms is not."""
    wide = "source = t | eval " + ", ".join(f"c{i} = a + {i}" for i in range(20_000))
    with pytest.raises(StatementLimitError, match="The PPL statement is longer than 100000 characters"):
        validate_query(LOCAL, "ppl", wide, limits=StatementLimits())
    terms = "source = t | eval " + ", ".join(f"c{i} = a + {i}" for i in range(2_000))
    with pytest.raises(StatementLimitError, match="more than the 5000 tokens allowed for PPL"):
        validate_query(LOCAL, "ppl", terms, limits=StatementLimits())
    validate_query(LOCAL, "sql", "SELECT " + ", ".join(f"a + {i} AS c{i}" for i in range(2_000)), limits=StatementLimits())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "SELECT",
                "FROM",
                "t",
                "text.`/etc`",
                "(",
                ")",
                ",",
                "'a'",
                '"b"',
                "`c`",
                "USING",
                "jdbc",
                "OPTIONS",
                "LOCATION",
                "'/srv/var/warehouse/x?/..'",
                "CREATE",
                "TABLE",
                "TEMPORARY",
                "VIEW",
                "AS",
                "SET",
                "=",
                "reflect",
                "IDENTIFIER",
                "EXECUTE",
                "IMMEDIATE",
                "/*",
                "*/",
                "--",
                "\n",
                ";",
                "BEGIN",
                "END",
                "CASE",
                "+",
                "-",
                ".",
                "TBLPROPERTIES",
                "SERDE",
                "STORED",
                "EXPLAIN",
                "''",
                "r'x'",
                "\\",
                "[",
                "]",
                "|>",
            ]
        ),
        max_size=40,
    ),
)
def test_any_text_is_refused_or_judged_never_a_crash(words: list[str]) -> None:
    """Whatever the plugin is sent, its check answers with a verdict or a refusal (a 400), never
    another exception (a 500)."""
    text = " ".join(words)
    for lang in ("sql", "ppl"):
        try:
            validate_query(LOCAL, lang, text, parse_or_none(text) if lang == "sql" else None, StatementLimits())
        except (QueryRefusedError, StatementLimitError, InvalidRequestError):
            pass


def parse_or_none(text: str) -> Any:
    try:
        return parse(text)
    except InvalidRequestError:
        return None
