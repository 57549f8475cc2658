"""Tables, views and partitions written straight into a Hive Metastore through its Thrift API, as
anyone who reaches the metastore's port can write them (Hive's metastore asks for no password),
for the tests of what the job does with what the catalog holds (docs/validation.md)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

TEXT_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"


@contextmanager
def metastore(uri: str) -> Iterator[Any]:
    """A Thrift client of the metastore at ``uri`` (``thrift://host:port``)."""
    from pymetastore.hive_metastore import ThriftHiveMetastore
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    parts = urlsplit(uri.split(",")[0])
    socket = TSocket.TSocket(parts.hostname, parts.port or 9083)
    socket.setTimeout(60_000)
    transport = TTransport.TBufferedTransport(socket)
    transport.open()
    try:
        yield ThriftHiveMetastore.Client(TBinaryProtocol(transport))
    finally:
        transport.close()


def copy_table(client: Any, source: Any, name: str) -> None:
    """``source`` (a table as another metastore returned it) created as the external table
    ``default.<name>``, keeping its location: another datasource's data under a name of this one."""
    table = copy.deepcopy(source)
    table.dbName, table.tableName = "default", name
    table.tableType = "EXTERNAL_TABLE"
    table.parameters = {**(table.parameters or {}), "EXTERNAL": "TRUE"}
    table.createTime = int(time.time())
    client.create_table(table)


def text_table(client: Any, name: str, location: str) -> None:
    """An external Hive text table ``default.<name>`` (one string column) located at ``location``."""
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

    client.create_table(
        Table(
            tableName=name,
            dbName="default",
            owner="planted",
            createTime=int(time.time()),
            lastAccessTime=0,
            tableType="EXTERNAL_TABLE",
            parameters={"EXTERNAL": "TRUE"},
            partitionKeys=[],
            sd=StorageDescriptor(
                cols=[FieldSchema("line", "string", None)],
                location=location,
                inputFormat=TEXT_INPUT,
                outputFormat=TEXT_OUTPUT,
                compressed=False,
                numBuckets=-1,
                serdeInfo=SerDeInfo(serializationLib=TEXT_SERDE, parameters={"serialization.format": "1"}),
                bucketCols=[],
                sortCols=[],
                parameters={},
            ),
        )
    )


def view(client: Any, name: str, text: str, columns: list[tuple[str, str]]) -> None:
    """A view ``default.<name>`` whose text is ``text``, as Hive stores one."""
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

    client.create_table(
        Table(
            tableName=name,
            dbName="default",
            owner="planted",
            createTime=int(time.time()),
            lastAccessTime=0,
            tableType="VIRTUAL_VIEW",
            viewOriginalText=text,
            viewExpandedText=text,
            parameters={},
            partitionKeys=[],
            sd=StorageDescriptor(
                cols=[FieldSchema(column, kind, None) for column, kind in columns],
                location=None,
                inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
                outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
                compressed=False,
                numBuckets=-1,
                serdeInfo=SerDeInfo(serializationLib=None, parameters={}),
                bucketCols=[],
                sortCols=[],
                parameters={},
            ),
        )
    )


def partition(client: Any, table: str, values: list[str], location: str) -> None:
    """A partition of ``default.<table>`` with the partition values ``values`` located at
    ``location`` (its storage copied from the table's)."""
    from pymetastore.hive_metastore.ttypes import Partition

    found = client.get_table("default", table)
    storage = copy.deepcopy(found.sd)
    storage.location = location
    now = int(time.time())
    client.add_partition(
        Partition(
            values=values,
            dbName="default",
            tableName=table,
            createTime=now,
            lastAccessTime=now,
            sd=storage,
            parameters={},
        )
    )
