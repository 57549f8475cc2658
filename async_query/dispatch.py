"""Which kind of query a POST is: the one classifier in front of the query handlers.

A query is classified once, at POST, with the one Flint parser (:func:`query_core.flint.parse`)
that the job also runs it with; GET and DELETE never re-parse: they find the handler from the
``sessionType`` of the statement's session document (:func:`kind_of_session`).

The rules are the dispatch table of ``docs/flint.md``, tried in order, first match wins (:data:`DISPATCH`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from query_core.flint import (
    AlterIndex,
    AnalyzeIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    DescribeIndex,
    DropIndex,
    IndexKind,
    IndexRef,
    RecoverIndexJob,
    RefreshIndex,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    Statement,
    VacuumIndex,
    flint_index_name,
    parse,
)
from query_core.ppl import parse_ppl
from query_core.states import SessionType


class QueryKind(StrEnum):
    """What runs a query, and so which handler serves its POST, GET and DELETE."""

    #: A statement in a reusable interactive session (plain Spark SQL, PPL, SHOW, DESCRIBE).
    INTERACTIVE = "interactive"
    #: A job of its own that ends when the statement does (manual CREATE, REFRESH, VACUUM).
    BATCH = "batch"
    #: A job that keeps an index refreshed until stopped (CREATE/ALTER with auto refresh).
    STREAMING = "streaming"
    #: Index work the plugin does itself, without Spark (DROP, ALTER to manual refresh).
    INDEX_DML = "index_dml"

    @property
    def session_type(self) -> SessionType:
        """The ``sessionType`` the session documents of this kind record."""
        return _SESSION_TYPES[self]


_SESSION_TYPES: dict[QueryKind, SessionType] = {
    QueryKind.INTERACTIVE: SessionType.INTERACTIVE,
    QueryKind.BATCH: SessionType.BATCH,
    QueryKind.STREAMING: SessionType.STREAMING,
    QueryKind.INDEX_DML: SessionType.LOCAL,
}
_KINDS_OF_SESSIONS: dict[SessionType, QueryKind] = {session: kind for kind, session in _SESSION_TYPES.items()}


def kind_of_session(session_type: SessionType) -> QueryKind:
    """The kind of the queries a session of ``session_type`` runs (what GET and DELETE route on)."""
    return _KINDS_OF_SESSIONS[session_type]


@dataclass(frozen=True)
class Classified:
    """A POST's query kind, with the Flint statement it holds (``None``: plain Spark SQL or PPL)
    and what to call it in messages (``what``: "DROP SKIPPING INDEX", "plain Spark SQL")."""

    kind: QueryKind
    statement: Statement | None = None
    what: str = "plain Spark SQL"


_CREATES = (CreateSkippingIndex, CreateCoveringIndex, CreateMaterializedView)


def _is(*types: type) -> Callable[[Statement], bool]:
    return lambda statement: isinstance(statement, types)


def _create_with_auto_refresh(statement: Statement) -> bool:
    return isinstance(statement, _CREATES) and statement.options.auto_refresh


def _alter_to_manual(statement: Statement) -> bool:
    return isinstance(statement, AlterIndex) and not statement.options.auto_refresh


@dataclass(frozen=True)
class Rule:
    """One row of the dispatch table: the statements it matches (``what`` names them) and their kind."""

    what: str
    matches: Callable[[Statement], bool]
    kind: QueryKind


#: The dispatch of ``docs/flint.md``, first match wins. Two statement forms the table does not name are
#: placed here on purpose: RECOVER INDEX JOB restarts an index's streaming refresh, so it is
#: streaming; ANALYZE SKIPPING INDEX only reads and answers rows, like DESCRIBE, so it is
#: interactive (as in the reference, where it falls through to the default).
DISPATCH: tuple[Rule, ...] = (
    Rule("DROP", _is(DropIndex), QueryKind.INDEX_DML),
    Rule("ALTER to auto_refresh = false", _alter_to_manual, QueryKind.INDEX_DML),
    Rule("CREATE with auto_refresh = true", _create_with_auto_refresh, QueryKind.STREAMING),
    Rule("other ALTER", _is(AlterIndex), QueryKind.STREAMING),
    Rule("RECOVER INDEX JOB", _is(RecoverIndexJob), QueryKind.STREAMING),
    Rule("other CREATE", _is(*_CREATES), QueryKind.BATCH),
    Rule("REFRESH", _is(RefreshIndex), QueryKind.BATCH),
    # The reference moved VACUUM to Spark: it runs where the checkpoint location can be reached.
    Rule("VACUUM", _is(VacuumIndex), QueryKind.BATCH),
    Rule(
        "SHOW, DESCRIBE, ANALYZE",
        _is(DescribeIndex, ShowFlintIndexes, ShowCoveringIndexes, ShowMaterializedViews, AnalyzeIndex),
        QueryKind.INTERACTIVE,
    ),
)


def kind_of(statement: Statement | None) -> QueryKind:
    """The kind of a parsed query: ``None`` (plain Spark SQL) and anything no rule names are interactive.

    A Flint statement form added to the parser without a rule here therefore runs interactively, as
    everything did before there were other kinds (the unit tests insist every form has a rule).
    """
    if statement is None:
        return QueryKind.INTERACTIVE
    for rule in DISPATCH:
        if rule.matches(statement):
            return rule.kind
    return QueryKind.INTERACTIVE


def classify(lang: str, query: str) -> Classified:
    """Classify a POST's query. PPL is interactive, once its syntax is checked.

    Raises :class:`query_core.flint.FlintSyntaxError` (a 400) when ``query`` starts like a Flint
    statement but is not a valid one, and :class:`query_core.ppl.PplSyntaxError` (a 400) for PPL
    that does not parse.
    """
    if lang.lower() == "ppl":
        parse_ppl(query)  # a syntax error is a 400 now, not a FAILED statement later
        return Classified(QueryKind.INTERACTIVE, None, "PPL")
    statement = parse(query)
    if statement is None:
        return Classified(QueryKind.INTERACTIVE)
    return Classified(kind_of(statement), statement, describe(statement))


def index_named(statement: Statement | None, datasource: str) -> str | None:
    """The OpenSearch index of the Flint index ``statement`` names, its table qualified with
    ``datasource`` as the job qualifies it (None: the statement names no index)."""
    if isinstance(statement, RecoverIndexJob):
        return statement.index_name
    ref = getattr(statement, "index", None)
    return flint_index_name(ref, datasource) if isinstance(ref, IndexRef) else None


_VERBS: dict[type, str] = {
    CreateSkippingIndex: "CREATE",
    CreateCoveringIndex: "CREATE",
    CreateMaterializedView: "CREATE",
    RefreshIndex: "REFRESH",
    DescribeIndex: "DESCRIBE",
    DropIndex: "DROP",
    VacuumIndex: "VACUUM",
    AnalyzeIndex: "ANALYZE",
    AlterIndex: "ALTER",
}
_OBJECTS = {IndexKind.SKIPPING: "SKIPPING INDEX", IndexKind.COVERING: "INDEX", IndexKind.MV: "MATERIALIZED VIEW"}
_OTHERS: dict[type, str] = {
    ShowFlintIndexes: "SHOW FLINT INDEXES",
    ShowCoveringIndexes: "SHOW INDEXES",
    ShowMaterializedViews: "SHOW MATERIALIZED VIEWS",
    RecoverIndexJob: "RECOVER INDEX JOB",
}


def describe(statement: Statement) -> str:
    """The statement's leading words, as a user would name it: ``DROP SKIPPING INDEX``,
    ``CREATE MATERIALIZED VIEW with auto_refresh = true``."""
    if isinstance(statement, ShowFlintIndexes | ShowCoveringIndexes | ShowMaterializedViews | RecoverIndexJob):
        return _OTHERS[type(statement)]
    words = f"{_VERBS[type(statement)]} {_OBJECTS[statement.index.kind]}"
    if isinstance(statement, (*_CREATES, AlterIndex)):
        words += f" with auto_refresh = {str(statement.options.auto_refresh).lower()}"
    return words
