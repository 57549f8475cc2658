"""The second wall's parts (docs/security.md): who local jobs run as, what that user may reach, the
data directory sealed from it, each local datasource's catalog in a place of its own, and what a
job's command line holds. Tests that need a switch of users (the suite run as root, as CI runs
it) say so; run as another user they check what holds there."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.embedded.catalogs import LEGACY, LocalCatalogs
from async_query.launcher.base import JobRequest, launcher_policy
from async_query.launcher.local import LocalLauncher, properties_text
from async_query.security import views
from async_query.security.job_user import (
    DEFAULT_JOB_USER,
    PROJECT_ROOT,
    JobUser,
    JobUserError,
    job_python,
    seal_data_dir,
)
from query_core.errors import InvalidRequestError
from query_core.states import SessionType
from query_core.validation import validate_query

AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="switching users needs root (CI runs the suite as root)")


def conf_of(cmd: list[str]) -> dict[str, str]:
    pairs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


# -- who jobs run as -------------------------------------------------------------------------------


@needs_root
def test_as_root_jobs_run_as_a_user_of_their_own_by_default_and_never_as_root_unless_allowed() -> None:
    """Not ``nobody``, which other daemons share (a job's environment holds the index's
    credential): a system user of the jobs' own, made at first start."""
    user = JobUser.resolve()
    assert (user.name, user.uid, user.switches) == (DEFAULT_JOB_USER, pwd.getpwnam(DEFAULT_JOB_USER).pw_uid, True)
    assert user.name != "nobody" and user.uid != 0
    with pytest.raises(JobUserError, match="refusing to run local jobs as root"):
        JobUser.resolve("root")
    with pytest.raises(JobUserError, match="refusing to run local jobs as root"):
        JobUser.resolve("0")
    assert JobUser.resolve("root", allow_root=True).uid == 0
    options = user.popen_options()
    jobs = pwd.getpwnam(DEFAULT_JOB_USER)
    assert options == {"umask": 0o077, "user": jobs.pw_uid, "group": jobs.pw_gid, "extra_groups": []}


@needs_root
def test_a_launcher_refuses_to_start_jobs_as_root(tmp_path: Path) -> None:
    with pytest.raises(JobUserError, match="refusing to run local jobs as root"):
        LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true", job_user=JobUser.resolve("root"))


def test_an_unknown_user_is_refused() -> None:
    with pytest.raises(JobUserError, match="is not a user of this machine"):
        JobUser.resolve("no-such-user-anywhere")


@needs_root
def test_what_the_job_user_reaches_is_read_from_the_modes_of_every_directory_above(tmp_path: Path) -> None:
    user = JobUser.resolve()
    top = tmp_path / "top"
    inner = top / "inner"
    inner.mkdir(parents=True)
    secret = inner / "secret"
    secret.write_text("x")
    secret.chmod(0o644)
    top.chmod(0o700)
    assert not user.can_reach(secret), "a 0700 directory above hides a 0644 file"
    top.chmod(0o711)
    assert user.can_reach(secret) and not user.can_reach(secret, 2)
    assert not user.can_reach(top), "passable is not listable"
    secret.chmod(0o600)
    assert not user.can_reach(secret)


@needs_root
def test_a_place_of_the_job_user_s_is_handed_over_whole_and_kept_0700(tmp_path: Path) -> None:
    """A catalog made by an earlier version (as root, with another umask) becomes the job user's,
    contents first; a link inside is changed, never followed."""
    user = JobUser.resolve()
    warehouse = tmp_path / "warehouse"
    (warehouse / "db.db" / "t").mkdir(parents=True, mode=0o755)
    (warehouse / "db.db" / "t" / "part-0.parquet").write_text("rows")
    outside = tmp_path / "outside"
    outside.write_text("the service's")
    (warehouse / "link").symlink_to(outside)
    user.own(warehouse)
    for path in [warehouse, *warehouse.rglob("*")]:
        assert path.lstat().st_uid == user.uid, path
    assert stat.S_IMODE(warehouse.stat().st_mode) == 0o700
    assert outside.stat().st_uid == 0


