"""The one parser of Flint's SQL extension: SQL text in, a statement (or ``None``) out.

:func:`parse` first decides whether the text *is* a Flint statement, from its leading keywords
(:data:`_FLINT_LEADS`), and returns ``None`` for anything else, which is plain Spark SQL and none of
this module's business. Text that starts like a Flint statement must then be one: a malformed one is
a :class:`FlintSyntaxError` that says where and what was expected.

This is stricter than the reference, which tries its Flint grammar on every statement and hands
whatever fails to Spark's parser; a malformed Flint statement there ends in a Spark error about the
wrong grammar, or (``DESC INDEX x``) as a different statement altogether.

The grammar (``grammar.lark``) is LALR(1) over the tokens of :mod:`.lexer`, driven token by token so
that a materialized view's query and a covering index's filter can be taken as opaque text.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from copy import copy
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from importlib import resources
from typing import Any, TypeVar

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError
from lark.lexer import PatternStr
from lark.parsers.lalr_interactive_parser import InteractiveParser
from lark.tree import Meta

from query_core.errors import QuerySyntaxError
from query_core.flint.ast import (
    OPTION_NAMES,
    AlterIndex,
    AnalyzeIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    DescribeIndex,
    DropIndex,
    FlintOptions,
    IndexKind,
    IndexRef,
    OptionName,
    QualifiedName,
    RecoverIndexJob,
    RefreshIndex,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    SkippingColumn,
    SkippingKind,
    Statement,
    VacuumIndex,
    option_problem,
)
from query_core.flint.lexer import RawToken, TokenKind, iter_tokens, string_value, tokenize


class FlintSyntaxError(QuerySyntaxError):
    """Text that starts like a Flint statement but is not a valid one."""


def parse(sql: str) -> Statement | None:
    """The Flint statement ``sql`` holds, or ``None`` when it is not a Flint statement.

    Raises :class:`FlintSyntaxError`, and nothing else, when ``sql`` starts like a Flint statement
    (see :data:`_FLINT_LEADS`) but is not a valid one.
    """
    if not is_flint_statement(sql):
        return None
    return _StatementParser(sql, tokenize(sql)).parse()


# -- what counts as a Flint statement -----------------------------------------------------------

#: In a lead, a keyword to match (case-insensitively, unquoted), or this: any name, quoted or not.
_NAME = None

#: The leading tokens that make a statement a Flint statement. ``DESC``/``DESCRIBE`` need more than
#: the others because Spark reads ``DESC index`` or ``DESC materialized view`` as describing a table
#: (``index``; ``materialized``, column ``view``): only text that Spark cannot read that way is taken.
#: Spark has none of the others for the tables a datasource serves (its own ``CREATE INDEX`` and
#: ``DROP INDEX`` are for v2 catalogs that support indexes), so they are Flint's alone.
_FLINT_LEADS: tuple[tuple[str | None, ...], ...] = (
    ("CREATE", "SKIPPING"),
    ("CREATE", "INDEX"),
    ("CREATE", "MATERIALIZED"),
    *(
        (verb, target)
        for verb in ("REFRESH", "ALTER", "DROP", "VACUUM", "ANALYZE")
        for target in ("SKIPPING", "INDEX", "MATERIALIZED")
    ),
    *(
        lead
        for verb in ("DESC", "DESCRIBE")
        for lead in (
            (verb, "SKIPPING", "INDEX", "ON"),
            (verb, "INDEX", _NAME, "ON"),
            (verb, "MATERIALIZED", "VIEW", _NAME),
        )
    ),
    ("SHOW", "FLINT"),
    ("SHOW", "INDEX"),
    ("SHOW", "INDEXES"),
    ("SHOW", "MATERIALIZED"),
    ("RECOVER", "INDEX", "JOB"),
)

_LONGEST_LEAD = max(len(lead) for lead in _FLINT_LEADS)


def is_flint_statement(sql: str) -> bool:
    """Whether ``sql`` starts like a Flint statement (and so must be one). Cheap: reads a few tokens."""
    tokens = list(itertools.islice(iter_tokens(sql), _LONGEST_LEAD))
    return any(
        len(tokens) >= len(lead) and all(_lead_matches(token, want) for token, want in zip(tokens, lead, strict=False))
        for lead in _FLINT_LEADS
    )


def _lead_matches(token: RawToken, want: str | None) -> bool:
    if want is _NAME:
        return token.kind in (TokenKind.WORD, TokenKind.BACKQUOTED)
    return token.kind is TokenKind.WORD and token.text.upper() == want


# -- the grammar --------------------------------------------------------------------------------

_OPAQUE_TERMINALS = ("QUERY_TEXT", "CONDITION_TEXT")
_EOF = "$END"


@dataclass(frozen=True)
class _Grammar:
    lark: Lark
    keywords: dict[str, str]  # upper-case word -> terminal
    punctuation: dict[str, str]  # text -> terminal
    literal: dict[str, str]  # terminal -> its text, for messages


@functools.cache
def _grammar() -> _Grammar:
    text = resources.files("query_core.flint").joinpath("grammar.lark").read_text(encoding="utf-8")
    # lexer="basic" only because lark wants one; tokens come from lexer.py (see _lark_token).
    lark = Lark(text, parser="lalr", lexer="basic", start=["start", "with_tail"], propagate_positions=True)
    keywords: dict[str, str] = {}
    punctuation: dict[str, str] = {}
    literal: dict[str, str] = {}
    for terminal in lark.terminals:
        if not isinstance(terminal.pattern, PatternStr):
            continue
        value = terminal.pattern.value
        literal[terminal.name] = value
        if re.fullmatch(r"\w+", value):
            keywords[value.upper()] = terminal.name
        else:
            punctuation[value] = terminal.name
    return _Grammar(lark, keywords, punctuation, literal)


# -- driving the parser -------------------------------------------------------------------------


class _StatementParser:
    """Feeds one statement's tokens to the LALR parser, taking opaque text where the grammar wants it."""

    def __init__(self, sql: str, raw: Sequence[RawToken]) -> None:
        self.sql = sql
        self.raw = raw
        self.grammar = _grammar()
        self.tokens = [self._lark_token(token) for token in raw]

    def parse(self) -> Statement:
        for raw in self.raw:
            if raw.kind is TokenKind.UNCLOSED_COMMENT:
                raise FlintSyntaxError("Unclosed bracketed comment", raw.line, raw.column)
        parser = self.grammar.lark.parse_interactive(start="start")
        i = 0
        while i < len(self.tokens):
            choices = parser.choices()
            opaque = next((name for name in _OPAQUE_TERMINALS if name in choices), None)
            if opaque is not None:
                end = self._opaque_end(i)
                token = self._span(opaque, i, end)
                i = end
            else:
                token = self.tokens[i]
                i += 1
            self._feed(parser, token)
        tree = self._feed(parser, self._eof())
        try:
            statement: Statement = _AstBuilder(self.sql).transform(tree)
        except VisitError as exc:
            if isinstance(exc.orig_exc, FlintSyntaxError):
                raise exc.orig_exc from None
            raise
        return statement

    def _feed(self, parser: InteractiveParser, token: Token) -> Any:
        before = parser.copy(deepcopy_values=False)
        try:
            return parser.feed_token(token)
        except UnexpectedInput:
            raise self._unexpected(before, token) from None

    def _opaque_end(self, start: int) -> int:
        """End of the shortest non-empty run of tokens from ``start`` that the rest can follow.

        The rest must be a ``with_tail``: an optional ``WITH (...)`` and semicolons. Only a ``WITH``
        or a ``;`` can start one, so only those are tried; the end of input always qualifies.
        """
        grammar = self.grammar
        for end in range(start + 1, len(self.tokens)):
            if self.tokens[end].type in (grammar.keywords["WITH"], grammar.punctuation[";"]) and self._is_tail(end):
                return end
        return len(self.tokens)

    def _is_tail(self, start: int) -> bool:
        parser = self.grammar.lark.parse_interactive(start="with_tail")
        try:
            for token in self.tokens[start:]:
                parser.feed_token(token)
            parser.feed_token(self._eof())
        except UnexpectedInput:
            return False
        return True

    def _lark_token(self, raw: RawToken) -> Token:
        grammar = self.grammar
        if raw.kind is TokenKind.WORD:
            kind = grammar.keywords.get(raw.text.upper(), "IDENTIFIER")
        elif raw.kind is TokenKind.PUNCT:
            kind = grammar.punctuation.get(raw.text, "UNRECOGNIZED")
        else:
            kind = raw.kind.value
        return Token(kind, raw.text, raw.start, raw.line, raw.column, raw.end_line, raw.end_column, raw.end)

    def _span(self, kind: str, start: int, end: int) -> Token:
        first, last = self.raw[start], self.raw[end - 1]
        text = self.sql[first.start : last.end]
        return Token(kind, text, first.start, first.line, first.column, last.end_line, last.end_column, last.end)

    def _eof(self) -> Token:
        if not self.raw:
            return Token(_EOF, "", 0, 1, 1, 1, 1, 0)
        last = self.raw[-1]
        return Token(_EOF, "", last.end, last.end_line, last.end_column, last.end_line, last.end_column, last.end)

    # -- messages ---------------------------------------------------------------------------------

    def _unexpected(self, parser: InteractiveParser, token: Token) -> FlintSyntaxError:
        if token.type == _EOF:
            near = "end of input"
        else:
            text = str(token.value)
            near = repr(text if len(text) <= 40 else text[:37] + "...")
        expected = _describe(self._expected(parser), self.grammar)
        return FlintSyntaxError(f"Syntax error at or near {near}: expected {expected}", token.line, token.column)

    def _expected(self, parser: InteractiveParser) -> set[str]:
        """The terminals that could come next, less keywords that would only be read as a name.

        Every keyword is also a name, so where a name may come, all of them are acceptable; listing
        them all would bury the one keyword that matters (``IF`` after ``CREATE INDEX``). A keyword
        is kept when the parser, having read it, expects something else than after a plain name.
        """
        accepted = set(parser.accepts())
        if "IDENTIFIER" not in accepted:
            return accepted
        after_name = _choices_after(parser, "IDENTIFIER")
        keywords = set(self.grammar.keywords.values())
        return {t for t in accepted if t not in keywords or _choices_after(parser, t) != after_name}


