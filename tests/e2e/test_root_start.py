"""README's first command, as root, from a clone in a private home (docs/security.md, "A private view").

Where one works as root (containers, CI runners, cloud shells), a clone and its virtual environment
sit under a 0700 home, and a data directory made by ``mktemp -d`` is 0700 too. The service must
serve from there without opening those directories to anyone, its jobs and metastores still run
as the unprivileged job user, and that user still reads nothing of the service's: the second
wall's probe (tests/integration/test_job_wall.py), started by the service exactly as a Spark job,
finds the users file and the sealing key out of reach, on this layout. And nothing the service
starts there listens beyond the loopback address. One service answers the first query and is
looked at for listeners, a second one starts the probe: each start is a node, a metastore and jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query.api import BASE
from async_query.security.job_user import PROJECT_ROOT, JobUser
from tests.integration.test_job_wall import JOB_PLACES, probe_script
from tests.integration.test_security import _answers
from tests.listeners import Listener, listeners
from tests.node import CLIENT_SSL
from tests.support import free_port, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the service switches users only when it runs as root"),
]
PASSWORD = "alice-Pa55word-1"
#: Settings of the local jobs' JVM alone, kept from the test run's environment (a shared class
#: archive, the quick-starting JIT tier): nothing that reaches the service's layout.
JOB_JVM_SETTINGS = ("ASYNC_QUERY_LOCAL_JOB_CLASS_ARCHIVE_DIR", "ASYNC_QUERY_LOCAL_JOB_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")


def project_files() -> list[str]:
    """The checkout's files as a clone holds them (tracked, and new ones not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True
    )
    return [name for name in listed.stdout.decode().split("\0") if name and (PROJECT_ROOT / name).is_file()]


class Installed:
    """The running environment's installed distributions, less this project's editable install."""

    def __init__(self) -> None:
        self.python = Path(sys.executable)
        self.site_packages = Path(sysconfig.get_path("purelib"))
        #: The editable install of the checkout (its dist-info, path file and finder).
        self.own: set[str] = {entry.name for entry in self.site_packages.glob("__editable__*")}
        #: The scripts the distributions put beside the interpreter.
        self.scripts: list[Path] = []
        for info in self.site_packages.glob("*.dist-info"):
            direct = info / "direct_url.json"
            if direct.exists() and json.loads(direct.read_text()).get("dir_info", {}).get("editable"):
                self.own.add(info.name)
                continue
            record = info / "RECORD"
            for line in record.read_text().splitlines() if record.exists() else []:
                name = line.split(",", 1)[0]
                if name.startswith("../../../bin/"):
                    self.scripts.append(self.python.parent / name.removeprefix("../../../bin/"))


def _site_packages(python: Path) -> Path:
    """Where ``python`` installs packages."""
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def _link(source: Path, target: Path) -> None:
    """``source`` at ``target``: a hard link of each file, a copy where a link cannot be made."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, copy_function=_link_file, dirs_exist_ok=True)
    else:
        _link_file(str(source), str(target))


def _link_file(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


def _link_script(script: Path, target: Path, python: Path, new_python: Path) -> None:
    """A script of a dependency in the new environment: linked, or rewritten when its first
    line names this environment's interpreter (as pip writes console scripts)."""
    if not script.is_file() or target.exists():
        return
    data = script.read_bytes()
    first, _, rest = data.partition(b"\n")
    if first.startswith(b"#!") and str(python.parent).encode() in first:
        target.write_bytes(b"#!" + str(new_python).encode() + b"\n" + rest)
        target.chmod(script.stat().st_mode & 0o777)
    else:
        _link_file(str(script), str(target))


