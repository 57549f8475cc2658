"""Which files a skipping index says may hold rows of a query (``docs/acceleration.md``).

Each ``AND`` conjunct of the query's filter goes to the first indexed column (in the index's
order) whose strategy accepts it, as in the reference's ``ApplyFlintSparkSkippingIndex``:

- PARTITION ``column = v``: the file's partition value is ``v``;
- VALUE_SET ``column = v``: ``v`` is in the file's set of values, or the file's set overflowed
  its limit (stored as null);
- MIN_MAX ``=, <, <=, >, >=, IN``: the file's ``[min, max]`` range meets the predicate (``IN``
  by the range of its values, as the reference does);
- BLOOM_FILTER ``column = v``: the file's bloom filter may contain ``xxhash64(v)``.

A file is kept when every accepted conjunct may hold for it. Anything the index cannot tell for
sure keeps the file: a missing field, a value that does not read as the column's type, a
floating-point bound that is not a number. Decimals are indexed as doubles (the index's field
type), so they are compared as doubles, with ``<`` read as ``<=`` (rounding to a double never
reverses an order, but can make two values equal).

Files the index has no document for (added since its last refresh) are kept when hybrid scan is
on (the default here); files of the index that the table no longer has are never read, since only
the table's own listing is ever filtered.
"""

from __future__ import annotations

import binascii
import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from flint_repl_job.acceleration.expressions import EPOCH, ColumnPredicate, float32
from flint_repl_job.acceleration.files import normalize_path
from flint_repl_job.indexes.bloom import EncodedProbe
from query_core.flint import SkippingKind

#: The index document's field naming its source file.
FILE_PATH_FIELD = "file_path"

#: Hashes a predicate's single literal with Spark's ``xxhash64`` (the bloom filter's items); None
#: when it cannot.
LiteralHasher = Callable[[ColumnPredicate], "int | None"]

#: Operators each strategy accepts (the reference's).
ACCEPTED_OPERATORS: dict[SkippingKind, frozenset[str]] = {
    SkippingKind.PARTITION: frozenset({"="}),
    SkippingKind.VALUE_SET: frozenset({"="}),
    SkippingKind.MIN_MAX: frozenset({"=", "<", "<=", ">", ">=", "IN"}),
    SkippingKind.BLOOM_FILTER: frozenset({"="}),
}

#: Spark's short type names (what an index's ``columnType`` holds) as a plan's JSON names them.
_JSON_TYPE_NAMES = {"tinyint": "byte", "smallint": "short", "int": "integer", "bigint": "long"}
_ORDERED = frozenset({"byte", "short", "integer", "long", "float", "double", "string", "boolean", "date"})
_TIMESTAMPS = frozenset({"timestamp", "timestamp_ntz"})
_FLOATING = frozenset({"float", "double"})


def json_type_name(column_type: str) -> str:
    """An index's ``columnType`` (``int``, ``bigint``, ``decimal(10,2)``...) as a plan's JSON names it."""
    name = column_type.strip().lower()
    return _JSON_TYPE_NAMES.get(name, name)


def comparable(data_type: str) -> bool:
    """Whether values of the type can be compared with what an index stores for them."""
    return data_type in _ORDERED or data_type in _TIMESTAMPS or data_type.startswith("decimal(")


