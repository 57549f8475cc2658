"""What metrics cost a GET: throughput with metrics on next to off, same run.

Two ``async-query serve`` processes on one index (a real OpenSearch node: :mod:`bench.index_node`), the same but for
``ASYNC_QUERY_METRICS_ENABLED`` (``true``: the request middleware, the index call listener, the
metrics round; ``false``: none of them). Simulated live sessions (:mod:`bench.sim`) each run one
statement; 8 closed-loop clients GET those running statements (the reply clients poll for), then
one finished statement (the reply cache: the cheapest GET, where a fixed cost weighs most). Rounds
alternate between the two services (and which goes first), so that the machine's changing load
falls on both alike; the figure is GET/s on over GET/s off, over all rounds (target >= 0.95), with
the median of the paired rounds' ratios beside it. The service processes' CPU per GET (from
``/proc``) is reported too: it depends much less on what else the machine runs.

After the rounds, the ``on`` service's ``/metrics`` must count every GET it answered (the figure
would mean nothing if the middleware had not run). Also, in this process: what the middleware
adds per request around an app that does nothing, in microseconds.

    python -m bench.metrics [--quick] [--out PATH]
"""

from __future__ import annotations

import asyncio
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
from prometheus_client.parser import text_string_to_metric_families

from async_query.metrics import ROUTES, MetricsMiddleware
from bench.api_latency import _finish_one
from bench.env import free_port, stop_services, wait_serving
from bench.httpload import LoadResult, run_load
from bench.index_node import IndexNode, index_node
from bench.report import Figure, Target, run_standalone
from bench.sim import SimulatedSessions
from query_core.ids import default_result_index
from query_core.store import Store

log = logging.getLogger(__name__)

SECTION = "Metrics"
DS = "local"
BASE = "/_plugins/_async_query"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "metrics.json"
#: The issue's target: GET throughput with metrics on over off.
RATIO_TARGET = 0.95
MODES = ("on", "off")


@dataclass(frozen=True)
class MetricsPlan:
    rounds: int = 10
    round_seconds: float = 2.5
    warmup_seconds: float = 0.5
    clients: int = 8
    sessions: int = 8
    calls: int = 20_000

    @classmethod
    def quick(cls) -> MetricsPlan:
        return cls(rounds=2, round_seconds=1.0, warmup_seconds=0.2, sessions=4, calls=5_000)


@dataclass(frozen=True)
class Served:
    url: str
    pid: int

    def cpu_s(self) -> float:
        """CPU seconds the service process has used (user and system, from ``/proc``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(modes: list[str], index: IndexNode, work: Path) -> Iterator[dict[str, Served]]:
    """``async-query serve`` with metrics ``on`` or ``off`` on the index, one per mode, started
    side by side; yields them by mode."""
    started: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}
    try:
        for mode in modes:
            started[mode] = _launch(mode, index, work)
        for proc, url, log_path in started.values():
            wait_serving(proc, url, log_path)
        yield {mode: Served(url, proc.pid) for mode, (proc, url, _) in started.items()}
    finally:
        stop_services([proc for proc, _, _ in started.values()], grace_s=20)


def _launch(mode: str, index: IndexNode, work: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    env = index.service_env(
        {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_", "PROMETHEUS_"))}
    )
    env.update(
        ASYNC_QUERY_METRICS_ENABLED="true" if mode == "on" else "false",
        ASYNC_QUERY_DATA_DIR=str(work / mode),
        ASYNC_QUERY_LOCAL_CATALOG="in-memory",  # no metastore: no Spark runs here
        ASYNC_QUERY_WARM_POOL_SIZE="0",  # nor a warm pool's job
    )
    log_path = work / f"{mode}.log"
    command = [sys.executable, "-m", "async_query.cli", "serve", "--port", str(port), "--log-level", "warning"]
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, f"http://127.0.0.1:{port}", log_path


@dataclass
class Round:
    load: LoadResult
    #: The service process's CPU seconds over the round (warm-up included), and its GETs.
    cpu_s: float
    answered: int


def measure(served: dict[str, Served], ids: list[str], plan: MetricsPlan) -> dict[str, list[Round]]:
    """GET rounds per mode and kind of GET (``running``, ``finished``), alternating the modes."""
    results: dict[str, list[Round]] = {f"{kind} {mode}": [] for kind in ("running", "finished") for mode in served}
    for r in range(plan.rounds):
        order = list(served) if r % 2 == 0 else list(reversed(served))
        for kind, targets in (("running", ids[1:]), ("finished", ids[:1])):
            for mode in order:
                sent = [0]

                def make(c: int, i: int, t: list[str] = targets, n: list[int] = sent) -> tuple[str, str, None]:
                    n[0] += 1
                    return "GET", f"{BASE}/{t[i % len(t)]}", None

                cpu = served[mode].cpu_s()
                result = run_load(
                    served[mode].url, make, plan.clients, duration=plan.round_seconds, warmup=plan.warmup_seconds
                )
                cpu = served[mode].cpu_s() - cpu
                if set(result.statuses) != {200} or result.errors:
                    raise RuntimeError(f"{mode}: unexpected replies {result.statuses}, {result.errors} errors")
                results[f"{kind} {mode}"].append(Round(result, cpu, sent[0]))
    return results


def counted_gets(url: str) -> float:
    """GETs of a query the service's ``/metrics`` counted."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "async_query_http_request_duration_seconds_count"
        and s.labels.get("route") == ROUTES["query"]
        and s.labels.get("method") == "GET"
    )


