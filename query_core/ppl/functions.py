"""PPL functions, by the reference's names and semantics, as Spark SQL expressions.

Arguments arrive as Spark SQL expression texts, already translated (and parenthesised where
needed); the result is a Spark SQL expression text.

Every function is one entry of a table (``_SCALARS``, ``_AGGREGATES``): its lower-cased name, its
family, its arity range and a builder from argument texts to Spark SQL. Most of the reference's
functions are Spark's own under the same or another name; the rest are small SQL compositions
(``isblank``, ``truncate``, ``strcmp``, MySQL-style ``date_format`` specifiers, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from query_core.ppl.errors import PplSemanticError

Builder = Callable[[Sequence[str]], str]
AggregateBuilder = Callable[[Sequence[str], bool], str]  # (args, distinct) -> SQL


@dataclass(frozen=True)
class FunctionSpec:
    """One function of the table: ``max_args`` ``None`` is variadic."""

    name: str
    family: str
    min_args: int
    max_args: int | None
    build: Builder
    build_aggregate: AggregateBuilder | None = None  # aggregations only: the DISTINCT-aware form

    def arity_text(self) -> str:
        """The accepted argument counts, in words, for error messages."""
        lo, hi = self.min_args, self.max_args
        if hi is None:
            return f"at least {lo} argument{'s' if lo != 1 else ''}"
        if lo == hi:
            return f"{lo} argument{'s' if lo != 1 else ''}"
        if hi == lo + 1:
            return f"{lo} or {hi} arguments"
        return f"{lo} to {hi} arguments"

    def check_arity(self, args: Sequence[str]) -> None:
        n = len(args)
        if n < self.min_args or (self.max_args is not None and n > self.max_args):
            raise PplSemanticError(f"{self.name} expects {self.arity_text()}, got {n}")


_SCALARS: dict[str, FunctionSpec] = {}
_AGGREGATES: dict[str, FunctionSpec] = {}


def _register(
    table: dict[str, FunctionSpec],
    names: str | Iterable[str],
    family: str,
    arity: int | tuple[int, int | None],
    build: Builder,
    build_aggregate: AggregateBuilder | None = None,
) -> None:
    lo, hi = (arity, arity) if isinstance(arity, int) else arity
    for name in [names] if isinstance(names, str) else names:
        assert name not in table, f"duplicate function {name}"
        table[name] = FunctionSpec(name, family, lo, hi, build, build_aggregate)


def _scalar(names: str | Iterable[str], family: str, arity: int | tuple[int, int | None], build: Builder) -> None:
    _register(_SCALARS, names, family, arity, build)


# --------------------------------------------------------------------------------------------
# SQL text helpers
# --------------------------------------------------------------------------------------------


def _p(expr: str) -> str:
    """``expr`` parenthesised, for use as an operand."""
    return f"({expr})"


def _call(spark_name: str) -> Builder:
    """A builder calling Spark's ``spark_name`` with the arguments as given."""
    return lambda args: f"{spark_name}({', '.join(args)})"


def _template(text: str) -> Builder:
    """A builder filling ``{0}``, ``{1}``, ... of ``text`` with the parenthesised arguments."""
    return lambda args: text.format(*(_p(a) for a in args))


