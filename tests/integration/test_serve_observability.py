"""The real ``async-query serve --log-format json`` on a real index server: every line it writes
is a JSON object, the lines about a query name it and its session, and its ``/metrics``,
stats and health answer. Its jobs are ``true`` (they start and end at once: no Spark runs), so the
query's session is found dead by one ``describe``, which the service logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from async_query.api import BASE
from tests.node import CLIENT_SSL, index_env
from tests.support import free_port, wait_for

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier


def test_serve_logs_json_lines_about_queries_and_answers_metrics(tmp_path: Path, index_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_", "PROMETHEUS_"))}
    env.update(
        ASYNC_QUERY_DATA_DIR=str(tmp_path / "var"),
        ASYNC_QUERY_LOCAL_CATALOG="in-memory",
        ASYNC_QUERY_SPARK_SUBMIT=shutil.which("true") or "/bin/true",
        ASYNC_QUERY_WARM_POOL_SIZE="0",
        **index_env(index_url),
    )
    port = free_port()
    script = Path(sys.executable).parent / "async-query"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "async_query.cli"]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*command, "serve", "--port", str(port), "--log-format", "json"], env=env, stdout=log, stderr=log
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url) or proc.poll() is not None, timeout=60, what="serve to answer")
        assert proc.poll() is None, log_path.read_text()
        reply = httpx.post(url + BASE, json={"datasource": "local", "lang": "sql", "query": "SELECT 1"}, timeout=30, verify=CLIENT_SSL)
        assert reply.status_code == 201, reply.text
        query_id, session_id = reply.json()["queryId"], reply.json()["sessionId"]
        wait_for(
            lambda: httpx.get(f"{url}{BASE}/{query_id}", timeout=30, verify=CLIENT_SSL).json()["status"] == "FAILED",
            timeout=30,
            what="the query to fail with its job gone",
        )
        metrics = httpx.get(f"{url}/metrics", timeout=30, verify=CLIENT_SSL)
        stats = httpx.get(f"{url}/_plugins/_sql/stats", timeout=30, verify=CLIENT_SSL).json()
        health = httpx.get(f"{url}{BASE}/_health", timeout=30, verify=CLIENT_SSL)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # uvicorn's own lines too
    ended = [line for line in lines if line["message"].startswith(f"session {session_id} ended")]
    assert ended and all(line["sessionId"] == session_id and line["queryId"] == query_id for line in ended), ended
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.text)
        for s in family.samples
    }
    started = (("launcher", "local"), ("operation", "start"), ("outcome", "ok"))
    assert samples[("async_query_launcher_call_duration_seconds_count", started)] == 1
    assert samples[("async_query_sessions_ended_by_service_total", (("datasource", "local"), ("state", "dead"), ("type", "interactive")))] == 1
    assert stats["async_query_create_api_request_count"] == 1
    assert health.status_code == 200 and health.json()["checks"]["launcher:local"] == {"ok": True}


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}{BASE}/_sessions", timeout=2, verify=CLIENT_SSL).status_code == 200
    except httpx.HTTPError:
        return False
