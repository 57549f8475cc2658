"""PPL expressions to Spark SQL expression text.

An :class:`Env` carries what an expression is translated against: the fields an earlier ``eval``
of the same SQL block defined (a reference to one is replaced by its definition, since SQL cannot
refer to a ``SELECT`` alias in ``WHERE``), the parameters of the enclosing lambdas, and a way to
translate a subsearch (a whole pipeline, done by :mod:`.translate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from query_core.ppl import ast, functions
from query_core.ppl.errors import PplSemanticError

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_PART = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)"
#: A column reference, possibly qualified and quoted: never needs parentheses.
_REFERENCE = re.compile(rf"{_NAME_PART}(?:\.{_NAME_PART})*")

#: Words that Spark's parser will not take as an unquoted column name in every position.
_SQL_RESERVED = frozenset(
    """all and any anti as asc between both by case cast cross current_date current_time current_timestamp
    current_user desc distinct else end except false fetch filter for from full group having in inner
    intersect interval is join lateral left like limit minus natural not null of offset on or order outer
    right rlike select semi set some table then to true union unknown using when where window with""".split()
)


# -- names and literals --------------------------------------------------------------------------


def quote_name(name: str) -> str:
    """A Spark identifier for ``name``: as is when plain, else in backticks."""
    if _PLAIN_NAME.fullmatch(name) and name.lower() not in _SQL_RESERVED:
        return name
    return "`" + name.replace("`", "``") + "`"


def table_sql(table: ast.TableName) -> str:
    """The dotted table name as written, each part quoted only when needed."""
    return ".".join(quote_name(part) for part in table.parts)


def field_sql(field_ref: ast.Field, qualifier: str | None = None) -> str:
    """A field reference: each dotted part is a name (a struct member after the first)."""
    parts = [quote_name(part) for part in field_ref.parts]
    return ".".join([qualifier, *parts] if qualifier else parts)


def string_sql(value: str) -> str:
    """A Spark string literal holding exactly ``value``."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def unresolved(name: str) -> PplSemanticError:
    """The error of a field a command needs but that its input does not have, in Spark's words."""
    quoted = "`" + name.replace("`", "``") + "`"
    return PplSemanticError(
        f"[UNRESOLVED_COLUMN] A column or function parameter with name {quoted} cannot be resolved."
    )


def aliased(sql: str, name: str) -> str:
    """``sql AS name``, or just ``sql`` when it is that name already."""
    quoted = quote_name(name)
    return sql if sql == quoted else f"{sql} AS {quoted}"


# -- the environment -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Env:
    """What names mean while translating one expression.

    ``defs`` maps a lower-cased field name to the SQL of its definition; ``params`` are lambda
    parameters in scope (never replaced); ``subsearch`` translates a subsearch to SQL.
    """

    subsearch: Callable[[ast.Query], str]
    defs: Mapping[str, str] = field(default_factory=dict)
    params: frozenset[str] = frozenset()

    def with_params(self, names: tuple[str, ...]) -> Env:
        return Env(self.subsearch, self.defs, self.params | {n.lower() for n in names})


def field_ref_sql(ref: ast.Field, env: Env) -> str:
    if len(ref.parts) == 1:
        key = ref.parts[0].lower()
        if key in env.params:
            return quote_name(ref.parts[0])
        if key in env.defs:
            return parenthesized(env.defs[key])
    return field_sql(ref)


def parenthesized(sql: str) -> str:
    """``sql`` as an operand: in parentheses unless it is one name or already one parenthesised group."""
    if _REFERENCE.fullmatch(sql):
        return sql
    if sql.startswith("(") and sql.endswith(")"):
        depth = 0
        for i, char in enumerate(sql):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and i < len(sql) - 1:
                break
        else:
            return sql
    return f"({sql})"


# -- expressions ---------------------------------------------------------------------------------


def expr_sql(expr: ast.Expr, env: Env) -> str:
    """The Spark SQL of a scalar expression (an aggregation inside is an error of ``functions``)."""
    match expr:
        case ast.Literal():
            return literal_sql(expr)
        case ast.Field():
            return field_ref_sql(expr, env)
        case ast.Binary(op="XOR"):
            return f"({expr_sql(expr.left, env)} <> {expr_sql(expr.right, env)})"
        case ast.Binary():
            return f"({expr_sql(expr.left, env)} {expr.op} {expr_sql(expr.right, env)})"
        case ast.Unary(op="NOT"):
            return f"(NOT {expr_sql(expr.operand, env)})"
        case ast.Unary():
            return f"(- {expr_sql(expr.operand, env)})"
        case ast.InList():
            values = ", ".join(expr_sql(v, env) for v in expr.values)
            return f"({expr_sql(expr.expr, env)} IN ({values}))"
        case ast.Between():
            parts = (expr_sql(e, env) for e in (expr.expr, expr.low, expr.high))
            return "({} BETWEEN {} AND {})".format(*parts)
        case ast.Subquery():
            return _subquery_sql(expr, env)
        case ast.Cast():
            return functions.cast_sql(expr_sql(expr.expr, env), expr.type_name)
        case ast.Call():
            return _call_sql(expr, env)
        case ast.Interval():
            return functions.interval_sql(expr_sql(expr.value, env), expr.unit)
        case ast.Lambda():
            return _lambda_sql(expr, env)
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def _lambda_sql(lam: ast.Lambda, env: Env) -> str:
    inner = env.with_params(lam.params)
    params = ", ".join(quote_name(p) for p in lam.params)
    head = params if len(lam.params) == 1 else f"({params})"
    return f"{head} -> {expr_sql(lam.body, inner)}"


