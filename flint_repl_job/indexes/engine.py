"""Flint statements as the job runs them: one method per statement kind.

CREATE, REFRESH, VACUUM (and DROP, should one reach a job) run as transactions over the index's
state document (:class:`query_core.index_ops.IndexTransaction`) owned by this job. DESCRIBE and
the SHOW statements read index metadata (the mappings' ``_meta``) and state documents. Every
statement answers a :class:`FlintOutput` (DDL answers no rows), which the statement runner turns
into a result like any Spark query's.

Messages follow the reference's wording ("Flint index ... already exists", "Index ... doesn't
exist", "Table ... is not found", "Column ... does not exist").
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flint_repl_job.indexes.builders import (
    FILE_PATH_COLUMN,
    ID_COLUMN,
    build_frame,
    session_table,
    source_tables,
    table_frame,
)
from flint_repl_job.indexes.streaming import (
    IndexStream,
    StreamOptionError,
    StreamSettings,
    auto_refresh_options,
    check_stream_options,
    checkpoint_location,
    delete_checkpoint,
    failure_text,
    start_stream,
)
from flint_repl_job.opensearch_source import index_body, register, source_options
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError, ConflictError
from query_core.flint import (
    AlterIndex,
    AnalyzeIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    DescribeIndex,
    DropIndex,
    IndexKind,
    RecoverIndexJob,
    RefreshIndex,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    Statement,
    VacuumIndex,
    flint_index_name,
    listing,
)
from query_core.flint.ast import CreateStatement
from query_core.flint.index_meta import ENV_APPLICATION_ID, ENV_JOB_ID, IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.naming import sanitize_index_name
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import FlintIndexStateDoc, now_millis
from query_core.states import FlintIndexState, SessionState
from query_core.store import Store
from query_core.validation import ALLOW_ALL, Checks, ValidationPolicy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

#: How long RECOVER waits for the job that ran the index's stream before to stop it.
RECOVER_WAIT_S = 60.0


class FlintIndexError(Exception):
    """A Flint statement that cannot run as asked (reported as ``Fail to run query``)."""


@dataclass
class FlintOutput:
    """A statement's answer: its columns and rows (tuples in column order)."""

    schema: StructType
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def _strings(*names: str, boolean: tuple[str, ...] = ()) -> StructType:
    from pyspark.sql.types import BooleanType, StringType, StructField, StructType

    return StructType([StructField(n, BooleanType() if n in boolean else StringType()) for n in names])


def _no_rows() -> FlintOutput:
    from pyspark.sql.types import StructType

    return FlintOutput(StructType([]))


@dataclass(frozen=True)
class FlintContext:
    """Where the job's Flint statements run and whom they are recorded as."""

    spark: SparkSession
    store: Store
    opensearch: OpenSearchConfig
    datasource: str
    application_id: str = ""
    job_id: str = ""
    #: What statements may hold: VACUUM deletes no checkpoint outside its checkpoint root.
    validation: ValidationPolicy = ALLOW_ALL