def _choices_after(parser: InteractiveParser, terminal: str) -> frozenset[str]:
    probe = parser.copy(deepcopy_values=False)
    # As InteractiveParser.accepts() does: no tree-building callbacks while probing.
    conf = copy(probe.parser_state.parse_conf)
    conf.callbacks = {}
    probe.parser_state.parse_conf = conf
    probe.feed_token(Token(terminal, ""))
    return frozenset(probe.choices())


_DESCRIPTIONS = {
    "IDENTIFIER": "a name",
    "BACKQUOTED": "a name",
    "STRING": "a string",
    "INTEGER": "a number",
    "DECIMAL": "a number",
    "QUERY_TEXT": "a query",
    "CONDITION_TEXT": "a condition",
    _EOF: "end of input",
}


def _describe(terminals: Iterable[str], grammar: _Grammar) -> str:
    words: set[str] = set()
    for terminal in terminals:
        if terminal in _DESCRIPTIONS:
            words.add(_DESCRIPTIONS[terminal])
        elif terminal in grammar.keywords.values():
            words.add(grammar.literal[terminal].upper())
        else:
            words.add(repr(grammar.literal.get(terminal, terminal)))
    ordered = sorted(words, key=lambda w: (w.startswith(("a ", "end")), w))
    if not ordered:
        return "nothing more"
    if len(ordered) == 1:
        return ordered[0]
    return "one of " + ", ".join(ordered)


