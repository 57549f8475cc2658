"""The job's Flint engine with Spark in this process and a real index server: each index kind is
created, refreshed, described, listed, dropped and vacuumed, and its documents are checked field
by field against the source data."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from flint_repl_job.indexes.bloom import might_contain
from flint_repl_job.indexes.engine import FlintContext, FlintEngine, FlintIndexError, FlintOutput
from query_core.config import OpenSearchConfig
from query_core.errors import InvalidTransitionError
from query_core.flint import listing, parse
from query_core.flint.metas import flint_metas
from query_core.flint.naming import latest_id
from query_core.states import FlintIndexState
from query_core.store import Store

pytestmark = pytest.mark.spark

DS = "lake"
SKIPPING = "flint_lake_default_sales_skipping_index"
COVERING = "flint_lake_default_sales_by_region_index"
MV = "flint_lake_default_per_year"


@pytest.fixture(scope="module")
def sales(spark: Any) -> Iterator[list[tuple[Any, ...]]]:
    """A parquet table of three files: one per year, so every file has its own values."""
    data = [(2022 + i % 3, f"r{i % 4}", i, f"item-{i}" if i % 5 else None, i * 0.5) for i in range(60)]
    spark.sql("DROP TABLE IF EXISTS default.sales")
    frame = spark.createDataFrame(data, "year INT, region STRING, qty BIGINT, item STRING, price DOUBLE")
    for year in (2022, 2023, 2024):  # one file per year
        frame.where(f"year = {year}").coalesce(1).write.format("parquet").mode("append").saveAsTable("default.sales")
    yield data
    spark.sql("DROP TABLE IF EXISTS default.sales")


@pytest.fixture
def engine(spark: Any, store: Store, opensearch_config: OpenSearchConfig, sales: Any) -> FlintEngine:
    return FlintEngine(FlintContext(spark, store, opensearch_config, DS, application_id="app-1", job_id="job-1"))


def run(engine: FlintEngine, sql: str) -> FlintOutput:
    statement = parse(sql)
    assert statement is not None, sql
    return engine.run(statement)


def documents(store: Store, index: str) -> dict[str, dict[str, Any]]:
    return dict(store.admin.scan(index))


def state(store: Store, index: str) -> FlintIndexState | None:
    found = store.index_states.get(DS, latest_id(index))
    return found.doc.state if found is not None else None


def per_file(spark: Any) -> dict[str, list[Any]]:
    """The source rows of each file, read back by Spark (file path -> rows)."""
    from pyspark.sql import functions as sf

    rows = spark.read.table("default.sales").withColumn("f", sf.input_file_name()).collect()
    files: dict[str, list[Any]] = {}
    for row in rows:
        files.setdefault(row["f"], []).append(row)
    return files


def test_a_skipping_index_holds_one_document_per_file(engine: FlintEngine, store: Store, spark: Any) -> None:
    run(
        engine,
        f"CREATE SKIPPING INDEX ON {DS}.default.sales "
        "(year PARTITION, region VALUE_SET(3), qty MIN_MAX, item BLOOM_FILTER)",
    )
    assert state(store, SKIPPING) is FlintIndexState.ACTIVE
    assert documents(store, SKIPPING) == {}  # CREATE without auto refresh makes the empty index
    meta = flint_metas(store.admin, SKIPPING)[SKIPPING]
    assert meta["kind"] == "skipping" and meta["name"] == SKIPPING and meta["source"] == "lake.default.sales"
    assert meta["latestId"] == latest_id(SKIPPING)
    assert meta["options"] == {"auto_refresh": "false", "incremental_refresh": "false"}
    assert meta["properties"]["env"] == {"SERVERLESS_EMR_VIRTUAL_CLUSTER_ID": "app-1", "SERVERLESS_EMR_JOB_ID": "job-1"}
    assert [c["kind"] for c in meta["indexedColumns"]] == ["PARTITION", "VALUE_SET", "MIN_MAX", "BLOOM_FILTER"]
    assert meta["indexedColumns"][1] == {
        "kind": "VALUE_SET",
        "parameters": {"max_size": "3"},
        "columnName": "region",
        "columnType": "string",
    }

    run(engine, f"REFRESH SKIPPING INDEX ON {DS}.default.sales")
    assert state(store, SKIPPING) is FlintIndexState.ACTIVE
    docs = documents(store, SKIPPING)
    files = per_file(spark)
    assert len(docs) == len(files) == 3
    for doc_id, doc in docs.items():
        path = doc["file_path"]
        assert doc_id == hashlib.sha1(path.encode()).hexdigest()
        rows = files[path]
        assert doc["year"] == rows[0]["year"]
        regions = {r["region"] for r in rows}
        assert (sorted(doc["region"]) if doc["region"] is not None else None) == (
            sorted(regions) if len(regions) <= 3 else None
        )
        assert doc["MinMax_qty_0"] == min(r["qty"] for r in rows)
        assert doc["MinMax_qty_1"] == max(r["qty"] for r in rows)
        import base64

        from pyspark.sql import functions as sf

        bloom = base64.b64decode(doc["item"])
        hashes = (
            spark.createDataFrame([(r["item"],) for r in rows], "item STRING").select(sf.xxhash64("item")).collect()
        )
        assert all(might_contain(bloom, h[0]) for h in hashes)

    state_doc = store.index_states.get(DS, latest_id(SKIPPING))
    assert (
        state_doc is not None and state_doc.doc.last_refresh_complete_time > state_doc.doc.last_refresh_start_time > 0
    )
    assert state_doc.doc.job_id == "job-1"

    described = run(engine, f"DESC SKIPPING INDEX ON {DS}.default.sales")
    assert described.schema.names == ["indexed_col_name", "data_type", "skip_type"]
    assert described.rows == [
        ("year", "int", "PARTITION"),
        ("region", "string", "VALUE_SET"),
        ("qty", "bigint", "MIN_MAX"),
        ("item", "string", "BLOOM_FILTER"),
    ]

    with pytest.raises(FlintIndexError, match=f"Flint index {SKIPPING} already exists"):
        run(engine, f"CREATE SKIPPING INDEX ON {DS}.default.sales (year PARTITION)")
    run(engine, f"CREATE SKIPPING INDEX IF NOT EXISTS ON {DS}.default.sales (year PARTITION)")

    with pytest.raises(InvalidTransitionError, match="allowed from: deleted"):
        run(engine, f"VACUUM SKIPPING INDEX ON {DS}.default.sales")
    run(engine, f"DROP SKIPPING INDEX ON {DS}.default.sales")
    assert state(store, SKIPPING) is FlintIndexState.DELETED
    run(engine, f"VACUUM SKIPPING INDEX ON {DS}.default.sales")
    assert state(store, SKIPPING) is None and not store.admin.index_exists(SKIPPING)


def test_a_covering_index_holds_the_listed_columns_of_matching_rows(
    engine: FlintEngine, store: Store, sales: list[tuple[Any, ...]]
) -> None:
    run(
        engine,
        "CREATE INDEX by_region ON default.sales (region, qty) WHERE qty > 10 "
        "WITH (id_expression = 'concat(region, \"-\", qty)')",
    )
    run(engine, "REFRESH INDEX by_region ON default.sales")
    docs = documents(store, COVERING)
    expected = {f"{r[1]}-{r[2]}": {"region": r[1], "qty": r[2]} for r in sales if r[2] > 10}
    assert docs == expected
    meta = flint_metas(store.admin, COVERING)[COVERING]
    assert meta["name"] == "by_region" and meta["properties"]["filterCondition"] == "qty > 10"
    run(engine, "REFRESH INDEX by_region ON default.sales")  # a full refresh rewrites, never duplicates
    assert documents(store, COVERING) == expected
    assert run(engine, "DESC INDEX by_region ON default.sales").rows == [
        ("region", "string", "indexed"),
        ("qty", "bigint", "indexed"),
    ]
    assert run(engine, f"SHOW INDEXES ON {DS}.default.sales").rows == [("by_region",)]
    run(engine, "DROP INDEX by_region ON default.sales")
    run(engine, "VACUUM INDEX by_region ON default.sales")
    assert not store.admin.index_exists(COVERING)


def test_a_materialized_view_holds_its_query_output(
    engine: FlintEngine, store: Store, sales: list[tuple[Any, ...]]
) -> None:
    run(
        engine,
        f"CREATE MATERIALIZED VIEW {DS}.default.per_year AS "
        f"SELECT year, count(*) AS n, sum(qty) AS total FROM {DS}.default.sales GROUP BY year",
    )
    meta = flint_metas(store.admin, MV)[MV]
    assert meta["kind"] == "mv" and meta["name"] == "lake.default.per_year"
    assert meta["properties"]["sourceTables"] == ["lake.default.sales"]
    assert [c["columnName"] for c in meta["indexedColumns"]] == ["year", "n", "total"]
    run(engine, f"REFRESH MATERIALIZED VIEW {DS}.default.per_year")
    rows = sorted((d["year"], d["n"], d["total"]) for d in documents(store, MV).values())
    expected: dict[int, tuple[int, int]] = {}
    for year, _, qty, _, _ in sales:
        n, total = expected.get(year, (0, 0))
        expected[year] = (n + 1, total + qty)
    assert rows == sorted((y, n, t) for y, (n, t) in expected.items())
    assert run(engine, f"DESC MATERIALIZED VIEW {DS}.default.per_year").rows == [
        ("year", "int"),
        ("n", "bigint"),
        ("total", "bigint"),
    ]
    assert run(engine, f"SHOW MATERIALIZED VIEWS IN {DS}.default").rows == [("per_year",)]
    listed = run(engine, f"SHOW FLINT INDEXES EXTENDED IN {DS}")
    assert listed.schema.names[7:] == ["error", *listing.EXTENDED_COLUMNS[1:]]
    # A manual index: no error, no refresh mode, interval or runs.
    assert (MV, "mv", "default", None, "per_year", False, "active", None, None, None, None, None, None) in listed.rows
    run(engine, f"DROP MATERIALIZED VIEW {DS}.default.per_year")
    run(engine, f"VACUUM MATERIALIZED VIEW {DS}.default.per_year")
    assert state(store, MV) is None


def test_errors_use_the_reference_words(engine: FlintEngine, store: Store) -> None:
    with pytest.raises(FlintIndexError, match=r"Table lake\.default\.nope is not found"):
        run(engine, "CREATE SKIPPING INDEX ON nope (year PARTITION)")
    with pytest.raises(FlintIndexError, match="Column colour does not exist"):
        run(engine, "CREATE SKIPPING INDEX ON sales (colour VALUE_SET)")
    with pytest.raises(FlintIndexError, match=f"Index {SKIPPING} doesn't exist"):
        run(engine, "REFRESH SKIPPING INDEX ON sales")
    assert run(engine, "DESC SKIPPING INDEX ON sales").rows == []
    assert state(store, SKIPPING) is None  # nothing was started


def test_statements_run_from_a_worker_thread_as_the_job_runs_them(engine: FlintEngine, store: Store) -> None:
    """The job runs each statement in a worker thread, where Spark finds the index data source
    only if the engine makes its session the thread's active one."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(run, engine, "CREATE MATERIALIZED VIEW threaded AS SELECT DISTINCT region FROM sales").result()
        pool.submit(run, engine, "REFRESH MATERIALIZED VIEW threaded").result()
    assert sorted(d["region"] for d in documents(store, "flint_lake_default_threaded").values()) == [
        "r0",
        "r1",
        "r2",
        "r3",
    ]
