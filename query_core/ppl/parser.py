"""PPL text to :class:`~query_core.ppl.ast.Query`.

The grammar (``grammar.lark``) is LALR(1) with lark's contextual lexer, and the tree is built by a
transformer run inside the parser, so there is no intermediate parse tree. Every failure, of the
grammar or of a value the grammar cannot check (a number out of range, an unknown explain mode),
is a :class:`PplSyntaxError` with the position: nothing else escapes :func:`parse_ppl`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import ContextualLexer

from query_core.ppl import ast
from query_core.ppl.errors import PplSyntaxError

#: The largest integer literal accepted (Spark's BIGINT).
_MAX_INT = 2**63 - 1

#: The text being parsed, for the rules that keep a piece of it as written.
_TEXT: ContextVar[str] = ContextVar("ppl_text", default="")


def parse_ppl(text: str) -> ast.Query:
    """The query ``text`` holds; raises :class:`PplSyntaxError` (only) when it is not valid PPL.

    The text is parsed with its comments and runs of blanks outside quotes made single spaces
    (which the grammar cannot tell apart, and which lex in a third less time); text that does not
    parse so is parsed as written, so an error gives the line and column of the text sent.
    """
    try:
        return _parse(_compact(text), _fast_parser())
    except PplSyntaxError:
        return _parse(text, _parser())


#: Quoted text (kept), or a comment or a run of blanks (made one space).
_BLANKS = re.compile(
    r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`]|``)*`|(?:\s+|/\*.*?\*/|//[^\n]*)+""", re.S
)


def _compact(text: str) -> str:
    return _BLANKS.sub(lambda m: m.group() if m.group()[0] in "'\"`" else " ", text).strip()


def _parse(text: str, parser: Lark) -> ast.Query:
    token = _TEXT.set(text)
    try:
        tree = parser.parse(text)
    except PplSyntaxError:
        raise
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None
    except LarkError as exc:
        raise PplSyntaxError(f"Invalid query: {exc}") from None
    except RecursionError:
        raise PplSyntaxError("Query is nested too deeply") from None
    finally:
        _TEXT.reset(token)
    assert isinstance(tree, ast.Query)
    return tree


class _LeanLexer(ContextualLexer):
    """Lark's contextual lexer (the same scanner and keyword callbacks for each parser state)
    without its line counting, for compacted text: positions are offsets on one line, so the
    tokens carry no true line; an error is reported from a parse of the text as written."""

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        text = lexer_state.text
        pos = lexer_state.line_ctr.char_pos
        while pos < text.end:
            lexer: Any = self.lexers[parser_state.position]  # a BasicLexer: its scanner and callbacks
            found = lexer.scanner.match(text, pos)
            if not found:
                raise UnexpectedCharacters(text.text, pos, 1, pos + 1, allowed=lexer.scanner.allowed_types)
            value, kind = found
            end = pos + len(value)
            if kind not in lexer.ignore_types:
                token = Token(kind, value, pos, 1, pos + 1, 1, end + 1, end)
                callback = lexer.callback.get(kind)
                yield token if callback is None else callback(token)
            pos = end


@functools.cache
def _fast_parser() -> Lark:
    """The parser with :class:`_LeanLexer`, for the compacted text of :func:`parse_ppl`."""
    parser = _build()
    lexer = parser.parser.lexer
    assert type(lexer) is ContextualLexer, type(lexer)
    lexer.__class__ = _LeanLexer
    return parser


@functools.cache
def _parser() -> Lark:
    return _build()


def _build() -> Lark:
    grammar = resources.files("query_core.ppl").joinpath("grammar.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        transformer=_Builder(),
        maybe_placeholders=False,
    )


# -- error messages ------------------------------------------------------------------------------

