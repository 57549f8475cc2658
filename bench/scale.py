"""Scale: many live sessions heart-beating (as jobs would) while clients poll GET in them.

Every simulated session runs one statement, so it beats at the job's *running* interval (the
busiest case: ``sessions / interval`` heartbeat writes per second). Index writes per second are
read from the index server's own indexing counter over the measured window, and cross-checked with
the writers' count. The writers' achieved rate and the effective beat interval per session are
always reported next to the schedule: on a 2-core machine also running the server and the index
they fall behind, so a low write rate is not mistaken for the product's.

Late beats can make a session look stale, and then the service asks its launcher about the job.
Given ``jobs_dir`` (the local launcher's ``<data dir>/jobs``), every simulated job is answered
``RUNNING`` there, as a live job would be (:class:`bench.sim.StandInJobs`). Any simulated session
the service still declares dead, or any of their statements that turns ``failed``, is reported as
a missed ``== 0`` figure and a warning: the section then measured a different system.

Right after the window, under the same heartbeats, the same statements are read straight from the
index by id by as many clients for a third of the window's length: the floor of those GETs.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.api_latency import bare_gets
from bench.httpload import run_load
from bench.report import Figure, Target
from bench.sim import SimulatedSessions, StandInJobs, declared_dead, index_writes
from bench.stats import percentile, summary
from query_core.ids import request_index
from query_core.store import Store

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

    def with_sessions(self, sessions: int) -> ScalePlan:
        """The plan with ``sessions`` sessions. Past 1,000 they beat at the job's *idle* interval
        (30 s): 10,000 sessions all running a statement would be 5,000 heartbeat writes per second,
        more than one 2-core machine's index server takes (about 400/s here), and a deployment's
        sessions are mostly idle between a user's queries."""
        return replace(self, sessions=sessions, interval_ms=self.interval_ms if sessions <= 1_000 else 30_000)


def run_scale(
    base_url: str, store: Store, datasource: str, plan: ScalePlan, jobs_dir: Path | None = None
) -> tuple[list[Figure], dict[str, Any]]:
    index = request_index(datasource)
    started = time.perf_counter()
    job_ids = [f"bench-scale-{i}" for i in range(plan.sessions)]
    with ExitStack() as stack:
        if jobs_dir is not None:
            # Outlives the sessions: entered first, so it is left after they are ended.
            stack.enter_context(StandInJobs(jobs_dir, job_ids))
        sim = stack.enter_context(
            SimulatedSessions(store, datasource, plan.sessions, interval_ms=plan.interval_ms, job_ids=job_ids)
        )
        sim.create()
        created_s = time.perf_counter() - started
        sim.start_in_process(writers=plan.writers)
        # One full interval first, so every session is beating at its steady rate.
        time.sleep(plan.interval_ms / 1000)
        window_from = time.monotonic()
        writes0, stats0, t0 = sim.writes_so_far(), index_writes(store, index), time.perf_counter()
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
        writes1, stats1, t1 = sim.writes_so_far(), index_writes(store, index), time.perf_counter()
        floor = bare_gets(store, datasource, ids, plan.clients, plan.seconds / 3, 0.0)
        sim.stop()  # the beats' figures come back from their process
        lags = sim.stats.lags_since(window_from)
        failures = sim.stats.failures
        # Before the sessions are ended (which makes them dead on purpose).
        dead, failed = declared_dead(store, datasource, sim.sessions)
    window = t1 - t0
    bad = {code: n for code, n in load.statuses.items() if code != 200}
    if bad or load.errors:
        raise RuntimeError(f"scale GETs: unexpected replies {bad}, {load.errors} errors")
    expected = plan.sessions * 1000 / plan.interval_ms
    by_server = (stats1 - stats0) / window if stats0 is not None and stats1 is not None else None
    by_writers = (writes1 - writes0) / window
    # Writers that fall behind still beat every session in turn: the interval each one sees.
    effective = plan.sessions / by_writers if by_writers else math.inf
    schedule_s = plan.interval_ms / 1000
    print(
        f"   scale ({plan.sessions:,} sessions): heartbeat writers {by_writers:.0f} beats/s of {expected:g} scheduled"
        f" ({by_writers / expected:.0%}); each session beat every {effective:.2f} s (schedule {schedule_s:g} s)",
        file=sys.stderr,
        flush=True,
    )
    if dead or failed:
        warning = (
            f"WARNING: scale ({plan.sessions:,} sessions): {dead} simulated sessions declared dead, {failed}"
            " statements FAILED: the section did not measure live sessions"
        )
        log.warning(warning)
        print(f"   {warning}", file=sys.stderr, flush=True)
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
        "stand_in_jobs": jobs_dir is not None,
        "sessions_declared_dead": dead,
        "statements_failed": failed,
        "get_reply_statuses": replies,
        "bare_get_by_id": None if floor is None else floor.as_json(),
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
            f"GET throughput with {plan.sessions:,} live sessions",
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
            note=f"scheduled {expected:g}/s; {by_writers / expected:.0%} achieved"
            + (f", {failures} failed" if failures else ""),
        ),
        Figure(
            SECTION,
            "effective heartbeat interval per session",
            effective,
            "s",
            note=f"schedule {schedule_s:g} s, {plan.writers} writer threads in a process of their own",
        ),
        Figure(
            SECTION,
            f"simulated sessions declared dead ({plan.sessions:,})",
            dead,
            "sessions",
            Target("==", 0),
            note=("launcher answers RUNNING for their jobs" if jobs_dir is not None else "service's own launcher")
            + f"; {failed} statements FAILED",
        ),
        Figure(
            SECTION,
            f"polled statements FAILED ({plan.sessions:,} sessions)",
            failed,
            "statements",
            Target("==", 0),
            note=f"{replies.get('FAILED', 0)} GET replies FAILED",
        ),
    ]
    if floor is not None:
        floor_p99 = percentile(floor.latencies_ms, 99)
        figures += [
            Figure(
                SECTION,
                f"bare GET by id on the index with {plan.sessions:,} live sessions: p50",
                percentile(floor.latencies_ms, 50),
                "ms",
                note="the floor",
            ),
            Figure(
                SECTION,
                f"bare GET by id on the index with {plan.sessions:,} live sessions: p99",
                floor_p99,
                "ms",
                note=f"{plan.clients} clients, n={floor.count}",
            ),
            Figure(
                SECTION,
                f"GET p99 / bare GET by id p99 with {plan.sessions:,} live sessions",
                percentile(load.latencies_ms, 99) / floor_p99,
                "x",
            ),
        ]
    return figures, details
