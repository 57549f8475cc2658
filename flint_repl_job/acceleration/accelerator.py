"""Query acceleration by Flint indexes: the job's counterpart of the reference's Flint optimizer
rules (``docs/acceleration.md`` says how and why).

:meth:`Accelerator.sql` stands where the job called ``spark.sql``: for a query (and the query of an
EXPLAIN) it reads Spark's optimized plan, finds each table scanned with the filter right above it,
asks the table's Flint indexes, and, when one helps, rebuilds that optimized plan with that
table's scan replaced:

- **covering** (first, as the reference): a fresh covering index that holds every column the
  query uses of the table is read instead of the table, through the ``opensearch`` data source;
- **skipping**: the scan's file index answers only the files the skipping index does not prove
  hold no matching row (the table's own index, its other files left out), so Spark plans the
  scan over those files alone and never opens the others. The query's own filter stays.

Everything else runs exactly as before: commands, queries over tables without a usable index,
and any query whose acceleration fails (an index lookup failure logs a warning and the table is
read whole).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flint_repl_job.acceleration.covering import Conjunct, NotNull, unusable_reason
from flint_repl_job.acceleration.expressions import (
    ColumnPredicate,
    Expr,
    column_predicate,
    conjuncts,
    has_disjunction,
    has_subquery,
)
from flint_repl_job.acceleration.files import SourceSnapshot
from flint_repl_job.acceleration.listings import Listings
from flint_repl_job.acceleration.lookup import FoundIndex, IndexLookup, IndexLookupError, TableIndexes
from flint_repl_job.acceleration.plans import (
    SESSION_CATALOG,
    PlanNode,
    Plans,
    TableScan,
    referenced_ids,
    table_scans,
)
from flint_repl_job.acceleration.report import COVERING, SKIPPING, Acceleration, IndexUse
from flint_repl_job.acceleration.skipping import file_tests, select_files
from flint_repl_job.acceleration.switches import Switches
from flint_repl_job.opensearch_source import register, source_options
from query_core.config import OpenSearchConfig
from query_core.states import FlintIndexState
from query_core.store import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The Spark conf that lets a Python data source take a query's filters (the covering index's).
FILTER_PUSHDOWN_KEY = "spark.sql.python.filterPushdown.enabled"
#: Bounds of the index lookups' own client (:meth:`Accelerator.connect`).
LOOKUP_RETRY_ATTEMPTS = 2
LOOKUP_RETRY_S = 2.0
LOOKUP_TIMEOUT_S = 5.0
#: States in which a skipping index is not read (its contents are being deleted).
_GONE = frozenset({FlintIndexState.DELETED, FlintIndexState.DELETING, FlintIndexState.VACUUMING})


@dataclass
class Prepared:
    """A statement's DataFrame, and what acceleration did for it (None: not a query it looked at).
    ``original`` is the query as Spark alone plans it, when ``frame`` reads an index instead."""

    frame: DataFrame
    acceleration: Acceleration | None = None
    original: DataFrame | None = None


@dataclass
class _Work:
    """One query's acceleration in progress."""

    frame: DataFrame
    switches: Switches
    optimized: Any
    used: list[IndexUse] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replacements: dict[tuple[int, ...], Any] = field(default_factory=dict)
    lookup_s: float = 0.0


