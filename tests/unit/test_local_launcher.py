"""The local launcher's command line (the datasource's master, the catalog every job gets), and what
housekeeping prunes of the jobs it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import JobRequest
from async_query.launcher.local import DAEMON_MODULE_KEY, WORKER_DAEMON, LocalLauncher, catalog_settings
from query_core.states import SessionType


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


def test_a_local_job_s_python_workers_start_from_the_project_s_daemon(launcher: LocalLauncher) -> None:
    """Its workers then import the installed, compiled PySpark (docs/job.md); a cluster's
    executors may not have this project's modules, so their workers keep Spark's own daemon."""
    assert conf_of(launcher.command(request(Datasource(name="local"))))[DAEMON_MODULE_KEY] == WORKER_DAEMON
    cluster = Datasource(name="c", properties={"master": "spark://10.0.0.5:7077"})
    assert DAEMON_MODULE_KEY not in conf_of(launcher.command(request(cluster)))


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "local[4,2]", "spark://h1:7077,h2:7077", "yarn",
                                    "k8s://https://10.0.0.1:6443"])  # fmt: skip
def test_masters_spark_submit_takes_are_accepted(master: str) -> None:
    assert Datasource(name="x", properties={"master": master}).properties["master"] == master


@pytest.mark.parametrize("master", ["", "local[x]", "spark://", "yarn-cluster; rm", "mesos"])
def test_other_masters_are_refused(master: str) -> None:
    with pytest.raises(ValueError, match="is not a Spark master"):
        Datasource(name="x", properties={"master": master})


def test_every_job_jvm_fetches_no_external_xml(launcher: LocalLauncher) -> None:
    """The second wall behind the statement check: XML parsers in the driver and the executors
    fetch no external DTD, schema or stylesheet (an xpath over a DOCTYPE made jobs connect out);
    executor options a datasource gives are kept after them."""
    ds = Datasource(name="local", connector="local")
    command = launcher.command(request(ds, {"spark.executor.extraJavaOptions": "-Dmine=1"}))
    driver = command[command.index("--driver-java-options") + 1].split()
    executors = conf_of(command)["spark.executor.extraJavaOptions"].split()
    for option in ("-Djavax.xml.accessExternalDTD=", "-Djavax.xml.accessExternalSchema=", "-Djavax.xml.accessExternalStylesheet="):
        assert option in driver and option in executors
    assert executors[-1] == "-Dmine=1"


def test_the_live_jobs_are_those_whose_process_runs_whoever_started_them(launcher: LocalLauncher, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    def job(job_id: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SERVERLESS_EMR_JOB_ID": job_id}
        code = "import time; print('up', flush=True); time.sleep(60)"
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        # Once it writes, it runs the new program: until then, its environment was this process's.
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        return proc

    mine, theirs = job("job-mine"), job("job-theirs")
    try:
        launcher.jobs.add("job-mine", mine, tmp_path / "mine.log")
        launcher.jobs.pid_file("job-theirs").write_text(str(theirs.pid))  # another plugin process's
        launcher.jobs.pid_file("job-gone").write_text("999999999")
        assert launcher.live_jobs() == ["job-mine", "job-theirs"]
        mine.kill()
        mine.wait()
        assert launcher.live_jobs() == ["job-theirs"]
    finally:
        for proc in (mine, theirs):
            proc.kill()
            proc.wait()
