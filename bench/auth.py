"""What authentication adds to a GET: ``basic`` (credentials cached) next to ``none``, same run.

Two ``async-query serve`` processes on one index (a real OpenSearch node: :mod:`bench.index_node`), the same but for ``ASYNC_QUERY_AUTH``
(``none`` and ``basic``); both write the audit log. Simulated live sessions (:mod:`bench.sim`)
each run one statement, and one closed-loop client GETs those statements, the reply clients
poll for. The ``basic`` user is not an admin and submitted the statements, so each of its GETs
also passes the ownership check (docs/security.md), as a non-admin's poll does. Rounds alternate between the two services (and which goes first), so that the machine's
changing load falls on both alike; the figure is the difference of the p50s over all rounds.

Also, in this process: what the middleware's parts cost per request (a cached ``basic`` check,
one audit line), and what the first request of new credentials costs (one argon2id check).

    python -m bench.auth [--quick] [--out PATH]
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from async_query.security.audit import AuditLog
from async_query.security.authn import BasicAuthentication, CredentialCache
from async_query.security.users import UserDirectory, UsersFile
from bench.env import free_port, stop_services, wait_serving
from bench.httpload import LoadResult, run_load
from bench.index_node import IndexNode, index_node
from bench.report import Figure, Target, run_standalone
from bench.sim import SimulatedSessions
from bench.stats import percentile
from query_core.store import Store

log = logging.getLogger(__name__)

SECTION = "Authentication"
DS = "local"
BASE = "/_plugins/_async_query"
USER, PASSWORD = "bench", "bench-Pa55word-1"
#: Not an admin role: the ownership check of every GET runs.
USER_ROLES = ["analysts"]
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "auth.json"
#: The issue's target: what ``basic`` (cached) may add to a GET's p50, in ms.
ADDED_TARGET_MS = 0.2


@dataclass(frozen=True)
class AuthPlan:
    rounds: int = 8
    round_seconds: float = 3.0
    warmup_seconds: float = 0.5
    sessions: int = 8
    checks: int = 20_000

    @classmethod
    def quick(cls) -> AuthPlan:
        return cls(rounds=2, round_seconds=0.8, warmup_seconds=0.2, sessions=4, checks=2_000)


def basic_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@contextmanager
def serving(modes: list[str], index: IndexNode, work: Path, users_file: Path) -> Iterator[dict[str, str]]:
    """``async-query serve`` with ``ASYNC_QUERY_AUTH=mode`` on the index, one per mode, started
    side by side; yields their URLs by mode."""
    started: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}
    try:
        for mode in modes:
            started[mode] = _launch(mode, index, work, users_file)
        for proc, url, log_path in started.values():
            wait_serving(proc, url, log_path, headers={"Authorization": basic_header(USER, PASSWORD)})
        yield {mode: url for mode, (_, url, _) in started.items()}
    finally:
        stop_services([proc for proc, _, _ in started.values()], grace_s=20)


def _launch(mode: str, index: IndexNode, work: Path, users_file: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    env = index.service_env({k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_"))})
    env.update(
        ASYNC_QUERY_AUTH=mode,
        ASYNC_QUERY_USERS_FILE=str(users_file),
        # how soon the newcomer of first_request_ms is known (its one timed request comes after)
        ASYNC_QUERY_USERS_RECHECK_S="0.1",
        ASYNC_QUERY_DATA_DIR=str(work / mode),
        ASYNC_QUERY_LOCAL_CATALOG="in-memory",  # no metastore: no Spark runs here
        ASYNC_QUERY_WARM_POOL_SIZE="0",  # nor a warm pool's job
    )
    log_path = work / f"{mode}.log"
    command = [sys.executable, "-m", "async_query.cli", "serve", "--port", str(port), "--log-level", "warning"]
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, f"http://127.0.0.1:{port}", log_path


def measure_http(urls: dict[str, str], ids: list[str], plan: AuthPlan) -> dict[str, list[float]]:
    """GET latencies per mode, over alternating rounds (1 client each)."""
    auth = {"Authorization": basic_header(USER, PASSWORD)}
    latencies: dict[str, list[float]] = {mode: [] for mode in urls}
    for r in range(plan.rounds):
        order = list(urls) if r % 2 == 0 else list(reversed(urls))
        for mode in order:
            result: LoadResult = run_load(
                urls[mode],
                lambda c, i: ("GET", f"{BASE}/{ids[i % len(ids)]}", None),
                1,
                duration=plan.round_seconds,
                warmup=plan.warmup_seconds,
                headers=auth if mode == "basic" else {},
            )
            if set(result.statuses) != {200} or result.errors:
                raise RuntimeError(f"{mode}: unexpected replies {result.statuses}, {result.errors} errors")
            latencies[mode].extend(result.latencies_ms)
    return latencies


def first_request_ms(url: str, ids: list[str], users_file: Path) -> float:
    """One GET with credentials the service has not seen: includes one argon2id check."""
    UsersFile(users_file).add("newcomer", "newcomer-Pa55word", ["all_access"])  # may read the bench user's
    header = {"Authorization": basic_header("newcomer", "newcomer-Pa55word")}
    with httpx.Client(base_url=url, timeout=30) as client:
        deadline = time.monotonic() + 10
        while (
            client.get(f"{BASE}/{ids[0]}", headers={"Authorization": basic_header(USER, PASSWORD)}).status_code != 200
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the service stopped answering")
        # the service re-reads the users file within ASYNC_QUERY_USERS_RECHECK_S: wait for it to know
        # the newcomer
        while True:
            started = time.perf_counter()
            status = client.get(f"{BASE}/{ids[0]}", headers=header).status_code
            took = (time.perf_counter() - started) * 1000
            if status == 200:
                return took
            if time.monotonic() > deadline + 10:
                raise RuntimeError("the new user was never let in")
            time.sleep(0.05)


def measure_parts(users_file: Path, work: Path, checks: int) -> dict[str, float]:
    """Microseconds per call of the middleware's parts, in this process."""
    cache = CredentialCache(60, 10_000)
    basic = BasicAuthentication(UserDirectory(users_file), cache, ["all_access"])
    header = basic_header(USER, PASSWORD).encode()

    async def cached_checks() -> float:
        await basic.authenticate(header)  # the one argon2id check
        started = time.perf_counter()
        for _ in range(checks):
            await basic.authenticate(header)
        return (time.perf_counter() - started) / checks * 1e6

    check_us = asyncio.run(cached_checks())
    audit = AuditLog(work / "parts-audit")
    record = {
        "time": "2025-01-01T00:00:00.000Z", "user": USER, "action": "query.get", "datasource": DS,
        "queryId": "x" * 24, "outcome": "ok", "status": 200, "method": "GET", "path": BASE + "/" + "x" * 24,
        "remote": "127.0.0.1",
    }  # fmt: skip
    started = time.perf_counter()
    for _ in range(checks):
        audit.write(record)
    audit_us = (time.perf_counter() - started) / checks * 1e6
    audit.close()
    return {"cached_basic_check_us": check_us, "audit_line_us": audit_us}


