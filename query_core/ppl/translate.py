"""A PPL query to Spark SQL text.

Each pipe stage wraps the SQL of the stages before it as a subquery, ``SELECT ... FROM (<before>)
AS _sN``, with ``N`` counting stages from 1, so that the text is deterministic and every stage can
be read on its own. Spark's optimizer collapses the nesting.

Most commands need nothing but the query text. A few need the names of their input's columns
(``fields -``, ``rename``, ``dedup``, ``eval`` and ``parse``/``grok``, which must know whether they
replace a field, ``fillnull``, ``lookup``): those ask the ``columns`` callback, once per command,
unless an earlier stage already fixed the column list (``fields``, ``stats``, ``top``...).
Unknown fields are otherwise left to Spark's analysis, which reports them in its own words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from query_core.ppl import ast, functions
from query_core.ppl.errors import PplSemanticError
from query_core.ppl.parser import parse_ppl

ColumnsOf = Callable[[str], list[str]]

#: The ``columns`` callback of the translation under way, for subsearches inside expressions.
_COLUMNS: ContextVar[ColumnsOf] = ContextVar("ppl_columns")

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Words that Spark's parser will not take as an unquoted column name in every position.
_SQL_RESERVED = frozenset(
    """all and any anti as asc between both by case cast cross current_date current_time current_timestamp
    current_user desc distinct else end except false fetch filter for from full group having in inner
    intersect interval is join lateral left like limit minus natural not null of offset on or order outer
    right rlike select semi set some table then to true union unknown using when where window with""".split()
)


def to_spark_sql(query: ast.Query | str, columns: ColumnsOf) -> str:
    """The Spark SQL text of ``query`` (PPL text is parsed first, raising :class:`PplSyntaxError`).

    ``columns(sql)`` must return the output column names of the SQL relation ``sql``; it is only
    called for commands that need their input's columns. Raises :class:`PplSemanticError` for what
    cannot be translated (an unknown function, a field that a command needs but is not there).
    """
    parsed = parse_ppl(query) if isinstance(query, str) else query
    token = _COLUMNS.set(columns)
    try:
        body = _describe(parsed.source) if isinstance(parsed.source, ast.Describe) else _pipeline(parsed, columns)
    except RecursionError:
        raise PplSemanticError("The query is nested too deeply to translate") from None
    finally:
        _COLUMNS.reset(token)
    if parsed.explain is None:
        return body
    mode = "" if parsed.explain == "simple" else parsed.explain.upper() + " "
    return f"EXPLAIN {mode}{body}"


def _describe(describe: ast.Describe) -> str:
    return f"DESCRIBE TABLE {table_sql(describe.table)}"


def _pipeline(query: ast.Query, columns: ColumnsOf) -> str:
    assert isinstance(query.source, ast.Search)
    translator = _Translator(columns)
    translator.search(query.source)
    for command in query.commands:
        translator.command(command)
    return translator.sql


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


# -- expressions ---------------------------------------------------------------------------------


def expr_sql(expr: ast.Expr, qualifier: str | None = None) -> str:
    """The Spark SQL of a scalar expression (an aggregation inside is an error of ``functions``)."""
    match expr:
        case ast.Literal():
            return _literal_sql(expr)
        case ast.Field():
            return field_sql(expr, qualifier)
        case ast.Binary(op="XOR"):
            return f"({expr_sql(expr.left, qualifier)} <> {expr_sql(expr.right, qualifier)})"
        case ast.Binary():
            return f"({expr_sql(expr.left, qualifier)} {expr.op} {expr_sql(expr.right, qualifier)})"
        case ast.Unary(op="NOT"):
            return f"(NOT {expr_sql(expr.operand, qualifier)})"
        case ast.Unary():
            return f"(- {expr_sql(expr.operand, qualifier)})"
        case ast.InList():
            values = ", ".join(expr_sql(v, qualifier) for v in expr.values)
            return f"({expr_sql(expr.expr, qualifier)} IN ({values}))"
        case ast.Between():
            parts = (expr_sql(e, qualifier) for e in (expr.expr, expr.low, expr.high))
            return "({} BETWEEN {} AND {})".format(*parts)
        case ast.Subquery():
            return _subquery_sql(expr, qualifier)
        case ast.Cast():
            return functions.cast_sql(expr_sql(expr.expr, qualifier), expr.type_name)
        case ast.Call():
            return _call_sql(expr, qualifier)
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def _subquery_sql(subquery: ast.Subquery, qualifier: str | None) -> str:
    inner = _pipeline(subquery.query, _COLUMNS.get())
    if subquery.kind == "exists":
        return f"(EXISTS ({inner}))"
    if subquery.kind == "scalar":
        return f"({inner})"
    assert subquery.expr is not None
    return f"({expr_sql(subquery.expr, qualifier)} IN ({inner}))"


def _literal_sql(literal: ast.Literal) -> str:
    match literal.kind:
        case "int":
            return str(literal.value)
        case "decimal":
            # A decimal literal is a double in the reference, a DECIMAL in Spark unless suffixed.
            return f"{literal.text}D"
        case "string":
            return string_sql(str(literal.value))
        case "bool":
            return "TRUE" if literal.value else "FALSE"
        case "null":
            return "NULL"
    raise PplSemanticError(f"A time interval such as {literal.text} is only allowed in span(...)")


def _call_sql(call: ast.Call, qualifier: str | None) -> str:
    if call.name.lower() == "case":
        return _case_sql(call, qualifier)
    if call.default is not None:
        raise PplSemanticError(f"Only case(...) takes an else value, not {call.name}")
    if call.distinct:
        raise PplSemanticError(f"distinct is only allowed in an aggregation, not in {call.name}")
    return functions.scalar_sql(call.name, [expr_sql(a, qualifier) for a in call.args])


def _case_sql(call: ast.Call, qualifier: str | None) -> str:
    if not call.args or len(call.args) % 2:
        raise PplSemanticError("case(...) takes pairs of a condition and a value, then an optional else value")
    pairs = zip(call.args[::2], call.args[1::2], strict=True)
    whens = " ".join(f"WHEN {expr_sql(c, qualifier)} THEN {expr_sql(v, qualifier)}" for c, v in pairs)
    default = "" if call.default is None else f" ELSE {expr_sql(call.default, qualifier)}"
    return f"CASE {whens}{default} END"


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
            return (
                f"{ppl_text(expr.expr) + ' in ' if expr.expr else ''}{'exists ' if expr.kind == 'exists' else ''}[...]"
            )
        case ast.Cast():
            return f"cast({ppl_text(expr.expr)} as {expr.type_name})"
        case ast.Call():
            args = ", ".join(ppl_text(a) for a in expr.args)
            return f"{expr.name}({'distinct ' if expr.distinct else ''}{args})"
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def aggregation_sql(call: ast.Call) -> str:
    """The Spark SQL of an aggregation call of ``stats``/``eventstats``/``top``."""
    if call.default is not None:
        raise PplSemanticError(f"{call.name} takes no else value")
    return functions.aggregate_sql(call.name, [expr_sql(a) for a in call.args], call.distinct)


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


def span_sql(span: ast.Span, qualifier: str | None = None) -> str:
    """The bucket of ``span(field, interval)``: the interval's start (a number or a timestamp)."""
    value = expr_sql(span.field, qualifier)
    interval = span.interval
    if interval.kind != "interval":
        if not isinstance(interval.value, int | float) or interval.value <= 0:
            raise PplSemanticError(f"The span interval must be positive, not {interval.text}")
        size = _literal_sql(interval)
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


