"""The datasource's name as a catalog: the rewrite to the session catalog, token by token."""

from __future__ import annotations

import pytest

from flint_repl_job.catalog import session_sql, tokenize, unknown_catalog_message
from flint_repl_job.errors import classify


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM local.default.sales", "SELECT * FROM spark_catalog.default.sales"),
        ("select * from `local`.`default`.`sales`", "select * from spark_catalog.`default`.`sales`"),
        (
            "SELECT local.default.t.id FROM local.default.t",
            "SELECT spark_catalog.default.t.id FROM spark_catalog.default.t",
        ),
        ("SHOW SCHEMAS IN local", "SHOW SCHEMAS IN spark_catalog"),
        ("SHOW DATABASES FROM local", "SHOW DATABASES FROM spark_catalog"),
        ("show table extended in local.default like '*'", "show table extended in spark_catalog.default like '*'"),
        ("SHOW TABLES IN local.db", "SHOW TABLES IN spark_catalog.db"),
        ("DESC local.default.sales", "DESC spark_catalog.default.sales"),
        ("DESCRIBE TABLE EXTENDED local . default . sales", "DESCRIBE TABLE EXTENDED spark_catalog . default . sales"),
        ("CREATE DATABASE IF NOT EXISTS local.db2", "CREATE DATABASE IF NOT EXISTS spark_catalog.db2"),
        ("USE local", "USE spark_catalog"),
        ("USE local.db2", "USE spark_catalog.db2"),
        (
            "INSERT INTO local.default.t SELECT * FROM local.db.u",
            "INSERT INTO spark_catalog.default.t SELECT * FROM spark_catalog.db.u",
        ),
        (
            "CREATE TABLE local.default.t (a INT) USING parquet",
            "CREATE TABLE spark_catalog.default.t (a INT) USING parquet",
        ),
    ],
)
def test_the_datasource_name_becomes_the_session_catalog(sql: str, expected: str) -> None:
    assert session_sql(sql, "local") == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'local.default.sales'",  # a string
        'SELECT "local.default.t" AS x',  # a string (Spark's default for double quotes)
        "SELECT `local.default.sales` FROM t",  # one quoted name
        "SELECT 1 -- FROM local.default.sales",
        "SELECT /* local.default.t /* nested */ local.a.b */ 1",
        "SELECT local.col FROM t AS local",  # an alias named like the datasource
        "SELECT * FROM local",  # a table named like the datasource
        "CREATE DATABASE local",  # a database named like the datasource
        "SELECT * FROM lake.default.t",  # another datasource: left to Spark (and its error)
        "SELECT * FROM xlocal.default.t",
        "SELECT * FROM LOCAL.default.t",  # catalog names are case sensitive
        "SELECT r'local.a.b', 1",
        "SELECT 'it''s', local2.a.b",
        "SELECT 'unterminated local.a.b",
    ],
)
def test_names_that_are_not_the_catalog_stay(sql: str) -> None:
    assert session_sql(sql, "local") == sql


def test_everything_but_the_catalog_is_kept_byte_for_byte() -> None:
    sql = "SELECT  a,\n  'x -- y' AS s -- note\nFROM   local.`my db`.`t``1`  /* c */ WHERE b = \"local.a.b\""
    out = session_sql(sql, "local")
    assert out == sql.replace("local.`my db`", "spark_catalog.`my db`")


def test_tokens_cover_the_text() -> None:
    sql = "SELECT `a``b`, 'c\\'d', r\"e\" FROM x.y /* z */ -- w"
    assert "".join(t.text for t in tokenize(sql)) == sql
    assert [t.name for t in tokenize(sql) if t.kind == "quoted"] == ["a`b"]


def test_a_foreign_catalog_is_explained() -> None:
    spark_error = (
        "[REQUIRES_SINGLE_PART_NAMESPACE] spark_catalog requires a single-part namespace, "
        "but got identifier `lake`.`default`.`sales`. SQLSTATE: 42K05"
    )
    message = unknown_catalog_message(spark_error, "local")
    assert message is not None
    assert "'lake'" in message and "'local'" in message and "local.<database>.<table>" in message
    assert unknown_catalog_message("[TABLE_OR_VIEW_NOT_FOUND] nope", "local") is None


class AnalysisException(Exception):  # noqa: N818 - named as PySpark's, which classify() keys on
    pass


def test_classify_rewords_the_foreign_catalog_error() -> None:
    exc = AnalysisException(
        "[REQUIRES_SINGLE_PART_NAMESPACE] spark_catalog requires a single-part namespace, but got `glue`.`db`.`t`."
    )
    text = classify(exc, "local")
    assert text.startswith("Fail to analyze query. Cause: catalog 'glue'")
    assert "REQUIRES_SINGLE_PART_NAMESPACE" in classify(exc)  # without a datasource: Spark's words


def test_flint_statements_are_told_from_spark_sql() -> None:
    from flint_repl_job.flint_statements import FlintParseError, flint_statement
    from query_core.flint import CreateSkippingIndex, ShowFlintIndexes

    assert isinstance(flint_statement("show flint indexes extended in local.default;"), ShowFlintIndexes)
    assert isinstance(flint_statement("CREATE SKIPPING INDEX ON local.default.t (year PARTITION)"), CreateSkippingIndex)
    assert flint_statement("SHOW TABLES IN local.default") is None
    with pytest.raises(FlintParseError) as raised:
        flint_statement("CREATE SKIPPING INDEX ON t (year FOO)")
    assert classify(raised.value).startswith("Syntax error: ")
