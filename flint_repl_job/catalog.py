"""The datasource's name as a Spark catalog.

Users of the reference write ``<datasource>.<db>.<table>``, and OpenSearch Dashboards browses a
datasource with ``SHOW SCHEMAS IN <ds>``, ``SHOW TABLE EXTENDED IN <ds>.<db> LIKE '*'`` and
``DESC <ds>.<db>.<table>``. The reference registers a JVM catalog plugin under the datasource's
name that delegates to Spark's session catalog. A catalog plugin must be a JVM class, and this
product ships no JVM code (no build step for users), so the job instead rewrites the datasource's
name where it stands for a catalog into ``spark_catalog``, the session catalog's own name, before
Spark parses the statement. Spark then resolves everything itself: unqualified names resolve in
the session catalog as they would in the reference (whose default catalog is the datasource).

The rewrite works on tokens, never inside strings, quoted identifiers or comments, and only where
a name must be a catalog:

- the first part of a name of three or more parts (``ds.db.table``, ``ds.db.table.column``);
- the first part of a one- or two-part name after ``IN``/``FROM`` in a ``SHOW`` statement
  (``SHOW SCHEMAS IN ds``, ``SHOW TABLES IN ds.db``) and after ``USE``;
- the first part of a two-part name after ``DATABASE``/``SCHEMA``/``NAMESPACE``
  (``CREATE DATABASE ds.sales``).

A catalog that is neither the datasource nor ``spark_catalog`` reaches Spark unchanged; Spark's
error for it is reworded by :func:`unknown_catalog_message`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SESSION_CATALOG = "spark_catalog"

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<line_comment>--[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<string>[rR]?'(?:[^'\\]|\\.)*'|[rR]?"(?:[^"\\]|\\.)*")
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<word>\w+)
  | (?P<dot>\.)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_NAMESPACE_WORDS = {"DATABASE", "SCHEMA", "NAMESPACE"}


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int

    @property
    def name(self) -> str | None:
        """The identifier this token spells (unquoted), or None if it is not one."""
        if self.kind == "word":
            return self.text
        if self.kind == "quoted":
            return self.text[1:-1].replace("``", "`")
        return None


def tokenize(sql: str) -> list[Token]:
    """Spark SQL's tokens, enough to tell names from strings and comments (nested ``/* */`` too).
    An unterminated string or comment runs to the end of the text, as one token."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        assert match is not None  # ``other`` matches any character
        kind = match.lastgroup or "other"
        if kind == "block_comment":
            end = _comment_end(sql, pos)
        elif kind == "other" and sql[pos] in "'\"`":
            end = len(sql)  # an unterminated string or quoted name
        else:
            end = match.end()
        tokens.append(Token(kind, sql[pos:end], pos))
        pos = end
    return tokens


def _comment_end(sql: str, start: int) -> int:
    depth, pos = 0, start
    while pos < len(sql):
        if sql.startswith("/*", pos):
            depth, pos = depth + 1, pos + 2
        elif sql.startswith("*/", pos):
            depth, pos = depth - 1, pos + 2
            if depth == 0:
                return pos
        else:
            pos += 1
    return len(sql)


def significant(tokens: list[Token]) -> list[Token]:
    """``tokens`` without spaces and comments."""
    return [t for t in tokens if t.kind not in ("space", "line_comment", "block_comment")]


def dotted_names(tokens: list[Token]) -> list[tuple[int, list[Token]]]:
    """Dotted names as (index of the token before them, their part tokens)."""
    found: list[tuple[int, list[Token]]] = []
    i = 0
    while i < len(tokens):
        if tokens[i].name is None or (i > 0 and tokens[i - 1].kind == "dot"):
            i += 1
            continue
        parts = [tokens[i]]
        j = i + 1
        while j + 1 < len(tokens) and tokens[j].kind == "dot" and tokens[j + 1].name is not None:
            parts.append(tokens[j + 1])
            j += 2
        found.append((i - 1, parts))
        i = j
    return found


def _is_catalog_position(tokens: list[Token], before: int, parts: int) -> bool:
    if parts >= 3:
        return True
    while before >= 0 and tokens[before].text.upper() in ("IF", "NOT", "EXISTS"):
        before -= 1
    if before < 0:
        return False
    word = tokens[before].text.upper() if tokens[before].kind == "word" else ""
    first = tokens[0].text.upper() if tokens[0].kind == "word" else ""
    if word in ("IN", "FROM") and first == "SHOW":
        return True
    if word == "USE":
        return True
    return word in _NAMESPACE_WORDS and parts == 2


def session_sql(sql: str, datasource: str) -> str:
    """``sql`` with the datasource's name replaced by ``spark_catalog`` wherever it names the
    catalog; everything else (spacing, comments, case) unchanged."""
    if datasource not in sql:
        return sql
    tokens = significant(tokenize(sql))
    edits = [
        parts[0]
        for before, parts in dotted_names(tokens)
        if parts[0].name == datasource and _is_catalog_position(tokens, before, len(parts))
    ]
    out, pos = [], 0
    for token in edits:
        out += [sql[pos : token.start], SESSION_CATALOG]
        pos = token.start + len(token.text)
    return "".join(out) + sql[pos:]


_FOREIGN = re.compile(r"REQUIRES_SINGLE_PART_NAMESPACE.*?got (?:identifier )?(?P<name>[`\w.]+)", re.DOTALL)


def unknown_catalog_message(error: str, datasource: str) -> str | None:
    """For Spark's error about a name with an unknown catalog (``glue.db.t`` parses as a nested
    namespace of the session catalog), a message that says what is wrong; otherwise None."""
    match = _FOREIGN.search(error) if datasource else None
    if match is None:
        return None
    name = match.group("name").rstrip(".")
    catalog = _first_part(name)
    return (
        f"catalog {catalog!r} in {name} is not this session's datasource {datasource!r}: "
        f"name tables as {datasource}.<database>.<table> or <database>.<table>"
    )


def _first_part(name: str) -> str:
    token = next((t for t in tokenize(name) if t.name is not None), None)
    return token.name if token is not None and token.name is not None else name