# -- parse and grok ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractPattern:
    """A regex without group names, for Spark's ``regexp_extract``, and the named groups' numbers."""

    regex: str
    groups: tuple[tuple[str, int], ...]


_GROUP_START = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9_]*)>")


def named_groups(pattern: str) -> ExtractPattern:
    """The groups ``(?<name>...)`` of a Java regex, numbered as Java numbers capturing groups.

    The names are dropped from the regex: Java only allows letters and digits in group names,
    while the reference takes names like ``client_ip``.
    """
    out: list[str] = []
    groups: list[tuple[str, int]] = []
    number = 0
    i = 0
    in_class = False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            named = _GROUP_START.match(pattern, i)
            if named is not None:
                number += 1
                groups.append((named.group(1), number))
                out.append("(")
                i = named.end()
                continue
            if not pattern.startswith("(?", i):
                number += 1
        out.append(char)
        i += 1
    return ExtractPattern("".join(out), tuple(groups))


#: Grok patterns, by name; ``%{NAME}`` and ``%{NAME:field}`` refer to them.
GROK_PATTERNS: dict[str, str] = {
    "USERNAME": r"[a-zA-Z0-9._-]+",
    "USER": r"%{USERNAME}",
    "EMAILLOCALPART": r"[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]+(?:\.[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]+)*",
    "EMAILADDRESS": r"%{EMAILLOCALPART}@%{HOSTNAME}",
    "INT": r"[+-]?[0-9]+",
    "BASE10NUM": r"[+-]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)",
    "NUMBER": r"%{BASE10NUM}",
    "BASE16NUM": r"[+-]?(?:0x)?[0-9A-Fa-f]+",
    "POSINT": r"\b[1-9][0-9]*\b",
    "NONNEGINT": r"\b[0-9]+\b",
    "WORD": r"\b\w+\b",
    "NOTSPACE": r"\S+",
    "SPACE": r"\s*",
    "DATA": r".*?",
    "GREEDYDATA": r".*",
    "QUOTEDSTRING": r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'",
    "UUID": r"[A-Fa-f0-9]{8}-(?:[A-Fa-f0-9]{4}-){3}[A-Fa-f0-9]{12}",
    "IPV6": r"(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,7}:|:(?::[0-9A-Fa-f]{1,4}){1,7}"
    r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}",
    "IPV4": r"(?<![0-9])(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(?![0-9])",
    "IP": r"%{IPV6}|%{IPV4}",
    "HOSTNAME": r"\b(?:[0-9A-Za-z][0-9A-Za-z-]{0,62})(?:\.(?:[0-9A-Za-z][0-9A-Za-z-]{0,62}))*(?:\.?|\b)",
    "IPORHOST": r"%{IP}|%{HOSTNAME}",
    "HOSTPORT": r"%{IPORHOST}:%{POSINT}",
    "URIPROTO": r"[A-Za-z][A-Za-z0-9+\-.]+",
    "URIPATH": r"(?:/[A-Za-z0-9$.+!*'(){},~:;=@#%&_\-]*)+",
    "URIPARAM": r"\?[A-Za-z0-9$.+!*'|(){},~@#%&/=:;_?\-\[\]<>]*",
    "URIPATHPARAM": r"%{URIPATH}(?:%{URIPARAM})?",
    "MONTH": r"\b(?:[Jj]an(?:uary)?|[Ff]eb(?:ruary)?|[Mm]ar(?:ch)?|[Aa]pr(?:il)?|[Mm]ay|[Jj]un(?:e)?|[Jj]ul(?:y)?"
    r"|[Aa]ug(?:ust)?|[Ss]ep(?:tember)?|[Oo]ct(?:ober)?|[Nn]ov(?:ember)?|[Dd]ec(?:ember)?)\b",
    "MONTHNUM": r"0?[1-9]|1[0-2]",
    "MONTHDAY": r"(?:0[1-9])|(?:[12][0-9])|(?:3[01])|[1-9]",
    "DAY": r"\b(?:Mon(?:day)?|Tue(?:sday)?|Wed(?:nesday)?|Thu(?:rsday)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?)\b",
    "YEAR": r"\d\d(?:\d\d)?",
    "HOUR": r"2[0123]|[01]?[0-9]",
    "MINUTE": r"[0-5][0-9]",
    "SECOND": r"(?:[0-5]?[0-9]|60)(?:[:.,][0-9]+)?",
    "TIME": r"%{HOUR}:%{MINUTE}(?::%{SECOND})?",
    "DATE_US": r"%{MONTHNUM}[/-]%{MONTHDAY}[/-]%{YEAR}",
    "DATE_EU": r"%{MONTHDAY}[./-]%{MONTHNUM}[./-]%{YEAR}",
    "ISO8601_TIMEZONE": r"Z|[+-]%{HOUR}(?::?%{MINUTE})",
    "TIMESTAMP_ISO8601": r"%{YEAR}-%{MONTHNUM}-%{MONTHDAY}[T ]%{HOUR}:?%{MINUTE}(?::?%{SECOND})?%{ISO8601_TIMEZONE}?",
    "HTTPDATE": r"%{MONTHDAY}/%{MONTH}/%{YEAR}:%{TIME} %{INT}",
    "LOGLEVEL": r"[Aa]lert|ALERT|[Tt]race|TRACE|[Dd]ebug|DEBUG|[Nn]otice|NOTICE|[Ii]nfo|INFO|[Ww]arn(?:ing)?|WARN(?:ING)?"
    r"|[Ee]rr(?:or)?|ERR(?:OR)?|[Cc]rit(?:ical)?|CRIT(?:ICAL)?|[Ff]atal|FATAL|[Ss]evere|SEVERE|EMERG(?:ENCY)?|[Ee]merg(?:ency)?",
    "COMMONAPACHELOG": r"%{IPORHOST:clientip} %{USER:ident} %{USER:auth} \[%{HTTPDATE:timestamp}\] "
    r"\"(?:%{WORD:verb} %{NOTSPACE:request}(?: HTTP/%{NUMBER:httpversion})?|%{DATA:rawrequest})\" "
    r"%{NUMBER:response} (?:%{NUMBER:bytes}|-)",
    "COMBINEDAPACHELOG": r"%{COMMONAPACHELOG} %{QUOTEDSTRING:referrer} %{QUOTEDSTRING:agent}",
}

