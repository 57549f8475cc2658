"""End-to-end fixtures: the REST service over real HTTP, with real spark-submit jobs.

A Spark job takes seconds to start, so one service (and its sessions) is shared by a module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.datasources import Datasource, DatasourceRegistry, local_datasource
from async_query.embedded.metastore import Metastore
from async_query.launcher.local import LocalLauncher, catalog_settings
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.store import Store
from tests.archives import class_archive_dir
from tests.conftest import REAL_CLUSTER
from tests.node import CLIENT_SSL, index_config, wait_for_archives
from tests.support import serve_http, wait_for

BASE = "/_plugins/_async_query"
TERMINAL = {"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"}


class Api:
    """A small client of the REST API for tests."""

    def __init__(self, base_url: str, datasource: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30, verify=CLIENT_SSL)
        self.datasource = datasource

    def submit(self, query: str, session_id: str | None = None, lang: str = "sql") -> dict[str, Any]:
        body: dict[str, Any] = {"datasource": self.datasource, "lang": lang, "query": query}
        if session_id:
            body["sessionId"] = session_id
        reply = self.http.post(BASE, json=body)
        assert reply.status_code == 201, reply.text
        return dict(reply.json())

    def get(self, query_id: str) -> dict[str, Any]:
        reply = self.http.get(f"{BASE}/{query_id}")
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def raw(self, query_id: str) -> httpx.Response:
        return self.http.get(f"{BASE}/{query_id}")

    def cancel(self, query_id: str) -> httpx.Response:
        return self.http.delete(f"{BASE}/{query_id}")

    def wait_status(self, query_id: str, statuses: set[str], timeout: float = 120) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            reply = self.get(query_id)
            return reply if reply["status"] in statuses else None

        return wait_for(probe, timeout=timeout, what=f"{query_id} to reach {statuses}")

    def run(
        self, query: str, session_id: str | None = None, timeout: float = 120, lang: str = "sql"
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        submitted = self.submit(query, session_id, lang)
        return submitted, self.wait_status(submitted["queryId"], TERMINAL, timeout)


def e2e_service(
    index_url: str,
    tmp: Path,
    ds_name: str,
    catalog: dict[str, str] | None = None,
    properties: dict[str, str] | None = None,
    spark_conf: dict[str, str] | None = None,
    index_auth: tuple[str, str] | None = None,
    more_datasources: list[Datasource] | None = None,
    allowed_roles: list[str] | None = None,
    **settings: Any,
) -> Plugin:
    """A service whose local jobs use ``catalog`` (default: each job its own in-memory catalog);
    ``properties`` and ``spark_conf`` (its ``sparkConf``) are the datasource's, and so are
    ``allowed_roles``; ``index_auth`` (user, password) reaches an index that wants a credential
    (the embedded one); ``more_datasources`` are served beside it."""
    cfg = Settings(data_dir=tmp / "var", **settings)
    if index_auth is not None:
        opensearch = OpenSearchConfig(url=index_url, auth="basic", username=index_auth[0], password=index_auth[1])
    else:
        opensearch = index_config(index_url)
    datasource = local_datasource(ds_name).model_copy(
        update={"properties": properties or {}, "spark_conf": spark_conf or {}, "allowed_roles": allowed_roles or []}
    )
    launcher = LocalLauncher(
        cfg.data_dir,
        cfg.cluster_name,
        "local[2]",
        catalog_conf=catalog,
        java_options=cfg.local_job_java_options,
        class_archive=cfg.local_job_class_archive_dir,
    )
    store = Store.connect(opensearch)
    registry = DatasourceRegistry([datasource, *(more_datasources or [])], store)
    return build_plugin(cfg, store, registry, {"local": launcher}, opensearch)


@contextmanager
def shared_catalog_service(
    metastore: Metastore,
    index_url: str,
    tmp: Path,
    ds_name: str,
    properties: dict[str, str] | None = None,
    spark_conf: dict[str, str] | None = None,
    **settings: Any,
) -> Iterator[tuple[Api, Plugin]]:
    """A service on real HTTP whose local jobs share ``metastore``'s catalog (the embedded
    default's), named by the datasource ``ds_name`` (with ``properties`` and ``spark_conf``);
    ``settings`` override the service's."""
    catalog = catalog_settings(metastore.home / "warehouse", metastore.uri)
    plugin = e2e_service(index_url, tmp, ds_name, catalog, properties, spark_conf, **settings)
    try:
        with serve_http(create_app(plugin)) as url:
            yield Api(url, ds_name), plugin
    finally:
        plugin.close()


@contextmanager
def shared_catalog_api(metastore: Metastore, index_url: str, tmp: Path, ds_name: str) -> Iterator[Api]:
    """:func:`shared_catalog_service`'s client alone."""
    with shared_catalog_service(metastore, index_url, tmp, ds_name) as (api, _):
        yield api


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metastore]:
    """One Hive Metastore for the run; modules keep apart by their table names."""
    home = tmp_path_factory.mktemp("metastore")
    # It runs as the job user (as the service's do), its log and pid file in a directory of ours,
    # from the class archive the run recorded first (tests/archives.py).
    wait_for_archives()
    files = tmp_path_factory.mktemp("metastore-files")
    started = Metastore.start(home, home / "warehouse", files=files, class_archive=class_archive_dir())
    yield started
    started.close()


@pytest.fixture(scope="module")
def e2e(module_index_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Plugin]]:
    """A service on real HTTP with local spark-submit jobs, shared by the module."""
    import secrets

    ds_name = f"e{secrets.token_hex(3)}" if REAL_CLUSTER else "local"
    plugin = e2e_service(module_index_url, tmp_path_factory.mktemp("e2e"), ds_name)
    try:
        with serve_http(create_app(plugin)) as url:
            yield Api(url, ds_name), plugin
    finally:
        plugin.close()
