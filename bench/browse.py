"""Dashboards' browse statements: answered by the catalog read model vs by a cold Spark job, and
SHOW TABLE EXTENDED over a database of 2,000 tables (docs/catalog.md).

``python -m bench.browse [--quick] [--out PATH]``: one run of the embedded default in this process
(its index node and Hive Metastore, local Spark). The metastore gets a database of 20 tables (data
source tables as Spark writes them, a third of them partitioned, and a view) and one of 2,000
tables, written over Thrift; three Flint indexes are put in the index. Then, for each of the four
statements Dashboards sends:

* **read model**: POST with no session, then GET until ``SUCCESS`` (in-process service calls, no
  HTTP), by a service with the read model on. Each POST starts its session's job in the
  background, off the request path; here the launcher counts that start and refuses it instead
  of running a Spark job, so that the samples do not start dozens of Spark jobs on the machine.
* **Spark**: the same with the read model off and no warm pool: each POST starts a new session
  whose cold job answers it (the first query's wait on this machine), GET polled every 20 ms.

Figures: each statement's read-model p50 (target < 50 ms) and its ratio to the Spark median (target
>= 100x), and SHOW TABLE EXTENDED over 2,000 tables from a cold cache (target < 1 s), cached, and
asked again past the staleness bound with the read model's keep-warm keeper running.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from async_query.catalog.bulk import TablesEndpoint
from async_query.catalog.keepwarm import TICK_S
from async_query.catalog.statements import ShowTables
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.runtime import Plugin, Runtime, build_plugin, build_runtime
from async_query.service import SubmitRequest
from async_query.settings import Settings
from bench.report import Figure, Target, run_standalone
from bench.stats import percentile, summary
from query_core.errors import LauncherError

log = logging.getLogger(__name__)
DS = "local"
DB = "browse"
WIDE = "wide"
TERMINAL = ("SUCCESS", "FAILED", "CANCELLED", "TIMEOUT")
STATEMENTS = {
    "SHOW SCHEMAS": f"SHOW SCHEMAS IN {DS}",
    "SHOW TABLE EXTENDED": f"SHOW TABLE EXTENDED IN {DS}.{DB} LIKE '*'",
    "DESC": f"DESC {DS}.{DB}.t3",
    "SHOW FLINT INDEX": f"SHOW FLINT INDEX IN {DS}",
}


class RecordedStarts(Launcher):
    """Counts each session start (the read model's background starts) and refuses it instead of
    running a job (so no session is left holding a slot of the deployment's limit); its jobs would
    use ``catalog``."""

    application_id = "local"

    def __init__(self, catalog: dict[str, str], spark_launcher: Launcher) -> None:
        self.catalog = catalog
        self.started = 0
        #: The launcher that runs the metastore (it knows where the metastore answers bulk reads).
        self.spark_launcher = spark_launcher

    def start(self, request: JobRequest) -> str:
        self.started += 1
        raise LauncherError("the bench records session starts without running them")

    def cancel(self, job_id: str) -> None:
        pass

    def describe(self, job_id: str) -> JobDescription:
        return JobDescription(job_id, JobRunState.RUNNING)

    def catalog_conf_for(self, datasource: Any) -> dict[str, str]:
        return dict(self.catalog)

    def tables_endpoint(self, metastore_uri: str) -> TablesEndpoint | None:
        return self.spark_launcher.tables_endpoint(metastore_uri)

    def metastore_owner(self, metastore_uri: str) -> int | None:
        return self.spark_launcher.metastore_owner(metastore_uri)


def _schema(partitioned: bool) -> str:
    fields = [
        {"name": "id", "type": "long", "nullable": True, "metadata": {"comment": "the key"}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "decimal(12,2)", "nullable": True, "metadata": {}},
        {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True}, "nullable": True, "metadata": {}},
    ]
    if partitioned:
        fields.append({"name": "dt", "type": "string", "nullable": True, "metadata": {}})
    return json.dumps({"type": "struct", "fields": fields})


def spark_like_table(database: str, name: str, location: str, partitioned: bool) -> Any:
    """A parquet data source table as Spark writes it into the metastore."""
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

    params = {
        "spark.sql.sources.provider": "parquet",
        "spark.sql.create.version": "4.0.0",
        "spark.sql.sources.schema": _schema(partitioned),
    }
    if partitioned:
        params.update({"spark.sql.sources.schema.numPartCols": "1", "spark.sql.sources.schema.partCol.0": "dt", "spark.sql.partitionProvider": "catalog"})
    return Table(
        tableName=name,
        dbName=database,
        owner="bench",
        createTime=int(time.time()),
        lastAccessTime=0,
        tableType="MANAGED_TABLE",
        parameters=params,
        partitionKeys=[FieldSchema("dt", "string", None)] if partitioned else [],
        sd=StorageDescriptor(
            cols=[FieldSchema("col", "array<string>", "from deserializer")],
            location=location,
            inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
            compressed=False,
            numBuckets=-1,
            serdeInfo=SerDeInfo(
                serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                parameters={"serialization.format": "1", "path": location},
            ),
            bucketCols=[],
            sortCols=[],
            parameters={},
        ),
    )


def fill_metastore(runtime: Runtime, warehouse: Path, wide: int) -> None:
    from pymetastore.hive_metastore.ttypes import Database

    from async_query.catalog.readers import HiveMetastoreReader

    assert runtime.catalogs is not None
    reader = HiveMetastoreReader(runtime.catalogs.running()[DS].uri, timeout_s=60)
    try:
        for database, count in ((DB, 20), (WIDE, wide)):
            location = (warehouse / f"{database}.db").as_uri()
            reader._call("create_database", Database(name=database, description="bench", locationUri=location, parameters={}))
            for i in range(count):
                table = spark_like_table(database, f"t{i}", f"{location}/t{i}", partitioned=i % 3 == 0)
                reader._call("create_table", table)
    finally:
        reader.close()


def put_flint_indexes(plugin: Plugin) -> None:
    for kind, name, source in (
        ("skipping", f"flint_{DS}_{DB}_t1_skipping_index", f"{DS}.{DB}.t1"),
        ("covering", f"flint_{DS}_{DB}_t2_by_name_index", f"{DS}.{DB}.t2"),
        ("mv", f"flint_{DS}_{DB}_daily", f"SELECT dt, count(*) FROM {DS}.{DB}.t3 GROUP BY dt"),
    ):
        meta = {
            "version": "1.0.0",
            "name": {"skipping": name, "covering": "by_name", "mv": f"{DS}.{DB}.daily"}[kind],
            "kind": kind,
            "source": source,
            "indexedColumns": [],
            "options": {"auto_refresh": "false", "incremental_refresh": "false"},
            "properties": {},
        }
        plugin.store.admin.create_index(name, {"mappings": {"_meta": meta, "properties": {}}})


def post_to_success(plugin: Plugin, query: str, poll_s: float, timeout_s: float = 300) -> float:
    """Milliseconds from POST (no session) until GET answers SUCCESS."""
    began = time.perf_counter()
    submitted = plugin.service.submit(SubmitRequest(DS, "sql", query))
    while True:
        reply = json.loads(plugin.service.get(submitted.query_id))
        if reply["status"] in TERMINAL:
            break
        if time.perf_counter() - began > timeout_s:
            raise RuntimeError(f"{query!r} did not finish within {timeout_s} s")
        time.sleep(poll_s)
    if reply["status"] != "SUCCESS":
        raise RuntimeError(f"{query!r} ended {reply}")
    return (time.perf_counter() - began) * 1000


def read_model_plugin(runtime: Runtime, settings: Settings) -> tuple[Plugin, RecordedStarts]:
    spark_launcher = runtime.plugin.launchers.shared["local"]
    recorded = RecordedStarts(spark_launcher.catalog_conf_for(local_datasource(DS)), spark_launcher)
    store = runtime.plugin.store
    registry = DatasourceRegistry([local_datasource(DS)], store)
    plugin = build_plugin(settings, store, registry, {"local": recorded}, runtime.plugin.opensearch)
    return plugin, recorded


def run(quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    samples, cold_runs, wide = (15, 1, 2000) if quick else (60, 2, 2000)
    work.chmod(0o711)  # run as root, jobs and metastores run as the job user, who passes through
    logging.getLogger("async_query.catalog").setLevel(logging.INFO)  # why a statement went to Spark
    spark_settings = Settings(data_dir=work / "var", local_catalog="metastore", spark_master="local[2]", catalog_read_model=False, warm_pool_size=0)  # type: ignore[arg-type]
    runtime = build_runtime(spark_settings)
    details: dict[str, Any] = {"samples": samples, "cold_spark_runs": cold_runs, "wide_tables": wide, "metastore_connections": spark_settings.catalog_connections}
    figures: list[Figure] = []
    try:
        began = time.perf_counter()
        fill_metastore(runtime, work / "var" / "warehouse", wide)
        details["fill_s"] = round(time.perf_counter() - began, 1)
        model, recorded = read_model_plugin(runtime, spark_settings.model_copy(update={"catalog_read_model": True, "data_dir": work / "model"}))
        try:
            put_flint_indexes(model)
            for what, query in STATEMENTS.items():
                first = post_to_success(model, query, 0.001)
                timed = [post_to_success(model, query, 0.001) for _ in range(samples)]
                spark = [post_to_success(runtime.plugin, query, 0.02) for _ in range(cold_runs)]
                p50, spark_median = percentile(timed, 50), percentile(spark, 50)
                details[what] = {"read_model": summary(timed), "first_ms": round(first, 1), "spark_cold_ms": [round(s) for s in spark]}
                figures.append(Figure("browse", f"{what}: read model p50", p50, "ms", Target("<", 50), f"p99 {percentile(timed, 99):.1f} ms, first {first:.1f} ms"))
                figures.append(Figure("browse", f"{what}: cold Spark / read model", spark_median / p50, "x", Target(">=", 100), f"Spark median {spark_median / 1000:.1f} s"))
                print(f"{what}: read model p50 {p50:.1f} ms (p99 {percentile(timed, 99):.1f}), cold Spark {spark_median / 1000:.1f} s", flush=True)
            try:
                figures += wide_figures(model, wide, quick, details)
            except Exception as exc:  # noqa: BLE001 - the other figures still count; say why this one is missing
                details["wide_error"] = f"{type(exc).__name__}: {exc}"
                figures.append(Figure("browse", f"SHOW TABLE EXTENDED, {wide:,} tables, cold cache", None, "s", Target("<", 1), details["wide_error"][:120]))
            details["background_starts_recorded"] = recorded.started
        finally:
            model.close()
    finally:
        runtime.close()
    return figures, details


def wide_figures(model: Plugin, wide: int, quick: bool, details: dict[str, Any]) -> list[Figure]:
    """SHOW TABLE EXTENDED over the database of ``wide`` tables: from a cold cache, then cached."""
    query = f"SHOW TABLE EXTENDED IN {DS}.{WIDE} LIKE '*'"
    assert model.catalog is not None
    began = time.perf_counter()
    answered = model.catalog.answer(local_datasource(DS), ShowTables(WIDE, extended=True))
    details["wide_fetch_ms"] = round((time.perf_counter() - began) * 1000, 1)
    if answered is None:
        raise RuntimeError(f"the read model did not answer {query!r} (see the log)")
    model.catalog.forget(DS)
    cold = post_to_success(model, query, 0.001)
    warm = [post_to_success(model, query, 0.001) for _ in range(5 if quick else 10)]
    rows = json.loads(model.service.get(model.service.submit(SubmitRequest(DS, "sql", query)).query_id))["total"]
    details["wide"] = {"cold_ms": round(cold, 1), "warm": summary(warm), "rows": rows}
    print(f"{wide} tables: cold {cold:.0f} ms, cached p50 {percentile(warm, 50):.0f} ms", flush=True)
    figures = [
        Figure("browse", f"SHOW TABLE EXTENDED, {wide:,} tables, cold cache", cold / 1000, "s", Target("<", 1), f"{rows} rows"),
        Figure("browse", f"SHOW TABLE EXTENDED, {wide:,} tables, cached", percentile(warm, 50) / 1000, "s", None, "p50"),
    ]
    return figures + kept_warm_figures(model, query, wide, details)


def kept_warm_figures(model: Plugin, query: str, wide: int, details: dict[str, Any]) -> list[Figure]:
    """The same listing asked for again once the staleness bound has passed since it was fetched,
    with the read model's keeper running (it refreshes a listing browsed recently before the bound):
    answered from the cache, or a cold fetch again without the keeper."""
    keeper, catalog = model.catalog_keeper, model.catalog
    if keeper is None or catalog is None:
        return []
    keeper.start()
    time.sleep(catalog.staleness_s + 2 * TICK_S)  # the time passing is what is measured
    again = post_to_success(model, query, 0.001)
    details["wide"].update({"after_bound_ms": round(again, 1), "refreshed": keeper.refreshed, "refreshes_dropped": keeper.dropped})
    print(f"{wide} tables, {catalog.staleness_s:g} s later: {again:.0f} ms ({keeper.refreshed} background refreshes)", flush=True)
    note = f"{catalog.staleness_s:g} s after the fetch; {keeper.refreshed} background refreshes, {keeper.dropped} dropped"
    return [Figure("browse", f"SHOW TABLE EXTENDED, {wide:,} tables, browsed again after the bound", again / 1000, "s", Target("<", 1), note)]


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv,
        prog="python -m bench.browse",
        doc=__doc__,
        default_out=Path("bench/results/browse.json"),
        section="browse",
        run=run,
    )


if __name__ == "__main__":
    raise SystemExit(main())
