"""Scale: many live sessions heart-beating (as jobs would) while clients poll GET in them.

Every simulated session runs one statement, so it beats at the job's *running* interval (the
busiest case: ``sessions / interval`` heartbeat writes per second). Index writes per second are
read from the index server's own indexing counter over the measured window, and cross-checked with
the writers' count. If the bench's writer threads fall behind their schedule (a 2-core machine
also running the server and the index), the lag is reported, so a low write rate is not mistaken
for the product's.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from bench.httpload import run_load
from bench.report import Figure, Target
from bench.sim import SimulatedSessions, index_writes
from bench.stats import percentile, summary
from query_core.ids import request_index
from query_core.store import IndexStore

log = logging.getLogger(__name__)

BASE = "/_plugins/_async_query"
SECTION = "scale"


@dataclass(frozen=True)
class ScalePlan:
    sessions: int = 1_000
    interval_ms: int = 2_000
    clients: int = 8
    seconds: float = 30.0
    writers: int = 6

    @classmethod
    def quick(cls) -> ScalePlan:
        return cls(sessions=100, clients=4, seconds=4.0, writers=2)


def run_scale(
    base_url: str, store: IndexStore, datasource: str, plan: ScalePlan
) -> tuple[list[Figure], dict[str, Any]]:
    index = request_index(datasource)
    started = time.perf_counter()
    with SimulatedSessions(store, datasource, plan.sessions, interval_ms=plan.interval_ms) as sim:
        sim.create()
        created_s = time.perf_counter() - started
        sim.start(writers=plan.writers)
        # One full interval first, so every session is beating at its steady rate.
        time.sleep(plan.interval_ms / 1000)
        lag_from = len(sim.stats.lag_ms)
        writes0, stats0, t0 = sim.stats.writes, index_writes(store, index), time.perf_counter()
        ids = [s.statement_id for s in sim.sessions]
        replies: dict[str, int] = {}

        def tally(client: int, status: int, body: bytes) -> None:
            if status == 200:
                key = str(json.loads(body).get("status"))
                replies[key] = replies.get(key, 0) + 1

        load = run_load(
            base_url,
            lambda c, i: ("GET", f"{BASE}/{ids[(c * 7919 + i * 13) % len(ids)]}", None),
            plan.clients,
            duration=plan.seconds,
            on_reply=tally,
        )
        writes1, stats1, t1 = sim.stats.writes, index_writes(store, index), time.perf_counter()
        lags = sim.stats.lag_ms[lag_from:]
        failures = sim.stats.failures
    window = t1 - t0
    bad = {code: n for code, n in load.statuses.items() if code != 200}
    if bad or load.errors:
        raise RuntimeError(f"scale GETs: unexpected replies {bad}, {load.errors} errors")
    expected = plan.sessions * 1000 / plan.interval_ms
    by_server = (stats1 - stats0) / window if stats0 is not None and stats1 is not None else None
    by_writers = (writes1 - writes0) / window
    # Writers that fall behind still beat every session in turn: the interval each one sees.
    effective = plan.sessions / by_writers if by_writers else math.inf
    details = {
        "plan": plan.__dict__,
        "create_s": round(created_s, 2),
        "window_s": round(window, 2),
        "get": load.as_json(),
        "index_writes_per_s_server": None if by_server is None else round(by_server, 1),
        "heartbeat_writes_per_s_writers": round(by_writers, 1),
        "heartbeat_writes_per_s_scheduled": expected,
        "heartbeat_lag_behind_schedule_ms": summary(lags),
        "effective_beat_interval_s": round(effective, 3),
        "heartbeat_failures": failures,
        "get_reply_statuses": replies,
    }
    figures = [
        Figure(SECTION, f"GET p50 with {plan.sessions:,} live sessions", percentile(load.latencies_ms, 50), "ms"),
        Figure(
            SECTION,
            f"GET p99 with {plan.sessions:,} live sessions",
            percentile(load.latencies_ms, 99),
            "ms",
            Target("<", 50),
            note=f"{plan.clients} clients, n={load.count}",
        ),
        Figure(
            SECTION,
            "GET throughput meanwhile",
            load.throughput,
            "GET/s",
            note=", ".join(f"{n} {status}" for status, n in sorted(replies.items())),
        ),
        Figure(
            SECTION,
            "index writes per second (server's count)",
            by_server,
            "writes/s",
            note=f"scheduled {expected:g}/s: {plan.sessions:,} sessions x 1 beat / {plan.interval_ms / 1000:g} s",
        ),
        Figure(
            SECTION,
            "heartbeat writes per second (writers' count)",
            by_writers,
            "writes/s",
            note=f"each session beat every {effective:.2f} s (schedule {plan.interval_ms / 1000:g} s)"
            + (f", {failures} failed" if failures else ""),
        ),
    ]
    return figures, details
