"""The catalog read model's own logic, without Spark: the statements it recognizes, Spark's
printing of schemas and tables, the change log, and the cache's invalidation and bounds
(docs/catalog.md). Equality with Spark's own answers is the end-to-end tests' (tests/e2e)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from async_query.catalog.keepwarm import CatalogKeepWarm
from async_query.catalog.locate import CatalogLocation
from async_query.catalog.readers import CatalogUnavailableError, Change
from async_query.catalog.readmodel import CatalogReadModel
from async_query.catalog.spark_types import (
    UnrepresentableError,
    from_json,
    parse_hive_type,
    simple_string,
    struct_from_json,
    tree_string,
)
from async_query.catalog.statements import Describe, ShowFlintIndex, ShowSchemas, ShowTables, recognize
from async_query.catalog.tables import Column, RawTable, describe_rows, information, java_date, spark_view
from async_query.datasources import local_datasource
from query_core.flint import parse
from query_core.store import Store
from query_core.store.catalog_changes import KEEP, CatalogChange

DS = "local"


# -- which statements -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SHOW SCHEMAS IN local", ShowSchemas()),
        ("show databases from `local`;", ShowSchemas()),
        ("SHOW TABLE EXTENDED IN local.Lake LIKE '*'", ShowTables("lake", True)),
        ("SHOW TABLE EXTENDED IN `local`.`my db` LIKE \"*\"", ShowTables("my db", True)),
        ("SHOW TABLES IN local.lake", ShowTables("lake", False)),
        ("DESC local.lake.T1", Describe("lake", "t1")),
        ("DESCRIBE TABLE `local`.`lake`.`t``1`", Describe("lake", "t`1")),
    ],
)
def test_the_forms_dashboards_sends_are_recognized(query: str, expected: object) -> None:
    assert recognize("sql", query, DS, parse(query)) == expected


@pytest.mark.parametrize(
    "query",
    [
        "SHOW SCHEMAS IN other",
        "SHOW SCHEMAS",
        "SHOW TABLE EXTENDED IN local.lake LIKE 't*'",
        "SHOW TABLES IN local.lake LIKE '*'",
        "SHOW TABLES IN lake",
        "DESC EXTENDED local.lake.t",
        "DESC local.lake.t col",
        "DESC lake.t",
        "DESC local.lake.t PARTITION (dt='1')",
        "SELECT 1",
        "SHOW SCHEMAS IN local -- a comment",
    ],
)
def test_other_forms_go_to_spark(query: str) -> None:
    assert recognize("sql", query, DS, None) is None


def test_show_flint_index_is_recognized_from_the_flint_parse() -> None:
    statement = parse("SHOW FLINT INDEXES EXTENDED IN local.lake")
    assert recognize("sql", "...", DS, statement) == ShowFlintIndex("lake", True)
    assert recognize("sql", "...", DS, parse("SHOW FLINT INDEX IN glue")) is None
    assert recognize("ppl", "SHOW SCHEMAS IN local", DS, None) is None


# -- Spark's printing -------------------------------------------------------------------------------


def test_types_print_as_spark_prints_them() -> None:
    schema = struct_from_json(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "integer", "nullable": False, "metadata": {}},
                {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}, "nullable": True, "metadata": {}},
                {"name": "c", "type": "string", "nullable": True, "metadata": {"__CHAR_VARCHAR_TYPE_STRING": "char(3)"}},
                {"name": "a", "type": {"type": "array", "elementType": {"type": "struct", "fields": [{"name": "x", "type": "decimal(10,2)", "nullable": True, "metadata": {}}]}, "containsNull": False}, "nullable": True, "metadata": {"comment": "arr"}},
            ],
        }
    )
    assert [simple_string(f.type) for f in schema.fields] == ["int", "map<string,bigint>", "char(3)", "array<struct<x:decimal(10,2)>>"]
    assert schema.fields[3].comment == "arr"
    assert tree_string(schema) == (
        "root\n"
        " |-- id: integer (nullable = false)\n"
        " |-- m: map (nullable = true)\n"
        " |    |-- key: string\n"
        " |    |-- value: long (valueContainsNull = true)\n"
        " |-- c: string (nullable = true)\n"
        " |-- a: array (nullable = true)\n"
        " |    |-- element: struct (containsNull = false)\n"
        " |    |    |-- x: decimal(10,2) (nullable = true)\n"
    )


def test_hive_type_strings_read_as_spark_reads_them() -> None:
    assert simple_string(parse_hive_type("array<struct<a:int,b:map<string,bigint>>>")) == "array<struct<a:int,b:map<string,bigint>>>"
    assert simple_string(parse_hive_type("decimal")) == "decimal(10,0)"
    assert simple_string(parse_hive_type("varchar(9)")) == "varchar(9)"
    with pytest.raises(UnrepresentableError):
        parse_hive_type("uniontype<int,string>")
    with pytest.raises(UnrepresentableError):
        from_json({"type": "udt", "class": "x"})


def test_a_wide_struct_is_truncated_as_spark_truncates_it() -> None:
    wide = parse_hive_type("struct<" + ",".join(f"f{i}:int" for i in range(30)) + ">")
    assert simple_string(wide) == "struct<" + ",".join(f"f{i}:int" for i in range(24)) + ",... 6 more fields>"


SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "amount", "type": "double", "nullable": True, "metadata": {"comment": "money"}},
            {"name": "region", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
#: A partitioned parquet table as Spark 4 writes it into the metastore.
SALES = RawTable(
    database="default",
    name="sales",
    table_type="MANAGED_TABLE",
    owner="root",
    create_time=1795783567,
    parameters={
        "spark.sql.sources.schema.numPartCols": "1",
        "spark.sql.sources.schema.partCol.0": "region",
        "transient_lastDdlTime": "1795783572",
        "comment": "sales table",
        "spark.sql.sources.schema": SCHEMA,
        "spark.sql.partitionProvider": "catalog",
        "spark.sql.sources.provider": "parquet",
        "spark.sql.create.version": "4.3.0",
    },
    columns=(Column("id", "int"), Column("amount", "double", "money")),
    partition_keys=(Column("region", "string"),),
    location="file:/w/sales",
    input_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    output_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    serde_library="org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
    serde_parameters={"serialization.format": "1", "path": "file:/w/sales"},
)


def test_show_table_extended_information_of_a_partitioned_data_source_table() -> None:
    """Spark 4.3's own text for this table (as the end-to-end tests check against a live job)."""
    assert information(spark_view(SALES)) == (
        "Catalog: spark_catalog\nDatabase: default\nTable: sales\nOwner: root\n"
        "Created Time: Fri Nov 27 12:46:07 UTC 2026\nLast Access: UNKNOWN\nCreated By: Spark 4.3.0\n"
        "Type: MANAGED\nProvider: parquet\nComment: sales table\nLocation: file:/w/sales\n"
        "Serde Library: org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe\n"
        "InputFormat: org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat\n"
        "OutputFormat: org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat\n"
        "Partition Provider: Catalog\nPartition Columns: [`region`]\n"
        "Schema: root\n |-- id: integer (nullable = true)\n |-- amount: double (nullable = true)\n"
        " |-- region: string (nullable = true)\n\n"
    )
    assert describe_rows(spark_view(SALES)) == [
        ("id", "int", None),
        ("amount", "double", "money"),
        ("region", "string", None),
        ("# Partition Information", "", ""),
        ("# col_name", "data_type", "comment"),
        ("region", "string", None),
    ]


