"""Spark's plans of a query, read and rebuilt from Python through the session's JVM gateway
(``docs/acceleration.md``: why the acceleration works on plans this way).

A plan is read whole as JSON (``TreeNode.toJSON``, one call), so finding the tables a query scans
and the filters right above them costs no call per node. The JVM is asked only what the JSON does
not say exactly: whether a condition is deterministic, the values of timestamp literals and of
``InSet``, the file listing of a scan (or only its hash: :mod:`.listings`), a literal's ``xxhash64``.

A plan is rebuilt by replacing subtrees found by their path (child ordinals from the root): every
node on the way gets its new children with ``withNewChildren``, and the new plan is marked
analyzed, so Spark's analyzer does not resolve again what it resolved once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from flint_repl_job.acceleration.expressions import Expr, expression_of
from flint_repl_job.jvm import PlanJson, helper

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Relations whose files Spark lists itself (file-based tables): the ones a skipping index prunes.
FILE_RELATION = "HadoopFsRelation"
#: The Spark catalog that stands for the datasource (``flint_repl_job.catalog``).
SESSION_CATALOG = "spark_catalog"
#: Separates values the JVM joins into one string (never in a path, a name or a printed value here).
_SEPARATOR = "\u0001"


@dataclass(frozen=True)
class PlanNode:
    """One logical plan node from a plan's JSON: class (simple name), own fields, children, and
    its path from the root."""

    cls: str
    fields: dict[str, Any]
    children: tuple[PlanNode, ...] = ()
    path: tuple[int, ...] = ()

    def walk(self) -> Iterator[PlanNode]:
        yield self
        for child in self.children:
            yield from child.walk()


def plan_of(nodes: Sequence[dict[str, Any]]) -> PlanNode:
    """The tree of a plan's JSON (a pre-order list of nodes)."""
    tree, _ = _read(nodes, 0, ())
    return tree


def _read(nodes: Sequence[dict[str, Any]], at: int, path: tuple[int, ...]) -> tuple[PlanNode, int]:
    node = nodes[at]
    cls = str(node.get("class", "")).rsplit(".", 1)[-1]
    children, pos = [], at + 1
    for i in range(int(node.get("num-children", 0))):
        child, pos = _read(nodes, pos, (*path, i))
        children.append(child)
    own = {k: v for k, v in node.items() if k not in ("class", "num-children")}
    return PlanNode(cls, own, tuple(children), path), pos


@dataclass(frozen=True)
class Column:
    """A relation's column: its attribute id, name, type as the plan's JSON names it (``long``,
    ``decimal(10,2)``; complex types as JSON text) and that JSON value itself."""

    expr_id: int
    name: str
    data_type: str
    type_json: Any = None


@dataclass(frozen=True)
class TableScan:
    """A table as a query reads it: a ``LogicalRelation`` of a catalog table, and the ``Filter``
    right above it in the optimized plan if there is one."""

    table: tuple[str, str, str]
    relation: PlanNode
    columns: tuple[Column, ...]
    filter: PlanNode | None = None
    provider: str = ""

    @property
    def key(self) -> frozenset[int]:
        """The ids of its output attributes: what finds the same scan in another plan of the query."""
        return frozenset(c.expr_id for c in self.columns)

    @property
    def condition(self) -> Expr | None:
        if self.filter is None:
            return None
        return expression_of(self.filter.fields["condition"])

    def qualified(self, datasource: str) -> str:
        """``catalog.db.table`` with the datasource's name for the session catalog."""
        catalog, database, name = self.table
        return f"{datasource if catalog == SESSION_CATALOG else catalog}.{database}.{name}"


def relation_columns(relation: PlanNode) -> tuple[Column, ...]:
    found = []
    for attribute in relation.fields.get("output") or []:
        expr = expression_of(attribute)
        if expr.expr_id is not None:
            raw = expr.fields.get("dataType")
            text = raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)
            found.append(Column(expr.expr_id, str(expr.fields.get("name", "")), text, raw))
    return tuple(found)


def table_scans(plan: PlanNode) -> list[TableScan]:
    """Every catalog table a plan reads through a ``LogicalRelation``, with the filter right above."""
    scans: list[TableScan] = []

    def visit(node: PlanNode, parent: PlanNode | None) -> None:
        if node.cls == "LogicalRelation":
            table = _table_of(node)
            if table is not None:
                above = parent if parent is not None and parent.cls == "Filter" else None
                provider = str((node.fields.get("catalogTable") or {}).get("provider") or "")
                scans.append(TableScan(table, node, relation_columns(node), above, provider))
        for child in node.children:
            visit(child, node)

    visit(plan, None)
    return scans


def _table_of(relation: PlanNode) -> tuple[str, str, str] | None:
    catalog_table = relation.fields.get("catalogTable")
    if not isinstance(catalog_table, dict) or relation.fields.get("isStreaming"):
        return None
    ident = catalog_table.get("identifier") or {}
    if not ident.get("table") or not ident.get("database"):
        return None
    return str(ident.get("catalog") or SESSION_CATALOG), str(ident["database"]), str(ident["table"])


