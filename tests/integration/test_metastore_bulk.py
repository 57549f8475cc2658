"""The embedded metastore's bulk reads (async_query/embedded/MetastoreTables.java, read by
async_query/catalog/bulk.py): a database's tables read in a few SQL queries are the tables Hive's
own Thrift call gives, table for table and field for field, whatever their shape; a caller without
the token is refused; a reader whose bulk read fails reads through Thrift; a metastore whose bulk
reads cannot start starts without them, on the port its jobs were given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from async_query.catalog.bulk import BulkReadError, TablesEndpoint, read_tables
from async_query.catalog.readers import HiveMetastoreReader
from async_query.embedded import metastore as metastore_module
from async_query.embedded.metastore import Metastore
from async_query.security.job_user import JobUser
from bench.browse import spark_like_table

DB = "lake"


def _hive_table(name: str, **fields: Any) -> Any:
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

    sd = StorageDescriptor(
        cols=fields.pop("cols", [FieldSchema("id", "bigint", "the 'key' \"quoted\" é"), FieldSchema("v", "string", None)]),
        location=fields.pop("location", None),
        inputFormat="org.apache.hadoop.mapred.TextInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
        compressed=fields.pop("compressed", False),
        numBuckets=fields.pop("num_buckets", -1),
        serdeInfo=SerDeInfo(
            serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
            parameters=fields.pop("serde_parameters", {"field.delim": ",", "serialization.format": ","}),
        ),
        bucketCols=fields.pop("bucket_cols", []),
        sortCols=[],
        parameters={},
    )
    return Table(
        tableName=name,
        dbName=DB,
        owner=fields.pop("owner", "analyst"),
        createTime=1_700_000_000,
        lastAccessTime=0,
        parameters=fields.pop("parameters", {"comment": "a table", "empty": ""}),
        partitionKeys=fields.pop("partition_keys", []),
        sd=sd,
        **fields,
    )


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metastore]:
    from pymetastore.hive_metastore.ttypes import Database, FieldSchema

    home = tmp_path_factory.mktemp("bulk")
    started = Metastore.start(home / "ms", home / "warehouse", files=home / "files")
    assert started.tables is not None
    reader = HiveMetastoreReader(started.uri, timeout_s=60)
    location = (home / "warehouse" / f"{DB}.db").as_uri()
    tables = [
        spark_like_table(DB, "parted", f"{location}/parted", partitioned=True),
        spark_like_table(DB, "plain", f"{location}/plain", partitioned=False),
        _hive_table("hive_text", location=f"{location}/hive_text", tableType="MANAGED_TABLE"),
        _hive_table(
            "outside",
            location=f"{location}/x/outside",
            tableType="EXTERNAL_TABLE",
            parameters={"EXTERNAL": "TRUE"},
            compressed=True,
            num_buckets=4,
            bucket_cols=["id"],
            partition_keys=[FieldSchema("dt", "string", "day"), FieldSchema("hr", "int", None)],
        ),
        _hive_table(
            "a_view",
            tableType="VIRTUAL_VIEW",
            viewOriginalText="SELECT id FROM lake.plain",
            viewExpandedText="SELECT `plain`.`id` FROM `lake`.`plain`",
            serde_parameters={},
        ),
        _hive_table("untyped", location=f"{location}/untyped", parameters={"EXTERNAL": "TRUE"}),
        _hive_table("Mixed_Case", location=f"{location}/mixed_case", cols=[]),
    ]
    try:
        reader._call("create_database", Database(name=DB, locationUri=location, parameters={}))
        reader._call("create_database", Database(name="empty", locationUri=f"{location}-empty", parameters={}))
        for table in tables:
            reader._call("create_table", table)
    finally:
        reader.close()
    yield started
    started.close()


def _sorted(tables: list[Any]) -> list[Any]:
    return sorted(tables, key=lambda t: t.name)


def test_bulk_reads_give_the_tables_hives_thrift_call_gives(metastore: Metastore) -> None:
    thrift = HiveMetastoreReader(metastore.uri, timeout_s=60)
    bulk = HiveMetastoreReader(metastore.uri, timeout_s=60, bulk=metastore.tables)
    try:
        names = thrift.table_names(DB)
        assert names == ["a_view", "hive_text", "mixed_case", "outside", "parted", "plain", "untyped"]
        assert metastore.tables is not None
        direct = read_tables(metastore.tables, DB, names, timeout_s=30)
        assert len(direct) == len(names)  # read by the bulk path itself, not a fallback
        expected = _sorted(thrift.tables(DB, names))
        assert _sorted(direct) == expected
        assert _sorted(bulk.tables(DB, names)) == expected
        # Some of them, by any case of their names (Hive keeps them in lower case), and a name it
        # does not hold; the whole database when no names are given.
        some = ["PLAIN", "outside", "nope"]
        assert _sorted(read_tables(metastore.tables, DB, some, timeout_s=30)) == _sorted(thrift.tables(DB, some))
        assert _sorted(read_tables(metastore.tables, DB, None, timeout_s=30)) == expected
        assert read_tables(metastore.tables, "empty", None, timeout_s=30) == []
        assert read_tables(metastore.tables, "no_such_db", ["a"], timeout_s=30) == []
    finally:
        thrift.close()
        bulk.close()


def test_a_caller_without_the_token_is_refused_and_the_reader_falls_back_to_thrift(metastore: Metastore) -> None:
    assert metastore.tables is not None
    forged = TablesEndpoint(metastore.tables.port, "x" * 32)
    with pytest.raises(BulkReadError, match="unauthorized"):
        read_tables(forged, DB, None, timeout_s=30)
    thrift = HiveMetastoreReader(metastore.uri, timeout_s=60)
    falling_back = HiveMetastoreReader(metastore.uri, timeout_s=60, bulk=forged)
    try:
        names = thrift.table_names(DB) or []
        assert _sorted(falling_back.tables(DB, names)) == _sorted(thrift.tables(DB, names))
    finally:
        thrift.close()
        falling_back.close()


def test_a_metastore_whose_bulk_reads_cannot_start_starts_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_source(home: Path, owner: JobUser) -> Path:
        source = home / metastore_module.TABLES_SOURCE
        source.unlink(missing_ok=True)
        source.write_text("this is not Java")
        source.chmod(0o644)
        return source

    monkeypatch.setattr(metastore_module, "_place_source", broken_source)
    launched = Metastore.launch(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files")
    port = launched.port
    try:
        launched.wait_ready()
        assert launched.tables is None and launched.port == port  # the address its jobs were given
        reader = HiveMetastoreReader(launched.uri, timeout_s=60)
        try:
            assert reader.databases() == ["default"]
        finally:
            reader.close()
    finally:
        launched.close()
