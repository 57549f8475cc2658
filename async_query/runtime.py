"""Wiring: from settings to a running service (index, catalog, datasources, launchers), and back down.

Without ``OPENSEARCH_URL`` the embedded default starts a local OpenSearch-compatible index server
(``osmem-server`` behind a journaling proxy, a child process on a free loopback port that exits
with this process), kept on disk under ``<data_dir>/index`` (journal and snapshots). When local datasources are served with the ``metastore`` catalog,
a Hive Metastore child process (``<data_dir>/metastore``) is their shared catalog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.embedded.index import EmbeddedIndex
from async_query.embedded.metastore import Metastore
from async_query.launcher.base import Launcher
from async_query.launcher.local import LocalLauncher, catalog_settings
from async_query.security.sealing import Sealer
from async_query.service import AsyncQueryService
from async_query.settings import Settings
from query_core.store import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    service: AsyncQueryService
    embedded: EmbeddedIndex | None = None
    metastore: Metastore | None = None
    closed: bool = False

    def close(self) -> None:
        """Stop the workers and the jobs this process started, then the embedded index and the
        metastore (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.service.close()
            self.service.store.close()
        finally:
            _close_children(self.embedded, self.metastore)


def _close_children(embedded: EmbeddedIndex | None, metastore: Metastore | None) -> None:
    try:
        if embedded is not None:
            embedded.close()
    finally:
        if metastore is not None:
            metastore.close()


def build_runtime(settings: Settings, launchers: dict[str, Launcher] | None = None) -> Runtime:
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded: EmbeddedIndex | None = None
    metastore: Metastore | None = None
    try:
        registry_file = settings.datasources_file
        wants_metastore = settings.local_catalog == "metastore" and "local" not in (launchers or {})
        if wants_metastore:
            # Launched first: it takes seconds to start, and the index server starts meanwhile.
            metastore = Metastore.launch(data_dir / "metastore", data_dir / "warehouse", settings.metastore_heap_mb)
        url = settings.opensearch_url
        if not url:
            embedded = EmbeddedIndex.start(data_dir / "index", options=settings.journal_options())
            url = embedded.url
        if metastore is not None:
            metastore.wait_ready()
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
        if "local" not in all_launchers:
            catalog = catalog_settings(data_dir / "warehouse", metastore.uri if metastore else "")
            all_launchers["local"] = LocalLauncher(
                data_dir,
                settings.cluster_name,
                settings.spark_master,
                settings.spark_submit,
                catalog,
                java_options=settings.local_job_java_options,
                class_archive=settings.local_job_class_archive_dir,
                stop_grace_s=settings.local_job_stop_grace_s,
            )
        service = AsyncQueryService(settings, store, registry, all_launchers, opensearch)
        if metastore is not None:
            service.health.extra["metastore"] = metastore.problem
        service.start_workers()
    except BaseException:
        _close_children(embedded, metastore)
        raise
    return Runtime(settings, service, embedded, metastore)
