"""PySpark data source ``opensearch``: Spark writes a DataFrame into an index and reads one back.

Built on PySpark's own Python data source API (``pyspark.sql.datasource``), so no JVM connector is
needed. All index calls go through the index-administration side of
:class:`query_core.store.IndexClient` (retries, error translation). Options, all strings, use the names of the reference's ``spark.datasource.flint.*``
keys without the prefix:

- ``index`` (required); ``host``, ``port``, ``scheme``, ``auth`` (``noauth|basic|sigv4``),
  ``auth.username``, ``auth.password``, ``region``, ``verifyCerts``, ``retry.max_retries`` and
  ``retry.seconds`` (how long a write retries a failing index);
- ``id_column``: the column whose value is each document's ``_id``. With ids, a retried task
  overwrites what it wrote before, so nothing is lost or duplicated; without, the server picks ids.
  ``id_column_in_source`` (default ``true``): whether that column is also a field of the document;
- ``batch_size`` (documents per ``_bulk`` request, default 1000);
- ``push_filters`` (default ``false``): a read takes the query's filters to the index where an
  index query selects exactly what they keep (:class:`FilteringReader`; needs Spark's
  ``spark.sql.python.filterPushdown.enabled``);
- ``meta`` and ``index_settings``: JSON objects for the mapping's ``_meta`` and the index settings,
  used when the writer creates the index (its mapping is derived from the DataFrame's schema).

Each task (partition) bulk-writes its rows in batches, in parallel with the other tasks. Writing
with ``mode("overwrite")`` empties the index first. Once every task is done the driver refreshes the
index, so that a search sees the whole write at once (a batch, a micro-batch).

Structured Streaming writes micro-batches with the same options and the same code
(``frame.writeStream.format("opensearch").options(...).option("checkpointLocation", ...).start()``):
the index is made on the driver before a micro-batch's tasks write, and each task bulk-writes its
rows. A micro-batch that failed is run again from the checkpoint; with ``id_column`` it overwrites
the documents it wrote before, so nothing is duplicated; without ids its rows are indexed again
(at least once). Output modes:

- ``append`` (the default): every row of a micro-batch is a document;
- ``complete`` (aggregations, materialized views): every micro-batch carries the whole result, and
  with ``id_column`` (the grouping key) it overwrites each key's document, so the index holds one
  document per key with its latest values. It needs ``id_column``: the writer never empties the
  index (Spark makes the stream writer again, on the driver, to commit each micro-batch, after its
  tasks wrote, so emptying it there would lose the batch), and without ids every micro-batch would
  add the whole result again. A key that leaves the result keeps its last document;
- ``update``: Spark (4.3) refuses it for every Python data source ("opensearch does not support
  Update mode"): its write builder does not implement ``SupportsStreamingUpdateAsAppend``. Use
  ``complete`` with ``id_column``, or ``foreachBatch`` with the batch writer and ``id_column``.
  (Without ids it would index each changed row as a new document, a change log of each key.)
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as st
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)

from flint_repl_job.values import Timestamps, to_json_value
from query_core.config import OpenSearchConfig, auth_kind
from query_core.store import IndexAdmin, IndexClient, Range, Term, Terms
from query_core.store.connector import Filter as StoreFilter

log = logging.getLogger(__name__)

NAME = "opensearch"
DEFAULT_BATCH = 1000
#: Date formats of the mapping: what this writer sends, and what OpenSearch itself would.
DATE_FORMAT = "strict_date"
TIMESTAMP_FORMAT = "strict_date_optional_time"


def connection(options: dict[str, str]) -> OpenSearchConfig:
    """The index connection named by the options (the reference's key names)."""
    scheme = options.get("scheme", "http")
    host = options.get("host", "127.0.0.1")
    port = options.get("port", "443" if scheme == "https" else "9200")
    return OpenSearchConfig(
        url=f"{scheme}://{host}:{port}",
        auth=auth_kind(options.get("auth", "noauth")),
        username=options.get("auth.username", ""),
        password=options.get("auth.password", ""),
        region=options.get("region", "us-east-1"),
        verify_certs=options.get("verifyCerts", "true").lower() != "false",
        peer_uid=int(options["peerUid"]) if options.get("peerUid", "").isdigit() else None,
        **_retry_bounds(options),
    )


def _retry_bounds(options: dict[str, str]) -> dict[str, Any]:
    """``retry.max_retries`` (the reference's key) and ``retry.seconds``: how long a write keeps
    retrying a failing index, so a stream rides out an outage as long as its job does."""
    bounds: dict[str, Any] = {}
    if options.get("retry.max_retries"):
        bounds["retry_attempts"] = int(options["retry.max_retries"]) + 1
    if options.get("retry.seconds"):
        bounds["retry_seconds"] = float(options["retry.seconds"])
    return bounds


def source_options(cfg: OpenSearchConfig) -> dict[str, str]:
    """The options naming ``cfg``'s connection (the inverse of :func:`connection`)."""
    options = {
        "scheme": cfg.scheme,
        "host": cfg.host,
        "port": str(cfg.port),
        "auth": cfg.auth,
        "region": cfg.region,
        "verifyCerts": str(cfg.verify_certs).lower(),
        "retry.max_retries": str(max(0, cfg.retry_attempts - 1)),
        "retry.seconds": str(cfg.retry_seconds),
    }
    if cfg.auth == "basic":
        options.update({"auth.username": cfg.username, "auth.password": cfg.password})
    if cfg.peer_uid is not None:
        options["peerUid"] = str(cfg.peer_uid)
    return options


# -- Spark schema <-> index mapping ------------------------------------------------------------

_SIMPLE: dict[type[st.DataType], dict[str, Any]] = {
    st.StringType: {"type": "keyword"},
    st.VarcharType: {"type": "keyword"},
    st.CharType: {"type": "keyword"},
    st.LongType: {"type": "long"},
    st.IntegerType: {"type": "integer"},
    st.ShortType: {"type": "short"},
    st.ByteType: {"type": "byte"},
    st.DoubleType: {"type": "double"},
    st.FloatType: {"type": "float"},
    st.DecimalType: {"type": "double"},
    st.BooleanType: {"type": "boolean"},
    st.BinaryType: {"type": "binary"},
    st.DateType: {"type": "date", "format": DATE_FORMAT},
    st.TimestampType: {"type": "date", "format": TIMESTAMP_FORMAT},
    st.TimestampNTZType: {"type": "date", "format": TIMESTAMP_FORMAT},
}


def field_mapping(data_type: st.DataType) -> dict[str, Any]:
    """The OpenSearch field mapping of a Spark type (an array maps as its element)."""
    if isinstance(data_type, st.StructType):
        return {"properties": {f.name: field_mapping(f.dataType) for f in data_type.fields}}
    if isinstance(data_type, st.ArrayType):
        return field_mapping(data_type.elementType)
    if isinstance(data_type, st.MapType):
        return {"type": "object", "enabled": False}
    for spark_type, mapping in _SIMPLE.items():
        if isinstance(data_type, spark_type):
            return dict(mapping)
    raise ValueError(f"a column of type {data_type.simpleString()} cannot be written to an index")


def index_body(schema: st.StructType, meta: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    mappings: dict[str, Any] = {"properties": field_mapping(schema)["properties"]}
    if meta:
        mappings["_meta"] = meta
    return {"settings": settings, "mappings": mappings} if settings else {"mappings": mappings}


def _spark_type(mapping: dict[str, Any]) -> st.DataType:
    if "properties" in mapping:
        return st.StructType([st.StructField(k, _spark_type(v)) for k, v in mapping["properties"].items()])
    kind = mapping.get("type", "object")
    if kind == "date":
        return st.DateType() if mapping.get("format") == DATE_FORMAT else st.TimestampType()
    simple = {
        "keyword": st.StringType(),
        "text": st.StringType(),
        "long": st.LongType(),
        "integer": st.IntegerType(),
        "short": st.ShortType(),
        "byte": st.ByteType(),
        "double": st.DoubleType(),
        "float": st.FloatType(),
        "boolean": st.BooleanType(),
        "binary": st.BinaryType(),
    }
    return simple.get(kind, st.StringType())


def schema_of(mapping: dict[str, Any]) -> st.StructType:
    """The Spark schema of an index, from its mapping (the inverse of :func:`field_mapping`)."""
    return st.StructType([st.StructField(k, _spark_type(v)) for k, v in mapping.get("properties", {}).items()])


# -- values ----------------------------------------------------------------------------------------


def to_source(value: Any, data_type: st.DataType) -> Any:
    """A Spark value as a JSON value of a document: the job's one value encoder, timestamps in
    ISO 8601 as a ``date`` field takes them (:mod:`flint_repl_job.values`)."""
    return to_json_value(value, data_type, Timestamps.INDEX)


def from_source(value: Any, data_type: st.DataType) -> Any:
    """A document's JSON value as the Python value Spark expects for ``data_type``."""
    if value is None:
        return None
    if isinstance(data_type, st.StructType):
        return tuple(from_source(value.get(f.name), f.dataType) for f in data_type.fields)
    if isinstance(data_type, st.ArrayType):
        values = value if isinstance(value, list) else [value]
        return [from_source(v, data_type.elementType) for v in values]
    if isinstance(data_type, st.TimestampType):
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if isinstance(data_type, st.DateType):
        return dt.date.fromisoformat(str(value)[:10])
    if isinstance(data_type, st.BinaryType):
        return bytearray(base64.b64decode(value))
    if isinstance(data_type, st.StringType) and not isinstance(value, str):
        return json.dumps(value)
    return value


# -- the data source ---------------------------------------------------------------------------------


class OpenSearchDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> st.StructType:
        store = _admin(dict(self.options))
        try:
            return schema_of(store.mappings(self._index()).get(self._index(), {}))
        finally:
            store.close()

    def _index(self) -> str:
        index = self.options.get("index", "")
        if not index:
            raise ValueError("the opensearch data source needs the option 'index'")
        return str(index)

    def writer(self, schema: st.StructType, overwrite: bool) -> OpenSearchWriter:
        return OpenSearchWriter(dict(self.options), self._index(), schema, overwrite)

    def streamWriter(self, schema: st.StructType, overwrite: bool) -> OpenSearchStreamWriter:  # noqa: N802
        return OpenSearchStreamWriter(dict(self.options), self._index(), schema, overwrite)

    def reader(self, schema: st.StructType) -> OpenSearchReader:
        options = dict(self.options)
        if options.get("push_filters", "false").lower() == "true":
            return FilteringReader(options, self._index(), schema)
        return OpenSearchReader(options, self._index(), schema)


@dataclass
class Written(WriterCommitMessage):
    documents: int


class _IndexWrite:
    """What the batch and the stream writers share. Made on the driver: checks the options and makes
    the index (mapping from the schema plus ``_meta``) before any task writes, emptying it first when
    ``empty``; each task then bulk-writes its rows (:meth:`write`)."""

    def __init__(self, options: dict[str, str], index: str, schema: st.StructType, *, empty: bool) -> None:
        self.options = options
        self.index = index
        self.schema = schema
        self.id_column = options.get("id_column", "")
        if self.id_column and self.id_column not in schema.names:
            raise ValueError(f"id_column {self.id_column!r} is not a column of the data ({', '.join(schema.names)})")
        self.id_in_source = options.get("id_column_in_source", "true").lower() != "false"
        self.batch_size = int(options.get("batch_size", DEFAULT_BATCH))
        store = _admin(options)
        try:
            meta = json.loads(options.get("meta", "{}"))
            settings = json.loads(options.get("index_settings", "{}"))
            stored = schema if self.id_in_source or not self.id_column else _without(schema, self.id_column)
            store.create_index(index, index_body(stored, meta, settings))
            if empty:
                store.delete_all(index)
        finally:
            store.close()

    def write(self, iterator: Iterator[st.Row]) -> Written:
        store = _admin(self.options)
        fields = self.schema.fields
        id_at = self.schema.names.index(self.id_column) if self.id_column else -1
        written = 0
        batch: list[tuple[str | None, dict[str, Any]]] = []
        try:
            for row in iterator:
                source = {
                    f.name: to_source(row[i], f.dataType)
                    for i, f in enumerate(fields)
                    if i != id_at or self.id_in_source
                }
                batch.append((str(row[id_at]) if id_at >= 0 else None, source))
                if len(batch) >= self.batch_size:
                    written += store.bulk_index(self.index, batch)
                    batch = []
            if batch:
                written += store.bulk_index(self.index, batch)
        finally:
            store.close()
        return Written(written)


def _make_searchable(options: dict[str, str], index: str) -> None:
    """Refresh ``index`` once a write is committed: a search (a query the index accelerates, a scan of
    what it holds) sees every document written, as soon as the refresh or micro-batch is done,
    not up to a refresh interval later."""
    client = IndexClient(connection(options))
    try:
        client.refresh(index)
    finally:
        client.close()


def _documents(messages: list[WriterCommitMessage | None]) -> int:
    """The documents the tasks reported (a failed task reports None)."""
    return sum(m.documents for m in messages if isinstance(m, Written))


class OpenSearchWriter(_IndexWrite, DataSourceWriter):
    """The batch writer: ``overwrite`` (``mode("overwrite")``) empties the index before the tasks write."""

    def __init__(self, options: dict[str, str], index: str, schema: st.StructType, overwrite: bool) -> None:
        super().__init__(options, index, schema, empty=overwrite)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _make_searchable(self.options, self.index)
        log.info("wrote %d documents to %s", _documents(messages), self.index)


class OpenSearchStreamWriter(_IndexWrite, DataSourceStreamWriter):
    """The micro-batch writer of Structured Streaming.

    Spark makes it on the driver for every micro-batch (before the tasks write: the index is made
    then, a no-op once it exists) and again, in a new Python process, to commit or abort that
    micro-batch. ``overwrite`` is Spark's truncate flag, set in ``complete`` output mode; the index
    is never emptied (see the module's documentation), documents are overwritten by ``id_column``.
    """

    def __init__(self, options: dict[str, str], index: str, schema: st.StructType, overwrite: bool) -> None:
        if overwrite and not options.get("id_column"):
            raise ValueError(
                "the complete output mode writes the whole result every micro-batch: it needs the option "
                "id_column (the grouping key) so that each micro-batch overwrites the documents of the last"
            )
        super().__init__(options, index, schema, empty=False)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _make_searchable(self.options, self.index)
        log.info("micro-batch %d: wrote %d documents to %s", batchId, _documents(messages), self.index)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Log the failed micro-batch; never raises. What its successful tasks wrote stays in the index:
        Spark runs the micro-batch again, which overwrites those documents when there are ids."""
        try:
            done = sum(1 for m in messages if isinstance(m, Written))
            log.warning(
                "micro-batch %d to %s aborted: %d of %d tasks had written %d documents%s",
                batchId,
                self.index,
                done,
                len(messages),
                _documents(messages),
                " (overwritten by id when it runs again)" if self.id_column else " (indexed again when it runs again)",
            )
        except Exception:  # aborting must not hide the failure that caused it
            log.exception("micro-batch %d to %s aborted", batchId, self.index)


def _without(schema: st.StructType, column: str) -> st.StructType:
    return st.StructType([f for f in schema.fields if f.name != column])


class OpenSearchReader(DataSourceReader):
    """Reads the whole index in one partition, as tuples in the schema's column order, asking the
    index for the schema's fields only."""

    def __init__(self, options: dict[str, str], index: str, schema: st.StructType) -> None:
        self.options = options
        self.index = index
        self.schema = schema
        #: Filters of the index query (:class:`FilteringReader`); none: every document.
        self.filters: tuple[StoreFilter, ...] = ()

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        store = _admin(self.options)
        fields = [f.name for f in self.schema.fields]
        try:
            for _, source in store.scan(self.index, fields=fields, filters=self.filters):
                yield tuple(from_source(source.get(f.name), f.dataType) for f in self.schema.fields)
        finally:
            store.close()


class FilteringReader(OpenSearchReader):
    """A reader that takes the query's filters to the index (option ``push_filters``; Spark calls
    :meth:`pushFilters` only with ``spark.sql.python.filterPushdown.enabled``, and refuses a reader
    that has it otherwise, hence a reader of its own).

    Pushed: ``=`` and ``IN`` on string, integer and boolean columns, and ``<``, ``<=``, ``>``,
    ``>=`` on integer columns, whose index queries (``term``, ``terms``, ``range``) select exactly
    the documents Spark's filter keeps. Spark still applies every filter to what is read: the index
    query only narrows what is sent."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - PySpark's name
        types = {f.name: f.dataType for f in self.schema.fields}
        pushed = []
        for item in filters:
            query = index_filter(item, types)
            if query is not None:
                pushed.append(query)
            yield item
        self.filters = tuple(pushed)


_EXACT_TYPES = (st.StringType, st.ByteType, st.ShortType, st.IntegerType, st.LongType, st.BooleanType)
_INTEGER_TYPES = (st.ByteType, st.ShortType, st.IntegerType, st.LongType)
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def index_filter(item: Filter, types: Mapping[str, st.DataType]) -> StoreFilter | None:
    """The index query of one of Spark's pushed filters, or None when it has none that selects
    exactly the same documents."""
    column: tuple[str, ...] = tuple(getattr(item, "attribute", ()))
    if len(column) != 1 or column[0] not in types:
        return None
    name = column[0]
    data_type = types[name]
    if type(data_type) not in _EXACT_TYPES:
        return None
    if isinstance(item, EqualTo) and _scalar(item.value):
        return Term(name, item.value)
    if isinstance(item, In) and item.value and all(_scalar(v) for v in item.value):
        return Terms(name, tuple(item.value))
    if not isinstance(data_type, _INTEGER_TYPES) or isinstance(getattr(item, "value", None), bool):
        return None
    value = getattr(item, "value", None)
    if not isinstance(value, int):
        return None
    bounds = {
        GreaterThan: {"gte": value + 1},
        GreaterThanOrEqual: {"gte": value},
        LessThan: {"lt": value},
        LessThanOrEqual: {"lt": value + 1},
    }.get(type(item))
    if bounds is None or not all(_LONG_MIN <= b <= _LONG_MAX for b in bounds.values()):
        return None
    return Range(name, **bounds)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, bool))


def _admin(options: dict[str, str]) -> IndexAdmin:
    """The cluster the options name, for whole indexes and their contents in bulk."""
    return IndexClient(connection(options)).admin


def register(spark: Any) -> None:
    """Make ``spark.read/write/writeStream.format("opensearch")`` available in this session."""
    spark.dataSource.register(OpenSearchDataSource)
