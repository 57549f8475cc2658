"""What the ``LOCAL`` profile allows, element by element: data source providers and their options,
table properties and storage formats, the keys ``SET`` may name, Flint ``WITH`` options and the
keys of ``extra_options``. Anything not listed here is refused (docs/validation.md, whose tables
the tests hold to these).

Providers are named as Spark resolves them (``DataSource.lookupDataSource``): a short name in any
case (``parquet``, ``PARQUET``), or any class name that resolves to the same implementation (the
v1 ``FileFormat``, the v2 ``DataSourceV2``, the package name Spark appends ``.DefaultSource`` to,
and the names Spark keeps for backward compatibility). The plugin reads names by this table; the
job asks Spark which class a name resolves to and looks that class up here, so a name the table
does not spell but Spark resolves to an allowed class is allowed in the job only (the plugin may
refuse more, never less).

Option keys are compared in lower case, as Spark reads an option map (``CaseInsensitiveMap``).
``path`` is every file provider's location: it is checked against the warehouse root, never
listed. ``SET`` keys are compared exactly, as Spark's configuration compares them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

_DS = "org.apache.spark.sql.execution.datasources"


@dataclass(frozen=True)
class Provider:
    """A data source statements may name: its short names (lower case), the classes Spark resolves
    its names to and the names it resolves from, and the options it may be given (as Spark's
    documentation spells them; :attr:`keys` in lower case)."""

    name: str
    short_names: frozenset[str]
    classes: frozenset[str]
    options: frozenset[str]

    @functools.cached_property
    def keys(self) -> frozenset[str]:
        """The option names in lower case, as they are compared."""
        return frozenset(option.lower() for option in self.options)


def _provider(name: str, shorts: Iterable[str], classes: Iterable[str], options: Iterable[str]) -> Provider:
    return Provider(name, frozenset(s.lower() for s in shorts), frozenset(classes), frozenset(options))


#: Options every file-based provider reads (``FileIndex`` and ``FileFormat`` options).
FILE_OPTIONS = frozenset(
    {
        "pathGlobFilter", "recursiveFileLookup", "modifiedBefore", "modifiedAfter", "ignoreCorruptFiles",
        "ignoreMissingFiles", "compression", "codec", "maxRecordsPerFile",
    }
)  # fmt: skip
_REBASE = ("datetimeRebaseMode", "int96RebaseMode")
_CSV = (
    "sep", "delimiter", "encoding", "charset", "quote", "quoteAll", "escape", "escapeQuotes", "comment", "header",
    "inferSchema", "preferDate", "enableDateTimeParsingFallback", "ignoreLeadingWhiteSpace",
    "ignoreTrailingWhiteSpace", "nullValue", "nanValue", "positiveInf", "negativeInf", "dateFormat",
    "timestampFormat", "timestampNTZFormat", "maxColumns", "maxCharsPerColumn", "mode", "columnNameOfCorruptRecord",
    "multiLine", "charToEscapeQuoteEscaping", "samplingRatio", "emptyValue", "locale", "lineSep",
    "unescapedQuoteHandling", "enforceSchema", "timeZone",
)  # fmt: skip
_JSON = (
    "timeZone", "primitivesAsString", "prefersDecimal", "allowComments", "allowUnquotedFieldNames",
    "allowSingleQuotes", "allowNumericLeadingZeros", "allowBackslashEscapingAnyCharacter", "mode",
    "columnNameOfCorruptRecord", "dateFormat", "timestampFormat", "timestampNTZFormat",
    "enableDateTimeParsingFallback", "multiLine", "allowUnquotedControlChars", "encoding", "lineSep",
    "samplingRatio", "dropFieldIfAllNull", "locale", "allowNonNumericNumbers", "ignoreNullFields",
)  # fmt: skip
#: What the XML functions (``from_xml``, ``schema_of_xml``, ``to_xml``) may be told: how to read and
#: write XML, never where to fetch a schema (``rowValidationXSDPath`` opens any file or URL).
_XML = (
    "rowTag", "rootTag", "attributePrefix", "valueTag", "ignoreSurroundingSpaces", "ignoreNamespace", "mode",
    "columnNameOfCorruptRecord", "dateFormat", "timestampFormat", "timestampNTZFormat", "timeZone", "locale",
    "nullValue", "samplingRatio", "excludeAttribute", "inferSchema", "prefersDecimal", "wildcardColName",
    "charset", "encoding", "declaration", "arrayElementName", "validateName", "singleVariantColumn",
)  # fmt: skip
#: What ``from_avro`` may be told (its schema is its own argument; never ``avroSchemaUrl``).
_AVRO_FUNCTION = (
    "mode", "datetimeRebaseMode", "enableStableIdentifiersForUnionType", "stableIdentifierPrefixForUnionType",
    "recursiveFieldMaxDepth",
)  # fmt: skip
#: Hive's table options (``USING hive OPTIONS (...)``): the format by name, the delimiters.
_HIVE = ("fileFormat", "fieldDelim", "escapeDelim", "collectionDelim", "mapkeyDelim", "lineDelim")

PROVIDERS: tuple[Provider, ...] = (
    _provider(
        "parquet",
        ["parquet"],
        [
            f"{_DS}.parquet.ParquetFileFormat",
            f"{_DS}.v2.parquet.ParquetDataSourceV2",
            f"{_DS}.parquet",
            f"{_DS}.parquet.DefaultSource",
            "org.apache.spark.sql.parquet",
            "org.apache.spark.sql.parquet.DefaultSource",
        ],
        [*FILE_OPTIONS, "mergeSchema", *_REBASE],
    ),
    _provider(
        "orc",
        ["orc"],
        [
            f"{_DS}.orc.OrcFileFormat",
            f"{_DS}.v2.orc.OrcDataSourceV2",
            f"{_DS}.orc",
            f"{_DS}.orc.DefaultSource",
            "org.apache.spark.sql.hive.orc",
            "org.apache.spark.sql.hive.orc.OrcFileFormat",
            "org.apache.spark.sql.hive.orc.DefaultSource",
        ],
        [*FILE_OPTIONS, "mergeSchema"],
    ),
    _provider(
        "json",
        ["json"],
        [
            f"{_DS}.json.JsonFileFormat",
            f"{_DS}.v2.json.JsonDataSourceV2",
            f"{_DS}.json",
            f"{_DS}.json.DefaultSource",
            "org.apache.spark.sql.json",
            "org.apache.spark.sql.json.DefaultSource",
        ],
        [*FILE_OPTIONS, *_JSON],
    ),
    _provider(
        "csv",
        ["csv"],
        [
            f"{_DS}.csv.CSVFileFormat",
            f"{_DS}.v2.csv.CSVDataSourceV2",
            f"{_DS}.csv",
            f"{_DS}.csv.DefaultSource",
            "com.databricks.spark.csv",
            "com.databricks.spark.csv.DefaultSource",
        ],
        [*FILE_OPTIONS, *_CSV],
    ),
    _provider(
        "text",
        ["text"],
        [f"{_DS}.text.TextFileFormat", f"{_DS}.v2.text.TextDataSourceV2", f"{_DS}.text", f"{_DS}.text.DefaultSource"],
        [*FILE_OPTIONS, "wholetext", "lineSep"],
    ),
    _provider(
        "avro",
        ["avro"],
        [
            "org.apache.spark.sql.avro.AvroFileFormat",
            "org.apache.spark.sql.v2.avro.AvroDataSourceV2",
            "org.apache.spark.sql.avro",
            "org.apache.spark.sql.avro.DefaultSource",
            "com.databricks.spark.avro",
            "com.databricks.spark.avro.DefaultSource",
        ],
        [
            *FILE_OPTIONS,
            "avroSchema",
            "ignoreExtension",
            "recordName",
            "recordNamespace",
            "positionalFieldMatching",
            "datetimeRebaseMode",
            "mode",
            "enableStableIdentifiersForUnionType",
        ],
    ),
    _provider(
        "binaryFile",
        ["binaryFile"],
        [f"{_DS}.binaryfile.BinaryFileFormat", f"{_DS}.binaryfile", f"{_DS}.binaryfile.DefaultSource"],
        FILE_OPTIONS,
    ),
    _provider(
        "delta",
        ["delta"],
        ["io.delta.sql.DeltaDataSource", "org.apache.spark.sql.delta.sources.DeltaDataSource"],
        [*FILE_OPTIONS, "mergeSchema", "overwriteSchema", "versionAsOf", "timestampAsOf", "replaceWhere"],
    ),
    _provider(
        "iceberg",
        ["iceberg"],
        ["org.apache.iceberg.spark.source.IcebergSource"],
        ["snapshot-id", "as-of-timestamp", "split-size", "lookback", "file-open-cost", "write-format"],
    ),
    _provider(
        "hive",
        ["hive"],
        ["org.apache.spark.sql.hive.execution.HiveFileFormat"],
        _HIVE,
    ),
)

_BY_SHORT = {short: p for p in PROVIDERS for short in p.short_names}
_BY_CLASS = {cls: p for p in PROVIDERS for cls in p.classes}

#: Every provider's location option, checked against the warehouse root.
PATH_OPTION = "path"


def provider_named(name: str) -> Provider | None:
    """The allowed provider a statement names (as the plugin reads names), or None."""
    return _BY_SHORT.get(name.lower()) or _BY_CLASS.get(name)


def provider_of_class(class_name: str) -> Provider | None:
    """The allowed provider Spark resolved to the class ``class_name``, or None."""
    return _BY_CLASS.get(class_name)


# -- Hive storage: STORED AS, ROW FORMAT SERDE, INPUTFORMAT/OUTPUTFORMAT ------------------------------

#: ``STORED AS <name>`` (and ``OPTIONS (fileFormat '<name>')``), compared in upper case.
STORED_AS = frozenset({"TEXTFILE", "SEQUENCEFILE", "RCFILE", "ORC", "PARQUET", "AVRO"})
_HIVE_IO = "org.apache.hadoop.hive.ql.io"
#: The SerDe and input/output format classes of those formats (``ROW FORMAT SERDE '<class>'``,
#: ``STORED AS INPUTFORMAT '<class>' OUTPUTFORMAT '<class>'``).
STORAGE_CLASSES = frozenset(
    {
        "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
        "org.apache.hadoop.hive.serde2.lazybinary.LazyBinarySerDe",
        "org.apache.hadoop.hive.serde2.columnar.ColumnarSerDe",
        "org.apache.hadoop.hive.serde2.columnar.LazyBinaryColumnarSerDe",
        "org.apache.hadoop.hive.serde2.OpenCSVSerde",
        "org.apache.hadoop.hive.serde2.avro.AvroSerDe",
        f"{_HIVE_IO}.orc.OrcSerde",
        f"{_HIVE_IO}.parquet.serde.ParquetHiveSerDe",
        "org.apache.hadoop.mapred.TextInputFormat",
        "org.apache.hadoop.mapred.SequenceFileInputFormat",
        f"{_HIVE_IO}.HiveIgnoreKeyTextOutputFormat",
        f"{_HIVE_IO}.HiveSequenceFileOutputFormat",
        f"{_HIVE_IO}.RCFileInputFormat",
        f"{_HIVE_IO}.RCFileOutputFormat",
        f"{_HIVE_IO}.orc.OrcInputFormat",
        f"{_HIVE_IO}.orc.OrcOutputFormat",
        f"{_HIVE_IO}.parquet.MapredParquetInputFormat",
        f"{_HIVE_IO}.parquet.MapredParquetOutputFormat",
        f"{_HIVE_IO}.avro.AvroContainerInputFormat",
        f"{_HIVE_IO}.avro.AvroContainerOutputFormat",
    }
)


# -- table, SerDe and database properties ------------------------------------------------------------

#: Property keys with a dot that SerDes and formats read, and that name no place, class or URL.
#: A key without a dot is a user's own (``'owner' = 'ops'``) and is allowed, but for
#: :data:`LOCATION_PROPERTIES`; any other key with a dot is refused (``avro.schema.url`` reads a
#: URL, ``fs.*`` and ``hive.*`` keys reach the file system's and Hive's configuration).
PROPERTY_KEYS = frozenset(
    {
        "serialization.format", "serialization.null.format", "serialization.encoding", "field.delim",
        "line.delim", "escape.delim", "colelction.delim", "collection.delim", "mapkey.delim", "quote.delim",
        "skip.header.line.count", "skip.footer.line.count", "parquet.compression", "orc.compress",
        "avro.schema.literal", "external.table.purge", "compression.codec",
    }
)  # fmt: skip
#: Property keys that place data: checked as locations (``path``), or refused.
LOCATION_PROPERTIES = frozenset({"path", "paths", "location"})


# -- SET ----------------------------------------------------------------------------------------------

#: The keys a statement may set, reset or read: the session's ordinary SQL settings and the Flint
#: optimizer switches. Compared exactly (Spark's keys are case-sensitive). Everything else, in
#: particular what says where data, code or credentials come from, is refused.
SETTABLE_KEYS = frozenset(
    {
        "spark.sql.shuffle.partitions",
        "spark.sql.ansi.enabled",
        "spark.sql.session.timeZone",
        "spark.sql.adaptive.enabled",
        "spark.sql.adaptive.coalescePartitions.enabled",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes",
        "spark.sql.adaptive.skewJoin.enabled",
        "spark.sql.autoBroadcastJoinThreshold",
        "spark.sql.broadcastTimeout",
        "spark.sql.cbo.enabled",
        "spark.sql.cbo.joinReorder.enabled",
        "spark.sql.join.preferSortMergeJoin",
        "spark.sql.caseSensitive",
        "spark.sql.crossJoin.enabled",
        "spark.sql.datetime.java8API.enabled",
        "spark.sql.legacy.timeParserPolicy",
        "spark.sql.storeAssignmentPolicy",
        "spark.sql.mapKeyDedupPolicy",
        "spark.sql.timestampType",
        "spark.sql.decimalOperations.allowPrecisionLoss",
        "spark.sql.groupByOrdinal",
        "spark.sql.groupByAliases",
        "spark.sql.orderByOrdinal",
        "spark.sql.pivotMaxValues",
        "spark.sql.files.maxPartitionBytes",
        "spark.sql.files.openCostInBytes",
        "spark.sql.files.maxRecordsPerFile",
        "spark.sql.files.ignoreCorruptFiles",
        "spark.sql.files.ignoreMissingFiles",
        "spark.sql.sources.partitionOverwriteMode",
        "spark.sql.parquet.compression.codec",
        "spark.sql.parquet.mergeSchema",
        "spark.sql.parquet.filterPushdown",
        "spark.sql.orc.compression.codec",
        "spark.sql.orc.filterPushdown",
        "spark.sql.avro.compression.codec",
        "spark.sql.csv.filterPushdown.enabled",
        "spark.sql.json.filterPushdown.enabled",
        "spark.sql.inMemoryColumnarStorage.compressed",
        "spark.sql.inMemoryColumnarStorage.batchSize",
        "spark.sql.statistics.histogram.enabled",
        "spark.flint.optimizer.enabled",
        "spark.flint.optimizer.covering.enabled",
        "spark.flint.index.hybridscan.enabled",
    }
)


def is_settable(key: str) -> bool:
    """Whether a statement may SET, RESET or read ``key``."""
    return key in SETTABLE_KEYS


# -- options of functions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionOptions:
    """A function that takes an options map: the argument that map is (0-based) and the options
    it may hold (compared in lower case, as Spark reads them)."""

    argument: int
    allowed: Provider


def _function_options(name: str, argument: int, options: Iterable[str]) -> FunctionOptions:
    return FunctionOptions(argument, _provider(name, (), (), options))


#: The functions whose last argument is an options map, and what each may hold: how to parse or
#: write its format, never a file or URL to read (``docs/validation.md``).
FUNCTION_OPTIONS: dict[str, FunctionOptions] = {
    "from_json": _function_options("from_json", 2, _JSON),
    "to_json": _function_options("to_json", 1, _JSON),
    "schema_of_json": _function_options("schema_of_json", 1, _JSON),
    "from_csv": _function_options("from_csv", 2, _CSV),
    "to_csv": _function_options("to_csv", 1, _CSV),
    "schema_of_csv": _function_options("schema_of_csv", 1, _CSV),
    "from_xml": _function_options("from_xml", 2, _XML),
    "to_xml": _function_options("to_xml", 1, _XML),
    "schema_of_xml": _function_options("schema_of_xml", 1, _XML),
    "from_avro": _function_options("from_avro", 2, _AVRO_FUNCTION),
}


def function_options(name: str) -> FunctionOptions | None:
    """The options entry of the function ``name`` (its last part, in any case: a qualified
    ``system.builtin.from_xml`` is ``from_xml``); None for a function without an options map."""
    return FUNCTION_OPTIONS.get(name.rsplit(".", 1)[-1].lower())


# -- Flint WITH options and extra_options ---------------------------------------------------------------

#: The ``WITH (...)`` options of Flint statements (case-sensitive, as the reference reads them).
FLINT_OPTIONS = frozenset(
    {
        "auto_refresh", "refresh_interval", "incremental_refresh", "checkpoint_location", "watermark_delay",
        "output_mode", "index_settings", "index_mappings", "id_expression", "extra_options", "scheduler_mode",
    }
)  # fmt: skip
#: ``extra_options`` of a source table: how its stream reads new files (lower case).
EXTRA_SOURCE_OPTIONS = frozenset(
    {"maxfilespertrigger", "maxbytespertrigger", "latestfirst", "maxfileage", "filenameonly"}
)
#: ``extra_options`` of the index (keyed ``sink`` or by the index's name): how it is written. No
#: connection setting (host, port, scheme, auth, credentials, region, ...) can be given.
EXTRA_SINK_OPTIONS = frozenset({"batch_size"})
#: The keys ``extra_options`` names the index by, besides the index's own name.
SINK_KEYS = frozenset({"sink"})
#: ``index_settings``: see :mod:`query_core.validation.index_settings` (known keys, bounded values).
#: ``index_mappings``: what a field's mapping may say (no script, ``copy_to`` or analyzer).
INDEX_MAPPING_PARAMETERS = frozenset(
    {
        "type", "format", "index", "doc_values", "store", "ignore_above", "ignore_malformed", "null_value",
        "scaling_factor", "enabled", "fields", "properties",
    }
)  # fmt: skip
#: ``index_mappings``: the field types a mapping may name.
INDEX_FIELD_TYPES = frozenset(
    {
        "keyword", "text", "match_only_text", "long", "integer", "short", "byte", "double", "float", "half_float",
        "scaled_float", "unsigned_long", "boolean", "date", "date_nanos", "binary", "ip", "object", "nested",
        "geo_point",
    }
)  # fmt: skip