@dataclass(frozen=True)
class Domain:
    """Where literal and index values of one column type are compared: ``key`` maps either kind
    of value to a comparable Python value, or raises ``ValueError``/``TypeError``. ``exact`` is
    False when that loses precision (decimals as doubles): strict comparisons are then relaxed."""

    data_type: str
    exact: bool

    def literal(self, value: Any) -> Any:
        if self.data_type.startswith("decimal("):
            return float(Decimal(value))
        if self.data_type in _TIMESTAMPS:
            return int(value)
        if self.data_type == "date" and not isinstance(value, dt.date):
            raise TypeError("not a date")
        return value

    def stored(self, value: Any) -> Any:
        """A value of an index document (JSON) in the comparison domain."""
        t = self.data_type
        if t in ("byte", "short", "integer", "long"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise TypeError("not an integer")
            return int(value)
        if t in _FLOATING or t.startswith("decimal("):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError("not a finite number")
            return float32(float(value)) if t == "float" else float(value)
        if t == "string":
            if not isinstance(value, str):
                raise TypeError("not a string")
            return value
        if t == "boolean":
            if not isinstance(value, bool):
                raise TypeError("not a boolean")
            return value
        if t == "date":
            return dt.date.fromisoformat(str(value)[:10])
        if t in _TIMESTAMPS:
            stamp = dt.datetime.fromisoformat(str(value))
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.UTC)
            return (stamp - _EPOCH_UTC) // dt.timedelta(microseconds=1)
        raise TypeError(f"type {t} is not compared")


_EPOCH_UTC = dt.datetime.combine(EPOCH, dt.time(), tzinfo=dt.UTC)


@dataclass(frozen=True)
class FileTest:
    """One conjunct as its strategy tests an index document: ``check(doc)`` is False only when the
    file certainly holds no row that satisfies the conjunct."""

    kind: SkippingKind
    predicate: ColumnPredicate
    fields: tuple[str, ...]
    check: Callable[[Mapping[str, Any]], bool]

    def describe(self) -> str:
        return f"{self.predicate.sql()} by {self.kind.value}"


def file_tests(
    indexed_columns: Sequence[Mapping[str, Any]], predicates: Sequence[ColumnPredicate], hasher: LiteralHasher
) -> list[FileTest]:
    """The tests the index makes of its documents for ``predicates`` (those no strategy accepts
    are left out: they prune nothing)."""
    tests = []
    for predicate in predicates:
        for column in indexed_columns:
            test = _strategy_test(column, predicate, hasher)
            if test is not None:
                tests.append(test)
                break
    return tests


def _strategy_test(column: Mapping[str, Any], predicate: ColumnPredicate, hasher: LiteralHasher) -> FileTest | None:
    name = str(column.get("columnName", ""))
    try:
        kind = SkippingKind(str(column.get("kind", "")))
    except ValueError:
        return None
    if name.lower() != predicate.column.lower() or predicate.op not in ACCEPTED_OPERATORS[kind]:
        return None
    if json_type_name(str(column.get("columnType", ""))) != predicate.data_type:
        return None  # the column's type changed since the index was made
    if kind is SkippingKind.BLOOM_FILTER:
        return _bloom_test(name, predicate, hasher)
    if not comparable(predicate.data_type):
        return None
    domain = Domain(predicate.data_type, exact=not predicate.data_type.startswith("decimal("))
    try:
        values = [domain.literal(v) for v in predicate.values]
    except (TypeError, ValueError, ArithmeticError):
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return None  # NaN orders above every number in Spark, not in Python
    if kind is SkippingKind.MIN_MAX:
        return _min_max_test(name, predicate, domain, values)
    if kind is SkippingKind.VALUE_SET:
        return FileTest(kind, predicate, (name,), _value_set_check(name, domain, values[0]))
    return FileTest(kind, predicate, (name,), _partition_check(name, domain, values[0]))


def _value_set_check(name: str, domain: Domain, value: Any) -> Callable[[Mapping[str, Any]], bool]:
    def check(doc: Mapping[str, Any]) -> bool:
        if name not in doc or doc[name] is None:
            return True  # no document field, or the file had more values than the set keeps
        stored = doc[name] if isinstance(doc[name], list) else [doc[name]]
        try:
            return any(item is not None and domain.stored(item) == value for item in stored)
        except (TypeError, ValueError):
            return True

    return check


