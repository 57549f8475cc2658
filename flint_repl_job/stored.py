"""What the catalog holds, checked as what a caller sends is (docs/validation.md, "What the
catalog holds").

A datasource's catalog is written by more than its own checked statements: any process that
reaches its metastore can create or change a table, a view or a partition there (Hive's metastore
has no authentication), as can another plugin or an older version of this one. So the job judges
every table, view and partition a statement reaches by what the catalog holds for it, on the plan
Spark resolved for the statement (the very plan it then runs):

* a table's or partition's location (or a new table's default one, in its database) must lie
  below the warehouse root, as Hadoop reads it;
* a table's provider must be allowed, with only its allowed options; a Hive table's SerDe and
  formats (and a partition's) must be allowed storage classes, with allowed properties;
* a stored view's text must pass the very check a caller's statement passes, read as Spark
  will read it (a variable Spark would substitute in it is refused);
* a relation of files must read below the warehouse root, and no other kind of relation is read.

Statements that only show metadata (``DESCRIBE``, ``SHOW``, ``EXPLAIN``) are not refused for what
they show, and a ``DROP`` only for a managed table located outside (whose files it would delete).
The JVM side reads the plan in one call (``flint_repl_job/jvm/StoredTables.java``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from flint_repl_job.jvm import helper
from query_core.validation import Checks, QueryRefusedError
from query_core.validation.allowlists import PATH_OPTION, PROPERTY_KEYS, Provider
from query_core.validation.elements import GrammarElement as E

#: Roots of analysed statements that show metadata and read no data: they are run as they are.
METADATA_ONLY = frozenset(
    {
        "DescribeTableCommand", "DescribeColumnCommand", "DescribeRelation", "DescribeColumn",
        "DescribeQueryCommand", "DescribeNamespace", "DescribeNamespaceCommand", "DescribeFunctionCommand",
        "ShowTablesCommand", "ShowTables", "ShowTablesExtended", "ShowTableExtended", "ShowTablesExtendedCommand",
        "ShowPartitionsCommand", "ShowPartitions", "ShowCreateTableCommand", "ShowCreateTableAsSerdeCommand",
        "ShowColumnsCommand", "ShowColumns", "ShowTableProperties", "ShowViews",
        "ShowViewsCommand", "ShowNamespaces", "ShowNamespacesCommand", "ShowFunctions", "ShowFunctionsCommand",
        "ShowCatalogs", "ShowCatalogsCommand", "ShowCreateTable", "ShowTablePropertiesCommand", "ExplainCommand",
        "SetCommand", "ResetCommand", "SetCatalogAndNamespace", "SetNamespaceCommand", "UncacheTable",
        "ClearCacheCommand$",
    }
)  # fmt: skip
#: Roots that drop a table: only a managed table outside the roots is refused (its files would go).
DROPS = frozenset({"DropTable", "DropTableCommand"})
#: How long a location found below its root is not asked again (a table's many partitions, a
#: table read by statement after statement).
INSIDE_TTL_S = 10.0
#: How deeply views named in views are followed by name (in compound statements).
MAX_VIEW_DEPTH = 16
#: Spark substitutes ``${...}`` in a view's text unless the view captured this setting as false
#: (a view is read with the settings it captured, and Spark's defaults for the others).
SUBSTITUTE = "spark.sql.variable.substitute"
#: Settings that change how a view's text is read, as the job's check reads it: a view that
#: captured another value is not read (its text would not be the text checked).
TEXT_READING = {"spark.sql.ansi.doubleQuotedIdentifiers": "false"}
#: Spark's session catalog: the only one whose tables are looked up by name here.
SESSION_CATALOG = "spark_catalog"


class StoredCheckUnavailable(RuntimeError):  # noqa: N818 - the statement's error, worded for its user
    """The JVM helper that reads what a plan reaches could not be made: nothing is run unchecked."""


@contextmanager
def about(what: str) -> Iterator[None]:
    """A refusal raised inside names ``what`` it concerns (``... (<detail>, <what>) is not allowed.``)."""
    try:
        yield
    except QueryRefusedError as exc:
        raise QueryRefusedError(exc.element, f"{exc.detail}, {what}" if exc.detail else what) from None


class StoredMetadata:
    """The checks of what the catalog holds for the tables, views and partitions a statement
    reaches: on its analysed plan (:meth:`plan`), or by name (:meth:`named`) where Spark runs the
    statement's parts itself (a compound statement)."""

    def __init__(
        self,
        spark: Any,
        checks: Checks,
        check_text: Callable[[str], object],
        relations_of: Callable[[str], Iterable[list[str]]],
    ) -> None:
        self.spark = spark
        self.checks = checks
        #: The check of a caller's statement, for a stored view's text.
        self.check_text = check_text
        #: The names of the relations a statement's text reads (for views followed by name).
        self.relations_of = relations_of
        self._helper: Any = None
        #: Locations lately found below their root, and when.
        self._inside: dict[str, float] = {}

    @property
    def active(self) -> bool:
        """Whether the policy checks what data statements reach (``LOCAL``, not the reference's)."""
        policy = self.checks.policy
        return policy.denies(E.LOCATION) or policy.denies(E.DATA_SOURCE)

    # -- entry points -------------------------------------------------------------------------------

    def plan(self, analyzed: Any, root: str) -> bool:
        """Everything ``analyzed`` (a statement's analysed plan, whose root is of class ``root``)
        reads and writes of the catalog, as Spark resolved it, the partitions of its partitioned
        tables as the catalog lists them now; whether it reaches a partitioned table."""
        if not self.active or root in METADATA_ONLY:
            return False
        items = json.loads(str(self._jvm().describe(analyzed, self.spark._jsparkSession, True)))
        self._check(items, drop=root in DROPS)
        return any(item.get("kind") == "table" and item.get("partitioned") for item in items)

    def pinned(self, optimized: Any) -> Any:
        """A query's optimized plan reading exactly the partitions checked: Spark lists a
        query's partitions as it optimizes it (those a filter keeps) or as it runs it (the
        others), so the others are listed now, checked with those, and put into the plan (their
        files are listed once they are checked). The plan to run."""
        pinning = self._jvm().pin(optimized, self.spark._jsparkSession)
        self._check(json.loads(str(pinning.json())), drop=False)
        return pinning.plan()

    def named(self, parts: list[str], depth: int = 0) -> None:
        """The catalog's table or view named ``parts`` (as a statement names it; a temporary view
        or a missing table is nothing), and what a view reads, followed by name."""
        if not self.active or depth > MAX_VIEW_DEPTH:
            return
        if len(parts) == 3 and parts[0].lower() == SESSION_CATALOG:
            parts = parts[1:]
        if not 1 <= len(parts) <= 2:
            return  # another catalog's (Spark refuses it), or a path-based name (checked as FILE)
        database = parts[0] if len(parts) == 2 else None
        items = json.loads(str(self._jvm().describeTable(self.spark._jsparkSession, database, parts[-1])))
        self._check(items, drop=False)
        for item in items:
            if item.get("kind") == "table" and item.get("type") == "VIEW" and item.get("view"):
                namespace = item.get("viewNamespace") or []
                for read in self.relations_of(str(item["view"])):
                    qualified = read if len(read) > 1 or len(namespace) < 2 else [namespace[-1], *read]
                    self.named(qualified, depth + 1)

    # -- what was found -----------------------------------------------------------------------------

    def _check(self, items: list[dict[str, Any]], drop: bool) -> None:
        for item in items:
            kind = item.get("kind")
            if kind == "table":
                self._table(item, drop)
            elif drop:
                continue
            elif kind == "files":
                table = item.get("table")
                where = f"a partition of the stored table {table}" if table else f"{_short(item.get('format'))} files"
                with about(f"read from {where}"):
                    for path in item.get("paths") or []:
                        self._location(str(path))
            elif kind == "path":
                with about("written to by the statement"):
                    self._location(str(item["path"]))
            elif kind == "v2":
                self._v2(item)
            elif kind == "relation":
                self.checks.element(E.DATA_SOURCE, f"a relation of {_short(item.get('class'))}")

    def _table(self, item: Mapping[str, Any], drop: bool) -> None:
        name = str(item.get("name"))
        if item.get("temporary"):
            return  # made by this session's own statements, which were checked; its plan is walked
        if item.get("type") == "VIEW":
            if not drop:
                with about(f"in the stored view {name}"):
                    self._view(item)
            return
        if drop and item.get("type") != "MANAGED":
            return  # dropping an external table deletes no file
        hive = str(item.get("provider") or "hive").lower() == "hive"
        with about(f"of the stored table {name}"):
            location = item.get("location") or item.get("defaultLocation")
            if location:
                self._location(str(location))
            if not drop:
                self._storage(item, hive)
                if hive:
                    self.checks.properties(_pairs(item.get("properties")))
        for partition in item.get("partitions") or []:
            spec = ", ".join(f"{k}={v}" for k, v in (partition.get("spec") or {}).items())
            with about(f"of the partition ({spec}) of the stored table {name}"):
                if partition.get("location"):
                    self._location(str(partition["location"]))
                if hive and not drop:
                    self._storage(partition, hive=True)

    def _storage(self, item: Mapping[str, Any], hive: bool) -> None:
        """A table's (or partition's) storage: a Hive table's SerDe, formats and SerDe properties;
        a data source table's provider and options (stored as its storage properties)."""
        storage = _pairs(item.get("storage"))
        if hive:
            for clause, key in (("SERDE", "serde"), ("INPUTFORMAT", "inputFormat"), ("OUTPUTFORMAT", "outputFormat")):
                if item.get(key):
                    self.checks.storage_class(clause, str(item[key]))
            self.checks.properties(storage)
            return
        provider = self.checks.provider(str(item.get("provider")))
        self._options(provider, storage)

    def _options(self, provider: Provider | None, options: Iterable[tuple[str, str]]) -> None:
        """A data source table's stored options: its provider's, or a SerDe setting the
        metastore keeps beside them (``serialization.format``); ``path`` is a location."""
        for key, value in options:
            lowered = key.lower()
            if lowered == PATH_OPTION:
                self._location(value)
            elif (provider is None or lowered not in provider.keys) and lowered not in PROPERTY_KEYS:
                self.checks.element(E.DATA_SOURCE_OPTION, f"{provider.name if provider else '?'}: {key}")

    def _view(self, item: Mapping[str, Any]) -> None:
        """A stored view: its text checked as a caller's statement is, read as Spark will read it
        (a view is parsed with the settings it captured, and Spark's defaults for the others)."""
        text = item.get("view")
        if not text:
            self.checks.element(E.DYNAMIC_SQL, "a view without its text")
            return
        captured = {str(k): str(v).strip().lower() for k, v in (item.get("viewConf") or {}).items()}
        if "${" in text and captured.get(SUBSTITUTE, "true") != "false":
            self.checks.element(E.DYNAMIC_SQL, "a variable substituted in a view's text")
        for key, read_as in TEXT_READING.items():
            if captured.get(key, read_as) != read_as:
                self.checks.element(E.PROTECTED_CONFIG, f"{key} captured")
        self.check_text(str(text))

    def _v2(self, item: Mapping[str, Any]) -> None:
        name = str(item.get("name"))
        with about(f"of the stored table {name}"):
            provider = item.get("provider")
            if provider:
                self.checks.provider(str(provider))
            else:
                self.checks.element(E.DATA_SOURCE, _short(item.get("class")))
            if item.get("location"):
                self._location(str(item["location"]))

    def _location(self, location: str) -> None:
        now = time.monotonic()
        found = self._inside.get(location)
        if found is not None and now - found < INSIDE_TTL_S:
            return
        self.checks.location(location)
        if len(self._inside) > 65_536:
            self._inside.clear()
        self._inside[location] = now

    def _jvm(self) -> Any:
        if self._helper is None:
            self._helper = helper(self.spark, "StoredTables")
            if self._helper is None:
                raise StoredCheckUnavailable(
                    "the job cannot read what the catalog holds for this statement (its JVM helper could not be "
                    "compiled), so it does not run it"
                )
        return self._helper


def _pairs(value: Any) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in value.items()] if isinstance(value, dict) else []


def _short(class_name: Any) -> str:
    return str(class_name or "?").rsplit(".", 1)[-1]
