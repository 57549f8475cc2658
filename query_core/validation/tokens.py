"""A fast scan of a statement into tokens, with Spark's lexical rules, for the checks at POST.

The boundaries are Spark's (``SqlBaseLexer``): whitespace and ``--`` comments (a backslash before
the newline continues one) and nested ``/* ... */`` comments are skipped, ``/*+`` opens a hint
whose content is scanned; strings in single or double quotes with backslash escapes and doubled
quotes (``'it''s'``), raw ``r'...'`` strings, back-quoted names with doubled back-quotes, numbers,
words, and operators. Text Spark's lexer would refuse (an unterminated string, name or comment)
is an ``ERROR`` token: the checks leave such a statement to the job, which refuses it.

One regular expression scans the whole text, so a kilobyte takes tens of microseconds, and
nothing here recurses, whatever the text.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import NamedTuple

from query_core.flint.lexer import TokenKind, string_value

__all__ = ["ERROR", "Tok", "TokenKind", "is_keyword", "literal_value", "scan"]

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


#: Every token (and every run of whitespace and every comment) is one match, so ``findall`` cuts
#: the whole text in one call; a nested comment, which no regular expression matches, is found
#: by :func:`_comment_end` instead.
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


def scan(sql: str) -> list[Tok]:
    """The tokens of ``sql``, comments and whitespace left out. Never raises."""
    tokens: list[Tok] = []
    offset = 0
    while offset < len(sql):
        stopped = _scan_from(sql, offset, tokens)
        if stopped is None:
            break
        closed = _comment_end(sql, stopped)  # a nested or unclosed comment, scanned here
        if closed < 0:
            tokens.append(Tok(ERROR, sql[stopped:], stopped, len(sql)))
            break
        offset = closed
    return tokens


def _scan_from(sql: str, offset: int, tokens: list[Tok]) -> int | None:
    """Append the tokens of ``sql[offset:]``; where a comment no piece matched starts, stop and
    return its position (None: the end was reached)."""
    append, new = tokens.append, tuple.__new__  # ``Tok(...)`` would cost three times as much
    word, integer, decimal, punct = TokenKind.WORD, TokenKind.INTEGER, TokenKind.DECIMAL, TokenKind.PUNCT
    pos = offset
    for piece in _PIECES.findall(sql, offset):
        start, pos = pos, pos + len(piece)
        first = piece[0]
        if first in _SPACE:
            continue
        if first in _WORD_START:
            if first in "rR" and len(piece) > 1 and piece[1] in "'\"":
                append(new(Tok, (TokenKind.STRING, piece, start, pos)))
            elif "." in piece:
                append(new(Tok, (decimal, piece, start, pos)))
            else:
                append(new(Tok, (integer if piece.isdigit() else word, piece, start, pos)))
        elif first in _OPENERS:
            if len(piece) == 1:  # an unterminated string or name: Spark refuses the text
                append(Tok(ERROR, sql[start:], start, len(sql)))
                return None
            append(new(Tok, (TokenKind.BACKQUOTED if first == "`" else TokenKind.STRING, piece, start, pos)))
        elif first == "-" and piece.startswith("--"):
            continue
        elif first == "/" and piece.startswith("/*") and piece != "/*+":
            if len(piece) >= 4 and piece.endswith("*/"):
                continue
            return start
        elif first == "." and len(piece) > 1:
            append(new(Tok, (decimal, piece, start, pos)))
        elif first.isspace():
            continue
        else:
            append(new(Tok, (punct, piece, start, pos)))
    return None


def _comment_end(sql: str, start: int) -> int:
    """The end of the (nested) ``/* ... */`` comment opened at ``start``; -1 when unclosed."""
    depth, pos = 0, start
    while True:
        opening, closing = sql.find("/*", pos), sql.find("*/", pos)
        if closing < 0:
            return -1
        if 0 <= opening < closing:
            depth += 1
            pos = opening + 2
        else:
            depth -= 1
            pos = closing + 2
            if depth == 0:
                return pos


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
