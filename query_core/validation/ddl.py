"""The clauses of DDL statements that say where data lives and how it is read, read on tokens as
Spark's grammar reads them: ``USING <provider>``, ``OPTIONS (...)``, ``LOCATION '...'``,
``TBLPROPERTIES``/``DBPROPERTIES``/``SERDEPROPERTIES (...)``, ``STORED AS``, ``ROW FORMAT SERDE``,
``INPUTFORMAT``/``OUTPUTFORMAT``.

Only the statement's own clauses are read (parenthesis depth 0, before the ``AS`` of a query):
column lists and the query are not clauses. Literals are read as Spark reads them, adjacent
strings concatenated (``OPTIONS (PATH '/etc/' 'hostname')`` is the path ``/etc/hostname``). A
clause that is not made of literals is left to the job's check (Spark refuses most of them).
"""

from __future__ import annotations

from collections.abc import Sequence

from query_core.validation.checks import Checks
from query_core.validation.tokens import Tok, TokenKind, literal_value

#: Words after which a ``(`` opens a list of properties.
_PROPERTY_LISTS = frozenset({"TBLPROPERTIES", "DBPROPERTIES", "SERDEPROPERTIES", "PROPERTIES"})
_QUERY_STARTS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "(", "MAP", "REDUCE"})


class _UnreadableError(Exception):
    """A clause not made of literals."""


class Clauses:
    """What a DDL statement's clauses say, once read."""

    def __init__(self) -> None:
        self.provider: str | None = None
        self.hive = False
        self.options: list[tuple[str, str]] = []
        self.properties: list[tuple[str, str]] = []
        self.locations: list[str] = []
        self.stored_as: list[str] = []
        self.classes: list[tuple[str, str]] = []
        #: ``CREATE TABLE t LIKE s``: the new table takes the source's provider unless it names one.
        self.like = False


def check_ddl(tokens: Sequence[Tok], checks: Checks) -> None:
    """Check the clauses of a CREATE, REPLACE or ALTER statement (``tokens`` is the whole
    statement)."""
    try:
        clauses = read_clauses(tokens)
    except _UnreadableError as exc:
        checks.leave(f"a clause not made of literals ({exc})")
        return
    words = [t.upper for t in tokens[:8]]
    creates_table = words[0] in ("CREATE", "REPLACE") and "TABLE" in words and "VIEW" not in words
    for location in clauses.locations:
        checks.location(location)
    checks.properties(clauses.properties)
    for name in clauses.stored_as:
        checks.stored_as(name)
    for clause, name in clauses.classes:
        checks.storage_class(clause, name)
    if clauses.provider is not None:
        provider = checks.provider(clauses.provider)
    elif creates_table and clauses.like:
        checks.leave("CREATE TABLE LIKE takes its source's provider")
        provider = None
    elif creates_table:
        # No USING: a Hive table when it names a Hive format, else Spark's default source.
        provider = checks.provider("hive" if clauses.hive else "parquet")
    else:
        provider = None
    if clauses.options:
        checks.options(provider, clauses.options)


def read_clauses(tokens: Sequence[Tok]) -> Clauses:
    """The clauses of a DDL statement (:class:`_UnreadableError` when one is not made of literals)."""
    found = Clauses()
    depth = 0
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        text = token.upper
        if token.kind == TokenKind.PUNCT:
            depth += 1 if text == "(" else -1 if text == ")" else 0
            i += 1
            continue
        if depth or token.kind != TokenKind.WORD:
            i += 1
            continue
        following = tokens[i + 1].upper if i + 1 < n else ""
        if text == "AS" and following in _QUERY_STARTS:
            break  # the query of CREATE ... AS: not a clause
        i = _clause(tokens, i, text, following, found)
    return found