class FlintEngine:
    def __init__(self, context: FlintContext) -> None:
        self.context = context
        self.spark = context.spark
        self.store = context.store
        self.datasource = context.datasource
        self._registered = False
        #: Set when the engine runs in a streaming job (:meth:`enable_streaming`): auto refresh.
        self.stream_settings: StreamSettings | None = None
        self._stream: IndexStream | None = None
        self._handlers: dict[type, Callable[[Any], FlintOutput]] = {
            CreateSkippingIndex: self.create,
            CreateCoveringIndex: self.create,
            CreateMaterializedView: self.create,
            RefreshIndex: self.refresh,
            VacuumIndex: self.vacuum,
            DropIndex: self.drop,
            DescribeIndex: self.describe,
            ShowFlintIndexes: self.show_flint_indexes,
            ShowCoveringIndexes: self.show_covering_indexes,
            ShowMaterializedViews: self.show_materialized_views,
            AnalyzeIndex: self.analyze,
            AlterIndex: self.alter,
            RecoverIndexJob: self.recover,
        }

    def run(self, statement: Statement) -> FlintOutput:
        return self._handlers[type(statement)](statement)

    # -- streaming jobs ---------------------------------------------------------------------

    def enable_streaming(self, settings: StreamSettings) -> None:
        """Let this engine start auto refreshes (CREATE/ALTER with auto refresh, RECOVER): only
        a streaming job, which watches and stops the stream, does."""
        self.stream_settings = settings

    def take_stream(self) -> IndexStream | None:
        """The stream the last statement started, handed over to the caller (once)."""
        stream, self._stream = self._stream, None
        return stream

    def settings(self) -> StreamSettings:
        """The streaming job's settings, or those of the Spark conf (a batch job's VACUUM)."""
        if self.stream_settings is not None:
            return self.stream_settings
        conf = self.spark.conf
        return StreamSettings.from_conf(lambda key: conf.get(key, None))

    # -- helpers ----------------------------------------------------------------------------

    def transaction(self, index_name: str) -> IndexTransaction:
        target = IndexTarget(self.datasource, index_name)
        return IndexTransaction(
            self.store, target, application_id=self.context.application_id, job_id=self.context.job_id
        )

    def read_meta(self, index_name: str) -> IndexMeta | None:
        """The index's metadata, or None when the OpenSearch index does not exist."""
        found = flint_meta(self.store.admin, index_name)
        if found is None:
            return None
        meta = IndexMeta.from_meta(index_name, found)
        if meta is None:
            raise FlintIndexError(f"Index {index_name} is not a Flint index")
        return meta

    def _require_meta(self, index_name: str) -> IndexMeta:
        meta = self.read_meta(index_name)
        if meta is None:
            raise FlintIndexError(f"Index {index_name} doesn't exist")
        return meta

    def write(self, frame: DataFrame, meta: IndexMeta, overwrite: bool) -> None:
        """Bulk-write ``frame`` into the index (ids from :data:`ID_COLUMN` when present)."""
        if not self._registered:
            register(self.spark)
            self._registered = True
        # Statements run in a worker thread, whose JVM thread has no active session: Spark then
        # looks Python data sources up elsewhere and does not find the one just registered.
        jvm: Any = self.spark._jvm
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
        options = {**source_options(self.context.opensearch), "index": meta.index_name}
        if ID_COLUMN in frame.columns:
            options.update(id_column=ID_COLUMN, id_column_in_source="false")
        frame.write.format("opensearch").options(**options).mode("overwrite" if overwrite else "append").save()

    # -- CREATE -----------------------------------------------------------------------------

    def create(self, statement: CreateStatement) -> FlintOutput:
        auto = statement.options.auto_refresh
        if auto and self.stream_settings is None:
            raise FlintIndexError("an index with auto_refresh = true is created by a streaming job, not this one")
        meta, schema = self.new_index(statement)
        if auto:
            self._check_stream(meta)
        elif meta.incremental_refresh and meta.kind is not IndexKind.SKIPPING:
            self._check_stream(meta, incremental=True)
        if self.store.admin.index_exists(meta.index_name):
            if statement.if_not_exists:
                log.info("index %s exists: nothing to create", meta.index_name)
                return _no_rows()
            raise FlintIndexError(f"Flint index {meta.index_name} already exists")
        if schema is None:
            schema = self._output_schema(meta)

        def work() -> None:
            self.store.admin.create_index(meta.index_name, self._index_body(meta, schema))

        self.transaction(meta.index_name).run("create", work, via_fields={"job_start_time": now_millis()})
        if auto:
            self.start_auto_refresh(meta)
        return _no_rows()

    def new_index(self, statement: CreateStatement) -> tuple[IndexMeta, StructType | None]:
        """The metadata of the index ``statement`` creates, its source resolved and checked, and
        the index's fields when resolving the source gave them (a view's query is analysed once)."""
        ds = self.datasource
        index_name = flint_index_name(statement.index, ds)
        options = statement.options.with_defaults()
        properties: dict[str, Any] = {}
        env = {
            k: v for k, v in ((ENV_APPLICATION_ID, self.context.application_id), (ENV_JOB_ID, self.context.job_id)) if v
        }
        if env:
            properties["env"] = env
        if isinstance(statement, CreateMaterializedView):
            view = str(statement.name.qualify(ds))
            properties["sourceTables"] = source_tables(statement.query, ds)
            probe = IndexMeta(index_name, IndexKind.MV, view, statement.query, (), options, properties)
            schema = self._output_schema(probe)
            columns = tuple({"columnName": f.name, "columnType": f.dataType.simpleString()} for f in schema.fields)
            return dataclasses.replace(probe, indexed_columns=columns), schema
        table = str(statement.table.qualify(ds))
        types = self._table_columns(table)
        if isinstance(statement, CreateSkippingIndex):
            skipping = []
            for column in statement.columns:
                name, type_name = self._column(types, column.name)
                skipping.append(
                    {
                        "kind": column.kind.value,
                        "parameters": dict(column.params),
                        "columnName": name,
                        "columnType": type_name,
                    }
                )
            meta = IndexMeta(index_name, IndexKind.SKIPPING, index_name, table, tuple(skipping), options, properties)
            return meta, None
        covering = []
        for column_name in statement.columns:
            name, type_name = self._column(types, column_name)
            covering.append({"columnName": name, "columnType": type_name})
        if statement.where:
            properties["filterCondition"] = statement.where
        meta = IndexMeta(index_name, IndexKind.COVERING, statement.name, table, tuple(covering), options, properties)
        return meta, None

    # -- auto refresh -----------------------------------------------------------------------

    def _check_stream(self, meta: IndexMeta, incremental: bool = False) -> None:
        try:
            check_stream_options(meta, self.settings(), incremental=incremental)
        except StreamOptionError as exc:
            raise FlintIndexError(str(exc)) from None

    def _start_stream(self, meta: IndexMeta, fresh: bool, available_now: bool = False) -> IndexStream:
        if not self._registered:
            register(self.spark)
            self._registered = True
        try:
            return start_stream(
                self.spark,
                meta,
                self.datasource,
                self.settings(),
                source_options(self.context.opensearch),
                lambda frame: self.write(frame, meta, overwrite=False),
                fresh=fresh,
                available_now=available_now,
            )
        except StreamOptionError as exc:
            raise FlintIndexError(str(exc)) from None

    def start_auto_refresh(self, meta: IndexMeta) -> None:
        """After CREATE: a stream from a fresh checkpoint, then ``active -> refreshing`` under this
        job. An index whose stream did not start stays ``active``, with the error recorded."""
        transaction = self.transaction(meta.index_name)
        try:
            stream = self._start_stream(meta, fresh=True)
        except Exception as exc:
            self._record_error(transaction, f"auto refresh did not start: {failure_text(exc)}")
            raise
        try:
            transaction.run("start auto refresh", lambda: None)
        except BaseException:
            stream.stop_gracefully()
            raise
        self._stream = stream

    def _record_error(self, transaction: IndexTransaction, error: str) -> None:
        """Write ``error`` on the ``active`` state document, keeping its state (best effort)."""
        current = transaction.current()
        if current is None or current.doc.state is not FlintIndexState.ACTIVE:
            return
        try:
            self.store.index_states.record_error(current, error)
        except (ConflictError, AsyncQueryError) as exc:
            log.warning("could not record the error on %s: %s", transaction.target.index_name, exc)

    def alter(self, statement: AlterIndex) -> FlintOutput:
        """ALTER ... WITH (auto_refresh = true): rewrite ``_meta.options`` and start the stream from
        the index's checkpoint, as ``alter to auto refresh`` (ALTER to manual is the plugin's)."""
        if self.stream_settings is None or not statement.options.auto_refresh:
            return self.not_here(statement)
        index_name = flint_index_name(statement.index, self.datasource)
        raw = flint_meta(self.store.admin, index_name)
        meta = IndexMeta.from_meta(index_name, raw) if raw else None
        if raw is None or meta is None:
            raise FlintIndexError(f"Index {index_name} doesn't exist")
        try:
            options = auto_refresh_options(meta.options, statement.options.raw)
        except StreamOptionError as exc:
            raise FlintIndexError(str(exc)) from None
        altered = dataclasses.replace(meta, options=options)
        self._check_stream(altered)

        def work() -> None:
            self.store.admin.put_mapping_meta(index_name, {**raw, "options": options})
            try:
                self._stream = self._start_stream(altered, fresh=False)
            except BaseException:
                self.store.admin.put_mapping_meta(index_name, raw)
                raise

        self._run_starting("alter to auto refresh", index_name, work)
        return _no_rows()

    def recover(self, statement: RecoverIndexJob) -> FlintOutput:
        """RECOVER INDEX JOB: a new stream of an auto-refresh index from its checkpoint."""
        if self.stream_settings is None:
            return self.not_here(statement)
        index_name = sanitize_index_name(statement.index_name.strip("`"))
        meta = self._require_meta(index_name)
        if not meta.auto_refresh:
            raise FlintIndexError(f"Index {index_name} is not refreshed automatically: there is no job to recover")
        self._check_stream(meta)
        before = self.transaction(index_name).current()
        previous = before.doc.job_id if before is not None and before.doc.job_id != self.context.job_id else ""

        def work() -> None:
            if previous:
                self._wait_for_job_to_stop(previous, index_name)
            self._stream = self._start_stream(meta, fresh=False)

        self._run_starting("recover", index_name, work)
        return _no_rows()

    def _wait_for_job_to_stop(self, job_id: str, index_name: str) -> None:
        """Two streams must never share a checkpoint: wait until the job that last ran this
        index's stream has no live session (the move to ``recovering`` asked it to stop)."""
        deadline = time.monotonic() + RECOVER_WAIT_S
        live = [SessionState.NOT_STARTED, SessionState.RUNNING]
        while self.store.sessions.find(self.datasource, live, job_id=job_id):
            if time.monotonic() >= deadline:
                raise FlintIndexError(
                    f"job {job_id} still runs the stream of {index_name} after {RECOVER_WAIT_S:g} s; "
                    "stop it first (ALTER ... WITH (auto_refresh = false))"
                )
            time.sleep(0.5)

    def _run_starting(self, operation: str, index_name: str, work: Callable[[], None]) -> None:
        """Run an operation whose work starts the stream; a stream started by an operation that
        then failed to commit is stopped."""
        try:
            self.transaction(index_name).run(operation, work, via_fields={"job_start_time": now_millis()})
        except BaseException:
            stream = self.take_stream()
            if stream is not None:
                stream.stop_gracefully()
            raise

    def _table_columns(self, table: str) -> dict[str, str]:
        from pyspark.errors import AnalysisException

        try:
            schema = table_frame(self.spark, table, self.datasource).schema
        except AnalysisException:
            raise FlintIndexError(f"Table {table} is not found") from None
        return {f.name: f.dataType.simpleString() for f in schema.fields}

    @staticmethod
    def _column(types: dict[str, str], name: str) -> tuple[str, str]:
        for column, type_name in types.items():
            if column.lower() == name.lower():
                return column, type_name
        raise FlintIndexError(f"Column {name} does not exist")

    def _output_schema(self, meta: IndexMeta) -> StructType:
        """The index's fields: the schema of its contents, analysed without running anything."""
        from pyspark.sql.types import StructType

        frame = build_frame(self.spark, meta, self.datasource)
        return StructType([f for f in frame.schema.fields if f.name != ID_COLUMN])

    def _index_body(self, meta: IndexMeta, schema: StructType) -> dict[str, Any]:
        settings = json.loads(meta.options.get("index_settings", "{}") or "{}")
        body = index_body(schema, meta.to_meta(), settings)
        extra = json.loads(meta.options.get("index_mappings", "{}") or "{}")
        if extra:
            extra_properties = extra.get("properties", extra)
            body["mappings"]["properties"].update(extra_properties)
        return body

    # -- REFRESH ----------------------------------------------------------------------------

    def refresh(self, statement: RefreshIndex) -> FlintOutput:
        index_name = flint_index_name(statement.index, self.datasource)
        meta = self._require_meta(index_name)
        if meta.auto_refresh:
            raise FlintIndexError(
                f"Index {index_name} is refreshed automatically: REFRESH applies to manual refresh only"
            )

        def work() -> None:
            self.refresh_data(meta)

        self.transaction(index_name).run(
            "refresh",
            work,
            via_fields={"last_refresh_start_time": now_millis()},
            end_fields=lambda: {"last_refresh_complete_time": now_millis()},
        )
        return _no_rows()

    def refresh_data(self, meta: IndexMeta) -> None:
        """A full refresh rewrites the index; an incremental refresh of a skipping index adds the
        source files not indexed yet (a file's document is written once, under its path's sha1);
        that of a covering index or view runs its stream over what is new since its checkpoint."""
        if meta.incremental_refresh and meta.kind is not IndexKind.SKIPPING:
            self.incremental_stream_refresh(meta)
            return
        frame = build_frame(self.spark, meta, self.datasource)
        if meta.incremental_refresh and meta.kind is IndexKind.SKIPPING:
            from pyspark.sql import functions as sf

            done = [source.get(FILE_PATH_COLUMN) for _, source in self.store.admin.scan(meta.index_name)]
            if done:
                frame = frame.where(~sf.col(FILE_PATH_COLUMN).isin(done))
            self.write(frame, meta, overwrite=False)
            return
        self.write(frame, meta, overwrite=True)

    def incremental_stream_refresh(self, meta: IndexMeta) -> None:
        """One run of the index's stream with an available-now trigger, awaited to its end.

        The stream runs in its own Spark job group: a cancel of the statement does not reach it;
        it ends once it has processed the files that were there when it started."""
        stream = self._start_stream(meta, fresh=False, available_now=True)
        stream.query.awaitTermination()
        exc = stream.query.exception()
        if exc is not None:
            raise FlintIndexError(f"Incremental refresh of {meta.index_name} failed: {failure_text(exc)}")

    # -- VACUUM and DROP --------------------------------------------------------------------

    def vacuum(self, statement: VacuumIndex) -> FlintOutput:
        index_name = flint_index_name(statement.index, self.datasource)
        meta = self.read_meta(index_name)
        transaction = self.transaction(index_name)
        if meta is None and transaction.current() is None:
            log.info("Flint index to vacuum doesn't exist: %s", index_name)
            return _no_rows()

        location = checkpoint_location(meta.options, index_name, self.settings()) if meta is not None else None
        if location:
            # Refused before anything is deleted: the location came from the index's options,
            # written when it was created (perhaps by another plugin, or before this check).
            Checks(self.context.validation).checkpoint(location)

        def work() -> None:
            self.store.admin.delete_index(index_name)
            if location:
                self.delete_checkpoint(location)

        transaction.run("vacuum", work)
        return _no_rows()

    def delete_checkpoint(self, location: str) -> None:
        """Delete a checkpoint directory through Hadoop's file system (local, HDFS, S3)."""
        delete_checkpoint(self.spark, location)

    def drop(self, statement: DropIndex) -> FlintOutput:
        index_name = flint_index_name(statement.index, self.datasource)
        if not self.store.admin.index_exists(index_name):
            log.info("Flint index to be deleted doesn't exist: %s", index_name)
            return _no_rows()
        self.transaction(index_name).run("drop", lambda: None)
        return _no_rows()

    def not_here(self, statement: Statement) -> FlintOutput:
        raise FlintIndexError(f"{type(statement).__name__} is not run by a job of this kind")

    # -- DESCRIBE and SHOW --------------------------------------------------------------------

    def describe(self, statement: DescribeIndex) -> FlintOutput:
        meta = self.read_meta(flint_index_name(statement.index, self.datasource))
        kind = statement.index.kind
        schema = _strings(*_DESCRIBE_COLUMNS[kind])
        if meta is None or meta.kind is not kind:
            return FlintOutput(schema)
        return FlintOutput(schema, [_described(kind, column) for column in meta.indexed_columns])

    def metas(self, prefix_parts: list[str]) -> list[IndexMeta]:
        """Flint indexes whose names start with ``flint_<parts joined by _>_``, sorted by name."""
        return listing.metas(self.store.admin, prefix_parts)

    def metas_in(self, catalog: str, database: str | None) -> list[IndexMeta]:
        """The Flint indexes whose table (or view) is in ``catalog`` (and ``database`` if given)."""
        return listing.metas_in(self.store.admin, catalog, database)

    def show_flint_indexes(self, statement: ShowFlintIndexes) -> FlintOutput:
        columns = listing.show_flint_index_columns(statement.extended)
        schema = _strings(*columns, boolean=listing.BOOLEAN_COLUMNS)

        def state_of(meta: IndexMeta) -> FlintIndexStateDoc | None:
            current = self.transaction(meta.index_name).current()
            return current.doc if current is not None else None

        listed = self.metas_in(statement.catalog, statement.database)
        return FlintOutput(schema, listing.show_flint_index_rows(listed, state_of, statement.extended))

    def show_covering_indexes(self, statement: ShowCoveringIndexes) -> FlintOutput:
        table = statement.table.qualify(self.datasource)
        rows = [
            (meta.name,)
            for meta in self.metas(list(table.parts))
            if meta.kind is IndexKind.COVERING and meta.source == str(table)
        ]
        return FlintOutput(_strings("index_name"), rows)

    def show_materialized_views(self, statement: ShowMaterializedViews) -> FlintOutput:
        rows = [
            (meta.listed_names()[2],)
            for meta in self.metas_in(statement.catalog, statement.database)
            if meta.kind is IndexKind.MV
        ]
        return FlintOutput(_strings("materialized_view_name"), rows)

    def analyze(self, statement: AnalyzeIndex) -> FlintOutput:
        """Recommended skipping kinds for the table's columns, by data type (as the reference's
        data-type strategy): partition columns PARTITION, numbers and times MIN_MAX, others
        VALUE_SET for low-cardinality types and BLOOM_FILTER for strings."""
        table = str(statement.index.table.qualify(self.datasource))
        schema = _strings("column_name", "column_type", "reason", "skipping_type")
        types = self._table_columns(table)
        partitions = set(self._partition_columns(table))
        rows = []
        for name, type_name in types.items():
            kind, reason = _recommendation(type_name, name in partitions)
            if kind:
                rows.append((name, type_name, reason, kind))
        return FlintOutput(schema, rows)

    def _partition_columns(self, table: str) -> list[str]:
        try:
            return [
                c.name for c in self.spark.catalog.listColumns(session_table(table, self.datasource)) if c.isPartition
            ]
        except Exception:  # noqa: BLE001 - a catalog without column listing: no partition hints
            return []