def test_a_hive_table_made_outside_spark_reads_as_spark_reads_it() -> None:
    raw = RawTable(
        database="lake",
        name="outside",
        table_type="EXTERNAL_TABLE",
        create_time=0,
        parameters={"EXTERNAL": "TRUE", "numRows": "3", "totalSize": "90", "owner_note": "x"},
        columns=(Column("a", "int"), Column("b", "varchar(4)", "bee")),
        partition_keys=(Column("dt", "string"),),
        location="file:/w/outside",
        serde_library="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
        serde_parameters={"serialization.format": "1"},
    )
    text = information(spark_view(raw))
    assert "Created By: Spark 2.2 or prior\nType: EXTERNAL\nProvider: hive\n" in text
    assert "Table Properties: [owner_note=x]\nStatistics: 90 bytes, 3 rows\n" in text
    assert "Storage Properties: [serialization.format=1]\nPartition Provider: Catalog\nPartition Columns: [`dt`]\n" in text
    assert " |-- b: string (nullable = true)\n" in text
    assert describe_rows(spark_view(raw))[1] == ("b", "varchar(4)", "bee")


def test_what_spark_would_print_in_hash_order_is_left_to_spark() -> None:
    raw = RawTable(
        database="d", name="t", table_type="MANAGED_TABLE", serde_parameters={"a": "1", "b": "2"}, parameters={}
    )
    with pytest.raises(UnrepresentableError):
        spark_view(raw)
    with pytest.raises(UnrepresentableError):
        spark_view(RawTable(database="d", name="t", table_type="INDEX_TABLE"))


