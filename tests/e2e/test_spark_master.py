"""A local datasource pointed at a Spark cluster (``properties.master``): a standalone master and
worker started from PySpark's own distribution run the session's executors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.local import LocalLauncher
from async_query.runtime import build_plugin
from async_query.settings import Settings
from query_core.store import Store
from tests.e2e.conftest import Api
from tests.node import CLIENT_SSL, index_config
from tests.support import free_port, serve_http, wait_for

pytestmark = pytest.mark.e2e
DS = "cluster"


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-class")


class Standalone:
    """A standalone master and one worker (1 core), as child processes."""

    def __init__(self, tmp: Path) -> None:
        self.port, self.ui_port = free_port(), free_port()
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._start(tmp / "master.log", env, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))  # fmt: skip
        self._start(tmp / "worker.log", env, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(tmp / "work"))  # fmt: skip

    def _start(self, log: Path, env: dict[str, str], *args: str) -> None:
        with open(log, "ab") as out:
            self.procs.append(subprocess.Popen([spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env))

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def state(self) -> dict[str, Any]:
        try:
            return dict(httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5, verify=CLIENT_SSL).json())
        except (httpx.TransportError, ValueError):
            return {}

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        wait_for(lambda: standalone.state().get("aliveworkers", 0) >= 1, timeout=90, what="a worker to register")
        yield standalone
    finally:
        standalone.close()


def test_a_datasource_with_a_master_runs_its_sessions_on_that_cluster(
    cluster: Standalone, module_index_url: str, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "var")
    opensearch = index_config(module_index_url)
    datasource = Datasource(name=DS, connector="local", properties={"master": cluster.url})
    launcher = LocalLauncher(
        settings.data_dir,
        settings.cluster_name,
        "local[2]",
        java_options=settings.local_job_java_options,
        class_archive=settings.local_job_class_archive_dir,
    )
    plugin = build_plugin(
        settings, Store.connect(opensearch), DatasourceRegistry([datasource]), {"local": launcher}, opensearch
    )
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, DS)
            submitted, reply = api.run("SELECT sum(id) AS total, count(*) AS n FROM range(100000)")
            assert reply["status"] == "SUCCESS", reply
            assert reply["datarows"] == [[4999950000, 100000]]
            apps = cluster.state().get("activeapps", [])
            names = [app.get("name") for app in apps]
            assert f"{settings.cluster_name}:interactive:{submitted['sessionId']}" in names, names
            # The job's own settings are not a statement's to read (the master is an internal address).
            _, conf = api.run("SET", submitted["sessionId"])
            assert conf["status"] == "SUCCESS" and cluster.url not in str(conf["datarows"])
    finally:
        plugin.close()
        plugin.store.close()


def test_a_master_spark_submit_does_not_take_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a Spark master"):
        Datasource(name="bad", connector="local", properties={"master": "local[2]; rm -rf /"})
