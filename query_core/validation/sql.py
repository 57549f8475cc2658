"""Spark SQL statements checked at the plugin, on a reading of the statement (never on its text).

The statement is scanned once into tokens with Spark's lexical rules (:mod:`.tokens`), then:

* what kind of statement it is (``ADD JAR``, ``SET key``, ``CREATE FUNCTION``, ``INSERT OVERWRITE
  DIRECTORY``, ``EXPLAIN``, ...) is decided by its leading keywords, as Spark's grammar decides it;
* the clauses of DDL statements that place data or name how it is read (``USING``, ``OPTIONS``,
  ``LOCATION``, properties, Hive formats) are read on the tokens, literals as Spark reads them
  (:mod:`.ddl`);
* what the statement holds (functions, script ``TRANSFORM``, path-based relations) is read on the
  tokens when every element the policy denies can be read there (:mod:`.token_checks`: the
  ``LOCAL`` profile), else on the syntax tree of sqlglot's Spark dialect, with every function call
  kept under the name written (the reference's profiles, which deny joins, hints, ``WITH``, ...).

What cannot be read here (text sqlglot cannot parse, a compound statement, a clause not made of
literals) is never taken as harmless: it is noted (:meth:`Checks.leave`) and the statement is left
to the job's check on Spark's own parse (``flint_repl_job.guard``), which is authoritative.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError

from query_core.validation.checks import Checks
from query_core.validation.ddl import check_ddl
from query_core.validation.elements import GrammarElement as E
from query_core.validation.elements import spark_function_groups
from query_core.validation.token_checks import check_body
from query_core.validation.tokens import ERROR, Tok, TokenKind, literal_value, scan

log = logging.getLogger(__name__)
# sqlglot warns on every statement it parses as an opaque command; those are expected here.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

#: Spark's function forms with a syntax of their own (``CAST(x AS t)``, ``TRIM(BOTH ...)``): not
#: calls of a function name, so not typed (as in the reference, whose grammar has them apart).
_SPECIAL_FORMS = frozenset({"CAST", "TRY_CAST", "EXTRACT", "TRIM", "POSITION", "SUBSTRING", "SUBSTR", "OVERLAY"})


class _Dialect(Spark):
    """Spark's dialect with every function call parsed as a call of the name written."""

    class Parser(Spark.Parser):  # type: ignore[misc,valid-type]
        FUNCTIONS: dict = {}
        FUNCTION_PARSERS = {k: v for k, v in Spark.Parser.FUNCTION_PARSERS.items() if k in _SPECIAL_FORMS}


