"""What a statement's body holds, read on its tokens: function calls, script ``TRANSFORM``,
path-based relations and ``IDENTIFIER(...)``.

This is how the plugin checks statements for profiles whose denied elements can all be read on
tokens (the ``LOCAL`` profile): it reads a kilobyte in well under a millisecond, and it never
recurses. Where it cannot tell what a token is, it does not guess that it is harmless: the
statement is left to the job's check on Spark's own parse (:meth:`Checks.leave`).

* A call is a name followed by ``(``: a word or back-quoted name, or a dotted chain of them (a
  qualified name, never a built-in). Not calls: keywords of Spark's grammar that are no function
  (``IN (``, ``OVER (``), type names (``DECIMAL(10, 2)``), column aliases (``AS t(a, b)``, a name
  after a relation or a literal), the name a DDL statement creates (``CREATE TABLE t (a INT)``,
  ``INSERT INTO t (a)``), and hints (``/*+ BROADCAST(t) */``).
* ``WITH (...)`` after a table is options of its data source: refused (``DATA_SOURCE_OPTION``).
* Script ``TRANSFORM`` (and Hive's ``MAP``/``REDUCE``) is the only construct where ``USING`` is
  followed by a string: the script.
* A relation is what follows ``FROM``, ``JOIN``, ``TABLE``, ``INTO``, ``UPDATE``, ``USING``, a
  comma of a ``FROM`` list, or a ``(`` that opens a relation there; a two-part one is checked for
  ``File`` (:meth:`Checks.table`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from query_core.validation.checks import Checks
from query_core.validation.elements import FunctionType, function_type
from query_core.validation.elements import GrammarElement as E
from query_core.validation.tokens import Tok, TokenKind, is_keyword, literal_value, scan

_NAMES = (TokenKind.WORD, TokenKind.BACKQUOTED)
_LITERALS = (TokenKind.STRING, TokenKind.INTEGER, TokenKind.DECIMAL, TokenKind.BACKQUOTED)
#: Words after which a name is the one a statement creates or writes, not a call.
_NAME_INTRODUCERS = frozenset({"TABLE", "VIEW", "INTO", "EXISTS", "FUNCTION", "DATABASE", "SCHEMA", "NAMESPACE"})
#: Type names that take parameters: ``DECIMAL(10, 2)`` is a type, not a call.
_TYPES = frozenset({"DECIMAL", "DEC", "NUMERIC", "VARCHAR", "CHAR", "CHARACTER", "STRING", "TIME", "TIMESTAMP"})
#: Words after which a relation follows.
_RELATION_BEFORE = frozenset({"FROM", "JOIN", "TABLE", "INTO", "UPDATE", "USING"})
#: Words that end a FROM list at its level.
_CLAUSES = frozenset(
    {
        "SELECT", "WHERE", "GROUP", "HAVING", "ORDER", "SORT", "CLUSTER", "DISTRIBUTE", "LIMIT", "OFFSET", "ON",
        "WINDOW", "QUALIFY", "UNION", "INTERSECT", "EXCEPT", "MINUS", "LATERAL", "PIVOT", "UNPIVOT", "SET", "VALUES",
    }
)  # fmt: skip
_QUERY_WORDS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE", "("})


def check_body(tokens: Sequence[Tok], checks: Checks) -> None:
    """Check the calls, scripts and relations of ``tokens``."""
    n = len(tokens)
    in_from = [False]  # per parenthesis level: inside a FROM list
    hint = False
    for i, token in enumerate(tokens):
        kind, text = token.kind, token.text
        following = tokens[i + 1].text if i + 1 < n else ""
        if kind == TokenKind.PUNCT:
            if text == "/*+":
                hint = True
            elif text == "*/":
                hint = False
            elif text == "(":
                opens_relation = in_from[-1] and _previous(tokens, i) in ("FROM", "JOIN", ",")
                in_from.append(opens_relation and following.upper() not in _QUERY_WORDS)
                if opens_relation and following.upper() not in _QUERY_WORDS:
                    _relation(tokens, i + 1, checks)
            elif text == ")":
                if len(in_from) > 1:
                    in_from.pop()
            elif text == "," and in_from[-1]:
                _relation(tokens, i + 1, checks)
            continue
        if hint or kind not in _NAMES:
            continue
        upper = text.upper() if kind == TokenKind.WORD else ""
        if upper in _RELATION_BEFORE:
            in_from[-1] = upper in ("FROM", "JOIN") or in_from[-1]
            _relation(tokens, i + 1, checks)
        elif upper in _CLAUSES:
            in_from[-1] = False
        if upper == "USING" and i + 1 < n and tokens[i + 1].kind == TokenKind.STRING:
            checks.element(E.TRANSFORM)
        if upper == "WITH" and following == "(":
            relation_options(checks)
        if upper == "IDENTIFIER" and following == "(":
            _identifier(tokens, i, checks)
        elif following == "(":
            _call(tokens, i, checks)


def relation_options(checks: Checks) -> None:
    """``WITH (...)`` after a table (``SELECT * FROM t WITH ('path' = ...)``, ``INSERT INTO t WITH
    (...)``): options Spark hands the table's data source, its ``path`` and Hadoop settings among
    them. No provider's list applies (the provider is the catalog's), so none is allowed."""
    checks.element(E.DATA_SOURCE_OPTION, "WITH options of a table")


def has_relation_options(tokens: Sequence[Tok]) -> bool:
    """Whether ``tokens`` hold ``WITH (``: in Spark SQL, only the options of a table (a common
    table expression names itself first: ``WITH t AS (...)``)."""
    return any(
        t.kind == TokenKind.WORD and t.upper == "WITH" and following.text == "("
        for t, following in itertools.pairwise(tokens)
    )


def _previous(tokens: Sequence[Tok], i: int) -> str:
    return tokens[i - 1].upper if i > 0 else ""


def _part(token: Tok) -> str:
    if token.kind == TokenKind.BACKQUOTED:
        return token.text[1:-1].replace("``", "`")
    return token.text


def _qualified_start(tokens: Sequence[Tok], i: int) -> int:
    """The first token of the dotted name that ends at ``i``."""
    while i >= 2 and tokens[i - 1].text == "." and tokens[i - 2].kind in _NAMES:
        i -= 2
    return i


def _call(tokens: Sequence[Tok], i: int, checks: Checks) -> None:
    """``tokens[i]`` is a name followed by ``(``: a call, unless the context says otherwise."""
    start = _qualified_start(tokens, i)
    if start > 0 and tokens[start - 1].text == ".":
        checks.leave("a call on an expression")
        return
    parts = [_part(tokens[j]) for j in range(start, i + 1, 2)]
    name = ".".join(parts)
    before = tokens[start - 1] if start > 0 else None
    if not _is_call_position(tokens, start, before):
        return
    if start == i and tokens[i].kind == TokenKind.WORD:
        word = tokens[i].upper
        if word in _TYPES and before is not None and before.upper in ("AS", "::", ":"):
            return
        if is_keyword(word) and function_type(name, checks.policy.function_table) is FunctionType.UDF:
            return  # a keyword of the grammar that no function is named after: IN (, OVER (
    checks.function(name)


def _is_call_position(tokens: Sequence[Tok], i: int, before: Tok | None) -> bool:
    """Whether a name at ``i`` followed by ``(`` is a call by what precedes it."""
    if before is None:
        return True
    previous = before.upper
    if previous == "AS" or before.text == ")" or before.kind in _LITERALS:
        return False  # a column alias list: AS t(a, b), range(3) t(a), 'x' t(a)
    if previous in _NAME_INTRODUCERS:
        lateral = previous == "VIEW" and i >= 2 and tokens[i - 2].upper == "LATERAL"
        return lateral  # LATERAL VIEW f(...) is a call; CREATE TABLE t (...) is not
    if previous == "OUTER" and i >= 3 and tokens[i - 2].upper == "VIEW":
        return True  # LATERAL VIEW OUTER f(...)
    if before.kind == TokenKind.WORD and not is_keyword(previous):
        return False  # an alias after a relation: FROM t x(a, b)
    return True


def _identifier(tokens: Sequence[Tok], i: int, checks: Checks) -> None:
    """``IDENTIFIER('<name>')``: the name the literal holds; anything but literals is only known
    when the statement runs."""
    j = i + 2
    values: list[str] = []
    while j < len(tokens) and tokens[j].kind == TokenKind.STRING:
        value = literal_value(tokens[j])
        if value is None:
            checks.leave("an IDENTIFIER literal")
            return
        values.append(value)
        j += 1
    if not values or j >= len(tokens) or tokens[j].text != ")":
        checks.element(E.DYNAMIC_SQL, "IDENTIFIER")
        return
    parts = _split_name("".join(values))
    if parts is None:
        checks.leave("an IDENTIFIER name")
        return
    if j + 1 < len(tokens) and tokens[j + 1].text == "(":
        checks.function(".".join(name for name, _ in parts))
    elif _previous(tokens, i) in _RELATION_BEFORE or _previous(tokens, i) == ",":
        checks.table([name for name, _ in parts], second_quoted=len(parts) == 2 and parts[1][1])


def _split_name(text: str) -> list[tuple[str, bool]] | None:
    """A dotted name as Spark reads it inside ``IDENTIFIER``: (part, was back-quoted)."""
    tokens = scan(text)
    parts: list[tuple[str, bool]] = []
    expect_name = True
    for token in tokens:
        if expect_name and token.kind in _NAMES:
            parts.append((_part(token), token.kind == TokenKind.BACKQUOTED))
        elif not expect_name and token.text == ".":
            pass
        else:
            return None
        expect_name = not expect_name
    return parts if parts and not expect_name else None


def _relation(tokens: Sequence[Tok], i: int, checks: Checks) -> None:
    """The relation starting at ``i``, when it is a two-part name (``text.`/etc/hostname```)."""
    if i + 2 >= len(tokens):
        return
    first, dot, second = tokens[i], tokens[i + 1], tokens[i + 2]
    if first.kind not in _NAMES or dot.text != "." or second.kind not in _NAMES:
        return
    if i + 3 < len(tokens) and tokens[i + 3].text == ".":
        return  # three parts or more: a catalog's table
    checks.table([_part(first), _part(second)], second_quoted=second.kind == TokenKind.BACKQUOTED)
