"""The ``opensearch`` PySpark data source against a real index server, with Spark in this process."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from flint_repl_job.opensearch_source import source_options
from query_core.store import Store
from tests.node import index_config
from tests.support import client_of

pytestmark = pytest.mark.spark
INDEX = "flint_local_default_sales_items_index"


def options(index_url: str, **extra: str) -> dict[str, str]:
    return {**source_options(index_config(index_url)), "index": INDEX, **extra}


def rows(n: int) -> list[tuple[Any, ...]]:
    when = dt.datetime(2024, 5, 1, 12, 30, 15, 250000, tzinfo=dt.UTC)
    return [
        (
            f"id-{i}",
            i,
            i * 1.5,
            Decimal(f"{i}.25"),
            i % 2 == 0,
            dt.date(2024, 1, 1) + dt.timedelta(days=i % 30),
            when + dt.timedelta(seconds=i),
            [f"t{i}", "x"],
            (f"n{i}", i),
            None if i % 7 else "seven",
        )
        for i in range(n)
    ]


SCHEMA = (
    "id STRING, n BIGINT, x DOUBLE, amount DECIMAL(10,2), even BOOLEAN, day DATE, at TIMESTAMP, "
    "tags ARRAY<STRING>, inner STRUCT<name: STRING, k: INT>, maybe STRING"
)


def frame(spark: Any, n: int, partitions: int = 4) -> Any:
    return spark.createDataFrame(rows(n), SCHEMA).repartition(partitions)


def test_a_frame_is_written_in_parallel_with_its_mapping_and_meta(
    spark: Any, index_url: str, store: Store
) -> None:
    meta = '{"kind": "covering", "name": "items", "source": "local.default.sales"}'
    frame(spark, 1000).write.format("opensearch").options(**options(index_url, id_column="id", meta=meta)).mode(
        "append"
    ).save()
    definition = client_of(store).admin.index_definition(INDEX)["mappings"]
    assert definition["_meta"] == {"kind": "covering", "name": "items", "source": "local.default.sales"}
    props = definition["properties"]
    assert props["id"] == {"type": "keyword"} and props["n"] == {"type": "long"}
    assert props["day"]["type"] == "date" and props["at"]["type"] == "date"
    assert props["inner"]["properties"]["k"] == {"type": "integer"}
    assert client_of(store).admin.write_marks()[INDEX][1] == 1000
    found = store.index.get(INDEX, "id-14")
    assert found is not None
    assert found.source == {
        "id": "id-14",
        "n": 14,
        "x": 21.0,
        "amount": 14.25,
        "even": True,
        "day": "2024-01-15",
        "at": "2024-05-01T12:30:29.250000Z",
        "tags": ["t14", "x"],
        "inner": {"name": "n14", "k": 14},
        "maybe": "seven",
    }

    # A retry (the same rows written again) overwrites by id: nothing is duplicated.
    frame(spark, 1000, partitions=3).write.format("opensearch").options(**options(index_url, id_column="id")).mode(
        "append"
    ).save()
    assert client_of(store).admin.write_marks()[INDEX][1] == 1000

    back = spark.read.format("opensearch").options(**options(index_url)).load()
    assert set(back.columns) >= {"id", "n", "day", "at"}
    got = {r["id"]: (r["n"], r["day"], r["at"]) for r in back.select("id", "n", "day", "at").collect()}
    assert len(got) == 1000
    assert got["id-3"] == (3, dt.date(2024, 1, 4), dt.datetime(2024, 5, 1, 12, 30, 18, 250000))


def test_overwrite_empties_the_index_first(spark: Any, index_url: str, store: Store) -> None:
    write = frame(spark, 50).write.format("opensearch").options(**options(index_url, id_column="id"))
    write.mode("append").save()
    frame(spark, 5).write.format("opensearch").options(**options(index_url, id_column="id")).mode("overwrite").save()
    assert client_of(store).admin.write_marks()[INDEX][1] == 5


def test_a_refused_document_fails_the_write_with_its_reason(spark: Any, index_url: str, store: Store) -> None:
    store.admin.create_index(INDEX, {"mappings": {"properties": {"n": {"type": "long"}}}})
    bad = spark.createDataFrame([("a", "not a number")], "id STRING, n STRING")
    with pytest.raises(Exception, match="refused"):
        bad.write.format("opensearch").options(**options(index_url, id_column="id")).mode("append").save()


def test_an_unknown_id_column_is_a_clear_error(spark: Any, index_url: str) -> None:
    with pytest.raises(Exception, match="id_column 'nope' is not a column"):
        frame(spark, 3).write.format("opensearch").options(**options(index_url, id_column="nope")).mode("append").save()


def test_a_read_can_take_the_querys_filters_to_the_index(spark: Any, index_url: str) -> None:
    """With ``push_filters``, the filters an index query answers exactly are sent with the scan;
    Spark still applies every filter, so the rows are the same either way."""
    frame(spark, 40).write.format("opensearch").options(**options(index_url, id_column="id")).mode("append").save()
    schema = "id STRING, n BIGINT, even BOOLEAN, x DOUBLE"
    condition = "n >= 10 AND n < 30 AND even AND id IN ('id-12', 'id-14', 'id-15', 'id-29') AND x > 1.0"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        pushed = spark.read.format("opensearch").options(**options(index_url, push_filters="true")).schema(schema)
        plain = spark.read.format("opensearch").options(**options(index_url)).schema(schema)
        got = sorted(pushed.load().where(condition).collect())
        assert got == sorted(plain.load().where(condition).collect())
        assert [r["id"] for r in got] == ["id-12", "id-14"]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_the_filters_sent_to_the_index_are_those_it_answers_exactly() -> None:
    from pyspark.sql import types as st
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual

    from flint_repl_job.opensearch_source import index_filter
    from query_core.store import Range, Term, Terms

    types = {"n": st.LongType(), "s": st.StringType(), "x": st.DoubleType(), "b": st.BooleanType()}
    assert index_filter(EqualTo(("s",), "a"), types) == Term("s", "a")
    assert index_filter(In(("n",), (1, 2)), types) == Terms("n", (1, 2))
    assert index_filter(GreaterThan(("n",), 5), types) == Range("n", gte=6)
    assert index_filter(LessThanOrEqual(("n",), 5), types) == Range("n", lt=6)
    assert index_filter(EqualTo(("b",), True), types) == Term("b", True)
    assert index_filter(GreaterThan(("x",), 1.5), types) is None  # doubles: not pushed
    assert index_filter(GreaterThan(("s",), "a"), types) is None  # string ranges: not pushed
    assert index_filter(IsNotNull(("n",)), types) is None
    assert index_filter(LessThanOrEqual(("n",), 2**63 - 1), types) is None  # no bound past a long
    assert index_filter(EqualTo(("inner", "k"), 1), types) is None
