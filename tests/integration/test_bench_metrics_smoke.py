"""``python -m bench.metrics`` with tiny counts, so that the bench code cannot rot (two real
``async-query serve`` processes, metrics on and off, on the test's OpenSearch node; the figures' values
are not judged, but the ``on`` service must have counted every GET it answered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.metrics import RATIO_TARGET, MetricsPlan, run_bench
from bench.report import Target
from tests.node import index_env

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier


def test_metrics_bench_runs(tmp_path: Path, index_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bench's index (bench.index_node) is the test's node, named as a cluster would be.
    for key, value in index_env(index_url).items():
        monkeypatch.setenv(key, value)
    plan = MetricsPlan(rounds=2, round_seconds=0.2, warmup_seconds=0.05, clients=2, sessions=2, calls=200)
    figures, details = run_bench(plan, tmp_path)
    ratios = [f for f in figures if f.name.endswith(": on / off")]
    assert len(ratios) == 2 and all(f.target == Target(">=", RATIO_TARGET) and f.value for f in ratios)
    assert details["gets_answered_on"] > 0 and details["gets_counted_on"] >= details["gets_answered_on"]
    assert set(details["throughput_per_s"]) == {"running on", "running off", "finished on", "finished off"}
    assert all(cpu > 0 for cpu in details["cpu_us_per_get"].values())