def referenced_ids(plan: PlanNode) -> set[int]:
    """The attribute ids every node but a ``LogicalRelation`` refers to, anywhere in its fields
    (subquery plans inside expressions included)."""
    ids: set[int] = set()
    for node in plan.walk():
        if node.cls != "LogicalRelation":
            _collect_ids(node.fields, ids)
    return ids


def _collect_ids(value: Any, ids: set[int]) -> None:
    if isinstance(value, dict):
        if str(value.get("class", "")).endswith(("AttributeReference", "OuterReference")):
            ident = value.get("exprId")
            if isinstance(ident, dict) and "id" in ident:
                ids.add(int(ident["id"]))
        for item in value.values():
            _collect_ids(item, ids)
    elif isinstance(value, list):
        for item in value:
            _collect_ids(item, ids)


# -- the JVM side -------------------------------------------------------------------------------------


def joined_strings(spark: SparkSession, strings: Any) -> list[str]:
    """A Java ``String[]`` as a Python list, in one call (not one per element)."""
    joined = spark._jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(strings).mkString(_SEPARATOR)  # type: ignore[union-attr]
    return [s for s in str(joined).split(_SEPARATOR) if s]


def files_read(frame: DataFrame) -> int:
    """How many files the file scans of a DataFrame's last run read (Spark's ``numFiles`` scan
    metric, summed over its scans): what EXPLAIN's ``kept`` promises, measured."""
    total = 0
    pending = [frame._jdf.queryExecution().executedPlan()]
    while pending:
        node = pending.pop()
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            pending.append(node.executedPlan())
            continue
        if name.endswith("QueryStageExec"):
            pending.append(node.plan())
            continue
        if name == "FileSourceScanExec":
            total += int(node.metrics().apply("numFiles").value())
        children = node.children()
        pending += [children.apply(i) for i in range(children.size())]
    return total


def input_files(frame: DataFrame) -> list[str]:
    """The files a DataFrame reads (``DataFrame.inputFiles``, in one call)."""
    return joined_strings(frame.sparkSession, frame._jdf.inputFiles())


