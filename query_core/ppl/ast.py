"""The syntax tree of a PPL query: what :func:`query_core.ppl.parser.parse_ppl` returns.

Expressions and commands are frozen dataclasses, so that trees compare by value (the unit tests
compare whole trees) and can be shared freely. Names keep the case the user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Literal as Lit

# -- expressions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    """A constant. ``kind`` says how it was written; ``value`` is its Python value (a string for
    ``interval``: the amount and unit as written, e.g. ``"1h"``)."""

    value: int | float | str | bool | None
    kind: Lit["int", "decimal", "string", "bool", "null", "interval", "date", "time", "timestamp"]
    text: str = ""


@dataclass(frozen=True)
class Interval:
    """``interval <value> <unit>``: ``unit`` upper case and singular (``MONTH``)."""

    value: Expr
    unit: str


@dataclass(frozen=True)
class Lambda:
    """``x -> body`` or ``(acc, x) -> body``, an argument of the collection functions."""

    params: tuple[str, ...]
    body: Expr


@dataclass(frozen=True)
class Field:
    """A field reference, possibly dotted (a struct member): ``parts`` are the names unquoted."""

    parts: tuple[str, ...]

    @property
    def name(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Binary:
    """``left op right``; ``op`` is upper case for words (``AND``, ``OR``, ``XOR``)."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Unary:
    """``NOT operand`` or ``- operand``."""

    op: str
    operand: Expr


@dataclass(frozen=True)
class InList:
    """``expr IN (values...)``."""

    expr: Expr
    values: tuple[Expr, ...]


@dataclass(frozen=True)
class Between:
    """``expr BETWEEN low AND high`` (both ends included)."""

    expr: Expr
    low: Expr
    high: Expr


@dataclass(frozen=True)
class Subquery:
    """A subsearch in an expression: ``kind`` ``in`` (``expr IN [...]``), ``exists`` or ``scalar``."""

    kind: Lit["in", "exists", "scalar"]
    query: Query
    expr: Expr | None = None
    #: ``(a, b) in [...]``: the fields compared with the subsearch's columns (``expr`` is None).
    tuple_exprs: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Call:
    """A function call ``name(args...)``. ``distinct`` for ``count(distinct x)``; ``default`` is the
    ``else`` value of ``case(...)`` (the only function that takes one)."""

    name: str
    args: tuple[Expr, ...]
    distinct: bool = False
    default: Expr | None = None
    #: The call as written in the query (the reference names an aggregation's column by it).
    text: str = dc_field(default="", compare=False)


@dataclass(frozen=True)
class Cast:
    """``cast(expr as type)``: ``type_name`` as written."""

    expr: Expr
    type_name: str


Expr = Literal | Field | Binary | Unary | InList | Between | Subquery | Call | Cast | Interval | Lambda


# -- pieces of commands ------------------------------------------------------------------------


@dataclass(frozen=True)
class TableName:
    """A table as written: ``parts`` unquoted, e.g. ``("myglue", "default", "http_logs")``."""

    parts: tuple[str, ...]


@dataclass(frozen=True)
class Aggregation:
    """One aggregation of ``stats``/``eventstats``: a call, and the output name if given."""

    call: Call
    alias: str | None = None


@dataclass(frozen=True)
class Span:
    """``span(field, interval)``: ``interval`` is a number, or an amount with a time unit."""

    field: Expr
    interval: Literal
    alias: str | None = None


@dataclass(frozen=True)
class GroupField:
    """A ``by`` field, with an optional ``as`` name."""

    field: Field
    alias: str | None = None


@dataclass(frozen=True)
class SortKey:
    """A sort field; ``descending`` for a ``-`` prefix."""

    field: Field
    descending: bool = False


@dataclass(frozen=True)
class Assignment:
    """``target = value`` (``eval``, ``fillnull using``)."""

    target: Field
    value: Expr


@dataclass(frozen=True)
class TrendComputation:
    """``sma(n, field) [as alias]`` or ``wma(...)`` of ``trendline``."""

    kind: Lit["sma", "wma"]
    points: int
    field: Field
    alias: str | None = None