def run_bench(plan: AuthPlan, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    users_file = work / "users.json"
    UsersFile(users_file).add(USER, PASSWORD, USER_ROLES)
    with index_node(work / "index") as index:
        store = Store.connect(index.config)
        try:
            with (
                SimulatedSessions(store, DS, plan.sessions, submitted_by=USER) as sim,
                serving(["none", "basic"], index, work, users_file) as urls,
            ):
                sim.create()
                sim.start(writers=1)
                ids = [s.statement_id for s in sim.sessions]
                latencies = measure_http(urls, ids, plan)
                first_ms = first_request_ms(urls["basic"], ids, users_file)
        finally:
            store.close()
    parts = measure_parts(users_file, work, plan.checks)
    return _figures(latencies, first_ms, parts), {
        "plan": plan.__dict__,
        "gets": {m: len(v) for m, v in latencies.items()},
        "p50_ms": {m: percentile(v, 50) for m, v in latencies.items()},
        "p90_ms": {m: percentile(v, 90) for m, v in latencies.items()},
        "p99_ms": {m: percentile(v, 99) for m, v in latencies.items()},
        "first_request_ms": first_ms,
        **parts,
    }


def _figures(latencies: dict[str, list[float]], first_ms: float, parts: dict[str, float]) -> list[Figure]:
    p50 = {m: percentile(v, 50) for m, v in latencies.items()}
    added = p50["basic"] - p50["none"]
    n = len(latencies["none"])
    return [
        Figure(SECTION, "GET p50, auth none (1 client)", p50["none"], "ms", note=f"{n:,} GETs"),
        Figure(
            SECTION,
            "GET p50, auth basic, cached (1 client)",
            p50["basic"],
            "ms",
            note=f"{len(latencies['basic']):,} GETs by their non-admin submitter",
        ),
        Figure(SECTION, "added by basic (p50 difference)", added, "ms", Target("<", ADDED_TARGET_MS)),
        Figure(SECTION, "a cached basic check, in process", parts["cached_basic_check_us"], "us"),
        Figure(SECTION, "an audit line, in process", parts["audit_line_us"], "us", note="both modes write one"),
        Figure(SECTION, "first request of new credentials", first_ms, "ms", note="one argon2id check (64 MiB, t=3)"),
    ]


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv,
        prog="python -m bench.auth",
        doc=__doc__,
        default_out=DEFAULT_OUT,
        section=SECTION,
        run=lambda quick, work: run_bench(AuthPlan.quick() if quick else AuthPlan(), work),
    )


if __name__ == "__main__":
    raise SystemExit(main())