class Accelerator:
    """Runs statements through Spark with the datasource's Flint indexes (``docs/acceleration.md``)."""

    def __init__(self, spark: SparkSession, store: Store, opensearch: OpenSearchConfig, datasource: str) -> None:
        self.spark = spark
        self.plans = Plans(spark)
        self.listings = Listings(self.plans)
        self.store = store
        self.lookup = IndexLookup(store, datasource)
        self.opensearch = opensearch
        self.datasource = datasource
        self._registered = False

    @classmethod
    def connect(cls, spark: SparkSession, opensearch: OpenSearchConfig, datasource: str) -> Accelerator:
        """An accelerator with an index client of its own that gives up quickly: a lookup that
        fails costs a query a few seconds at most, then the query reads its tables whole."""
        quick = opensearch.model_copy(
            update={
                "retry_attempts": LOOKUP_RETRY_ATTEMPTS,
                "retry_seconds": LOOKUP_RETRY_S,
                "request_timeout": min(opensearch.request_timeout, LOOKUP_TIMEOUT_S),
            }
        )
        return cls(spark, Store.connect(quick), opensearch, datasource)

    def close(self) -> None:
        self.store.close()

    # -- statements -----------------------------------------------------------------------------

    def sql(self, sql: str, analyzed: Any = None) -> Prepared:
        """``spark.sql(sql)``, accelerated when it is a query (or the EXPLAIN of one); over
        ``analyzed``, the statement's analysed plan, when the job's check gives one (docs/validation.md)."""

        def frame() -> DataFrame:
            return self.plans.frame(analyzed) if analyzed is not None else self.spark.sql(sql)

        switches = Switches.read(self.spark.conf.get)
        if not switches.optimizer:
            return Prepared(frame())
        try:
            parsed = self.plans.parse(sql)
        except Exception:  # noqa: BLE001 - Spark reports its own syntax error as it always has
            return Prepared(frame())
        if parsed.getClass().getSimpleName() == "ExplainCommand":
            return self.explain(sql, parsed, switches)
        if not self.plans.is_query(parsed):
            return Prepared(frame())
        return self.accelerate(frame(), switches)

    def explain(self, sql: str, parsed: Any, switches: Switches) -> Prepared:
        """EXPLAIN of a query: Spark's explanation of the accelerated plan, after a section that
        names the indexes used (``kept K of N files``) and why others were not. The EXPLAIN of
        a command is Spark's alone (analysing a command would run it)."""
        if not self.plans.is_query(parsed.logicalPlan()):
            return Prepared(self.spark.sql(sql))
        try:
            inner = self.plans.frame(parsed.logicalPlan())
        except Exception:  # noqa: BLE001 - EXPLAIN shows the query's own error, as Spark does
            return Prepared(self.spark.sql(sql))
        prepared = self.accelerate(inner, switches)
        report = prepared.acceleration or Acceleration()
        text = report.explain() + self.plans.explain(prepared.frame, parsed.mode())
        return Prepared(self.spark.createDataFrame([(text,)], "plan STRING"), report)

    def accelerate(self, frame: DataFrame, switches: Switches) -> Prepared:
        """``frame`` rebuilt to read the indexes that help it; ``frame`` itself when none does,
        or when accelerating fails (logged)."""
        started = time.monotonic()
        try:
            work = _Work(frame, switches, self.plans.optimized(frame))
            self._plan(work)
        except Exception as exc:  # noqa: BLE001 - acceleration must never fail a query
            log.warning("query acceleration failed, the query reads its tables whole: %s: %s", type(exc).__name__, exc)
            return Prepared(frame, None)
        result = frame
        if work.replacements:
            try:
                result = self.plans.frame(self.plans.rebuild(work.optimized, work.replacements))
            except Exception as exc:  # noqa: BLE001
                log.warning(
                    "accelerated plan refused, the query reads its tables whole: %s: %s", type(exc).__name__, exc
                )
                return Prepared(frame, Acceleration(notes=(f"accelerated plan refused: {exc}",)))
        elapsed_ms = (time.monotonic() - started) * 1000
        report = Acceleration(tuple(work.used), tuple(work.notes), work.lookup_s * 1000, elapsed_ms)
        if report.used:
            log.info("acceleration: %s (%.0f ms)", report.summary(), elapsed_ms)
        return Prepared(result, report, frame if result is not frame else None)

    # -- the plan ---------------------------------------------------------------------------------

    def _plan(self, work: _Work) -> None:
        tree = self.plans.json_tree(work.optimized)
        scans = [s for s in table_scans(tree) if s.table[0] == SESSION_CATALOG]
        indexes = self._indexes(work, {s.qualified(self.datasource) for s in scans})
        if not any(found.any for found in indexes.values()):
            return
        counts = Counter(s.key for s in scans)
        for scan in scans:
            found = indexes.get(scan.qualified(self.datasource))
            if found is None or not found.any:
                continue
            if counts[scan.key] != 1:
                work.notes.append(
                    f"{scan.qualified(self.datasource)}: read in a shape not accelerated (a subquery, or read twice)"
                )
                continue
            self._accelerate_scan(work, tree, scan, found)

    def _indexes(self, work: _Work, tables: set[str]) -> dict[str, TableIndexes]:
        found = {}
        for table in sorted(tables):
            started = time.monotonic()
            try:
                found[table] = self.lookup.indexes_of(table)
            except IndexLookupError as exc:
                log.warning("Flint indexes of %s not used: %s", table, exc)
                work.notes.append(f"{table}: indexes not read ({exc})")
            finally:
                work.lookup_s += time.monotonic() - started
        return found

    def _accelerate_scan(self, work: _Work, tree: PlanNode, scan: TableScan, found: TableIndexes) -> None:
        relation = self.plans.node_at(work.optimized, scan.relation.path)
        if not self.plans.is_file_relation(relation):
            return
        if work.switches.covering and found.covering:
            replacement = self._covering(work, tree, scan, found.covering, relation)
            if replacement is not None:
                work.replacements[scan.relation.path] = replacement
                return
        if found.skipping is not None:
            try:
                replacement = self._skipping(work, scan, found.skipping, relation)
            except IndexLookupError as exc:
                log.warning("skipping index %s not used: %s", found.skipping.meta.index_name, exc)
                work.notes.append(f"{found.skipping.meta.index_name}: not read ({exc})")
                return
            if replacement is not None:
                work.replacements[scan.relation.path] = replacement

    # -- skipping ---------------------------------------------------------------------------------

    def _skipping(self, work: _Work, scan: TableScan, index: FoundIndex, relation: Any) -> Any | None:
        name = index.meta.index_name
        if index.state is None or index.state in _GONE:
            work.notes.append(f"{name}: not used, its state is {index.state.value if index.state else 'unknown'}")
            return None
        found = self._predicates(work, scan, name)
        if found is None:
            return None
        predicates, condition = found
        tests = file_tests(index.meta.indexed_columns, predicates, lambda p: self._hash(condition, p))
        if not tests:
            work.notes.append(f"{name}: no condition of the query on a column it indexes, in a form it answers")
            return None
        started = time.monotonic()
        try:
            listed = self.listings.files(relation)
            fields = [f for t in tests for f in t.fields]
            documents = self.lookup.skipping_documents(index.meta, fields, listed)
            selection = select_files(listed, documents, tests, work.switches.hybrid_scan)
        finally:
            work.lookup_s += time.monotonic() - started
        why = " AND ".join(t.describe() for t in tests)
        use = IndexUse(name, SKIPPING, scan.qualified(self.datasource), len(selection.kept), selection.listed, why)
        work.used.append(use)
        if not selection.skipped:
            return None
        # The shorter list says it: the files to read, or those not to. Both are exact against the
        # listing the scan reads; "all but" also reads a file that would appear after it.
        if not work.switches.hybrid_scan or len(selection.kept) <= len(selection.skipped):
            return self.plans.restrict(relation, selection.kept, keep=True)
        return self.plans.restrict(relation, selection.skipped, keep=False)

    def _predicates(self, work: _Work, scan: TableScan, index_name: str) -> tuple[list[ColumnPredicate], Any] | None:
        """The column predicates of the filter right above the scan, and that filter's condition
        in the JVM; None (with a note) when the filter cannot be used at all (none, an OR,
        something non-deterministic)."""
        condition = scan.condition
        if condition is None or scan.filter is None:
            return None
        if has_disjunction(condition):
            work.notes.append(f"{index_name}: not used, the query's filter has an OR")
            return None
        jvm_condition = self.plans.node_at(work.optimized, scan.filter.path).condition()
        if not jvm_condition.deterministic():
            work.notes.append(f"{index_name}: not used, the query's filter is not deterministic")
            return None
        columns = {c.expr_id: c.name for c in scan.columns}
        read = self._literal_reader(jvm_condition)
        found = []
        for conjunct in conjuncts(condition):
            if has_subquery(conjunct):
                continue
            predicate = column_predicate(conjunct, columns, read)
            if predicate is not None:
                found.append(predicate)
        return found, jvm_condition

    def _literal_reader(self, condition: Any) -> Callable[[tuple[int, ...]], list[str] | None]:
        def read(path: tuple[int, ...]) -> list[str] | None:
            return self.plans.internal_values(self.plans.node_at(condition, path))

        return read

    def _hash(self, condition: Any, predicate: ColumnPredicate) -> int | None:
        if len(predicate.literal_paths) != 1:
            return None
        try:
            return self.plans.xxhash64(self.plans.node_at(condition, predicate.literal_paths[0]))
        except Exception:  # noqa: BLE001 - a literal Spark cannot hash: the conjunct prunes nothing
            return None

    # -- covering ---------------------------------------------------------------------------------

    def _covering(
        self, work: _Work, tree: PlanNode, scan: TableScan, candidates: Sequence[FoundIndex], relation: Any
    ) -> Any | None:
        needed = self._needed_columns(work, tree, scan)
        query_filter = self._filter_conjuncts(scan) if scan.filter is not None else None
        if not work.optimized.deterministic():
            work.notes.append(
                f"{scan.qualified(self.datasource)}: covering indexes not used, the query is not deterministic"
            )
            return None
        listed: list[SourceSnapshot | None] = []

        def current() -> SourceSnapshot | None:
            if not listed:
                started = time.monotonic()
                listed.append(SourceSnapshot.of(self.listings.files(relation)))
                work.lookup_s += time.monotonic() - started
            return listed[0]

        for index in candidates:
            meta = index.meta
            index_filter = self._index_filter(scan, meta.filter_condition) if meta.filter_condition else None
            reason = unusable_reason(meta, index.state, needed, query_filter, index_filter, current)
            if reason is not None:
                work.notes.append(f"{meta.index_name}: covering index not used: {reason}")
                continue
            work.used.append(IndexUse(meta.index_name, COVERING, scan.qualified(self.datasource)))
            return self._index_plan(scan, meta.index_name, needed, relation)
        return None

    def _needed_columns(self, work: _Work, tree: PlanNode, scan: TableScan) -> dict[str, str]:
        """The table's columns the query uses anywhere (its result's included), by name, with types."""
        ids = referenced_ids(tree)
        output = work.optimized.output()
        ids |= {int(output.apply(i).exprId().id()) for i in range(output.size())}
        return {c.name: c.data_type for c in scan.columns if c.expr_id in ids}

    def _filter_conjuncts(self, scan: TableScan) -> list[Conjunct]:
        condition = scan.condition
        assert condition is not None
        return _subsumption_conjuncts(condition, {c.expr_id: c.name for c in scan.columns})

    def _index_filter(self, scan: TableScan, where: str) -> list[Conjunct]:
        """A partial index's WHERE as conjuncts over the table's columns (Spark's own reading of it)."""
        catalog, database, name = scan.table
        table = ".".join("`" + p.replace("`", "``") + "`" for p in (catalog, database, name))
        try:
            frame = self.spark.sql(f"SELECT * FROM {table} WHERE {where}")
            scans = table_scans(self.plans.json_tree(self.plans.optimized(frame)))
        except Exception:  # noqa: BLE001 - a WHERE Spark no longer reads: nothing is implied by it
            return [None]
        if len(scans) != 1:
            return [None]
        only = scans[0]
        if only.condition is None:
            return []
        return _subsumption_conjuncts(only.condition, {c.expr_id: c.name for c in only.columns})

    def _index_plan(self, scan: TableScan, index_name: str, needed: dict[str, str], relation: Any) -> Any:
        """The covering index read through the ``opensearch`` data source, in the shape of the
        table's relation: its columns the query needs, typed nulls for the others (never read)."""
        from pyspark.sql import functions as sf
        from pyspark.sql.types import StructType, _parse_datatype_json_value

        self._activate()
        types = {c.name: _parse_datatype_json_value(c.type_json) for c in scan.columns}
        read = [c.name for c in scan.columns if c.name in needed] or [scan.columns[0].name]
        options = {**source_options(self.opensearch), "index": index_name}
        if str(self.spark.conf.get(FILTER_PUSHDOWN_KEY, "false")).lower() == "true":
            options["push_filters"] = "true"
        struct = StructType()
        for name in read:
            struct = struct.add(name, types[name])
        frame = self.spark.read.format("opensearch").options(**options).schema(struct).load()
        columns = [
            (
                sf.col(_quoted(c.name)) if c.name in read and c.name in needed else sf.lit(None).cast(types[c.name])
            ).alias(c.name)
            for c in scan.columns
        ]
        return self.plans.replace_output(relation, self.plans.analyzed(frame.select(*columns)))

    def _activate(self) -> None:
        """The ``opensearch`` source registered, and this thread's session the active one (Spark
        looks Python data sources up in the active session; statements run in a worker thread)."""
        if not self._registered:
            register(self.spark)
            self._registered = True
        jvm: Any = self.spark._jvm
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _subsumption_conjuncts(condition: Expr, columns: dict[int, str]) -> list[Conjunct]:
    found: list[Conjunct] = []
    for conjunct in conjuncts(condition):
        if conjunct.cls == "IsNotNull" and conjunct.children and conjunct.children[0].cls == "AttributeReference":
            column = columns.get(conjunct.children[0].expr_id or -1)
            found.append(NotNull(column) if column is not None else None)
        elif not has_subquery(conjunct):
            found.append(column_predicate(conjunct, columns))
        else:
            found.append(None)
    return found


__all__ = ["FILTER_PUSHDOWN_KEY", "Accelerator", "Prepared"]
