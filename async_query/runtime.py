"""The one place that builds the plugin: from settings to a running service, and back down.

:func:`build_plugin` wires the plugin's parts over an index (a :class:`Store`), its datasources
and launchers: the launcher registry, the warm pools, liveness, the workers (cancel supervision,
housekeeping, stream watching and stopping, the pools' keeper, the refresh scheduler, metrics),
the handlers, the read model and the use cases. Nothing
else builds them, and none of them builds another. :func:`build_runtime` adds what the embedded
default runs beside the plugin.

Without ``OPENSEARCH_URL`` the embedded default starts a real OpenSearch node (a child JVM on a free
loopback port, its jars fetched once into a cache), its data under ``<data_dir>/index``. When local
datasources are served with the ``metastore`` catalog,
each has a Hive Metastore child process of its own (:mod:`async_query.embedded.catalogs`); that of
``local`` is started at once, the others' when their first job is launched.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from async_query import metrics
from async_query.catalog.keepwarm import CatalogKeepWarm
from async_query.catalog.readmodel import CatalogReadModel
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.embedded.catalogs import LocalCatalogs
from async_query.embedded.index import EmbeddedIndex, NodeOptions
from async_query.embedded.node_jars import NodeJars, default_cache
from async_query.handlers import HandlerContext, Handlers
from async_query.health import Health, Watched, WatchedLoop
from async_query.job_figures import MetricsWorker
from async_query.launcher.base import Launcher
from async_query.launcher.local import LocalLauncher
from async_query.launcher.registry import LauncherRegistry
from async_query.liveness import LivenessChecker, Staleness
from async_query.pending_signals import PendingSignals
from async_query.pool import PoolKeeper, Pools, SessionJobs
from async_query.reads import QueryReads
from async_query.scheduler.modes import RefreshModes
from async_query.scheduler.operations import ScheduleOperations
from async_query.scheduler.owners import Owners
from async_query.scheduler.probe import SourceProbe
from async_query.scheduler.runs import RunTimes, ScheduledRuns
from async_query.scheduler.worker import RefreshScheduler
from async_query.security.accounts import index_user
from async_query.security.job_user import JobUser
from async_query.security.sealing import Sealer
from async_query.service import AsyncQueryService, StorageBound
from async_query.settings import Settings
from async_query.stats import Stats
from async_query.stream_watch import StreamWatcher
from async_query.streams import RefreshStopper, StreamStopper
from async_query.workers import CancelSupervisor, Housekeeper, Lease, StreamingHousekeeper, Worker
from query_core.config import OpenSearchConfig
from query_core.flint.scheduling import interval_ms
from query_core.ids import DEPLOYMENT_INDEX, request_index
from query_core.models import StatementDoc
from query_core.store import Store
from query_core.validation import StatementLimits

log = logging.getLogger(__name__)


@dataclass(repr=False)
class Plugin:
    """The plugin, built: its use cases (:attr:`service`) and the parts that serve and run beside
    them. It holds no logic of its own beyond starting and stopping its workers."""

    settings: Settings
    store: Store
    #: The connection the jobs use (it may differ from the plugin's, e.g. a public endpoint).
    opensearch: OpenSearchConfig
    datasources: DatasourceRegistry
    launchers: LauncherRegistry
    liveness: LivenessChecker
    supervisor: CancelSupervisor
    housekeeper: Housekeeper
    stream_stopper: StreamStopper
    streaming_housekeeper: StreamingHousekeeper
    stream_watcher: StreamWatcher
    handlers: Handlers
    reads: QueryReads
    service: AsyncQueryService
    #: Writes POSTs' pending-id signals to their sessions, just after the reply (it starts itself).
    signals: PendingSignals
    health: Health
    metrics_worker: MetricsWorker
    #: The warm pools, and their keeper (refills, scale-down, the stop of their jobs).
    pools: Pools
    pool_keeper: PoolKeeper
    #: Runs the scheduled refreshes (docs/flint.md, "Scheduled refresh").
    scheduler: RefreshScheduler
    #: The catalog read model of the browse statements (None: turned off; docs/catalog.md).
    catalog: CatalogReadModel | None = None
    #: Refreshes the read model's recently browsed listings before they expire (None: not kept warm).
    catalog_keeper: CatalogKeepWarm | None = None
    #: The reference's ``_sql/stats`` counters; None when metrics are off.
    stats: Stats | None = None
    closed: bool = field(default=False, init=False)

    def workers(self) -> list[Worker]:
        loops: list[Worker] = [
            self.supervisor,
            self.housekeeper,
            self.streaming_housekeeper,
            self.stream_watcher,
            self.pool_keeper,
            self.scheduler,
        ]
        if self.catalog_keeper is not None:
            loops.append(self.catalog_keeper)
        return [*loops, self.metrics_worker] if self.settings.metrics_enabled else loops

    def start_workers(self) -> None:
        """Start the background loops (cancel supervision, housekeeping, metrics); tests drive
        them by hand."""
        for worker in self.workers():
            worker.start()

    def close(self) -> None:
        """Stop the workers and release what the handlers and launchers hold (idempotent; the
        store stays open: whoever opened it closes it)."""
        if self.closed:
            return
        self.closed = True
        self.metrics_worker.stop()
        self.pool_keeper.close()  # before the launchers: it stops the idle jobs it started
        self.health.close()
        for worker in (
            self.scheduler,
            self.supervisor,
            self.housekeeper,
            self.streaming_housekeeper,
            self.stream_watcher,
        ):
            worker.stop()
        if self.catalog_keeper is not None:
            self.catalog_keeper.stop()
        self.signals.stop()  # what POSTs queued is written before the store may close
        self.stream_stopper.close()
        self.handlers.close()
        if self.catalog is not None:
            self.catalog.close()
        self.launchers.close()


def build_plugin(
    settings: Settings,
    store: Store,
    datasources: DatasourceRegistry,
    launchers: dict[str, Launcher],
    opensearch: OpenSearchConfig,
) -> Plugin:
    """Wire the plugin over ``store``: every part given exactly the collaborators it uses."""
    registry = LauncherRegistry(settings, datasources, launchers)
    datasources.default_engine = registry.default_engine
    datasources.limit = settings.datasources_limit
    staleness = Staleness(settings.stale_heartbeats, settings.session_start_timeout_s, settings.heartbeat_idle_ms)
    pools = Pools(settings, datasources, registry, opensearch)
    jobs = SessionJobs(store, pools, datasources)
    keeper = PoolKeeper(store, pools, jobs)
    jobs.on_claim = keeper.wake
    liveness = LivenessChecker(store, registry.for_session, staleness, settings.liveness_cache_s, restart=jobs.restart)
    supervisor = CancelSupervisor(
        store, liveness, registry.for_session, settings.cancel_deadline_s, stop_timeout_s=settings.stop_job_timeout_s
    )
    housekeeper = Housekeeper(
        store,
        datasources,
        liveness,
        settings.housekeeping_interval_s,
        settings.request_retention_days,
        settings.result_retention_days,
        Lease(store, "housekeeping-lease", lease_ms=int(settings.housekeeping_interval_s * 2000)),
        supervisor,
        dml_timeout_s=settings.index_dml_timeout_s,
        index_op_stall_s=settings.index_op_stall_s,
        launchers=registry.all,
        job_files_days=settings.job_files_retention_days,
    )
    #: Stops streaming jobs (ALTER to manual refresh, DROP, the streaming housekeeper).
    stream_stopper = StreamStopper(store, registry.stop_job, liveness.end_session, settings.stream_stop_timeout_s)
    streaming_housekeeper = StreamingHousekeeper(
        store, datasources, liveness, stream_stopper.stop, settings.streaming_housekeeping_interval_s
    )
    catalog = (
        CatalogReadModel(
            store,
            registry.for_datasource,
            staleness_s=settings.catalog_staleness_s,
            keep_warm_s=settings.catalog_keep_warm_s,
            max_bytes=settings.catalog_cache_bytes,
            timeout_s=settings.catalog_timeout_s,
            connections=settings.catalog_connections,
        )
        if settings.catalog_read_model
        else None
    )
    refresh_stopper = RefreshStopper(store, registry.stop_job, stream_stopper.stop)
    schedules = ScheduleOperations(store, settings.scheduler_policy, refresh_stopper)
    signals = PendingSignals(store, settings.pending_ids_kept, reuse_s=settings.session_reuse_ms / 1000)
    store.index.write_listeners.append(signals.forget)
    context = HandlerContext(
        settings=settings,
        store=store,
        datasources=datasources,
        liveness=liveness,
        supervisor=supervisor,
        launchers=registry,
        opensearch=opensearch,
        stream_stopper=stream_stopper,
        jobs=jobs,
        signals=signals,
        catalog=catalog,
        schedules=schedules,
    )
    handlers = Handlers(context, settings.reply_cache_entries * 10)
    reads = QueryReads(settings, store, datasources, handlers)
    service = AsyncQueryService(
        datasources,
        registry,
        handlers,
        reads,
        store.sessions,
        store.pool,
        StatementLimits(
            settings.max_query_chars,
            settings.max_statement_depth,
            settings.max_ppl_chars,
            settings.max_statement_tokens,
        ),
        store.usage,
        StorageBound(settings.max_user_index_bytes, settings.result_retention_days),
        route=RefreshModes(store, settings.scheduler_policy).route,
    )
    scheduler = _scheduler(settings, store, datasources, service, liveness, schedules, catalog)
    store.index.write_listeners.append(reads.session_cache.forget)
    watched = _watched(store, datasources, registry, housekeeper, streaming_housekeeper)
    health = Health(watched, settings.health_timeout_s, settings.health_cache_s)
    plugin = Plugin(
        settings=settings,
        store=store,
        opensearch=opensearch,
        datasources=datasources,
        launchers=registry,
        liveness=liveness,
        supervisor=supervisor,
        housekeeper=housekeeper,
        stream_stopper=stream_stopper,
        streaming_housekeeper=streaming_housekeeper,
        stream_watcher=StreamWatcher(store, liveness, settings.stream_watch_interval_s),
        handlers=handlers,
        reads=reads,
        service=service,
        signals=signals,
        catalog=catalog,
        health=health,
        metrics_worker=MetricsWorker(store, settings.metrics_interval_s, health=health),
        pools=pools,
        pool_keeper=keeper,
        scheduler=scheduler,
        catalog_keeper=CatalogKeepWarm(catalog) if catalog is not None and settings.catalog_keep_warm_s > 0 else None,
    )
    if settings.metrics_enabled:
        _count_for_metrics(plugin)
    return plugin


def _scheduler(
    settings: Settings,
    store: Store,
    datasources: DatasourceRegistry,
    service: AsyncQueryService,
    liveness: LivenessChecker,
    schedules: ScheduleOperations,
    catalog: CatalogReadModel | None,
) -> RefreshScheduler:
    """The scheduled refreshes' loop: runs submitted through ``service`` as their owners, their
    sources fingerprinted where the catalog read model can locate them."""
    times = RunTimes(
        int(settings.external_scheduler_tick_s * 1000), interval_ms(settings.external_scheduler_max_backoff)
    )
    probe = SourceProbe(catalog.table_location) if catalog is not None else None
    owners = Owners.from_settings(settings)
    runs = ScheduledRuns(
        store, datasources, service.submit, liveness, owners, schedules, times, secrets.token_hex(8), probe
    )
    scheduler = RefreshScheduler(store, runs, settings.external_scheduler_tick_s)
    schedules.wake = scheduler.wake
    return scheduler


def _watched(
    store: Store,
    datasources: DatasourceRegistry,
    launchers: LauncherRegistry,
    housekeeper: Housekeeper,
    streaming: StreamingHousekeeper,
) -> Watched:
    """What ``GET /_plugins/_async_query/_health`` checks (docs/metrics.md)."""
    return Watched(
        ping=store.index.ping,
        datasources=datasources.all,
        configured=datasources.configured,
        launcher_check=lambda ds: (launchers.check_name(ds), lambda: launchers.for_datasource(ds).check()),
        loops=[
            WatchedLoop("housekeeping", housekeeper, housekeeper.lease, lambda name: request_index(name or ""), True),
            WatchedLoop("streaming", streaming, streaming.lease, lambda _: DEPLOYMENT_INDEX, False),
        ],
        read_lock=store.locks.read,
    )


def _count_for_metrics(plugin: Plugin) -> None:
    """Feed the metrics (docs/metrics.md): this process's index calls, the queries it ends,
    its GET caches' lookups, and the stats' rolling counters."""
    settings = plugin.settings
    plugin.stats = metrics.stats = Stats(settings.stats_rolling_window_s, settings.stats_rolling_interval_s)
    plugin.store.index.call_listeners.append(metrics.index_call)
    kinds = plugin.handlers

    def statement_ended(doc: StatementDoc) -> None:
        kind = kinds.kind_seen(doc.session_id)
        metrics.query_finished(doc.data_source_name, kind.value if kind is not None else "unknown", doc.state.value)

    plugin.store.statements.end_listeners.append(statement_ended)
    reads = plugin.reads
    for name, cache in (
        ("replies", reads.replies),
        ("session_of_query", reads.session_of_query),
        ("sessions", reads.session_cache.cache),
    ):
        metrics.caches.watch(name, cache)


@dataclass
class Runtime:
    settings: Settings
    plugin: Plugin
    embedded: EmbeddedIndex | None = None
    catalogs: LocalCatalogs | None = None
    closed: bool = False

    def close(self) -> None:
        """Stop the workers and the jobs this process started, then the embedded index and the
        metastores (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.plugin.close()
            self.plugin.store.close()
        finally:
            _close_children(self.embedded, self.catalogs)


def _close_children(embedded: EmbeddedIndex | None, catalogs: LocalCatalogs | None) -> None:
    try:
        if embedded is not None:
            embedded.close()
    finally:
        if catalogs is not None:
            catalogs.close()


def start_embedded_index(settings: Settings, data_dir: Path) -> EmbeddedIndex:
    """The embedded OpenSearch node of ``data_dir``: its jars resolved (fetched on a first start),
    run as the index user (docs/durability.md)."""
    job_user = JobUser.resolve(settings.local_job_user, settings.local_job_allow_root)
    jars = NodeJars.resolve(settings.index_cache_dir, settings.index_repository, settings.index_jars_dir)
    user = index_user(settings.local_index_user, job_user)
    options = NodeOptions(heap_mb=settings.index_heap_mb, user=user, class_archive=embedded_class_archive_dir(settings))
    return EmbeddedIndex.start(data_dir / "index", jars, options)


def embedded_class_archive_dir(settings: Settings) -> Path:
    """Where the class archives of the embedded index's and the metastores' JVMs are kept:
    ``embedded-jvm`` in the cache the index's jars are kept in, the service's own
    (:mod:`async_query.embedded.archive`)."""
    return (settings.index_cache_dir or default_cache()) / "embedded-jvm"


def class_archive_cache(settings: Settings) -> Path:
    """The installation's place for the local jobs' class archive: ``jvm`` in the cache the
    index's jars are kept in, so that a new data directory's first jobs start from the archive an
    earlier one recorded (used unless a setting names a place, and where the jobs can reach it:
    docs/job.md)."""
    return (settings.index_cache_dir or default_cache()) / "jvm"


def build_runtime(settings: Settings, launchers: dict[str, Launcher] | None = None) -> Runtime:
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded: EmbeddedIndex | None = None
    catalogs: LocalCatalogs | None = None
    try:
        registry_file = settings.datasources_file
        if "local" not in (launchers or {}):
            user = JobUser.resolve(settings.local_job_user, settings.local_job_allow_root)
            catalogs = LocalCatalogs(
                data_dir,
                user,
                metastores=settings.local_catalog == "metastore",
                heap_mb=settings.metastore_heap_mb,
                warmup_tables=settings.metastore_warmup_tables if settings.catalog_read_model else 0,
                class_archive=embedded_class_archive_dir(settings),
            )
            if catalogs.metastores:
                # Launched first: it takes seconds to start, and the index server starts meanwhile.
                catalogs.start("local")
        url = settings.opensearch_url
        if not url:
            embedded = start_embedded_index(settings, data_dir)
            url = embedded.url
        opensearch = settings.opensearch(url)
        if embedded is not None:  # its credential, for this service and (through the launchers) its jobs
            opensearch = opensearch.model_copy(update=embedded.connection_fields())
        store = Store.connect(opensearch)
        sealer = Sealer.from_settings(settings.datasources_master_key, data_dir)
        if registry_file:
            registry = DatasourceRegistry.from_file(registry_file, store, sealer=sealer)
        else:
            registry = DatasourceRegistry([local_datasource()], store, sealer=sealer)
        all_launchers: dict[str, Launcher] = dict(launchers or {})
        if "local" not in all_launchers and catalogs is not None:
            all_launchers["local"] = LocalLauncher(
                data_dir,
                settings.cluster_name,
                settings.spark_master,
                settings.spark_submit,
                java_options=settings.local_job_java_options,
                class_archive=settings.local_job_class_archive_dir,
                class_archive_cache=class_archive_cache(settings),
                stop_grace_s=settings.local_job_stop_grace_s,
                catalogs=catalogs,
                python=settings.local_job_python,
            )
        plugin = build_plugin(settings, store, registry, all_launchers, opensearch)
    except BaseException:
        _close_children(embedded, catalogs)
        raise
    try:
        if catalogs is not None and catalogs.metastores:
            plugin.health.extra["metastore"] = catalogs.problem
        # The warm pools' first jobs are launched before the service takes a query (its first new
        # session claims one, still starting, rather than starting a job of its own beside it),
        # and while the metastore starts. What fails here is the keeper's loop's to try again.
        try:
            plugin.pool_keeper.run_once()
        except Exception:  # a launcher's own errors included: never a reason not to serve
            log.exception("the warm pools' first round failed; the keeper tries again")
        plugin.start_workers()
        if catalogs is not None and catalogs.metastores:
            _wait_for_metastore(catalogs, plugin)
    except BaseException:
        plugin.close()
        _close_children(embedded, catalogs)
        raise
    return Runtime(settings, plugin, embedded, catalogs)


def _wait_for_metastore(catalogs: LocalCatalogs, plugin: Plugin) -> None:
    """Return once the ``local`` metastore accepts connections. The warm pool's jobs were launched
    meanwhile (a job reads its catalog only when it runs a statement, its Hive client retrying
    until the metastore listens), so the two cold starts overlap. A metastore whose port another
    user took first starts again on another port (:mod:`async_query.embedded.metastore`): the
    pool's jobs launched with the first address are then stopped, and the pool refills with jobs
    that have the new one."""
    launched_with = catalogs.running()["local"].uri
    catalogs.wait_ready("local")
    if catalogs.running()["local"].uri != launched_with:
        plugin.pool_keeper.retire_launched("its metastore started on another port than its jobs were given")
        plugin.pool_keeper.wake()