@needs_root
def test_the_data_directory_is_passable_and_everything_of_the_service_s_in_it_private(tmp_path: Path) -> None:
    data = tmp_path / "var"
    (data / "index").mkdir(parents=True, mode=0o755)
    (data / "index" / "journal").write_text("documents")
    (data / "users.json").write_text("{}")
    (data / "users.json").chmod(0o644)
    (data / "warehouse").mkdir(mode=0o755)
    user = JobUser.resolve()
    seal_data_dir(data, user, {"warehouse"})
    assert stat.S_IMODE(data.stat().st_mode) == 0o711
    assert stat.S_IMODE((data / "index").stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "users.json").stat().st_mode) == 0o600
    assert not user.can_reach(data / "index" / "journal") and not user.can_reach(data / "users.json")
    assert stat.S_IMODE((data / "warehouse").stat().st_mode) == 0o755, "the job's places are the catalogs' to set"


def test_the_job_s_python_is_this_one_and_the_job_user_reaches_it_and_this_installation_s_code(tmp_path: Path) -> None:
    """Through the jobs' private view where the job user cannot pass to it (a Python under a 0700
    home): the launcher's own check says so before any job starts."""
    user = JobUser.resolve()
    python = job_python()
    assert python.executable == sys.executable and python.path == ()
    launcher = LocalLauncher(tmp_path / "var", "aq", job_user=user)
    assert launcher.check() is None
    view = launcher.processes.view([launcher.data_dir / "tmp"])
    places: list[str] = [sys.executable, launcher.spark_submit, str(PROJECT_ROOT / "flint_repl_job")]
    for place in places:
        assert views.reaches(user, place, 5), place
        if not user.can_reach(place, 5):  # shown by the view
            assert views.veil_of(user, os.path.realpath(place)) is not None and view.needed


def test_a_configured_python_gets_this_installation_s_code_on_its_path() -> None:
    configured = job_python("/usr/bin/python3")
    assert configured.executable == "/usr/bin/python3"
    assert str(PROJECT_ROOT) in configured.path


# -- each datasource's catalog, and its roots ------------------------------------------------------


def test_local_keeps_the_catalog_every_datasource_shared_and_others_get_their_own(tmp_path: Path) -> None:
    data = tmp_path / "var"
    catalogs = LocalCatalogs(data, JobUser.resolve(), metastores=False)
    local = catalogs.place(LEGACY)
    assert (local.metastore, local.warehouse, local.checkpoints) == (
        data.resolve() / "metastore",
        data.resolve() / "warehouse",
        data.resolve() / "checkpoints",
    )
    lake = catalogs.place("lake")
    assert lake.warehouse == data.resolve() / "catalogs" / "lake" / "warehouse"
    assert lake.metastore == data.resolve() / "catalogs" / "lake" / "metastore"
    assert not lake.warehouse.is_relative_to(local.warehouse) and not local.warehouse.is_relative_to(lake.warehouse)


def test_a_datasource_naming_its_own_catalog_gets_no_metastore(tmp_path: Path) -> None:
    catalogs = LocalCatalogs(tmp_path / "var", JobUser.resolve(), metastores=True)
    own = Datasource(name="own", connector="local", spark_conf={"spark.hadoop.hive.metastore.uris": "thrift://m:9083"})
    assert catalogs.conf(own)["spark.sql.catalogImplementation"] == "hive"
    memory = Datasource(name="mem", connector="local", spark_conf={"spark.sql.catalogImplementation": "in-memory"})
    assert catalogs.conf(memory)["spark.sql.catalogImplementation"] == "in-memory"
    hdfs = Datasource(
        name="h", connector="local", spark_conf={"spark.sql.catalogImplementation": "in-memory", "spark.sql.warehouse.dir": "hdfs://nn/wh"}
    )
    assert catalogs.conf(hdfs)["spark.sql.warehouse.dir"] == "hdfs://nn/wh"
    assert catalogs.running() == {}, "none of them started a metastore"