# -- from the parse tree to the statement -------------------------------------------------------


@dataclass(frozen=True)
class _Located:
    """A value with where it was written."""

    value: Any
    line: int
    column: int


class _IfNotExists:
    pass


class _Extended:
    pass


@dataclass(frozen=True)
class _Column:
    name: str


@dataclass(frozen=True)
class _IndexName:
    name: str


@dataclass(frozen=True)
class _Where:
    condition: str
    clause: str  # WHERE and the condition, as written
    line: int
    column: int


@dataclass(frozen=True)
class _Options:
    options: FlintOptions
    line: int
    column: int


@dataclass(frozen=True)
class _Namespace:
    catalog: str
    database: str | None


_T = TypeVar("_T")


def _one(children: Sequence[Any], kind: type[_T]) -> _T:
    (found,) = [child for child in children if isinstance(child, kind)]
    return found


def _maybe(children: Sequence[Any], kind: type[_T]) -> _T | None:
    found = [child for child in children if isinstance(child, kind)]
    return found[0] if found else None


def _all(children: Sequence[Any], kind: type[_T]) -> list[_T]:
    return [child for child in children if isinstance(child, kind)]


_MAX_NAME_PARTS = {"table": 3, "materialized view": 3, "catalog and database": 2}


@v_args(meta=True)
class _AstBuilder(Transformer[Token, Any]):
    """Builds the statement, bottom-up, and refuses what is well-formed but not allowed."""

    def __init__(self, sql: str) -> None:
        super().__init__()
        self.sql = sql

    # -- statements -------------------------------------------------------------------------------

    def start(self, meta: Meta, children: list[Any]) -> Statement:
        return children[0]  # type: ignore[no-any-return]

    def create_skipping_index(self, meta: Meta, children: list[Any]) -> CreateSkippingIndex:
        where = _maybe(children, _Where)
        if where is not None:
            # The reference's message, which quotes the clause as written.
            raise FlintSyntaxError(f"Filtering condition is not supported: {where.clause}", where.line, where.column)
        return CreateSkippingIndex(
            table=_one(children, QualifiedName),
            columns=tuple(_all(children, SkippingColumn)),
            if_not_exists=_maybe(children, _IfNotExists) is not None,
            options=self._options(children),
        )

    def create_covering_index(self, meta: Meta, children: list[Any]) -> CreateCoveringIndex:
        where = _maybe(children, _Where)
        return CreateCoveringIndex(
            name=_one(children, _IndexName).name,
            table=_one(children, QualifiedName),
            columns=tuple(column.name for column in _all(children, _Column)),
            where=where.condition if where is not None else None,
            if_not_exists=_maybe(children, _IfNotExists) is not None,
            options=self._options(children),
        )

    def create_materialized_view(self, meta: Meta, children: list[Any]) -> CreateMaterializedView:
        (query,) = [child for child in children if isinstance(child, Token) and child.type == "QUERY_TEXT"]
        return CreateMaterializedView(
            name=_one(children, QualifiedName),
            query=str(query.value),
            if_not_exists=_maybe(children, _IfNotExists) is not None,
            options=self._options(children),
        )

    def refresh_skipping_index(self, meta: Meta, children: list[Any]) -> RefreshIndex:
        return RefreshIndex(self._ref(IndexKind.SKIPPING, children))

    def refresh_covering_index(self, meta: Meta, children: list[Any]) -> RefreshIndex:
        return RefreshIndex(self._ref(IndexKind.COVERING, children))

    def refresh_materialized_view(self, meta: Meta, children: list[Any]) -> RefreshIndex:
        return RefreshIndex(self._ref(IndexKind.MV, children))

    def describe_skipping_index(self, meta: Meta, children: list[Any]) -> DescribeIndex:
        return DescribeIndex(self._ref(IndexKind.SKIPPING, children))

    def describe_covering_index(self, meta: Meta, children: list[Any]) -> DescribeIndex:
        return DescribeIndex(self._ref(IndexKind.COVERING, children))

    def describe_materialized_view(self, meta: Meta, children: list[Any]) -> DescribeIndex:
        return DescribeIndex(self._ref(IndexKind.MV, children))

    def drop_skipping_index(self, meta: Meta, children: list[Any]) -> DropIndex:
        return DropIndex(self._ref(IndexKind.SKIPPING, children))

    def drop_covering_index(self, meta: Meta, children: list[Any]) -> DropIndex:
        return DropIndex(self._ref(IndexKind.COVERING, children))

    def drop_materialized_view(self, meta: Meta, children: list[Any]) -> DropIndex:
        return DropIndex(self._ref(IndexKind.MV, children))

    def vacuum_skipping_index(self, meta: Meta, children: list[Any]) -> VacuumIndex:
        return VacuumIndex(self._ref(IndexKind.SKIPPING, children))

    def vacuum_covering_index(self, meta: Meta, children: list[Any]) -> VacuumIndex:
        return VacuumIndex(self._ref(IndexKind.COVERING, children))

    def vacuum_materialized_view(self, meta: Meta, children: list[Any]) -> VacuumIndex:
        return VacuumIndex(self._ref(IndexKind.MV, children))

    def analyze_skipping_index(self, meta: Meta, children: list[Any]) -> AnalyzeIndex:
        return AnalyzeIndex(self._ref(IndexKind.SKIPPING, children))

    def alter_skipping_index(self, meta: Meta, children: list[Any]) -> AlterIndex:
        return self._alter(IndexKind.SKIPPING, children)

    def alter_covering_index(self, meta: Meta, children: list[Any]) -> AlterIndex:
        return self._alter(IndexKind.COVERING, children)

    def alter_materialized_view(self, meta: Meta, children: list[Any]) -> AlterIndex:
        return self._alter(IndexKind.MV, children)

    def show_flint_indexes(self, meta: Meta, children: list[Any]) -> ShowFlintIndexes:
        namespace = _one(children, _Namespace)
        extended = _maybe(children, _Extended) is not None
        return ShowFlintIndexes(namespace.catalog, namespace.database, extended)

    def show_covering_indexes(self, meta: Meta, children: list[Any]) -> ShowCoveringIndexes:
        return ShowCoveringIndexes(_one(children, QualifiedName))

    def show_materialized_views(self, meta: Meta, children: list[Any]) -> ShowMaterializedViews:
        namespace = _one(children, _Namespace)
        return ShowMaterializedViews(namespace.catalog, namespace.database)

    def recover_index_job(self, meta: Meta, children: list[Any]) -> RecoverIndexJob:
        return RecoverIndexJob(_one(children, _Located).value)

    def _ref(self, kind: IndexKind, children: list[Any]) -> IndexRef:
        name = _maybe(children, _IndexName)
        return IndexRef(kind, _one(children, QualifiedName), name.name if name is not None else None)

    def _alter(self, kind: IndexKind, children: list[Any]) -> AlterIndex:
        options = _one(children, _Options)
        if OptionName.AUTO_REFRESH.value not in options.options:
            raise FlintSyntaxError(
                "ALTER must change auto_refresh: add auto_refresh = true or auto_refresh = false to its options",
                options.line,
                options.column,
            )
        return AlterIndex(self._ref(kind, children), options.options)

    @staticmethod
    def _options(children: list[Any]) -> FlintOptions:
        options = _maybe(children, _Options)
        return options.options if options is not None else FlintOptions()

    # -- clauses ----------------------------------------------------------------------------------

    def if_not_exists(self, meta: Meta, children: list[Any]) -> _IfNotExists:
        return _IfNotExists()

    def extended(self, meta: Meta, children: list[Any]) -> _Extended:
        return _Extended()

    def where_clause(self, meta: Meta, children: list[Any]) -> _Where:
        (condition,) = [child for child in children if isinstance(child, Token) and child.type == "CONDITION_TEXT"]
        clause = self.sql[meta.start_pos : meta.end_pos]
        return _Where(str(condition.value), clause, meta.line, meta.column)

    def with_options(self, meta: Meta, children: list[Any]) -> _Options:
        options: dict[str, str] = {}
        for key, value in (child.value for child in children if isinstance(child, _Located)):
            if problem := option_problem(key.value, value.value):
                located = key if key.value not in OPTION_NAMES else value
                raise FlintSyntaxError(problem, located.line, located.column)
            options[key.value] = value.value  # a repeated name: the last one wins, as in the reference
        return _Options(FlintOptions(options), meta.line, meta.column)

    def property(self, meta: Meta, children: list[Any]) -> _Located:
        key, value = [child for child in children if isinstance(child, _Located)]
        return _Located((key, value), meta.line, meta.column)

    def property_key(self, meta: Meta, children: list[Any]) -> _Located:
        (child,) = children
        if isinstance(child, Token):  # a string literal
            return _Located(string_value(str(child)), meta.line, meta.column)
        return _Located(".".join(child.value), meta.line, meta.column)

    def property_value(self, meta: Meta, children: list[Any]) -> _Located:
        (token,) = children
        text = str(token)
        if token.type == "STRING":
            value = string_value(text)
        elif token.type in ("TRUE", "FALSE"):
            value = text.lower()
        else:
            value = text
        return _Located(value, meta.line, meta.column)

    def skipping_column(self, meta: Meta, children: list[Any]) -> SkippingColumn:
        column = _one(children, _Column)
        (kind,) = [child for child in children if isinstance(child, SkippingKind)]
        params = _maybe(children, list) or []
        return SkippingColumn(column.name, kind, _skipping_params(kind, params, meta))

    def skip_kind(self, meta: Meta, children: list[Any]) -> SkippingKind:
        return SkippingKind(str(children[0]).upper())

    def skip_params(self, meta: Meta, children: list[Any]) -> list[_Located]:
        return [child for child in children if isinstance(child, _Located)]

    # -- names ------------------------------------------------------------------------------------

    def table_name(self, meta: Meta, children: list[Any]) -> QualifiedName:
        return self._name(children[0], "table")

    def mv_name(self, meta: Meta, children: list[Any]) -> QualifiedName:
        return self._name(children[0], "materialized view")

    def namespace(self, meta: Meta, children: list[Any]) -> _Namespace:
        parts = self._parts(children[0], "catalog and database")
        return _Namespace(parts[0], parts[1] if len(parts) > 1 else None)

    def column_name(self, meta: Meta, children: list[Any]) -> _Column:
        return _Column(".".join(children[0].value))

    def index_name(self, meta: Meta, children: list[Any]) -> _IndexName:
        return _IndexName(children[0].value)

    def qualified_name(self, meta: Meta, children: list[Any]) -> _Located:
        return _Located(tuple(child.value for child in children), meta.line, meta.column)

    def identifier(self, meta: Meta, children: list[Any]) -> _Located:
        (token,) = children
        text = str(token)
        value = text[1:-1].replace("``", "`") if token.type == "BACKQUOTED" else text
        if not value:
            raise FlintSyntaxError("A name cannot be empty", meta.line, meta.column)
        return _Located(value, meta.line, meta.column)

    def keyword(self, meta: Meta, children: list[Any]) -> Token:
        return children[0]  # type: ignore[no-any-return]

    def _name(self, located: _Located, what: str) -> QualifiedName:
        return QualifiedName(self._parts(located, what))

    @staticmethod
    def _parts(located: _Located, what: str) -> tuple[str, ...]:
        parts: tuple[str, ...] = located.value
        limit = _MAX_NAME_PARTS[what]
        if len(parts) > limit:
            shape = "catalog[.database]" if what == "catalog and database" else f"[catalog.][database.]{what}"
            raise FlintSyntaxError(
                f"Too many name parts in {'.'.join(parts)}: expected {shape}", located.line, located.column
            )
        return parts


