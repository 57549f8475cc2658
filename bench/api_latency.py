"""POST and GET latency and GET throughput over loopback HTTP, without Spark.

Statements are POSTed into simulated live sessions (:mod:`bench.sim`), so a POST does exactly what
it does in a warm session (create the statement, append its id to the session document) and no job
is launched. GETs ask for the sessions' running statements, the replies clients poll for (two
real-time reads by id: statement and session, and a ``progress`` object in the reply).

The floor: the same statements read straight from the index by id (``GET /<index>/_doc/<id>``,
the request the service's hot path makes), by the same load generator with as many clients,
right after each of the service's GET runs. Each GET figure is also given as a multiple of it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.httpload import LoadResult, run_load
from bench.index_node import index_headers
from bench.report import Figure, Target
from bench.sim import SimulatedSessions, client_of
from bench.stats import percentile
from query_core.ids import request_index
from query_core.models import ColumnSchema, LosslessResult, ResultDoc
from query_core.states import StatementState
from query_core.store import Store

log = logging.getLogger(__name__)

BASE = "/_plugins/_async_query"
SECTION = "REST API"


@dataclass(frozen=True)
class ApiPlan:
    posts: int = 500
    get_seconds: float = 8.0
    warmup_seconds: float = 1.0
    concurrency: tuple[int, ...] = (1, 8, 32)
    sessions: int = 32

    @classmethod
    def quick(cls) -> ApiPlan:
        return cls(posts=50, get_seconds=1.5, warmup_seconds=0.3, sessions=8)


class UnexpectedSessionError(RuntimeError):
    """A POST into a live simulated session came back with another session: a job was launched."""


def run_api_latency(
    base_url: str, store: Store, datasource: str, result_index: str, plan: ApiPlan, jobs_dir: Path | None = None
) -> tuple[list[Figure], dict[str, Any]]:
    """``jobs_dir``: the service's local launcher's, where the simulated jobs are answered running."""
    details: dict[str, Any] = {"plan": plan.__dict__}
    with SimulatedSessions(store, datasource, plan.sessions, jobs_dir=jobs_dir) as sim:
        sim.create()
        sim.start(writers=2)
        post = _posts(base_url, datasource, sim, plan.posts)
        details["post"] = post.as_json()
        write_floor = bare_writes(store, plan.posts)
        if write_floor is not None:
            details["bare_create_by_id"] = write_floor.as_json()
        running_ids = [s.statement_id for s in sim.sessions]
        gets: dict[int, LoadResult] = {}
        floor: dict[int, LoadResult] = {}
        for clients in plan.concurrency:
            gets[clients] = run_load(
                base_url,
                lambda c, i: ("GET", f"{BASE}/{running_ids[(c * 7 + i) % len(running_ids)]}", None),
                clients,
                duration=plan.get_seconds,
                warmup=plan.warmup_seconds,
            )
            _check_ok(gets[clients], f"GET with {clients} clients")
            details[f"get_running_{clients}_clients"] = gets[clients].as_json()
            bare = bare_gets(store, datasource, running_ids, clients, plan.get_seconds, plan.warmup_seconds)
            if bare is not None:
                floor[clients] = bare
                details[f"bare_get_by_id_{clients}_clients"] = bare.as_json()
        finished_id = _finish_one(store, datasource, result_index, sim.sessions[0].statement_id)
        finished: dict[int, LoadResult] = {}
        for clients in sorted({8, max(plan.concurrency)}):
            finished[clients] = run_load(
                base_url,
                lambda c, i: ("GET", f"{BASE}/{finished_id}", None),
                clients,
                duration=plan.get_seconds,
                warmup=plan.warmup_seconds,
            )
            _check_ok(finished[clients], f"GET of a finished statement, {clients} clients")
            details[f"get_finished_{clients}_clients"] = finished[clients].as_json()
        details["simulated_heartbeats"] = {"writes": sim.stats.writes, "failures": sim.stats.failures}

    ms = "ms"
    figures = [
        Figure(SECTION, "POST p50 (1 client)", percentile(post.latencies_ms, 50), ms, Target("<=", 10)),
        Figure(SECTION, "POST p99 (1 client)", percentile(post.latencies_ms, 99), ms, note=f"n={post.count}"),
    ]
    if write_floor is not None:
        floor_p50 = percentile(write_floor.latencies_ms, 50)
        figures += [
            Figure(
                SECTION,
                "bare durable write on the index (create by id), 1 client: p50",
                floor_p50,
                ms,
                note="the floor of a write: one translog sync",
            ),
            Figure(
                SECTION,
                "POST p50 / bare durable write p50",
                percentile(post.latencies_ms, 50) / floor_p50 if floor_p50 else None,
                "x",
                note="a POST into a session: its statement and its user's usage, two durable writes",
            ),
        ]
    for clients, res in gets.items():
        label = f"GET running, {clients} client{'s' if clients > 1 else ''}"
        figures += [
            Figure(
                SECTION, f"{label}: p50", percentile(res.latencies_ms, 50), ms, Target("<=", 2) if clients == 1 else None
            ),
            Figure(SECTION, f"{label}: p99", percentile(res.latencies_ms, 99), ms, note=f"n={res.count}"),
            Figure(
                SECTION,
                f"{label}: throughput",
                res.throughput,
                "GET/s",
                Target(">=", 1500) if clients == max(gets) else None,
            ),
        ]
    for clients, res in finished.items():
        label = f"GET finished (reply cache), {clients} clients"
        figures += [
            Figure(SECTION, f"{label}: p50", percentile(res.latencies_ms, 50), ms),
            Figure(SECTION, f"{label}: throughput", res.throughput, "GET/s"),
        ]
    figures += floor_figures(gets, floor)
    most = max(plan.concurrency)
    if most in gets and most in finished and finished[most].throughput:
        figures.append(
            Figure(
                SECTION,
                f"GET/s running / GET/s finished, {most} clients",
                gets[most].throughput / finished[most].throughput,
                "",
                Target(">=", 0.6),
                note="what a running statement's real-time read costs over a cached reply",
            )
        )
    return figures, details


def bare_gets(
    store: Store, datasource: str, ids: list[str], clients: int, seconds: float, warmup: float
) -> LoadResult | None:
    """``ids`` read straight from the index by id, ``clients`` at a time, for ``seconds``: the
    floor of a GET. None where the bench cannot sign a raw request (SigV4)."""
    headers = index_headers(client_of(store).cfg)
    if headers is None:
        return None
    path = f"/{request_index(datasource)}/_doc/"
    result = run_load(
        client_of(store).cfg.url,
        lambda c, i: ("GET", path + ids[(c * 7 + i) % len(ids)], None),
        clients,
        duration=seconds,
        warmup=warmup,
        headers=headers,
    )
    _check_ok(result, f"bare GET by id, {clients} clients")
    return result


#: Where the write floor's documents go (an index of the bench's own, deleted after).
WRITE_FLOOR_INDEX = "bench-write-floor"


def bare_writes(store: Store, count: int) -> LoadResult | None:
    """``count`` documents of a statement's size created by id, one at a time, straight on the
    index (each acknowledged once its translog is synced): the floor of a write. None where the
    bench cannot sign a raw request (SigV4)."""
    cfg = client_of(store).cfg
    headers = index_headers(cfg)
    if headers is None:
        return None
    body = json.dumps({"type": "statement", "state": "waiting", "query": "SELECT 1", "pad": "x" * 300}).encode()
    try:
        result = run_load(
            cfg.url,
            lambda c, i: ("PUT", f"/{WRITE_FLOOR_INDEX}/_create/{c}-{i}", body),
            1,
            count=count,
            headers=headers,
        )
    finally:
        store.admin.delete_index(WRITE_FLOOR_INDEX)
    _check_ok(result, "bare create by id", expect=201)
    return result


def floor_figures(gets: dict[int, LoadResult], floor: dict[int, LoadResult]) -> list[Figure]:
    """The floor's figures, and each GET figure as a multiple of the floor's at as many clients."""
    figures: list[Figure] = []
    for clients, bare in floor.items():
        label = f"bare GET by id on the index, {clients} client{'s' if clients > 1 else ''}"
        figures += [
            Figure(SECTION, f"{label}: p50", percentile(bare.latencies_ms, 50), "ms", note="the floor"),
            Figure(SECTION, f"{label}: throughput", bare.throughput, "GET/s", note=f"n={bare.count}"),
        ]
    for clients, bare in floor.items():
        res = gets[clients]
        label = f"GET running, {clients} client{'s' if clients > 1 else ''}"
        p50 = percentile(bare.latencies_ms, 50)
        figures += [
            Figure(SECTION, f"{label}: p50 / bare GET by id p50", percentile(res.latencies_ms, 50) / p50, "x"),
            Figure(
                SECTION,
                f"{label}: GET/s / bare GET by id GET/s",
                res.throughput / bare.throughput if bare.throughput else None,
                "x",
            ),
        ]
    return figures


def _posts(base_url: str, datasource: str, sim: SimulatedSessions, count: int) -> LoadResult:
    """``count`` POSTs from one client, round-robin over the simulated sessions."""
    bodies = [
        json.dumps(
            {"datasource": datasource, "lang": "sql", "query": f"SELECT {i}", "sessionId": s.session_id}
        ).encode()
        for i, s in enumerate(sim.sessions)
    ]
    known = {s.session_id for s in sim.sessions}
    strays: list[str] = []

    def check(client: int, status: int, body: bytes) -> None:
        if status == 201 and json.loads(body).get("sessionId") not in known:
            strays.append(json.loads(body).get("sessionId", ""))

    result = run_load(base_url, lambda c, i: ("POST", BASE, bodies[i % len(bodies)]), 1, count=count, on_reply=check)
    _check_ok(result, "POST", expect=201)
    if strays:
        # The service judged a simulated session dead and started a job for a new one.
        raise UnexpectedSessionError(f"{len(strays)} POSTs were given a new session, e.g. {strays[0]}")
    return result


def _check_ok(result: LoadResult, what: str, expect: int = 200) -> None:
    bad = {code: n for code, n in result.statuses.items() if code != expect}
    if bad or result.errors:
        sample = {code: result.samples.get(code, b"")[:300].decode(errors="replace") for code in bad}
        raise RuntimeError(f"{what}: unexpected replies {bad}, {result.errors} connection errors: {sample}")


def _finish_one(store: Store, datasource: str, result_index: str, statement_id: str) -> str:
    """Move one statement to success with a small result, as the job would."""
    statement = store.statements.get(datasource, statement_id)
    if statement is None:
        raise RuntimeError(f"statement {statement_id} disappeared")
    rows = [[i, f"row {i}"] for i in range(10)]
    lossless = LosslessResult(
        schema=[ColumnSchema(name="id", type="integer"), ColumnSchema(name="name", type="string")],
        datarows=json.dumps(rows),
        total=len(rows),
    )
    result = ResultDoc(query_id=statement_id, status="SUCCESS", lossless=lossless)
    store.statements.settle(statement, StatementState.SUCCESS, result=(result_index, result))
    return statement_id
