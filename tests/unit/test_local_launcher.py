"""The local launcher's command line (the datasource's master, the catalog every job gets), and what
housekeeping prunes of the jobs it started."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import JobRequest, JobRunState
from async_query.launcher.local import LocalLauncher, catalog_settings
from query_core.states import SessionType
from tests.conftest import ServiceFactory
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


# -- housekeeping: what the launcher keeps of finished jobs ------------------------------------------

DAY_S = 24 * 3600


def test_housekeeping_prunes_old_files_and_entries_of_finished_jobs_only(
    tmp_path: Path, make_service: ServiceFactory
) -> None:
    """A job that finished days ago is forgotten, its log and pid file deleted; a job still running
    keeps both, however old; stray files go once old, recent ones stay."""
    fake_submit = tmp_path / "spark-submit"
    fake_submit.write_text('#!/bin/sh\ncase "$*" in *running*) exec sleep 300;; esac\nexit 0\n')
    fake_submit.chmod(0o755)
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit=str(fake_submit))
    service = make_service(launcher, job_files_retention_days=7)
    ds = service.datasources.all()[0]
    finished = launcher.start(JobRequest("finished", ds, SessionType.INTERACTIVE, {}))
    running = launcher.start(JobRequest("running", ds, SessionType.INTERACTIVE, {}))
    wait_for(lambda: launcher.describe(finished).state == JobRunState.SUCCESS, timeout=10, what="the job to end")
    jobs, logs = launcher.data_dir / "jobs", launcher.data_dir / "logs"
    (jobs / "local-gone.pid").write_text("999999999")  # a job of an earlier plugin process, gone
    (logs / "earlier.log").write_text("an old job's output")
    (logs / "recent.log").write_text("a recent job's output")
    days_ago = time.time() - 8 * DAY_S
    for path in [*jobs.iterdir(), *logs.iterdir()]:
        if path.name != "recent.log":
            os.utime(path, (days_ago, days_ago))

    service.housekeeper.run_once()

    assert sorted(p.name for p in jobs.iterdir()) == [f"{running}.pid"]
    assert sorted(p.name for p in logs.iterdir()) == ["recent.log", "running.log"]
    assert launcher.describe(finished).state == JobRunState.UNKNOWN  # forgotten
    assert launcher.describe(running).state == JobRunState.RUNNING
    launcher.close()
    assert launcher.describe(running).state == JobRunState.FAILED  # stopped, not yet forgotten
    service.housekeeper.run_once()  # its log is old: it goes now
    assert sorted(p.name for p in logs.iterdir()) == ["recent.log"]
    assert not list(jobs.iterdir())