#: How the grammar's terminals read in an error message.
_TERMINAL_WORDS = {
    "IDENT": "a name",
    "BQ_IDENT": "a `quoted name`",
    "FUNC": "a function call",
    "INT": "an integer",
    "DECIMAL": "a number",
    "TIMESPAN": "a time span such as 1h",
    "INTERVAL_KW": "'interval'",
    "DATETIME_LIT": "a date or time literal",
    "WILDNAME": "a name with *",
    "ARROW": "'->'",
    "POSITION": "position(",
    "REGEXP": "'regexp'",
    "CONTAINS": "'contains'",
    "SOURCE": "'source'",
    "INDEX": "'index'",
    "SQ_STRING": "a string",
    "DQ_STRING": "a string",
    "EQ": "'='",
    "COMP_OP": "a comparison",
    "PLUS": "'+'",
    "MINUS": "'-'",
    "MUL_OP": "'*', '/' or '%'",
    "HINT": "a join hint",
    "$END": "the end of the query",
    "TOP": "'top'",
    "RARE": "'rare'",
    "KEEPEMPTY": "'keepempty'",
    "CONSECUTIVE": "'consecutive'",
    "DISTINCT": "'distinct'",
}


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    pattern = _terminal_patterns().get(name)
    return f"'{pattern}'" if pattern is not None else name.lower()


@functools.cache
def _terminal_patterns() -> dict[str, str]:
    """The literal text of each plain-string terminal (keywords and punctuation)."""
    found: dict[str, str] = {}
    for term in _parser().terminals:
        if term.pattern.type == "str":
            found[term.name] = term.pattern.value
    return found


def _expected(names: set[str] | frozenset[str] | None) -> str:
    if not names:
        return ""
    words = sorted({_describe_terminal(n) for n in names})
    if len(words) > 32:
        words = [*words[:32], "..."]
    return "; expected " + ", ".join(words)


def _syntax_error(exc: UnexpectedInput, text: str) -> PplSyntaxError:
    line = getattr(exc, "line", None)
    column = getattr(exc, "column", None)
    if isinstance(exc, UnexpectedEOF):
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        return PplSyntaxError("Unexpected end of query" + _expected(set(exc.expected)), line, column)
    if isinstance(exc, UnexpectedToken):
        token = exc.token
        if token.type == "$END":
            lines = text.splitlines() or [""]
            line, column = len(lines), len(lines[-1]) + 1
            return PplSyntaxError("Unexpected end of query" + _expected(exc.expected), line, column)
        return PplSyntaxError(f"Unexpected {str(token)!r}" + _expected(exc.expected), line, column)
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream if exc.pos_in_stream is not None else -1
        char = text[pos] if 0 <= pos < len(text) else ""
        return PplSyntaxError(f"Unexpected character {char!r}" + _expected(exc.allowed), line, column)
    return PplSyntaxError(f"Invalid query: {exc}", line, column)  # pragma: no cover


def _error_at(token: Token, reason: str) -> PplSyntaxError:
    return PplSyntaxError(reason, token.line, token.column)


# -- tokens to values ----------------------------------------------------------------------------


def _unquote_name(token: Token) -> str:
    text = str(token)
    if token.type == "BQ_IDENT":
        return text[1:-1].replace("``", "`")
    return text


def _unquote_string(text: str) -> str:
    """A quoted string's value: a doubled quote, or the quote after a backslash, is one quote.

    Every other backslash is kept as written, so that regular expressions (``'\\d+'``) read as in
    the reference.
    """
    quote, body = text[0], text[1:-1]
    return body.replace(quote + quote, quote).replace("\\" + quote, quote)


def _int_value(token: Token) -> int:
    value = int(str(token))
    if value > _MAX_INT:
        raise _error_at(token, f"Integer {token} is out of range")
    return value


#: The units of ``interval <value> <unit>``, as the reference's grammar lists them.
_INTERVAL_UNITS = (
    "MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR",
    "SECOND_MICROSECOND", "MINUTE_MICROSECOND", "MINUTE_SECOND", "HOUR_MICROSECOND", "HOUR_SECOND",
    "HOUR_MINUTE", "DAY_MICROSECOND", "DAY_SECOND", "DAY_MINUTE", "DAY_HOUR", "YEAR_MONTH",
)  # fmt: skip


@dataclass(frozen=True)
class _Else:
    """The ``else`` value of ``case(...)``, on its way to the call."""

    value: ast.Expr


# -- the tree builder ----------------------------------------------------------------------------