class RootLayout:
    """A clone under a 0700 home with its own virtual environment, and a data directory in another
    0700 directory, as README's first command leaves them."""

    def __init__(self, top: Path) -> None:
        self.home = top / "root-home"
        self.clone = self.home / "project"
        self.private = top / "mktemp-d"
        self.data_dir = self.private / "data"
        for private in (self.home, self.private):
            private.mkdir(mode=0o700)
            private.chmod(0o700)
        for name in project_files():
            target = self.clone / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, target)
        self.venv_bin = self.clone / ".venv" / "bin"

    def install(self) -> None:
        """README's first command up to ``serve``: a virtual environment with the dependencies,
        and ``pip install -e .`` of the clone.

        The dependencies are the files pip installed for this test run, hard-linked into the new
        environment (copied where links cannot be made), scripts included: what pip would unpack
        there, without unpacking PySpark's 450 MB again. The clone's own install is pip's."""
        python3 = shutil.which("python3") or "python3"
        self._run([python3, "-m", "venv", "--without-pip", ".venv"])
        ours = Installed()
        target = _site_packages(self.venv_bin / "python")
        for entry in ours.site_packages.iterdir():
            if entry.name not in ours.own:
                _link(entry, target / entry.name)
        for script in ours.scripts:
            _link_script(script, self.venv_bin / script.name, ours.python, self.venv_bin / "python")
        self._run([str(self.venv_bin / "pip"), "install", "-q", "--no-deps", "-e", "."])

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, cwd=self.clone, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_", "VIRTUAL_ENV"))}
        env.update({k: os.environ[k] for k in JOB_JVM_SETTINGS if k in os.environ})
        env.update(
            ASYNC_QUERY_DATA_DIR=str(self.data_dir),
            ASYNC_QUERY_AUTH="basic",
            ASYNC_QUERY_WARM_POOL_SIZE="0",
            ASYNC_QUERY_SPARK_MASTER="local[1]",
            SPARK_LOCAL_IP="127.0.0.1",
            **extra,
        )
        return env

    def add_user(self) -> None:
        done = subprocess.run(
            [str(self.venv_bin / "async-query"), "user", "add", "alice", "--role", "all_access", "--password-stdin"],
            input=PASSWORD,
            text=True,
            capture_output=True,
            cwd=self.clone,
            env=self.env(),
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr


class Serve:
    """``async-query serve --port N`` of the layout's environment, from the clone."""

    def __init__(self, layout: RootLayout, log: Path, **extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.began = time.monotonic()
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(layout.venv_bin / "async-query"), "serve", "--port", str(self.port)],
                cwd=layout.clone,
                env=layout.env(**extra),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: _answers(self.url) or self.proc.poll() is not None, timeout=300, what="serve to answer")
        assert self.proc.poll() is None, log.read_text()[-4000:]

    def submit(self, query: str, datasource: str = "local") -> str:
        body = {"datasource": datasource, "lang": "sql", "query": query}
        reply = httpx.post(self.url + BASE, json=body, auth=("alice", PASSWORD), timeout=30, verify=CLIENT_SSL)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["queryId"])

    def answer(self, query_id: str) -> dict[str, object]:
        def done() -> dict[str, object] | None:
            got = httpx.get(f"{self.url}{BASE}/{query_id}", auth=("alice", PASSWORD), timeout=30, verify=CLIENT_SSL)
            reply: dict[str, object] = got.json()
            return reply if reply["status"] in ("SUCCESS", "FAILED", "CANCELLED", "TIMEOUT") else None

        return dict(wait_for(done, timeout=300, interval=0.2, what=f"query {query_id}"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RootLayout]:
    made = RootLayout(tmp_path_factory.mktemp("root-start"))
    made.install()
    made.add_user()
    yield made


def test_readme_s_first_command_as_root_from_a_private_home_serves_on_loopback_with_jobs_still_walled(
    layout: RootLayout, tmp_path: Path
) -> None:
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in (layout.home, layout.clone, layout.private)}
    serve = Serve(layout, tmp_path / "serve.log")
    try:
        answered = serve.answer(serve.submit("SELECT 1 AS one"))
        first_answer_s = time.monotonic() - serve.began
        assert answered["status"] == "SUCCESS" and answered["datarows"] == [[1]], (
            answered,
            serve.log.read_text()[-4000:],
        )
        print(f"serve to the first answer: {first_answer_s:.1f} s")
        found = listeners_after_a_query_on_another_datasource(serve)
    finally:
        serve.stop()
    nothing_listens_beyond_loopback(serve, found)

    # The same layout, with a spark-submit that is the second wall's probe: started by the service
    # exactly as a job (its user, view, environment, directory), it tries the service's files.
    probe_dir = layout.home / "probe"  # behind the 0700 home too: shown to the job by its view
    probe_dir.mkdir()
    probe_dir.chmod(0o755)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)
    targets = tmp_path / "targets"
    submit = probe_dir / "spark-submit"
    submit.write_text(probe_script(layout.data_dir, targets, results))
    submit.chmod(0o755)
    users_file, key = layout.data_dir / "users.json", layout.data_dir / "datasources.key"
    service_files = [
        path
        for path in layout.data_dir.rglob("*")
        if path.is_file() and path.relative_to(layout.data_dir).parts[0] not in JOB_PLACES
    ]
    assert users_file in service_files and key in service_files
    targets.write_text("\n".join(map(str, service_files)) + "\n")
    probed = Serve(layout, tmp_path / "probe.log", ASYNC_QUERY_SPARK_SUBMIT=str(submit))
    try:
        probed.submit("SELECT 1")
        [report] = wait_for(
            lambda: [p for p in results.iterdir() if p.suffix != ".tmp"] or None, timeout=120, what="the probe's report"
        )
        lines = report.read_text().splitlines()
    finally:
        probed.stop()

    assert lines[0] == f"uid {JobUser.resolve().uid} umask 0077", lines
    assert "DONE" in lines, lines
    assert [line for line in lines if line.startswith("READ ")] == [], "the job user read files of the service's"
    assert sum(line.startswith("DENIED ") for line in lines) == len(service_files)
    assert not [line for line in lines if line.startswith("LISTED ")], lines
    for work in ("WROTE warehouse", "WROTE checkpoints", "WROTE tmp 600", "PYTHON OK"):
        assert work in lines, lines
    # Nothing of the operator's was opened to make it so.
    assert {path: stat.S_IMODE(path.stat().st_mode) for path in modes} == modes


def listeners_after_a_query_on_another_datasource(serve: Serve) -> list[Listener]:
    """Every listening socket of the whole process tree (the index, each datasource's metastore and
    bulk reads, the jobs' drivers, block managers and Python workers, anything added later), once
    a second datasource has answered a query too."""
    created = httpx.post(
        serve.url + "/_plugins/_query/_datasources",
        json={"name": "lake", "connector": "local"},
        auth=("alice", PASSWORD),
        timeout=30,
        verify=CLIENT_SSL,
    )
    assert created.status_code == 201, created.text
    assert serve.answer(serve.submit("SELECT 1", "lake"))["status"] == "SUCCESS"
    return listeners(serve.proc.pid)


def nothing_listens_beyond_loopback(serve: Serve, found: list[Listener]) -> None:
    """Each listener on the loopback address, or in a network namespace of its own."""
    exposed = [listener for listener in found if not listener.loopback and not listener.own_namespace]
    assert exposed == [], exposed
    # What was looked at: the service's port, two metastores (each with its bulk reads), two jobs.
    assert ("127.0.0.1", serve.port) in {(listener.address, listener.port) for listener in found}
    metastores = {listener.pid for listener in found if "LoopbackMetastore" in listener.command}
    jobs = {listener.pid for listener in found if "org.apache.spark.deploy.SparkSubmit" in listener.command}
    assert len(metastores) == 2 and len(jobs) >= 2, found
