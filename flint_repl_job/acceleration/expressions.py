"""Catalyst expressions as the acceleration reads them: from a plan's JSON (``TreeNode.toJSON``), into
column predicates a Flint index can answer (``docs/acceleration.md``).

Spark writes an expression as a list of nodes in pre-order, each with its class and
``num-children``; this module rebuilds the tree (:func:`expression_of`), splits a filter into its
``AND`` conjuncts, and turns each conjunct of the form ``column <op> literal`` (``=``, ``<``,
``<=``, ``>``, ``>=``, ``IN``; the literal on either side) into a :class:`ColumnPredicate`.

Literal values come from the JSON text of the literal, decoded by its Spark type, except where
that text is not exact: a timestamp is printed in the session's time zone (ambiguous at a
daylight-saving change) and an ``InSet`` (what Spark makes of an ``IN`` of more than a few values)
prints no values at all. Those are asked of the JVM through a :data:`LiteralReader`, by the path
of the node in the expression tree.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

#: Comparison operators of a predicate, by Catalyst class.
COMPARISONS = {
    "EqualTo": "=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}
#: ``literal <op> column`` read as ``column <flipped op> literal``.
FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
#: Expression classes whose value depends on a query other than the one filtered.
SUBQUERIES = frozenset(
    {"ScalarSubquery", "Exists", "ListQuery", "InSubquery", "LateralSubquery", "DynamicPruningSubquery"}
)

#: Reads the values of a literal (or of an ``InSet``) at a path of child ordinals from the
#: condition's root, as Catalyst's internal values printed (``toString``); None if it cannot.
LiteralReader = Callable[[tuple[int, ...]], "list[str] | None"]


@dataclass(frozen=True)
class Expr:
    """One Catalyst expression: its class (simple name), its own JSON fields and its children.
    ``path`` is the child ordinals that lead to it from the root of the tree it was read from."""

    cls: str
    fields: dict[str, Any]
    children: tuple[Expr, ...] = ()
    path: tuple[int, ...] = ()

    def walk(self) -> Iterator[Expr]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def data_type(self) -> str:
        return str(self.fields.get("dataType", ""))

    @property
    def expr_id(self) -> int | None:
        """The attribute's id (``AttributeReference``), None for other expressions."""
        ident = self.fields.get("exprId")
        return int(ident["id"]) if isinstance(ident, dict) and "id" in ident else None


def expression_of(nodes: Sequence[dict[str, Any]]) -> Expr:
    """The tree of a JSON expression (a pre-order list of nodes)."""
    tree, end = _read(nodes, 0, ())
    if end != len(nodes):
        raise ValueError(f"expression JSON has {len(nodes) - end} nodes after its tree")
    return tree


def _read(nodes: Sequence[dict[str, Any]], at: int, path: tuple[int, ...]) -> tuple[Expr, int]:
    node = nodes[at]
    cls = str(node.get("class", "")).rsplit(".", 1)[-1]
    count = int(node.get("num-children", 0))
    children = []
    pos = at + 1
    for i in range(count):
        child, pos = _read(nodes, pos, (*path, i))
        children.append(child)
    own = {k: v for k, v in node.items() if k not in ("class", "num-children")}
    return Expr(cls, own, tuple(children), path), pos


def conjuncts(condition: Expr) -> list[Expr]:
    """The ``AND`` operands of a condition, flattened."""
    if condition.cls == "And":
        return [c for child in condition.children for c in conjuncts(child)]
    return [condition]


def has_disjunction(condition: Expr) -> bool:
    """Whether an ``OR`` appears anywhere in the condition (the reference then uses no index)."""
    return any(e.cls == "Or" for e in condition.walk())


def has_subquery(condition: Expr) -> bool:
    return any(e.cls in SUBQUERIES for e in condition.walk())