# -- skipping parameters ------------------------------------------------------------------------

_DEFAULT_VALUE_SET_MAX_SIZE = 100
_DEFAULT_NUM_CANDIDATES = 10
_DEFAULT_NUM_ITEMS = 10000
_DEFAULT_FPP = 0.03


def _skipping_params(kind: SkippingKind, params: list[_Located], meta: Meta) -> dict[str, str]:
    """The full parameter map the reference stores for a skipping column, from what was written.

    The reference pairs the values it is given with parameter names and ignores extra ones; here a
    value that would not be usable, or one too many, is refused where it stands.
    """
    if kind in (SkippingKind.PARTITION, SkippingKind.MIN_MAX):
        if params:
            raise FlintSyntaxError(f"{kind.value} takes no parameters", params[0].line, params[0].column)
        return {}
    if kind is SkippingKind.VALUE_SET:
        if len(params) > 1:
            raise FlintSyntaxError("VALUE_SET takes one parameter, the limit", params[1].line, params[1].column)
        limit = _integer(params[0], "VALUE_SET limit", minimum=0) if params else _DEFAULT_VALUE_SET_MAX_SIZE
        return {"max_size": str(limit)}
    shape = "BLOOM_FILTER takes (num_candidates, fpp) or (false, num_items, fpp), each optional from the right"
    if params and params[0].value.lower() in ("true", "false"):
        if params[0].value.lower() == "true":
            raise FlintSyntaxError(shape, params[0].line, params[0].column)
        classic = params[1:]
        if len(classic) > 2:
            raise FlintSyntaxError(shape, classic[2].line, classic[2].column)
        items = _integer(classic[0], "BLOOM_FILTER num_items", minimum=1) if classic else _DEFAULT_NUM_ITEMS
        fpp = _fpp(classic[1]) if len(classic) > 1 else _DEFAULT_FPP
        return {"adaptive": "false", "num_items": str(items), "fpp": _java_double(fpp)}
    if len(params) > 2:
        raise FlintSyntaxError(shape, params[2].line, params[2].column)
    candidates = _integer(params[0], "BLOOM_FILTER num_candidates", minimum=1) if params else _DEFAULT_NUM_CANDIDATES
    fpp = _fpp(params[1]) if len(params) > 1 else _DEFAULT_FPP
    return {"adaptive": "true", "num_candidates": str(candidates), "fpp": _java_double(fpp)}


def _integer(param: _Located, what: str, *, minimum: int) -> int:
    text: str = param.value
    if re.fullmatch(r"[0-9]{1,10}", text) and int(text) >= minimum and int(text) < 2**31:
        return int(text)
    kind = "a positive" if minimum > 0 else "a non-negative"
    raise FlintSyntaxError(f"{what} must be {kind} integer, not {text!r}", param.line, param.column)


def _fpp(param: _Located) -> float:
    text: str = param.value
    try:
        value = float(Decimal(text))
    except (InvalidOperation, ValueError):
        value = -1.0
    if 0 < value < 1:
        return value
    raise FlintSyntaxError(f"BLOOM_FILTER fpp must be a number between 0 and 1, not {text!r}", param.line, param.column)


def _java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (the reference stores parameters so)."""
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    mantissa = f"{digits[0]}." + ("".join(map(str, digits[1:])) or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + exponent}"
