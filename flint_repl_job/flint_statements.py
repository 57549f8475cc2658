"""Flint's extension statements in an interactive session, until the Flint index runners exist.

OpenSearch Dashboards lists a datasource's accelerations with ``SHOW FLINT INDEX[ES] [EXTENDED]
IN <catalog>[.<db>]``. There are no Flint indexes yet, so that statement answers an empty table
with the reference's columns (EXTENDED adds ``error``), through Spark like any statement. Other
Flint statements are refused with a clear error instead of Spark's syntax error; a malformed one
reports the Flint parser's syntax error. Plain Spark SQL passes through untouched.
"""

from __future__ import annotations

from query_core.flint import FlintSyntaxError, ShowFlintIndexes, parse

SHOW_FLINT_INDEX_COLUMNS = ("flint_index_name", "kind", "database", "table", "index_name", "auto_refresh", "status")


class FlintStatementError(Exception):
    """A Flint statement this job cannot run (classified as ``Fail to run query``)."""


class FlintParseError(Exception):
    """A malformed Flint statement (classified as ``Syntax error``)."""


def as_spark_sql(sql: str) -> str:
    """The Spark SQL that answers ``sql``: ``sql`` itself unless it is a Flint statement."""
    try:
        statement = parse(sql)
    except FlintSyntaxError as exc:
        raise FlintParseError(str(exc)) from None
    if statement is None:
        return sql
    if not isinstance(statement, ShowFlintIndexes):
        raise FlintStatementError(f"{type(statement).__name__} statements are not supported by this job yet")
    columns = [*SHOW_FLINT_INDEX_COLUMNS, *(["error"] if statement.extended else [])]
    types = {"auto_refresh": "BOOLEAN"}
    selected = ", ".join(f"CAST(NULL AS {types.get(c, 'STRING')}) AS {c}" for c in columns)
    return f"SELECT {selected} WHERE false"
