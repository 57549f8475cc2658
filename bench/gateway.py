"""Gateway mode's cost: the same requests sent to the index directly and through the service.

``python -m bench.gateway [--quick] [--out bench/results/gateway.json]`` starts an index server
(a real OpenSearch node: :mod:`bench.index_node`; or ``OPENSEARCH_URL``) and the service as ``async-query serve`` with
``ASYNC_QUERY_GATEWAY=true`` in its own process, then, in the same run:

* **added latency**: one closed-loop client (:mod:`bench.httpload`) sends a small request
  (``GET /_cluster/health``, and a document GET from a ``.kibana``-style index) for a few seconds
  directly (with the index's credential), then through the gateway (which adds the service's), round after round (the order alternates, so drift on a
  shared machine falls on both); the added latency is the gateway's percentile minus the direct
  one.
* **bulk throughput**: a 10 MB ``_bulk`` body (1 KB documents into an index with ``dynamic:
  false``, so the index spends little time per byte and the transport's share is as large as it
  gets) is sent directly and through the gateway back to back, in pairs (which goes first
  alternates), after one pair to warm up; each reply is checked (200, ``"errors": false``).
  Throughput is body MB per second, from the send to the last byte of the reply; the ratio is the
  median over the pairs of direct time / gateway time, so that load from other work on a shared
  machine falls on both halves of each pair alike.
* **large reply**: the same documents read back by one ``_search`` (a reply of about the same
  size), in pairs likewise: the streamed reply's throughput ratio (informational).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.env import BenchEnv
from bench.httpload import LoadResult, RequestFactory, run_load
from bench.index_node import IndexNode
from bench.report import Figure, Report, Target
from bench.stats import percentile, summary

log = logging.getLogger(__name__)

SECTION = "gateway"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "gateway.json"
BULK_INDEX = "bench-gateway-bulk"
DOC_INDEX = ".kibana_bench_gateway"
DOC_PATH = f"/{DOC_INDEX}/_doc/config:1"
SMALL_REQUESTS = {"GET /_cluster/health": "/_cluster/health", "GET a .kibana-style document": DOC_PATH}


@dataclass(frozen=True)
class GatewayPlan:
    rounds: int = 5
    seconds_per_round: float = 2.0
    warmup_s: float = 0.3
    bulk_mb: float = 10.0
    doc_bytes: int = 1024
    #: Timed pairs (direct, through) of the bulk and of the large reply, after one to warm up.
    bulks: int = 10

    @classmethod
    def quick(cls) -> GatewayPlan:
        return cls(rounds=2, seconds_per_round=0.5, bulks=3)


def run_gateway(gateway_url: str, index: IndexNode, plan: GatewayPlan) -> tuple[list[Figure], dict[str, Any]]:
    """All figures of the section, against a gateway at ``gateway_url`` in front of ``index``."""
    with index.client(timeout=120) as direct:
        _prepare(direct)
        figures, details = _latency(gateway_url, index, plan)
        body, docs = _bulk_body(plan)
        bulk_figures, details["bulk"] = _bulk(gateway_url, index, body, docs, plan)
        reply_figures, details["large_reply"] = _large_reply(gateway_url, index, direct, docs, plan)
        direct.delete(f"/{BULK_INDEX}")
        direct.delete(f"/{DOC_INDEX}")
    details["plan"] = plan.__dict__
    return figures + bulk_figures + reply_figures, details


def _prepare(direct: httpx.Client) -> None:
    for index in (BULK_INDEX, DOC_INDEX):
        direct.delete(f"/{index}")
    _ok(direct.put(f"/{BULK_INDEX}", json={"mappings": {"dynamic": False}}), f"create {BULK_INDEX}")
    _ok(direct.put(f"/{DOC_INDEX}", json={"mappings": {"dynamic": False}}), f"create {DOC_INDEX}")
    doc = {"type": "config", "config": {"buildNum": 1, "defaultIndex": "logs-*"}, "updated_at": "2026-01-01"}
    _ok(direct.put(DOC_PATH, params={"refresh": "true"}, json=doc), "index the .kibana-style document")


# -- added latency --------------------------------------------------------------------------------


def _latency(gateway_url: str, index: IndexNode, plan: GatewayPlan) -> tuple[list[Figure], dict[str, Any]]:
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for label, path in SMALL_REQUESTS.items():
        samples: dict[str, list[float]] = {"direct": [], "gateway": []}
        for round_ in range(plan.rounds):
            order = ("direct", "gateway") if round_ % 2 == 0 else ("gateway", "direct")
            for via in order:
                url, headers = (index.url, index.headers()) if via == "direct" else (gateway_url, {})
                result = run_load(
                    url, _same(path), 1, duration=plan.seconds_per_round, warmup=plan.warmup_s, headers=headers
                )
                _check(result, f"{label} ({via})")
                samples[via] += result.latencies_ms
        details[label] = {via: summary(s) for via, s in samples.items()}
        direct_p50, via_p50 = percentile(samples["direct"], 50), percentile(samples["gateway"], 50)
        direct_p99, via_p99 = percentile(samples["direct"], 99), percentile(samples["gateway"], 99)
        target = Target("<", 1) if label == "GET /_cluster/health" else None
        n = f"n={len(samples['gateway'])} through, {len(samples['direct'])} direct"
        figures += [
            Figure(
                SECTION,
                f"{label}: added latency p50",
                via_p50 - direct_p50,
                "ms",
                target,
                note=f"through {via_p50:.3f} ms, direct {direct_p50:.3f} ms",
            ),
            Figure(
                SECTION,
                f"{label}: added latency p99",
                via_p99 - direct_p99,
                "ms",
                note=f"through {via_p99:.3f} ms, direct {direct_p99:.3f} ms; {n}",
            ),
        ]
    return figures, details


def _same(path: str) -> RequestFactory:
    """Every request a GET of ``path``."""
    request = ("GET", path, None)
    return lambda client, i: request


def _check(result: LoadResult, what: str) -> None:
    bad = {code: n for code, n in result.statuses.items() if code != 200}
    if bad or result.errors or not result.count:
        sample = {code: result.samples.get(code, b"")[:300].decode(errors="replace") for code in bad}
        raise RuntimeError(f"{what}: unexpected replies {bad}, {result.errors} connection errors: {sample}")


# -- bulk and large reply -------------------------------------------------------------------------


def _bulk_body(plan: GatewayPlan) -> tuple[bytes, int]:
    """A ``_bulk`` body of about ``bulk_mb`` MB: documents of about ``doc_bytes`` each."""
    target = int(plan.bulk_mb * 1_000_000)
    filler = "x" * max(1, plan.doc_bytes - 120)
    lines: list[bytes] = []
    size = 0
    docs = 0
    while size < target:
        action = json.dumps({"index": {"_id": str(docs)}}).encode()
        source = json.dumps({"n": docs, "host": f"host-{docs % 50}", "message": filler}).encode()
        lines += [action, source]
        size += len(action) + len(source) + 2
        docs += 1
    return b"\n".join(lines) + b"\n", docs


def _bulk(
    gateway_url: str, index: IndexNode, body: bytes, docs: int, plan: GatewayPlan
) -> tuple[list[Figure], dict[str, Any]]:
    headers = {"Content-Type": "application/x-ndjson"}

    def send(client: httpx.Client, base: str, via: str) -> int:
        auth = index.headers() if via == "direct" else {}
        reply = client.post(f"{base}/{BULK_INDEX}/_bulk", content=body, headers={**headers, **auth})
        _ok(reply, f"_bulk ({via})")
        if reply.json().get("errors") is not False:
            raise RuntimeError(f"_bulk ({via}) reported errors: {reply.text[:300]}")
        return len(body)

    timed = _pairs(gateway_url, index.url, plan.bulks, send)
    mb = len(body) / 1_000_000
    rate = {via: mb / statistics.median(s) for via, s in timed.seconds.items()}
    details = {"body_bytes": len(body), "documents": docs, **timed.as_json(), "mb_per_s": rate}
    note = f"{mb:.1f} MB, {docs:,} documents; median of {plan.bulks}"
    return [
        Figure(SECTION, "_bulk throughput, direct", rate["direct"], "MB/s", note=note),
        Figure(SECTION, "_bulk throughput, through the gateway", rate["gateway"], "MB/s", note=note),
        Figure(
            SECTION,
            "_bulk throughput, gateway / direct",
            timed.ratio,
            "x",
            Target(">=", 0.8),
            note=f"median of {plan.bulks} back-to-back pairs",
        ),
    ], details


def _large_reply(
    gateway_url: str, index: IndexNode, direct: httpx.Client, docs: int, plan: GatewayPlan
) -> tuple[list[Figure], dict[str, Any]]:
    query = {"size": min(docs, 10_000), "query": {"match_all": {}}}

    def send(client: httpx.Client, base: str, via: str) -> int:
        auth = index.headers() if via == "direct" else {}
        reply = client.post(f"{base}/{BULK_INDEX}/_search", json=query, headers=auth)
        _ok(reply, f"_search ({via})")
        return len(reply.content)

    _ok(direct.post(f"/{BULK_INDEX}/_refresh"), f"refresh {BULK_INDEX}")
    timed = _pairs(gateway_url, index.url, plan.bulks, send)
    mb = max(timed.sizes) / 1_000_000
    rate = {via: mb / statistics.median(s) for via, s in timed.seconds.items()}
    details = {**timed.as_json(), "mb_per_s": rate}
    return [
        Figure(
            SECTION,
            "large _search reply, gateway / direct",
            timed.ratio,
            "x",
            note=f"{mb:.1f} MB reply; direct {rate['direct']:.0f} MB/s, through {rate['gateway']:.0f} MB/s (medians)",
        )
    ], details


@dataclass
class _Pairs:
    seconds: dict[str, list[float]]
    #: direct time / gateway time of each back-to-back pair (a throughput ratio).
    ratios: list[float]
    sizes: set[int]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    def as_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "pair_ratios": self.ratios, "sizes": sorted(self.sizes)}


def _pairs(gateway_url: str, index_url: str, count: int, send: Callable[[httpx.Client, str, str], int]) -> _Pairs:
    """``count`` timed pairs of the same request, directly and through the gateway, back to back
    (which goes first alternates), after one untimed pair to warm up. The per-pair ratio is the
    figure: load from other work on the machine falls on both halves of a pair alike."""
    seconds: dict[str, list[float]] = {"direct": [], "gateway": []}
    ratios: list[float] = []
    sizes: set[int] = set()
    with httpx.Client(timeout=300) as client:
        for attempt in range(count + 1):
            order = ("direct", "gateway") if attempt % 2 == 0 else ("gateway", "direct")
            took: dict[str, float] = {}
            for via in order:
                started = time.perf_counter()
                sizes.add(send(client, index_url if via == "direct" else gateway_url, via))
                took[via] = time.perf_counter() - started
            if attempt:
                for via, elapsed in took.items():
                    seconds[via].append(elapsed)
                ratios.append(took["direct"] / took["gateway"])
    return _Pairs(seconds, ratios, sizes)


def _ok(reply: httpx.Response, what: str) -> None:
    if reply.status_code >= 300:
        raise RuntimeError(f"{what}: {reply.status_code} {reply.text[:300]}")


# -- command --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = GatewayPlan.quick() if args.quick else GatewayPlan()
    report = Report(meta={"plan": plan.__dict__})
    started = time.perf_counter()
    # No Spark runs here: the in-memory catalog spares the metastore's start.
    service_env = {"ASYNC_QUERY_GATEWAY": "true", "ASYNC_QUERY_LOCAL_CATALOG": "in-memory"}
    with BenchEnv(service_env=service_env) as env:
        assert env.index is not None
        figures, details = run_gateway(env.base_url, env.index, plan)
    report.add(figures)
    report.details[SECTION] = details
    report.meta["duration_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report.as_json(), indent=2, default=str) + "\n")
    print(report.table())
    print(f"\nduration {report.meta['duration_s']} s; JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