def test_dates_print_as_java_dates_in_utc() -> None:
    assert java_date(1795783570000) == "Fri Nov 27 12:46:10 UTC 2026"
    assert java_date(0) == "Thu Jan 01 00:00:00 UTC 1970"


# -- the change log ---------------------------------------------------------------------------------


def test_the_change_log_numbers_its_entries_and_keeps_the_last_ones() -> None:
    store = Store.in_memory()
    assert store.catalog_changes.get(DS) is None
    for i in range(KEEP + 5):
        assert store.catalog_changes.record(DS, [CatalogChange(database="d", table=f"t{i}")], f"q{i}") == i + 1
    found = store.catalog_changes.get(DS)
    assert found is not None
    doc = found[0]
    assert doc.version == KEEP + 5 and len(doc.entries) == KEEP
    assert [e.query_id for e in doc.since(KEEP + 3) or []] == [f"q{KEEP + 3}", f"q{KEEP + 4}"]
    assert doc.since(KEEP + 5) == []
    assert doc.since(1) is None  # entries 2..5 are no longer kept: the reader forgets everything


# -- the read model ---------------------------------------------------------------------------------


def table(database: str, name: str, comment: str = "") -> RawTable:
    params = {"spark.sql.sources.provider": "parquet", "spark.sql.create.version": "4.3.0"}
    params["spark.sql.sources.schema"] = json.dumps(
        {"type": "struct", "fields": [{"name": "id", "type": "integer", "nullable": True, "metadata": {}}]}
    )
    if comment:
        params["comment"] = comment
    return RawTable(database=database, name=name, table_type="MANAGED_TABLE", create_time=1, parameters=params)