def _partition_check(name: str, domain: Domain, value: Any) -> Callable[[Mapping[str, Any]], bool]:
    def check(doc: Mapping[str, Any]) -> bool:
        if name not in doc:
            return True
        if doc[name] is None:
            return False  # the file's partition value is null: it equals nothing
        try:
            return bool(domain.stored(doc[name]) == value)
        except (TypeError, ValueError):
            return True

    return check


def _min_max_test(name: str, predicate: ColumnPredicate, domain: Domain, values: list[Any]) -> FileTest:
    low_field, high_field = f"MinMax_{name}_0", f"MinMax_{name}_1"
    op, strict = predicate.op, domain.exact
    floating = predicate.data_type in _FLOATING
    least, greatest = min(values), max(values)

    def meets(low: Any, high: Any) -> bool:
        if op == "=":
            return bool(low <= least <= high)
        if op == "<":
            return bool(low < least if strict else low <= least)
        if op == "<=":
            return bool(low <= least)
        if op == ">":
            return bool(high > greatest if strict else high >= greatest)
        if op == ">=":
            return bool(high >= greatest)
        return bool(low <= greatest and high >= least)  # IN: the range of the listed values

    def check(doc: Mapping[str, Any]) -> bool:
        if low_field not in doc or high_field not in doc:
            return True
        low, high = doc[low_field], doc[high_field]
        if low is None or high is None:
            return floating  # every value of the file is null: no comparison holds (NaN aside)
        try:
            return meets(domain.stored(low), domain.stored(high))
        except (TypeError, ValueError):
            return True

    return FileTest(SkippingKind.MIN_MAX, predicate, (low_field, high_field), check)


def _bloom_test(name: str, predicate: ColumnPredicate, hasher: LiteralHasher) -> FileTest | None:
    if predicate.data_type.startswith(("array", "map", "struct")):
        return None
    item = hasher(predicate)
    if item is None:
        return None
    try:
        probe = EncodedProbe(item)
    except ValueError:  # not a 64-bit hash
        return None

    def check(doc: Mapping[str, Any]) -> bool:
        stored = doc.get(name)
        if not isinstance(stored, str):
            return True
        try:
            return probe.might_contain(stored)
        except (binascii.Error, ValueError, IndexError):
            return True

    return FileTest(SkippingKind.BLOOM_FILTER, predicate, (name,), check)


# -- files ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSelection:
    """The table's files (as listed for the scan) split by the index: ``kept`` are read,
    ``skipped`` are not; ``unindexed`` counts listed files the index has no document for."""

    listed: int
    kept: tuple[str, ...]
    skipped: tuple[str, ...]
    unindexed: int


def select_files(
    listed: Sequence[str], documents: Mapping[str, Mapping[str, Any]], tests: Sequence[FileTest], hybrid: bool
) -> FileSelection:
    """Split ``listed`` (normalized paths) by the index ``documents`` (by normalized path):
    a file is kept when every test may hold for its document; a file without a document is kept
    when ``hybrid`` is on, skipped otherwise (the reference's behaviour with hybrid scan off)."""
    kept: list[str] = []
    skipped: list[str] = []
    unindexed = 0
    for path in listed:
        doc = documents.get(path)
        if doc is None:
            unindexed += 1
            (kept if hybrid else skipped).append(path)
        elif all(test.check(doc) for test in tests):
            kept.append(path)
        else:
            skipped.append(path)
    return FileSelection(len(listed), tuple(kept), tuple(skipped), unindexed)


def documents_by_path(hits: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Index documents by their normalized ``file_path`` (documents without one are ignored)."""
    found: dict[str, Mapping[str, Any]] = {}
    for doc in hits:
        path = doc.get(FILE_PATH_FIELD)
        if isinstance(path, str) and path:
            found[normalize_path(path)] = doc
    return found


__all__ = [
    "ACCEPTED_OPERATORS",
    "FILE_PATH_FIELD",
    "FileSelection",
    "FileTest",
    "LiteralHasher",
    "documents_by_path",
    "file_tests",
    "json_type_name",
    "select_files",
]
