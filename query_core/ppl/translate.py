"""A PPL query to Spark SQL text.

The query becomes one ``SELECT`` block after another. A command adds to the current block while
SQL allows it (``where``, ``eval``, ``fields``, a ``join`` extend the same ``SELECT ... FROM ...
WHERE``), and otherwise wraps the block as a subquery, ``SELECT ... FROM (<block>) AS _sN``, with
``N`` counting wrapped blocks from 1, so the text is deterministic. Staying in one block is what
keeps a join's aliases usable (``l1.l_orderkey`` in a later ``where``, a subsearch correlated with
them), as the reference's plans keep them: a subquery would hide them. A field an ``eval`` defined
in the current block is replaced by its definition where it is used, since SQL cannot refer to a
``SELECT`` alias in ``WHERE``. Spark's optimizer collapses the nesting.

Most commands need nothing but the query text. A few need the names of their input's columns
(``eval`` and ``parse`` of a name that may exist, ``fillnull`` without a list, ``lookup`` without
outputs, a wildcard ``rename``, ``source=t1, t2``): those ask the ``columns`` callback, once per
command, unless the column list is known (after ``fields``, ``stats``, ...). Unknown fields are
otherwise left to Spark's analysis, which reports them in its own words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from query_core.ppl import ast
from query_core.ppl.errors import PplSemanticError
from query_core.ppl.expressions import (
    Env,
    aggregation_sql,
    aliased,
    expr_sql,
    field_refs,
    field_sql,
    is_volatile,
    ppl_text,
    quote_name,
    span_name,
    span_sql,
    string_sql,
    table_sql,
    unresolved,
)
from query_core.ppl.extract import GROK_PATTERNS, ExtractPattern, grok_regex, named_groups
from query_core.ppl.parser import parse_ppl

__all__ = [
    "GROK_PATTERNS",
    "ColumnsOf",
    "ExtractPattern",
    "grok_regex",
    "named_groups",
    "quote_name",
    "string_sql",
    "to_spark_sql",
]

ColumnsOf = Callable[[str], list[str]]

#: Past this size, a definition is not copied into later expressions: the block is wrapped.
_MAX_INLINE = 4000

#: The counter of generated subquery aliases, shared by a query and its subsearches.
_ALIASES: ContextVar[list[int]] = ContextVar("ppl_aliases")


def to_spark_sql(query: ast.Query | str, columns: ColumnsOf) -> str:
    """The Spark SQL text of ``query`` (PPL text is parsed first, raising :class:`PplSyntaxError`).

    ``columns(sql)`` must return the output column names of the SQL relation ``sql``; it is only
    called for commands that need their input's columns. Raises :class:`PplSemanticError` for what
    cannot be translated (an unknown function, a command the reference refuses).
    """
    parsed = parse_ppl(query) if isinstance(query, str) else query
    token = _ALIASES.set([0])
    try:
        if isinstance(parsed.source, ast.Describe):
            body = f"DESCRIBE TABLE {table_sql(parsed.source.table)}"
        else:
            body = pipeline_sql(parsed.source, parsed.commands, columns)
    except RecursionError:
        raise PplSemanticError("The query is nested too deeply to translate") from None
    finally:
        _ALIASES.reset(token)
    if parsed.explain is None:
        return body
    mode = "" if parsed.explain == "simple" else parsed.explain.upper() + " "
    return f"EXPLAIN {mode}{body}"


def pipeline_sql(source: ast.Search | ast.Describe, commands: Sequence[ast.Command], columns: ColumnsOf) -> str:
    """The SQL of ``source | commands...``."""
    if isinstance(source, ast.Describe):
        raise PplSemanticError("describe is only allowed as a whole query")
    translator = _Translator(columns)
    rest = translator.search(source, commands)
    for command in rest:
        translator.command(command)
    return translator.block.sql()


def _next_alias() -> str:
    counter = _ALIASES.get()
    counter[0] += 1
    return f"_s{counter[0]}"


# -- a SELECT block ------------------------------------------------------------------------------


@dataclass
class _Item:
    """One item of a select list: an expression and its output name; ``star`` for ``*``/``q.*``."""

    sql: str
    name: str = ""
    star: bool = False

    def text(self) -> str:
        if self.star or self.sql.endswith("." + quote_name(self.name)):
            return self.sql
        return aliased(self.sql, self.name)


@dataclass
class _Block:
    """``SELECT <items> FROM <source> [WHERE ...] [GROUP BY ...] [ORDER BY ...] [LIMIT ...]``.

    ``items`` ``None`` is ``SELECT *``. ``relations`` are the qualifiers of the relations joined in
    ``source``, so a ``*`` can be spelled out per relation when columns are added before a join.
    ``defs`` are the fields this block's ``eval`` defined (lower-cased name to SQL). ``closed`` is
    set once the block aggregates, windows or limits: then nothing but ``sort``/``head`` may add to it.
    """

    source: str
    relations: list[str]
    where: list[str] = field(default_factory=list)
    items: list[_Item] | None = None
    defs: dict[str, str] = field(default_factory=dict)
    group_by: list[str] = field(default_factory=list)
    order_by: str = ""
    limit: str = ""
    closed: bool = False
    #: A single table as written, when the block is nothing but ``SELECT * FROM <table>``.
    table: str | None = None
    #: Lower-cased names this block dropped (``fields -``, ``rename``): its source still has them.
    hidden: set[str] = field(default_factory=set)

    def sql(self) -> str:
        select = "*" if self.items is None else ", ".join(i.text() for i in self.items)
        text = f"SELECT {select} FROM {self.source}"
        if self.where:
            text += " WHERE " + " AND ".join(self.where)
        if self.group_by:
            text += " GROUP BY " + ", ".join(self.group_by)
        if self.order_by:
            text += " ORDER BY " + self.order_by
        if self.limit:
            text += " " + self.limit
        return text

    def names(self) -> list[str] | None:
        """The output names of an explicit select list (no ``*``), else None."""
        if self.items is None or any(i.star for i in self.items):
            return None
        return [i.name for i in self.items]

    def exposes(self, refs: Iterable[ast.Field]) -> bool:
        """Whether every field in ``refs`` can be resolved here as it would be on this block's
        output: with an explicit select list, only its names (and only unqualified) are."""
        names = self.names()
        known = {n.lower() for n in names} if names is not None else None
        for ref in refs:
            if ref.parts[0].lower() in self.hidden:
                return False
            if len(ref.parts) > 1 and names is not None:
                return False
            if known is not None and ref.parts[0].lower() not in known:
                return False
        return True


# -- the translator ------------------------------------------------------------------------------


class _Names:
    """The lower-cased names of the entries of one list, and whether :meth:`_Translator._put`
    made that list (then no one else holds it, and it may grow in place)."""

    def __init__(self) -> None:
        self.entries: list[Any] | None = None
        self.names: set[str] = set()
        self.made = False

    def of(self, entries: list[Any]) -> set[str]:
        """The lower-cased names in ``entries``."""
        if entries is not self.entries:
            self.entries, self.made = entries, False
            self.names = {n.lower() for n in map(_entry_name, entries) if n is not None}
        return self.names

    def add(self, entries: list[Any], entry: Any, key: str) -> list[Any]:
        """``entries`` with ``entry`` (named ``key``) last: the same list when this made it,
        else a new one (the caller's stays as it was)."""
        if entries is not self.entries or not self.made:
            names = set(self.of(entries))
            entries = list(entries)
            self.entries, self.names, self.made = entries, names, True
        entries.append(entry)
        self.names.add(key)
        return entries


def _entry_name(entry: Any) -> str | None:
    """An item's output name (None for a star), or a column name."""
    if isinstance(entry, _Item):
        return None if entry.star else entry.name
    return str(entry)


@dataclass
class _Translator:
    """The current block and, when known without asking, its output columns (``known``)."""

    columns: ColumnsOf
    block: _Block = field(default_factory=lambda: _Block("", []))
    known: list[str] | None = None
    #: The tables of the pipeline's source, which an appendcol sub-search reads again.
    source: ast.Search | None = None
    #: The lists :meth:`_put` made itself (no one else holds them) and the lower-cased names in
    #: them: an ``eval`` of thousands of assignments adds each in constant time, not by copying
    #: and scanning what the ones before added.
    _grown_items: _Names = field(default_factory=_Names)
    _grown_known: _Names = field(default_factory=_Names)

    # helpers
    def env(self) -> Env:
        return Env(self.subsearch, self.block.defs)

    def subsearch(self, query: ast.Query) -> str:
        assert isinstance(query.source, ast.Search)
        return pipeline_sql(query.source, query.commands, self.columns)

    def sql(self, expr: ast.Expr) -> str:
        return expr_sql(expr, self.env())

    def input_columns(self) -> list[str]:
        if self.known is None:
            self.known = list(self.columns(self.block.sql()))
        return list(self.known)

    def wrap(self) -> None:
        """Start a new block over the current one."""
        alias = _next_alias()
        self.block = _Block(f"({self.block.sql()}) AS {alias}", [alias])

    def open_block(self, refs: Iterable[ast.Field] = ()) -> _Block:
        """The current block if a command may add to it (not closed, its fields visible), else a
        new block over it."""
        if self.block.closed or not self.block.exposes(refs):
            self.wrap()
        return self.block

    def set_items(self, items: list[_Item], names: list[str] | None) -> None:
        self.block.items = items
        self.block.table = None
        self.known = names

    # search
    def search(self, search: ast.Search, commands: Sequence[ast.Command]) -> Sequence[ast.Command]:
        """Open the first block from the source; returns the commands left to translate."""
        self.source = ast.Search(search.table, None, None, search.more_tables, search.subsearch)
        rest = list(commands)
        if search.more_tables:
            rest = self._multi_source(search, rest)
        elif search.subsearch is not None:
            alias = search.alias or _next_alias()
            self.block = _Block(f"({self.subsearch(search.subsearch)}) AS {quote_name(alias)}", [quote_name(alias)])
        else:
            table = table_sql(search.table)
            if search.alias is not None:
                self.block = _Block(f"{table} AS {quote_name(search.alias)}", [quote_name(search.alias)])
            else:
                self.block = _Block(table, [quote_name(search.table.parts[-1])], table=table)
        if search.filter is not None:
            self.block.where.append(self.sql(search.filter))
            self.block.table = None
        return rest

    def _multi_source(self, search: ast.Search, commands: list[ast.Command]) -> list[ast.Command]:
        """``source = t1, t2``: a correlate joins the tables, each filtered by the commands before
        it; without one, the tables' rows are one relation (matched by column name, a column
        missing from a table is null), as the reference reads several indexes."""
        tables = [search.table, *search.more_tables]
        at = next((i for i, c in enumerate(commands) if isinstance(c, ast.Correlate)), None)
        if at is not None:
            correlate = commands[at]
            assert isinstance(correlate, ast.Correlate)
            self._correlate(tables, search.filter, commands[:at], correlate)
            return commands[at + 1 :]
        branches = [(table_sql(t), self.columns(f"SELECT * FROM {table_sql(t)}")) for t in tables]
        names: list[str] = []
        for _, cols in branches:
            names.extend(c for c in cols if c.lower() not in {n.lower() for n in names})
        selects = []
        for table, cols in branches:
            have = {c.lower() for c in cols}
            items = [quote_name(n) if n.lower() in have else f"NULL AS {quote_name(n)}" for n in names]
            selects.append(f"SELECT {', '.join(items)} FROM {table}")
        alias = _next_alias()
        self.block = _Block(f"({' UNION ALL '.join(selects)}) AS {alias}", [alias])
        if search.alias is not None:
            self.block = _Block(f"({self.block.sql()}) AS {quote_name(search.alias)}", [quote_name(search.alias)])
        self.known = names
        return commands

    def _correlate(
        self,
        tables: list[ast.TableName],
        condition: ast.Expr | None,
        before: list[ast.Command],
        correlate: ast.Correlate,
    ) -> None:
        if correlate.kind == "self":
            raise PplSemanticError(_SELF_CORRELATION)
        if len(tables) != 2:
            raise PplSemanticError(f"Correlation command with `{correlate.kind}` type must have two source tables")
        if len(correlate.mappings) != len(correlate.fields):
            raise PplSemanticError(
                "Correlation command was called with `fields` attribute having different elements from the 'mapping' attributes"
            )
        aliases = [quote_name(t.parts[-1]) for t in tables]
        sides = []
        for table, alias in zip(tables, aliases, strict=True):
            sql = pipeline_sql(ast.Search(table, condition), before, self.columns)
            sides.append(f"({sql}) AS {alias}")
        conditions = [
            f"({_correlated_field(left, tables, aliases)} {op} {_correlated_field(right, tables, aliases)})"
            for left, op, right in correlate.mappings
        ]
        exact = correlate.kind == "exact"
        join = "INNER JOIN" if exact else "FULL OUTER JOIN"
        on = (" AND " if exact else " OR ").join(conditions)
        self.block = _Block(f"{sides[0]} {join} {sides[1]} ON {on}", aliases)

    def command(self, command: ast.Command) -> None:
        handler = getattr(self, "on_" + type(command).__name__.lower())
        handler(command)

    # -- filtering and projection -----------------------------------------------------------------

    def on_where(self, command: ast.Where) -> None:
        block = self.open_block(field_refs(command.condition))
        block.where.append(self.sql(command.condition))
        block.table = None

    def on_fields(self, command: ast.Fields) -> None:
        if command.exclude:
            self._drop_fields(command.fields)
            return
        self.open_block(command.fields)
        items = [_Item(self.sql(ref), ref.parts[-1]) for ref in command.fields]
        self.set_items(items, [i.name for i in items])

    def _drop_fields(self, drop: Sequence[ast.Field]) -> None:
        block = self.open_block(drop)
        if any(i.star and i.sql != "*" for i in block.items or []):
            self.wrap()  # a star that already excludes, or several relations' stars
            block = self.block
        lowered = {f.name.lower() for f in drop}
        if self.known is not None:
            missing = lowered - {c.lower() for c in self.known}
            if missing:
                raise unresolved(next(f.name for f in drop if f.name.lower() in missing))
            if not [c for c in self.known if c.lower() not in lowered]:
                raise PplSemanticError("fields - cannot remove every field")
        items = block.items or [_Item("*", star=True)]
        explicit = {i.name.lower() for i in items if not i.star}
        rest = [f for f in drop if f.name.lower() not in explicit]
        if rest and not any(i.star for i in items):
            raise unresolved(rest[0].name)
        excluded = ", ".join(field_sql(f) for f in rest)
        items = [
            (_Item(f"* EXCEPT ({excluded})", star=True) if rest else i) if i.star else i
            for i in items
            if i.star or i.name.lower() not in lowered
        ]
        for name in lowered:
            block.defs.pop(name, None)
        block.hidden |= lowered
        known = None if self.known is None else [c for c in self.known if c.lower() not in lowered]
        self.set_items(items, known)

    def on_eval(self, command: ast.Eval) -> None:
        refs = [r for a in command.assignments for r in field_refs(a.value)]
        defined = {a.target.name.lower() for a in command.assignments}
        self.open_block([r for r in refs if r.name.lower() not in defined])
        for assignment in command.assignments:
            self._assign(assignment.target.name, assignment.value)

    def _assign(self, name: str, value: ast.Expr) -> None:
        """One new or replaced column; a replaced column keeps its place."""
        sql = self.sql(value)
        if len(sql) > _MAX_INLINE and self.block.defs:
            self.wrap()
            sql = self.sql(value)
        self._put(name, sql)
        if is_volatile(value) or len(sql) > _MAX_INLINE // 4:
            # Not copied where it is used: a later command reads the column from a new block.
            self.block.closed = True

    def _put(self, name: str, sql: str) -> None:
        """Set the output column ``name`` to ``sql``: replaced in place if the input has it."""
        block = self.block
        key = name.lower()
        items = block.items
        if items is not None and key in self._grown_items.of(items):
            block.items = [_Item(sql, name) if not i.star and i.name.lower() == key else i for i in items]
        elif key in block.defs or (self._has_column(name)):
            self._replace_column(name, sql)
        else:
            block.items = self._grown_items.add(items or [_Item("*", star=True)], _Item(sql, name), key)
            if self.known is not None:
                self.known = self._grown_known.add(self.known, name, key)
        block.defs[key] = sql
        block.table = None

    def _has_column(self, name: str) -> bool:
        if self.known is None:
            self.input_columns()
        assert self.known is not None
        return name.lower() in self._grown_known.of(self.known)

    def _replace_column(self, name: str, sql: str) -> None:
        """Spell out the select list from the input columns, with ``name`` replaced by ``sql``."""
        block = self.block
        if len(block.relations) > 1 or any(i.star and i.sql != "*" for i in block.items or []):
            # Several relations, or a star that excludes: only Spark can spell their columns.
            self.wrap()
            block = self.block
        current = self.input_columns()
        extra = [i for i in block.items or [] if not i.star]
        by_name = {i.name.lower(): i for i in extra}
        items = []
        for column in current:
            if column.lower() == name.lower():
                items.append(_Item(sql, column))
            elif column.lower() in by_name:
                items.append(by_name[column.lower()])
            else:
                items.append(_Item(quote_name(column), column))
        block.items = items
        self.known = [i.name for i in items]

    def on_rename(self, command: ast.Rename) -> None:
        """The new name comes last and the old one is dropped, as in the reference."""
        pairs = self._rename_pairs(command)
        if self.known is not None:
            have = {c.lower() for c in self.known}
            missing = next((old for old, _ in pairs if old.name.lower() not in have), None)
            if missing is not None:
                raise unresolved(missing.name)
        block = self.open_block([old for old, _ in pairs])
        items = block.items or [_Item("*", star=True)]
        if any(i.star and i.sql != "*" for i in items):
            self.wrap()
            block, items = self.block, [_Item("*", star=True)]
        renamed: list[_Item] = []
        from_star: list[ast.Field] = []
        for old, new in pairs:
            at = next((k for k, i in enumerate(items) if not i.star and i.name.lower() == old.name.lower()), None)
            if at is not None:
                renamed.append(_Item(items[at].sql, new.name))
                items = [*items[:at], *items[at + 1 :]]
            elif any(i.star for i in items):
                from_star.append(old)
                renamed.append(_Item(field_sql(old), new.name))
            else:
                raise unresolved(old.name)
        if from_star:
            excluded = ", ".join(field_sql(f) for f in from_star)
            items = [_Item(f"* EXCEPT ({excluded})", star=True) if i.star else i for i in items]
        for old, new in pairs:
            block.defs.pop(old.name.lower(), None)
            block.hidden.add(old.name.lower())
            block.hidden.discard(new.name.lower())
        for item in renamed:
            block.defs[item.name.lower()] = item.sql
        known = None
        if self.known is not None:
            olds = {o.name.lower() for o, _ in pairs}
            known = [c for c in self.known if c.lower() not in olds] + [n.name for _, n in pairs]
        self.set_items([*items, *renamed], known)

    def _rename_pairs(self, command: ast.Rename) -> list[tuple[ast.Field, ast.Field]]:
        """The pairs of names, wildcard patterns (``*`` for any text) expanded over the input."""
        pairs: list[tuple[ast.Field, ast.Field]] = []
        for old, new in command.pairs:
            if "*" not in old.name:
                if "*" in new.name:
                    raise PplSemanticError(f"rename {old.name} as {new.name}: a wildcard must be on both sides")
                pairs.append((old, new))
                continue
            pattern = re.compile("^" + "(.*)".join(re.escape(p) for p in old.name.split("*")) + "$", re.I)
            if new.name.count("*") != old.name.count("*"):
                raise PplSemanticError(f"rename {old.name} as {new.name}: both sides need as many wildcards")
            for column in self.input_columns():
                match = pattern.match(column)
                if match is not None:
                    parts = new.name.split("*")
                    renamed = parts[0] + "".join(g + p for g, p in zip(match.groups(), parts[1:], strict=True))
                    pairs.append((ast.Field((column,)), ast.Field((renamed,))))
        return pairs

    # -- aggregation and ordering -----------------------------------------------------------------

    def on_stats(self, command: ast.Stats) -> None:
        if command.event:
            self._eventstats(command)
            return
        refs = [r for a in command.aggregations for r in field_refs(a.call)]
        refs += [g.field for g in command.by] + ([*field_refs(command.span.field)] if command.span else [])
        block = self.open_block(refs)
        env = self.env()
        items: list[_Item] = []
        for agg in command.aggregations:
            items.append(_Item(aggregation_sql(agg.call, env), agg.alias or agg.call.text or ppl_text(agg.call)))
        keys = [expr_sql(g.field, env) for g in command.by]
        items.extend(_Item(k, g.alias or g.field.name) for g, k in zip(command.by, keys, strict=True))
        if command.span is not None:
            keys.append(span_sql(command.span, env))
            items.append(_Item(keys[-1], span_name(command.span)))
        block.group_by = keys
        block.order_by = ""
        block.closed = True
        block.defs = {}
        self.set_items(items, [i.name for i in items])

    def _eventstats(self, command: ast.Stats) -> None:
        refs = [r for a in command.aggregations for r in field_refs(a.call)] + [g.field for g in command.by]
        block = self.open_block(refs)
        env = self.env()
        keys = [expr_sql(g.field, env) for g in command.by]
        if command.span is not None:
            keys.append(span_sql(command.span, env))
        window = f"OVER (PARTITION BY {', '.join(keys)})" if keys else "OVER ()"
        added = []
        for agg in command.aggregations:
            sql = _over(_windowed(aggregation_sql(agg.call, env), agg.call.name), window)
            added.append(_Item(sql, agg.alias or agg.call.text or ppl_text(agg.call)))
        block.items = [*(block.items or [_Item("*", star=True)]), *added]
        block.closed = True
        block.table = None
        self.known = None if self.known is None else [*self.known, *(i.name for i in added)]

    def on_sort(self, command: ast.Sort) -> None:
        block = self.block
        if block.limit or block.group_by or block.closed or not block.exposes([k.field for k in command.keys]):
            self.wrap()
            block = self.block
        env = self.env()
        block.order_by = ", ".join(_order_sql(k, env) for k in command.keys)
        block.table = None

    def on_head(self, command: ast.Head) -> None:
        if self.block.limit:
            self.wrap()
        offset = f" OFFSET {command.offset}" if command.offset else ""
        self.block.limit = f"LIMIT {command.size}{offset}"
        self.block.closed = True
        self.block.table = None

    def on_toprare(self, command: ast.TopRare) -> None:
        """The N most (top) or least (rare) common values, per group of the ``by`` fields, as the
        reference's pages show; ties go by the values, ascending, so the answer is stable."""
        block = self.open_block([*command.fields, *command.by])
        env = self.env()
        count_name = "count_" + command.fields[0].name
        groups = [*command.fields, *command.by]
        keys = [expr_sql(f, env) for f in groups]
        # top_approx and rare_approx count exactly: an exact count is the best approximation, and
        # the reference's approx_count_distinct of the grouped field is 1 in every group.
        count = "count(*)"
        items = [_Item(count, count_name), *(_Item(k, f.name) for k, f in zip(keys, groups, strict=True))]
        direction = "ASC" if command.rare else "DESC"
        order = ", ".join(
            [f"{quote_name(count_name)} {direction}", *(f"{quote_name(f.name)} ASC" for f in command.fields)]
        )
        block.group_by = keys
        block.order_by = ""  # an earlier sort orders rows the grouping no longer has, as in stats
        block.defs = {}
        block.closed = True
        names = [i.name for i in items]
        if not command.by:
            self.set_items(items, names)
            block.order_by = order
            block.limit = f"LIMIT {command.number}"
            return
        partition = ", ".join(keys[len(command.fields) :])
        inner_order = ", ".join([f"{count} {direction}", *(f"{k} ASC" for k in keys[: len(command.fields)])])
        rank = f"row_number() OVER (PARTITION BY {partition} ORDER BY {inner_order})"
        self.set_items([*items, _Item(rank, "__ppl_rank")], [*names, "__ppl_rank"])
        self.wrap()
        self.block.where.append(f"__ppl_rank <= {command.number}")
        self.set_items([_Item(quote_name(n), n) for n in names], names)
        self.block.order_by = ", ".join([*(f"{quote_name(f.name)} ASC" for f in command.by), order])

    def on_dedup(self, command: ast.Dedup) -> None:
        if command.consecutive:
            raise PplSemanticError("Consecutive deduplication is not supported")
        block = self.open_block(command.fields)
        env = self.env()
        keys = ", ".join(expr_sql(f, env) for f in command.fields)
        rn = "__ppl_dedup_rn"
        block.items = [
            *(block.items or [_Item("*", star=True)]),
            _Item(f"row_number() OVER (PARTITION BY {keys} ORDER BY {keys})", rn),
        ]
        block.table = None
        block.closed = True
        known = self.known
        self.wrap()
        if command.keep_empty:
            empty = " OR ".join(f"{field_sql(f)} IS NULL" for f in command.fields)
            condition = f"({rn} <= {command.number} OR {empty})"
        else:
            present = " AND ".join(f"{field_sql(f)} IS NOT NULL" for f in command.fields)
            condition = f"({rn} <= {command.number} AND {present})"
        self.block.where.append(condition)
        self.set_items([_Item(f"* EXCEPT ({rn})", star=True)], known)

    def on_trendline(self, command: ast.Trendline) -> None:
        refs = [c.field for c in command.computations] + ([command.sort.field] if command.sort else [])
        block = self.open_block(refs)
        env = self.env()
        order = f"ORDER BY {_order_sql(command.sort, env)} " if command.sort else ""
        added = []
        for comp in command.computations:
            if comp.kind == "wma" and command.sort is None:
                raise PplSemanticError("trendline wma(...) needs a sort field")
            window = f"OVER ({order}ROWS BETWEEN {comp.points - 1} PRECEDING AND CURRENT ROW)"
            added.append(_Item(_moving_average(comp, window, env), comp.alias or f"{comp.field.name}_trendline"))
        block.items = [*(block.items or [_Item("*", star=True)]), *added]
        if command.sort:
            block.order_by = _order_sql(command.sort, env)
        block.closed = True
        block.table = None
        self.known = None if self.known is None else [*self.known, *(i.name for i in added)]

    # -- extraction -------------------------------------------------------------------------------

    def on_parse(self, command: ast.Parse) -> None:
        regex = grok_regex(command.pattern) if command.grok else command.pattern
        extract = named_groups(regex)
        if not extract.groups:
            raise PplSemanticError(f"The pattern {command.pattern!r} has no named group to extract")
        self.open_block(list(field_refs(command.field)))
        source = self.sql(command.field)
        for name, number in extract.groups:
            self._put(name, f"regexp_extract({source}, {string_sql(extract.regex)}, {number})")

    def on_patterns(self, command: ast.Patterns) -> None:
        self.open_block(list(field_refs(command.field)))
        pattern = command.pattern or "[a-zA-Z0-9]"
        value = f"coalesce(regexp_replace({self.sql(command.field)}, {string_sql(pattern)}, ''), '')"
        self._put(command.new_field, value)

    def on_fillnull(self, command: ast.FillNull) -> None:
        if command.assignments:
            fills = [(a.target, a.value) for a in command.assignments]
        else:
            assert command.value is not None
            targets = command.fields or tuple(ast.Field((c,)) for c in self.input_columns())
            fills = [(t, command.value) for t in targets]
        block = self.open_block([t for t, _ in fills])
        if any(i.star and i.sql != "*" for i in block.items or []):
            self.wrap()
            block = self.block
        env = self.env()
        values = [(t, f"coalesce({expr_sql(t, env)}, {expr_sql(v, env)})") for t, v in fills]
        # As the reference does, the filled fields come last, in the order they are given.
        names = {t.name.lower() for t, _ in values}
        items = [i for i in block.items or [_Item("*", star=True)] if i.star or i.name.lower() not in names]
        explicit = {i.name.lower() for i in block.items or [] if not i.star}
        from_star = [t for t, _ in values if t.name.lower() not in explicit]
        if from_star:
            if not any(i.star for i in items):
                raise unresolved(from_star[0].name)
            excluded = ", ".join(field_sql(t) for t in from_star)
            items = [_Item(f"* EXCEPT ({excluded})", star=True) if i.star else i for i in items]
        items.extend(_Item(sql, t.parts[-1]) for t, sql in values)
        for target, sql in values:
            block.defs[target.name.lower()] = sql
        known = None
        if self.known is not None:
            known = [*(c for c in self.known if c.lower() not in names), *(t.parts[-1] for t, _ in values)]
        self.set_items(items, known)

    # -- structure --------------------------------------------------------------------------------

    def on_flatten(self, command: ast.Flatten) -> None:
        """A struct becomes its fields; an array of structs one row per element (a null one: one
        row of nulls); the new fields come last, named by the aliases if given, and the field is
        dropped, as in the reference."""
        self.wrap()
        alias = self.block.relations[0]
        column = field_sql(command.field)
        struct_fields = self._probe(f"SELECT {column}.* FROM {self.block.source}")
        generated = _next_alias()
        if struct_fields is not None:
            names = list(command.aliases) or struct_fields
            if len(names) != len(struct_fields):
                raise PplSemanticError(
                    f"flatten {command.field.name}: {len(struct_fields)} fields, {len(names)} aliases"
                )
            items = [_Item(f"{alias}.* EXCEPT ({column})", star=True)]
            items += [_Item(f"{column}.{quote_name(f)}", n) for f, n in zip(struct_fields, names, strict=True)]
            self.block.items = items
            self.block.defs.update({i.name.lower(): i.sql for i in items[1:]})
            self.known = None
            return
        names_sql = f" AS {', '.join(quote_name(a) for a in command.aliases)}" if command.aliases else ""
        source = f"{self.block.source} LATERAL VIEW OUTER inline({column}) {generated}{names_sql}"
        self.block = _Block(source, [alias, generated])
        self.block.items = [_Item(f"{alias}.* EXCEPT ({column})", star=True), _Item(f"{generated}.*", star=True)]
        self.known = None

    def on_expand(self, command: ast.Expand) -> None:
        """One row per element of an array, named as the field (or its alias); a map gives one
        row per entry, a struct of key and value. An empty or null one gives no row."""
        self.wrap()
        alias = self.block.relations[0]
        column = field_sql(command.field)
        is_map = self._probe(f"SELECT map_keys({column}) FROM {self.block.source}") is not None
        values = f"map_entries({column})" if is_map else column
        generated = _next_alias()
        name = quote_name(command.alias or command.field.parts[-1])
        self.block = _Block(
            f"{self.block.source} LATERAL VIEW explode({values}) {generated} AS {name}", [alias, generated]
        )
        self.block.items = [_Item(f"{alias}.* EXCEPT ({column})", star=True), _Item(f"{generated}.*", star=True)]
        self.known = None

    def _probe(self, sql: str) -> list[str] | None:
        """The columns of ``sql``, or None when Spark does not accept it: how a field's kind
        (struct, array, map) is told, since the callback gives names, not types."""
        try:
            return list(self.columns(sql))
        except Exception:  # noqa: BLE001 - any refusal means "not of this kind"; the real query reports errors
            return None

    def on_fieldsummary(self, command: ast.FieldSummary) -> None:
        if not command.fields:
            raise PplSemanticError("fieldsummary needs includefields = <fields>")
        self.wrap()
        base = self.block.sql()
        selects = [_summary_sql(f, command.nulls, base) for f in command.fields]
        alias = _next_alias()
        self.block = _Block(f"({' UNION ALL '.join(selects)}) AS {alias}", [alias])
        self.known = list(_SUMMARY_COLUMNS)

    def on_appendcol(self, command: ast.AppendCol) -> None:
        """The sub-search's rows set beside the main rows by row number (the main rows first, in
        the order they come), as the reference pairs them; the shorter side is padded with nulls."""
        main = self.block.sql()
        assert self.source is not None
        sub = pipeline_sql(self.source, command.commands, self.columns)
        if command.override and not isinstance(command.commands[-1], ast.Fields | ast.Stats):
            raise PplSemanticError("Not Supported operation: APPENDCOL should specify the output fields")
        left, right = _next_alias(), _next_alias()
        numbered = "row_number() OVER (ORDER BY 1)"
        rn = "__ppl_appendcol_rn"
        left_sql = f"(SELECT *, {numbered} AS {rn} FROM ({main})) AS {left}"
        right_sql = f"(SELECT *, {numbered} AS {rn} FROM ({sub})) AS {right}"
        join = f"{left_sql} FULL OUTER JOIN {right_sql} ON {left}.{rn} = {right}.{rn}"
        if command.override:
            sub_names = self.columns(sub)
            excluded = ", ".join([f"{left}.{rn}", *(f"{left}.{quote_name(n)}" for n in sub_names)])
        else:
            excluded = f"{left}.{rn}"
        self.block = _Block(join, [left, right])
        self.block.items = [
            _Item(f"{left}.* EXCEPT ({excluded})", star=True),
            _Item(f"{right}.* EXCEPT ({right}.{rn})", star=True),
        ]
        self.block.order_by = f"coalesce({left}.{rn}, {right}.{rn})"
        self.block.closed = True
        self.known = None

    # -- joins ------------------------------------------------------------------------------------

    def on_join(self, command: ast.Join) -> None:
        kind = command.kind if command.condition is not None else "cross"
        block = self.block
        can_extend = (
            not block.closed
            and all(not i.star or i.sql == "*" for i in block.items or [])
            and block.names() is None
            and (not block.where or kind in ("inner", "left", "semi", "anti", "cross"))
        )
        if command.left_alias is not None and not (can_extend and block.table is not None):
            can_extend = False
        if block.where and len(block.relations) == 1:
            # A filtered table is joined filtered: as a subquery named as the table was, so its
            # name still qualifies its fields and its filter reads none of the right side's.
            can_extend = False
        if not can_extend:
            if command.left_alias is not None:
                alias = quote_name(command.left_alias)
            else:
                alias = block.relations[0] if len(block.relations) == 1 else _next_alias()
            self.block = _Block(f"({block.sql()}) AS {alias}", [alias])
            block = self.block
        elif command.left_alias is not None and block.table is not None:
            block.source = f"{block.table} AS {quote_name(command.left_alias)}"
            block.relations = [quote_name(command.left_alias)]
        right, qualifier = self._join_right(command)
        on = "" if command.condition is None else f" ON {self.sql(command.condition)}"
        extras = [i for i in block.items or [] if not i.star]
        if extras:
            stars = [_Item(f"{q}.*", star=True) for q in block.relations]
            right_star = [] if kind in ("semi", "anti") else [_Item(f"{qualifier}.*", star=True)]
            block.items = [*stars, *extras, *right_star]
        block.source = f"{block.source} {_JOIN_KEYWORDS[kind]} {right}{on}"
        if kind not in ("semi", "anti"):
            block.relations = [*block.relations, qualifier]
        block.table = None
        self.known = None

    def _join_right(self, command: ast.Join) -> tuple[str, str]:
        """The right side's SQL and the qualifier of its columns."""
        if isinstance(command.right, ast.TableName):
            table = table_sql(command.right)
            if command.right_alias:
                return f"{table} AS {quote_name(command.right_alias)}", quote_name(command.right_alias)
            return table, quote_name(command.right.parts[-1])
        alias = quote_name(command.right_alias or _next_alias())
        return f"({self.subsearch(command.right)}) AS {alias}", alias

    def on_lookup(self, command: ast.Lookup) -> None:
        """A left join with the lookup table, as the reference's lookup.

        With outputs, REPLACE sets each output to the looked-up value (null where nothing
        matched) and APPEND keeps the input's value where it is not null; an output that is an
        input field is replaced, and the outputs come last. Without outputs, every lookup field
        but the keys is added, replacing an input field of the same name.
        """
        lookup = table_sql(command.table)
        current = self.input_columns()
        self.wrap()
        left = self.block.relations[0]
        right = _next_alias()
        on = " AND ".join(f"{right}.{field_sql(m)} = {left}.{field_sql(s)}" for m, s in command.mappings)
        keys = {m.name.lower() for m, _ in command.mappings}
        outputs = list(command.outputs)
        if not outputs:
            lookup_columns = self.columns(f"SELECT * FROM {lookup}")
            outputs = [(ast.Field((c,)), ast.Field((c,))) for c in lookup_columns if c.lower() not in keys]
        existing = {c.lower(): c for c in current}
        replaced = [existing[out.name.lower()] for _, out in outputs if out.name.lower() in existing]
        star = (
            f"{left}.* EXCEPT ({', '.join(f'{left}.{quote_name(c)}' for c in replaced)})" if replaced else f"{left}.*"
        )
        items = [_Item(star, star=True)]
        for src, out in outputs:
            value = f"{right}.{field_sql(src)}"
            if command.strategy == "append" and out.name.lower() in existing:
                value = f"coalesce({left}.{quote_name(existing[out.name.lower()])}, {value})"
            items.append(_Item(value, out.name))
        self.block = _Block(f"{self.block.source} LEFT OUTER JOIN {lookup} AS {right} ON {on}", [left, right])
        lowered = {r.lower() for r in replaced}
        self.set_items(items, [*(c for c in current if c.lower() not in lowered), *(o.name for _, o in outputs)])

    def on_correlate(self, command: ast.Correlate) -> None:
        if command.kind == "self":
            raise PplSemanticError(_SELF_CORRELATION)
        raise PplSemanticError(f"Correlation command with `{command.kind}` type must have two source tables")


# -- helpers -------------------------------------------------------------------------------------

_SELF_CORRELATION = "correlate self is not supported: Spark needs two aliases of the table; use join left = a right = b"

_JOIN_KEYWORDS: dict[str, str] = {
    "inner": "INNER JOIN",
    "left": "LEFT OUTER JOIN",
    "right": "RIGHT OUTER JOIN",
    "full": "FULL OUTER JOIN",
    "cross": "CROSS JOIN",
    "semi": "LEFT SEMI JOIN",
    "anti": "LEFT ANTI JOIN",
}

#: The columns of fieldsummary, named as the reference names them.
_SUMMARY_COLUMNS = ("Field", "COUNT", "DISTINCT", "MIN", "MAX", "AVG", "MEAN", "STDDEV", "Nulls", "TYPEOF")


def _summary_sql(column: ast.Field, nulls: bool, base: str) -> str:
    """One fieldsummary row. A numeric statistic of a non-numeric field is null (with nulls=true,
    a null counts as 0), as a string cast to a number is in the reference."""
    ref = field_sql(column)
    text = f"CAST({ref} AS STRING)"
    number = f"try_cast(coalesce({text}, '0') AS DOUBLE)" if nulls else f"try_cast({text} AS DOUBLE)"
    items = [
        f"{string_sql(column.name)} AS Field",
        f"count({ref}) AS `COUNT`",
        f"count(DISTINCT {ref}) AS `DISTINCT`",
        f"CAST(min({ref}) AS STRING) AS `MIN`",
        f"CAST(max({ref}) AS STRING) AS `MAX`",
        f"avg({number}) AS `AVG`",
        f"avg({number}) AS `MEAN`",
        f"stddev({number}) AS `STDDEV`",
        f"count(1) - count({ref}) AS Nulls",
        f"typeof({ref}) AS `TYPEOF`",
    ]
    return f"SELECT {', '.join(items)} FROM ({base}) GROUP BY typeof({ref})"


def _correlated_field(ref: ast.Field, tables: list[ast.TableName], aliases: list[str]) -> str:
    """A mapping's ``table.field``: the table named as written (or by its last part) becomes its alias."""
    parts = ref.parts
    for table, alias in zip(tables, aliases, strict=True):
        for size in range(len(table.parts), 0, -1):
            if tuple(p.lower() for p in parts[:size]) == tuple(p.lower() for p in table.parts[-size:]):
                return ".".join([alias, *(quote_name(p) for p in parts[size:])])
    return field_sql(ref)


def _order_sql(key: ast.SortKey | None, env: Env) -> str:
    assert key is not None
    # The reference's order: ascending with nulls first, descending with nulls last (Spark's too).
    return f"{expr_sql(key.field, env)} {'DESC NULLS LAST' if key.descending else 'ASC NULLS FIRST'}"


def _over(aggregate: str, window: str) -> str:
    """``aggregate`` over ``window``. Spark has no distinct aggregation over a window, so a
    distinct count is the size of the window's set of (non-null) values."""
    distinct = re.fullmatch(r"count\(DISTINCT (.+)\)", aggregate, re.DOTALL)
    if distinct is not None:
        return f"size(collect_set({distinct.group(1)}) {window})"
    return f"{aggregate} {window}"


def _windowed(aggregate: str, name: str) -> str:
    """An aggregation usable with ``OVER``: it must be one call, not an expression around one."""
    depth = 0
    for i, char in enumerate(aggregate):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0 and i != len(aggregate) - 1:
                break
    else:
        if re.match(r"\w+\(", aggregate) and aggregate.endswith(")"):
            return aggregate
    if re.fullmatch(r"percentile_disc\([^()]*\) WITHIN GROUP \(ORDER BY .+\)", aggregate, re.DOTALL):
        return aggregate
    raise PplSemanticError(f"{name} is not supported in eventstats")


def _moving_average(comp: ast.TrendComputation, window: str, env: Env) -> str:
    value = expr_sql(comp.field, env)
    full = f"count(*) {window} >= {comp.points}"
    if comp.kind == "sma":
        return f"CASE WHEN {full} THEN avg({value}) {window} END"
    weights = comp.points * (comp.points + 1) // 2
    terms = " + ".join(f"{k} * nth_value({value}, {k}) {window}" for k in range(1, comp.points + 1))
    return f"CASE WHEN {full} THEN ({terms}) / {weights} END"
