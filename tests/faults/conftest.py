"""Fixtures of the fault-injection tests (real jobs, real index servers, real plugin processes)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.store import Store
from tests.conftest import REAL_CLUSTER
from tests.node import auth_fields


def fault_service(index_url: str, tmp: Path, ds_name: str = "local", **settings: Any) -> Plugin:
    """A service with a LocalLauncher (``local[2]``) whose index connection follows ``settings``
    (``opensearch_retry_seconds`` included, unlike ``tests.e2e.conftest.e2e_service``)."""
    cfg = Settings(data_dir=tmp / "var", spark_master="local[2]", **settings)
    opensearch = cfg.opensearch(index_url).model_copy(update=auth_fields(index_url))
    datasource = local_datasource(ds_name)
    launcher = LocalLauncher(
        cfg.data_dir,
        cfg.cluster_name,
        cfg.spark_master,
        java_options=cfg.local_job_java_options,
        class_archive=cfg.local_job_class_archive_dir,
        stop_grace_s=cfg.local_job_stop_grace_s,
    )
    store = Store.connect(opensearch)
    return build_plugin(cfg, store, DatasourceRegistry([datasource]), {"local": launcher}, opensearch)


def close_service(plugin: Plugin) -> None:
    """Stop the service's workers and the jobs its launcher started, and close its index client."""
    try:
        plugin.close()
    finally:
        plugin.store.close()


@pytest.fixture(scope="module")
def module_ds_name() -> str:
    return f"f{secrets.token_hex(3)}" if REAL_CLUSTER else "local"
