"""What each kind of Flint index holds, as a Spark DataFrame built from its metadata.

- **skipping**: one row per source file (``file_path``), grouped by ``input_file_name()``, with the
  ``_id`` sha1 of the path: PARTITION keeps the file's value, VALUE_SET its distinct values (null
  past ``max_size``), MIN_MAX ``MinMax_<col>_0``/``MinMax_<col>_1``, BLOOM_FILTER the serialized
  filter over ``xxhash64(col)`` (:mod:`.bloom`);
- **covering**: the listed columns of each row, filtered by the optional WHERE;
- **materialized view**: the view's query, one document per output row.

``id_expression`` gives covering indexes and views their document ids. The id column
(:data:`ID_COLUMN`) decides each document's ``_id`` and is not stored in the document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flint_repl_job.catalog import SESSION_CATALOG, dotted_names, session_sql, significant, tokenize
from query_core.flint import IndexKind, QualifiedName, SkippingKind
from query_core.flint.index_meta import IndexMeta

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

ID_COLUMN = "__id__"
FILE_PATH_COLUMN = "file_path"


def session_table(table: str, datasource: str) -> str:
    """``table`` (``catalog.db.name``) as Spark names it, back-quoted: the datasource's catalog is
    the session catalog that stands for it."""
    parts = table.split(".")
    if parts[0] == datasource:
        parts[0] = SESSION_CATALOG
    return QualifiedName(tuple(parts)).sql()


def table_frame(spark: SparkSession, table: str, datasource: str) -> DataFrame:
    """The source table of a skipping or covering index."""
    return spark.read.table(session_table(table, datasource))


def build_frame(spark: SparkSession, meta: IndexMeta, datasource: str) -> DataFrame:
    """The index's contents, with :data:`ID_COLUMN` when documents have ids of their own."""
    if meta.kind is IndexKind.SKIPPING:
        return skipping_frame(table_frame(spark, meta.source, datasource), meta.indexed_columns)
    if meta.kind is IndexKind.COVERING:
        frame = table_frame(spark, meta.source, datasource)
        if meta.filter_condition:
            frame = frame.where(meta.filter_condition)
        frame = frame.select(*[_col(c["columnName"]) for c in meta.indexed_columns])
    else:
        frame = spark.sql(session_sql(tumble_to_window(meta.source), datasource))
    id_expression = meta.options.get("id_expression", "")
    if id_expression:
        from pyspark.sql import functions as sf

        frame = frame.withColumn(ID_COLUMN, sf.expr(id_expression))
    return frame


def _col(name: str) -> Column:
    from pyspark.sql import functions as sf

    return sf.col("`" + name.replace("`", "``") + "`")


def skipping_frame(source: DataFrame, columns: tuple[dict[str, Any], ...]) -> DataFrame:
    from pyspark.sql import functions as sf

    aggregates: list[Column] = []
    for column in columns:
        aggregates += skipping_aggregates(column)
    return (
        source.groupBy(sf.input_file_name().alias(FILE_PATH_COLUMN))
        .agg(*aggregates)
        .withColumn(ID_COLUMN, sf.sha1(sf.col(FILE_PATH_COLUMN)))
    )


def skipping_aggregates(column: dict[str, Any]) -> list[Column]:
    """The aggregates of one indexed column, named as the reference names its fields."""
    from pyspark.sql import functions as sf

    name = str(column["columnName"])
    kind = SkippingKind(str(column["kind"]))
    params = {str(k): str(v) for k, v in dict(column.get("parameters", {})).items()}
    value = _col(name)
    if kind is SkippingKind.PARTITION:
        return [sf.first(value).alias(name)]
    if kind is SkippingKind.VALUE_SET:
        limit = int(params.get("max_size", "100"))
        values = sf.collect_set(value)
        return [sf.when(sf.size(values) > limit, sf.lit(None)).otherwise(values).alias(name)]
    if kind is SkippingKind.MIN_MAX:
        return [sf.min(value).alias(f"MinMax_{name}_0"), sf.max(value).alias(f"MinMax_{name}_1")]
    return [_bloom_filter(params)(sf.collect_set(sf.xxhash64(value))).alias(name)]


def _bloom_filter(params: dict[str, str]) -> Any:
    """A UDF serializing a file's set of hashes as the reference's bloom filter."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import BinaryType

    from flint_repl_job.indexes.bloom import build_bloom_filter

    # A lambda: PySpark reads a function's type hints as a request for a pandas UDF.
    return sf.udf(lambda hashes: build_bloom_filter(hashes or [], params), BinaryType(), useArrow=False)


def source_tables(query: str, datasource: str) -> list[str]:
    """The tables a view's query reads (names after FROM and JOIN), qualified ``catalog.db.table``.

    A token scan, not an analysis: it is what the index's ``sourceTables`` property records, for
    tools that list what a view depends on.
    """
    tokens = significant(tokenize(query))
    found: list[str] = []
    for before, parts in dotted_names(tokens):
        follows = tokens[before].text.upper() if before >= 0 and tokens[before].kind == "word" else ""
        if follows in ("FROM", "JOIN") and len(parts) <= 3:
            name = str(QualifiedName(tuple(p.name or "" for p in parts)).qualify(datasource))
            if name not in found:
                found.append(name)
    return found


#: The reference's name of Spark's tumbling ``window`` function in view queries.
TUMBLE = "TUMBLE"


def call_positions(query: str, function: str) -> list[int]:
    """Indexes (in the significant tokens) of calls of ``function``: the word followed by ``(``,
    not a qualified name's part (``t.tumble(`` is left alone)."""
    tokens = significant(tokenize(query))
    return [
        i
        for i, token in enumerate(tokens)
        if token.kind == "word"
        and token.text.upper() == function
        and i + 1 < len(tokens)
        and tokens[i + 1].text == "("
        and (i == 0 or tokens[i - 1].kind != "dot")
    ]


def tumble_to_window(query: str) -> str:
    """``query`` with each ``TUMBLE(col, 'interval')`` call spelled as Spark's ``window(...)``
    (the reference registers TUMBLE as an alias of it); strings, comments and quoted names are
    left alone."""
    tokens = significant(tokenize(query))
    out, pos = [], 0
    for i in call_positions(query, TUMBLE):
        out += [query[pos : tokens[i].start], "window"]
        pos = tokens[i].start + len(tokens[i].text)
    return "".join(out) + query[pos:]
