"""A fast scan of a statement into tokens, with Spark's lexical rules, for the checks at POST.

The boundaries are Spark's (``SqlBaseLexer``): whitespace and ``--`` comments (a backslash before
the newline continues one) and nested ``/* ... */`` comments are skipped, ``/*+`` opens a hint
whose content is scanned; strings in single or double quotes with backslash escapes and doubled
quotes (``'it''s'``), raw ``r'...'`` strings, back-quoted names with doubled back-quotes, numbers,
words, and operators. Text Spark's lexer would refuse (an unterminated string, name or comment)
is an ``ERROR`` token: the checks leave such a statement to the job, which refuses it.

One regular expression cuts the text into pieces, so a kilobyte takes tens of microseconds;
nothing here recurses, and the scan is linear in the text's length whatever it holds (nested
comments included). :func:`scan_counted` also counts what reading the statement costs, and stops
once that passes a budget (:mod:`query_core.validation.limits`).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import NamedTuple

from query_core.flint.lexer import TokenKind, bracketed_comment, string_value

__all__ = ["ERROR", "Scanned", "Tok", "TokenKind", "is_keyword", "literal_value", "scan", "scan_counted"]

#: The kind of a token Spark's lexer would refuse.
ERROR = "ERROR"


class Tok(NamedTuple):
    """One token: ``text`` is ``sql[start:end]``; ``kind`` a :class:`TokenKind` or :data:`ERROR`."""

    kind: str
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        """The text in upper case when it is a word, else as written."""
        return self.text.upper() if self.kind == TokenKind.WORD else self.text


#: Every token (and every run of whitespace and every comment) is one match, so ``finditer`` cuts
#: the text with no loop of ours per character; a nested comment, which no regular expression matches, is found
#: by :func:`query_core.flint.lexer.bracketed_comment` instead.
_PIECES = re.compile(
    r"""
    \s+
  | --(?:\\\n|[^\r\n])*
  | /\*\+
  | /\*(?:[^*/]|\*(?!/)|/(?!\*))*\*/
  | /\*
  | [rR]'[^']*' | [rR]"[^"]*" | '(?:[^'\\]|\\.|'')*' | "(?:[^"\\]|\\.|"")*"
  | `(?:[^`]|``)*`
  | (?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?(?![A-Za-z0-9_])
  | [A-Za-z0-9_]+
  | <=>|<>|!=|==|<=|>=|\|\||\|>|->|=>|::|\*/
  | .
    """,
    re.VERBOSE | re.DOTALL,
)
_OPENERS = frozenset("'\"`")
_SPACE = frozenset(" \t\r\n\f\v")
_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass
class Scanned:
    """A statement's tokens, with what :func:`scan_counted` counted on the way."""

    tokens: list[Tok] = field(default_factory=list)
    #: What the statement costs to read, in tokens (docs/validation.md, "Limits"): each token
    #: and each comment counts one, each separator inside a string one more, and each comment
    #: opened inside another as many as the depth it opens at.
    cost: int = 0
    #: Where each comment that holds others starts, and how deeply comments nest in it.
    nested_comments: list[tuple[int, int]] = field(default_factory=list)
    #: The scan stopped once ``cost`` passed its budget: ``tokens`` are only the first ones.
    over_budget: bool = False


def scan(sql: str) -> list[Tok]:
    """The tokens of ``sql``, comments and whitespace left out. Never raises."""
    return scan_counted(sql).tokens


def scan_counted(sql: str, budget: int | None = None) -> Scanned:
    """:func:`scan`, counting the cost of reading ``sql`` and where comments nest on the way; it
    stops once the cost passes ``budget`` (then :attr:`Scanned.over_budget`). Linear in the
    text's length, whatever it holds."""
    scanned = Scanned()
    offset = 0
    limit = len(sql) + 1 if budget is None else budget
    while offset < len(sql):
        stopped = _scan_from(sql, offset, scanned, limit)
        if stopped is None or scanned.over_budget:
            break
        # A nested or unclosed comment, scanned here (no further than the budget).
        comment = bracketed_comment(sql, stopped, limit - scanned.cost - len(scanned.tokens))
        scanned.cost += 1 + comment.nested_weight
        if comment.depth > 1:
            scanned.nested_comments.append((stopped, comment.depth))
        if scanned.cost + len(scanned.tokens) > limit:
            scanned.over_budget = True
            break
        if comment.end < 0:
            scanned.tokens.append(Tok(ERROR, sql[stopped:], stopped, len(sql)))
            break
        offset = comment.end
    scanned.cost += len(scanned.tokens)
    return scanned


