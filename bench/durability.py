"""The embedded index's durability: what its snapshots cost, and what the journal adds to requests.

The index server runs as the service would start it (``EmbeddedIndex``: ``osmem-server`` behind
the journaling proxy). Two service processes (``async-query serve``) share it: one through the
proxy (journaled, as deployed), one straight to ``osmem-server``'s private port (no journal), so
both are measured in the same run, on the same documents, under the same load. Simulated sessions
(``bench.sim``, ``running`` and heart-beating through the proxy, as jobs do) take the POSTs.

For each history size (statements with their result documents, written straight to the index
server, then a compaction so the snapshot holds them), a steady POST load (``--rate`` per second,
alternating between the two services, one client) runs for ``--seconds``:

* **snapshot cost**: CPU time of the snapshot processes and bytes they wrote, per second of the
  window; and per journal byte the compactions absorbed, times the journal's write rate (the
  steady-state figure, which does not depend on where the window cuts the compaction cycle);
* **POST p50** through the journaling service and through the direct one, alternating;
* **GET p50** of a running statement, the same way, and a bare index GET by id through the proxy
  and straight to the server.

Compactions happen once the journal reaches ``--ratio`` of the snapshot (the product's default is
0.5); the bench uses a smaller ratio so that several happen within a window at every history
size. The cost per second scales with ``1 / ratio``: the product's default costs ``ratio / 0.5``
of the figures printed here.

    python -m bench.durability [--quick] [--histories 10000,100000] [--seconds 60] [--rate 100]
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import index_mappings
from async_query.api import BASE
from async_query.embedded.index import EmbeddedIndex, JournalOptions
from bench.env import BenchEnv
from bench.report import Figure, Report, Target
from bench.sim import SimulatedSessions, StandInJobs
from bench.stats import percentile, summary
from query_core.ids import request_index
from query_core.store import Store

log = logging.getLogger(__name__)

SECTION = "durability"
DS = "local"
RESULTS = f"query_execution_result_{DS}"


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...] = (10_000, 100_000)
    seconds: float = 60.0
    #: POSTs per second, over both services.
    rate: float = 100.0
    sessions: int = 8
    compact_ratio: float = 0.02
    compact_min_bytes: int = 64 << 10
    raw_gets: int = 2_000

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            histories=(300, 3_000),
            seconds=5.0,
            rate=50.0,
            sessions=2,
            compact_ratio=0.05,
            compact_min_bytes=8 << 10,
            raw_gets=200,
        )


@dataclass
class Window:
    history: int
    seconds: float = 0.0
    post_journal: list[float] = field(default_factory=list)
    post_direct: list[float] = field(default_factory=list)
    get_journal: list[float] = field(default_factory=list)
    get_direct: list[float] = field(default_factory=list)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)

    def delta(self, section: str, key: str) -> float:
        return float(self.after[section][key]) - float(self.before[section][key])

    def compactions(self) -> list[dict[str, Any]]:
        """The compactions the load made during the window (not those the bench asked for)."""
        recent = self.after["compaction"]["recent"]
        return [c for c in recent if c.get("reason") == "due" and c["at"] >= self.started_at]


# -- the system under test ---------------------------------------------------------------------


class Client:
    """One keep-alive connection, the leanest way to time a request from Python."""

    def __init__(self, url: str, authorization: str = "") -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
        self.headers = {"Content-Type": "application/json"}
        if authorization:
            self.headers["Authorization"] = authorization

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes, float]:
        data = None if body is None else json.dumps(body).encode()
        began = time.perf_counter()
        self.conn.request(method, path, body=data, headers=self.headers)
        reply = self.conn.getresponse()
        payload = reply.read()
        return reply.status, payload, (time.perf_counter() - began) * 1000

    def close(self) -> None:
        self.conn.close()


def start_service(index_url: str, data_dir: Path, auth: tuple[str, str] | None = None) -> BenchEnv:
    """``async-query serve`` on ``index_url`` (the bench environment's service half only), with
    the index's credential if it wants one (in the service's environment)."""
    # No Spark here: a job launched by mistake (a simulated session taken for dead) fails at once;
    # and no metastore (a JVM) for a catalog no query uses.
    service_env = {
        "ASYNC_QUERY_INACTIVITY_LIMIT_MS": "900000",
        "ASYNC_QUERY_SPARK_SUBMIT": "/bin/false",
        "ASYNC_QUERY_LOCAL_CATALOG": "in-memory",
    }
    if auth is not None:
        service_env.update(ASYNC_QUERY_OPENSEARCH_USERNAME=auth[0], ASYNC_QUERY_OPENSEARCH_PASSWORD=auth[1])
    env = BenchEnv(service_env=service_env)
    env.data_dir = data_dir  # its service's data dir is ``<data_dir>/service``
    data_dir.mkdir(parents=True, exist_ok=True)
    env.index_url = index_url
    env.start_service()
    return env


# -- history ---------------------------------------------------------------------------------


def seed_history(url: str, start: int, stop: int, batch: int = 2_000, authorization: str = "") -> None:
    """Statements ``start..stop`` (finished, in dead sessions of 100) and their results, written
    through the journal, as every write is (the compaction after takes them into the snapshot)."""
    client = Client(url, authorization)
    rng = random.Random(start)
    try:
        for first in range(start, stop, batch):
            lines: list[str] = []
            for n in range(first, min(first + batch, stop)):
                lines += _history_lines(n, rng)
            status, body, _ = _bulk(client, lines)
            if status != 200 or json.loads(body).get("errors"):
                raise RuntimeError(f"seeding the history failed: {status} {body[:300]!r}")
    finally:
        client.close()


def _history_lines(n: int, rng: random.Random) -> list[str]:
    query_id, session_id = f"hist{n:09d}", f"histsession{n // 100:07d}"
    submitted = 1_700_000_000_000 + n * 1000
    query = (
        f"SELECT item, count(*) AS n FROM local.default.sales_{n % 50} WHERE id > {rng.randrange(10**6)} GROUP BY item"
    )
    statement = {
        "version": "1.0",
        "type": "statement",
        "state": "success",
        "statementId": query_id,
        "queryId": query_id,
        "sessionId": session_id,
        "lang": "sql",
        "query": query,
        "dataSourceName": DS,
        "applicationId": "local",
        "jobId": f"local-{session_id}",
        "submitTime": submitted,
        "error": "",
    }
    result = {
        "queryId": query_id,
        "status": "SUCCESS",
        "result": [f"{{'item':'tea','n':{rng.randrange(1000)}}}", f"{{'item':'cake','n':{rng.randrange(1000)}}}"],
        "schema": ["{'column_name':'item','data_type':'string'}", "{'column_name':'n','data_type':'long'}"],
        "jobRunId": f"local-{session_id}",
        "applicationId": "local",
        "dataSourceName": DS,
        "jobType": "interactive",
        "sessionId": session_id,
        "queryText": query,
        "updateTime": submitted + 120,
        "queryRunTime": 120,
        "error": "",
    }
    return [
        json.dumps({"index": {"_index": request_index(DS), "_id": query_id}}),
        json.dumps(statement),
        json.dumps({"index": {"_index": RESULTS, "_id": query_id}}),
        json.dumps(result),
    ]


def _bulk(client: Client, lines: list[str]) -> tuple[int, bytes, float]:
    data = ("\n".join(lines) + "\n").encode()
    began = time.perf_counter()
    client.conn.request("POST", "/_bulk", body=data, headers={"Content-Type": "application/x-ndjson"})
    reply = client.conn.getresponse()
    return reply.status, reply.read(), (time.perf_counter() - began) * 1000


# -- the load ----------------------------------------------------------------------------------


def steady_load(
    journaled: str, direct: str, sim: SimulatedSessions, embedded: EmbeddedIndex, plan: Plan, history: int
) -> Window:
    """POSTs at ``plan.rate`` per second, alternating between the services, each followed every
    fourth time by a GET of a running statement through the same service."""
    window = Window(history, before=embedded.stats())
    clients = [Client(journaled), Client(direct)]
    posts = (window.post_journal, window.post_direct)
    gets = (window.get_journal, window.get_direct)
    interval = 1.0 / plan.rate
    began = time.perf_counter()
    due = began
    n = 0
    try:
        while (now := time.perf_counter()) - began < plan.seconds:
            if now < due:
                time.sleep(due - now)  # pacing the load, not waiting for a result
            due += interval
            side, session = n % 2, sim.sessions[(n // 2) % len(sim.sessions)]
            body = {"datasource": DS, "lang": "sql", "query": f"SELECT {n}", "sessionId": session.session_id}
            status, reply, ms = clients[side].call("POST", BASE, body)
            if status != 201 or json.loads(reply).get("sessionId") != session.session_id:
                raise RuntimeError(f"POST answered {status} {reply[:200]!r}")
            posts[side].append(ms)
            if n % 4 < 2:
                status, reply, ms = clients[side].call("GET", f"{BASE}/{session.statement_id}")
                if status != 200:
                    raise RuntimeError(f"GET answered {status} {reply[:200]!r}")
                gets[side].append(ms)
            n += 1
    finally:
        for client in clients:
            client.close()
    window.seconds = time.perf_counter() - began
    window.after = embedded.stats()
    return window


def raw_gets(embedded: EmbeddedIndex, doc_id: str, count: int) -> tuple[list[float], list[float]]:
    """A bare real-time GET by id through the proxy and straight to the server, alternating."""
    proxied, direct = Client(embedded.url, embedded.credential.header()), Client(embedded.private_url)
    through: list[float] = []
    straight: list[float] = []
    path = f"/{request_index(DS)}/_doc/{doc_id}"
    try:
        for _ in range(count):
            through.append(proxied.call("GET", path)[2])
            straight.append(direct.call("GET", path)[2])
    finally:
        proxied.close()
        direct.close()
    return through, straight


# -- figures -----------------------------------------------------------------------------------


def cost_figures(window: Window, plan: Plan) -> tuple[list[Figure], dict[str, Any]]:
    seconds = window.seconds
    made = window.compactions()
    compactions = len(made)
    cpu_s = sum(float(c["cpu_s"]) for c in made)
    written = sum(float(c["bytes_written"]) for c in made)
    absorbed = sum(float(c["absorbed_bytes"]) for c in made)
    journal_rate = window.delta("journal", "bytes_appended") / seconds
    per_byte_cpu = cpu_s / absorbed if absorbed else float("nan")
    per_byte_written = written / absorbed if absorbed else float("nan")
    last = window.after["compaction"]["last"] or {}
    default_ratio = JournalOptions().compact_ratio
    label = f"{window.history:,} statements"
    note = f"{compactions} compactions in {seconds:.0f} s, ratio {plan.compact_ratio:g}"
    figures = [
        Figure(SECTION, f"snapshot CPU, {label}", per_byte_cpu * journal_rate * 1000, "ms/s", note=note),
        Figure(SECTION, f"snapshot bytes written, {label}", per_byte_written * journal_rate / 1e6, "MB/s"),
        Figure(
            SECTION,
            f"  same, measured over the window, {label}",
            cpu_s * 1000 / seconds,
            "ms/s",
            note=f"{written / seconds / 1e6:.2f} MB/s",
        ),
        Figure(
            SECTION,
            f"journal written, {label}",
            journal_rate / 1e6,
            "MB/s",
            note=f"snapshot {window.after['snapshot']['snapshot_bytes'] / 1e6:.1f} MB",
        ),
        Figure(
            SECTION,
            f"  same at the product's ratio ({default_ratio:g}), {label}",
            per_byte_cpu * journal_rate * 1000 * plan.compact_ratio / default_ratio,
            "ms/s",
            note=f"{per_byte_written * journal_rate * plan.compact_ratio / default_ratio / 1e6:.3f} MB/s",
        ),
        Figure(
            SECTION,
            f"previous design (changed indexes whole every 2 s), {label}",
            float(last.get("cpu_s", 0.0)) * 1000 / 2,
            "ms/s",
            note=f"{float(last.get('bytes_written', 0)) / 2 / 1e6:.1f} MB/s; one snapshot's cost / 2 s",
        ),
    ]
    details = {
        "seconds": round(seconds, 2),
        "compactions": compactions,
        "snapshot_cpu_s": round(cpu_s, 3),
        "snapshot_bytes_written": written,
        "journal_bytes_absorbed": absorbed,
        "journal_bytes_per_s": round(journal_rate),
        "max_pause_ms": window.after["compaction"]["max_pause_ms"],
        "snapshot_bytes": window.after["snapshot"]["snapshot_bytes"],
        "last_compaction": last,
    }
    return figures, details


def ratio_figures(costs: list[Figure]) -> list[Figure]:
    """The largest history's cost against the smallest's, per kind (target: within 1.5x)."""
    figures = []
    for kind, unit in (("snapshot CPU", "ms/s"), ("snapshot bytes written", "MB/s")):
        values = [f.value for f in costs if f.name.startswith(kind) and f.value is not None]
        if len(values) >= 2 and min(values) > 0:
            ratio = max(values) / min(values)
            figures.append(
                Figure(
                    SECTION,
                    f"{kind}: largest / smallest history",
                    ratio,
                    "x",
                    Target("<=", 1.5),
                    note=f"{unit}: " + ", ".join(f"{v:.3g}" for v in values),
                )
            )
    return figures


def latency_figures(windows: list[Window], raw: tuple[list[float], list[float]]) -> list[Figure]:
    journal = [ms for w in windows for ms in w.post_journal]
    direct = [ms for w in windows for ms in w.post_direct]
    get_journal = [ms for w in windows for ms in w.get_journal]
    get_direct = [ms for w in windows for ms in w.get_direct]
    added = percentile(journal, 50) - percentile(direct, 50)
    commits = sum(w.delta("journal", "commits") for w in windows)
    commit_ms = sum(w.delta("journal", "commit_seconds") for w in windows) * 1000 / commits if commits else float("nan")
    records = sum(w.delta("journal", "records") for w in windows)
    return [
        Figure(
            SECTION,
            "journal commit (synchronous write), mean",
            commit_ms,
            "ms",
            note=f"{records / commits if commits else 0:.2f} records per commit; the disk's, shared",
        ),
        Figure(SECTION, "POST p50, journaled", percentile(journal, 50), "ms", note=f"n={len(journal)}"),
        Figure(SECTION, "POST p50, no journal (same run)", percentile(direct, 50), "ms", note=f"n={len(direct)}"),
        Figure(SECTION, "POST p50 added by the journal", added, "ms", Target("<", 2)),
        Figure(
            SECTION,
            "POST p99, journaled / no journal",
            percentile(journal, 99),
            "ms",
            note=f"{percentile(direct, 99):.2f} ms without",
        ),
        Figure(
            SECTION,
            "GET running p50, journaled / no journal",
            percentile(get_journal, 50),
            "ms",
            note=f"{percentile(get_direct, 50):.2f} ms without; n={len(get_journal)}",
        ),
        Figure(
            SECTION,
            "index GET by id p50, through the proxy",
            percentile(raw[0], 50),
            "ms",
            note=f"{percentile(raw[1], 50):.3f} ms straight to osmem-server; n={len(raw[0])}",
        ),
    ]


# -- the run -----------------------------------------------------------------------------------


def run_durability(plan: Plan, workdir: Path) -> tuple[list[Figure], dict[str, Any]]:
    # The bench reads osmem-server directly too (its private URL): on the host's network.
    options = JournalOptions(
        compact_ratio=plan.compact_ratio, compact_min_bytes=plan.compact_min_bytes, isolate_network=False
    )
    embedded = EmbeddedIndex.start(workdir / "index", options=options)
    store = Store.connect(embedded.config())
    plugins: list[BenchEnv] = []
    details: dict[str, Any] = {"plan": plan.__dict__}
    figures: list[Figure] = []
    try:
        store.admin.create_index(request_index(DS), index_mappings.load("request_index"))
        store.admin.create_index(RESULTS, index_mappings.load("result_index"))
        plugins = [
            start_service(embedded.url, workdir / "journaled", embedded.auth),
            start_service(embedded.private_url, workdir / "direct"),
        ]
        job_ids = [f"bench-durability-{i}" for i in range(plan.sessions)]
        with (
            StandInJobs(workdir / "journaled" / "service" / "jobs", job_ids),
            StandInJobs(workdir / "direct" / "service" / "jobs", job_ids),
            SimulatedSessions(store, DS, plan.sessions, job_ids=job_ids) as sim,
        ):
            sim.create()
            sim.start_in_process(writers=2)
            windows = _windows(plan, embedded, sim, plugins)
        costs: list[Figure] = []
        for window in windows:
            found, details[f"history_{window.history}"] = cost_figures(window, plan)
            costs += found[:2]
            figures += found
        figures += ratio_figures(costs)
        raw = raw_gets(embedded, sim.sessions[0].statement_id, plan.raw_gets)
        figures += latency_figures(windows, raw)
        details["post_journaled"] = summary([ms for w in windows for ms in w.post_journal])
        details["post_direct"] = summary([ms for w in windows for ms in w.post_direct])
        details["index_get_proxy"], details["index_get_direct"] = summary(raw[0]), summary(raw[1])
        for env in plugins:
            env.stop_service()
        store.close()
        figures.append(restart_figure(embedded, options, workdir / "index", plan.histories[-1]))
    finally:
        for env in plugins:
            env.stop_service()
        store.close()
        embedded.close()
    return figures, details


def restart_figure(embedded: EmbeddedIndex, options: JournalOptions, directory: Path, history: int) -> Figure:
    """Stop the index server and start it again on its directory: snapshot load and replay."""
    snapshot = embedded.stats()["snapshot"]["snapshot_bytes"]
    embedded.close()
    began = time.perf_counter()
    again = EmbeddedIndex.start(directory, options=options)
    seconds = time.perf_counter() - began
    replayed = again.replayed
    again.close()
    return Figure(
        SECTION,
        f"restart with {history:,} statements",
        seconds,
        "s",
        note=f"snapshot {snapshot / 1e6:.0f} MB loaded, {replayed['bytes'] / 1e6:.2f} MB of journal replayed",
    )


def _windows(plan: Plan, embedded: EmbeddedIndex, sim: SimulatedSessions, plugins: list[BenchEnv]) -> list[Window]:
    windows = []
    seeded = 0
    for history in plan.histories:
        began = time.monotonic()
        seed_history(embedded.url, seeded, history, authorization=embedded.credential.header())
        seeded = history
        embedded.compact()
        print(
            f"   history of {history:,} statements seeded and compacted in {time.monotonic() - began:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        windows.append(steady_load(plugins[0].base_url, plugins[1].base_url, sim, embedded, plan, history))
    return windows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small histories, short windows (a smoke run)")
    parser.add_argument("--histories", help="comma-separated statement counts (default 10000,100000)")
    parser.add_argument("--seconds", type=float, help="load window per history (default 60)")
    parser.add_argument("--rate", type=float, help="POSTs per second over both services (default 100)")
    parser.add_argument("--ratio", type=float, help="compaction ratio (default 0.02; the product's is 0.5)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the index directory goes (default: a temporary directory; /dev/shm shows the cost without the disk)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    plan = Plan.quick() if args.quick else Plan()
    if args.histories:
        plan = replace(plan, histories=tuple(int(h) for h in args.histories.split(",")))
    if args.seconds:
        plan = replace(plan, seconds=args.seconds)
    if args.rate:
        plan = replace(plan, rate=args.rate)
    if args.ratio:
        plan = replace(plan, compact_ratio=args.ratio)
    report = Report(meta={"section": SECTION, "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    with tempfile.TemporaryDirectory(prefix="aq-durability-", dir=args.workdir) as tmp:
        figures, details = run_durability(plan, Path(tmp))
    report.add(figures)
    report.details[SECTION] = details
    print(report.table())
    if args.out:
        args.out.write_text(json.dumps(report.as_json(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
