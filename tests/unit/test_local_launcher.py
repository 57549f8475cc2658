"""The local launcher's command line: the datasource's master, and the catalog every job gets."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import JobRequest
from async_query.launcher.local import LocalLauncher, catalog_settings, job_environment
from query_core.states import SessionType
from tests.support import wait_for


def conf_of(cmd: list[str]) -> dict[str, str]:
    pairs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def request(datasource: Datasource, conf: dict[str, str] | None = None) -> JobRequest:
    return JobRequest("sid", datasource, SessionType.INTERACTIVE, {**datasource.spark_conf, **(conf or {})})


@pytest.fixture
def launcher(tmp_path: Path) -> LocalLauncher:
    catalog = catalog_settings(tmp_path / "warehouse", "thrift://127.0.0.1:9083")
    return LocalLauncher(tmp_path / "var", "aq", "local[2]", spark_submit="/bin/true", catalog_conf=catalog)


def test_the_datasource_master_wins_over_the_default(launcher: LocalLauncher) -> None:
    plain = launcher.command(request(Datasource(name="local")))
    assert plain[plain.index("--master") + 1] == "local[2]"
    cluster = Datasource(name="c", properties={"master": "spark://10.0.0.5:7077"})
    cmd = launcher.command(request(cluster))
    assert cmd[cmd.index("--master") + 1] == "spark://10.0.0.5:7077"


def test_every_job_gets_the_shared_catalog_unless_its_datasource_names_another(
    launcher: LocalLauncher, tmp_path: Path
) -> None:
    conf = conf_of(launcher.command(request(Datasource(name="local"))))
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://127.0.0.1:9083"
    assert conf["spark.sql.warehouse.dir"] == (tmp_path / "warehouse").resolve().as_uri()
    own = Datasource(name="own", spark_conf={"spark.hadoop.hive.metastore.uris": "thrift://meta:9083"})
    assert conf_of(launcher.command(request(own)))["spark.hadoop.hive.metastore.uris"] == "thrift://meta:9083"


def test_without_a_metastore_each_job_has_its_own_catalog(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true")
    conf = conf_of(launcher.command(request(Datasource(name="local"))))
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    assert "spark.hadoop.hive.metastore.uris" not in conf


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "local[4,2]", "spark://h1:7077,h2:7077", "yarn",
                                    "k8s://https://10.0.0.1:6443"])  # fmt: skip
def test_masters_spark_submit_takes_are_accepted(master: str) -> None:
    assert Datasource(name="x", properties={"master": master}).properties["master"] == master


@pytest.mark.parametrize("master", ["", "local[x]", "spark://", "yarn-cluster; rm", "mesos"])
def test_other_masters_are_refused(master: str) -> None:
    with pytest.raises(ValueError, match="is not a Spark master"):
        Datasource(name="x", properties={"master": master})


# -- the job's environment is not the service's ---------------------------------------------------

SERVICE_SECRETS = {
    "OPENSEARCH_PASSWORD": "index-pw",
    "ASYNC_QUERY_OPENSEARCH_PASSWORD": "index-pw",
    "ASYNC_QUERY_DATASOURCES_MASTER_KEY": "master-key",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "GITHUB_TOKEN": "ghp_example",
}
RUNTIME = {"PATH": "/usr/bin:/bin", "JAVA_HOME": "/opt/java", "SPARK_HOME": "/opt/spark", "LC_ALL": "C.UTF-8"}


def secret_request(auth: str, password: str = "") -> JobRequest:
    conf = {"spark.datasource.flint.auth": auth}
    secret = {"spark.datasource.flint.auth.password": password} if auth == "basic" else {}
    return JobRequest("sid", Datasource(name="local", connector="local"), SessionType.INTERACTIVE, conf, secret)


def test_a_job_inherits_what_spark_needs_and_no_secret_of_the_service() -> None:
    env = job_environment(secret_request("noauth"), "local-1", "local", {**SERVICE_SECRETS, **RUNTIME})
    assert {k: env[k] for k in RUNTIME} == RUNTIME
    assert not set(SERVICE_SECRETS) & set(env)
    assert not set(SERVICE_SECRETS.values()) & set(env.values())
    assert (env["SERVERLESS_EMR_VIRTUAL_CLUSTER_ID"], env["SERVERLESS_EMR_JOB_ID"]) == ("local", "local-1")
    assert env["PYSPARK_PYTHON"] == sys.executable and env["TZ"] == "UTC"


def test_a_job_gets_the_credentials_it_needs_itself() -> None:
    basic = job_environment(secret_request("basic", "job-pw"), "local-1", "local", SERVICE_SECRETS)
    assert basic["FLINT_AUTH_PASSWORD"] == "job-pw" and "AWS_SECRET_ACCESS_KEY" not in basic
    sigv4 = job_environment(secret_request("sigv4"), "local-1", "local", SERVICE_SECRETS)
    assert (sigv4["AWS_ACCESS_KEY_ID"], sigv4["AWS_SECRET_ACCESS_KEY"]) == ("AKIAEXAMPLE", "aws-secret")
    assert "FLINT_AUTH_PASSWORD" not in sigv4 and "OPENSEARCH_PASSWORD" not in sigv4


def test_the_started_process_sees_only_its_own_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What spark-submit is handed, read back by a stand-in spark-submit that dumps its environment."""
    dump = tmp_path / "env.txt"
    submit = tmp_path / "spark-submit"
    submit.write_text(f"#!/bin/sh\nenv > {dump}.part && mv {dump}.part {dump}\n")
    submit.chmod(0o755)
    for key, value in SERVICE_SECRETS.items():
        monkeypatch.setenv(key, value)
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit=str(submit))
    launcher.start(secret_request("basic", "job-pw"))
    wait_for(dump.exists, what="the job's environment")
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    launcher.close()
    assert seen["FLINT_AUTH_PASSWORD"] == "job-pw"
    assert not set(SERVICE_SECRETS) & set(seen)
    assert not set(SERVICE_SECRETS.values()) & set(seen.values())
    assert seen["PATH"] == os.environ["PATH"]