def middleware_us(calls: int) -> float:
    """Microseconds the middleware adds per request around an app that answers at once (the
    least of five runs of ``calls`` requests, with and without it)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: Any) -> None:
        return None

    async def receive() -> Any:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": f"{BASE}/bG9jYWxxdWVyeWlkMTIz"}
    wrapped = MetricsMiddleware(app)

    async def timed(target: Any) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            await target(scope, receive, send)
        return time.perf_counter() - started

    async def both() -> float:
        await timed(wrapped)  # warm-up
        # the least of a few runs each: what the machine's other work added is not the middleware's
        with_it = min([await timed(wrapped) for _ in range(5)])
        without = min([await timed(app) for _ in range(5)])
        return (with_it - without) / calls * 1e6

    return asyncio.run(both())


def run_bench(plan: MetricsPlan, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    with index_node(work / "index") as index:
        store = Store.connect(index.config)
        try:
            with (
                SimulatedSessions(store, DS, plan.sessions) as sim,
                serving(list(MODES), index, work) as served,
            ):
                on = served["on"]
                sim.create()
                sim.start(writers=1)
                ids = [s.statement_id for s in sim.sessions]
                _finish_one(store, DS, default_result_index(DS), ids[0])
                before = counted_gets(on.url)
                results = measure(served, ids, plan)
                counted = counted_gets(on.url) - before
        finally:
            store.close()
    sent = sum(r.answered for key, rs in results.items() if key.endswith(" on") for r in rs)
    details = {
        "plan": plan.__dict__,
        "throughput_per_s": {k: _throughput([r.load for r in rs]) for k, rs in results.items()},
        "cpu_us_per_get": {k: sum(r.cpu_s for r in rs) / sum(r.answered for r in rs) * 1e6 for k, rs in results.items()},
        "round_ratios": {
            kind: [a.load.throughput / b.load.throughput for a, b in zip(results[f"{kind} on"], results[f"{kind} off"], strict=True)]
            for kind in ("running", "finished")
        },
        "rounds": {k: [r.load.as_json() | {"cpu_s": r.cpu_s, "answered": r.answered} for r in rs] for k, rs in results.items()},
        "gets_answered_on": sent,
        "gets_counted_on": counted,
        "middleware_us": middleware_us(plan.calls),
    }
    if counted < sent:
        raise RuntimeError(f"/metrics counted {counted:.0f} GETs of the {sent} the service answered")
    return _figures(details), details


def _throughput(results: list[LoadResult]) -> float:
    elapsed = sum(r.elapsed_s for r in results)
    return sum(r.count for r in results) / elapsed if elapsed else 0.0


def _figures(details: dict[str, Any]) -> list[Figure]:
    tp = details["throughput_per_s"]
    clients = f"{details['plan']['clients']} clients"
    figures = []
    for kind in ("running", "finished"):
        on, off = tp[f"{kind} on"], tp[f"{kind} off"]
        what = "running statement" if kind == "running" else "finished statement (reply cache)"
        ratios = sorted(details["round_ratios"][kind])
        median = ratios[len(ratios) // 2]
        cpu_on, cpu_off = details["cpu_us_per_get"][f"{kind} on"], details["cpu_us_per_get"][f"{kind} off"]
        figures += [
            Figure(SECTION, f"GET {what}, metrics off", off, "GET/s", note=clients),
            Figure(SECTION, f"GET {what}, metrics on", on, "GET/s", note=f"{clients}, same run"),
            Figure(
                SECTION,
                f"GET {what}: on / off",
                on / off if off else 0.0,
                "x",
                Target(">=", RATIO_TARGET),
                note=f"all rounds; median of the {len(ratios)} paired rounds {median:.3f}",
            ),
            Figure(
                SECTION,
                f"GET {what}: service CPU per GET, off / on",
                cpu_off / cpu_on if cpu_on else 0.0,
                "x",
                note=f"{cpu_off:.0f} us off, {cpu_on:.0f} us on (the service process's, from /proc)",
            ),
        ]
    figures.append(
        Figure(
            SECTION,
            "the middleware, in process",
            details["middleware_us"],
            "us",
            note=f"per request; /metrics counted {details['gets_counted_on']:.0f} of {details['gets_answered_on']} GETs",
        )
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv,
        prog="python -m bench.metrics",
        doc=__doc__,
        default_out=DEFAULT_OUT,
        section=SECTION,
        run=lambda quick, work: run_bench(MetricsPlan.quick() if quick else MetricsPlan(), work),
    )


if __name__ == "__main__":
    raise SystemExit(main())