# -- column predicates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnPredicate:
    """``column <op> values`` over one column of the filtered table: ``op`` is one of ``=``, ``<``,
    ``<=``, ``>``, ``>=`` (one value) or ``IN`` (one or more values). ``data_type`` is the column's
    Spark type as its JSON names it (``integer``, ``decimal(10,2)``, ...); ``values`` are Python
    values of that type (:func:`decode`). ``literal_paths`` locate the literals in the condition
    (the bloom filter hashes them with Spark's own function)."""

    column: str
    data_type: str
    op: str
    values: tuple[Any, ...]
    literal_paths: tuple[tuple[int, ...], ...] = field(default=(), compare=False)

    def sql(self) -> str:
        if self.op == "IN":
            return f"{self.column} IN ({', '.join(_show(v) for v in self.values)})"
        return f"{self.column} {self.op} {_show(self.values[0])}"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def column_predicate(
    conjunct: Expr, columns: dict[int, str], read_literal: LiteralReader | None = None
) -> ColumnPredicate | None:
    """The conjunct as a predicate over one of ``columns`` (attribute id -> column name), or None
    when it is of another shape (two columns, a function of the column, a cast, a subquery...)."""
    if conjunct.cls in COMPARISONS and len(conjunct.children) == 2:
        left, right = conjunct.children
        op = COMPARISONS[conjunct.cls]
        if right.cls == "Literal" and left.cls == "AttributeReference":
            column, literal = left, right
        elif left.cls == "Literal" and right.cls == "AttributeReference":
            column, literal, op = right, left, FLIPPED[op]
        else:
            return None
        name = columns.get(column.expr_id) if column.expr_id is not None else None
        value = _literal_values(literal, read_literal)
        if name is None or value is None or len(value) != 1 or value[0] is None:
            return None
        return ColumnPredicate(name, column.data_type, op, tuple(value), (literal.path,))
    if conjunct.cls == "In" and conjunct.children and conjunct.children[0].cls == "AttributeReference":
        column, *items = conjunct.children
        name = columns.get(column.expr_id) if column.expr_id is not None else None
        if name is None or not items or any(i.cls != "Literal" for i in items):
            return None
        values: list[Any] = []
        for item in items:
            decoded = _literal_values(item, read_literal)
            if decoded is None:
                return None
            values += decoded
        return _in_predicate(name, column.data_type, values, tuple(i.path for i in items))
    if conjunct.cls == "InSet" and len(conjunct.children) == 1 and conjunct.children[0].cls == "AttributeReference":
        column = conjunct.children[0]
        name = columns.get(column.expr_id) if column.expr_id is not None else None
        texts = read_literal(conjunct.path) if read_literal is not None else None
        if name is None or texts is None:
            return None
        decoded_set = [decode_internal(t, column.data_type) for t in texts]
        if any(v is _UNDECODABLE for v in decoded_set):
            return None
        return _in_predicate(name, column.data_type, decoded_set, ())
    return None


def _in_predicate(
    name: str, data_type: str, values: list[Any], paths: tuple[tuple[int, ...], ...]
) -> ColumnPredicate | None:
    present = [v for v in values if v is not None]  # a null in the list matches no row
    if not present:
        return None
    return ColumnPredicate(name, data_type, "IN", tuple(present), paths)


def _literal_values(literal: Expr, read_literal: LiteralReader | None) -> list[Any] | None:
    """The literal's value as a one-element list (None when it cannot be read exactly)."""
    if literal.fields.get("value") is None:
        return [None]
    if literal.data_type in _JVM_READ:
        texts = read_literal(literal.path) if read_literal is not None else None
        if texts is None or len(texts) != 1:
            return None
        value = decode_internal(texts[0], literal.data_type)
    else:
        value = decode(str(literal.fields["value"]), literal.data_type)
    return None if value is _UNDECODABLE else [value]


# -- values --------------------------------------------------------------------------------------

_UNDECODABLE = object()
#: Types whose literal JSON text is not exact: read from the JVM (internal value: microseconds).
_JVM_READ = frozenset({"timestamp", "timestamp_ntz"})
_INTEGRAL = frozenset({"byte", "short", "integer", "long"})
EPOCH = dt.date(1970, 1, 1)


def decode(text: str, data_type: str) -> Any:
    """A literal's JSON text (``Literal.toString``) as a Python value of its type; an object that is
    not a value (``_UNDECODABLE``) for types this module does not compare."""
    try:
        if data_type in _INTEGRAL:
            return int(text)
        if data_type in ("double", "float"):
            value = float(text)
            return float32(value) if data_type == "float" else value
        if data_type == "string":
            return text
        if data_type == "boolean":
            return {"true": True, "false": False}[text]
        if data_type.startswith("decimal"):
            return Decimal(text)
        if data_type == "date":
            return dt.date.fromisoformat(text)
    except (ValueError, KeyError, InvalidOperation):
        return _UNDECODABLE
    return _UNDECODABLE


def decode_internal(text: str, data_type: str) -> Any:
    """A Catalyst internal value printed (``toString``) as a Python value of its type: dates are
    days since the epoch, timestamps microseconds, strings and numbers as :func:`decode` reads them."""
    try:
        if data_type == "date":
            return EPOCH + dt.timedelta(days=int(text))
        if data_type in _JVM_READ:
            return int(text)
    except (ValueError, OverflowError):
        return _UNDECODABLE
    return decode(text, data_type)


def float32(value: float) -> float:
    """``value`` rounded to the nearest 32-bit float (how Spark holds a ``float``)."""
    if not math.isfinite(value):
        return value
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


__all__ = [
    "ColumnPredicate",
    "Expr",
    "LiteralReader",
    "column_predicate",
    "conjuncts",
    "decode",
    "decode_internal",
    "expression_of",
    "has_disjunction",
    "has_subquery",
]
