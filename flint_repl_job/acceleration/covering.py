"""Whether a covering index can answer a query in place of its table (``docs/acceleration.md``).

As the reference's ``ApplyFlintSparkCoveringIndex``: the index must hold every column of the table
the query uses, anywhere in the query, and a partial index (``CREATE INDEX ... WHERE``) serves
only a query whose own filter on the table implies the index's; a partial index never serves a
query without a filter. Unlike the reference, the index must also be fresh: its last full refresh
recorded the table's files (:class:`.files.SourceSnapshot`) and the table still has exactly
those files. And every column it serves must read back from the index with the table's own type,
value for value (decimals are indexed as doubles, so a decimal column is never served).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flint_repl_job.acceleration.expressions import ColumnPredicate
from flint_repl_job.acceleration.files import SNAPSHOT_PROPERTY, SourceSnapshot
from flint_repl_job.acceleration.skipping import json_type_name
from query_core.flint.index_meta import IndexMeta
from query_core.states import FlintIndexState

#: Column types a covering index gives back exactly as the table holds them (by the plan's names).
SERVED_TYPES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "boolean", "date", "timestamp", "binary"}
)


@dataclass(frozen=True)
class NotNull:
    """``column IS NOT NULL`` (what Spark adds for every column a comparison filters on)."""

    column: str


#: One conjunct of a filter as subsumption reads it; anything else is ``None`` (not understood).
Conjunct = ColumnPredicate | NotNull | None


def unusable_reason(
    meta: IndexMeta,
    state: FlintIndexState | None,
    needed: Mapping[str, str],
    query_filter: Sequence[Conjunct] | None,
    index_filter: Sequence[Conjunct] | None,
    snapshot: Callable[[], SourceSnapshot | None],
) -> str | None:
    """Why the covering index cannot answer the query, or None when it can.

    ``needed`` maps each column of the table the query uses to its type (the plan's names);
    ``query_filter`` is the query's filter right above the table (None: no filter);
    ``index_filter`` the index's own WHERE as conjuncts (None: a full index); ``snapshot`` gives
    the table's files now (None: unknown), asked last, as listing them is the costly part."""
    if state is not FlintIndexState.ACTIVE:
        return f"its state is {state.value if state is not None else 'unknown'}, not active"
    indexed = {
        str(c.get("columnName", "")).lower(): json_type_name(str(c.get("columnType", ""))) for c in meta.indexed_columns
    }
    for column, data_type in needed.items():
        if column.lower() not in indexed:
            return f"it does not hold column {column}"
        if indexed[column.lower()] != data_type or data_type not in SERVED_TYPES:
            return f"it cannot give back column {column} of type {data_type} exactly"
    if index_filter is not None:
        if query_filter is None:
            return "it is partial (WHERE) and the query reads the whole table"
        if not subsumes(query_filter, index_filter):
            return "its WHERE does not hold for every row the query reads"
    recorded = SourceSnapshot.from_property(meta.properties.get(SNAPSHOT_PROPERTY))
    if recorded is None:
        return "it is not known fresh (no full refresh recorded the table's files)"
    if recorded != snapshot():
        return "it is not fresh (the table's files changed since its last refresh)"
    return None


def subsumes(query: Sequence[Conjunct], index: Sequence[Conjunct]) -> bool:
    """Whether every row satisfying all of ``query`` satisfies all of ``index``: each index
    conjunct must follow from one query conjunct on the same column."""
    return all(_implied(wanted, query) for wanted in index)


def _implied(wanted: Conjunct, query: Sequence[Conjunct]) -> bool:
    if wanted is None:
        return False
    column = wanted.column.lower()
    for have in query:
        if have is None or have.column.lower() != column:
            continue
        if isinstance(wanted, NotNull):
            return True  # a comparison, and IS NOT NULL itself, hold for non-null values only
        if isinstance(have, ColumnPredicate) and _range_implies(have, wanted):
            return True
    return False


def _range_implies(have: ColumnPredicate, wanted: ColumnPredicate) -> bool:
    """Whether the values ``have`` admits are all admitted by ``wanted``."""
    try:
        if have.op in ("=", "IN"):
            return all(_admits(wanted, v) for v in have.values)
        bound = have.values[0]
        if wanted.op in ("<", "<="):
            limit = wanted.values[0]
            if have.op == "<":
                return bool(bound <= limit)
            if have.op == "<=":
                return bool(bound < limit or (bound == limit and wanted.op == "<="))
        if wanted.op in (">", ">="):
            limit = wanted.values[0]
            if have.op == ">":
                return bool(bound >= limit)
            if have.op == ">=":
                return bool(bound > limit or (bound == limit and wanted.op == ">="))
    except TypeError:
        return False
    return False


def _admits(predicate: ColumnPredicate, value: Any) -> bool:
    op, values = predicate.op, predicate.values
    if op == "=":
        return bool(value == values[0])
    if op == "IN":
        return value in values
    limit = values[0]
    return bool({"<": value < limit, "<=": value <= limit, ">": value > limit, ">=": value >= limit}[op])


__all__ = ["SERVED_TYPES", "Conjunct", "NotNull", "subsumes", "unusable_reason"]
