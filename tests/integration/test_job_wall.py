"""The second wall, tried as a job would try it (docs/security.md, "The second wall").

The real ``async-query serve`` (basic authentication, the embedded index, the metastore of
``local``), run as root as CI runs it, with a ``spark-submit`` that is a probe: the launcher starts
it exactly as it starts a Spark job (its user, environment, directory, umask), and the probe
tries, as a statement that got past validation would, to read every file of the service's, the
users file and the sealing key first, and to do what a job must do: run the job's Python with
this installation's code, write its datasource's warehouse and checkpoints, and its own files.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from async_query.api import BASE
from async_query.security.job_user import DEFAULT_JOB_USER, JobUser
from async_query.security.users import UsersFile
from tests.integration.test_security import FAST_HASHER, PASSWORDS, _answers, _entry_point, _serve_env, as_user
from tests.node import CLIENT_SSL, node_options
from tests.support import free_port, wait_for

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the service switches users only when it runs as root"), pytest.mark.slow]

#: The data directory's entries that are the job user's (its places).
JOB_PLACES = {"warehouse", "checkpoints", "metastore", "catalogs", "tmp", "jvm"}


def probe_script(data_dir: Path, targets: Path, result_dir: Path) -> str:
    return f"""#!/bin/sh
[ -n "$SERVERLESS_EMR_JOB_ID" ] || exit 0  # the class archive's warm-up run: not a job
out="{result_dir}/$SERVERLESS_EMR_JOB_ID"
{{
echo "uid $(id -u) umask $(umask)"
[ -f "{targets}" ] && for f in $(cat "{targets}"); do
  if head -c1 "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "DENIED $f"; fi
done
for d in "{data_dir}" "{data_dir}/index" "{data_dir}/logs" "{data_dir}/metastores" "{data_dir}/tmp"; do
  if ls "$d" >/dev/null 2>&1; then echo "LISTED $d"; else echo "UNLISTED $d"; fi
done
echo rows > "{data_dir}/warehouse/probe-$$" && echo "WROTE warehouse"
mkdir "{data_dir}/checkpoints/probe-$$" && echo "WROTE checkpoints"
echo tmp > "$TMPDIR/own" && echo "WROTE tmp $(stat -c %a "$TMPDIR/own")"
"$PYSPARK_PYTHON" -c "import pyspark, flint_repl_job, query_core" && echo "PYTHON OK"
echo DONE
}} > "$out.tmp" 2>&1
mv "$out.tmp" "$out"
"""


def test_a_job_cannot_read_the_service_s_files_and_still_does_its_work(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    UsersFile(users_file, FAST_HASHER).add("alice", PASSWORDS["alice"], ["all_access"])
    data_dir = tmp_path / "var"
    targets = tmp_path / "targets"
    results = tmp_path / "results"
    results.mkdir(mode=0o777)
    results.chmod(0o777)
    submit = tmp_path / "spark-submit"
    submit.write_text(probe_script(data_dir, targets, results))
    submit.chmod(0o755)
    env = _serve_env(
        tmp_path,
        ASYNC_QUERY_AUTH="basic",
        ASYNC_QUERY_USERS_FILE=str(users_file),
        ASYNC_QUERY_SPARK_SUBMIT=str(submit),
    )
    env["ASYNC_QUERY_LOCAL_CATALOG"] = "metastore"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*_entry_point(), "serve", "--port", str(port), "--log-level", "warning"], env=env, stdout=log, stderr=log
    )

    def run_job() -> str:
        before = set(results.iterdir())
        body = {"datasource": "local", "lang": "sql", "query": "SELECT 1"}
        resp = httpx.post(f"{url}{BASE}", json=body, auth=as_user("alice"), timeout=30, verify=CLIENT_SSL)
        assert resp.status_code == 201, resp.text
        found = wait_for(
            lambda: {p for p in results.iterdir() if p.suffix != ".tmp"} - before or None,
            timeout=60,
            what="the probe's report",
        )
        [report] = found
        return report.read_text()

    try:
        wait_for(lambda: _answers(url) or proc.poll() is not None, timeout=240, what="serve to answer")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        run_job()  # the first job: its log and pid file are among what the second tries
        secrets = [users_file, data_dir / "datasources.key", Path(f"/proc/{proc.pid}/environ")]
        service_files = [
            path
            for path in data_dir.rglob("*")
            if path.is_file() and path.relative_to(data_dir).parts[0] not in JOB_PLACES
        ]
        kinds = {path.relative_to(data_dir).parts[0] for path in service_files}
        assert {"index", "audit", "logs", "jobs", "metastores", "datasources.key"} <= kinds, kinds
        targets.write_text("\n".join(str(p) for p in [*secrets, *service_files]) + "\n")
        report = run_job()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()

    lines = report.splitlines()
    assert lines[0] == f"uid {pwd.getpwnam(DEFAULT_JOB_USER).pw_uid} umask 0077", report
    assert "DONE" in lines, report
    read = [line for line in lines if line.startswith("READ ")]
    assert read == [], f"the job user read files of the service's: {read}"
    assert sum(line.startswith("DENIED ") for line in lines) == len(secrets) + len(service_files)
    assert not [line for line in lines if line.startswith("LISTED ")], report
    for work in ("WROTE warehouse", "WROTE checkpoints", "WROTE tmp 600", "PYTHON OK"):
        assert work in lines, report
    # What it wrote is its own, and the service's files stayed the service's.
    user = JobUser.resolve()
    written = next((data_dir / "warehouse").glob("probe-*"))
    assert written.stat().st_uid == user.uid and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert (data_dir / "metastore" / "metastore_db").stat().st_uid == user.uid  # the metastore runs as the job user
    # (pid files go at the stop); the embedded index's are its own user's, neither root's nor the job user's
    index_user = node_options().user
    assert index_user is not None and index_user.uid not in (0, user.uid)
    for path in service_files:
        if path.exists():
            owner = index_user.uid if path.relative_to(data_dir).parts[0] == "index" else 0
            assert path.stat().st_uid == owner, path
