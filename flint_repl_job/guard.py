"""The job's check of each statement on Spark's own parse, before the statement runs.

The plugin refuses what it can at POST, on its own parsers; this check is the authoritative one:
it reads the logical plan Spark's parser makes of the very text Spark will run
(``sessionState.sqlParser.parsePlan``, as JSON in one call), so nothing slips through a difference
between the two parsers. A refused statement fails with the same message the plugin gives. Text
Spark cannot parse is not run either: its syntax error is the statement's error.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from query_core.flint import Statement
from query_core.ppl import parse_ppl
from query_core.validation import Checks, GrammarElement, ValidationPolicy, check_flint, check_ppl
from query_core.validation.elements import GrammarElement as E

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


def _parts(text: Any) -> list[str]:
    """A Scala ``Seq[String]`` as its JSON shows it, ``[a, b]``, as its parts."""
    inner = str(text or "")[1:-1]
    return inner.split(", ") if inner else []


class StatementGuard:
    """Checks statements against the job's policy on Spark's own parse; raises
    :class:`query_core.validation.QueryRefusedError`."""

    def __init__(self, spark: Any, policy: ValidationPolicy) -> None:
        self.spark = spark
        self.policy = policy
        self.checks = _SparkChecks(policy, self._is_data_source)

    @property
    def active(self) -> bool:
        return bool(self.policy.denied)

    # -- entry points -----------------------------------------------------------------------------

    def check_sql(self, sql: str) -> None:
        """A Spark SQL statement, as Spark will run it (a ParseException propagates)."""
        if not self.active:
            return
        plan = self._parser().parsePlan(sql)
        self._check_root(plan)
        tree = json.loads(plan.toJSON())
        self._walk(tree, root=tree[0] if tree else None)

    def check_expression(self, text: str) -> None:
        """An expression the job evaluates (a covering index's filter, an ``id_expression``)."""
        if self.active:
            self._walk(json.loads(self._parser().parseExpression(text).toJSON()))

    def check_ppl(self, ppl: str) -> None:
        """A PPL query, on its syntax tree (before translation asks Spark anything about it)."""
        if self.active:
            check_ppl(parse_ppl(ppl), self.checks)

    def check_flint(self, statement: Statement) -> None:
        if self.active:
            check_flint(statement, self.checks, self.check_sql, self.check_expression)

    def check_checkpoint(self, location: str) -> None:
        """A checkpoint about to be deleted (VACUUM), wherever its location came from."""
        self.checks.checkpoint(location)

    # -- the plan -------------------------------------------------------------------------------------

    def _parser(self) -> Any:
        return self.spark._jsparkSession.sessionState().sqlParser()

    def _check_root(self, plan: Any) -> None:
        """What the JSON form of a statement's plan leaves out (maps and options): read from the
        plan's root through the JVM."""
        name = plan.getClass().getSimpleName()
        if name == "SetCommand":
            kv = plan.kv()
            self.checks.config(E.SET, str(kv.get()._1()) if kv.isDefined() else None)
        elif name == "ResetCommand":
            key = plan.config()
            self.checks.config(E.RESET, str(key.get()) if key.isDefined() else None)
        elif name == "CreateNamespace":
            location = plan.properties().get("location")
            if location.isDefined():
                self.checks.location(str(location.get()))
        elif name == "CreateTempViewUsing":
            for option in ("path", "paths"):
                value = plan.options().get(option)
                if value.isDefined():
                    self.checks.location(str(value.get()))

    def _walk(self, value: Any, root: dict[str, Any] | None = None) -> None:
        for node, following in _nodes(value):
            self._check_node(node, following, node is root)

    def _check_node(self, node: dict[str, Any], following: dict[str, Any] | None, is_root: bool = False) -> None:
        name = str(node["class"]).rsplit(".", 1)[-1]
        element = _NODE_ELEMENTS.get(name)
        if element is not None:
            self.checks.element(element)
        if name == "InsertIntoDir":
            self.checks.element(E.INSERT_OVERWRITE_DIRECTORY)
        elif name in _LOCATED and node.get("location"):
            self.checks.location(str(node["location"]))
        elif name in ("SetCommand", "ResetCommand", "CreateNamespace", "CreateTempViewUsing"):
            if not is_root:  # the root's were read from the plan itself (_check_root)
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

    def _join(self, node: dict[str, Any]) -> None:
        join_type = node.get("joinType") or {}
        while isinstance(join_type, dict) and "tpe" in join_type:  # NaturalJoin, UsingJoin
            join_type = join_type["tpe"]
        kind = str(join_type.get("object", "")).rsplit(".", 1)[-1] if isinstance(join_type, dict) else ""
        element = _JOIN_ELEMENTS.get(kind)
        if element is not None:
            self.checks.element(element)

    def _nested_command(self, name: str) -> None:
        """A configuration or placing command inside another statement (a script): its key or
        location is not in the JSON form, so it cannot be shown harmless."""
        if name in ("SetCommand", "ResetCommand"):
            self.checks.element(E.SET if name == "SetCommand" else E.RESET)
            self.checks.element(E.PROTECTED_CONFIG, "in a compound statement")
        else:
            self.checks.element(E.LOCATION, "in a compound statement")

    def _execute_immediate(self, node: dict[str, Any]) -> None:
        statement = node.get("sqlStmtStr") or node.get("queryParam")
        literal = statement[0] if isinstance(statement, list) and len(statement) == 1 else None
        if isinstance(literal, dict) and str(literal.get("class", "")).endswith(".Literal"):
            self.check_sql(str(literal.get("value", "")))
        else:
            self.checks.element(E.DYNAMIC_SQL, "EXECUTE IMMEDIATE")

    def _is_data_source(self, name: str) -> bool:
        return _is_data_source(self.spark, name)


@functools.lru_cache(maxsize=256)
def _lookup(spark: Any, name: str) -> bool:
    jvm = spark._jvm
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            name, spark._jsparkSession.sessionState().conf()
        )
    except Exception:  # noqa: BLE001 - any failure means Spark would not read it as a source
        return False
    return True


def _is_data_source(spark: Any, name: str) -> bool:
    """Whether Spark reads ``name`` as a data source (a short name, or a class on its class path)."""
    return _lookup(spark, name.lower())


class _SparkChecks(Checks):
    """The checks, with Spark deciding which relation names are path-based."""

    def __init__(self, policy: ValidationPolicy, is_source: Callable[[str], bool]) -> None:
        super().__init__(policy)
        self.is_source = is_source

    def table(self, parts: Any, second_quoted: bool = False) -> None:
        super().table(parts, second_quoted)
        if len(parts) == 2 and self.policy.denies(E.FILE) and self.is_source(parts[0]):
            self.element(E.FILE)


def _nodes(value: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every plan or expression node in a JSON plan, each with the node after it in its tree."""
    if isinstance(value, list):
        trees = [item for item in value if isinstance(item, dict) and "class" in item]
        for i, node in enumerate(trees):
            yield node, trees[i + 1] if i + 1 < len(trees) else None
        for item in value:
            if isinstance(item, dict):
                for field in item.values():
                    yield from _nodes(field)
            elif isinstance(item, list):
                yield from _nodes(item)
    elif isinstance(value, dict):
        for field in value.values():
            yield from _nodes(field)