_GROK_REF = re.compile(r"%\{(\w+)(?::([\w.@-]+))?\}")


def grok_regex(pattern: str) -> str:
    """A grok pattern as a Java regex with named groups.

    ``%{P:name}`` captures as ``name`` at any depth; ``%{P}`` written by the user captures as ``P``
    (as the reference shows ``%{COMMONAPACHELOG}`` with a column of that name), while unnamed
    references inside a pattern's definition do not capture. A name captured twice keeps its first
    group; the others stop capturing.
    """
    taken: set[str] = set()

    def expand(text: str, depth: int) -> str:
        if depth > 20:
            raise PplSemanticError("Grok patterns refer to each other in a cycle")

        def replace(match: re.Match[str]) -> str:
            name, capture = match.group(1), match.group(2)
            definition = GROK_PATTERNS.get(name)
            if definition is None:
                raise PplSemanticError(f"Unknown grok pattern %{{{name}}}")
            body = expand(definition, depth + 1)
            target = capture or (name if depth == 0 else None)
            if target is None or target in taken:
                return f"(?:{body})"
            taken.add(target)
            return f"(?<{target}>{body})"

        return _GROK_REF.sub(replace, text)

    return expand(pattern, 0)


# -- the stages ----------------------------------------------------------------------------------


@dataclass
class _Translator:
    """The SQL so far (``sql``) and, when known without asking, its output columns (``known``)."""

    columns: ColumnsOf
    sql: str = ""
    known: list[str] | None = None
    stage: int = 0
    #: The bare table when the pipeline is nothing but ``source=t`` (a join can name it).
    table: str | None = None
    #: The alias the user gave the ``source`` table, if any.
    alias: str | None = None
    #: The FROM clause of a join that the next stage selects from directly, and its conditions.
    join_from: str | None = None
    join_where: list[str] = field(default_factory=list)

    def input_columns(self) -> list[str]:
        if self.known is None:
            self.known = list(self.columns(self.sql))
        return list(self.known)

    def wrap(self, select: str, tail: str = "", where: str | None = None) -> str:
        """``SELECT select FROM (<sql>) AS _sN [WHERE where] tail`` as the new SQL.

        Right after a join the stage selects from the join itself, so that the join's aliases
        (``l.id``) still qualify fields; a ``where`` there keeps the join open for the next stage.
        """
        conditions = [where] if where else []
        if self.join_from is not None:
            source = self.join_from
            conditions = [*self.join_where, *conditions]
            if select == "*" and not tail and where:
                self.join_where = conditions
            else:
                self.join_from, self.join_where = None, []
        else:
            self.stage += 1
            source = f"({self.sql}) AS _s{self.stage}"
        self.table = None
        filtered = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        self.sql = f"SELECT {select} FROM {source}{filtered}{tail}"
        return self.sql

    def search(self, search: ast.Search) -> None:
        self.table = table_sql(search.table)
        source = self.table
        if search.alias is not None:
            # As after a join, the next stage selects from the aliased table so the alias qualifies.
            self.alias = search.alias
            source = self.join_from = f"{self.table} AS {quote_name(search.alias)}"
        self.sql = f"SELECT * FROM {source}"
        if search.filter is not None:
            condition = expr_sql(search.filter)
            self.sql += f" WHERE {condition}"
            self.table = None
            self.join_where = [condition]

    def command(self, command: ast.Command) -> None:
        handler = getattr(self, "on_" + type(command).__name__.lower())
        handler(command)

    # one method per command
    def on_where(self, command: ast.Where) -> None:
        self.wrap("*", where=expr_sql(command.condition))

    def on_fields(self, command: ast.Fields) -> None:
        if command.exclude:
            drop = {_find(self.input_columns(), f.name) for f in command.fields}
            keep = [c for c in self.input_columns() if c not in drop]
            if not keep:
                raise PplSemanticError("fields - cannot remove every field")
            self.wrap(", ".join(quote_name(c) for c in keep))
            self.known = keep
            return
        self.wrap(", ".join(field_sql(f) for f in command.fields))
        self.known = [f.parts[-1] for f in command.fields]

    def on_stats(self, command: ast.Stats) -> None:
        if command.event:
            self._eventstats(command)
            return
        items: list[str] = []
        names: list[str] = []
        for agg in command.aggregations:
            names.append(agg.alias or ppl_text(agg.call))
            items.append(f"{aggregation_sql(agg.call)} AS {quote_name(names[-1])}")
        keys = [field_sql(g.field) for g in command.by]
        for group, key in zip(command.by, keys, strict=True):
            names.append(group.alias or group.field.name)
            items.append(aliased(key, names[-1]))
        if command.span is not None:
            keys.append(span_sql(command.span))
            names.append(span_name(command.span))
            items.append(f"{keys[-1]} AS {quote_name(names[-1])}")
        self.wrap(", ".join(items), f" GROUP BY {', '.join(keys)}" if keys else "")
        self.known = names

    def _eventstats(self, command: ast.Stats) -> None:
        keys = [field_sql(g.field) for g in command.by]
        if command.span is not None:
            keys.append(span_sql(command.span))
        window = f"OVER (PARTITION BY {', '.join(keys)})" if keys else "OVER ()"
        items = ["*"]
        names: list[str] = []
        for agg in command.aggregations:
            names.append(agg.alias or ppl_text(agg.call))
            items.append(
                f"{_over(_windowed(aggregation_sql(agg.call), agg.call.name), window)} AS {quote_name(names[-1])}"
            )
        self.wrap(", ".join(items))
        self.known = None if self.known is None else [*self.known, *names]

    def on_sort(self, command: ast.Sort) -> None:
        self.wrap("*", " ORDER BY " + ", ".join(_order_sql(k) for k in command.keys))

    def on_head(self, command: ast.Head) -> None:
        offset = f" OFFSET {command.offset}" if command.offset else ""
        self.wrap("*", f" LIMIT {command.size}{offset}")

    def on_eval(self, command: ast.Eval) -> None:
        for assignment in command.assignments:
            self._assign(assignment.target.name, expr_sql(assignment.value))

    def _assign(self, name: str, value: str) -> None:
        """One new or replaced column; a replaced column keeps its place."""
        current = self.input_columns()
        lowered = [c.lower() for c in current]
        if name.lower() in lowered:
            at = lowered.index(name.lower())
            items = [f"{value} AS {quote_name(name)}" if i == at else quote_name(c) for i, c in enumerate(current)]
            self.wrap(", ".join(items))
            self.known = [name if i == at else c for i, c in enumerate(current)]
        else:
            self.wrap(f"*, {value} AS {quote_name(name)}")
            self.known = [*current, name]

    def on_dedup(self, command: ast.Dedup) -> None:
        if command.consecutive:
            raise PplSemanticError("Consecutive deduplication is not supported")
        current = self.input_columns()
        keys = ", ".join(field_sql(f) for f in command.fields)
        self.wrap(f"*, row_number() OVER (PARTITION BY {keys} ORDER BY {keys}) AS __ppl_dedup_rn")
        if command.keep_empty:
            empty = " OR ".join(f"{field_sql(f)} IS NULL" for f in command.fields)
            condition = f"__ppl_dedup_rn <= {command.number} OR {empty}"
        else:
            present = " AND ".join(f"{field_sql(f)} IS NOT NULL" for f in command.fields)
            condition = f"__ppl_dedup_rn <= {command.number} AND {present}"
        self.wrap(", ".join(quote_name(c) for c in current), where=condition)
        self.known = current

    def on_rename(self, command: ast.Rename) -> None:
        current = self.input_columns()
        sources = list(current)
        for old, new in command.pairs:
            at = current.index(_find(current, old.name))
            current[at] = new.name
        items = [
            quote_name(s) if s == c else f"{quote_name(s)} AS {quote_name(c)}"
            for s, c in zip(sources, current, strict=True)
        ]
        self.wrap(", ".join(items))
        self.known = current

    def on_toprare(self, command: ast.TopRare) -> None:
        count_name = "count_" + command.fields[0].name
        groups = [*command.fields, *command.by]
        keys = [field_sql(f) for f in groups]
        items = [
            f"count(*) AS {quote_name(count_name)}",
            *(aliased(k, f.name) for k, f in zip(keys, groups, strict=True)),
        ]
        order = "ASC" if command.rare else "DESC"
        tail = f" GROUP BY {', '.join(keys)} ORDER BY {quote_name(count_name)} {order} LIMIT {command.number}"
        self.wrap(", ".join(items), tail)
        self.known = [count_name, *(f.name for f in groups)]

    def on_parse(self, command: ast.Parse) -> None:
        regex = grok_regex(command.pattern) if command.grok else command.pattern
        extract = named_groups(regex)
        if not extract.groups:
            raise PplSemanticError(f"The pattern {command.pattern!r} has no named group to extract")
        source = field_sql(command.field)
        current = self.input_columns()
        lowered = {c.lower(): c for c in current}
        values = {name: f"regexp_extract({source}, {string_sql(extract.regex)}, {n})" for name, n in extract.groups}
        items: list[str] = []
        for column in current:
            match = next((n for n in values if n.lower() == column.lower()), None)
            items.append(quote_name(column) if match is None else f"{values[match]} AS {quote_name(column)}")
        added = [n for n in values if n.lower() not in lowered]
        items.extend(f"{values[n]} AS {quote_name(n)}" for n in added)
        self.wrap(", ".join(items))
        self.known = [*current, *added]

    def on_fillnull(self, command: ast.FillNull) -> None:
        current = self.input_columns()
        if command.assignments:
            fills = [(_find(current, a.target.name), expr_sql(a.value)) for a in command.assignments]
        else:
            assert command.value is not None
            value = expr_sql(command.value)
            targets = [_find(current, f.name) for f in command.fields] if command.fields else current
            fills = [(t, value) for t in targets]
        filled = {name for name, _ in fills}
        # As the reference does, the filled fields come last, in the order they are given.
        items = [quote_name(c) for c in current if c not in filled]
        items.extend(f"coalesce({quote_name(n)}, {v}) AS {quote_name(n)}" for n, v in fills)
        self.wrap(", ".join(items))
        self.known = [*(c for c in current if c not in filled), *(n for n, _ in fills)]

    def on_trendline(self, command: ast.Trendline) -> None:
        order = f"ORDER BY {_order_sql(command.sort)} " if command.sort else ""
        items = ["*"]
        names: list[str] = []
        for comp in command.computations:
            if comp.kind == "wma" and command.sort is None:
                raise PplSemanticError("trendline wma(...) needs a sort field")
            window = f"OVER ({order}ROWS BETWEEN {comp.points - 1} PRECEDING AND CURRENT ROW)"
            names.append(comp.alias or f"{comp.field.name}_trendline")
            items.append(f"{_moving_average(comp, window)} AS {quote_name(names[-1])}")
        tail = f" ORDER BY {_order_sql(command.sort)}" if command.sort else ""
        self.wrap(", ".join(items), tail)
        self.known = None if self.known is None else [*self.known, *names]

    def on_lookup(self, command: ast.Lookup) -> None:
        current = self.input_columns()
        outputs = list(command.outputs)
        if not outputs:
            mapped = {m.name.lower() for m, _ in command.mappings}
            lookup_columns = self.columns(f"SELECT * FROM {table_sql(command.table)}")
            outputs = [(ast.Field((c,)), ast.Field((c,))) for c in lookup_columns if c.lower() not in mapped]
        on = " AND ".join(f"{field_sql(s, '_l')} = {field_sql(m, '_r')}" for m, s in command.mappings)
        matched = f"{field_sql(command.mappings[0][0], '_r')} IS NOT NULL"
        replaced: dict[str, str] = {}
        added: list[tuple[str, str]] = []
        for source, output in outputs:
            value = field_sql(source, "_r")
            existing = next((c for c in current if c.lower() == output.name.lower()), None)
            if existing is None:
                if command.strategy == "append":
                    raise unresolved(output.name)
                added.append((output.name, value))
            elif command.strategy == "append":
                replaced[existing] = f"coalesce(_l.{quote_name(existing)}, {value})"
            else:
                replaced[existing] = f"CASE WHEN {matched} THEN {value} ELSE _l.{quote_name(existing)} END"
        items = [f"{replaced[c]} AS {quote_name(c)}" if c in replaced else f"_l.{quote_name(c)}" for c in current]
        items.extend(f"{v} AS {quote_name(n)}" for n, v in added)
        self.table, self.join_from, self.join_where = None, None, []
        self.sql = f"SELECT {', '.join(items)} FROM ({self.sql}) AS _l LEFT OUTER JOIN {table_sql(command.table)} AS _r ON {on}"
        self.known = [*current, *(n for n, _ in added)]

    def on_join(self, command: ast.Join) -> None:
        if self.table is not None:
            alias = command.left_alias or self.alias
            left = self.table + (f" AS {quote_name(alias)}" if alias else "")
        else:
            self.join_from, self.join_where = None, []
            self.stage += 1
            left = f"({self.sql}) AS {quote_name(command.left_alias or self.alias or f'_s{self.stage}')}"
        if isinstance(command.right, ast.TableName):
            right = table_sql(command.right) + (f" AS {quote_name(command.right_alias)}" if command.right_alias else "")
        else:
            self.stage += 1
            sub = _pipeline(command.right, self.columns)
            right = f"({sub}) AS {quote_name(command.right_alias or f'_s{self.stage}')}"
        on = "" if command.condition is None else f" ON {expr_sql(command.condition)}"
        self.join_from = f"{left} {_JOIN_KEYWORDS[command.kind]} {right}{on}"
        self.join_where = []
        self.sql = f"SELECT * FROM {self.join_from}"
        self.table = None
        self.known = None


