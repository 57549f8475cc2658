"""The newcomer's path on the embedded default, with the CLI alone: a table made in one session is
queried from another by ``local.default.<table>``; after the service restarts (gracefully, then
after kill -9 of it and all its processes right after a query answered) the table is still there
and the old queries read the same."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.procs import VENV_BIN, PluginProcess, kill_all_jobs
from tests.node import CLIENT_SSL
from tests.support import free_port

pytestmark = pytest.mark.e2e
#: Settings of the local jobs' JVM alone, kept from the test run's environment.
JOB_JVM_SETTINGS = ("ASYNC_QUERY_LOCAL_JOB_CLASS_ARCHIVE_DIR", "ASYNC_QUERY_LOCAL_JOB_JAVA_OPTIONS")


class Newcomer:
    """``async-query serve`` on the embedded default, and the CLI against it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data_dir = tmp / "var"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSEARCH_", "ASYNC_QUERY_"))}
        # The run's shared class archive and quick-start JIT (tests/conftest.py): the service's jobs
        # start as fast as the other tests' do, with no class-archive warm-up of their own.
        self.env.update({k: os.environ[k] for k in JOB_JVM_SETTINGS if k in os.environ})
        self.env.update(
            ASYNC_QUERY_DATA_DIR=str(self.data_dir),
            ASYNC_QUERY_STATE_DIR=str(tmp / "cli-state"),
            ASYNC_QUERY_SPARK_MASTER="local[2]",
            SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        )
        self.plugins: list[PluginProcess] = []

    @property
    def plugin(self) -> PluginProcess:
        return self.plugins[-1]

    def serve(self) -> PluginProcess:
        plugin = PluginProcess(free_port(), self.env, self.tmp / f"serve-{len(self.plugins) + 1}.log", own_group=True)
        self.plugins.append(plugin)
        plugin.wait_ready(timeout=240)
        return plugin

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV_BIN / "async-query"), *args, "--url", self.plugin.url],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )

    def submit(self, query: str, *flags: str) -> tuple[str, Any]:
        """Submit with ``--wait --format json``; returns the query id and the reply."""
        done = self.cli("submit", query, "--wait", "--format", "json", *flags)
        assert done.returncode == 0, (query, done.stdout, done.stderr, self.plugin.log())
        found = re.search(r"queryId: (\S+)", done.stderr)
        assert found, done.stderr
        return found.group(1), json.loads(done.stdout)

    def get(self, query_id: str) -> dict[str, Any]:
        reply = httpx.get(f"{self.plugin.url}/_plugins/_async_query/{query_id}", timeout=30, verify=CLIENT_SSL)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[Newcomer]:
    user = Newcomer(tmp_path)
    try:
        yield user
    finally:
        for plugin in user.plugins:
            if plugin.proc.poll() is None:
                plugin.terminate()
        kill_all_jobs(user.data_dir)


def test_tables_and_history_survive_sessions_restarts_and_a_crash(newcomer: Newcomer) -> None:
    newcomer.serve()
    newcomer.submit("CREATE TABLE sales (id INT, item STRING) USING parquet")
    newcomer.submit("INSERT INTO sales VALUES (1, 'tea'), (2, 'cake')")  # the same session, warm
    old_id, _ = newcomer.submit("SELECT * FROM local.default.sales ORDER BY id", "--new-session")
    before = newcomer.get(old_id)
    assert before["datarows"] == [[1, "tea"], [2, "cake"]]

    # A graceful stop (uvicorn re-raises SIGTERM once its shutdown is done): nothing is lost.
    assert newcomer.plugin.terminate() in (0, -signal.SIGTERM)
    newcomer.serve()
    assert newcomer.get(old_id) == before
    new_id, _ = newcomer.submit("INSERT INTO local.default.sales VALUES (3, 'jam')", "--new-session")

    # A crash right after the query answered SUCCESS (service, index server, metastore and jobs
    # killed at once): what the index acknowledged is in its journal, the success with its result.
    newcomer.plugin.kill_group()
    kill_all_jobs(newcomer.data_dir)
    newcomer.serve()
    assert newcomer.get(new_id)["status"] == "SUCCESS"
    assert newcomer.get(old_id) == before
    _, after = newcomer.submit("SELECT id, item FROM sales ORDER BY id", "--new-session")
    assert after["datarows"] == [[1, "tea"], [2, "cake"], [3, "jam"]]