def _clause(tokens: Sequence[Tok], i: int, text: str, following: str, found: Clauses) -> int:
    """Read the clause starting with the word ``text`` at ``i``; the index after it."""
    if text == "USING" and i + 1 < len(tokens) and tokens[i + 1].kind in (TokenKind.WORD, TokenKind.BACKQUOTED):
        parts, i = _name(tokens, i + 1)
        found.provider = ".".join(parts)
        return i
    if text == "OPTIONS" and following == "(":
        entries, i = _property_list(tokens, i + 1)
        found.options.extend(entries)
        return i
    if text in _PROPERTY_LISTS and following == "(":
        entries, i = _property_list(tokens, i + 1)
        found.properties.extend(entries)
        return i
    if text == "LOCATION" and following and tokens[i + 1].kind == TokenKind.STRING:
        value, i = _strings(tokens, i + 1)
        found.locations.append(value)
        return i
    if text in ("SERDE", "INPUTFORMAT", "OUTPUTFORMAT") and following and tokens[i + 1].kind == TokenKind.STRING:
        found.hive = True
        value, i = _strings(tokens, i + 1)
        found.classes.append((text, value))
        return i
    if text == "STORED" and following == "AS":
        found.hive = True
        if i + 2 < len(tokens) and tokens[i + 2].kind == TokenKind.WORD and tokens[i + 2].upper != "INPUTFORMAT":
            found.stored_as.append(tokens[i + 2].text)
            return i + 3
        return i + 2
    if text == "LIKE":
        found.like = True
        return i + 1
    if text == "ROW" and following == "FORMAT":
        found.hive = True
        return i + 2
    if text == "STORED" and following == "BY":
        raise _UnreadableError("STORED BY")
    return i + 1


def _name(tokens: Sequence[Tok], i: int) -> tuple[list[str], int]:
    """A dotted name of words and back-quoted parts starting at ``i``."""
    parts = [_part(tokens[i])]
    i += 1
    while (
        i + 1 < len(tokens) and tokens[i].text == "." and tokens[i + 1].kind in (TokenKind.WORD, TokenKind.BACKQUOTED)
    ):
        parts.append(_part(tokens[i + 1]))
        i += 2
    return parts, i


def _part(token: Tok) -> str:
    if token.kind == TokenKind.BACKQUOTED:
        return token.text[1:-1].replace("``", "`")
    return token.text


def _strings(tokens: Sequence[Tok], i: int) -> tuple[str, int]:
    """Adjacent string literals from ``i`` as one value, as Spark joins them."""
    values: list[str] = []
    while i < len(tokens) and tokens[i].kind == TokenKind.STRING:
        value = literal_value(tokens[i])
        if value is None:
            raise _UnreadableError(f"the literal {tokens[i].text[:40]}")
        values.append(value)
        i += 1
    return "".join(values), i


def _property_list(tokens: Sequence[Tok], i: int) -> tuple[list[tuple[str, str]], int]:
    """``( key [=] value, ... )`` starting at the ``(`` at ``i``: keys are dotted names or strings,
    values literals (absent: the empty string, as in ``UNSET TBLPROPERTIES``)."""
    entries: list[tuple[str, str]] = []
    i += 1
    n = len(tokens)
    while i < n and tokens[i].text != ")":
        key, i = _key(tokens, i)
        if i < n and tokens[i].text == "=":
            i += 1
        value, i = _value(tokens, i)
        entries.append((key, value))
        if i < n and tokens[i].text == ",":
            i += 1
        elif i < n and tokens[i].text != ")":
            raise _UnreadableError(f"{tokens[i].text[:40]} in a property list")
    return entries, i + 1


def _key(tokens: Sequence[Tok], i: int) -> tuple[str, int]:
    """A property key: a dotted name, or one string (a string after it starts the value, as
    Spark's parser reads ``('k' 'v1' 'v2')``: ``k`` is ``v1v2``)."""
    token = tokens[i]
    if token.kind == TokenKind.STRING:
        value = literal_value(token)
        if value is None:
            raise _UnreadableError(f"the key {token.text[:40]}")
        return value, i + 1
    if token.kind in (TokenKind.WORD, TokenKind.BACKQUOTED):
        parts, i = _name(tokens, i)
        return ".".join(parts), i
    raise _UnreadableError(f"the key {token.text[:40]}")


def _value(tokens: Sequence[Tok], i: int) -> tuple[str, int]:
    if i >= len(tokens) or tokens[i].text in (",", ")"):
        return "", i
    token = tokens[i]
    if token.kind == TokenKind.STRING:
        return _strings(tokens, i)
    if token.kind in (TokenKind.INTEGER, TokenKind.DECIMAL) or token.upper in ("TRUE", "FALSE"):
        return token.text.lower(), i + 1
    if (
        token.text in ("-", "+")
        and i + 1 < len(tokens)
        and tokens[i + 1].kind in (TokenKind.INTEGER, TokenKind.DECIMAL)
    ):
        return token.text + tokens[i + 1].text, i + 2
    raise _UnreadableError(f"the value {token.text[:40]}")
