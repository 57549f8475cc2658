"""A table as a metastore keeps it (:class:`RawTable`, the Hive metastore's shape, which the AWS
Glue Data Catalog's Hive client also produces), what Spark makes of it when it reads it back
(:func:`spark_view`, after Spark's ``HiveClientImpl`` and ``HiveExternalCatalog``), and the two
browse answers that print it: SHOW TABLE EXTENDED's ``information`` and DESC's rows.

Spark prints these from its own ``CatalogTable``; the rules here are the ones it follows, and the
tests hold the two to equality on a real metastore. What could not be printed exactly (an unknown
table type, storage properties whose order Spark leaves to a hash map, clustering, collations,
names or paths that Spark would encode) raises :class:`UnrepresentableError`: the statement then goes
to Spark.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from functools import cached_property

from async_query.catalog.spark_types import (
    Field,
    Struct,
    UnrepresentableError,
    from_hive_column,
    simple_string,
    struct_from_json,
    tree_string,
)

__all__ = ["RawTable", "SparkTable", "UnrepresentableError", "describe_rows", "information", "spark_view"]

#: The catalog name SHOW TABLE EXTENDED prints: the job runs the datasource's name as Spark's
#: session catalog (docs/flint.md).
SESSION_CATALOG = "spark_catalog"
_SPARK_SQL = "spark.sql."
_SCHEMA = "spark.sql.sources.schema"
_PROVIDER = "spark.sql.sources.provider"
_VERSION = "spark.sql.create.version"
_PARTITION_PROVIDER = "spark.sql.partitionProvider"
_STATS = "spark.sql.statistics."
#: Hive's statistics properties, which Spark reads as statistics and does not list.
_HIVE_STATS = {"COLUMN_STATS_ACCURATE", "numFiles", "numPartitions", "numRows", "rawDataSize", "totalSize"}
_TABLE_TYPES = {"MANAGED_TABLE": "MANAGED", "EXTERNAL_TABLE": "EXTERNAL", "VIRTUAL_VIEW": "VIEW"}
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_./:=@+,-]*")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    comment: str | None = None


@dataclass(frozen=True)
class RawTable:
    """A table as the metastore returns it (times in seconds, as Hive keeps them)."""

    database: str
    name: str
    table_type: str
    owner: str = ""
    create_time: int = 0
    last_access_time: int = 0
    parameters: dict[str, str] = field(default_factory=dict)
    columns: tuple[Column, ...] = ()
    partition_keys: tuple[Column, ...] = ()
    location: str | None = None
    input_format: str | None = None
    output_format: str | None = None
    compressed: bool = False
    num_buckets: int = -1
    serde_library: str | None = None
    serde_parameters: dict[str, str] = field(default_factory=dict)
    view_original_text: str | None = None
    view_expanded_text: str | None = None

    @cached_property
    def spark(self) -> SparkTable:
        """:func:`spark_view` of this table, worked out once: the cache serves a table many times."""
        return spark_view(self)

    def weight(self) -> int:
        """About how many bytes this table holds (the cache's bound)."""
        texts = [*self.parameters, *self.parameters.values(), *self.serde_parameters, *self.serde_parameters.values()]
        texts += [c.name + c.type + (c.comment or "") for c in (*self.columns, *self.partition_keys)]
        texts += [self.location or "", self.view_original_text or "", self.view_expanded_text or ""]
        return 200 + sum(len(t) for t in texts)


@dataclass(frozen=True)
class SparkTable:
    """What Spark's ``CatalogTable`` holds of a table, as far as the browse answers print it."""

    database: str
    name: str
    table_type: str
    owner: str
    create_time_ms: int
    last_access_ms: int
    create_version: str
    provider: str | None
    comment: str | None
    bucket: tuple[int, list[str], list[str]] | None
    properties: dict[str, str]
    stats: tuple[int, int | None] | None
    view_text: str | None
    view_original_text: str | None
    location: str | None
    serde: str | None
    input_format: str | None
    output_format: str | None
    compressed: bool
    storage_properties: dict[str, str]
    tracks_partitions: bool
    partition_columns: list[str]
    schema: Struct


def spark_view(raw: RawTable) -> SparkTable:
    """``raw`` as Spark reads it back (``HiveClientImpl`` then ``HiveExternalCatalog.restoreTableMetadata``)."""
    table_type = _TABLE_TYPES.get(raw.table_type)
    if table_type is None:
        raise UnrepresentableError(f"table type {raw.table_type}")
    params = dict(raw.parameters)
    if any("collation" in key.lower() for key in params) or "clusteringColumns" in params:
        raise UnrepresentableError("clustering or collation")
    comment = params.get("comment")
    kept = {k: v for k, v in params.items() if k not in _HIVE_STATS and k not in ("comment", "EXTERNAL")}
    provider = params.get(_PROVIDER)
    storage = dict(raw.serde_parameters)
    location = raw.location
    hive_schema = Struct(
        tuple(from_hive_column(c.name, c.type, c.comment) for c in (*raw.columns, *raw.partition_keys))
    )
    schema_from_props = _schema_from_properties(params)
    partition_columns = _listed(params, "spark.sql.sources.schema.numPartCols", "spark.sql.sources.schema.partCol.")
    tracks = False
    if table_type == "VIEW" and provider is None:
        schema = schema_from_props or hive_schema
        partition_columns = [c.name for c in raw.partition_keys]
    elif provider is None:  # a Hive serde table
        provider = "hive"
        tracks = True
        if schema_from_props is not None:
            schema = _reordered(schema_from_props, partition_columns)
        else:
            schema, partition_columns = hive_schema, [c.name for c in raw.partition_keys]
    else:  # a data source table: its location is the ``path`` option
        path = next((v for k, v in storage.items() if k.lower() == "path"), None)
        storage = {k: v for k, v in storage.items() if k.lower() != "path" and k != "serialization.format"}
        location = path
        schema = _reordered(schema_from_props or Struct(()), partition_columns)
        tracks = params.get(_PARTITION_PROVIDER) == "catalog"
        kept.pop("transient_lastDdlTime", None)
    if len(storage) > 1:
        raise UnrepresentableError("several storage properties (Spark prints them in hash order)")
    for text in (location, *storage.values(), *storage):
        if text is not None and not _SAFE_TEXT.fullmatch(text):
            raise UnrepresentableError("a location or storage property Spark would encode")
    return SparkTable(
        database=raw.database,
        name=raw.name,
        table_type=table_type,
        owner=raw.owner,
        create_time_ms=raw.create_time * 1000,
        last_access_ms=raw.last_access_time * 1000,
        create_version=params.get(_VERSION, "2.2 or prior"),
        provider=provider if table_type != "VIEW" else None,
        comment=comment,
        bucket=_bucket(params),
        properties={k: v for k, v in kept.items() if not k.startswith(_SPARK_SQL)},
        stats=_stats(params),
        view_text=raw.view_expanded_text,
        view_original_text=raw.view_original_text,
        location=location,
        serde=raw.serde_library,
        input_format=raw.input_format,
        output_format=raw.output_format,
        compressed=raw.compressed,
        storage_properties=storage,
        tracks_partitions=tracks,
        partition_columns=partition_columns,
        schema=schema,
    )


def _large_property(params: dict[str, str], key: str) -> str | None:
    """``CatalogTable.readLargeTableProp``: a value split into ``.numParts`` and ``.part.N``."""
    if key in params:
        return params[key]
    parts = params.get(f"{key}.numParts")
    if parts is None:
        return None
    return "".join(params[f"{key}.part.{i}"] for i in range(int(parts)))


def _schema_from_properties(params: dict[str, str]) -> Struct | None:
    text = _large_property(params, _SCHEMA)
    return struct_from_json(json.loads(text)) if text is not None else None


def _listed(params: dict[str, str], count_key: str, item_prefix: str) -> list[str]:
    return [params[f"{item_prefix}{i}"] for i in range(int(params.get(count_key, "0")))]


def _reordered(schema: Struct, partition_columns: list[str]) -> Struct:
    """Partition columns last, as Spark reorders a schema read from properties."""
    by_name = {f.name: f for f in schema.fields}
    try:
        partitions = [by_name[name] for name in partition_columns]
    except KeyError as exc:
        raise UnrepresentableError("partition column missing from the schema") from exc
    return Struct(tuple(f for f in schema.fields if f.name not in partition_columns) + tuple(partitions))


def _bucket(params: dict[str, str]) -> tuple[int, list[str], list[str]] | None:
    buckets = params.get("spark.sql.sources.schema.numBuckets")
    if buckets is None:
        return None
    columns = _listed(params, "spark.sql.sources.schema.numBucketCols", "spark.sql.sources.schema.bucketCol.")
    sorts = _listed(params, "spark.sql.sources.schema.numSortCols", "spark.sql.sources.schema.sortCol.")
    return int(buckets), columns, sorts


def _stats(params: dict[str, str]) -> tuple[int, int | None] | None:
    """Spark's statistics from its properties, else Hive's (``HiveClientImpl.readHiveStats``)."""
    if any(k.startswith(_STATS) for k in params):
        if any(k.startswith(_STATS + "colStats.") for k in params):
            raise UnrepresentableError("column statistics")
        counted = params.get(_STATS + "numRows")
        return int(params[_STATS + "totalSize"]), int(counted) if counted is not None else None
    total, raw_size, row_count = (params.get(k) or "" for k in ("totalSize", "rawDataSize", "numRows"))
    rows = int(row_count) if row_count and int(row_count) > 0 else None
    if total and int(total) > 0:
        return int(total), rows
    if raw_size and int(raw_size) > 0:
        return int(raw_size), rows
    return None


# -- printing ---------------------------------------------------------------------------------


def java_date(millis: int) -> str:
    """``java.util.Date.toString`` in UTC (the jobs' time zone): ``Fri Nov 27 12:46:10 UTC 2026``."""
    t = time.gmtime(millis // 1000)
    return f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _quote_if_needed(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else _quote(name)


def _pairs(values: dict[str, str]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in values.items()) + "]"


def information(table: SparkTable) -> str:
    """SHOW TABLE EXTENDED's ``information`` (``CatalogTable.simpleString`` and a new line)."""
    lines = [("Catalog", SESSION_CATALOG), ("Database", table.database), ("Table", table.name)]
    if table.owner:
        lines.append(("Owner", table.owner))
    lines.append(("Created Time", java_date(table.create_time_ms)))
    lines.append(("Last Access", "UNKNOWN" if table.last_access_ms <= 0 else java_date(table.last_access_ms)))
    lines += [("Created By", f"Spark {table.create_version}"), ("Type", table.table_type)]
    if table.provider is not None:
        lines.append(("Provider", table.provider))
    if table.bucket is not None:
        buckets, columns, sorts = table.bucket
        lines.append(("Num Buckets", str(buckets)))
        lines.append(("Bucket Columns", "[" + ", ".join(map(_quote, columns)) + "]"))
        lines.append(("Sort Columns", "[" + ", ".join(map(_quote, sorts)) + "]"))
    if table.comment is not None:
        lines.append(("Comment", table.comment))
    lines += _view_lines(table)
    shown = {k: v for k, v in sorted(table.properties.items()) if not k.startswith("view.") and v}
    if shown:
        lines.append(("Table Properties", _pairs(shown)))
    if table.stats is not None:
        size, rows = table.stats
        lines.append(("Statistics", f"{size} bytes" + (f", {rows} rows" if rows is not None else "")))
    lines += _storage_lines(table)
    if table.tracks_partitions:
        lines.append(("Partition Provider", "Catalog"))
    if table.partition_columns:
        lines.append(("Partition Columns", "[" + ", ".join(map(_quote, table.partition_columns)) + "]"))
    if table.schema.fields:
        lines.append(("Schema", tree_string(table.schema)))
    return "\n".join(f"{k}: {v}" if v else k for k, v in lines) + "\n"


def _view_lines(table: SparkTable) -> list[tuple[str, str]]:
    if table.table_type != "VIEW":
        return []
    props = table.properties
    lines: list[tuple[str, str]] = []
    if table.view_text is not None:
        lines.append(("View Text", table.view_text))
    if table.view_original_text is not None:
        lines.append(("View Original Text", table.view_original_text))
    lines.append(("View Schema Mode", props.get("view.schemaMode", "BINDING")))
    parts = _listed(props, "view.catalogAndNamespace.numParts", "view.catalogAndNamespace.part.")
    if not parts and "view.default.database" in props:
        parts = [SESSION_CATALOG, props["view.default.database"]]
    if parts:
        lines.append(("View Catalog and Namespace", ".".join(map(_quote_if_needed, parts))))
    columns = _listed(props, "view.query.out.numCols", "view.query.out.col.")
    if columns:
        lines.append(("View Query Output Columns", "[" + ", ".join(map(_quote, columns)) + "]"))
    return lines


def _storage_lines(table: SparkTable) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    for key, value in (
        ("Location", table.location),
        ("Serde Library", table.serde),
        ("InputFormat", table.input_format),
        ("OutputFormat", table.output_format),
    ):
        if value is not None:
            lines.append((key, value))
    if table.compressed:
        lines.append(("Compressed", "true"))
    if table.storage_properties:
        lines.append(("Storage Properties", _pairs(table.storage_properties)))
    return lines


DescribeRow = tuple[str, str, str | None]


def describe_rows(table: SparkTable) -> list[DescribeRow]:
    """DESC's rows: every column (``col_name``, ``data_type``, ``comment``), then, for a
    partitioned table, the partition section."""
    rows: list[DescribeRow] = [_described(f) for f in table.schema.fields]
    if table.partition_columns:
        by_name = {f.name: f for f in table.schema.fields}
        rows += [("# Partition Information", "", ""), ("# col_name", "data_type", "comment")]
        rows += [_described(by_name[name]) for name in table.partition_columns]
    if table.bucket is not None:
        raise UnrepresentableError("DESC of a bucketed table")
    return rows


def _described(f: Field) -> DescribeRow:
    return f.name, simple_string(f.type), f.comment