def _subquery_sql(subquery: ast.Subquery, env: Env) -> str:
    inner = env.subsearch(subquery.query)
    if subquery.kind == "exists":
        return f"(EXISTS ({inner}))"
    if subquery.kind == "scalar":
        return f"({inner})"
    if subquery.tuple_exprs:
        left = ", ".join(expr_sql(e, env) for e in subquery.tuple_exprs)
        return f"(({left}) IN ({inner}))"
    assert subquery.expr is not None
    return f"({expr_sql(subquery.expr, env)} IN ({inner}))"


def literal_sql(literal: ast.Literal) -> str:
    match literal.kind:
        case "int":
            return str(literal.value)
        case "decimal":
            # An exact decimal, as in Spark SQL: `.06 + 0.01 = 0.07` holds, as TPC-H's queries need.
            return literal.text
        case "string":
            return string_sql(str(literal.value))
        case "bool":
            return "TRUE" if literal.value else "FALSE"
        case "null":
            return "NULL"
        case "date" | "timestamp":
            return f"{literal.kind.upper()} {string_sql(str(literal.value))}"
        case "time":
            # Spark has no TIME type: a time of day is an 'HH:mm:ss' string, as time() gives.
            return f"date_format(timestamp(concat('1970-01-01 ', {string_sql(str(literal.value))})), 'HH:mm:ss')"
    raise PplSemanticError(f"A time span such as {literal.text} is only allowed in span(...)")


def _call_sql(call: ast.Call, env: Env) -> str:
    if call.name.lower() == "case":
        return _case_sql(call, env)
    if call.default is not None:
        raise PplSemanticError(f"Only case(...) takes an else value, not {call.name}")
    if call.distinct:
        raise PplSemanticError(f"distinct is only allowed in an aggregation, not in {call.name}")
    return functions.scalar_sql(call.name, [expr_sql(a, env) for a in call.args])


def _case_sql(call: ast.Call, env: Env) -> str:
    if not call.args or len(call.args) % 2:
        raise PplSemanticError("case(...) takes pairs of a condition and a value, then an optional else value")
    pairs = zip(call.args[::2], call.args[1::2], strict=True)
    whens = " ".join(f"WHEN {expr_sql(c, env)} THEN {expr_sql(v, env)}" for c, v in pairs)
    default = "" if call.default is None else f" ELSE {expr_sql(call.default, env)}"
    return f"CASE {whens}{default} END"


def aggregation_sql(call: ast.Call, env: Env) -> str:
    """The Spark SQL of an aggregation call of ``stats``/``eventstats``/``top``."""
    if call.default is not None:
        raise PplSemanticError(f"{call.name} takes no else value")
    return functions.aggregate_sql(call.name, [expr_sql(a, env) for a in call.args], call.distinct)


# -- reading expressions -------------------------------------------------------------------------


def field_refs(expr: ast.Expr) -> Iterator[ast.Field]:
    """The fields ``expr`` refers to, outside subsearches and lambda parameters."""
    yield from _refs(expr, frozenset())


def _refs(expr: ast.Expr, params: frozenset[str]) -> Iterator[ast.Field]:
    match expr:
        case ast.Field():
            if not (len(expr.parts) == 1 and expr.parts[0].lower() in params):
                yield expr
        case ast.Binary():
            yield from _refs(expr.left, params)
            yield from _refs(expr.right, params)
        case ast.Unary():
            yield from _refs(expr.operand, params)
        case ast.InList():
            for e in (expr.expr, *expr.values):
                yield from _refs(e, params)
        case ast.Between():
            for e in (expr.expr, expr.low, expr.high):
                yield from _refs(e, params)
        case ast.Subquery():
            for e in (*([expr.expr] if expr.expr is not None else []), *expr.tuple_exprs):
                yield from _refs(e, params)
        case ast.Cast():
            yield from _refs(expr.expr, params)
        case ast.Call():
            for e in (*expr.args, *([expr.default] if expr.default is not None else [])):
                yield from _refs(e, params)
        case ast.Interval():
            yield from _refs(expr.value, params)
        case ast.Lambda():
            yield from _refs(expr.body, params | {p.lower() for p in expr.params})


