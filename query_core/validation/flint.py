"""Flint index statements checked: their options, and the SQL they hold.

A skipping or covering index's source table is read as a query reads its tables (a path-based
name is ``File``; the job also checks the provider the catalog records); a materialized view's query is a
query like any other; a covering index's filter and an
``id_expression`` are expressions the job evaluates; ``checkpoint_location`` is where the index's
stream writes, and what VACUUM deletes, recursively; ``extra_options`` reach the stream's reader
and the index's writer, so only their allowed keys may be given (no connection setting). The SQL
pieces are checked by the caller's SQL checker (the plugin's, or the job's on Spark's own parse).
"""

from __future__ import annotations

from collections.abc import Callable

from query_core.flint import (
    AlterIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    FlintOptions,
    IndexKind,
    QualifiedName,
    RefreshIndex,
    Statement,
)
from query_core.validation.checks import Checks


def check_flint(
    statement: Statement,
    checks: Checks,
    check_query: Callable[[str], None],
    check_expression: Callable[[str], None],
) -> None:
    """Refuse ``statement`` (:class:`QueryRefusedError`) when it holds an element the policy denies."""
    options = getattr(statement, "options", None)
    if isinstance(options, FlintOptions):
        checks.flint_options(options.raw)
        if options.checkpoint_location:
            checks.checkpoint(options.checkpoint_location)
        if options.id_expression:
            check_expression(options.id_expression)
    source = source_table(statement)
    if source is not None:  # read by the index as a query reads it: a path-based name is File
        checks.table(source.parts)
    if isinstance(statement, CreateMaterializedView):
        check_query(statement.query)
    if isinstance(statement, CreateCoveringIndex) and statement.where:
        check_expression(statement.where)


def source_table(statement: Statement) -> QualifiedName | None:
    """The table a skipping or covering index statement makes the job read (None: none, or a
    materialized view, whose query is checked as such)."""
    if isinstance(statement, CreateSkippingIndex | CreateCoveringIndex):
        return statement.table
    if isinstance(statement, RefreshIndex | AlterIndex) and statement.index.kind is not IndexKind.MV:
        return statement.index.table
    return None