@v_args(inline=True)
class _Builder(Transformer[Token, Any]):
    """Builds :mod:`.ast` nodes; each method is one grammar rule (or alias)."""

    # queries
    def start(self, *parts: Any) -> ast.Query:
        explain = parts[0] if len(parts) == 2 else None
        body = parts[-1]
        if isinstance(body, ast.Describe):
            return ast.Query(body, (), explain)
        source, commands = body
        return ast.Query(source, commands, explain)

    def explain(self, mode: str = "simple") -> str:
        return mode

    def explain_mode(self, token: Token) -> str:
        return str(token).lower()

    def describe(self, name: tuple[str, ...]) -> ast.Describe:
        return ast.Describe(ast.TableName(name))

    def pipeline(self, source: ast.Search, *commands: ast.Command) -> tuple[ast.Search, tuple[ast.Command, ...]]:
        return source, commands

    def search_from(self, source: ast.Search, condition: ast.Expr | None = None) -> ast.Search:
        return replace(source, filter=condition) if condition is not None else source

    def search_filter_from(self, condition: ast.Expr, source: ast.Search) -> ast.Search:
        return replace(source, filter=condition)

    def source_clause(self, _keyword: Token, _eq: Token, source: ast.Search) -> ast.Search:
        return source

    def source_tables(self, names: list[tuple[str, ...]], alias: str | None = None) -> ast.Search:
        tables = [ast.TableName(n) for n in names]
        return ast.Search(tables[0], None, alias, tuple(tables[1:]))

    def source_subsearch(self, query: ast.Query, alias: str | None = None) -> ast.Search:
        return ast.Search(ast.TableName(()), None, alias, (), query)

    def table_list(self, *names: tuple[str, ...]) -> list[tuple[str, ...]]:
        return list(names)

    def filter(self, *operands: ast.Expr) -> ast.Expr:
        result = operands[0]
        for operand in operands[1:]:
            result = ast.Binary("AND", result, operand)
        return result

    # commands
    def where(self, condition: ast.Expr) -> ast.Where:
        return ast.Where(condition)

    def fields(self, *parts: Any) -> ast.Fields:
        exclude = len(parts) == 2 and parts[0] == "-"
        return ast.Fields(parts[-1], exclude)

    def fields_sign(self, token: Token) -> str:
        return str(token)

    def field_list(self, *fields: ast.Field) -> tuple[ast.Field, ...]:
        return fields

    def stats(self, *parts: Any) -> ast.Stats:
        return self._stats(parts, event=False)

    def eventstats(self, *parts: Any) -> ast.Stats:
        return self._stats(parts, event=True)

    def stats_option(self, *_parts: Any) -> None:
        return None

    def dedup_split(self, *_parts: Any) -> None:
        return None

    @staticmethod
    def _stats(parts: tuple[Any, ...], event: bool) -> ast.Stats:
        aggs = next(p for p in parts if isinstance(p, tuple))
        by = next((p for p in parts if isinstance(p, list)), None)
        groups: list[ast.GroupField] = []
        span: ast.Span | None = None
        for item in by or ():
            if isinstance(item, ast.Span):
                span = item
            else:
                groups.append(item)
        return ast.Stats(aggs, tuple(groups), span, event)

    def agg_list(self, *aggs: ast.Aggregation) -> tuple[ast.Aggregation, ...]:
        return aggs

    def agg(self, call: ast.Call, alias: str | None = None) -> ast.Aggregation:
        return ast.Aggregation(call, alias)

    def by_clause(self, *items: Any) -> list[Any]:
        spans = [i for i in items if isinstance(i, ast.Span)]
        if len(spans) > 1:
            raise PplSyntaxError("Only one span is allowed in a by clause")
        return list(items)

    def by_span(self, call: ast.Call, alias: str | None = None) -> ast.Span:
        if call.name.lower() != "span" or len(call.args) != 2 or call.distinct or call.default is not None:
            raise PplSyntaxError(f"Expected span(<field>, <interval>) in a by clause, found {call.name}(...)")
        interval = call.args[1]
        if not isinstance(interval, ast.Literal) or interval.kind not in ("int", "decimal", "interval"):
            raise PplSyntaxError("The interval of span(...) must be a number or a time interval such as 1h")
        return ast.Span(call.args[0], interval, alias)

    def by_field(self, field: ast.Field, alias: str | None = None) -> ast.GroupField:
        return ast.GroupField(field, alias)

    def alias(self, name: str) -> str:
        return name

    def sort(self, *keys: ast.SortKey) -> ast.Sort:
        return ast.Sort(keys)

    def sort_key(self, *parts: Any) -> ast.SortKey:
        return ast.SortKey(parts[-1], len(parts) == 2 and parts[0] == "-")

    def sort_key_typed(self, *parts: Any) -> ast.SortKey:
        """``auto(f)``, ``str(f)``, ``ip(f)``, ``num(f)``: accepted and sorted as ``f``, as the
        reference does."""
        func = next(p for p in parts if isinstance(p, Token) and p.type == "FUNC")
        if str(func).lower() not in ("auto", "str", "ip", "num"):
            raise _error_at(func, f"Unexpected {func}(...) in sort; expected a field, auto(), str(), ip() or num()")
        return ast.SortKey(parts[-1], parts[0] == "-")

    def sort_sign(self, token: Token) -> str:
        return str(token)

    def head(self, *parts: Any) -> ast.Head:
        size = next((_int_value(p) for p in parts if isinstance(p, Token)), 10)
        offset = next((p for p in parts if isinstance(p, int) and not isinstance(p, Token)), 0)
        return ast.Head(size, offset)

    def head_from(self, offset: Token) -> int:
        return _int_value(offset)

    def eval(self, *assignments: ast.Assignment) -> ast.Eval:
        return ast.Eval(assignments)

    def assignment(self, target: ast.Field, _eq: Token, value: ast.Expr) -> ast.Assignment:
        return ast.Assignment(target, value)

    def dedup(self, *parts: Any) -> ast.Dedup:
        number = 1
        rest = list(parts)
        if isinstance(rest[0], Token):
            number = _int_value(rest.pop(0))
            if number < 1:
                raise PplSyntaxError("The number of duplicates to keep must be at least 1")
        fields = rest.pop(0)
        options = dict(rest)
        return ast.Dedup(fields, number, options.get("keepempty", False), options.get("consecutive", False))

    def dedup_option(self, name: Token, _eq: Token, value: ast.Literal) -> tuple[str, bool]:
        return str(name).lower(), bool(value.value)

    def rename(self, *pairs: tuple[ast.Field, ast.Field]) -> ast.Rename:
        return ast.Rename(pairs)

    def rename_item(self, old: ast.Field, new: ast.Field) -> tuple[ast.Field, ast.Field]:
        return old, new

    def rename_name(self, item: ast.Field | Token) -> ast.Field:
        return ast.Field((str(item),)) if isinstance(item, Token) else item

    def top(self, *parts: Any) -> ast.TopRare:
        return self._top_rare(parts, rare=False)

    def rare(self, *parts: Any) -> ast.TopRare:
        return self._top_rare(parts, rare=True)

    @staticmethod
    def _top_rare(parts: tuple[Any, ...], rare: bool) -> ast.TopRare:
        rest = list(parts)
        keyword = rest.pop(0)
        number = _int_value(rest.pop(0)) if isinstance(rest[0], Token) else 10
        fields = rest.pop(0)
        by = rest.pop(0) if rest else ()
        return ast.TopRare(fields, number, by, rare, str(keyword).lower().endswith("_approx"))

    def group_by(self, fields: tuple[ast.Field, ...]) -> tuple[ast.Field, ...]:
        return fields

    def parse(self, field: ast.Expr, pattern: ast.Literal) -> ast.Parse:
        return ast.Parse(field, str(pattern.value), grok=False)

    def grok(self, field: ast.Expr, pattern: ast.Literal) -> ast.Parse:
        return ast.Parse(field, str(pattern.value), grok=True)

    def patterns(self, *parts: Any) -> ast.Patterns:
        options: dict[str, str] = dict(p for p in parts if isinstance(p, tuple))
        return ast.Patterns(parts[-1], options.get("new_field") or "patterns_field", options.get("pattern") or None)

    def patterns_option(self, name: Token, _eq: Token, value: ast.Literal) -> tuple[str, str]:
        return str(name).lower(), str(value.value)

    def fieldsummary(self, *options: tuple[str, Any]) -> ast.FieldSummary:
        found = dict(options)
        return ast.FieldSummary(found.get("fields", ()), bool(found.get("nulls", False)))

    def fieldsummary_include(self, _eq: Token, fields: tuple[ast.Field, ...]) -> tuple[str, Any]:
        return "fields", fields

    def fieldsummary_nulls(self, _eq: Token, value: ast.Literal) -> tuple[str, Any]:
        return "nulls", bool(value.value)

    def flatten(self, field: ast.Field, names: tuple[tuple[str, ...], ...] = ()) -> ast.Flatten:
        return ast.Flatten(field, tuple(".".join(n) for n in names))

    def name_seq(self, *names: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
        return names

    def expand(self, field: ast.Field, alias: tuple[str, ...] | None = None) -> ast.Expand:
        return ast.Expand(field, ".".join(alias) if alias else None)

    def appendcol(self, *parts: Any) -> ast.AppendCol:
        override = False
        if parts and isinstance(parts[0], Token):  # override = <bool>
            override = bool(parts[1].value)
            parts = parts[2:]
        return ast.AppendCol(tuple(parts), override)

    def correlate(self, kind: str, fields: tuple[ast.Field, ...], *rest: Any) -> ast.Correlate:
        scope = next((r for r in rest if isinstance(r, tuple) and len(r) == 3 and r[0] == "scope"), None)
        mappings = next(r for r in rest if isinstance(r, list))
        return ast.Correlate(kind, fields, tuple(mappings), None if scope is None else scope[1])  # type: ignore[arg-type]

    def correlation_type(self, token: Token) -> str:
        return str(token).lower()

    def scope(self, field: ast.Field, value: ast.Literal, unit: str | None = None) -> tuple[str, Any, None]:
        return "scope", (field, value, unit), None

    def mapping(self, *items: tuple[ast.Field, str, ast.Field]) -> list[tuple[ast.Field, str, ast.Field]]:
        return list(items)

    def mapping_item(
        self, left: tuple[str, ...], op: Token, right: tuple[str, ...]
    ) -> tuple[ast.Field, str, ast.Field]:
        text = str(op)
        return ast.Field(left), {"==": "=", "<>": "!="}.get(text, text), ast.Field(right)

    def fillnull_with(self, value: ast.Expr, fields: tuple[ast.Field, ...] = ()) -> ast.FillNull:
        return ast.FillNull(value=value, fields=fields)

    def fillnull_using(self, *assignments: ast.Assignment) -> ast.FillNull:
        return ast.FillNull(assignments=assignments)

    def trendline(self, *parts: Any) -> ast.Trendline:
        sort = parts[0] if isinstance(parts[0], ast.SortKey) else None
        items = tuple(p for p in parts if isinstance(p, ast.TrendComputation))
        return ast.Trendline(items, sort)

    def trend_item(
        self, func: Token, points: Token, field: ast.Field, alias: str | None = None
    ) -> ast.TrendComputation:
        kind = str(func).lower()
        if kind not in ("sma", "wma"):
            raise _error_at(func, f"Unknown trendline function {func}; expected sma or wma")
        count = _int_value(points)
        if count < 1:
            raise _error_at(points, "The number of data points of a trendline must be greater than zero")
        return ast.TrendComputation("sma" if kind == "sma" else "wma", count, field, alias)

    def lookup(self, name: tuple[str, ...], *parts: Any) -> ast.Lookup:
        mappings = tuple(p for p in parts if isinstance(p, tuple) and p[0] == "map")
        outputs = tuple(p for p in parts if isinstance(p, tuple) and p[0] == "out")
        strategy = next((p for p in parts if isinstance(p, str)), "replace")
        return ast.Lookup(
            ast.TableName(name),
            tuple((m[1], m[2]) for m in mappings),
            "append" if strategy == "append" else "replace",
            tuple((o[1], o[2]) for o in outputs),
        )

    def lookup_mapping(self, field: ast.Field, source: ast.Field | None = None) -> tuple[str, ast.Field, ast.Field]:
        return "map", field, source or field

    def lookup_output(self, field: ast.Field, output: ast.Field | None = None) -> tuple[str, ast.Field, ast.Field]:
        return "out", field, output or field

    def lookup_strategy(self, token: Token) -> str:
        return str(token).lower()

    def join(self, *parts: Any) -> ast.Join:
        kind: ast.JoinKind = "inner"
        left_alias = right_alias = None
        condition: ast.Expr | None = None
        right: Any = None
        sub_alias: str | None = None
        for part in parts:
            if isinstance(part, tuple) and part and part[0] == "kind":
                kind = part[1]
            elif isinstance(part, tuple) and part and part[0] == "side":
                if part[1] == "left":
                    left_alias = part[2]
                else:
                    right_alias = part[2]
            elif isinstance(part, tuple) and part and part[0] == "right":
                right, sub_alias = part[1], part[2]
            elif part is not None and not isinstance(part, tuple):
                condition = part
        # `right = r` names the right side even when the table has an alias of its own, as in the reference.
        if right_alias is None:
            right_alias = sub_alias
        return ast.Join(kind, right, condition, left_alias, right_alias)

    def join_type(self, *tokens: Token) -> tuple[str, ast.JoinKind]:
        words = [str(t).lower() for t in tokens]
        kinds: dict[str, ast.JoinKind] = {
            "inner": "inner",
            "left": "left",
            "right": "right",
            "full": "full",
            "outer": "full",
            "cross": "cross",
            "semi": "semi",
            "anti": "anti",
        }
        last = words[-1] if words[-1] != "outer" or len(words) == 1 else words[0]
        return "kind", kinds[last]

    def join_side(self, side: Token, _eq: Token, name: str, *_comma: Token) -> tuple[str, str, str]:
        return "side", str(side).lower(), name

    def join_hint(self, *_parts: Any) -> tuple[str]:
        return ("hint",)

    def join_table(self, name: tuple[str, ...], alias: str | None = None) -> tuple[str, ast.TableName, str | None]:
        return "right", ast.TableName(name), alias

    def join_subsearch(self, query: ast.Query, alias: str | None = None) -> tuple[str, ast.Query, str | None]:
        return "right", query, alias

    def subsearch(self, pipeline: tuple[ast.Search, tuple[ast.Command, ...]]) -> ast.Query:
        return ast.Query(pipeline[0], pipeline[1])

    # expressions
    def or_(self, left: ast.Expr, right: ast.Expr) -> ast.Expr:
        return ast.Binary("OR", left, right)

    def xor_(self, left: ast.Expr, right: ast.Expr) -> ast.Expr:
        return ast.Binary("XOR", left, right)

    def and_(self, left: ast.Expr, right: ast.Expr) -> ast.Expr:
        return ast.Binary("AND", left, right)

    def not_(self, operand: ast.Expr) -> ast.Expr:
        return ast.Unary("NOT", operand)

    def compare(self, left: ast.Expr, op: Token, right: ast.Expr) -> ast.Expr:
        text = str(op)
        return ast.Binary({"==": "=", "<>": "!="}.get(text, text), left, right)

    def in_(self, expr: ast.Expr, *values: ast.Expr) -> ast.Expr:
        return ast.InList(expr, values)

    def not_in(self, expr: ast.Expr, *values: ast.Expr) -> ast.Expr:
        return ast.Unary("NOT", ast.InList(expr, values))

    def between(self, expr: ast.Expr, low: ast.Expr, high: ast.Expr) -> ast.Expr:
        return ast.Between(expr, low, high)

    def not_between(self, expr: ast.Expr, low: ast.Expr, high: ast.Expr) -> ast.Expr:
        return ast.Unary("NOT", ast.Between(expr, low, high))

    def in_subsearch(self, expr: ast.Expr, query: ast.Query) -> ast.Expr:
        return ast.Subquery("in", query, expr)

    def not_in_subsearch(self, expr: ast.Expr, query: ast.Query) -> ast.Expr:
        return ast.Unary("NOT", ast.Subquery("in", query, expr))

    def tuple_in_subsearch(self, names: tuple[ast.Field, ...], query: ast.Query) -> ast.Expr:
        return ast.Subquery("in", query, None, names)

    def tuple_not_in_subsearch(self, names: tuple[ast.Field, ...], query: ast.Query) -> ast.Expr:
        return ast.Unary("NOT", ast.Subquery("in", query, None, names))

    def regexp(self, left: ast.Expr, _op: Token, right: ast.Expr) -> ast.Expr:
        return ast.Call("regexp", (left, right))

    def contains(self, left: ast.Expr, _op: Token, right: ast.Expr) -> ast.Expr:
        return ast.Call("contains", (left, right))

    def name_tuple(self, *names: tuple[str, ...]) -> tuple[ast.Field, ...]:
        return tuple(ast.Field(n) for n in names)

    def lambda_expr(self, params: str | tuple[ast.Field, ...], _arrow: Token, body: ast.Expr) -> ast.Lambda:
        if isinstance(params, str):
            return ast.Lambda((params,), body)
        for param in params:
            if len(param.parts) != 1:
                raise PplSyntaxError(f"A lambda parameter must be a plain name, not {param.name}")
        return ast.Lambda(tuple(p.parts[0] for p in params), body)

    def position(self, _func: Token, needle: ast.Expr, haystack: ast.Expr) -> ast.Expr:
        return ast.Call("position", (needle, haystack))

    def exists(self, query: ast.Query) -> ast.Expr:
        return ast.Subquery("exists", query)

    def scalar_subsearch(self, query: ast.Query) -> ast.Expr:
        return ast.Subquery("scalar", query)

    def binary(self, left: ast.Expr, op: Token, right: ast.Expr) -> ast.Expr:
        return ast.Binary(str(op), left, right)

    def neg(self, _minus: Token, operand: ast.Expr) -> ast.Expr:
        if (
            isinstance(operand, ast.Literal)
            and operand.kind in ("int", "decimal")
            and isinstance(operand.value, int | float)
        ):
            return ast.Literal(-operand.value, operand.kind, "-" + operand.text)
        return ast.Unary("-", operand)

    def call(self, func: Token, *rest: Any) -> ast.Call:
        args, end = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
        distinct, values, default = args or (False, (), None)
        text = _TEXT.get()[func.start_pos : end.end_pos] if func.start_pos is not None else ""
        return ast.Call(str(func), values, distinct, default, text)

    def cast(self, func: Token, expr: ast.Expr, type_name: str) -> ast.Cast:
        if str(func).lower() != "cast":
            raise _error_at(func, f"Unexpected 'as' in the arguments of {func}")
        return ast.Cast(expr, type_name)

    def call_args(self, *parts: Any) -> tuple[bool, tuple[ast.Expr, ...], ast.Expr | None]:
        rest = list(parts)
        distinct = bool(rest) and isinstance(rest[0], Token) and rest[0].type == "DISTINCT"
        if distinct:
            rest.pop(0)
        default = None
        if rest and isinstance(rest[-1], _Else):
            default = rest.pop().value
        return distinct, tuple(rest), default

    def case_else(self, value: ast.Expr) -> _Else:
        return _Else(value)

    def int_lit(self, token: Token) -> ast.Literal:
        return ast.Literal(_int_value(token), "int", str(token))

    def decimal_lit(self, token: Token) -> ast.Literal:
        text = str(token)
        return ast.Literal(float(text), "decimal", "0" + text if text.startswith(".") else text)

    def timespan_lit(self, token: Token) -> ast.Literal:
        return ast.Literal(str(token), "interval", str(token))

    def interval_lit(self, keyword: Token, value: ast.Expr, unit: str) -> ast.Interval:
        word = unit.upper()
        if word not in _INTERVAL_UNITS and word.endswith("S") and word[:-1] in _INTERVAL_UNITS:
            word = word[:-1]
        if word not in _INTERVAL_UNITS:
            raise _error_at(keyword, f"Unknown interval unit {unit}; expected one of {', '.join(_INTERVAL_UNITS)}")
        return ast.Interval(value, word)

    def datetime_lit(self, token: Token) -> ast.Literal:
        text = str(token)
        quote = min(i for i in (text.find("'"), text.find('"')) if i >= 0)
        kind = text[:quote].strip().lower()
        value = _unquote_string(text[quote:])
        return ast.Literal(value, kind, text)  # type: ignore[arg-type]

    def literal(self, value: ast.Literal) -> ast.Literal:
        return value

    def string(self, token: Token) -> ast.Literal:
        return ast.Literal(_unquote_string(str(token)), "string", str(token))

    def bool_lit(self, token: Token) -> ast.Literal:
        return ast.Literal(str(token).lower() == "true", "bool", str(token))

    def null_lit(self) -> ast.Literal:
        return ast.Literal(None, "null", "null")

    def field(self, parts: tuple[str, ...]) -> ast.Field:
        return ast.Field(parts)

    def qname(self, *names: str) -> tuple[str, ...]:
        return names

    def name(self, token: Token) -> str:
        return _unquote_name(token)