# -- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    """``[search] source=<table>[, <table>...] [as alias] [filter]``, or ``source=[ subsearch ]``:
    the first command of a pipeline. ``tables`` holds more than one table for ``source=t1, t2``;
    ``subsearch`` replaces the table for a subsearch source."""

    table: TableName
    filter: Expr | None = None
    alias: str | None = None
    more_tables: tuple[TableName, ...] = ()
    subsearch: Query | None = None


@dataclass(frozen=True)
class Where:
    condition: Expr


@dataclass(frozen=True)
class Fields:
    """``fields [+|-] a, b``: ``exclude`` for ``-``."""

    fields: tuple[Field, ...]
    exclude: bool = False


@dataclass(frozen=True)
class Stats:
    """``stats`` (``event=False``) or ``eventstats`` (``event=True``)."""

    aggregations: tuple[Aggregation, ...]
    by: tuple[GroupField, ...] = ()
    span: Span | None = None
    event: bool = False


@dataclass(frozen=True)
class Sort:
    keys: tuple[SortKey, ...]


@dataclass(frozen=True)
class Head:
    size: int = 10
    offset: int = 0


@dataclass(frozen=True)
class Eval:
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class Dedup:
    fields: tuple[Field, ...]
    number: int = 1
    keep_empty: bool = False
    consecutive: bool = False


@dataclass(frozen=True)
class Rename:
    """``rename a as b, ...``: pairs of (old, new); a name with ``*`` is a wildcard pattern."""

    pairs: tuple[tuple[Field, Field], ...]


@dataclass(frozen=True)
class TopRare:
    """``top``/``rare`` (``rare=True``); ``approx`` for the ``_approx`` forms."""

    fields: tuple[Field, ...]
    number: int = 10
    by: tuple[Field, ...] = ()
    rare: bool = False
    approx: bool = False


@dataclass(frozen=True)
class Parse:
    """``parse <field> '<regex>'`` (``grok=False``) or ``grok <field> '<grok pattern>'``."""

    field: Expr
    pattern: str
    grok: bool = False


@dataclass(frozen=True)
class Patterns:
    """``patterns [new_field='name'] [pattern='regex'] <field>``: the field with every match of
    ``pattern`` (by default, letters and digits) removed, as ``new_field``."""

    field: Expr
    new_field: str = "patterns_field"
    pattern: str | None = None


@dataclass(frozen=True)
class FieldSummary:
    """``fieldsummary [includefields=a, b] [nulls=true]``: one row of statistics per field."""

    fields: tuple[Field, ...] = ()
    nulls: bool = False


@dataclass(frozen=True)
class Flatten:
    """``flatten <struct or array of structs> [as (a, b, ...)]``."""

    field: Field
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expand:
    """``expand <array or map> [as alias]``: one row per element."""

    field: Field
    alias: str | None = None


@dataclass(frozen=True)
class AppendCol:
    """``appendcol [override=true] [ commands ]``: the commands run on the main search's source,
    their rows set beside the main rows, row by row."""

    commands: tuple[Command, ...]
    override: bool = False


@dataclass(frozen=True)
class Correlate:
    """``correlate <type> fields(...) [scope(field, span)] mapping(a.x = b.y, ...)`` (experimental)."""

    kind: Lit["self", "exact", "approximate"]
    fields: tuple[Field, ...]
    mappings: tuple[tuple[Field, str, Field], ...]
    scope: tuple[Field, Literal, str | None] | None = None


@dataclass(frozen=True)
class FillNull:
    """``fillnull with v [in a, b]`` (``value`` set, ``fields`` possibly empty: every field) or
    ``fillnull using a = v1, b = v2`` (``assignments``)."""

    value: Expr | None = None
    fields: tuple[Field, ...] = ()
    assignments: tuple[Assignment, ...] = ()


@dataclass(frozen=True)
class Trendline:
    computations: tuple[TrendComputation, ...]
    sort: SortKey | None = None


@dataclass(frozen=True)
class Lookup:
    """``lookup <table> m [as s], ... [replace|append f [as o], ...]``.

    ``mappings`` are (lookup table field, input field); ``outputs`` are (lookup table field,
    output field); an empty ``outputs`` means every lookup table field but the mapping fields.
    """

    table: TableName
    mappings: tuple[tuple[Field, Field], ...]
    strategy: Lit["replace", "append"] = "replace"
    outputs: tuple[tuple[Field, Field], ...] = ()


JoinKind = Lit["inner", "left", "right", "full", "cross", "semi", "anti"]


@dataclass(frozen=True)
class Join:
    """``[kind] join [left = a] [right = b] [ON cond] <table or [subsearch]> [as alias]``."""

    kind: JoinKind
    right: TableName | Query
    condition: Expr | None = None
    left_alias: str | None = None
    right_alias: str | None = None


Command = (
    Where
    | Fields
    | Stats
    | Sort
    | Head
    | Eval
    | Dedup
    | Rename
    | TopRare
    | Parse
    | FillNull
    | Trendline
    | Lookup
    | Join
    | Patterns
    | FieldSummary
    | Flatten
    | Expand
    | AppendCol
    | Correlate
)


@dataclass(frozen=True)
class Describe:
    table: TableName


ExplainMode = Lit["simple", "extended", "codegen", "cost", "formatted"]


@dataclass(frozen=True)
class Query:
    """A whole query: a pipeline (``source`` then commands) or ``describe``, perhaps explained."""

    source: Search | Describe
    commands: tuple[Command, ...] = ()
    explain: ExplainMode | None = None
