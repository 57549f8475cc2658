"""Wiring: from settings to a running service (index, datasources, launchers), and back down.

Without ``OPENSEARCH_URL`` the embedded default starts a local OpenSearch-compatible index server
(``osmem-server``, a child process on a free loopback port that exits with this process).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.base import Launcher
from async_query.launcher.local import LocalLauncher
from async_query.service import AsyncQueryService
from async_query.settings import Settings
from query_core.errors import AsyncQueryError
from query_core.store import IndexStore

log = logging.getLogger(__name__)


def start_embedded_index() -> Any:
    """Start ``osmem-server`` on a free loopback port; it exits when this process does."""
    from osmem_server import OsmemError, OsmemServer

    try:
        server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    except OsmemError as exc:
        raise AsyncQueryError(f"cannot start the embedded index server: {exc}") from exc
    log.info("embedded index server at %s (in memory: its documents go when the service stops)", server.url)
    return server


@dataclass
class Runtime:
    settings: Settings
    service: AsyncQueryService
    embedded: Any = None
    closed: bool = False

    def close(self) -> None:
        """Stop the workers, the jobs this process started, and the embedded index (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self.service.close()
        self.service.store.close()
        if self.embedded is not None:
            self.embedded.close()


def build_runtime(settings: Settings, launchers: dict[str, Launcher] | None = None) -> Runtime:
    embedded = None
    url = settings.opensearch_url
    if not url:
        embedded = start_embedded_index()
        url = embedded.url
    try:
        opensearch = settings.opensearch(url)
        store = IndexStore(opensearch)
        data_dir = settings.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        if settings.datasources_file:
            registry = DatasourceRegistry.from_file(settings.datasources_file, store)
        else:
            registry = DatasourceRegistry([local_datasource(data_dir / "warehouse")], store)
        all_launchers: dict[str, Launcher] = dict(launchers or {})
        if "local" not in all_launchers:
            all_launchers["local"] = LocalLauncher(
                data_dir, settings.cluster_name, settings.spark_master, settings.spark_submit
            )
        service = AsyncQueryService(settings, store, registry, all_launchers, opensearch)
        service.start_workers()
    except BaseException:
        if embedded is not None:
            embedded.close()
        raise
    return Runtime(settings, service, embedded)