_RESOURCES = frozenset({"FILE", "FILES", "JAR", "JARS", "ARCHIVE", "ARCHIVES"})
_NAMESPACES = frozenset({"DATABASE", "SCHEMA", "NAMESPACE", "DATABASES", "SCHEMAS", "NAMESPACES"})
_QUERY_STARTS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE", "MAP", "REDUCE", "("})
_EXPLAIN_MODES = frozenset({"LOGICAL", "FORMATTED", "EXTENDED", "CODEGEN", "COST"})
#: Statements whose clauses place data or name how it is read.
_PLACING = frozenset({"CREATE", "ALTER", "REPLACE"})
#: Statements of SQL scripting (and labels): their statements are checked by the job.
_COMPOUND = frozenset({"BEGIN", "DECLARE", "IF", "WHILE", "FOR", "REPEAT", "LOOP", "CASE", "LEAVE", "ITERATE"})
#: Elements only the syntax tree tells apart: a policy denying one of them is checked on sqlglot's tree.
TREE_ELEMENTS = frozenset(
    {
        E.WITH, E.CLUSTER_BY, E.DISTRIBUTE_BY, E.HINTS, E.INLINE_TABLE, E.INNER_JOIN, E.CROSS_JOIN,
        E.LEFT_OUTER_JOIN, E.LEFT_SEMI_JOIN, E.RIGHT_OUTER_JOIN, E.FULL_OUTER_JOIN, E.LEFT_ANTI_JOIN,
        E.TABLESAMPLE, E.TABLE_VALUED_FUNCTION, E.LATERAL_VIEW, E.LATERAL_SUBQUERY,
    }
)  # fmt: skip


def check_sql(sql: str, checks: Checks, tokens: Sequence[Tok] | None = None) -> None:
    """Refuse ``sql`` (:class:`QueryRefusedError`) when it holds an element the policy denies.
    ``tokens`` are its tokens when the caller scanned it already."""
    scanned = list(scan(sql) if tokens is None else tokens)
    if scanned and scanned[-1].kind == ERROR:
        checks.leave("text Spark's lexer refuses")
        scanned.pop()
    by_tokens = not (checks.policy.denied & TREE_ELEMENTS)
    start = 0
    while True:  # EXPLAIN, DESCRIBE QUERY: the statement they hold is checked in turn
        tokens_now = scanned[start:]
        words = [t.upper for t in tokens_now[:6]]
        if not words:
            return
        rest = _head(words, tokens_now, checks)
        if rest is None:
            break
        start += rest
    text = sql[tokens_now[0].start :]
    _check_statement(text, tokens_now, words, checks, by_tokens)


def _check_statement(sql: str, tokens: Sequence[Tok], words: list[str], checks: Checks, by_tokens: bool) -> None:
    first = words[0]
    if first in ("SET", "RESET", "EXECUTE", "ADD", "LIST"):
        return  # decided by the head
    if first in _COMPOUND or (len(words) > 1 and words[1] == ":"):
        checks.leave("a compound statement")
    if any(t.text == ";" for t in tokens[:-1]):
        checks.leave("more than one statement")
    if first in _PLACING:
        check_ddl(tokens, checks)
    if by_tokens:
        check_body(tokens, checks)
    else:
        _check_tree(sql, checks)


def _head(words: list[str], tokens: Sequence[Tok], checks: Checks) -> int | None:
    """Check the element the statement's leading keywords make; the index of the statement it
    holds (EXPLAIN, DESCRIBE QUERY), else None."""
    first, second = words[0], words[1] if len(words) > 1 else ""
    if first == "EXPLAIN":
        checks.element(E.EXPLAIN)
        return 2 if second in _EXPLAIN_MODES else 1
    if first in ("DESC", "DESCRIBE"):
        if second == "QUERY" or second in _QUERY_STARTS:
            checks.element(E.DESCRIBE_QUERY)
            return 2 if second == "QUERY" else 1
        checks.element(_describe_element(second))
        return None
    if first in ("ADD", "LIST") and second in _RESOURCES:
        checks.element(E.MANAGE_RESOURCE)
    elif first in ("SET", "RESET"):
        _config(first, tokens, checks)
    elif first == "EXECUTE" and second == "IMMEDIATE":
        _execute_immediate(tokens, checks)
    else:
        element = _statement_element(words, tokens)
        if element is not None:
            checks.element(element)
        if first == "INSERT" and "DIRECTORY" in words[:4]:
            checks.element(E.INSERT_OVERWRITE_DIRECTORY)
    return None


def _describe_element(second: str) -> E:
    if second == "FUNCTION":
        return E.DESCRIBE_FUNCTION
    if second in _NAMESPACES:
        return E.DESCRIBE_NAMESPACE
    return E.DESCRIBE_TABLE


_SHOWS = {
    "COLUMNS": E.SHOW_COLUMNS,
    "CREATE": E.SHOW_CREATE_TABLE,
    "DATABASES": E.SHOW_NAMESPACES,
    "SCHEMAS": E.SHOW_NAMESPACES,
    "NAMESPACES": E.SHOW_NAMESPACES,
    "FUNCTIONS": E.SHOW_FUNCTIONS,
    "PARTITIONS": E.SHOW_PARTITIONS,
    "TABLES": E.SHOW_TABLES,
    "TBLPROPERTIES": E.SHOW_TBLPROPERTIES,
    "VIEWS": E.SHOW_VIEWS,
}


def _statement_element(words: list[str], tokens: Sequence[Tok]) -> E | None:
    """The element of a statement by its leading keywords (None: a query, or no element)."""
    first, second = words[0], words[1] if len(words) > 1 else ""
    upper = {t.text.upper() for t in tokens if t.kind == TokenKind.WORD}
    if first == "SHOW":
        if second == "TABLE" and len(words) > 2 and words[2] == "EXTENDED":
            return E.SHOW_TABLE_EXTENDED
        kind = words[2] if second in ("USER", "SYSTEM", "ALL") and len(words) > 2 else second
        return _SHOWS.get(kind)
    if first in ("CREATE", "REPLACE"):
        return _create_element(words, upper)
    if first == "ALTER":
        if second in _NAMESPACES:
            return E.ALTER_NAMESPACE
        if "TBLPROPERTIES" in upper:
            return None  # SET/UNSET TBLPROPERTIES: no element in the reference
        return E.ALTER_VIEW if second == "VIEW" else E.ALTER_NAMESPACE if second == "TABLE" else None
    if first == "DROP":
        drops = {"VIEW": E.DROP_VIEW, "FUNCTION": E.DROP_FUNCTION, "TABLE": E.DROP_NAMESPACE}
        kind = words[2] if second == "TEMPORARY" and len(words) > 2 else second
        return E.DROP_NAMESPACE if kind in _NAMESPACES else drops.get(kind)
    simple = {
        "INSERT": E.INSERT,
        "LOAD": E.LOAD,
        "TRUNCATE": E.TRUNCATE_TABLE,
        "MSCK": E.REPAIR_TABLE,
        "REPAIR": E.REPAIR_TABLE,
        "ANALYZE": E.ANALYZE_TABLE,
        "CACHE": E.CACHE_TABLE,
        "UNCACHE": E.UNCACHE_TABLE,
    }
    if first in simple:
        return simple[first]
    if first == "CLEAR" and second == "CACHE":
        return E.CLEAR_CACHE
    if first == "REFRESH":
        return {"TABLE": E.REFRESH_TABLE, "FUNCTION": E.REFRESH_FUNCTION}.get(second, E.REFRESH_RESOURCE)
    return None


def _create_element(words: list[str], upper: set[str]) -> E | None:
    kinds = [w for w in words[1:5] if w in ("FUNCTION", "TABLE", "VIEW", *_NAMESPACES)]
    if not kinds:
        return None
    kind = kinds[0]
    if kind == "FUNCTION":
        return E.CREATE_FUNCTION
    if kind == "VIEW":
        # CREATE TEMPORARY VIEW ... USING <source> reads a source directly: its path is a location.
        return None if "USING" in upper and "AS" not in upper else E.CREATE_VIEW
    return E.CREATE_NAMESPACE


# -- SET, RESET, EXECUTE IMMEDIATE ----------------------------------------------------------------

_KEY_PUNCT = frozenset({".", ":", "\\"})


def _config(first: str, tokens: Sequence[Tok], checks: Checks) -> None:
    """``SET [key[=value]]``, ``SET -v``, ``RESET [key]``, read as Spark reads them; ``SET VAR`` and
    ``SET TIME ZONE`` are statements of their own: a variable's expression is checked as any
    expression, and ``SET TIME ZONE`` sets ``spark.sql.session.timeZone``."""
    rest = tokens[1:]
    if first == "SET" and rest and rest[0].kind == TokenKind.WORD and rest[0].text.upper() in ("VAR", "VARIABLE"):
        check_body(rest[1:], checks)
        return
    if first == "SET" and len(rest) > 1 and [t.text.upper() for t in rest[:2]] == ["TIME", "ZONE"]:
        checks.config(E.SET, "spark.sql.session.timeZone")
        return
    element = E.SET if first == "SET" else E.RESET
    checks.config(element, _config_key(rest))


def _config_key(tokens: Sequence[Tok]) -> str | None:
    """The key a SET/RESET names (None: it names none, as ``SET``, ``SET -v``, ``RESET``)."""
    if not tokens or tokens[0].text == ";" or tokens[0].text == "-":
        return None
    if tokens[0].kind == TokenKind.BACKQUOTED:
        return tokens[0].text[1:-1].replace("``", "`")
    key = tokens[0].text
    for before, token in itertools.pairwise(tokens):
        adjacent = token.start == before.end
        if not adjacent or not (token.kind in (TokenKind.WORD, TokenKind.INTEGER) or token.text in _KEY_PUNCT):
            break
        key += token.text
    return key


def _execute_immediate(tokens: Sequence[Tok], checks: Checks) -> None:
    """``EXECUTE IMMEDIATE '<statement>' [INTO ...] [USING ...]``: the statement is checked in
    turn; one held in a variable cannot be checked before it runs."""
    rest = tokens[2:]
    follows = rest[1].text.upper() if len(rest) > 1 else ""
    if rest and rest[0].kind == TokenKind.STRING and follows in ("", ";", "INTO", "USING"):
        value = literal_value(rest[0])
        if value is None:
            checks.leave("an EXECUTE IMMEDIATE literal")
            return
        check_sql(value, checks)
        check_body([t for t in rest[1:] if t.upper != "USING"], checks)  # its arguments: expressions
        return
    checks.element(E.DYNAMIC_SQL, "EXECUTE IMMEDIATE")


# -- the query's syntax tree ----------------------------------------------------------------------


def _check_tree(sql: str, checks: Checks) -> None:
    try:
        trees = sqlglot.parse(sql, dialect=_Dialect)
    except SqlglotError as exc:
        log.debug("not parsed here, left to the job's check: %s", exc)
        checks.leave("text sqlglot cannot parse")
        return
    except RecursionError:
        checks.leave("too deeply nested for sqlglot")
        return
    for tree in trees:
        if tree is not None:
            _walk(tree, checks)


_JOIN_ELEMENTS = {
    ("", "CROSS"): E.CROSS_JOIN,
    ("LEFT", "SEMI"): E.LEFT_SEMI_JOIN,
    ("", "SEMI"): E.LEFT_SEMI_JOIN,
    ("LEFT", "ANTI"): E.LEFT_ANTI_JOIN,
    ("", "ANTI"): E.LEFT_ANTI_JOIN,
    ("LEFT", ""): E.LEFT_OUTER_JOIN,
    ("LEFT", "OUTER"): E.LEFT_OUTER_JOIN,
    ("RIGHT", ""): E.RIGHT_OUTER_JOIN,
    ("RIGHT", "OUTER"): E.RIGHT_OUTER_JOIN,
    ("FULL", ""): E.FULL_OUTER_JOIN,
    ("FULL", "OUTER"): E.FULL_OUTER_JOIN,
    ("", "INNER"): E.INNER_JOIN,
}
_CLAUSES: dict[type[exp.Expr], E] = {
    exp.QueryTransform: E.TRANSFORM,
    exp.With: E.WITH,
    exp.Cluster: E.CLUSTER_BY,
    exp.Distribute: E.DISTRIBUTE_BY,
    exp.TableSample: E.TABLESAMPLE,
    exp.Values: E.INLINE_TABLE,
}


def _walk(tree: exp.Expr, checks: Checks) -> None:
    for node in tree.walk(bfs=False, prune=lambda n: isinstance(n, exp.Hint)):
        if isinstance(node, exp.Hint):
            checks.element(E.HINTS)
        elif type(node) in _CLAUSES:
            checks.element(_CLAUSES[type(node)])
        elif isinstance(node, exp.Lateral):
            checks.element(E.LATERAL_VIEW if node.args.get("view") else E.LATERAL_SUBQUERY)
        elif isinstance(node, exp.Join):
            _join(node, checks)
        elif isinstance(node, exp.Table):
            _table(node, checks)
        elif isinstance(node, exp.Anonymous):
            _call(node, checks)
        elif isinstance(node, exp.Func) and not isinstance(node, exp.SubqueryPredicate):
            name = node.sql_name().lower()
            if name in spark_function_groups():
                checks.function(name)
        elif isinstance(node, exp.OptionsProperty):
            _path_options(node, checks)


def _join(node: exp.Join, checks: Checks) -> None:
    if isinstance(node.this, exp.Lateral):
        return  # LATERAL (subquery): its own element, checked on the Lateral node
    side, kind = (node.args.get("side") or "").upper(), (node.args.get("kind") or "").upper()
    element = _JOIN_ELEMENTS.get((side, kind))
    if element is not None:
        checks.element(element)


def _table(node: exp.Table, checks: Checks) -> None:
    if isinstance(node.this, exp.Anonymous):
        if node.this.name.upper() == "IDENTIFIER":
            _identifier_relation(node.this, checks)
        else:
            checks.element(E.TABLE_VALUED_FUNCTION)
        return
    parts = [part.name for part in (node.args.get("catalog"), node.args.get("db"), node.this) if part is not None]
    quoted = isinstance(node.this, exp.Identifier) and bool(node.this.args.get("quoted"))
    checks.table(parts, second_quoted=quoted)


def _identifier_relation(node: exp.Anonymous, checks: Checks) -> None:
    """``IDENTIFIER('<name>')`` as a relation: the name Spark reads from the literal."""
    (argument,) = node.expressions or [None]
    if not (isinstance(argument, exp.Literal) and argument.is_string):
        checks.element(E.DYNAMIC_SQL, "IDENTIFIER")
        return
    try:
        table = exp.to_table(argument.this, dialect=_Dialect)
    except SqlglotError:
        return
    _table(table, checks)


def _call(node: exp.Anonymous, checks: Checks) -> None:
    name = node.name
    if name.upper() == "PARTITION" and isinstance(node.parent, exp.AddPartition | exp.Partition):
        return
    if name.upper() == "IDENTIFIER":
        return  # as a relation: checked on its table; as a function name: the job checks it
    if isinstance(node.parent, exp.Table):
        checks.function(name)  # a table-valued function's name
        return
    checks.function(_qualified(node))


def _qualified(node: exp.Anonymous) -> str:
    """The function's name with its qualifier (``a.b.f``), as the reference reads it."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return parent.this.sql(dialect=_Dialect).replace("`", "") + "." + node.name
    return node.name


def _path_options(node: exp.OptionsProperty, checks: Checks) -> None:
    """``OPTIONS (path '<path>')`` of a table or a temporary view: where it reads and writes."""
    for option in node.expressions:
        if not isinstance(option, exp.Property):
            continue
        key = option.this.name if isinstance(option.this, exp.Expression) else str(option.this)
        value = option.args.get("value")
        if key.lower() in ("path", "paths") and isinstance(value, exp.Literal):
            checks.location(value.this)
