"""The catalog read model against Spark: Dashboards' browse statements answered from the embedded
metastore (and from AWS Glue holding the same tables) give exactly the rows a Spark job gives, and
stay true as statements run through the service change the catalog (docs/catalog.md).

Two services share one index and one metastore: ``spark`` answers every statement with a job (its
read model turned off), ``model`` answers the browse statements from its read model (with a
staleness bound of an hour: anything it learns here it learns by invalidation). All Spark answers
come from one interactive session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from async_query.api import create_app
from async_query.catalog.bulk import read_tables
from async_query.catalog.locate import CatalogLocation
from async_query.catalog.readers import GlueReader, HiveMetastoreReader
from async_query.catalog.readmodel import CatalogReadModel
from async_query.catalog.statements import Describe, ShowSchemas, ShowTables
from async_query.catalog.tables import java_date
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.embedded.metastore import Metastore
from async_query.runtime import Plugin, build_plugin
from query_core.ids import datasource_of
from query_core.result_encoding import encode_rows
from tests.e2e.conftest import Api, shared_catalog_service
from tests.support import serve_http, wait_for

pytestmark = pytest.mark.e2e
DS = "local"
DB = "rm_lake"
SETUP = [
    f"CREATE DATABASE IF NOT EXISTS {DS}.{DB} COMMENT 'the read model''s lake'",
    f"CREATE TABLE {DS}.{DB}.sales (id INT, amount DOUBLE COMMENT 'money', region STRING) USING parquet "
    "PARTITIONED BY (region) COMMENT 'sales by region'",
    f"INSERT INTO {DS}.{DB}.sales VALUES (1, 10.5, 'eu'), (2, 20.0, 'us')",
    f"CREATE TABLE {DS}.{DB}.events (id INT, name STRING) USING csv",
    f"CREATE TABLE {DS}.{DB}.clicks (url STRING, n BIGINT) USING json TBLPROPERTIES ('team'='web', 'tier'='gold')",
    f"CREATE TABLE {DS}.{DB}.nested (id INT NOT NULL, ts TIMESTAMP, m MAP<STRING,INT>, "
    "s STRUCT<a:INT,b:ARRAY<STRING>> COMMENT 'nested', d DECIMAL(10,2), c CHAR(3), v VARCHAR(9), b BINARY, "
    "dt DATE, f FLOAT, t TINYINT, sm SMALLINT, bo BOOLEAN) USING parquet",
    f"CREATE TABLE {DS}.{DB}.hive_plain (a INT, b STRING) STORED AS PARQUET",
    f"CREATE TABLE {DS}.{DB}.hive_parts (a INT, b STRING COMMENT 'bee') PARTITIONED BY (dt STRING) STORED AS TEXTFILE",
    f"CREATE TABLE {DS}.{DB}.ctas USING parquet AS SELECT 1 AS x, 'a' AS y",
    f"ANALYZE TABLE {DS}.{DB}.ctas COMPUTE STATISTICS",
    f"CREATE VIEW {DS}.{DB}.eu_sales AS SELECT id, amount FROM {DS}.{DB}.sales WHERE region = 'eu'",
    f"CREATE TABLE {DS}.{DB}.bucketed (k INT, v STRING) USING parquet CLUSTERED BY (k) SORTED BY (v) INTO 4 BUCKETS",
    f"CREATE DATABASE IF NOT EXISTS {DS}.rm_empty",
]
FLINT = [
    f"CREATE SKIPPING INDEX ON {DS}.{DB}.sales (region VALUE_SET, amount MIN_MAX)",
    f"CREATE INDEX by_url ON {DS}.{DB}.clicks (url, n)",
]
BROWSE = [
    f"SHOW SCHEMAS IN {DS}",
    f"SHOW TABLE EXTENDED IN {DS}.{DB} LIKE '*'",
    f"SHOW TABLE EXTENDED IN `{DS}`.`{DB}` LIKE '*'",
    f"SHOW TABLE EXTENDED IN {DS}.rm_empty LIKE '*'",
    f"SHOW TABLES IN {DS}.{DB}",
    *(
        f"DESC {DS}.{DB}.{table}"
        for table in ("sales", "events", "clicks", "nested", "hive_plain", "hive_parts", "ctas", "eu_sales")
    ),
    f"DESCRIBE TABLE `{DS}`.`{DB}`.`sales`",
    f"SHOW FLINT INDEX IN {DS}",
    f"SHOW FLINT INDEXES EXTENDED IN {DS}.{DB}",
]


@pytest.fixture(scope="module")
def services(
    metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, Api, Plugin]]:
    """The two services: ``spark`` and ``model``, over one index and one launcher (so each knows the
    other's jobs, as plugin processes of one deployment do)."""
    tmp = tmp_path_factory.mktemp("read-model")
    with shared_catalog_service(metastore, module_index_url, tmp / "spark", DS, catalog_read_model=False) as (
        spark,
        jobs,
    ):
        settings = jobs.settings.model_copy(update={"catalog_read_model": True, "catalog_staleness_s": 3600.0})
        registry = DatasourceRegistry([jobs.datasources.get(DS)], jobs.store)
        # The metastore is the session's, not the launcher's own: the launcher is told where it
        # answers bulk reads, as it knows for the metastores it runs, so the model reads through them.
        launcher = jobs.launchers.shared["local"]
        launcher.tables_endpoint = lambda metastore_uri: (  # type: ignore[method-assign]
            metastore.tables if metastore_uri == metastore.uri else None
        )
        plugin = build_plugin(settings, jobs.store, registry, dict(jobs.launchers.shared), jobs.opensearch)
        try:
            with serve_http(create_app(plugin)) as url:
                yield spark, Api(url, DS), plugin
        finally:
            plugin.close()


def ok(api: Api, query: str, session: str | None = None) -> tuple[str, dict[str, Any]]:
    submitted, reply = api.run(query, session)
    assert reply["status"] == "SUCCESS", (query, reply)
    return str(submitted.get("sessionId", "")), reply


@pytest.fixture(scope="module")
def session(services: tuple[Api, Api, Plugin]) -> str:
    """The one Spark session of the module, after the catalog is made (tables, views, Flint indexes)."""
    spark, _, _ = services
    session, _ = ok(spark, SETUP[0])
    for query in SETUP[1:]:
        ok(spark, query, session)
    started = [spark.submit(query) for query in FLINT]  # batch jobs, side by side
    for submitted in started:
        reply = spark.wait_status(submitted["queryId"], {"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=240)
        assert reply["status"] == "SUCCESS", reply
    return session


def answered_by_model(plugin: Plugin, query_id: str) -> bool:
    """Whether the read model answered (its result names no job run; a job's always does)."""
    result = plugin.store.results.get(plugin.datasources.get(datasource_of(query_id)).results, query_id)
    return result is not None and result.job_run_id == ""


def test_every_browse_statement_from_the_read_model_equals_spark(
    services: tuple[Api, Api, Plugin], session: str
) -> None:
    spark, model, plugin = services
    for query in BROWSE:
        _, expected = ok(spark, query, session)
        submitted = model.submit(query, session)
        assert submitted["sessionId"] == session
        got = model.get(submitted["queryId"])  # answered at once: no job runs it
        assert got["status"] == "SUCCESS", (query, got)
        assert answered_by_model(plugin, submitted["queryId"]), query
        assert got == expected, query


def test_the_metastores_bulk_reads_give_the_tables_its_thrift_calls_give(metastore: Metastore, session: str) -> None:
    """The tables Spark made (data source and Hive tables, partitioned, bucketed, with statistics,
    a view), read in bulk, are the tables Hive's Thrift call gives (the model above reads them so)."""
    assert metastore.tables is not None
    hive = HiveMetastoreReader(metastore.uri, timeout_s=60)
    try:
        names = hive.table_names(DB) or []
        assert len(names) >= 9
        bulk = read_tables(metastore.tables, DB, names, timeout_s=30)
        assert sorted(bulk, key=lambda t: t.name) == sorted(hive.tables(DB, names), key=lambda t: t.name)
    finally:
        hive.close()


def test_a_bucketed_table_is_left_to_spark_and_still_answered(services: tuple[Api, Api, Plugin], session: str) -> None:
    spark, model, plugin = services
    _, expected = ok(spark, f"DESC {DS}.{DB}.bucketed", session)
    submitted, got = model.run(f"DESC {DS}.{DB}.bucketed", session)
    assert got == expected and not answered_by_model(plugin, submitted["queryId"])


def test_a_create_table_through_the_service_is_listed_by_the_next_show_table_extended(
    services: tuple[Api, Api, Plugin], session: str
) -> None:
    spark, model, plugin = services
    query = f"SHOW TABLE EXTENDED IN {DS}.{DB} LIKE '*'"
    _, before = model.run(query, session)
    assert "fresh" not in {row[1] for row in before["datarows"]}
    ok(spark, f"CREATE TABLE {DS}.{DB}.fresh (id INT) USING parquet", session)
    submitted, after = model.run(query, session)
    assert answered_by_model(plugin, submitted["queryId"])
    assert "fresh" in {row[1] for row in after["datarows"]}
    assert after == ok(spark, query, session)[1]
    # A DROP is seen as well, and the database list follows a new database.
    ok(spark, f"DROP TABLE {DS}.{DB}.fresh", session)
    ok(spark, f"CREATE DATABASE {DS}.rm_later", session)
    assert "fresh" not in {row[1] for row in model.run(query, session)[1]["datarows"]}
    assert ["rm_later"] in model.run(f"SHOW SCHEMAS IN {DS}", session)[1]["datarows"]


def test_a_browse_statement_without_a_session_starts_one_in_the_background(
    services: tuple[Api, Api, Plugin], session: str
) -> None:
    _, model, plugin = services
    submitted = model.submit(f"SHOW SCHEMAS IN {DS}")
    assert model.get(submitted["queryId"])["status"] == "SUCCESS"
    new_session = submitted["sessionId"]
    assert new_session and new_session != session
    # The session's job starts meanwhile: the next query runs in it, warm.
    started = wait_for(lambda: plugin.store.sessions.get(DS, new_session), timeout=60, what="the session document")
    assert started.doc.job_id
    follow, reply = model.run("SELECT 1 AS one", new_session)
    assert follow["sessionId"] == new_session and reply["datarows"] == [[1]]


def test_temporary_views_leave_show_tables_to_the_session(services: tuple[Api, Api, Plugin], session: str) -> None:
    spark, model, plugin = services
    own, _ = ok(spark, "CREATE TEMPORARY VIEW scratch AS SELECT 1 AS one")
    submitted, reply = model.run(f"SHOW TABLES IN {DS}.{DB}", own)
    assert not answered_by_model(plugin, submitted["queryId"])
    assert ["", "scratch", True] in reply["datarows"]


# -- AWS Glue holding the same tables ----------------------------------------------------------------


def glue_input(table: Any) -> dict[str, Any]:
    """A metastore table as the Glue Data Catalog's Hive client writes it (its TableInput)."""
    sd = table.sd

    def columns(cols: Any) -> list[dict[str, Any]]:
        return [{"Name": c.name, "Type": c.type, **({"Comment": c.comment} if c.comment else {})} for c in cols or []]

    storage: dict[str, Any] = {
        "Columns": columns(sd.cols),
        "InputFormat": sd.inputFormat,
        "OutputFormat": sd.outputFormat,
        "Compressed": bool(sd.compressed),
        "NumberOfBuckets": sd.numBuckets,
        "SerdeInfo": {"SerializationLibrary": sd.serdeInfo.serializationLib, "Parameters": sd.serdeInfo.parameters},
        "Parameters": sd.parameters or {},
    }
    if sd.location:
        storage["Location"] = sd.location
    found: dict[str, Any] = {
        "Name": table.tableName,
        "Owner": table.owner,
        "TableType": table.tableType,
        "Parameters": table.parameters,
        "StorageDescriptor": storage,
        "PartitionKeys": columns(table.partitionKeys),
    }
    for key, value in (("ViewOriginalText", table.viewOriginalText), ("ViewExpandedText", table.viewExpandedText)):
        if value is not None:
            found[key] = value
    return found


_CREATED = re.compile(r"Created Time: [^\n]*\n")


def test_glue_holding_the_same_tables_gives_spark_s_rows(
    services: tuple[Api, Api, Plugin], session: str, metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark cannot reach Glue here, so the tables Spark made in the metastore are written to Glue
    (moto) as the Glue Data Catalog's Hive client writes them; the read model over Glue must then
    answer what Spark answered over the metastore, but for the creation time, which Glue sets
    itself (it must be Glue's, printed the same way)."""
    import boto3
    from moto import mock_aws

    spark, _, _ = services
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    hive = HiveMetastoreReader(metastore.uri)
    with mock_aws():
        glue = boto3.client("glue", region_name="us-east-1")
        glue.create_database(DatabaseInput={"Name": DB})
        names = [n for n in hive._call("get_all_tables", DB) if n != "bucketed"]
        for table in hive._call("get_table_objects_by_name", DB, names):
            glue.create_table(DatabaseName=DB, TableInput=glue_input(table))
        created = {t["Name"]: t["CreateTime"] for t in glue.get_tables(DatabaseName=DB)["TableList"]}
        catalog = CatalogLocation("glue", "us-east-1", "arn:aws:iam::123456789012:role/glue")
        model = CatalogReadModel(
            services[2].store, lambda _: None, reader_for=lambda *_: GlueReader(glue), locate=lambda *_: catalog
        )
        ds = local_datasource(DS)
        answer = model.answer(ds, ShowTables(DB, extended=True))
        assert answer is not None
        _, expected = ok(spark, f"SHOW TABLE EXTENDED IN {DS}.{DB} LIKE '*'", session)
        expected_rows = [r for r in expected["datarows"] if r[1] != "bucketed"]
        got_rows = json.loads(encode_rows(answer.columns, answer.rows)[2].datarows)
        assert [_CREATED.sub("", r[3]) for r in got_rows] == [_CREATED.sub("", r[3]) for r in expected_rows]
        assert [r[:3] for r in got_rows] == [r[:3] for r in expected_rows]
        for row in got_rows:
            assert f"Created Time: {java_date(int(created[row[1]].timestamp()) * 1000)}\n" in row[3]
        for table in ("sales", "nested", "hive_parts", "eu_sales"):
            described = model.answer(ds, Describe(DB, table))
            assert described is not None
            rows = json.loads(encode_rows(described.columns, described.rows)[2].datarows)
            assert rows == ok(spark, f"DESC {DS}.{DB}.{table}", session)[1]["datarows"]
        schemas = model.answer(ds, ShowSchemas())
        assert schemas is not None and schemas.rows == [(DB,)]
    hive.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_table_made_directly_in_the_metastore_is_listed_within_the_stated_bound(
    services: tuple[Api, Api, Plugin], metastore: Metastore, session: str
) -> None:
    """Another client creates a table behind the service's back: the read model lists it once its
    list is older than ``catalog_staleness_s``, never later, and not before (the embedded
    metastore keeps no notification log)."""
    from pymetastore.hive_metastore.ttypes import Database, FieldSchema, SerDeInfo, StorageDescriptor, Table

    hive = HiveMetastoreReader(metastore.uri)
    clock = Clock()
    location = CatalogLocation("hive", metastore.uri)
    model = CatalogReadModel(
        services[2].store, lambda _: None, locate=lambda *_: location, clock=clock, staleness_s=30.0
    )
    ds = local_datasource(DS)
    try:
        assert not hive.follows_changes()
        hive._call("create_database", Database(name="rm_behind", description="", locationUri=None, parameters={}))
        first = model.answer(ds, ShowTables("rm_behind", extended=True))
        assert first is not None and first.rows == []
        sd = StorageDescriptor(
            cols=[FieldSchema("a", "int", "from hive")],
            location=(metastore.home / "warehouse" / "rm_behind.db" / "outside").as_uri(),
            inputFormat="org.apache.hadoop.mapred.TextInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
            serdeInfo=SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", parameters={}),
            bucketCols=[],
            sortCols=[],
            parameters={},
        )
        table = Table(
            tableName="outside", dbName="rm_behind", owner="hive", tableType="MANAGED_TABLE", parameters={}, sd=sd,
            partitionKeys=[],
        )
        hive._call("create_table", table)
        clock.now += 30.0
        listed = model.answer(ds, ShowTables("rm_behind", extended=True))
        assert listed is not None and listed.rows == []  # within the bound: the list fetched before
        clock.now += 0.001
        listed = model.answer(ds, ShowTables("rm_behind", extended=True))
        assert listed is not None and [row[1] for row in listed.rows] == ["outside"]
        assert "Created By: Spark 2.2 or prior\nType: MANAGED\nProvider: hive\n" in listed.rows[0][3]
        # ... printed as Spark prints a table it did not make.
        _, expected = ok(services[0], f"SHOW TABLE EXTENDED IN {DS}.rm_behind LIKE '*'", session)
        assert json.loads(encode_rows(listed.columns, listed.rows)[2].datarows) == expected["datarows"]
        described = model.answer(ds, Describe("rm_behind", "outside"))
        assert described is not None
        _, expected = ok(services[0], f"DESC {DS}.rm_behind.outside", session)
        assert json.loads(encode_rows(described.columns, described.rows)[2].datarows) == expected["datarows"]
    finally:
        model.close()
        hive.close()
