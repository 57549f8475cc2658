"""Flint statements as the job runs them: one method per statement kind (the reading ones in
:mod:`.reads`, auto refresh in :mod:`.auto_refresh`).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flint_repl_job.indexes.auto_refresh import AutoRefresh
from flint_repl_job.indexes.builders import (
    FILE_PATH_COLUMN,
    ID_COLUMN,
    build_frame,
    source_tables,
    table_frame,
)
from flint_repl_job.indexes.output import FlintIndexError, FlintOutput, no_rows
from flint_repl_job.indexes.reads import IndexReads
from flint_repl_job.indexes.snapshots import refresh_covering
from flint_repl_job.indexes.streaming import (
    STREAMS_ONLY,
    checkpoint_location,
    delete_checkpoint,
    failure_text,
)
from flint_repl_job.opensearch_source import index_body, register, source_options
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError, ConflictError, InvalidRequestError
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
    check_catalog,
    check_index_catalog,
    flint_index_name,
)
from query_core.flint.ast import CreateStatement
from query_core.flint.index_meta import ENV_APPLICATION_ID, ENV_JOB_ID, IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.naming import sanitize_index_name
from query_core.flint.scheduling import SchedulerPolicy, altered_to_auto, is_scheduled, with_schedule
from query_core.index_ops import IndexTarget, IndexTransaction
from query_core.models import now_millis
from query_core.states import FlintIndexState
from query_core.store import Store
from query_core.validation import ALLOW_ALL, ValidationPolicy
from query_core.validation.index_settings import check_index_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


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
    #: Whether auto-refresh indexes are refreshed by the service's scheduler (as the plugin,
    #: which dispatched the statement, decided: docs/flint.md) or each by a stream.
    scheduler: SchedulerPolicy = STREAMS_ONLY


class FlintEngine:
    def __init__(self, context: FlintContext) -> None:
        self.context = context
        self.spark = context.spark
        self.store = context.store
        self.datasource = context.datasource
        self._registered = False
        #: Auto refresh: streams, started only where a streaming job enabled them.
        self.streams = AutoRefresh(
            self.spark,
            self.store,
            self.datasource,
            context.opensearch,
            lambda frame, meta: self.write(frame, meta, overwrite=False),
            self.register_source,
            context.validation,
        )
        self.reads = IndexReads(
            self.spark, self.store, self.datasource, self.read_meta, self.transaction, self.table_columns
        )
        self._handlers: dict[type, Callable[[Any], FlintOutput]] = {
            CreateSkippingIndex: self.create,
            CreateCoveringIndex: self.create,
            CreateMaterializedView: self.create,
            RefreshIndex: self.refresh,
            VacuumIndex: self.vacuum,
            DropIndex: self.drop,
            DescribeIndex: self.reads.describe,
            ShowFlintIndexes: self.reads.show_flint_indexes,
            ShowCoveringIndexes: self.reads.show_covering_indexes,
            ShowMaterializedViews: self.reads.show_materialized_views,
            AnalyzeIndex: self.reads.analyze,
            AlterIndex: self.alter,
            RecoverIndexJob: self.recover,
        }

    def run(self, statement: Statement) -> FlintOutput:
        if self.datasource:  # another datasource's indexes are not this job's (also refused at POST)
            check_catalog(statement, self.datasource)
        return self._handlers[type(statement)](statement)

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

    def register_source(self) -> None:
        """Register the index data source with this Spark session, once."""
        if not self._registered:
            register(self.spark)
            self._registered = True

    def write(self, frame: DataFrame, meta: IndexMeta, overwrite: bool) -> None:
        """Bulk-write ``frame`` into the index (ids from :data:`ID_COLUMN` when present)."""
        self.register_source()
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
        meta, schema = self.new_index(statement)
        auto, scheduled = meta.auto_refresh, is_scheduled(meta.options)
        if auto and scheduled == self.streams.enabled:
            runs = "a batch job (its refreshes are scheduled)" if scheduled else "a streaming job"
            raise FlintIndexError(f"an index with auto_refresh = true is created by {runs}, not this one")
        if auto:
            self.streams.check(meta)
        elif meta.incremental_refresh and meta.kind is not IndexKind.SKIPPING:
            self.streams.check(meta, incremental=True)
        if self.store.admin.index_exists(meta.index_name):
            if statement.if_not_exists:
                log.info("index %s exists: nothing to create", meta.index_name)
                return no_rows()
            raise FlintIndexError(f"Flint index {meta.index_name} already exists")
        if schema is None:
            schema = self._output_schema(meta)
        body = self._index_body(meta, schema)

        def work() -> None:
            self.store.admin.create_index(meta.index_name, body)
            if scheduled:  # its runs resume from the checkpoint: one a dropped index left goes first
                self.streams.clear_checkpoint(meta)

        self.transaction(meta.index_name).run("create", work, via_fields={"job_start_time": now_millis()})
        if auto and not scheduled:
            self.start_auto_refresh(meta)
        return no_rows()

    def new_index(self, statement: CreateStatement) -> tuple[IndexMeta, StructType | None]:
        """The metadata of the index ``statement`` creates, its source resolved and checked, and
        the index's fields when resolving the source gave them (a view's query is analysed once)."""
        ds = self.datasource
        index_name = flint_index_name(statement.index, ds)
        try:
            options = with_schedule(statement.options.with_defaults(), self.context.scheduler)
        except InvalidRequestError as exc:
            raise FlintIndexError(exc.message) from None
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
        types = self.table_columns(table)
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

    def start_auto_refresh(self, meta: IndexMeta) -> None:
        """After CREATE: a stream from a fresh checkpoint, then ``active -> refreshing`` under this
        job. An index whose stream did not start stays ``active``, with the error recorded."""
        transaction = self.transaction(meta.index_name)
        try:
            stream = self.streams.start(meta, fresh=True)
        except Exception as exc:
            self._record_error(transaction, f"auto refresh did not start: {failure_text(exc)}")
            raise
        try:
            transaction.run("start auto refresh", lambda: None)
        except BaseException:
            stream.stop_gracefully()
            raise
        self.streams.hold(stream)

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
        if not self.streams.enabled or not statement.options.auto_refresh:
            return self.not_here(statement)
        index_name = flint_index_name(statement.index, self.datasource)
        raw = flint_meta(self.store.admin, index_name)
        meta = IndexMeta.from_meta(index_name, raw) if raw else None
        if raw is None or meta is None:
            raise FlintIndexError(f"Index {index_name} doesn't exist")
        try:
            options = altered_to_auto(meta.options, statement.options.raw, self.context.scheduler)
        except InvalidRequestError as exc:
            raise FlintIndexError(exc.message) from None
        if is_scheduled(options):
            raise FlintIndexError(f"Index {index_name} is to be refreshed by the scheduler: the plugin alters it")
        altered = dataclasses.replace(meta, options=options)
        self.streams.check(altered)

        def work() -> None:
            self.store.admin.put_mapping_meta(index_name, {**raw, "options": options})
            try:
                self.streams.hold(self.streams.start(altered, fresh=False))
            except BaseException:
                self.store.admin.put_mapping_meta(index_name, raw)
                raise

        self._run_starting("alter to auto refresh", index_name, work)
        return no_rows()

    def recover(self, statement: RecoverIndexJob) -> FlintOutput:
        """RECOVER INDEX JOB: a new stream of an auto-refresh index from its checkpoint."""
        if not self.streams.enabled:
            return self.not_here(statement)
        index_name = sanitize_index_name(statement.index_name.strip("`"))
        meta = self._require_meta(index_name)
        if self.datasource:  # its name alone may be another datasource's (run() checked it)
            check_index_catalog(meta, self.datasource)
        if not meta.auto_refresh:
            raise FlintIndexError(f"Index {index_name} is not refreshed automatically: there is no job to recover")
        self.streams.check(meta)
        before = self.transaction(index_name).current()
        previous = before.doc.job_id if before is not None and before.doc.job_id != self.context.job_id else ""

        def work() -> None:
            if previous:
                self.streams.wait_for_job_to_stop(previous, index_name)
            self.streams.hold(self.streams.start(meta, fresh=False))

        self._run_starting("recover", index_name, work)
        return no_rows()

    def _run_starting(self, operation: str, index_name: str, work: Callable[[], None]) -> None:
        """Run an operation whose work starts the stream; a stream started by an operation that
        then failed to commit is stopped."""
        try:
            self.transaction(index_name).run(operation, work, via_fields={"job_start_time": now_millis()})
        except BaseException:
            stream = self.streams.take()
            if stream is not None:
                stream.stop_gracefully()
            raise

    def table_columns(self, table: str) -> dict[str, str]:
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
        """The new index's settings and mappings. Its settings are checked again here, as the
        plugin checks them, whatever checked the statement or wrote its options: a refusal
        (:class:`QueryRefusedError`) has the plugin's words (docs/validation.md)."""
        try:
            settings = json.loads(meta.options.get("index_settings", "{}") or "{}")
        except ValueError:
            raise FlintIndexError("option index_settings must be a JSON object") from None
        check_index_settings(settings, self.context.validation)
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
        scheduled = is_scheduled(meta.options)
        if meta.auto_refresh and not scheduled:
            raise FlintIndexError(
                f"Index {index_name} is refreshed automatically: REFRESH applies to manual refresh only"
            )

        def work() -> None:
            if scheduled:  # what is new since its checkpoint, as each scheduled run does
                self.incremental_stream_refresh(meta)
            else:
                self.refresh_data(meta)

        self.transaction(index_name).run(
            "refresh",
            work,
            via_fields={"last_refresh_start_time": now_millis()},
            end_fields=lambda: {"last_refresh_complete_time": now_millis()},
        )
        return no_rows()

    def refresh_data(self, meta: IndexMeta) -> None:
        """A full refresh rewrites the index; an incremental refresh of a skipping index adds the
        source files not indexed yet (a file's document is written once, under its path's sha1);
        that of a covering index or view runs its stream over what is new since its checkpoint."""
        if meta.incremental_refresh and meta.kind is not IndexKind.SKIPPING:
            self.incremental_stream_refresh(meta)
            return
        frame = build_frame(self.spark, meta, self.datasource)
        if meta.kind is IndexKind.COVERING:
            write = lambda f, m: self.write(f, m, overwrite=True)  # noqa: E731
            refresh_covering(self.spark, self.store.admin, self.datasource, frame, meta, write)
            return
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
        stream = self.streams.start(meta, fresh=False, available_now=True)
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
            return no_rows()

        location = checkpoint_location(meta.options, index_name, self.streams.settings()) if meta is not None else None
        if location:
            # Refused before anything is deleted: the location came from the index's options,
            # written when it was created (perhaps by another plugin, or before this check).
            self.streams.check_checkpoint(location)

        def work() -> None:
            self.store.admin.delete_index(index_name)
            if location:
                self.delete_checkpoint(location)
            self.store.schedules.remove(index_name)

        transaction.run("vacuum", work)
        return no_rows()

    def delete_checkpoint(self, location: str) -> None:
        """Delete a checkpoint directory through Hadoop's file system (local, HDFS, S3)."""
        delete_checkpoint(self.spark, location)

    def drop(self, statement: DropIndex) -> FlintOutput:
        index_name = flint_index_name(statement.index, self.datasource)
        if not self.store.admin.index_exists(index_name):
            log.info("Flint index to be deleted doesn't exist: %s", index_name)
            return no_rows()
        self.transaction(index_name).run("drop", lambda: self.store.schedules.disable(index_name, "dropped"))
        return no_rows()

    def not_here(self, statement: Statement) -> FlintOutput:
        raise FlintIndexError(f"{type(statement).__name__} is not run by a job of this kind")


__all__ = ["FlintContext", "FlintEngine", "FlintIndexError", "FlintOutput"]
