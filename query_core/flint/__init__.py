"""Flint's SQL extension (skipping and covering indexes, materialized views): parsing and naming.

Pure Python, with no Spark, so that the plugin can classify a query with the same parser the job
runs it with. :func:`parse` returns a statement from :mod:`.ast`, or ``None`` for plain Spark SQL.
"""

from query_core.flint.ast import (
    AlterIndex,
    AnalyzeIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    CreateStatement,
    DescribeIndex,
    DropIndex,
    FlintOptions,
    FlintStatement,
    IndexKind,
    IndexRef,
    IndexStatement,
    OptionName,
    QualifiedName,
    RecoverIndexJob,
    RefreshIndex,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    SkippingColumn,
    SkippingKind,
    Statement,
    VacuumIndex,
)
from query_core.flint.naming import flint_index_name, latest_id
from query_core.flint.parser import FlintSyntaxError, is_flint_statement, parse
from query_core.flint.scope import ForeignCatalogError, check_catalog, check_index_catalog

__all__ = [
    "AlterIndex",
    "AnalyzeIndex",
    "CreateCoveringIndex",
    "CreateMaterializedView",
    "CreateSkippingIndex",
    "CreateStatement",
    "DescribeIndex",
    "DropIndex",
    "FlintOptions",
    "FlintStatement",
    "FlintSyntaxError",
    "ForeignCatalogError",
    "IndexKind",
    "IndexRef",
    "IndexStatement",
    "OptionName",
    "QualifiedName",
    "RecoverIndexJob",
    "RefreshIndex",
    "ShowCoveringIndexes",
    "ShowFlintIndexes",
    "ShowMaterializedViews",
    "SkippingColumn",
    "SkippingKind",
    "Statement",
    "VacuumIndex",
    "check_catalog",
    "check_index_catalog",
    "flint_index_name",
    "is_flint_statement",
    "latest_id",
    "parse",
]
