"""Splitting SQL text into tokens the way the reference's Flint lexer does.

The reference lexes with ANTLR over an upper-casing character stream (``SparkSqlBase.g4`` in
opensearch-spark); this module reproduces the parts that decide what a statement *is*:

* whitespace, ``-- ...`` and (nested) ``/* ... */`` comments are skipped, but ``/*+`` opens a hint,
  which is not a comment (and inside a comment opens nothing);
* string literals in single or double quotes with backslash escapes, and raw ``r'...'`` strings,
  are single tokens, so nothing inside them (a ``WITH (``, a ``;``, a keyword) is ever seen;
* back-quoted identifiers, with ````` doubled inside;
* integers, decimals and words (ASCII letters, digits, ``_``), the longest match winning;
* anything else is a one-character token, so tokenizing never fails: whether the tokens make a
  statement is the parser's question.

Which words are keywords is not decided here: the grammar knows (see :mod:`.parser`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class TokenKind(StrEnum):
    WORD = "WORD"
    BACKQUOTED = "BACKQUOTED"
    STRING = "STRING"
    INTEGER = "INTEGER"
    DECIMAL = "DECIMAL"
    PUNCT = "PUNCT"
    UNRECOGNIZED = "UNRECOGNIZED"
    #: A ``/*`` comment that runs to the end of the text; Spark refuses those.
    UNCLOSED_COMMENT = "UNCLOSED_COMMENT"


@dataclass(frozen=True, slots=True)
class RawToken:
    """One token: ``text`` is ``sql[start:end]``; ``line`` and ``column`` are 1-based."""

    kind: TokenKind
    text: str
    start: int
    end: int
    line: int
    column: int
    end_line: int
    end_column: int


_WS = re.compile(r"[ \t\r\n]+")
# A backslash before a newline continues a line comment, as in the reference.
_LINE_COMMENT = re.compile(r"--(?:\\\n|[^\r\n])*")
_STRING = re.compile(r"""[rR](?:'[^']*'|"[^"]*")|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""", re.DOTALL)
_BACKQUOTED = re.compile(r"`(?:[^`]|``)*`")
_WORD = re.compile(r"[A-Za-z0-9_]+")
# A decimal must not run on into a word: ``1.5x`` is ``1``, ``.``, ``5x`` (the reference's isValidDecimal).
_DECIMAL = re.compile(r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?![A-Za-z0-9_])")
_PUNCT = re.compile(r"==|[(),.;=]")


def tokenize(sql: str) -> list[RawToken]:
    """All tokens of ``sql``, comments and whitespace left out. Never raises."""
    return list(iter_tokens(sql))


def iter_tokens(sql: str) -> Iterator[RawToken]:
    """The tokens of ``sql`` one by one, so that a caller can stop after the first few."""
    return _Scanner(sql).tokens()


def string_value(literal: str) -> str:
    """The value of a string literal token, unescaped as Spark's ``unescapeSQLString`` does."""
    if literal[0] in "rR":
        return literal[2:-1]
    body = literal[1:-1]
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 >= len(body):
            out.append(char)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u" and _is_hex(body[i + 2 : i + 6], 4):
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif nxt == "U" and _is_hex(body[i + 2 : i + 10], 8) and int(body[i + 2 : i + 10], 16) <= 0x10FFFF:
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        elif re.fullmatch(r"[01][0-7][0-7]", body[i + 1 : i + 4]):  # \000 to \177, as Spark reads them
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


_ESCAPES = {
    "0": "\x00",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    # Spark keeps these two escaped: they are LIKE wildcards.
    "%": "\\%",
    "_": "\\_",
}


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdefABCDEF" for c in text)


@dataclass(frozen=True, slots=True)
class BracketedComment:
    """What :func:`bracketed_comment` found."""

    #: Where the comment ends (past its ``*/``); -1 when it runs to the end of the text.
    end: int
    #: How deeply comments nest in it (1: none inside).
    depth: int
    #: The sum, over the comments opened inside it, of the depth each was opened at: what Spark's
    #: lexer spends on it grows with it (docs/validation.md, "Limits").
    nested_weight: int