def is_volatile(expr: ast.Expr) -> bool:
    """Whether ``expr`` calls a function whose value changes between evaluations (``rand``): its
    definition must not be copied where it is referred to."""
    match expr:
        case ast.Call() if expr.name.lower() in ("rand", "uuid", "random"):
            return True
        case ast.Call():
            return any(is_volatile(a) for a in expr.args) or (expr.default is not None and is_volatile(expr.default))
        case ast.Binary():
            return is_volatile(expr.left) or is_volatile(expr.right)
        case ast.Unary():
            return is_volatile(expr.operand)
        case ast.Cast():
            return is_volatile(expr.expr)
    return False


def ppl_text(expr: ast.Expr) -> str:
    """An expression as the reference names a column computed from it, e.g. ``avg(x)``."""
    match expr:
        case ast.Literal(kind="string"):
            return expr.text
        case ast.Literal():
            return expr.text or str(expr.value)
        case ast.Field():
            return expr.name
        case ast.Binary():
            return f"{ppl_text(expr.left)} {expr.op} {ppl_text(expr.right)}"
        case ast.Unary(op="NOT"):
            return f"NOT {ppl_text(expr.operand)}"
        case ast.Unary():
            return f"-{ppl_text(expr.operand)}"
        case ast.InList():
            return f"{ppl_text(expr.expr)} in ({', '.join(ppl_text(v) for v in expr.values)})"
        case ast.Between():
            return f"{ppl_text(expr.expr)} between {ppl_text(expr.low)} and {ppl_text(expr.high)}"
        case ast.Subquery():
            head = ppl_text(expr.expr) + " in " if expr.expr else ""
            return f"{head}{'exists ' if expr.kind == 'exists' else ''}[...]"
        case ast.Cast():
            return f"cast({ppl_text(expr.expr)} as {expr.type_name})"
        case ast.Call():
            if expr.text:
                return expr.text
            args = ", ".join(ppl_text(a) for a in expr.args)
            return f"{expr.name}({'distinct ' if expr.distinct else ''}{args})"
        case ast.Interval():
            return f"interval {ppl_text(expr.value)} {expr.unit.lower()}"
        case ast.Lambda():
            params = expr.params[0] if len(expr.params) == 1 else f"({', '.join(expr.params)})"
            return f"{params} -> {ppl_text(expr.body)}"
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


# -- span ----------------------------------------------------------------------------------------

#: Seconds of each time unit that has a fixed length.
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: Months of each calendar unit.
_UNIT_MONTHS = {"M": 1, "q": 3, "y": 12}
_LONG_UNITS = {
    "millisecond": "ms",
    "second": "s",
    "minute": "m",
    "hour": "h",
    "day": "d",
    "week": "w",
    "month": "M",
    "quarter": "q",
    "year": "y",
}
_INTERVAL = re.compile(r"(\d+)([A-Za-z]+)")


def _interval_unit(text: str) -> tuple[int, str]:
    match = _INTERVAL.fullmatch(text)
    if match is None:  # pragma: no cover - the grammar only lets such text through
        raise PplSemanticError(f"Invalid time interval {text}")
    amount, unit = int(match.group(1)), match.group(2)
    unit = _LONG_UNITS.get(unit.lower().rstrip("s") if len(unit) > 2 else "", unit)
    if amount < 1:
        raise PplSemanticError(f"The span interval must be positive, not {text}")
    return amount, unit


def span_sql(span: ast.Span, env: Env) -> str:
    """The bucket of ``span(field, interval)``: the interval's start (a number or a timestamp)."""
    value = expr_sql(span.field, env)
    interval = span.interval
    if interval.kind != "interval":
        if not isinstance(interval.value, int | float) or interval.value <= 0:
            raise PplSemanticError(f"The span interval must be positive, not {interval.text}")
        size = literal_sql(interval)
        return f"(floor({value} / {size}) * {size})"
    amount, unit = _interval_unit(str(interval.value))
    ts = f"CAST({value} AS TIMESTAMP)"
    if unit == "ms":
        return f"timestamp_millis(floor(unix_millis({ts}) / {amount}) * {amount})"
    if unit in _UNIT_SECONDS:
        seconds = amount * _UNIT_SECONDS[unit]
        return f"timestamp_seconds(floor(unix_seconds({ts}) / {seconds}) * {seconds})"
    months = amount * _UNIT_MONTHS[unit]
    index = f"((year({ts}) - 1970) * 12 + month({ts}) - 1)"
    return f"CAST(add_months(DATE'1970-01-01', CAST(floor({index} / {months}) * {months} AS INT)) AS TIMESTAMP)"


def span_name(span: ast.Span) -> str:
    """The output name of a span: its alias, else as the reference writes it, ``span(age,10)``."""
    return span.alias or f"span({ppl_text(span.field)},{span.interval.text})"
