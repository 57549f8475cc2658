"""Conformance with the reference's PPL pages: every documented example, translated and run on
Spark over the page's sample tables, gives the documented columns and rows (see
:mod:`tests.ppl_docs` for what is taken otherwise, and why)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from query_core.ppl import PplSemanticError, to_spark_sql
from tests.ppl_docs import EXAMPLES, Example, effective, example_id, is_ordered, rows_match
from tests.ppl_docs.tables import BY_PAGE, COMMON, Table, tables_for, view_sql

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def docs_spark(spark: Any) -> Iterator[Any]:
    """The shared session; the pages' views are dropped at the end."""
    yield spark
    names = {name for tables in [COMMON, *BY_PAGE.values()] for name in tables}
    for name in names:
        spark.catalog.dropTempView(name)


_REGISTERED: dict[str, Table] = {}


def _register(spark: Any, page: str) -> None:
    """The page's tables as temp views (only those that differ from what is registered)."""
    for name, table in tables_for(page).items():
        if _REGISTERED.get(name) is not table:
            spark.sql(view_sql(name, table))
            _REGISTERED[name] = table


IDS = [example_id(i) for i in range(len(EXAMPLES))]


@pytest.mark.parametrize(("example", "ident"), list(zip(EXAMPLES, IDS, strict=True)), ids=IDS)
def test_documented_example(docs_spark: Any, example: Example, ident: str) -> None:
    spark = docs_spark
    _register(spark, example.page)
    query, columns, rows, note = effective(example, ident)
    if note is not None and note.refused:
        with pytest.raises(PplSemanticError, match=note.refused):
            to_spark_sql(query, lambda sql: list(spark.sql(sql).columns))
        return
    sql = to_spark_sql(query, lambda text: list(spark.sql(text).columns))
    frame = spark.sql(sql)
    got = [tuple(r) for r in frame.collect()]
    if note is not None and note.runs:
        assert frame.columns, sql
        return
    names = list(frame.columns)
    columns = tuple(c.strip("`") for c in columns)  # a page may print a quoted name with its quotes
    missing = [c for c in columns if c not in names]
    assert not missing, f"columns {names}, the page prints {list(columns)}\n{sql}"
    at = [names.index(c) for c in columns]
    projected = [tuple(r[i] for i in at) for r in got]
    same, why = rows_match(rows, projected, is_ordered(query))
    assert same, f"{why}\n{sql}"
