"""The warm pool: the first query of a new session with the pool and without, same run, and what
one idle pool job costs.

``python -m bench.pool [--quick] [--out PATH]`` (quick: 3 sessions each way instead of 10): the service runs in this process
(its REST API on a uvicorn thread) on the embedded default's parts: a real OpenSearch node (or
``OPENSEARCH_URL``), a Hive Metastore as the catalog, local ``spark-submit`` jobs on the default
master with the product's default JVM options and class archive. Run it under the Spark lock.

1. One session is opened and left to end, uncounted: the jobs' class archive is recorded then, as
   on any deployment after its first job.
2. **Without the pool** (size 0): N new sessions one after another, each a ``SELECT 1``; the time
   is from just before the POST to the GET answering ``SUCCESS`` with ``[[1]]`` (GET polled every
   5 ms). Each session ends after a short inactivity limit, and the next starts once its job is
   gone, so every measure starts on a machine as quiet as the first.
3. **With the pool** (size 1, its keeper running): the same N sessions, each started once the pool
   has its idle job again (it refills as each job is claimed); the time the refill took (claim to
   the next job idle) is reported too. Each session is checked to have claimed the pool's job.
4. **With the pool, the job quiet** (docs/job.md, "The loop"): 3 more sessions, each started once
   the pool's idle job has been idle past ``quiet_loop_after_ms`` (it then reads its slot every
   quiet period, as a pool job waiting minutes for its session does).
5. **One idle pool job**: its processes' resident memory (the driver's JVM and its Python
   process, ``VmRSS``, the largest of 20 samples over 10 s) and the CPU they use while idle, just
   idle and past the quiet threshold.

Targets: with the pool, p50 under 1 s and at least 5x faster than without; p99 under 2 s.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from async_query.api import create_app
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.embedded.metastore import Metastore
from async_query.launcher.local import LocalLauncher, catalog_settings
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from bench.emr import serve_app
from bench.index_node import index_node
from bench.report import Figure, Target, run_standalone
from bench.results import JobProcesses, _status_kb
from bench.stats import percentile, summary
from bench.streaming import _kill_leftover_jobs
from query_core.states import PoolJobState, SessionState
from query_core.store import Store, quiet_driver_logs
from query_core.store.pool import slot_id
from tests.faults.procs import group_members, job_pid

log = logging.getLogger(__name__)

SECTION = "warm pool (local Spark)"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "pool.json"
BASE = "/_plugins/_async_query"
DS = "local"
SESSIONS = 10
#: Deadlines (seconds): a first query, a pool job's refill, a session's end.
ANSWER_S = 240.0
REFILL_S = 240.0
END_S = 120.0
POLL_S = 0.005
#: Sessions end this long after their query, so that the next one starts on a quiet machine.
INACTIVITY_MS = 2_000
#: Sessions claiming a pool job idle past the quiet threshold, and how far past it they start.
QUIET_SESSIONS = 3
QUIET_MARGIN_S = 0.5
RSS_SAMPLES = 20
RSS_EVERY_S = 0.5
MB = 1024 * 1024


class BenchError(RuntimeError):
    """The bench cannot go on: says why."""


@dataclass
class PoolBench:
    plugin: Plugin
    base_url: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=60)

    # -- one session's first query ------------------------------------------------------------

    def first_query(self) -> tuple[float, str]:
        """A new session's ``SELECT 1``: seconds from the POST to its answer, and the session."""
        began = time.perf_counter()
        reply = self.http.post(BASE, json={"datasource": DS, "lang": "sql", "query": "SELECT 1"})
        if reply.status_code != 201:
            raise BenchError(f"POST answered {reply.status_code}: {reply.text[:300]}")
        query_id, session_id = reply.json()["queryId"], reply.json()["sessionId"]
        deadline = began + ANSWER_S
        while True:
            body = self.http.get(f"{BASE}/{query_id}").json()
            if body["status"] == "SUCCESS" and body.get("datarows") == [[1]]:
                return time.perf_counter() - began, session_id
            if body["status"] in ("FAILED", "CANCELLED", "TIMEOUT"):
                raise BenchError(f"SELECT 1 ended {body['status']}: {body.get('error', '')[:300]}")
            if time.perf_counter() > deadline:
                raise BenchError(f"SELECT 1 not answered within {ANSWER_S:g} s")
            time.sleep(POLL_S)

    def wait_ended(self, session_id: str) -> None:
        """The session ended (its inactivity limit) and its job's processes gone."""
        deadline = time.monotonic() + END_S
        session = self.plugin.store.sessions.get(DS, session_id)
        while session is None or session.doc.state not in (SessionState.DEAD, SessionState.FAIL):
            if time.monotonic() > deadline:
                raise BenchError(f"session {session_id} did not end within {END_S:g} s")
            time.sleep(0.1)
            session = self.plugin.store.sessions.get(DS, session_id)
        pid = job_pid(self.plugin.settings.data_dir, session.doc.job_id)
        while group_members(pid):
            if time.monotonic() > deadline:
                raise BenchError(f"job {session.doc.job_id} outlived its session by {END_S:g} s")
            time.sleep(0.1)

    # -- the pool -------------------------------------------------------------------------------

    @property
    def slot(self) -> str:
        pool = self.plugin.pools.of(self.plugin.datasources.get(DS))
        if pool is None:
            raise BenchError("the datasource has no pool")
        return slot_id(pool.key, 0)

    def idle_job(self, not_one_of: set[str]) -> str:
        deadline = time.monotonic() + REFILL_S
        while True:
            slot = self.plugin.store.pool.slot(self.slot)
            if slot is not None and slot.doc.state == PoolJobState.IDLE and slot.doc.job_id not in not_one_of:
                return slot.doc.job_id
            if time.monotonic() > deadline:
                raise BenchError(f"the pool had no idle job within {REFILL_S:g} s")
            time.sleep(0.05)

    # -- the runs -------------------------------------------------------------------------------

    def cold(self, count: int) -> list[float]:
        times = []
        for _ in range(count):
            took, session_id = self.first_query()
            times.append(took)
            self.wait_ended(session_id)
        return times

    def pooled(self, count: int) -> tuple[list[float], list[float]]:
        """The first query of ``count`` sessions, each claiming the pool's idle job, and how long
        each refill took (from the claim to the next job idle)."""
        times: list[float] = []
        refills: list[float] = []
        claimed: set[str] = set()
        job = self.idle_job(claimed)
        for n in range(count):
            took, session_id = self.first_query()
            claimed_at = time.perf_counter() - took
            session = self.plugin.store.sessions.get(DS, session_id)
            if session is None or session.doc.job_id != job or not session.doc.pool_slot:
                raise BenchError(f"session {n + 1} did not claim the pool's idle job {job}")
            times.append(took)
            claimed.add(job)
            job = self.idle_job(claimed)
            refills.append(time.perf_counter() - claimed_at)
            self.wait_ended(session_id)
        return times, refills

    def quiet_for(self) -> float:
        """Seconds after which an idle job reads its slot every quiet period, and a margin."""
        return self.plugin.settings.quiet_loop_after_ms / 1000 + QUIET_MARGIN_S

    def pooled_quiet(self, count: int) -> list[float]:
        """The first query of ``count`` sessions, each claiming the pool's job once it has been
        idle past the quiet threshold."""
        times: list[float] = []
        claimed: set[str] = set()
        for n in range(count):
            job = self.idle_job(claimed)
            time.sleep(self.quiet_for())  # the job's own clock: idle since it announced itself
            took, session_id = self.first_query()
            session = self.plugin.store.sessions.get(DS, session_id)
            if session is None or session.doc.job_id != job or not session.doc.pool_slot:
                raise BenchError(f"quiet session {n + 1} did not claim the pool's idle job {job}")
            times.append(took)
            claimed.add(job)
            self.wait_ended(session_id)
        return times

    def idle_cost(self, job_id: str) -> dict[str, float]:
        """An idle pool job's resident memory (largest sample) and CPU use (share of one core)."""
        jvm = job_pid(self.plugin.settings.data_dir, job_id)
        procs = JobProcesses.of(jvm)
        pids = [p for p in (procs.jvm, procs.python, *procs.workers) if p]
        cpu_before, began = _cpu_ticks(pids), time.perf_counter()
        peak = jvm_peak = python_peak = 0
        for _ in range(RSS_SAMPLES):
            jvm_rss, python_rss = _status_kb(procs.jvm, "VmRSS") * 1024, _status_kb(procs.python, "VmRSS") * 1024
            workers = sum(_status_kb(p, "VmRSS") for p in procs.workers) * 1024
            jvm_peak, python_peak = max(jvm_peak, jvm_rss), max(python_peak, python_rss)
            peak = max(peak, jvm_rss + python_rss + workers)
            time.sleep(RSS_EVERY_S)
        elapsed = time.perf_counter() - began
        cpu = (_cpu_ticks(pids) - cpu_before) / os.sysconf("SC_CLK_TCK") / elapsed
        return {
            "rss_mb": round(peak / MB, 1),
            "jvm_rss_mb": round(jvm_peak / MB, 1),
            "python_rss_mb": round(python_peak / MB, 1),
            "cpu_share": round(cpu, 4),
        }

    def run(self, count: int) -> None:
        log.warning("opening a first session, uncounted (the class archive is recorded)")
        _, first = self.first_query()
        self.wait_ended(first)
        log.warning("%d sessions without the pool", count)
        cold = self.cold(count)
        log.warning("%d sessions with the pool", count)
        self.plugin.pool_keeper.start()
        warm, refills = self.pooled(count)
        log.warning("%d sessions with the pool's job quiet", QUIET_SESSIONS)
        quiet = self.pooled_quiet(QUIET_SESSIONS)
        job = self.idle_job(set())
        idle = self.idle_cost(job)
        time.sleep(self.quiet_for())
        idle_quiet = self.idle_cost(job)
        self.report(cold, warm, refills, idle)
        self.report_quiet(quiet, idle_quiet)

    def report_quiet(self, quiet: list[float], idle: dict[str, float]) -> None:
        self.details.update(pooled_quiet_samples_s=[round(t, 3) for t in quiet], idle_job_quiet=idle)
        self.figures += [
            Figure(
                SECTION,
                "first query of a new session, pool job quiet: p50",
                round(percentile(quiet, 50), 3),
                "s",
                Target("<", 1),
                f"n={len(quiet)}, idle past the quiet threshold",
            ),
            Figure(SECTION, "one idle pool job, quiet: CPU", round(idle["cpu_share"] * 100, 2), "% of a core"),
        ]

    def report(self, cold: list[float], warm: list[float], refills: list[float], idle: dict[str, float]) -> None:
        cold_ms, warm_ms = [t * 1000 for t in cold], [t * 1000 for t in warm]
        self.details.update(
            cold_ms=summary(cold_ms),
            pooled_ms=summary(warm_ms),
            refill_ms=summary([t * 1000 for t in refills]),
            cold_samples_s=[round(t, 3) for t in cold],
            pooled_samples_s=[round(t, 3) for t in warm],
            idle_job=idle,
        )
        n = f"n={len(warm)}"
        p50_cold, p50_warm = percentile(cold, 50), percentile(warm, 50)
        self.figures += [
            Figure(SECTION, "first query of a new session, no pool: p50", round(p50_cold, 3), "s", note=n),
            Figure(SECTION, "first query of a new session, no pool: p99", round(percentile(cold, 99), 3), "s", note=n),
            Figure(SECTION, "first query of a new session, pool: p50", round(p50_warm, 3), "s", Target("<", 1), n),
            Figure(
                SECTION,
                "first query of a new session, pool: p99",
                round(percentile(warm, 99), 3),
                "s",
                Target("<", 2),
                n,
            ),
            Figure(SECTION, "pool vs no pool, p50 speed-up", round(p50_cold / p50_warm, 1), "x", Target(">=", 5)),
            Figure(SECTION, "refill: claim to the next job idle, p50", round(percentile(refills, 50), 2), "s", note=n),
            Figure(SECTION, "one idle pool job: resident memory", idle["rss_mb"], "MB", note="JVM + Python driver"),
            Figure(SECTION, "one idle pool job: CPU", round(idle["cpu_share"] * 100, 2), "% of a core"),
        ]