def sql_string(value: str) -> str:
    """A Spark SQL string literal of ``value`` (backslash escapes, Spark's default parser mode)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "Z": "\x1a"}


def literal_string(expr: str) -> str | None:
    """The value of ``expr`` if it is one Spark SQL string literal (``'...'`` or ``"..."``), else
    ``None``. Used where the reference needs a constant: format patterns, interval units."""
    text = expr.strip()
    if len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    quote, body, out, i = text[0], text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        elif ch == quote:
            if i + 1 < len(body) and body[i + 1] == quote:  # a doubled quote
                out.append(quote)
                i += 2
            else:
                return None  # e.g. 'a' || 'b': not a single literal
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _word(expr: str, allowed: Iterable[str], what: str) -> str:
    """A keyword argument (a time unit): a bare word or a string literal, upper-cased and checked."""
    value = literal_string(expr)
    word = (value if value is not None else expr).strip().strip("`").upper()
    options = tuple(allowed)
    if word not in options:
        raise PplSemanticError(f"Unsupported {what}: {word or repr(expr)} (expected one of {', '.join(options)})")
    return word


_NUMBER = re.compile(r"^\(*\s*[-+]?\d+(\.\d*)?([eE][-+]?\d+)?[dDlL]?\s*\)*$")


def _number(expr: str) -> float | None:
    """The value of ``expr`` if it is a plain numeric literal, else ``None``."""
    if not _NUMBER.match(expr):
        return None
    return float(expr.strip().strip("()").strip().rstrip("dDlL"))


# --------------------------------------------------------------------------------------------
# string functions
# --------------------------------------------------------------------------------------------

_STRING = "string"
for _name in ("length", "lower", "upper", "trim", "ltrim", "rtrim", "reverse", "ascii"):
    _scalar(_name, _STRING, 1, _call(_name))
_scalar("concat", _STRING, (1, None), _call("concat"))
_scalar("left", _STRING, 2, _call("left"))
_scalar("right", _STRING, 2, _call("right"))
_scalar("concat_ws", _STRING, (2, None), _call("concat_ws"))
# 1-based start, optional length: Spark's substring is the same.
_scalar(["substring", "substr"], _STRING, (2, 3), _call("substring"))
_scalar("locate", _STRING, (2, 3), _call("locate"))
# position(substr IN str) arrives as (substr, str).
_scalar("position", _STRING, 2, _template("position({0} IN {1})"))
_scalar("replace", _STRING, 3, _call("replace"))
_scalar("like", _STRING, 2, _template("({0} LIKE {1})"))
_scalar("regexp", _STRING, 2, _template("({0} RLIKE {1})"))
# `a contains b`, a comparison operator of the reference's grammar: whether b is in a.
_scalar("contains", _STRING, 2, _call("contains"))
# strcmp (MySQL): -1, 0 or 1, NULL when either side is NULL (no ELSE branch).
_scalar(
    "strcmp", _STRING, 2, _template("(CASE WHEN {0} < {1} THEN -1 WHEN {0} > {1} THEN 1 WHEN {0} = {1} THEN 0 END)")
)
_scalar("tostring", _STRING, 1, lambda a: f"CAST({a[0]} AS STRING)")

# --------------------------------------------------------------------------------------------
# math functions
# --------------------------------------------------------------------------------------------

_MATH = "math"
for _name in (
    "abs", "ceil", "ceiling", "floor", "sqrt", "cbrt", "exp", "expm1", "ln", "log2", "log10", "sign", "signum",
    "sin", "cos", "tan", "asin", "acos", "cot", "sinh", "cosh", "degrees", "radians", "rint",
):  # fmt: skip
    _scalar(_name, _MATH, 1, _call(_name))
_scalar(["pow", "power"], _MATH, 2, _call("power"))
_scalar("atan2", _MATH, 2, _call("atan2"))
# atan(y, x) is atan2(y, x), as the reference documents.
_scalar("atan", _MATH, (1, 2), lambda a: f"atan({a[0]})" if len(a) == 1 else f"atan2({a[0]}, {a[1]})")
# log(x) is ln(x); log(b, x) takes the base first (Spark's order too).
_scalar("log", _MATH, (1, 2), lambda a: f"ln({a[0]})" if len(a) == 1 else f"log({a[0]}, {a[1]})")
_scalar("round", _MATH, (1, 2), _call("round"))
# Digits above 9 in lower case, as the reference documents (Spark writes upper case).
_scalar("conv", _MATH, 3, lambda a: f"lower(conv({', '.join(a)}))")
_scalar("crc32", _MATH, 1, lambda a: f"crc32(CAST({a[0]} AS STRING))")
_scalar("pi", _MATH, 0, _call("pi"))
_scalar("e", _MATH, 0, _call("e"))
_scalar("rand", _MATH, (0, 1), _call("rand"))
# mod by zero is NULL, as the reference documents (Spark's ANSI mod would fail the query).
_scalar(["mod", "modulus"], _MATH, 2, _call("try_mod"))
_scalar("add", _MATH, 2, _template("({0} + {1})"))
_scalar("subtract", _MATH, 2, _template("({0} - {1})"))
_scalar("multiply", _MATH, 2, _template("({0} * {1})"))
_scalar("divide", _MATH, 2, _template("({0} / {1})"))
# truncate(x, d): x cut (towards zero) to d decimals; Spark has no such function.
_scalar(
    "truncate",
    _MATH,
    2,
    _template(
        "(CASE WHEN {0} >= 0 THEN floor({0} * power(10, {1})) ELSE ceil({0} * power(10, {1})) END / power(10, {1}))"
    ),
)

# --------------------------------------------------------------------------------------------
# date and time functions
# --------------------------------------------------------------------------------------------

_DATETIME = "datetime"

# MySQL date_format specifiers (the OpenSearch SQL plugin's PPL) as Spark datetime patterns.
_MYSQL_PATTERNS: dict[str, str] = {
    "a": "EEE",
    "b": "MMM",
    "c": "M",
    "d": "dd",
    "e": "d",
    "f": "SSSSSS",
    "H": "HH",
    "h": "hh",
    "I": "hh",
    "i": "mm",
    "j": "DDD",
    "k": "H",
    "l": "h",
    "M": "MMMM",
    "m": "MM",
    "p": "a",
    "r": "hh:mm:ss a",
    "S": "ss",
    "s": "ss",
    "T": "HH:mm:ss",
    "W": "EEEE",
    "Y": "yyyy",
    "y": "yy",
}

# Specifiers no Spark pattern letter renders: SQL over the value, ``{x}`` the parenthesised value.
_MYSQL_EXPRESSIONS: dict[str, str] = {
    # day of month with an English suffix: 1st, 2nd, 3rd, 4th, 11th, 21st, ...
    "D": (
        "concat(CAST(dayofmonth({x}) AS STRING), CASE WHEN dayofmonth({x}) % 100 IN (11, 12, 13) THEN 'th' "
        "WHEN dayofmonth({x}) % 10 = 1 THEN 'st' WHEN dayofmonth({x}) % 10 = 2 THEN 'nd' "
        "WHEN dayofmonth({x}) % 10 = 3 THEN 'rd' ELSE 'th' END)"
    ),
    "w": "CAST(dayofweek({x}) - 1 AS STRING)",  # 0 = Sunday
    "v": "lpad(CAST(weekofyear({x}) AS STRING), 2, '0')",  # ISO week, Monday first
    "x": "CAST(year(date_add(to_date({x}), 3 - weekday({x}))) AS STRING)",  # the ISO week's year
}

# Week numbering modes Spark cannot compute without a calendar of its own.
_MYSQL_UNSUPPORTED = frozenset("UuVX")


def _quote_pattern_text(text: str) -> str:
    """Literal text in a Spark datetime pattern: quoted unless it has no letter or reserved sign."""
    if not any(ch.isalpha() or ch in "[]{}#'" for ch in text):
        return text
    return "'" + text.replace("'", "''") + "'"


def mysql_format_segments(fmt: str) -> list[tuple[str, str]]:
    """The MySQL-style format ``fmt`` as segments: ``("pattern", spark_pattern)`` runs and
    ``("expr", sql_with_{x})`` for specifiers no Spark pattern renders. Literal text is quoted
    into the patterns; an unknown specifier ``%z`` is the literal ``z``, as in MySQL."""
    segments: list[tuple[str, str]] = []
    pattern: list[str] = []
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            pattern.append(_quote_pattern_text("".join(literal)))
            literal.clear()

    def flush_pattern() -> None:
        flush_literal()
        if pattern:
            segments.append(("pattern", "".join(pattern)))
            pattern.clear()

    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%" or i + 1 == len(fmt):
            literal.append(ch)
            i += 1
            continue
        spec = fmt[i + 1]
        i += 2
        if spec in _MYSQL_PATTERNS:
            flush_literal()
            pattern.append(_MYSQL_PATTERNS[spec])
        elif spec in _MYSQL_EXPRESSIONS:
            flush_pattern()
            segments.append(("expr", _MYSQL_EXPRESSIONS[spec]))
        elif spec in _MYSQL_UNSUPPORTED:
            raise PplSemanticError(f"Unsupported date_format specifier: %{spec}")
        else:
            literal.append(spec)  # %% is '%', %z is 'z'
    flush_pattern()
    return segments


def mysql_format_to_spark(fmt: str) -> str:
    """The MySQL-style format ``fmt`` as one Spark datetime pattern; PplSemanticError when it needs
    a specifier no pattern renders (``%D``, ``%w``, ...: use :func:`date_format_sql`)."""
    segments = mysql_format_segments(fmt)
    if any(kind != "pattern" for kind, _ in segments):
        raise PplSemanticError(f"date_format specifiers of {fmt!r} have no Spark pattern")
    return "".join(text for _, text in segments)


def date_format_sql(expr: str, fmt: str) -> str:
    """``date_format(expr, fmt)``. A constant format with ``%`` is MySQL-style (the OpenSearch SQL
    plugin's PPL) and is translated; any other format is a Spark datetime pattern, as the
    reference passes it to Spark unchanged."""
    value = literal_string(fmt)
    if value is None or "%" not in value:
        return f"date_format({expr}, {fmt})"
    parts: list[str] = []
    for kind, text in mysql_format_segments(value):
        if kind == "pattern":
            parts.append(f"date_format({expr}, {sql_string(text)})")
        else:
            parts.append(text.format(x=_p(expr)))
    if not parts:
        return "''"
    return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"


_INTERVAL_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MICROSECOND")


def interval_sql(value: str, unit: str) -> str:
    """``INTERVAL value unit`` as Spark SQL, as the reference builds it (a ``make_interval``, so the
    value may be any expression and QUARTER is three months)."""
    word = _word(unit, _INTERVAL_UNITS, "interval unit")
    v = _p(value)
    fields = {
        "YEAR": (0, v),
        "QUARTER": (1, f"{v} * 3"),
        "MONTH": (1, v),
        "WEEK": (2, v),
        "DAY": (3, v),
        "HOUR": (4, v),
        "MINUTE": (5, v),
        "SECOND": (6, v),
        "MILLISECOND": (6, f"{v} / 1000"),
        "MICROSECOND": (6, f"{v} / 1000000"),
    }
    slot, amount = fields[word]
    args = ["0"] * 7
    args[slot] = amount
    return f"make_interval({', '.join(args)})"


_INTERVAL_TEXT = re.compile(
    r"^\s*\(*\s*(INTERVAL\b|make_interval\s*\(|make_dt_interval\s*\(|make_ym_interval\s*\()", re.I
)


def _is_interval(expr: str) -> bool:
    return bool(_INTERVAL_TEXT.match(expr))


def _date_plus(sign: str, days_function: str) -> Builder:
    """date_add/adddate (``+``) and date_sub/subdate (``-``) of an interval or a number of days.
    A date gives a date and a timestamp a timestamp (its time of day kept), as documented; a
    date written as a string gives a date, as Spark's ``date_add``."""

    def build(args: Sequence[str]) -> str:
        if _is_interval(args[1]):
            return f"({_p(args[0])} {sign} {_p(args[1])})"
        if literal_string(args[0]) is not None:
            return f"{days_function}({args[0]}, {args[1]})"
        return f"({_p(args[0])} {sign} {interval_sql(args[1], 'DAY')})"

    return build


_TIMESTAMP_UNITS = ("MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")
_EXTRACT_UNITS = (
    "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DAYOFWEEK", "DOW", "DAYOFWEEK_ISO", "DOW_ISO", "DOY",
    "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MICROSECOND",
)  # fmt: skip


def _timestamp(args: Sequence[str]) -> str:
    # timestamp(a, b): a plus the time of day of b.
    if len(args) == 1:
        return f"timestamp({args[0]})"
    b = f"timestamp({args[1]})"
    return f"(timestamp({args[0]}) + ({b} - date_trunc('DAY', {b})))"


def _makedate(args: Sequence[str]) -> str:
    # makedate(y, m, d) as the reference documents; makedate(y, day_of_year) as MySQL's.
    if len(args) == 3:
        return f"make_date({', '.join(args)})"
    return f"date_add(make_date({args[0]}, 1, 1), CAST({_p(args[1])} - 1 AS INT))"


for _ppl, _spark in (
    ("day", "dayofmonth"),
    ("dayofmonth", "dayofmonth"),
    ("day_of_month", "dayofmonth"),
    ("dayofweek", "dayofweek"),
    ("day_of_week", "dayofweek"),
    ("dayofyear", "dayofyear"),
    ("day_of_year", "dayofyear"),
    ("weekday", "weekday"),
    ("week", "weekofyear"),
    ("weekofyear", "weekofyear"),
    ("week_of_year", "weekofyear"),
    ("month", "month"),
    ("month_of_year", "month"),
    ("quarter", "quarter"),
    ("year", "year"),
    ("hour", "hour"),
    ("hour_of_day", "hour"),
    ("minute", "minute"),
    ("minute_of_hour", "minute"),
    ("second", "second"),
    ("second_of_minute", "second"),
    ("date", "to_date"),
    ("last_day", "last_day"),
):
    _scalar(_ppl, _DATETIME, 1, _call(_spark))
# Full names, as the reference documents (Spark's monthname/dayname abbreviate).
_scalar("monthname", _DATETIME, 1, lambda a: f"date_format({a[0]}, 'MMMM')")
_scalar("dayname", _DATETIME, 1, lambda a: f"date_format({a[0]}, 'EEEE')")
for _ppl, _spark in (
    ("now", "current_timestamp"),
    ("current_timestamp", "current_timestamp"),
    ("localtimestamp", "current_timestamp"),
    ("localtime", "current_timestamp"),
    ("sysdate", "now"),
    ("curdate", "current_date"),
    ("current_date", "current_date"),
    ("current_timezone", "current_timezone"),
):
    _scalar(_ppl, _DATETIME, 0, _call(_spark))
_scalar("utc_timestamp", _DATETIME, 0, lambda a: "to_utc_timestamp(current_timestamp(), current_timezone())")
# No TIME type in Spark: times of day are 'HH:mm:ss' strings (hour/minute/second read them back).
_scalar(["curtime", "current_time"], _DATETIME, 0, lambda a: "date_format(current_timestamp(), 'HH:mm:ss')")
_scalar("time", _DATETIME, 1, lambda a: f"date_format(timestamp({a[0]}), 'HH:mm:ss')")
_scalar(
    "maketime",
    _DATETIME,
    3,
    lambda a: f"date_format(make_timestamp(1970, 1, 1, {a[0]}, {a[1]}, {a[2]}), 'HH:mm:ss')",
)
_scalar("timestamp", _DATETIME, (1, 2), _timestamp)
_scalar("date_format", _DATETIME, 2, lambda a: date_format_sql(a[0], a[1]))
_scalar(["date_add", "adddate"], _DATETIME, 2, _date_plus("+", "date_add"))
_scalar(["date_sub", "subdate"], _DATETIME, 2, _date_plus("-", "date_sub"))
# Days between the dates of two values: dates, timestamps or times of day (today's date).
_scalar(
    "datediff",
    _DATETIME,
    2,
    lambda a: f"datediff(to_date(CAST({a[0]} AS TIMESTAMP)), to_date(CAST({a[1]} AS TIMESTAMP)))",
)
_scalar(
    "timestampadd",
    _DATETIME,
    3,
    lambda a: f"timestampadd({_word(a[0], _TIMESTAMP_UNITS, 'interval unit')}, {a[1]}, {a[2]})",
)
_scalar(
    "timestampdiff",
    _DATETIME,
    3,
    lambda a: f"timestampdiff({_word(a[0], _TIMESTAMP_UNITS, 'interval unit')}, {a[1]}, {a[2]})",
)
_scalar("extract", _DATETIME, 2, lambda a: f"extract({_word(a[0], _EXTRACT_UNITS, 'extract unit')} FROM {a[1]})")


def _unix_timestamp(args: Sequence[str]) -> str:
    if not args:
        return "unix_timestamp()"
    digits = args[0].strip()
    # A number of the form [YY]YYMMDD[hhmmss], as MySQL reads it.
    if re.fullmatch(r"\d{6}|\d{8}|\d{12}|\d{14}", digits):
        fmt = {6: "yyMMdd", 8: "yyyyMMdd", 12: "yyMMddHHmmss", 14: "yyyyMMddHHmmss"}[len(digits)]
        return f"unix_timestamp(to_timestamp('{digits}', '{fmt}'))"
    return f"unix_timestamp({args[0]})"


_scalar("unix_timestamp", _DATETIME, (0, 1), _unix_timestamp)


def _from_unixtime(args: Sequence[str]) -> str:
    # A constant MySQL-style format is translated as date_format's; any other is Spark's pattern.
    fmt = literal_string(args[1]) if len(args) == 2 else None
    if fmt is not None and "%" in fmt:
        return date_format_sql(f"timestamp_seconds({args[0]})", args[1])
    return f"from_unixtime({', '.join(args)})"


_scalar("from_unixtime", _DATETIME, (1, 2), _from_unixtime)
_scalar("makedate", _DATETIME, (2, 3), _makedate)
_scalar("make_date", _DATETIME, 3, _call("make_date"))

# MySQL's date and time functions that the reference's grammar names and Spark lacks, by their
# MySQL semantics (the OpenSearch SQL plugin's PPL documents them so). A time of day is an
# 'HH:mm:ss' string (Spark has no TIME type); a string of a time alone reads as that time today.


def _ts(expr: str) -> str:
    return f"CAST({expr} AS TIMESTAMP)"


def _seconds_of_day(expr: str) -> str:
    """The seconds since midnight of a timestamp or a time of day, fractions included."""
    ts = _ts(expr)
    return f"((unix_micros({ts}) - unix_micros(date_trunc('DAY', {ts}))) / 1000000)"


def _clock(seconds: str) -> str:
    """``seconds`` as a signed 'HH:mm:ss' string (hours may pass 24, as MySQL's TIME)."""
    s = _p(seconds)
    whole = f"CAST(floor(abs({s})) AS BIGINT)"
    return (
        f"concat(IF({s} < 0, '-', ''), lpad(CAST(div({whole}, 3600) AS STRING), 2, '0'), ':',"
        f" lpad(CAST(div({whole} % 3600, 60) AS STRING), 2, '0'), ':', lpad(CAST({whole} % 60 AS STRING), 2, '0'))"
    )


def _months_of_period(period: str) -> str:
    """A period YYMM or YYYYMM as a count of months (a two-digit year before 70 is 20YY)."""
    p = _p(period)
    year = f"(CASE WHEN {p} >= 10000 THEN div({p}, 100) WHEN div({p}, 100) < 70 THEN 2000 + div({p}, 100) ELSE 1900 + div({p}, 100) END)"
    return f"({year} * 12 + {p} % 100 - 1)"


def _period_add(args: Sequence[str]) -> str:
    months = f"({_months_of_period(args[0])} + {_p(args[1])})"
    return f"(div({months}, 12) * 100 + {months} % 12 + 1)"


def _plus_time(sign: str) -> Builder:
    """addtime/subtime: the first value moved by the second's time of day."""

    def build(args: Sequence[str]) -> str:
        shift = f"make_dt_interval(0, 0, 0, {_seconds_of_day(args[1])})"
        return f"({_ts(args[0])} {sign} {shift})"

    return build


def _str_to_date(args: Sequence[str]) -> str:
    fmt = literal_string(args[1])
    if fmt is None:
        raise PplSemanticError("str_to_date needs a constant format, such as '%Y-%m-%d'")
    return f"to_timestamp({args[0]}, {sql_string(mysql_format_to_spark(fmt))})"


def _datetime(args: Sequence[str]) -> str:
    # datetime(x[, tz]): x as a timestamp, moved from the session's time zone to tz if given.
    if len(args) == 1:
        return _ts(args[0])
    return f"convert_timezone(current_timezone(), {args[1]}, {_ts(args[0])})"


def _time_format(args: Sequence[str]) -> str:
    return date_format_sql(_ts(args[0]), args[1])


def _yearweek(args: Sequence[str]) -> str:
    if len(args) == 2 and literal_string(args[1]) is None and _number(args[1]) not in (3.0,):
        raise PplSemanticError("yearweek supports mode 3 (ISO weeks, Monday first) only")
    d = f"to_date({args[0]})"
    return f"(year(date_add({d}, 3 - weekday({d}))) * 100 + weekofyear({d}))"


_scalar("addtime", _DATETIME, 2, _plus_time("+"))
_scalar("subtime", _DATETIME, 2, _plus_time("-"))
_scalar("convert_tz", _DATETIME, 3, lambda a: f"convert_timezone({a[1]}, {a[2]}, {_ts(a[0])})")
_scalar("datetime", _DATETIME, (1, 2), _datetime)
# Day numbers as MySQL counts them, from year 0.
_scalar("to_days", _DATETIME, 1, lambda a: f"datediff(to_date({a[0]}), DATE'0000-01-01')")
_scalar("from_days", _DATETIME, 1, lambda a: f"date_add(DATE'0000-01-01', CAST({_p(a[0])} AS INT))")
_scalar(
    "to_seconds",
    _DATETIME,
    1,
    lambda a: (
        f"(CAST(datediff(to_date({a[0]}), DATE'0000-01-01') AS BIGINT) * 86400 + CAST(floor({_seconds_of_day(a[0])}) AS BIGINT))"
    ),
)
_scalar("microsecond", _DATETIME, 1, lambda a: f"CAST(date_format({_ts(a[0])}, 'SSSSSS') AS INT)")
_scalar("minute_of_day", _DATETIME, 1, lambda a: f"(hour({_ts(a[0])}) * 60 + minute({_ts(a[0])}))")
_scalar("period_add", _DATETIME, 2, _period_add)
_scalar("period_diff", _DATETIME, 2, lambda a: f"({_months_of_period(a[0])} - {_months_of_period(a[1])})")
_scalar("sec_to_time", _DATETIME, 1, lambda a: _clock(a[0]))
_scalar("time_to_sec", _DATETIME, 1, lambda a: f"CAST(floor({_seconds_of_day(a[0])}) AS BIGINT)")
_scalar(
    "timediff",
    _DATETIME,
    2,
    lambda a: _clock(f"(unix_micros({_ts(a[0])}) - unix_micros({_ts(a[1])})) / 1000000"),
)
_scalar("str_to_date", _DATETIME, 2, _str_to_date)
_scalar("time_format", _DATETIME, 2, _time_format)
_scalar("utc_date", _DATETIME, 0, lambda a: "to_date(to_utc_timestamp(current_timestamp(), current_timezone()))")
_scalar(
    "utc_time",
    _DATETIME,
    0,
    lambda a: "date_format(to_utc_timestamp(current_timestamp(), current_timezone()), 'HH:mm:ss')",
)
_scalar("yearweek", _DATETIME, (1, 2), _yearweek)

# Relative time strings, [+|-]<n><unit>@<snap> (the reference's relative_timestamp). The reference
# evaluates them in a UDF; here a constant string is parsed now and becomes SQL over the query's
# current timestamp, in the session time zone.
_RELATIVE = re.compile(r"^(?:(?P<sign>[+-])(?P<value>\d+)?(?P<unit>\w+?))?(?:@(?P<snap>\w+))?$", re.I)
_RELATIVE_UNITS: dict[str, tuple[str, ...]] = {
    "SECOND": ("s", "sec", "secs", "second", "seconds"),
    "MINUTE": ("m", "min", "mins", "minute", "minutes"),
    "HOUR": ("h", "hr", "hrs", "hour", "hours"),
    "DAY": ("d", "day", "days"),
    "WEEK": ("w", "wk", "wks", "week", "weeks"),
    "MONTH": ("mon", "month", "months"),
    "QUARTER": ("q", "qtr", "qtrs", "quarter", "quarters"),
    "YEAR": ("y", "yr", "yrs", "year", "years"),
}
_RELATIVE_UNIT = {word: unit for unit, words in _RELATIVE_UNITS.items() for word in words}
# Snap to the start of the last such weekday (ISO numbers: Monday 1 .. Sunday 7).
_RELATIVE_WEEKDAYS = {"w0": 7, "w7": 7, "w1": 1, "w2": 2, "w3": 3, "w4": 4, "w5": 5, "w6": 6}


def _snap_to_weekday(ts: str, iso_day: int) -> str:
    days_back = f"CAST(pmod(weekday({ts}) + 1 - {iso_day}, 7) AS INT)"
    return f"(date_trunc('DAY', {ts}) - make_interval(0, 0, 0, {days_back}, 0, 0, 0))"


def relative_timestamp_sql(relative: str, now: str = "current_timestamp()") -> str:
    """The timestamp the relative time string ``relative`` (``-1d@d``, ``+2wk``, ``@w1``, ``now``)
    names, counted from ``now`` (an SQL timestamp). Seconds, minutes and hours are exact
    durations; days and longer keep the local time of day, as in the reference."""
    text = relative.strip()
    if text.lower() == "now":
        return now
    match = _RELATIVE.match(text)
    if not text or match is None:
        raise PplSemanticError(f"The relative date time '{relative}' is not supported.")
    ts = now
    if match["sign"]:
        unit = _RELATIVE_UNIT.get(match["unit"].lower())
        if unit is None:
            raise PplSemanticError(f"The relative date time unit '{match['unit']}' is not supported.")
        amount = int(match["value"] or "1") * (-1 if match["sign"] == "-" else 1)
        ts = f"({ts} + {interval_sql(str(amount), unit)})"
    if match["snap"]:
        snap = match["snap"].lower()
        if snap in _RELATIVE_WEEKDAYS:
            ts = _snap_to_weekday(ts, _RELATIVE_WEEKDAYS[snap])
        elif _RELATIVE_UNIT.get(snap) == "WEEK":
            ts = _snap_to_weekday(ts, 7)  # weeks start on Sunday
        elif snap in _RELATIVE_UNIT:
            ts = f"date_trunc('{_RELATIVE_UNIT[snap]}', {ts})"
        else:
            raise PplSemanticError(f"The relative date time unit '{match['snap']}' is not supported.")
    return ts


def _relative(arg: str) -> str:
    value = literal_string(arg)
    if value is None:
        return _relative_dynamic(arg)
    return relative_timestamp_sql(value)


def _words(unit: str) -> str:
    return ", ".join(sql_string(w) for w in _RELATIVE_UNITS[unit])


def _relative_dynamic(arg: str, now: str = "current_timestamp()") -> str:
    """:func:`relative_timestamp_sql` of a string known only when the query runs (a field):
    the same grammar, read by a regular expression in SQL; a string it does not accept fails the
    query with the reference's message. The parts and the shifted time are bound once each, as
    lambda parameters, so the expression stays small."""
    text = f"lower(trim({arg}))"
    pattern = sql_string(r"^(?:([+-])(\d*)([a-z]+?))?(?:@([a-z0-9]+))?$")
    parts = ", ".join(f"'{key}', regexp_extract({text}, {pattern}, {n})" for n, key in enumerate("svun", 1))
    amount = "((CASE WHEN p.v = '' THEN 1 ELSE CAST(p.v AS INT) END) * (CASE WHEN p.s = '-' THEN -1 ELSE 1 END))"
    error = f"raise_error(concat('The relative date time \\'', {arg}, '\\' is not supported.'))"
    shifts = " ".join(f"WHEN p.u IN ({_words(u)}) THEN {interval_sql(amount, u)}" for u in _RELATIVE_UNITS)
    shift = f"(CASE WHEN p.s = '' THEN make_interval(0, 0, 0, 0, 0, 0, 0) {shifts} ELSE {error} END)"
    snaps = ["WHEN p.n = '' THEN t"]
    snaps += [f"WHEN p.n = '{w}' THEN {_snap_to_weekday('t', d)}" for w, d in _RELATIVE_WEEKDAYS.items()]
    snaps.append(f"WHEN p.n IN ({_words('WEEK')}) THEN {_snap_to_weekday('t', 7)}")
    snaps += [f"WHEN p.n IN ({_words(u)}) THEN date_trunc('{u}', t)" for u in _RELATIVE_UNITS if u != "WEEK"]
    snapped = f"element_at(transform(array({now} + {shift}), t -> CASE {' '.join(snaps)} ELSE {error} END), 1)"
    parsed = f"element_at(transform(array(named_struct({parts})), p -> {snapped}), 1)"
    return f"(CASE WHEN {text} = 'now' THEN {now} WHEN {text} RLIKE {pattern} THEN {parsed} ELSE {error} END)"


_scalar("relative_timestamp", _DATETIME, 1, lambda a: _relative(a[0]))
# earliest(rel, ts): the relative time is at or before ts; latest(rel, ts): at or after it.
_scalar("earliest", _DATETIME, 2, lambda a: f"({_relative(a[0])} <= {_p(a[1])})")
_scalar("latest", _DATETIME, 2, lambda a: f"({_relative(a[0])} >= {_p(a[1])})")

# --------------------------------------------------------------------------------------------
# condition functions
# --------------------------------------------------------------------------------------------

_CONDITION = "condition"
_scalar("isnull", _CONDITION, 1, _template("({0} IS NULL)"))
_scalar(["isnotnull", "ispresent"], _CONDITION, 1, _template("({0} IS NOT NULL)"))
_scalar("ifnull", _CONDITION, 2, _call("ifnull"))
_scalar("nullif", _CONDITION, 2, _call("nullif"))
_scalar("if", _CONDITION, 3, _template("(CASE WHEN {0} THEN {1} ELSE {2} END)"))
_scalar("coalesce", _CONDITION, (1, None), _call("coalesce"))
# Any type: the value as text is compared, so a number is never empty (it is not cast from '').
_scalar("isempty", _CONDITION, 1, _template("({0} IS NULL OR CAST({0} AS STRING) = '')"))
_scalar("isblank", _CONDITION, 1, _template("({0} IS NULL OR trim(CAST({0} AS STRING)) = '')"))
_scalar("typeof", _CONDITION, 1, _call("typeof"))

# --------------------------------------------------------------------------------------------
# cryptographic, JSON, collection and lambda functions
# --------------------------------------------------------------------------------------------

_CRYPTO = "cryptographic"
_scalar("md5", _CRYPTO, 1, _call("md5"))
_scalar("sha1", _CRYPTO, 1, _call("sha1"))
_scalar("sha2", _CRYPTO, 2, _call("sha2"))

_JSON = "json"
_scalar("json", _JSON, 1, lambda a: f"get_json_object({a[0]}, '$')")
_scalar("json_valid", _JSON, 1, lambda a: f"(get_json_object({a[0]}, '$') IS NOT NULL)")
_scalar("json_extract", _JSON, 2, _call("get_json_object"))
_scalar("json_keys", _JSON, 1, _call("json_object_keys"))
_scalar("json_array_length", _JSON, 1, _call("json_array_length"))
_scalar("json_object", _JSON, (2, None), _call("named_struct"))
_scalar("json_array", _JSON, (0, None), _call("array"))
_scalar("to_json_string", _JSON, 1, _call("to_json"))

_COLLECTION = "collection"
_scalar("array", _COLLECTION, (0, None), _call("array"))
_scalar("array_length", _COLLECTION, 1, _call("array_size"))
# Lambda arguments arrive already as Spark SQL lambda texts (x -> ...).
_scalar("forall", _COLLECTION, 2, _call("forall"))
_scalar("exists", _COLLECTION, 2, _call("exists"))
_scalar("filter", _COLLECTION, 2, _call("filter"))
_scalar("transform", _COLLECTION, 2, _call("transform"))
_scalar("reduce", _COLLECTION, (3, 4), _call("aggregate"))

# --------------------------------------------------------------------------------------------
# IP functions
# --------------------------------------------------------------------------------------------

_IP = "ip"


def _ip_bits(ip: str) -> str:
    """An IPv4 or IPv6 address as its string of 32 or 128 bits (``::`` expanded), in SQL."""
    v4 = f"concat_ws('', transform(split({ip}, '\\\\.'), o -> lpad(conv(o, 10, 2), 8, '0')))"
    halves = f"split({ip}, '::')"
    head = f"filter(split({halves}[0], ':'), h -> h != '')"
    tail = f"IF(size({halves}) > 1, filter(split({halves}[1], ':'), h -> h != ''), array())"
    hextets = (
        f"concat(concat_ws('', transform({head}, h -> lpad(h, 4, '0'))),"
        f" repeat('0000', 8 - size({head}) - size({tail})), concat_ws('', transform({tail}, h -> lpad(h, 4, '0'))))"
    )
    v6 = f"concat_ws('', transform(split(lower({hextets}), ''), c -> lpad(conv(c, 16, 2), 4, '0')))"
    return f"(CASE WHEN {ip} LIKE '%:%' THEN {v6} ELSE {v4} END)"


def _cidrmatch(args: Sequence[str]) -> str:
    """Whether the address is in the block: the first prefix-length bits of both are equal. IPv4
    and IPv6 alike; an address of the other family than the block's fails the query."""
    ip, cidr = _p(args[0]), _p(args[1])
    base = f"split({cidr}, '/')[0]"
    prefix = f"CAST(split({cidr}, '/')[1] AS INT)"
    return (
        f"(CASE WHEN ({ip} LIKE '%:%') <> ({cidr} LIKE '%:%') "
        "THEN raise_error('cidrmatch: the address and the block must be both IPv4 or both IPv6') "
        f"ELSE substring({_ip_bits(ip)}, 1, {prefix}) = substring({_ip_bits(base)}, 1, {prefix}) END)"
    )


_scalar("cidrmatch", _IP, 2, _cidrmatch)

# The reference's full-text (relevance) functions need an OpenSearch query, not Spark SQL.
RELEVANCE_FUNCTIONS = frozenset(
    {
        "match", "match_phrase", "matchphrase", "matchphrasequery", "match_bool_prefix", "match_phrase_prefix",
        "simple_query_string", "query_string", "multi_match", "multimatch", "multimatchquery", "match_query",
        "matchquery", "query", "wildcard_query", "wildcardquery", "score", "scorequery", "score_query", "highlight",
    }
)  # fmt: skip

# --------------------------------------------------------------------------------------------
# aggregations
# --------------------------------------------------------------------------------------------

_AGGREGATION = "aggregation"


def _agg(spark_name: str) -> AggregateBuilder:
    return lambda args, distinct: f"{spark_name}({'DISTINCT ' if distinct else ''}{', '.join(args)})"


def _percent(expr: str) -> str:
    """The reference's percent (0..100) as Spark's fraction; a literal is checked here."""
    value = _number(expr)
    if value is None:
        return f"({_p(expr)} / 100.0)"
    if not 0 <= value <= 100:
        raise PplSemanticError(f"Unsupported value 'percent': {expr.strip()} (expected: >= 0 <= 100)")
    return repr(value / 100)


def _percentile(spark_name: str) -> AggregateBuilder:
    return lambda args, distinct: f"{spark_name}({'DISTINCT ' if distinct else ''}{args[0]}, {_percent(args[1])})"


def _percentile_exact(args: Sequence[str], distinct: bool) -> str:
    # The value at the rank, not an interpolation: the reference's documented answers (36 for
    # the 90th percentile of 28, 32, 33, 36).
    if distinct:
        raise PplSemanticError("percentile does not take distinct")
    return f"percentile_disc({_percent(args[1])}) WITHIN GROUP (ORDER BY {args[0]})"


def _aggregate(names: str | Iterable[str], arity: int | tuple[int, int | None], build: AggregateBuilder) -> None:
    def plain(args: Sequence[str]) -> str:
        return build(args, False)

    _register(_AGGREGATES, names, _AGGREGATION, arity, plain, build)


_aggregate("count", (0, 1), lambda a, d: f"count({'DISTINCT ' if d else ''}{a[0]})" if a else "count(*)")
_aggregate(["distinct_count", "dc"], 1, lambda a, d: f"count(DISTINCT {a[0]})")
_aggregate(["distinct_count_approx", "approx_count_distinct"], 1, lambda a, d: f"approx_count_distinct({a[0]})")
_aggregate("sum", 1, _agg("sum"))
_aggregate(["avg", "mean"], 1, _agg("avg"))
_aggregate("min", 1, _agg("min"))
_aggregate("max", 1, _agg("max"))
# stddev and std are the population deviation, variance the population variance, as the reference maps them.
_aggregate(["stddev_pop", "stddev", "std"], 1, _agg("stddev_pop"))
_aggregate("stddev_samp", 1, _agg("stddev_samp"))
_aggregate(["var_pop", "variance"], 1, _agg("var_pop"))
_aggregate("var_samp", 1, _agg("var_samp"))
# percentile(field, percent) with percent in 0..100; Spark takes a fraction.
_aggregate("percentile", 2, _percentile_exact)
_aggregate("percentile_approx", 2, _percentile("percentile_approx"))
# take(field[, size]): up to size (default 10) of the field's values, in no guaranteed order.
_aggregate("take", (1, 2), lambda a, d: f"slice(collect_list({a[0]}), 1, {a[1] if len(a) > 1 else '10'})")


# --------------------------------------------------------------------------------------------
# public interface
# --------------------------------------------------------------------------------------------


#: Functions of the reference's grammar that Spark SQL cannot express, and why.
UNSUPPORTED: dict[str, str] = {
    **{
        name: "Spark SQL has no function that edits a JSON document (the reference runs a UDF of its own)"
        for name in ("json_delete", "json_set", "json_append", "json_extend")
    },
    "geoip": "it needs the reference's IP range table and its UDFs for IPv6 addresses",
}


def _unknown(name: str) -> PplSemanticError:
    key = name.lower()
    if key in UNSUPPORTED:
        return PplSemanticError(f"{name} is not supported on Spark: {UNSUPPORTED[key]}")
    if key in RELEVANCE_FUNCTIONS:
        return PplSemanticError(f"Relevance function {name} is not supported on Spark (it needs an OpenSearch query)")
    if key in _AGGREGATES:
        return PplSemanticError(f"{name} is an aggregation function; use it in stats or eventstats")
    return PplSemanticError(f"{name} is not a builtin function of PPL")


def scalar_sql(name: str, args: Sequence[str]) -> str:
    """The Spark SQL of the scalar function ``name`` applied to ``args``."""
    spec = _SCALARS.get(name.lower())
    if spec is None:
        raise _unknown(name)
    spec.check_arity(args)
    return spec.build(list(args))


def is_aggregate(name: str) -> bool:
    """Whether ``name`` is an aggregation function (usable in ``stats`` and ``eventstats``)."""
    return name.lower() in _AGGREGATES


def aggregate_sql(name: str, args: Sequence[str], distinct: bool = False) -> str:
    """The Spark SQL of the aggregation ``name`` over ``args`` (``distinct``: ``count(distinct x)``)."""
    key = name.lower()
    spec = _AGGREGATES.get(key)
    if spec is None:
        if key in _SCALARS:
            raise PplSemanticError(f"{name} is not an aggregation function")
        raise PplSemanticError(f"Unsupported aggregation function: {name}")
    spec.check_arity(args)
    assert spec.build_aggregate is not None
    return spec.build_aggregate(list(args), distinct)


def scalar_names() -> list[str]:
    """The supported scalar function names, sorted."""
    return sorted(_SCALARS)


def aggregate_names() -> list[str]:
    """The supported aggregation function names, sorted."""
    return sorted(_AGGREGATES)


def function_spec(name: str) -> FunctionSpec | None:
    """The table entry of ``name`` (scalar or aggregation), for documentation and tests."""
    key = name.lower()
    return _SCALARS.get(key) or _AGGREGATES.get(key)


def names_by_family() -> dict[str, list[str]]:
    """The supported names grouped by family (string, math, datetime, ..., aggregation)."""
    out: dict[str, list[str]] = {}
    for spec in [*_SCALARS.values(), *_AGGREGATES.values()]:
        out.setdefault(spec.family, []).append(spec.name)
    return {family: sorted(names) for family, names in out.items()}


# Spark types of the reference's cast target names.
_CAST_TYPES: dict[str, str] = {
    "string": "STRING",
    "int": "INT",
    "integer": "INT",
    "long": "BIGINT",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "time": "TIME",
}


def cast_type_names() -> list[str]:
    """The type names ``cast(x as type)`` accepts, sorted."""
    return sorted(_CAST_TYPES)


def cast_sql(expr: str, type_name: str) -> str:
    """``cast(expr as type_name)`` with the reference's type names. Spark has no TIME type: a
    time is an 'HH:mm:ss' string, as ``time()`` gives."""
    spark_type = _CAST_TYPES.get(type_name.strip().lower())
    if spark_type == "TIME":
        return f"date_format(CAST({expr} AS TIMESTAMP), 'HH:mm:ss')"
    if spark_type is None:
        raise PplSemanticError(
            f"Unsupported data type for cast: {type_name} (expected one of {', '.join(cast_type_names())})"
        )
    return f"CAST({expr} AS {spark_type})"
