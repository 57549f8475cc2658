"""The job's check of each statement on Spark's own parse, before the statement runs.

The plugin refuses what it can at POST, on its own reading; this check is the authoritative one:
it reads the logical plan Spark's parser makes of the very text Spark will run
(``sessionState.sqlParser.parsePlan``, as JSON in one call, and the maps the JSON leaves out
through the JVM), so nothing slips through a difference between the two readings. A refused
statement fails with the same message the plugin gives. Text Spark cannot parse is not run
either: its syntax error is the statement's error. See docs/validation.md.

What the job asks Spark itself, where the plugin reads a table:

* which implementation a provider name resolves to (``DataSource.lookupDataSource``): the
  resolved class must be an allowed provider's, whatever name led to it;
* where a location is (Hadoop's ``Path``, qualified against the default file system without
  opening it);
* what the catalog holds for each table, view and partition a statement reads or writes, on
  the plan Spark resolved for it (:meth:`StatementGuard.resolve`, :mod:`flint_repl_job.stored`):
  its location, provider and storage, a view's text; the job then runs that very plan.

Before any parse, the statement's size and nesting depth are checked on its tokens
(:mod:`query_core.validation.limits`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flint_repl_job.jvm import PlanJson
from flint_repl_job.result_stream import QueryCancelledError
from flint_repl_job.stored import StoredMetadata
from query_core.flint import Statement
from query_core.ppl import parse_ppl
from query_core.validation import (
    Checks,
    GrammarElement,
    QueryRefusedError,
    ValidationPolicy,
    check_flint,
    check_ppl,
)
from query_core.validation.allowlists import Provider, function_options, is_settable, provider_of_class
from query_core.validation.elements import GrammarElement as E
from query_core.validation.flint import source_table
from query_core.validation.limits import StatementLimits, check_limits
from query_core.validation.paths import HadoopPath, Place, place_of
from query_core.validation.token_checks import has_relation_options, relation_options
from query_core.validation.tokens import TokenKind

log = logging.getLogger(__name__)

#: Plan nodes that are an element by their class alone.
_NODE_ELEMENTS: dict[str, GrammarElement] = {
    **dict.fromkeys(("CreateFunction", "CreateFunctionCommand", "CreateUserDefinedFunction"), E.CREATE_FUNCTION),
    **dict.fromkeys(("DropFunction", "DropFunctionCommand"), E.DROP_FUNCTION),
    **dict.fromkeys(
        (
            "AddJarsCommand",
            "AddFilesCommand",
            "AddArchivesCommand",
            "ListJarsCommand",
            "ListFilesCommand",
            "ListArchivesCommand",
        ),
        E.MANAGE_RESOURCE,
    ),
    "ScriptTransformation": E.TRANSFORM,
    "UnresolvedHint": E.HINTS,
    "UnresolvedInlineTable": E.INLINE_TABLE,
    "LocalRelation": E.INLINE_TABLE,
    "Sample": E.TABLESAMPLE,
    "LateralJoin": E.LATERAL_SUBQUERY,
    "Generate": E.LATERAL_VIEW,
    "UnresolvedWith": E.WITH,
    "ExplainCommand": E.EXPLAIN,
    "DescribeRelation": E.DESCRIBE_TABLE,
    "DescribeColumn": E.DESCRIBE_TABLE,
    "DescribeNamespace": E.DESCRIBE_NAMESPACE,
    "DescribeFunction": E.DESCRIBE_FUNCTION,
    "DescribeQueryCommand": E.DESCRIBE_QUERY,
    **dict.fromkeys(
        (
            "CreateNamespace",
            "CreateTable",
            "CreateTableAsSelect",
            "ReplaceTable",
            "ReplaceTableAsSelect",
            "CreateTableLike",
            "CreateTableLikeCommand",
        ),
        E.CREATE_NAMESPACE,
    ),
    **dict.fromkeys(("CreateView", "CreateViewCommand"), E.CREATE_VIEW),
    **dict.fromkeys(("DropNamespace", "DropTable"), E.DROP_NAMESPACE),
    "DropView": E.DROP_VIEW,
    **dict.fromkeys(
        (
            "SetNamespaceProperties",
            "SetNamespaceLocation",
            "AddColumns",
            "RenameColumn",
            "DropColumns",
            "AlterColumn",
            "AlterColumns",
            "ReplaceColumns",
            "SetTableSerDeProperties",
            "RenamePartitions",
            "DropPartitions",
            "AddPartitions",
            "SetTableLocation",
            "RecoverPartitions",
        ),
        E.ALTER_NAMESPACE,
    ),
    "AlterViewAs": E.ALTER_VIEW,
    "RepairTable": E.REPAIR_TABLE,
    **dict.fromkeys(("TruncateTable", "TruncatePartition"), E.TRUNCATE_TABLE),
    **dict.fromkeys(("InsertIntoStatement", "InsertIntoDir"), E.INSERT),
    "LoadData": E.LOAD,
    **dict.fromkeys(("AnalyzeTable", "AnalyzeTables", "AnalyzeColumn"), E.ANALYZE_TABLE),
    **dict.fromkeys(("CacheTable", "CacheTableAsSelect"), E.CACHE_TABLE),
    "UncacheTable": E.UNCACHE_TABLE,
    "ClearCacheCommand$": E.CLEAR_CACHE,
    "RefreshResource": E.REFRESH_RESOURCE,
    "RefreshTable": E.REFRESH_TABLE,
    "RefreshFunction": E.REFRESH_FUNCTION,
    "ShowColumns": E.SHOW_COLUMNS,
    "ShowCreateTable": E.SHOW_CREATE_TABLE,
    **dict.fromkeys(("ShowNamespaces", "ShowNamespacesCommand"), E.SHOW_NAMESPACES),
    "ShowFunctions": E.SHOW_FUNCTIONS,
    "ShowPartitions": E.SHOW_PARTITIONS,
    **dict.fromkeys(("ShowTablesExtended", "ShowTablePartition"), E.SHOW_TABLE_EXTENDED),
    "ShowTables": E.SHOW_TABLES,
    "ShowTableProperties": E.SHOW_TBLPROPERTIES,
    "ShowViews": E.SHOW_VIEWS,
}
_JOIN_ELEMENTS = {
    "Cross$": E.CROSS_JOIN,
    "Inner$": E.INNER_JOIN,
    "LeftOuter$": E.LEFT_OUTER_JOIN,
    "LeftSemi$": E.LEFT_SEMI_JOIN,
    "LeftAnti$": E.LEFT_ANTI_JOIN,
    "RightOuter$": E.RIGHT_OUTER_JOIN,
    "FullOuter$": E.FULL_OUTER_JOIN,
}
#: Plan nodes whose ``location`` field places data.
_LOCATED = frozenset(
    {"UnresolvedTableSpec", "CreateTableLike", "SetTableLocation", "SetNamespaceLocation", "UnresolvedPartitionSpec"}
)
_DYNAMIC = frozenset({"PlanWithUnresolvedIdentifier", "ExpressionWithUnresolvedIdentifier"})
#: Statements whose maps (options, properties, key) the JSON form leaves out: read through the JVM
#: from the statement's root (or what EXPLAIN explains); anywhere else they are refused.
_READ_AT_ROOT = frozenset(
    {
        "SetCommand", "ResetCommand", "CreateNamespace", "CreateTempViewUsing", "CreateTable", "CreateTableAsSelect",
        "ReplaceTable", "ReplaceTableAsSelect", "CreateTableLike", "SetNamespaceProperties", "SetTableProperties",
        "SetViewProperties", "SetTableSerDeProperties",
    }
)  # fmt: skip
_TABLE_SPECS = frozenset({"CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect"})
#: Namespace properties Spark sets from clauses of their own (``LOCATION``, ``COMMENT``) or itself.
_NAMESPACE_CLAUSES = frozenset({"location", "comment", "owner"})
#: Statements Spark runs part by part itself (SQL scripts): their parts are analysed only as they
#: run, so what they name in the catalog is checked by name beforehand.
_SCRIPTS = frozenset({"CompoundBody"})
#: Parsed nodes that name a catalog table or view (their ``multipartIdentifier``).
_NAMED_RELATIONS = frozenset({"UnresolvedRelation", "UnresolvedTable", "UnresolvedTableOrView", "UnresolvedView"})


def _parts(text: Any) -> list[str]:
    """A Scala ``Seq[String]`` as its JSON shows it, ``[a, b]``, as its parts. Spark shortens a
    long one (``[a, b, ... 3 more fields]``): such a name cannot be checked, and is refused."""
    inner = str(text or "")[1:-1]
    parts = inner.split(", ") if inner else []
    if parts and parts[-1].endswith(" more fields"):
        raise QueryRefusedError(E.DYNAMIC_SQL, "a name too long to be read")
    return parts


@dataclass(frozen=True)
class Checked:
    """What the job needs to know of a statement it checked, to run it."""

    #: ``SET`` or ``SET -v``: the listing of the session's settings (shown filtered).
    lists_settings: bool = False
    #: ``SET key``: the key whose value is read (shown only when the key is a settable one).
    reads_setting: str | None = None
    #: A ``SET`` inside a compound statement: a result shaped like a listing is filtered.
    may_list_settings: bool = False
    #: Spark's parse of the statement (a JVM plan), for :meth:`StatementGuard.resolve`.
    parsed: Any = dataclasses.field(default=None, compare=False, repr=False)


class StatementGuard:
    """Checks statements against the job's policy and limits on Spark's own parse; raises
    :class:`query_core.validation.QueryRefusedError` or
    :class:`query_core.validation.StatementLimitError`."""

    def __init__(
        self,
        spark: Any,
        policy: ValidationPolicy,
        limits: StatementLimits | None = None,
        spark_sql: Callable[[str], str] | None = None,
    ) -> None:
        self.spark = spark
        self.policy = policy
        self.limits = limits or StatementLimits()
        self.checks = _SparkChecks(policy, spark)
        #: Plain SQL as Spark runs it (the datasource's name as the session catalog's), for the
        #: queries Flint statements make the job run.
        self.spark_sql = spark_sql or (lambda sql: sql)
        #: What the catalog holds for what statements reach (docs/validation.md).
        self.stored = StoredMetadata(spark, self.checks, self.check_sql, self._relations_of)
        #: The session's SQL parser (fixed for a session), read once: each JVM call is a round trip.
        self._sql_parser: Any = None
        #: The session's state and what analysing a statement asks of the JVM, read once.
        self._analysis: tuple[Any, Any, Any] | None = None
        #: A plan's JSON form (``TreeNode.toJSON``'s, written by the JVM helper).
        self._json = PlanJson(spark)

    @property
    def active(self) -> bool:
        return bool(self.policy.denied)

    # -- entry points -----------------------------------------------------------------------------

    def check_sql(self, sql: str, stop: threading.Event | None = None) -> Checked:
        """A Spark SQL statement, as Spark will run it (a ParseException propagates). Once
        ``stop`` is set (the statement abandoned: :meth:`.SparkExecutor.abandon`), the check ends
        at its next step with :class:`QueryCancelledError`: a giant statement's reading in Python
        takes seconds, which stopping its JVM thread does not end."""
        tokens = check_limits(sql, "sql", self.limits)
        if not self.active and not any(t.kind == TokenKind.WORD and t.upper in ("SET", "EXECUTE") for t in tokens):
            return Checked()
        if self.active and has_relation_options(tokens):  # options of a table: not in the JSON form
            relation_options(self.checks)
        _stop_if(stop)
        plan = self._parser().parsePlan(sql)
        _stop_if(stop)
        tree = json.loads(self._json(plan))
        _stop_if(stop)
        name = str(plan.getClass().getSimpleName())
        nodes = list(_nodes(tree))
        checked = dataclasses.replace(self._settings_read(plan, tree, name, nodes), parsed=plan)
        if not self.active:
            return checked
        roots = self._check_roots(plan, tree, name)
        self._walk_nodes(nodes, roots, stop)
        self._function_options(tree, stop)
        if name in _SCRIPTS:  # Spark analyses its parts only as it runs them: checked by name now
            for node, _ in nodes:
                if str(node["class"]).rsplit(".", 1)[-1] in _NAMED_RELATIONS:
                    _stop_if(stop)
                    self.stored.named(_parts(node.get("multipartIdentifier")))
        return checked

    def resolve(self, sql: str, checked: Checked | None = None, stop: threading.Event | None = None) -> Any | None:
        """The statement analysed by Spark (a command not run), once everything it reads and
        writes of the catalog was checked for what the catalog holds (:mod:`flint_repl_job.stored`):
        the plan to run, so that nothing is resolved again between the check and the run. None
        when the text is to be run as it is: the policy checks nothing of the catalog, or Spark
        runs the statement part by part (a script, whose parts :meth:`check_sql` checked by name).

        ``checked`` is :meth:`check_sql`'s answer for ``sql`` (its parse is reused). An analysis
        error (no such table...) propagates, as running the text would raise it."""
        if not self.stored.active:
            return None
        plan = checked.parsed if checked is not None and checked.parsed is not None else self._parser().parsePlan(sql)
        name = str(plan.getClass().getSimpleName())
        if name in _SCRIPTS:
            return None
        if name == "UnresolvedExecuteImmediate":
            inner = self._immediate(plan)
            if inner is not None:  # the same statement (its text checked with this one's): run it
                return self.resolve(inner, None, stop)
        _stop_if(stop)
        state, skip, _ = self._analysis_handles()
        analyzed = state.executePlan(plan, skip).analyzed()
        _stop_if(stop)
        if not self.stored.plan(analyzed, str(analyzed.getClass().getSimpleName())) or not self._is_query(plan):
            return analyzed
        # A query of partitioned tables: Spark lists their partitions again as it optimizes or
        # runs it, so they are listed into its optimized plan now, checked there, read from there.
        _stop_if(stop)
        return self.stored.pinned(state.executePlan(analyzed, skip).optimizedPlan())

    def _immediate(self, plan: Any) -> str | None:
        """The statement an ``EXECUTE IMMEDIATE '<literal>'`` runs, when it runs it as it stands
        (no ``USING``, no ``INTO``). Spark analyses the statement an EXECUTE IMMEDIATE holds as
        it analyses the EXECUTE IMMEDIATE, and runs a command there: one with ``USING`` values,
        which cannot be analysed apart, is refused; ``INTO`` takes a query, which runs later."""
        statement = plan.sqlStmtStr()
        literal = str(statement.getClass().getSimpleName()) == "Literal"
        if literal and plan.args().isEmpty() and plan.targetVariables().isEmpty():
            return str(statement.value())
        if not plan.args().isEmpty() and plan.targetVariables().isEmpty():
            inner = str(statement.value()) if literal else ""
            if not inner or not self._is_query(self._parser().parsePlan(inner)):
                self.checks.element(E.DYNAMIC_SQL, "EXECUTE IMMEDIATE of a command with USING")
        return None

    def _analysis_handles(self) -> tuple[Any, Any, Any]:
        """The session's state, the mode that analyses a command without running it, and the
        class of commands (looked up once: each step of a JVM name is a round trip)."""
        if self._analysis is None:
            jvm = self.spark._jvm
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            self._analysis = (
                self.spark._jsparkSession.sessionState(),
                jvm.org.apache.spark.sql.execution.CommandExecutionMode.SKIP(),
                jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command", True, loader),
            )
        return self._analysis

    def _is_query(self, parsed: Any) -> bool:
        """Whether a parsed statement is a query (it runs when read), not a command (which Spark
        runs as soon as it has analysed it)."""
        name = str(parsed.getClass().getSimpleName())
        if name.endswith(("Statement", "Command")) or name in ("CreateTableAsSelect", "ReplaceTableAsSelect"):
            return False
        return not bool(self._analysis_handles()[2].isInstance(parsed))

    def check_expression(self, text: str) -> None:
        """An expression the job evaluates (a covering index's filter, an ``id_expression``)."""
        check_limits(text, "sql", self.limits)
        if self.active:
            tree = json.loads(self._json(self._parser().parseExpression(text)))
            self._walk(tree, set())
            self._function_options(tree)

    def check_ppl(self, ppl: str) -> None:
        """A PPL query, on its syntax tree (before translation asks Spark anything about it)."""
        check_limits(ppl, "ppl", self.limits)
        if self.active:
            check_ppl(parse_ppl(ppl), self.checks)

    def check_flint(self, statement: Statement) -> None:
        if self.active:
            check_flint(statement, self.checks, self._check_query, self.check_expression)
            source = source_table(statement)
            if source is not None:  # as a query reading it: Spark's data sources, what the catalog holds
                self._check_query(f"SELECT * FROM {source.sql()}")

    def _check_query(self, sql: str) -> None:
        """A query a Flint statement makes the job run (its source table, a materialized view's
        query): checked as a statement, and what it reaches in the catalog as Spark resolves it.
        A query Spark cannot analyse reads nothing: the Flint statement reports its own error."""
        text = self.spark_sql(sql)
        checked = self.check_sql(text)
        try:
            self.resolve(text, checked)
        except (QueryRefusedError, QueryCancelledError):
            raise
        except Exception as exc:  # AnalysisException (no such table): nothing is reached
            if type(exc).__name__ != "AnalysisException":
                raise

    def check_checkpoint(self, location: str) -> None:
        """A checkpoint about to be deleted (VACUUM), wherever its location came from."""
        self.checks.checkpoint(location)

    def visible(self, frame: Any, checked: Checked) -> Any:
        """The rows of a statement's result that may be shown: a listing of the settings keeps
        only the settable keys (the others name the job's addresses, paths and credentials), and a
        read of another key shows no value."""
        shaped = frame.columns[:2] == ["key", "value"]
        if checked.lists_settings or (checked.may_list_settings and shaped):
            from pyspark.sql import functions as sf

            keys = [row[0] for row in frame.select(frame.columns[0]).collect()]
            return frame.where(sf.col(frame.columns[0]).isin([k for k in keys if is_settable(k)]))
        if checked.reads_setting is not None and not is_settable(checked.reads_setting):
            from pyspark.sql import functions as sf

            return frame.withColumn(frame.columns[1], sf.lit("<hidden>"))
        return frame

    # -- the plan -------------------------------------------------------------------------------------

    def _parser(self) -> Any:
        if self._sql_parser is None:
            self._sql_parser = self.spark._jsparkSession.sessionState().sqlParser()
        return self._sql_parser

    def _settings_read(
        self,
        plan: Any,
        tree: list[dict[str, Any]],
        name: str,
        nodes: list[tuple[dict[str, Any], dict[str, Any] | None]],
        depth: int = 0,
    ) -> Checked:
        """What a statement reads of the session's settings: a ``SET`` listing or one key, also
        when ``EXECUTE IMMEDIATE`` runs the ``SET`` or a compound statement holds one (``name``:
        the class name of the plan's root; ``nodes``: the plan's nodes, :func:`_nodes`)."""
        if name == "SetCommand":
            return _set_command_read(plan)
        if name == "UnresolvedExecuteImmediate" and tree and depth < 8:
            statement = tree[0].get("sqlStmtStr") or tree[0].get("queryParam")
            literal = statement[0] if isinstance(statement, list) and len(statement) == 1 else None
            if isinstance(literal, dict) and str(literal.get("class", "")).endswith(".Literal"):
                inner = self._parser().parsePlan(str(literal.get("value", "")))
                inner_tree = json.loads(self._json(inner))
                inner_name = str(inner.getClass().getSimpleName())
                return self._settings_read(inner, inner_tree, inner_name, list(_nodes(inner_tree)), depth + 1)
        if any(str(node["class"]).endswith(".SetCommand") for node, _ in nodes):
            return Checked(may_list_settings=True)
        return Checked()

    def _check_roots(self, plan: Any, tree: list[dict[str, Any]], name: str) -> set[int]:
        """Check what the JSON form of a statement leaves out (maps, options) from its root
        (``name``: its class name) through the JVM, and from what an EXPLAIN explains; the ids of
        those JSON nodes."""
        roots: set[int] = set()
        node: dict[str, Any] | None = tree[0] if tree else None
        while node is not None:
            roots.add(id(node))
            _RootReader(self.checks, plan, node, tree, self.stored.named).check(name)
            if name != "ExplainCommand":
                break
            plan = plan.logicalPlan()
            name = str(plan.getClass().getSimpleName())
            inner = node.get("logicalPlan")
            node = inner[0] if isinstance(inner, list) and inner and isinstance(inner[0], dict) else None
        return roots

    def _walk(self, value: Any, roots: set[int]) -> None:
        self._walk_nodes(_nodes(value), roots)

    def _walk_nodes(
        self,
        nodes: Iterable[tuple[dict[str, Any], dict[str, Any] | None]],
        roots: set[int],
        stop: threading.Event | None = None,
    ) -> None:
        for n, (node, following) in enumerate(nodes):
            if n % _STOP_EVERY == 0:
                _stop_if(stop)
            self._check_node(node, following, id(node) in roots)

    def _check_node(self, node: dict[str, Any], following: dict[str, Any] | None, is_root: bool) -> None:
        name = str(node["class"]).rsplit(".", 1)[-1]
        element = _NODE_ELEMENTS.get(name)
        if element is not None:
            self.checks.element(element)
        if name == "InsertIntoDir":
            self.checks.element(E.INSERT_OVERWRITE_DIRECTORY)
        if name in _LOCATED and node.get("location"):
            self.checks.location(str(node["location"]))
        if name in _READ_AT_ROOT:
            if not is_root:  # the root's were read from the plan itself (_check_roots)
                self._nested_command(name)
        elif name in _DYNAMIC:
            self.checks.element(E.DYNAMIC_SQL, "IDENTIFIER")
        elif name == "UnresolvedExecuteImmediate":
            self._execute_immediate(node)
        else:
            self._check_reference(name, node, following)

    def _check_reference(self, name: str, node: dict[str, Any], following: dict[str, Any] | None) -> None:
        if name == "UnresolvedRelation":
            self.checks.table(_parts(node.get("multipartIdentifier")))
        elif name == "UnresolvedFunction":
            self.checks.function(".".join(_parts(node.get("nameParts"))))
        elif name == "UnresolvedTableValuedFunction":
            self.checks.element(E.TABLE_VALUED_FUNCTION)
            self.checks.function(".".join(_parts(node.get("name"))))
        elif name == "UnresolvedGenerator":
            generator = node.get("name") or {}
            self.checks.function(str(generator.get("funcName", "")) if isinstance(generator, dict) else "")
        elif name == "Call":
            self.checks.element(E.UDF, "CALL")
        elif name == "Join":
            self._join(node)
        elif name == "Sort" and node.get("global") is False and following is not None:
            if str(following.get("class", "")).endswith(".RepartitionByExpression"):
                self.checks.element(E.CLUSTER_BY)
        elif name == "RepartitionByExpression":
            self.checks.element(E.DISTRIBUTE_BY)

    def _function_options(self, tree: Any, stop: threading.Event | None = None) -> None:
        """The options map of every call of a function that takes one (``from_xml(x, s, map(...))``):
        read from the call's argument, which must be a ``map`` of literals."""
        if not self.policy.denies(E.DATA_SOURCE_OPTION):
            return
        for nodes in _trees(tree):
            _stop_if(stop)
            if not any(_options_call(node) for node in nodes):
                continue  # no call that takes options: no tree to build
            for call, arguments in _calls(nodes):
                name = _call_name(call)
                known = function_options(name)
                if known is None:
                    continue
                if arguments is None:  # a tree that cannot be read: its options cannot be shown harmless
                    self.checks.function_options(name, None)
                elif len(arguments) > known.argument:
                    self.checks.function_options(name, _literal_map(arguments[known.argument]))

    def _join(self, node: dict[str, Any]) -> None:
        join_type = node.get("joinType") or {}
        while isinstance(join_type, dict) and "tpe" in join_type:  # NaturalJoin, UsingJoin
            join_type = join_type["tpe"]
        kind = str(join_type.get("object", "")).rsplit(".", 1)[-1] if isinstance(join_type, dict) else ""
        element = _JOIN_ELEMENTS.get(kind)
        if element is not None:
            self.checks.element(element)

    def _nested_command(self, name: str) -> None:
        """A configuration or DDL command inside another statement (a script): its key, options
        or properties are not in the JSON form, so it cannot be shown harmless."""
        if name in ("SetCommand", "ResetCommand"):
            self.checks.element(E.SET if name == "SetCommand" else E.RESET)
            self.checks.element(E.PROTECTED_CONFIG, "in a compound statement")
        elif name in ("CreateNamespace", "SetNamespaceProperties"):
            self.checks.element(E.LOCATION, "in a compound statement")
        else:
            self.checks.element(E.DATA_SOURCE, "in a compound statement")

    def _execute_immediate(self, node: dict[str, Any]) -> None:
        statement = node.get("sqlStmtStr") or node.get("queryParam")
        literal = statement[0] if isinstance(statement, list) and len(statement) == 1 else None
        if isinstance(literal, dict) and str(literal.get("class", "")).endswith(".Literal"):
            self.check_sql(str(literal.get("value", "")))
        else:
            self.checks.element(E.DYNAMIC_SQL, "EXECUTE IMMEDIATE")

    # -- tables in the catalog ----------------------------------------------------------------------

    def _relations_of(self, sql: str) -> Iterator[list[str]]:
        """The names of the relations ``sql`` reads (a stored view's text), as parsed."""
        try:
            tree = json.loads(self._json(self._parser().parsePlan(sql)))
        except Exception:  # noqa: BLE001 - a view Spark cannot parse cannot be read either
            return
        for node, _ in _nodes(tree):
            if str(node["class"]).endswith(".UnresolvedRelation"):
                yield _parts(node.get("multipartIdentifier"))


#: How many plan nodes the check reads between two looks at whether it was abandoned.
_STOP_EVERY = 1024


def _stop_if(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise QueryCancelledError("the statement was abandoned while it was checked")


def _set_command_read(plan: Any) -> Checked:
    """What a ``SET`` statement reads: the listing, or one key's value."""
    kv = plan.kv()
    if not kv.isDefined():
        return Checked(lists_settings=True)
    key, value = str(kv.get()._1()), kv.get()._2()
    if key == "-v":
        return Checked(lists_settings=True)
    return Checked(reads_setting=key if not value.isDefined() else None)


class _RootReader:
    """Reads a statement's root plan node through the JVM (and its JSON form, ``node``)."""

    def __init__(
        self,
        checks: _SparkChecks,
        plan: Any,
        node: dict[str, Any],
        tree: list[dict[str, Any]],
        relation: Callable[[list[str]], None],
    ) -> None:
        self.checks = checks
        self.plan = plan
        self.node = node
        self.tree = tree
        self.relation = relation

    def check(self, name: str) -> None:
        checks, plan = self.checks, self.plan
        if name == "SetCommand":
            kv = plan.kv()
            key = str(kv.get()._1()) if kv.isDefined() else None
            checks.config(E.SET, None if key == "-v" else key)
        elif name == "ResetCommand":
            key = plan.config()
            checks.config(E.RESET, str(key.get()) if key.isDefined() else None)
        elif name == "CreateNamespace":
            self.namespace_properties(_entries(plan.properties()))
        elif name in ("SetNamespaceProperties", "SetTableProperties", "SetViewProperties"):
            checks.properties(_entries(plan.properties()))
        elif name == "SetTableSerDeProperties":
            serde = plan.serdeClassName()
            if serde.isDefined():
                checks.storage_class("SERDE", str(serde.get()))
            properties = plan.serdeProperties()
            if properties.isDefined():
                checks.properties(_entries(properties.get()))
        elif name == "CreateTempViewUsing":
            provider = checks.provider(str(plan.provider()))
            checks.options(provider, _entries(plan.options()))
        elif name in _TABLE_SPECS:
            self.table_spec(plan.tableSpec())
        elif name == "CreateTableLike":
            self.table_like()

    def namespace_properties(self, properties: list[tuple[str, str]]) -> None:
        for key, value in properties:
            if key.lower() == "location":
                self.checks.location(value)
        self.checks.properties([(k, v) for k, v in properties if k.lower() not in _NAMESPACE_CLAUSES])

    def table_spec(self, spec: Any) -> None:
        checks = self.checks
        serde = spec.serde()
        hive = serde.isDefined()
        if hive:
            self.serde_info(serde.get())
        checks.properties(_entries(spec.properties()))
        location = spec.location()
        if location.isDefined():
            checks.location(str(location.get()))
        provider_name = spec.provider()
        provider = checks.provider(
            str(provider_name.get()) if provider_name.isDefined() else checks.default_provider(hive)
        )
        checks.options(provider, _json_options(self.node))

    def serde_info(self, info: Any) -> None:
        checks = self.checks
        if info.storedAs().isDefined():
            checks.stored_as(str(info.storedAs().get()))
        if info.serde().isDefined():
            checks.storage_class("SERDE", str(info.serde().get()))
        if info.formatClasses().isDefined():
            classes = info.formatClasses().get()
            checks.storage_class("INPUTFORMAT", str(classes.input()))
            checks.storage_class("OUTPUTFORMAT", str(classes.output()))
        checks.properties(_entries(info.serdeProperties()))

    def table_like(self) -> None:
        checks, plan = self.checks, self.plan
        serde = plan.serdeInfo()
        hive = serde.isDefined()
        if hive:
            self.serde_info(serde.get())
        checks.properties(_entries(plan.properties()))
        provider = plan.provider()
        if provider.isDefined():
            checks.provider(str(provider.get()))
        elif not hive:  # the new table takes its source's provider
            source = self.node_of_source()
            if source:
                self.relation(source)

    def node_of_source(self) -> list[str]:
        for node, _ in _nodes(self.tree):
            if str(node["class"]).endswith(".UnresolvedTableOrView"):
                return _parts(node.get("multipartIdentifier"))
        return []


def _entries(scala_map: Any) -> list[tuple[str, str]]:
    """A Scala ``Map[String, String]`` as (key, value) pairs."""
    entries: list[tuple[str, str]] = []
    iterator = scala_map.iterator()
    while iterator.hasNext():
        pair = iterator.next()
        entries.append((str(pair._1()), str(pair._2())))
    return entries


def _json_options(node: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``OPTIONS`` of a CREATE/REPLACE TABLE from its JSON form (its ``OptionList``): each
    value must be a literal (Spark folds nothing else here)."""
    options: list[tuple[str, str]] = []
    for found, _ in _nodes([node]):
        if not str(found["class"]).endswith(".OptionList"):
            continue
        for entry in found.get("options") or []:
            value = entry.get("_2") if isinstance(entry, dict) else None
            literal = value[0] if isinstance(value, list) and value else None
            if not (isinstance(literal, dict) and str(literal.get("class", "")).endswith(".Literal")):
                options.append((str(entry.get("_1") if isinstance(entry, dict) else entry), "\x00not a literal"))
                continue
            options.append((str(entry["_1"]), str(literal.get("value", ""))))
    return options


# -- what Spark resolves ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _provider_class(spark: Any, name: str) -> str:
    """The class Spark resolves the provider ``name`` to ("": none)."""
    jvm = spark._jvm
    try:
        found = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            name, spark._jsparkSession.sessionState().conf()
        )
    except Exception:  # noqa: BLE001 - any failure means Spark would not read it as a source
        return ""
    return str(found.getName())


def _is_data_source(spark: Any, name: str) -> bool:
    """Whether Spark reads ``name`` as a data source (a short name, or a class on its class path)."""
    return bool(_provider_class(spark, name.lower())) or bool(_provider_class(spark, name))


class _SparkChecks(Checks):
    """The checks, with Spark deciding which names are data sources and what a provider name
    resolves to, and Hadoop where a location is."""

    def __init__(self, policy: ValidationPolicy, spark: Any) -> None:
        super().__init__(policy, resolve=self.place)
        self.spark = spark
        #: Hadoop's ``Path`` and ``FileSystem`` classes and the context's Hadoop configuration
        #: (the same object for the context's life, read afresh at each use), looked up once: each
        #: step of a class's name through the JVM view is a round trip.
        self._hadoop: tuple[Any, Any, Any] | None = None

    def _hadoop_handles(self) -> tuple[Any, Any, Any]:
        if self._hadoop is None:
            fs = self.spark._jvm.org.apache.hadoop.fs
            self._hadoop = (fs.Path, fs.FileSystem, self.spark._jsc.hadoopConfiguration())
        return self._hadoop

    def table(self, parts: Any, second_quoted: bool = False) -> None:
        super().table(parts, second_quoted)
        if len(parts) == 2 and self.policy.denies(E.FILE) and _is_data_source(self.spark, parts[0]):
            self.element(E.FILE)

    def provider_named(self, name: str) -> Provider | None:
        return provider_of_class(_provider_class(self.spark, name))

    def default_provider(self, hive: bool) -> str:
        """The provider of a CREATE TABLE that names none: Hive's when it names a Hive format (or
        the legacy setting says so), else ``spark.sql.sources.default``."""
        conf = self.spark.conf
        legacy = str(conf.get("spark.sql.legacy.createHiveTableByDefault", "false")).lower() == "true"
        return "hive" if hive or legacy else str(conf.get("spark.sql.sources.default", "parquet"))

    def options(self, provider: Provider | None, options: Iterable[tuple[str, str]]) -> None:
        for key, value in options:
            if value == "\x00not a literal":
                self.element(E.DATA_SOURCE_OPTION, f"{key}: not a literal")
        super().options(provider, options)

    def place(self, location: str) -> Place | None:
        """Where Hadoop places ``location``: its ``Path``, qualified against the default file
        system (read from the configuration, never opened); None when Hadoop refuses it."""
        path_class, file_system, hadoop_conf = self._hadoop_handles()
        try:
            uri = path_class(location).toUri()
        except Exception:  # noqa: BLE001 - IllegalArgumentException: not a path
            return None
        scheme, authority = uri.getScheme(), uri.getAuthority()
        if scheme is None:
            default = file_system.getDefaultUri(hadoop_conf)
            scheme, authority = default.getScheme(), authority or default.getAuthority()
        return place_of(
            HadoopPath(str(scheme) if scheme else None, str(authority) if authority else None, str(uri.getPath()))
        )


#: A node of a JSON plan with its children, built from the flat list (:func:`_built`).
_Built = tuple[dict[str, Any], list[Any]]


def _trees(value: Any) -> Iterator[list[dict[str, Any]]]:
    """Every tree of a JSON plan, as the flat list Spark writes it (parents before children),
    the trees nested in nodes' fields (a plan's expressions) included."""
    stack: list[Any] = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            if current and all(isinstance(item, dict) and "class" in item for item in current):
                yield current
            stack.extend(item for item in current if isinstance(item, list | dict))
        elif isinstance(current, dict):
            stack.extend(item for item in current.values() if isinstance(item, list | dict))


def _built(nodes: list[dict[str, Any]]) -> _Built | None:
    """The flat list ``nodes`` as one tree (None when its counts of children do not add up)."""
    root: _Built | None = None
    open_nodes: list[tuple[list[Any], int]] = []  # the children of a node being filled, and how many it has
    for node in nodes:
        try:
            expected = int(node.get("num-children", 0) or 0)
        except (TypeError, ValueError):
            return None
        built: _Built = (node, [])
        if open_nodes:
            open_nodes[-1][0].append(built)
        elif root is None:
            root = built
        else:
            return None  # a second root: not one tree
        open_nodes.append((built[1], expected))
        while open_nodes and len(open_nodes[-1][0]) >= open_nodes[-1][1]:
            open_nodes.pop()
    return root if not open_nodes else None


def _calls(nodes: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], list[_Built] | None]]:
    """Each function call of a tree, with its arguments (the children its ``arguments`` name);
    the arguments are None when the tree cannot be read as one."""
    root = _built(nodes)
    if root is None:
        for node in nodes:
            if _is_call(node):
                yield node, None
        return
    pending = [root]
    while pending:
        node, children = pending.pop()
        pending.extend(children)
        if _is_call(node):
            indices = node.get("arguments")
            arguments = (
                [children[i] for i in indices if isinstance(i, int) and 0 <= i < len(children)]
                if isinstance(indices, list)
                else []
            )
            yield node, arguments


def _is_call(node: dict[str, Any]) -> bool:
    """Whether ``node`` is a function call (as parsed: not yet resolved)."""
    return str(node.get("class", "")).endswith(".UnresolvedFunction")


def _call_name(node: dict[str, Any]) -> str:
    return ".".join(_parts(node.get("nameParts")))


def _options_call(node: dict[str, Any]) -> bool:
    """Whether ``node`` calls a function that takes an options map."""
    return _is_call(node) and function_options(_call_name(node)) is not None


def _literal_map(argument: _Built) -> list[tuple[str, str]] | None:
    """``map('k', 'v', ...)`` of literals as its pairs; None for anything else."""
    node, children = argument
    if not _is_call(node) or _parts(node.get("nameParts")) != ["map"]:
        return None
    values: list[str] = []
    for child, grandchildren in children:
        if grandchildren or not str(child.get("class", "")).endswith(".Literal") or child.get("value") is None:
            return None
        values.append(str(child["value"]))
    if len(values) % 2:
        return None
    return list(zip(values[::2], values[1::2], strict=True))


def _nodes(value: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every plan or expression node in a JSON plan, each with the node after it in its tree."""
    stack: list[Any] = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            trees = [item for item in current if isinstance(item, dict) and "class" in item]
            for i, node in enumerate(trees):
                yield node, trees[i + 1] if i + 1 < len(trees) else None
            for item in reversed(current):
                if isinstance(item, dict):
                    stack.extend(reversed(list(item.values())))
                elif isinstance(item, list):
                    stack.append(item)
        elif isinstance(current, dict):
            stack.extend(reversed(list(current.values())))