def bracketed_comment(sql: str, start: int, max_weight: int | None = None) -> BracketedComment:
    """The bracketed comment opening at ``start`` (``sql[start:start + 2] == "/*"``), as Spark's
    lexer reads it: comments nest, but ``/*+`` inside a comment opens nothing (Spark's rule for a
    nested comment refuses a hint's start), and nothing else inside is read (quotes, ``--``).

    Linear in the comment's length: each ``find`` result is kept until the scan passes it. Past
    ``max_weight`` it stops early, as if the comment were unclosed (the caller refuses it anyway)."""
    size = len(sql)
    depth, deepest, weight = 1, 1, 0
    pos = start + 2
    opening = closing = -1
    while True:
        if closing < pos:
            closing = sql.find("*/", pos)
            if closing < 0:
                closing = size + 1
        if opening < pos:
            opening = _nested_open(sql, pos, size)
        if closing > size:  # unclosed: it runs to the end; what opens before the end nests
            opens = sql.count("/*", pos) - sql.count("/*+", pos)
            weight += opens * depth + opens * (opens + 1) // 2
            return BracketedComment(-1, max(deepest, depth + opens), weight)
        if opening < closing:
            depth += 1
            deepest = max(deepest, depth)
            weight += depth
            pos = opening + 2
            if max_weight is not None and weight > max_weight:
                return BracketedComment(-1, deepest, weight)
        else:
            depth -= 1
            pos = closing + 2
            if depth == 0:
                return BracketedComment(pos, deepest, weight)


def _nested_open(sql: str, pos: int, size: int) -> int:
    """The next ``/*`` from ``pos`` that opens a nested comment (not ``/*+``); ``size + 1`` if none."""
    while True:
        found = sql.find("/*", pos)
        if found < 0:
            return size + 1
        if not sql.startswith("+", found + 2):
            return found
        pos = found + 2


class _Scanner:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.pos = 0
        self.line = 1
        self.line_start = 0

    def tokens(self) -> Iterator[RawToken]:
        sql = self.sql
        while self.pos < len(sql):
            if match := _WS.match(sql, self.pos) or _LINE_COMMENT.match(sql, self.pos):
                self._advance(match.end())
                continue
            if sql.startswith("/*", self.pos) and not sql.startswith("/*+", self.pos):
                end = self._comment_end(self.pos)
                if end is None:
                    yield self._take(TokenKind.UNCLOSED_COMMENT, len(sql))
                else:
                    self._advance(end)
                continue
            yield self._next_token()

    def _next_token(self) -> RawToken:
        sql, pos = self.sql, self.pos
        if match := _STRING.match(sql, pos):
            return self._take(TokenKind.STRING, match.end())
        if match := _BACKQUOTED.match(sql, pos):
            return self._take(TokenKind.BACKQUOTED, match.end())
        # The longest of decimal, integer and word wins, the number on a tie. A valid decimal is
        # always the longest (a word stops at its ``.``), and a word of digits only is an integer.
        if match := _DECIMAL.match(sql, pos):
            return self._take(TokenKind.DECIMAL, match.end())
        if match := _WORD.match(sql, pos):
            kind = TokenKind.INTEGER if match.group().isdigit() else TokenKind.WORD
            return self._take(kind, match.end())
        if match := _PUNCT.match(sql, pos):
            return self._take(TokenKind.PUNCT, match.end())
        return self._take(TokenKind.UNRECOGNIZED, pos + 1)

    def _comment_end(self, pos: int) -> int | None:
        """End of the bracketed comment opening at ``pos`` (:func:`bracketed_comment`)."""
        end = bracketed_comment(self.sql, pos).end
        return None if end < 0 else end

    def _take(self, kind: TokenKind, end: int) -> RawToken:
        start, line, column = self.pos, self.line, self.pos - self.line_start + 1
        self._advance(end)
        return RawToken(
            kind=kind,
            text=self.sql[start:end],
            start=start,
            end=end,
            line=line,
            column=column,
            end_line=self.line,
            end_column=end - self.line_start + 1,
        )

    def _advance(self, end: int) -> None:
        newlines = self.sql.count("\n", self.pos, end)
        if newlines:
            self.line += newlines
            self.line_start = self.sql.rindex("\n", self.pos, end) + 1
        self.pos = end
