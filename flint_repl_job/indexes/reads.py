"""Flint statements that read and change nothing: DESCRIBE, the SHOW statements and ANALYZE
SKIPPING INDEX. They read index metadata (the mappings' ``_meta``), state documents and the
catalog; the listing's rows are the ones the plugin's catalog read model prints too
(:mod:`query_core.flint.listing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flint_repl_job.indexes.builders import session_table
from flint_repl_job.indexes.output import FlintOutput, strings
from query_core.flint import (
    AnalyzeIndex,
    DescribeIndex,
    IndexKind,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    flint_index_name,
    listing,
)
from query_core.flint.index_meta import IndexMeta
from query_core.index_ops import IndexTransaction
from query_core.models import FlintIndexStateDoc
from query_core.store import Store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class IndexReads:
    """The reading statements of a Flint engine, over what the engine reads with."""

    def __init__(
        self,
        spark: SparkSession,
        store: Store,
        datasource: str,
        read_meta: Callable[[str], IndexMeta | None],
        transaction: Callable[[str], IndexTransaction],
        table_columns: Callable[[str], dict[str, str]],
    ) -> None:
        self.spark = spark
        self.store = store
        self.datasource = datasource
        self.read_meta = read_meta
        self.transaction = transaction
        self.table_columns = table_columns

    def describe(self, statement: DescribeIndex) -> FlintOutput:
        meta = self.read_meta(flint_index_name(statement.index, self.datasource))
        kind = statement.index.kind
        schema = strings(*_DESCRIBE_COLUMNS[kind])
        if meta is None or meta.kind is not kind:
            return FlintOutput(schema)
        return FlintOutput(schema, [_described(kind, column) for column in meta.indexed_columns])

    def metas(self, prefix_parts: list[str]) -> list[IndexMeta]:
        """Flint indexes whose names start with ``flint_<parts joined by _>_``, sorted by name."""
        return listing.metas(self.store.admin, prefix_parts)

    def metas_in(self, catalog: str, database: str | None) -> list[IndexMeta]:
        """The Flint indexes whose table (or view) is in ``catalog`` (and ``database`` if given)."""
        return listing.metas_in(self.store.admin, catalog, database)

    def show_flint_indexes(self, statement: ShowFlintIndexes) -> FlintOutput:
        columns = listing.show_flint_index_columns(statement.extended)
        schema = strings(*columns, boolean=listing.BOOLEAN_COLUMNS)

        def state_of(meta: IndexMeta) -> FlintIndexStateDoc | None:
            current = self.transaction(meta.index_name).current()
            return current.doc if current is not None else None

        listed = self.metas_in(statement.catalog, statement.database)
        schedules = self.store.schedules.of_many([m.index_name for m in listed]) if statement.extended else {}
        return FlintOutput(schema, listing.show_flint_index_rows(listed, state_of, statement.extended, schedules))

    def show_covering_indexes(self, statement: ShowCoveringIndexes) -> FlintOutput:
        table = statement.table.qualify(self.datasource)
        rows = [
            (meta.name,)
            for meta in self.metas(list(table.parts))
            if meta.kind is IndexKind.COVERING and meta.source == str(table)
        ]
        return FlintOutput(strings("index_name"), rows)

    def show_materialized_views(self, statement: ShowMaterializedViews) -> FlintOutput:
        rows = [
            (meta.listed_names()[2],)
            for meta in self.metas_in(statement.catalog, statement.database)
            if meta.kind is IndexKind.MV
        ]
        return FlintOutput(strings("materialized_view_name"), rows)

    def analyze(self, statement: AnalyzeIndex) -> FlintOutput:
        """Recommended skipping kinds for the table's columns, by data type (as the reference's
        data-type strategy): partition columns PARTITION, numbers and times MIN_MAX, others
        VALUE_SET for low-cardinality types and BLOOM_FILTER for strings."""
        table = str(statement.index.table.qualify(self.datasource))
        schema = strings("column_name", "column_type", "reason", "skipping_type")
        types = self.table_columns(table)
        partitions = set(self._partition_columns(table))
        rows = []
        for name, type_name in types.items():
            kind, reason = _recommendation(type_name, name in partitions)
            if kind:
                rows.append((name, type_name, reason, kind))
        return FlintOutput(schema, rows)

    def _partition_columns(self, table: str) -> list[str]:
        try:
            return [
                c.name for c in self.spark.catalog.listColumns(session_table(table, self.datasource)) if c.isPartition
            ]
        except Exception:  # noqa: BLE001 - a catalog without column listing: no partition hints
            return []


#: DESCRIBE's columns per index kind (the reference's).
_DESCRIBE_COLUMNS: dict[IndexKind, tuple[str, ...]] = {
    IndexKind.SKIPPING: ("indexed_col_name", "data_type", "skip_type"),
    IndexKind.COVERING: ("indexed_col_name", "data_type", "index_type"),
    IndexKind.MV: ("output_col_name", "data_type"),
}


def _described(kind: IndexKind, column: dict[str, Any]) -> tuple[Any, ...]:
    """One DESCRIBE row: the column, its type, and what indexes it (skipping kind, "indexed")."""
    name, type_name = column.get("columnName"), column.get("columnType")
    if kind is IndexKind.SKIPPING:
        return name, type_name, column.get("kind")
    if kind is IndexKind.COVERING:
        return name, type_name, "indexed"
    return name, type_name


_MIN_MAX_TYPES = ("int", "bigint", "smallint", "tinyint", "double", "float", "date", "timestamp")


def _recommendation(type_name: str, partition: bool) -> tuple[str, str]:
    if partition:
        return "PARTITION", "PARTITION data structure is recommended for partition columns"
    if type_name in _MIN_MAX_TYPES or type_name.startswith("decimal"):
        return "MIN_MAX", "MIN_MAX data structure is recommended for numeric and time columns"
    if type_name == "boolean":
        return "VALUE_SET", "VALUE_SET data structure is recommended for low-cardinality columns"
    if type_name == "string" or type_name.startswith(("varchar", "char")):
        return "BLOOM_FILTER", "BLOOM_FILTER data structure is recommended for high-cardinality columns"
    return "", ""