def _scan_from(sql: str, offset: int, scanned: Scanned, limit: int) -> int | None:
    """Append the tokens of ``sql[offset:]`` to ``scanned``; where a comment no piece matched
    starts, stop and return its position (None: the end was reached, or the budget passed).

    The pieces are matched lazily (``finditer``): a scan that stops at a nested comment, and
    starts again past it, reads no piece twice."""
    tokens = scanned.tokens
    append, new = tokens.append, tuple.__new__  # ``Tok(...)`` would cost three times as much
    word, integer, decimal, punct = TokenKind.WORD, TokenKind.INTEGER, TokenKind.DECIMAL, TokenKind.PUNCT
    string, backquoted = TokenKind.STRING, TokenKind.BACKQUOTED
    extra = scanned.cost  # comments and separators in strings; tokens are counted by their list
    for match in _PIECES.finditer(sql, offset):
        piece = match.group()
        first = piece[0]
        if first in _SPACE:
            continue
        start, pos = match.span()
        if first in _WORD_START:
            if first in "rR" and len(piece) > 1 and piece[1] in "'\"":
                append(new(Tok, (string, piece, start, pos)))
                extra += _separators(piece)
            elif "." in piece:
                append(new(Tok, (decimal, piece, start, pos)))
            else:
                append(new(Tok, (integer if piece.isdigit() else word, piece, start, pos)))
        elif first in _OPENERS:
            if len(piece) == 1:  # an unterminated string or name: Spark refuses the text
                append(Tok(ERROR, sql[start:], start, len(sql)))
                break
            if first == "`":
                append(new(Tok, (backquoted, piece, start, pos)))
            else:
                append(new(Tok, (string, piece, start, pos)))
                extra += _separators(piece)
        elif first == "-" and piece.startswith("--"):
            extra += 1
        elif first == "/" and piece.startswith("/*") and piece != "/*+":
            if len(piece) >= 4 and piece.endswith("*/"):
                extra += 1
            else:
                scanned.cost = extra
                return start
        elif first == "." and len(piece) > 1:
            append(new(Tok, (decimal, piece, start, pos)))
        elif first.isspace():
            continue
        else:
            append(new(Tok, (punct, piece, start, pos)))
        if len(tokens) + extra > limit:
            scanned.over_budget = True
            break
    scanned.cost = extra
    return None


#: Characters that separate the parts of what a string may hold and Spark may read when it
#: analyzes the statement: a statement (``EXECUTE IMMEDIATE``), a schema, JSON, a regular expression.
STRING_SEPARATORS = ",;:()[]{}<>|"
_NOT_SEPARATORS = {ord(c): None for c in STRING_SEPARATORS}


def _separators(piece: str) -> int:
    """How many separators a string's text holds."""
    if len(piece) < 4:
        return 0 if len(piece) < 3 or piece[1] not in STRING_SEPARATORS else 1
    return len(piece) - len(piece.translate(_NOT_SEPARATORS))


def literal_value(token: Tok) -> str | None:
    """The value of a string token as Spark reads it; None when this reading could differ from
    Spark's (a backslash escape next to a doubled quote)."""
    text = token.text
    if text[0] in "rR":
        return text[2:-1]
    quote, body = text[0], text[1:-1]
    doubled = quote * 2
    if doubled in body:
        if "\\" in body:
            return None
        return body.replace(doubled, quote)
    return string_value(text)


@functools.cache
def _keywords() -> frozenset[str]:
    text = resources.files("query_core.validation").joinpath("spark_keywords.json").read_text(encoding="utf-8")
    return frozenset(json.loads(text)["keywords"])


def is_keyword(word: str) -> bool:
    """Whether ``word`` is a keyword of Spark's SQL grammar (reserved or not)."""
    return word.upper() in _keywords()