def _cpu_ticks(pids: list[int]) -> int:
    """User and system CPU ticks of ``pids`` (their own, not their children's)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total


@contextmanager
def system(work: Path) -> Iterator[tuple[Plugin, str]]:
    """The embedded default's parts: index, metastore, the service (pool of 1, its keeper not
    started yet) on real HTTP."""
    with ExitStack() as stack:
        index = stack.enter_context(index_node(work / "index"))
        home = work / "metastore"
        metastore = Metastore.start(home, home / "warehouse", files=work / "metastore-files")
        stack.callback(metastore.close)
        settings = Settings(data_dir=work / "service", warm_pool_size=1, inactivity_limit_ms=INACTIVITY_MS)
        opensearch = index.config
        launcher = LocalLauncher(
            settings.data_dir,
            settings.cluster_name,
            settings.spark_master,
            catalog_conf=catalog_settings(home / "warehouse", metastore.uri),
        )
        store = Store.connect(opensearch)
        plugin = build_plugin(
            settings, store, DatasourceRegistry([local_datasource(DS)], store), {"local": launcher}, opensearch
        )
        stack.callback(_kill_leftover_jobs, Path(settings.data_dir))
        stack.callback(plugin.close)
        yield plugin, stack.enter_context(serve_app(create_app(plugin)))


def run(quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    quiet_driver_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    count = 3 if quick else SESSIONS
    with system(work) as (plugin, base_url):
        bench = PoolBench(plugin, base_url)
        bench.details["sessions"] = count
        bench.run(count)
        return bench.figures, bench.details


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv, prog="python -m bench.pool", doc=__doc__, default_out=DEFAULT_OUT, section=SECTION, run=run
    )


if __name__ == "__main__":
    sys.exit(main())