def test_a_statement_of_one_datasource_cannot_locate_data_in_another_s_warehouse(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true")
    local = Datasource(name="local", connector="local")
    lake = Datasource(name="lake", connector="local")
    lake_table = launcher.warehouse_of(lake) + "/t"
    assert launcher_policy(local, launcher).warehouse_root != launcher_policy(lake, launcher).warehouse_root
    query = f"CREATE TABLE stolen (a INT) USING parquet LOCATION '{lake_table}'"
    with pytest.raises(InvalidRequestError):
        validate_query(launcher_policy(local, launcher), "sql", query)
    validate_query(launcher_policy(lake, launcher), "sql", query)  # its own warehouse: allowed
    assert launcher.checkpoints_of(local) != launcher.checkpoints_of(lake)


# -- a job's command line, environment and files ---------------------------------------------------


def test_confidential_conf_stays_off_the_command_line_and_the_job_s_files_are_its_own(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true")
    secret = "s3cr3t value"
    ds = Datasource(name="local", connector="local", spark_conf={"spark.hadoop.fs.s3a.secret.key": secret})
    request = JobRequest("sid", ds, SessionType.INTERACTIVE, {**ds.spark_conf, "spark.app.x": "1"})
    tmp = tmp_path / "job"
    properties = tmp / "p.properties"
    cmd = launcher.command(request, tmp=tmp, properties_file=properties)
    assert secret not in " ".join(cmd) and "spark.hadoop.fs.s3a.secret.key" not in " ".join(cmd)
    assert cmd[cmd.index("--properties-file") + 1] == str(properties)
    conf = conf_of(cmd)
    assert conf["spark.hadoop.fs.permissions.umask-mode"] == "077"
    assert conf["spark.local.dir"] == str(tmp / "spark") and conf["spark.hadoop.hive.exec.scratchdir"] == str(tmp / "hive")
    assert f"-Djava.io.tmpdir={tmp}" in cmd[cmd.index("--driver-java-options") + 1]
    assert properties_text({"a.key": "x = y\\z", "b": " lead\nnext"}) == "a.key=x = y\\\\z\nb=\\ lead\\nnext\n"


@needs_root
def test_a_started_job_runs_as_the_job_user_in_a_directory_of_its_own(tmp_path: Path) -> None:
    """``spark-submit`` here is a script that records who runs it, its umask and environment."""
    submit = tmp_path / "spark-submit"
    record = tmp_path / "record"
    record.mkdir(mode=0o777)
    record.chmod(0o777)
    submit.write_text(
        "#!/bin/sh\n"
        f'{{ id -u; umask; echo "$HOME|$TMPDIR|$USER|$PYSPARK_PYTHON"; pwd; ls "$TMPDIR"; }} > {record}/out\n'
    )
    submit.chmod(0o755)
    archive = tmp_path / "jvm"  # the service's, not the job user's: no warm-up run records an archive
    archive.mkdir(mode=0o755)
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit=str(submit), class_archive=archive)
    secret = "s3cr3t value"
    ds = Datasource(name="local", connector="local", spark_conf={"spark.hadoop.fs.s3a.secret.key": secret})
    job_id = launcher.start(JobRequest("sid", ds, SessionType.INTERACTIVE, dict(ds.spark_conf)))
    proc = launcher.jobs.process(job_id)
    assert proc is not None
    assert proc.wait(timeout=30) == 0
    uid, umask, env, cwd, listing = (record / "out").read_text().splitlines()[:5]
    tmp = launcher.data_dir / "tmp" / job_id
    assert (int(uid), umask) == (pwd.getpwnam(DEFAULT_JOB_USER).pw_uid, "0077")
    assert env.split("|")[:3] == [str(tmp), str(tmp), DEFAULT_JOB_USER]
    assert cwd == str(tmp) and listing == "spark-secret.properties"
    secret_file = tmp / "spark-secret.properties"
    assert secret in secret_file.read_text() and stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert secret_file.stat().st_uid == pwd.getpwnam(DEFAULT_JOB_USER).pw_uid and stat.S_IMODE(tmp.stat().st_mode) == 0o700
    assert isinstance(proc.args, list) and secret not in " ".join(str(a) for a in proc.args)
    # Its pid file and log are the service's.
    assert (launcher.data_dir / "jobs" / f"{job_id}.pid").stat().st_uid == 0
    # Once it has ended, housekeeping removes its directory (a young one is kept a while).
    os.utime(tmp, (1, 1))
    launcher.prune(7 * 86400)
    assert not tmp.exists()