_JOIN_KEYWORDS: dict[str, str] = {
    "inner": "INNER JOIN",
    "left": "LEFT OUTER JOIN",
    "right": "RIGHT OUTER JOIN",
    "full": "FULL OUTER JOIN",
    "cross": "CROSS JOIN",
    "semi": "LEFT SEMI JOIN",
    "anti": "LEFT ANTI JOIN",
}


def _find(columns: Sequence[str], name: str) -> str:
    """The column called ``name`` (Spark's names are case-insensitive), or the unresolved error."""
    for column in columns:
        if column.lower() == name.lower():
            return column
    raise unresolved(name)


def _order_sql(key: ast.SortKey | None) -> str:
    assert key is not None
    # The reference's order: ascending with nulls first, descending with nulls last (Spark's too).
    return f"{field_sql(key.field)} {'DESC NULLS LAST' if key.descending else 'ASC NULLS FIRST'}"


def _over(aggregate: str, window: str) -> str:
    """``aggregate`` over ``window``. Spark has no distinct aggregation over a window, so a
    distinct count is the size of the window's set of (non-null) values."""
    distinct = re.fullmatch(r"count\(DISTINCT (.+)\)", aggregate, re.DOTALL)
    if distinct is not None:
        return f"size(collect_set({distinct.group(1)}) {window})"
    return f"{aggregate} {window}"


def _windowed(aggregate: str, name: str) -> str:
    """An aggregation usable with ``OVER``: it must be one call, not an expression around one."""
    depth = 0
    for i, char in enumerate(aggregate):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0 and i != len(aggregate) - 1:
                break
    else:
        if re.match(r"\w+\(", aggregate) and aggregate.endswith(")"):
            return aggregate
    raise PplSemanticError(f"{name} is not supported in eventstats")


def _moving_average(comp: ast.TrendComputation, window: str) -> str:
    value = field_sql(comp.field)
    full = f"count(*) {window} >= {comp.points}"
    if comp.kind == "sma":
        return f"CASE WHEN {full} THEN avg({value}) {window} END"
    weights = comp.points * (comp.points + 1) // 2
    terms = " + ".join(f"{k} * nth_value({value}, {k}) {window}" for k in range(1, comp.points + 1))
    return f"CASE WHEN {full} THEN ({terms}) / {weights} END"
