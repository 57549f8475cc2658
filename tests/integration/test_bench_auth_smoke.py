"""``python -m bench.auth`` with tiny counts, so that the bench code cannot rot (two real
``async-query serve`` processes on the test's OpenSearch node; the figures' values are not judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.auth import ADDED_TARGET_MS, AuthPlan, run_bench
from bench.report import Target
from tests.node import index_env

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier


def test_auth_bench_runs(tmp_path: Path, index_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bench's index (bench.index_node) is the test's node, named as a cluster would be.
    for key, value in index_env(index_url).items():
        monkeypatch.setenv(key, value)
    plan = AuthPlan(rounds=2, round_seconds=0.2, warmup_seconds=0.05, sessions=2, checks=50)
    figures, details = run_bench(plan, tmp_path)
    named = {f.name: f for f in figures}
    added = named["added by basic (p50 difference)"]
    assert added.target == Target("<", ADDED_TARGET_MS) and added.value is not None
    assert details["gets"]["none"] > 0 and details["gets"]["basic"] > 0
    assert details["first_request_ms"] > 0
    assert 0 < details["cached_basic_check_us"] and 0 < details["audit_line_us"]
    # both services audited their GETs, and the basic one knew who asked
    basic_audit = (tmp_path / "basic" / "audit" / "audit.log").read_text()
    assert '"user":"bench","action":"query.get"' in basic_audit
    assert '"user":"anonymous","action":"query.get"' in (tmp_path / "none" / "audit" / "audit.log").read_text()
