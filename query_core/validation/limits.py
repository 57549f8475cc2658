"""How large, how costly to read and how deeply nested a statement may be, checked on its tokens
before any parser reads it (the plugin's, PPL's, Spark's): a statement past a limit is refused
with a clear message (a 400 at POST, a failed statement in the job), never a stack overflow, a
500, or a parser pinned for minutes.

The **cost** of reading a statement is counted in tokens while it is scanned (and the scan stops
once it passes the budget, so refusing a 1 MB statement costs a few milliseconds): each token and
each comment counts one; each separator inside a string one more, since a string may hold what
Spark reads when it analyzes the statement (a statement for ``EXECUTE IMMEDIATE``, a schema, JSON);
and each comment opened inside another as much as the depth it opens at, since that is what
Spark's lexer spends on it (a comment nested 2,000 deep held a job's core for minutes).

The **depth** is an estimate of the deepest tree a parser builds, read without parsing: each open
parenthesis, bracket, ``CASE`` or ``BEGIN`` is a level, and so is each operator of a chain
(``1 + 1 + ...`` nests as deeply as ``(((1)))``, unary ``- - -`` and ``NOT NOT`` too, and the
``.`` of ``a.b.c``), as is each ``UNION``/``JOIN``/``|>`` of a query at one level. In SQL a chain
ends at a clause keyword or a comma; ``AND``/``OR`` do not count (Spark balances them). In PPL
every command of the pipeline counts, and so do ``and``/``or``. Comments and strings count alike:
a comment holding comments nested ``n`` deep is ``n`` levels where it stands, and a string whose
text nests brackets (``( [ { <``) ``n`` deep is ``n`` levels where it stands. See docs/validation.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from query_core.errors import InvalidRequestError
from query_core.validation.tokens import Tok, TokenKind, scan_counted

#: Defaults of the settings (``ASYNC_QUERY_MAX_QUERY_CHARS``, ``ASYNC_QUERY_MAX_STATEMENT_DEPTH``).
DEFAULT_MAX_CHARS = 1_000_000
DEFAULT_MAX_DEPTH = 128
#: PPL is parsed in Python (about 10 ms of CPU a kilobyte): its own, smaller bound
#: (``ASYNC_QUERY_MAX_PPL_CHARS``).
DEFAULT_MAX_PPL_CHARS = 100_000
#: What reading a statement may cost, in tokens (``ASYNC_QUERY_MAX_STATEMENT_TOKENS``): Spark
#: parses and analyzes this many within a few seconds, and the checks at POST within a few tens of
#: milliseconds (``python -m bench.validation``).
DEFAULT_MAX_TOKENS = 25_000
#: A PPL token costs its parser (Python's) about five times what a SQL token costs: PPL gets a
#: fifth of the budget.
PPL_TOKEN_WEIGHT = 5


class StatementLimitError(InvalidRequestError):
    """A statement larger or more deeply nested than its limits allow."""

    error_type = "IllegalArgumentException"


@dataclass(frozen=True)
class StatementLimits:
    max_chars: int = DEFAULT_MAX_CHARS
    max_depth: int = DEFAULT_MAX_DEPTH
    max_ppl_chars: int = DEFAULT_MAX_PPL_CHARS
    max_tokens: int = DEFAULT_MAX_TOKENS


_OPEN = frozenset({"(", "["})
_CLOSE = frozenset({")", "]"})
#: Operators that nest their operands one level deeper per use.
_OPERATORS = frozenset(
    {
        "+",
        "-",
        "*",
        "/",
        "%",
        "||",
        "&",
        "|",
        "^",
        "~",
        "=",
        "==",
        "<=>",
        "!=",
        "<>",
        "<",
        ">",
        "<=",
        ">=",
        "::",
        "->",
        "!",
        ".",
    }
)
_WORD_OPERATORS = frozenset({"NOT", "DIV", "IS", "LIKE", "ILIKE", "RLIKE", "REGEXP", "BETWEEN", "IN"})
#: Words that join whole queries or relations at one level: a chain of them nests too.
_SET_OPERATORS = frozenset({"UNION", "INTERSECT", "EXCEPT", "MINUS", "JOIN"})
#: Words that start a clause (and so end an operator chain) in SQL.
_SQL_CLAUSES = frozenset(
    {
        "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "SORT", "CLUSTER", "DISTRIBUTE", "LIMIT",
        "OFFSET", "ON", "USING", "WHEN", "THEN", "ELSE", "AND", "OR", "AS", "WINDOW", "QUALIFY", "SET", "VALUES",
        "INTO", "UNION", "INTERSECT", "EXCEPT", "MINUS", "JOIN", "WITH", "PARTITION", "OVER", "ROWS", "RANGE",
    }
)  # fmt: skip
_PPL_COUNTED = frozenset({"AND", "OR", "XOR", "NOT"})


@dataclass
class _Level:
    chain: int = 0
    joins: int = 0
    closes_on_end: bool = False


def statement_depth(tokens: list[Tok], lang: str = "sql", nested_comments: list[tuple[int, int]] | None = None) -> int:
    """The estimated depth of the tree a parser builds for ``tokens`` (see the module's text):
    the most, at any token, of the open levels and the operators chained in each, with the
    levels of a string's text and of ``nested_comments`` (where each starts, how deeply it nests)."""
    ppl = lang.lower() == "ppl"
    stack = [_Level()]
    depth = deepest = 1
    comments = iter(nested_comments or ())
    comment = next(comments, None)
    for token in tokens:
        while comment is not None and comment[0] < token.start:
            deepest = max(deepest, depth + comment[1])
            comment = next(comments, None)
        text = token.upper
        top = stack[-1]
        if token.kind == TokenKind.PUNCT:
            if text in _OPEN:
                if text == "[":  # a subscript nests what it subscripts
                    top.chain += 1
                    depth += 1
                stack.append(_Level())
                depth += 1
            elif text in _CLOSE:
                depth = _pop(stack, depth)
                continue
            elif text == ",":
                depth -= top.chain
                top.chain = 0
                continue
            elif text == ";":
                depth -= top.chain + top.joins
                top.chain = top.joins = 0
                continue
            elif text == "|" and ppl:  # the next command of the pipeline
                depth += 1 - top.chain
                top.joins += 1
                top.chain = 0
            elif text in _OPERATORS or text == "|>":
                if text == "|>":
                    top.joins += 1
                else:
                    top.chain += 1
                depth += 1
        elif token.kind == TokenKind.WORD:
            if text in ("CASE", "BEGIN"):
                stack.append(_Level(closes_on_end=True))
                depth += 1
            elif text == "END":
                if top.closes_on_end:
                    depth = _pop(stack, depth)
                continue
            elif text in _SET_OPERATORS:
                top.joins += 1
                depth += 1
            if (ppl and text in _PPL_COUNTED) or text in _WORD_OPERATORS:
                top.chain += 1
                depth += 1
            elif not ppl and text in _SQL_CLAUSES:
                depth -= top.chain
                top.chain = 0
        elif token.kind == TokenKind.STRING:
            deepest = max(deepest, depth + string_depth(token.text))
        deepest = max(deepest, depth)
    while comment is not None:  # after the last token
        deepest = max(deepest, depth + comment[1])
        comment = next(comments, None)
    return deepest


_BRACKETS = re.compile(r"[(\[{<)\]}>]")
_STRING_OPENS = frozenset("([{<")


def string_depth(text: str) -> int:
    """How deeply brackets (``( [ { <``) nest in a string's text: a statement, a schema or JSON
    it holds is read that deeply when the statement is analyzed. A close with nothing open is
    skipped; every kind of bracket closes every other (only the depth is wanted)."""
    found = _BRACKETS.findall(text)
    if not found:
        return 0
    depth = deepest = 0
    for bracket in found:
        if bracket in _STRING_OPENS:
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def _pop(stack: list[_Level], depth: int) -> int:
    if len(stack) == 1:
        return depth  # an unbalanced close: the parser refuses it
    closed = stack.pop()
    return depth - closed.chain - closed.joins - 1


def check_limits(text: str, lang: str, limits: StatementLimits) -> list[Tok]:
    """Refuse (:class:`StatementLimitError`) a statement past ``limits``; its tokens otherwise.

    The size first, then the cost while the statement is scanned (the scan stops at the budget),
    then the depth: nothing here reads the text more than once, or recurses."""
    if len(text) > limits.max_chars:
        raise StatementLimitError(f"The statement is longer than {limits.max_chars} characters ({len(text)}).")
    if lang.lower() == "ppl" and len(text) > limits.max_ppl_chars:
        raise StatementLimitError(f"The PPL statement is longer than {limits.max_ppl_chars} characters ({len(text)}).")
    budget = token_budget(lang, limits)
    scanned = scan_counted(text, budget)
    if scanned.over_budget:
        raise StatementLimitError(
            f"The statement costs too much to read: more than the {budget} tokens allowed"
            f"{' for PPL' if lang.lower() == 'ppl' else ''} (each separator inside a string, and each "
            "comment opened inside another as deep as it is, counts as tokens too)."
        )
    depth = statement_depth(scanned.tokens, lang, scanned.nested_comments)
    if depth > limits.max_depth:
        raise StatementLimitError(
            f"The statement is nested too deeply: about {depth} levels, more than the {limits.max_depth} allowed."
        )
    return scanned.tokens


def token_budget(lang: str, limits: StatementLimits) -> int:
    """What reading a statement in ``lang`` may cost, in tokens."""
    return limits.max_tokens // PPL_TOKEN_WEIGHT if lang.lower() == "ppl" else limits.max_tokens
