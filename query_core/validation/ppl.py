"""PPL queries checked on this project's PPL syntax tree (:mod:`query_core.ppl.ast`).

The reference's PPL elements (its ``PPLQueryValidator``): the ``join``, ``lookup``, ``fillnull``
and ``describe`` commands, subsearches, IP address, JSON and lambda functions. And what the query
reaches in Spark, as SQL would: a path-based source (``source = text.`/etc/hostname```) is
``File``, and each function is typed by the Spark functions its translation calls.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from query_core.ppl import ast
from query_core.ppl.errors import PplSemanticError
from query_core.ppl.functions import aggregate_sql, function_spec, is_aggregate, scalar_sql
from query_core.validation.checks import Checks
from query_core.validation.elements import GrammarElement as E
from query_core.validation.sql import _Dialect

_LAMBDA_FUNCTIONS = frozenset({"forall", "exists", "filter", "transform", "reduce"})
_FAMILY_ELEMENTS = {"json": E.JSON_FUNCTIONS, "ip": E.IPADDRESS_FUNCTIONS}


def check_ppl(query: ast.Query, checks: Checks) -> None:
    """Refuse ``query`` (:class:`QueryRefusedError`) when it holds an element the policy denies."""
    for node in _nodes(query):
        _check_node(node, checks)


def _nodes(value: object) -> Iterator[object]:
    """Every node of the tree, parents before children."""
    if isinstance(value, tuple):
        for item in value:
            yield from _nodes(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield value
        for f in dataclasses.fields(value):
            yield from _nodes(getattr(value, f.name))


def _check_node(node: object, checks: Checks) -> None:
    if isinstance(node, ast.Search):
        checks.table(node.table.parts)
    elif isinstance(node, ast.Describe):
        checks.element(E.DESCRIBE_COMMAND)
        checks.table(node.table.parts)
    elif isinstance(node, ast.Join):
        checks.element(E.JOIN_COMMAND)
        if isinstance(node.right, ast.TableName):
            checks.table(node.right.parts)
    elif isinstance(node, ast.Lookup):
        checks.element(E.LOOKUP_COMMAND)
        checks.table(node.table.parts)
    elif isinstance(node, ast.FillNull):
        checks.element(E.FILLNULL_COMMAND)
    elif isinstance(node, ast.Subquery):
        checks.element(E.SUBQUERY_COMMAND)
    elif isinstance(node, ast.Call):
        _call(node, checks)


def _call(call: ast.Call, checks: Checks) -> None:
    name = call.name.lower()
    spec = function_spec(name)
    element = _FAMILY_ELEMENTS.get(spec.family) if spec is not None else None
    if element is not None:
        checks.element(element)
    if name in _LAMBDA_FUNCTIONS:
        checks.element(E.LAMBDA_FUNCTIONS)
    for spark_name in spark_calls(name, len(call.args)):
        checks.function(spark_name)


@functools.cache
def spark_calls(name: str, arity: int) -> tuple[str, ...]:
    """The Spark functions the translation of a call of the PPL function ``name`` calls."""
    args = ["x"] * arity
    try:
        sql = aggregate_sql(name, args) if is_aggregate(name) else scalar_sql(name, args)
        tree = sqlglot.parse_one(f"SELECT {sql}", dialect=_Dialect)
    except (PplSemanticError, SqlglotError):
        return ()
    return tuple(node.name for node in tree.find_all(exp.Anonymous))