@dataclass
class Plans:
    """The session's parser, plans and a few Catalyst calls, through its JVM gateway.

    Every step of a name through the gateway (``jvm.org``, ``.apache``, ... a static method) is a
    round trip, as is freeing each JVM object Python held: the classes and static methods used are
    looked up once per session and kept, and no call goes through a JVM object it need not make."""

    spark: SparkSession
    _classes: dict[str, Any] = field(default_factory=dict)
    _members: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: A plan's JSON form (``TreeNode.toJSON``'s, written by the JVM helper).
        self._json = PlanJson(self.spark)

    @property
    def jvm(self) -> Any:
        return self.spark._jvm

    @property
    def session(self) -> Any:
        return self.spark._jsparkSession

    def static(self, name: str) -> Any:
        """A JVM class (to construct) or static member (``pkg.Class.member``), looked up once."""
        found = self._members.get(name)
        if found is None:
            found = self.jvm
            for part in name.split("."):
                found = getattr(found, part)
            self._members[name] = found
        return found

    def parse(self, sql: str) -> Any:
        return self.session.sessionState().sqlParser().parsePlan(sql)

    def is_query(self, parsed: Any) -> bool:
        """Whether a parsed statement is a query (its rows are its answer, it runs when read),
        not a command that Spark runs as soon as it is analysed (INSERT, CREATE, SET...)."""
        name = parsed.getClass().getSimpleName()
        if name.endswith(("Statement", "Command")) or name in ("CreateTableAsSelect", "ReplaceTableAsSelect"):
            return False
        return not self._class("org.apache.spark.sql.catalyst.plans.logical.Command").isInstance(parsed)

    def _class(self, name: str) -> Any:
        if name not in self._classes:
            loader = self.jvm.java.lang.Thread.currentThread().getContextClassLoader()
            self._classes[name] = self.jvm.java.lang.Class.forName(name, True, loader)
        return self._classes[name]

    def frame(self, plan: Any) -> DataFrame:
        """A DataFrame over a logical plan (analysed now, as ``spark.sql`` does)."""
        from pyspark.sql import DataFrame

        return DataFrame(self._rows(plan), self.spark)

    def _rows(self, plan: Any) -> Any:
        return self.static("org.apache.spark.sql.classic.Dataset.ofRows")(self.session, plan)

    @staticmethod
    def analyzed(frame: DataFrame) -> Any:
        return frame._jdf.queryExecution().analyzed()

    @staticmethod
    def optimized(frame: DataFrame) -> Any:
        return frame._jdf.queryExecution().optimizedPlan()

    def json_tree(self, plan: Any) -> PlanNode:
        return plan_of(json.loads(self._json(plan)))

    @staticmethod
    def node_at(root: Any, path: Sequence[int]) -> Any:
        node = root
        for i in path:
            node = node.children().apply(i)
        return node

    def is_file_relation(self, relation: Any) -> bool:
        return bool(relation.relation().getClass().getSimpleName() == FILE_RELATION)

    def strings(self, strings: Any) -> list[str]:
        """A Java ``String[]`` as a Python list, in one call (not one per element)."""
        joined = self.static("scala.collection.immutable.ArraySeq.unsafeWrapArray")(strings).mkString(_SEPARATOR)
        return [s for s in str(joined).split(_SEPARATOR) if s]

    def digest(self, strings: Any) -> bytes:
        """The SHA-256 of a Java ``String[]``'s items joined by a separator none holds, computed
        in the JVM: the strings stay there, 32 bytes come back."""
        joined = self.static("scala.collection.immutable.ArraySeq.unsafeWrapArray")(strings).addString(
            self.static("scala.collection.mutable.StringBuilder")(), _SEPARATOR
        )
        encoded = self.static("java.nio.charset.StandardCharsets.UTF_8").encode(
            self.static("java.nio.CharBuffer.wrap")(joined.underlying())
        )
        hashing = self.static("java.security.MessageDigest.getInstance")("SHA-256")
        hashing.update(encoded)
        return bytes(hashing.digest())

    def internal_values(self, expression: Any) -> list[str] | None:
        """The internal values of a ``Literal`` (one) or of an ``InSet`` (its set), printed."""
        name = expression.getClass().getSimpleName()
        if name == "Literal":
            value = expression.value()
            return None if value is None else [str(value)]
        if name == "InSet":
            values = expression.hset()
            joined = str(values.mkString(_SEPARATOR))
            texts = joined.split(_SEPARATOR) if joined else []
            return texts if len(texts) == values.size() else None
        return None

    def xxhash64(self, literal: Any) -> int:
        """Spark's ``xxhash64`` of a literal (seed 42), as the skipping index hashed its values."""
        hashed = self.static("org.apache.spark.sql.catalyst.expressions.XxHash64")(self._seq([literal]), 42)
        return int(hashed.eval(None))

    def restrict(self, relation: Any, paths: Sequence[str], keep: bool) -> Any:
        """The analysed plan of ``relation`` reading only ``paths`` (``keep``) or all but them,
        with the relation's own output. Where the JVM has the helper, the same relation over the
        table's file index answering only those files (one call); otherwise, built through
        DataFrames, the relation under a filter on its ``_metadata.file_path``, which Spark
        applies to its file listing before it reads any file (the same files read)."""
        built = self._file_filter(relation, paths, keep)
        if built is not None:
            return built
        frame = self._rows(relation)
        path = frame.metadataColumn("_metadata").getField("file_path")
        listed = self.static("org.apache.commons.lang3.StringUtils.split")(_SEPARATOR.join(paths), _SEPARATOR)
        condition = path.isInCollection(self.static("scala.collection.immutable.ArraySeq.unsafeWrapArray")(listed))
        if not keep:
            condition = self.static("org.apache.spark.sql.functions.not")(condition)
        return frame.filter(condition).queryExecution().analyzed()

    def _file_filter(self, relation: Any, paths: Sequence[str], keep: bool) -> Any | None:
        builder = helper(self.spark, "FileFilter")
        if builder is None:
            return None
        try:
            return builder.restrict(relation, _SEPARATOR.join(paths), _SEPARATOR, keep)
        except Py4JJavaError as exc:
            if not str(exc.java_exception.getClass().getName()).endswith("FileFilter$Unsupported"):
                raise
            return None

    def replace_output(self, relation: Any, source: Any) -> Any:
        """A plan that reads ``source`` (an analysed plan with one column per column of
        ``relation``, in order) and outputs ``relation``'s own attributes (same ids), so the rest
        of the query refers to it as it did to ``relation``."""
        alias = self.static("org.apache.spark.sql.catalyst.expressions.Alias")
        wanted, given = relation.output(), source.output()
        aliases = []
        none = self.static("scala.Option.apply")(None)
        nothing = self._seq([])
        for i in range(wanted.size()):
            attribute = wanted.apply(i)
            aliases.append(
                alias(given.apply(i), attribute.name(), attribute.exprId(), attribute.qualifier(), none, nothing)
            )
        return self.static("org.apache.spark.sql.catalyst.plans.logical.Project")(self._seq(aliases), source)

    def _seq(self, items: Sequence[Any]) -> Any:
        return self.static("PythonUtils.toSeq")(list(items))

    def rebuild(self, root: Any, replacements: Mapping[tuple[int, ...], Any]) -> Any:
        """``root`` with the subtree at each path replaced, marked analyzed."""
        rebuilt = self._rebuild(root, (), replacements)
        rebuilt.setAnalyzed()
        return rebuilt

    def _rebuild(self, node: Any, path: tuple[int, ...], replacements: Mapping[tuple[int, ...], Any]) -> Any:
        if path in replacements:
            return replacements[path]
        if not any(p[: len(path)] == path for p in replacements):
            return node
        children = node.children()
        new = [self._rebuild(children.apply(i), (*path, i), replacements) for i in range(children.size())]
        return node.withNewChildren(self._seq(new))

    def explain(self, frame: DataFrame, mode: Any) -> str:
        return str(frame._jdf.queryExecution().explainString(mode))


__all__ = [
    "Column",
    "PlanNode",
    "Plans",
    "TableScan",
    "plan_of",
    "referenced_ids",
    "relation_columns",
    "table_scans",
]
