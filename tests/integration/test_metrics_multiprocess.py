"""Several worker processes of one service share their figures (prometheus_client's multiprocess
mode): whichever process answers ``/metrics`` shows everyone's. Real processes, one directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

WORKER = """
from async_query import metrics
metrics.query_submitted("local", "interactive")
metrics.index_call("get", "2xx", 2)
metrics.HTTP_REQUESTS.labels("/_plugins/_async_query/{query_id}", "GET", "2xx").observe(0.002)
"""
READER = """
import sys
from async_query import metrics
body, content_type = metrics.exposition()
sys.stdout.write(body.decode())
"""


def run(code: str, directory: Path) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_worker_s_figures_are_in_any_worker_s_metrics(tmp_path: Path) -> None:
    for _ in range(2):
        run(WORKER, tmp_path)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(run(READER, tmp_path))
        for s in family.samples
    }
    assert samples[("async_query_queries_submitted_total", (("datasource", "local"), ("kind", "interactive")))] == 2
    assert samples[("async_query_index_retries_total", (("operation", "get"),))] == 4
    get = (("method", "GET"), ("route", "/_plugins/_async_query/{query_id}"), ("status", "2xx"))
    assert samples[("async_query_http_request_duration_seconds_count", get)] == 2
    assert samples[("async_query_http_request_duration_seconds_bucket", tuple(sorted((*get, ("le", "0.0025")))))] == 2