@dataclass
class StandIn:
    """An in-memory catalog behind the reader interface, counting what it is asked."""

    dbs: dict[str, dict[str, RawTable]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    follows: bool = False
    log: list[Change] = field(default_factory=list)

    def databases(self) -> list[str]:
        self.calls.append("databases")
        return sorted(self.dbs)

    def table_names(self, database: str) -> list[str] | None:
        self.calls.append(f"names {database}")
        return sorted(self.dbs[database]) if database in self.dbs else None

    def tables(self, database: str, names: Sequence[str]) -> list[RawTable]:
        self.calls.append(f"tables {database} {','.join(names)}")
        return [self.dbs[database][n] for n in names if n in self.dbs.get(database, {})]

    def follows_changes(self) -> bool:
        return self.follows

    def changes_since(self, position: int | None) -> tuple[list[Change], int]:
        if position is None:
            return [], len(self.log)
        return self.log[position:], len(self.log)

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def model_over(catalog: StandIn, store: Store, clock: Clock, **kwargs: object) -> CatalogReadModel:
    location = CatalogLocation("hive", "thrift://stand-in:9083")
    return CatalogReadModel(
        store,
        lambda _: None,
        reader_for=lambda *_: catalog,
        locate=lambda *_: location,
        clock=clock,
        staleness_s=30.0,
        **kwargs,  # type: ignore[arg-type]
    )


def listed(model: CatalogReadModel, database: str = "lake") -> list[str]:
    answer = model.answer(local_datasource(DS), ShowTables(database, extended=True))
    assert answer is not None
    return [row[1] for row in answer.rows]


def test_tables_are_fetched_once_in_a_batch_and_served_from_the_cache() -> None:
    catalog = StandIn({"lake": {"a": table("lake", "a"), "b": table("lake", "b")}})
    model = model_over(catalog, Store.in_memory(), Clock())
    assert listed(model) == ["a", "b"]
    assert listed(model) == ["a", "b"]
    assert catalog.calls == ["names lake", "tables lake a,b"]
    described = model.answer(local_datasource(DS), Describe("lake", "a"))
    assert described is not None and described.rows == [("id", "int", None)]
    assert catalog.calls == ["names lake", "tables lake a,b"]  # DESC found the table held


def test_changes_behind_the_services_back_show_within_the_staleness_bound_and_not_before() -> None:
    clock = Clock()
    catalog = StandIn({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, Store.in_memory(), clock)
    assert listed(model) == ["a"]
    catalog.dbs["lake"]["b"] = table("lake", "b")  # another client's CREATE TABLE
    clock.now += 30.0
    assert listed(model) == ["a"]  # within the bound: the cached list
    clock.now += 0.001
    assert listed(model) == ["a", "b"]  # past it: fetched again, never staler


def test_a_change_through_the_service_invalidates_exactly_what_it_names() -> None:
    store = Store.in_memory()
    catalog = StandIn({"lake": {"a": table("lake", "a")}, "other": {"x": table("other", "x")}})
    model = model_over(catalog, store, Clock())
    assert listed(model) == ["a"] and listed(model, "other") == ["x"]
    catalog.dbs["lake"]["b"] = table("lake", "b")
    catalog.dbs["lake"]["a"] = table("lake", "a", comment="altered")
    catalog.calls.clear()
    store.catalog_changes.record(DS, [CatalogChange(database="lake", table="b"), CatalogChange(database="lake", table="a")])
    assert listed(model) == ["a", "b"]
    assert listed(model, "other") == ["x"]
    assert catalog.calls == ["names lake", "tables lake a,b"]  # "other" untouched
    answer = model.answer(local_datasource(DS), ShowTables("lake", extended=True))
    assert answer is not None and "Comment: altered" in answer.rows[0][3]
    # A database's change drops its tables and the database list.
    catalog.dbs["new"] = {}
    store.catalog_changes.record(DS, [CatalogChange(database="new")])
    schemas = model.answer(local_datasource(DS), ShowSchemas())
    assert schemas is not None and ("new",) in schemas.rows


def test_a_reader_that_missed_log_entries_forgets_the_whole_catalog() -> None:
    store = Store.in_memory()
    catalog = StandIn({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, store, Clock())
    assert listed(model) == ["a"]
    catalog.dbs["lake"]["b"] = table("lake", "b")
    for i in range(KEEP + 1):
        store.catalog_changes.record(DS, [CatalogChange(database="elsewhere", table=f"t{i}")])
    assert listed(model) == ["a", "b"]


def test_a_catalog_that_keeps_its_own_log_is_followed_and_never_expires() -> None:
    clock = Clock()
    catalog = StandIn({"lake": {"a": table("lake", "a")}}, follows=True)
    model = model_over(catalog, Store.in_memory(), clock)
    assert listed(model) == ["a"]
    clock.now += 3600
    assert listed(model) == ["a"]
    assert catalog.calls == ["names lake", "tables lake a"]  # no refetch by age
    catalog.dbs["lake"]["b"] = table("lake", "b")
    catalog.log.append(Change("lake", "b"))
    assert listed(model) == ["a", "b"]


def test_a_listing_browsed_recently_is_refreshed_before_it_expires() -> None:
    clock = Clock()
    catalog = StandIn({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, Store.in_memory(), clock, keep_warm_s=300.0)
    assert listed(model) == ["a"]
    clock.now += 24.0
    assert model.due() == []  # not yet within the lead (5 s) of the bound (30 s)
    catalog.dbs["lake"]["b"] = table("lake", "b")  # another client's CREATE TABLE
    clock.now += 1.0
    [asked] = model.due()
    assert model.refresh(asked)
    assert model.due() == []
    catalog.calls.clear()
    clock.now += 29.0  # 54 s after the first fetch, 29 s after the refresh began
    assert listed(model) == ["a", "b"]  # the refreshed listing, never older than the bound
    assert catalog.calls == []  # from the cache: no cold fetch paid again


def test_the_keeper_refreshes_what_is_due_in_its_round() -> None:
    clock = Clock()
    catalog = StandIn({"lake": {"a": table("lake", "a")}, "other": {"x": table("other", "x")}})
    model = model_over(catalog, Store.in_memory(), clock, keep_warm_s=300.0)
    keeper = CatalogKeepWarm(model)
    assert listed(model) == ["a"]
    clock.now += 20.0
    assert listed(model, "other") == ["x"]
    catalog.calls.clear()
    keeper.run_once()
    assert catalog.calls == [] and keeper.refreshed == 0
    clock.now += 5.0  # "lake" is 25 s old, "other" 5 s
    keeper.run_once()
    assert catalog.calls == ["names lake", "tables lake a"] and keeper.refreshed == 1


def test_listings_not_browsed_within_the_window_are_not_kept_warm() -> None:
    clock = Clock()
    catalog = StandIn({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, Store.in_memory(), clock, keep_warm_s=60.0)
    assert listed(model) == ["a"]
    clock.now += 61.0
    assert model.due() == []
    off = model_over(StandIn({"lake": {"a": table("lake", "a")}}), Store.in_memory(), clock)
    assert listed(off) == ["a"]
    clock.now += 100.0
    assert off.due() == []  # keep_warm_s=0: nothing is kept warm
    follows = model_over(StandIn({"lake": {"a": table("lake", "a")}}, follows=True), Store.in_memory(), clock, keep_warm_s=300.0)
    assert listed(follows) == ["a"]
    clock.now += 100.0
    assert follows.due() == []  # a followed catalog's entries never expire


def test_a_refresh_overlapped_by_an_invalidation_is_dropped() -> None:
    store = Store.in_memory()
    clock = Clock()

    class ChangedMeanwhile(StandIn):
        def tables(self, database: str, names: Sequence[str]) -> list[RawTable]:
            fetched = super().tables(database, names)
            # ALTER TABLE through the service, committed after the fetch read the old table
            self.dbs["lake"]["a"] = table("lake", "a", comment="altered")
            store.catalog_changes.record(DS, [CatalogChange(database="lake", table="a")])
            return fetched

    catalog = ChangedMeanwhile({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, store, clock, keep_warm_s=300.0)
    assert listed(model) == ["a"]
    clock.now += 26.0
    [asked] = model.due()
    assert not model.refresh(asked)
    answer = model.answer(local_datasource(DS), ShowTables("lake", extended=True))
    assert answer is not None and "Comment: altered" in answer.rows[0][3]


def test_a_catalog_out_of_reach_is_not_asked_again_at_once_by_the_keeper() -> None:
    clock = Clock()

    class Down(StandIn):
        down = False

        def table_names(self, database: str) -> list[str] | None:
            if self.down:
                raise CatalogUnavailableError("down")
            return super().table_names(database)

    catalog = Down({"lake": {"a": table("lake", "a")}})
    model = model_over(catalog, Store.in_memory(), clock, keep_warm_s=300.0)
    assert listed(model) == ["a"]
    catalog.down = True
    clock.now += 26.0
    [asked] = model.due()
    assert not model.refresh(asked)
    assert model.due() == []  # backs off (a third of the bound)
    clock.now += 10.0
    assert model.due() == [asked]


def test_the_cache_is_bounded_in_bytes() -> None:
    big = {f"t{i}": table("lake", f"t{i}") for i in range(50)}
    catalog = StandIn({"lake": big})
    model = model_over(catalog, Store.in_memory(), Clock(), max_bytes=4000)
    assert len(listed(model)) == 50
    assert model.cache.size <= 4000
    catalog.calls.clear()
    assert len(listed(model)) == 50
    assert catalog.calls and catalog.calls[-1].startswith("tables lake")  # what did not fit is fetched again


def test_unknown_databases_and_tables_go_to_spark() -> None:
    model = model_over(StandIn({"lake": {}}), Store.in_memory(), Clock())
    assert model.answer(local_datasource(DS), ShowTables("nope", extended=True)) is None
    assert model.answer(local_datasource(DS), Describe("lake", "nope")) is None
    assert model.answer(local_datasource(DS), ShowTables("global_temp", extended=False)) is None
