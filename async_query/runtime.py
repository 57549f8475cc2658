"""Wiring: from settings to a running service (index, catalog, datasources, launchers), and back down.

Without ``OPENSEARCH_URL`` the embedded default starts a local OpenSearch-compatible index server
(``osmem-server`` behind a journaling proxy, a child process on a free loopback port that exits
with this process), kept on disk under ``<data_dir>/index`` (journal and snapshots). When local datasources are served with the ``metastore`` catalog,
each has a Hive Metastore child process of its own (:mod:`async_query.embedded.catalogs`); that of
``local`` is started at once, the others' when their first job is launched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.embedded.catalogs import LocalCatalogs
from async_query.embedded.index import EmbeddedIndex
from async_query.launcher.base import Launcher
from async_query.launcher.local import LocalLauncher
from async_query.security.job_user import JobUser
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
    catalogs: LocalCatalogs | None = None
    closed: bool = False

    def close(self) -> None:
        """Stop the workers and the jobs this process started, then the embedded index and the
        metastores (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.service.close()
            self.service.store.close()
        finally:
            _close_children(self.embedded, self.catalogs)


def _close_children(embedded: EmbeddedIndex | None, catalogs: LocalCatalogs | None) -> None:
    try:
        if embedded is not None:
            embedded.close()
    finally:
        if catalogs is not None:
            catalogs.close()


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
                data_dir, user, metastores=settings.local_catalog == "metastore", heap_mb=settings.metastore_heap_mb
            )
            if catalogs.metastores:
                # Launched first: it takes seconds to start, and the index server starts meanwhile.
                catalogs.start("local")
        url = settings.opensearch_url
        if not url:
            embedded = EmbeddedIndex.start(data_dir / "index", options=settings.journal_options())
            url = embedded.url
        if catalogs is not None and catalogs.metastores:
            catalogs.wait_ready("local")
        opensearch = settings.opensearch(url)
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
                stop_grace_s=settings.local_job_stop_grace_s,
                catalogs=catalogs,
                python=settings.local_job_python,
            )
        service = AsyncQueryService(settings, store, registry, all_launchers, opensearch)
        if catalogs is not None and catalogs.metastores:
            service.health.extra["metastore"] = catalogs.problem
        service.start_workers()
    except BaseException:
        _close_children(embedded, catalogs)
        raise
    return Runtime(settings, service, embedded, catalogs)