#: DESCRIBE's columns per index kind (the reference's).
_DESCRIBE_COLUMNS: dict[IndexKind, tuple[str, ...]] = {
    IndexKind.SKIPPING: ("indexed_col_name", "data_type", "skip_type"),
    IndexKind.COVERING: ("indexed_col_name", "data_type", "index_type"),
    IndexKind.MV: ("output_col_name", "data_type"),
}


def _described(kind: IndexKind, column: dict[str, Any]) -> tuple[Any, ...]:
    """One DESCRIBE row: the column, its type, and what indexes it (skipping kind, "indexed")."""
    name, type_name = column.get("columnName"), column.get("columnType")
    if kind is IndexKind.SKIPPING:
        return name, type_name, column.get("kind")
    if kind is IndexKind.COVERING:
        return name, type_name, "indexed"
    return name, type_name


_MIN_MAX_TYPES = ("int", "bigint", "smallint", "tinyint", "double", "float", "date", "timestamp")


def _recommendation(type_name: str, partition: bool) -> tuple[str, str]:
    if partition:
        return "PARTITION", "PARTITION data structure is recommended for partition columns"
    if type_name in _MIN_MAX_TYPES or type_name.startswith("decimal"):
        return "MIN_MAX", "MIN_MAX data structure is recommended for numeric and time columns"
    if type_name == "boolean":
        return "VALUE_SET", "VALUE_SET data structure is recommended for low-cardinality columns"
    if type_name == "string" or type_name.startswith(("varchar", "char")):
        return "BLOOM_FILTER", "BLOOM_FILTER data structure is recommended for high-cardinality columns"
    return "", ""


__all__ = ["FlintContext", "FlintEngine", "FlintIndexError", "FlintOutput"]
