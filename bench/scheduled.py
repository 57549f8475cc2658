"""Scheduled refresh against a stream, with real jobs: the CPU an idle auto-refresh index costs an
hour either way, and how fresh a scheduled index is.

``python -m bench.scheduled [--quick] [--out PATH] [--keep]``: the service runs in this process
(its REST API on a uvicorn thread, local ``spark-submit`` jobs on ``local[2]``, its refresh
scheduler running), with a Hive Metastore shared by its jobs and the embedded index server (or
``OPENSEARCH_URL``), at its default settings but the scheduler's lower bound. A parquet table is
created and given rows from an interactive session; one covering index on it is refreshed every
``refresh_interval = '1 minute'`` (the scheduler's default lower bound), by a stream of its own,
then by the scheduler, in the same run. Each **window** (180 s; ``--quick`` 60 s) has no writes and
measures the CPU of this bench's whole process tree (the service with its scheduler running, its
jobs, the index server, the metastore), less the interactive session's idle job (no part of any
refresh), scaled to an hour:

* **baseline**: the index manual (``CREATE INDEX`` without auto refresh): what the deployment
  costs with no auto-refresh index (the index server's, the metastore's and the service's idling);
* **internal**: ``ALTER ... WITH (auto_refresh = true, scheduler_mode = 'internal', refresh_interval
  = '1 minute')`` starts a streaming job; the window opens once its rows are searchable;
* **external**: ``ALTER ... WITH (auto_refresh = true, scheduler_mode = 'external')`` stops the
  stream and schedules the index, its first run due at once (that run's CPU is reported, and from
  it what an hour of a run at every tick would cost without the source probe); the window opens
  once that run has ended and its job exited;
* **freshness**: N single-row INSERTs (3; ``--quick`` 2), each from its INSERT's ``SUCCESS`` to
  the row being found in the index by a term query (polled every 100 ms), against its bound: the
  interval and the run that indexed it (its launch to its end, from the schedule);
* **baseline again**: ``ALTER ... WITH (auto_refresh = false)``, the same window.

An idle index's cost is that of its refresh: the CPU of every process of the tree but those every
window shares (the index server, the metastore, the service's process), which are its jobs, plus
the scheduler's rounds in the service (its thread's CPU, wrapped around each round, in every window
alike). The whole tree less the baselines' mean is reported too: it adds what the refresh costs the
index server and the metastore, within the noise the two baselines' difference shows. CPU is read from ``/proc`` and ``getrusage``: this process's own, its children's once
reaped (a refresh job that ends within a window), and every live descendant's (with its reaped
children), so a job that starts and ends within a window is counted whole. Run it alone, under the
Spark lock: ``flock /tmp/spark-tests.lock``.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from async_query.runtime import Plugin
from bench.cpu_sampler import TICKS, kind_of
from bench.env import descendants
from bench.report import Figure, Target, close_report, new_report, print_report
from bench.stats import percentile
from bench.streaming import Client, system
from query_core.flint import latest_id
from query_core.models import ScheduleDoc
from query_core.states import FlintIndexState, ScheduleState, SessionState, SessionType
from query_core.store import Query, Term, quiet_driver_logs
from tests.faults.procs import job_pid

log = logging.getLogger(__name__)
T = TypeVar("T")

SECTION = "scheduled refresh (local Spark)"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "scheduled.json"
DS = "local"
TABLE = f"{DS}.default.bench_scheduled_events"
INDEX = f"flint_{DS}_default_bench_scheduled_events_pages_index"
INTERVAL = "1 minute"
INTERVAL_MS = 60_000
CREATE = f"CREATE INDEX pages ON {TABLE} (page, n)"
TO_STREAM = (
    f"ALTER INDEX pages ON {TABLE} "
    f"WITH (auto_refresh = true, scheduler_mode = 'internal', refresh_interval = '{INTERVAL}')"
)
TO_SCHEDULER = f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = true, scheduler_mode = 'external')"
TO_MANUAL = f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = false)"
#: The service's settings: its defaults, but the warm interactive session outlives the run.
SETTINGS: dict[str, Any] = {"inactivity_limit_ms": 1_800_000}
#: Deadlines (seconds): nothing waits for ever.
STATEMENT_S = 240.0
RUN_S = 300.0


class BenchError(RuntimeError):
    """The bench cannot go on: says why."""


@dataclass(frozen=True)
class Plan:
    window_s: float = 180.0
    inserts: int = 3

    @classmethod
    def quick(cls) -> Plan:
        return cls(window_s=60.0, inserts=2)


# -- CPU of this process tree ---------------------------------------------------------------------


class TreeCpu:
    """Cumulative CPU seconds of this process tree by kind of process, less the process groups
    ``excluded`` (see the module's documentation)."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded

    def read(self) -> dict[str, float]:
        own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        kinds: dict[str, float] = defaultdict(float)
        kinds["service (this process)"] = own.ru_utime + own.ru_stime
        kinds["ended jobs"] = reaped.ru_utime + reaped.ru_stime
        for pid in descendants(os.getpid()):
            try:
                if os.getpgid(pid) in self.excluded:
                    continue
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            kinds[kind_of(command)] += sum(int(v) for v in fields[11:15]) / TICKS
        return dict(kinds)


#: The processes every window shares whatever refreshes the index: the deployment's own.
SHARED = ("index server", "metastore", "service (this process)")


class ThreadCpu:
    """CPU seconds spent in one function, on whichever thread runs it (the scheduler's rounds)."""

    def __init__(self) -> None:
        self.total = 0.0

    def wrap(self, fn: Callable[[], None]) -> Callable[[], None]:
        def timed() -> None:
            began = time.thread_time()
            try:
                fn()
            finally:
                self.total += time.thread_time() - began

        return timed


def spent(before: dict[str, float], after: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The CPU seconds between two readings, in all and by kind (a job reaped meanwhile moves from
    its kind to ``ended jobs``: only the sum is exact)."""
    by_kind = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in sorted(set(before) | set(after))}
    return sum(after.values()) - sum(before.values()), {k: v for k, v in by_kind.items() if v}


# -- the run ------------------------------------------------------------------------------------------


@dataclass
class ScheduledBench:
    plugin: Plugin
    client: Client
    plan: Plan
    #: The scheduler's rounds' CPU (its thread's), wrapped around its ``run_once``.
    rounds: ThreadCpu = field(default_factory=ThreadCpu)
    session_id: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)

    def until(self, probe: Callable[[], T | None], what: str, timeout: float = RUN_S, every: float = 0.1) -> T:
        deadline = time.monotonic() + timeout
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: not within {timeout:g} s")
            time.sleep(every)

    def sql(self, query: str) -> float:
        """Run ``query`` in the interactive session; when its GET first answered SUCCESS."""
        submitted = self.client.submit(query, self.session_id or None)
        self.session_id = str(submitted.get("sessionId") or self.session_id)
        reply, seen = self.client.wait_terminal(submitted["queryId"], STATEMENT_S)
        if reply is None or reply["status"] != "SUCCESS":
            raise BenchError(f"{query!r} ended {reply}")
        return seen

    def post(self, query: str) -> str:
        """POST a statement of its own (no session) and wait for its SUCCESS; its query id."""
        submitted = self.client.submit(query)
        reply, _ = self.client.wait_terminal(submitted["queryId"], STATEMENT_S)
        if reply is None or reply["status"] != "SUCCESS":
            raise BenchError(f"{query!r} ended {reply}")
        return str(submitted["queryId"])

    def insert(self, page: str) -> float:
        return self.sql(f"INSERT INTO {TABLE} VALUES ('{page}', 1)")

    def searchable(self, page: str) -> bool:
        return bool(self.plugin.store.index.search(INDEX, Query((Term("page", page),), size=1)))

    def schedule(self) -> ScheduleDoc | None:
        found = self.plugin.store.schedules.of(INDEX)
        return found.doc if found is not None else None

    def refresh_jobs_live(self) -> list[str]:
        """The batch or streaming jobs (not the interactive session's) running now."""
        launcher: Any = self.plugin.launchers.shared["local"]
        live = set(launcher.live_jobs())
        store = self.plugin.store
        store.index.refresh(f".query_execution_request_{DS}")
        sessions = store.sessions.find(DS, list(SessionState), size=1000)
        kinds = (SessionType.BATCH, SessionType.STREAMING)
        return [s.doc.job_id for s in sessions if s.doc.session_type in kinds and s.doc.job_id in live]

    def cpu(self) -> TreeCpu:
        session = self.plugin.store.sessions.get(DS, self.session_id)
        data_dir = Path(self.plugin.settings.data_dir).resolve()
        excluded = {job_pid(data_dir, session.doc.job_id)} if session is not None else set()
        return TreeCpu(excluded)

    def settled(self) -> bool:
        """No one-off work of the first jobs still runs: the JVM that records the jobs' class
        archive after the first one (``docs/job.md``) would count in a window."""
        for pid in descendants(os.getpid()):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if kind_of(command) == "job warm-up JVM":
                return False
        return True

    def window(self, name: str) -> float:
        """CPU-seconds per hour over an idle window, of the whole tree; the refresh's own (every
        process but the shared ones, and the scheduler's rounds) kept in the details."""
        self.until(self.settled, "the class archive's recording to end", timeout=600, every=1.0)
        meter = self.cpu()
        before, rounds, began = meter.read(), self.rounds.total, time.monotonic()
        time.sleep(self.plan.window_s)  # the window itself: nothing is asked of the service meanwhile
        after, took = meter.read(), time.monotonic() - began
        total, by_kind = spent(before, after)
        scheduler = self.rounds.total - rounds
        own = total - sum(by_kind.get(kind, 0.0) for kind in SHARED) + scheduler
        per_hour = total / took * 3600
        self.details[name] = {
            "window_s": round(took, 1),
            "cpu_s": round(total, 2),
            "by_kind": by_kind,
            "scheduler_rounds_cpu_s": round(scheduler, 3),
            "refresh_per_hour": own / took * 3600,
        }
        print(
            f"   {name}: {total:.2f} CPU-s in {took:.0f} s ({per_hour:.0f} CPU-s/h; its refresh's own "
            f"{own / took * 3600:.1f}) {by_kind}, scheduler rounds {scheduler:.3f} s",
            file=sys.stderr,
        )
        return per_hour

    # -- the sections ---------------------------------------------------------------------------

    def setup(self) -> None:
        self.sql(f"CREATE TABLE {TABLE} (page STRING, n INT) USING parquet")
        self.insert("/seed")
        self.post(CREATE)
        self.until(lambda: not self.refresh_jobs_live(), "the CREATE's job to exit", timeout=60)

    def baseline(self, name: str) -> Callable[[], None]:
        def measure() -> None:
            self.details.setdefault("baselines_per_hour", []).append(self.window(name))

        return measure

    def internal(self) -> None:
        self.post(TO_STREAM)
        self.until(lambda: self.searchable("/seed"), "the stream's first rows")
        if not self.refresh_jobs_live():
            raise BenchError("the index's stream is not running")
        self.details["internal_per_hour"] = self.window("internal window")

    def to_scheduler(self) -> None:
        meter = self.cpu()
        before = meter.read()
        self.post(TO_SCHEDULER)
        done = self.until(self._settled, "the first scheduled run to end")
        self.until(lambda: not self.refresh_jobs_live(), "its job to exit", timeout=60)
        run_cpu, by_kind = spent(before, meter.read())
        if done.last_outcome != "success":
            raise BenchError(f"the first scheduled run ended {done.last_outcome}: {done.last_error}")
        self.details["one_run"] = {"cpu_s": round(run_cpu, 2), "by_kind": by_kind, "run_s": _run_s(done)}
        print(f"   one scheduled run: {run_cpu:.1f} CPU-s, {_run_s(done):.1f} s", file=sys.stderr)

    def _settled(self) -> ScheduleDoc | None:
        doc = self.schedule()
        return doc if doc is not None and doc.runs >= 1 and doc.state == ScheduleState.ENABLED else None

    def external(self) -> None:
        runs = self.schedule().runs  # type: ignore[union-attr]
        self.details["external_per_hour"] = self.window("external window")
        after = self.schedule()
        assert after is not None
        self.details["external_window_runs"] = after.runs - runs
        self.details["external_window_last_outcome"] = after.last_outcome

    def to_manual(self) -> None:
        self.post(TO_MANUAL)
        self.until(lambda: not self.refresh_jobs_live(), "no refresh job to run", timeout=60)

    def freshness(self) -> None:
        samples = []
        for n in range(self.plan.inserts):
            page = f"/fresh-{n}"
            runs = self.schedule().runs  # type: ignore[union-attr]
            written = self.insert(page)
            self.until(self._found(page), f"row {page} in the index", timeout=INTERVAL_MS / 1000 + RUN_S)
            lag_s = time.perf_counter() - written
            done = self.until(self._settled_after(runs), "its run to settle")
            bound_s = INTERVAL_MS / 1000 + _run_s(done)
            samples.append({"lag_s": round(lag_s, 2), "bound_s": round(bound_s, 2), "run_s": round(_run_s(done), 2)})
            print(f"   freshness {n + 1}/{self.plan.inserts}: {lag_s:.1f} s (bound {bound_s:.1f} s)", file=sys.stderr)
        self.details["freshness"] = samples

    def _found(self, page: str) -> Callable[[], bool]:
        return lambda: self.searchable(page)

    def _settled_after(self, runs: int) -> Callable[[], ScheduleDoc | None]:
        def probe() -> ScheduleDoc | None:
            doc = self.schedule()
            return doc if doc is not None and doc.runs > runs and doc.state == ScheduleState.ENABLED else None

        return probe

    # -- the figures ----------------------------------------------------------------------------

    def report(self) -> None:
        d = self.details
        base = d["baselines_per_hour"]
        base_mean, noise = sum(base) / len(base), abs(base[0] - base[-1])
        internal, external = d["internal_per_hour"] - base_mean, d["external_per_hour"] - base_mean
        floor = max(noise, 1.0)  # an index measured below the noise is counted at it
        d.update(internal_idle_per_hour=internal, external_idle_per_hour=external, noise_per_hour=noise)
        own_internal = d["internal window"]["refresh_per_hour"]
        own_external = d["external window"]["refresh_per_hour"]
        one_run = d["one_run"]["cpu_s"]
        window = f"{self.plan.window_s:g} s windows"
        self.figures += [
            Figure(SECTION, "idle index, internal (its stream): CPU-s per hour of its refresh", own_internal, "CPU-s/h",
                   note=f"its streaming job, and the scheduler's rounds; refresh_interval {INTERVAL}"),
            Figure(SECTION, "idle index, external (scheduled): CPU-s per hour of its refresh", own_external, "CPU-s/h",
                   note=f"its jobs ({d['external_window_runs']} launched, last turn {d['external_window_last_outcome']}), "
                   "and the scheduler's rounds"),
            Figure(SECTION, "idle index, internal / external CPU of the refresh", own_internal / max(own_external, 0.01),
                   "x", Target(">=", 10), note="same run, index and interval"),
            Figure(SECTION, "baseline (no auto-refresh index): CPU-s per hour", base_mean, "CPU-s/h",
                   note=f"{window}, before and after: {', '.join(f'{b:.0f}' for b in base)}; index server, metastore, service"),
            Figure(SECTION, "idle index, internal, whole tree less the baseline: CPU-s per hour", internal, "CPU-s/h",
                   note=f"{d['internal window']['by_kind']}"),
            Figure(SECTION, "idle index, external, whole tree less the baseline: CPU-s per hour", external, "CPU-s/h",
                   note=f"{d['external window']['by_kind']}"),
            Figure(SECTION, "idle index, internal / external, whole tree less the baseline", internal / max(external, floor),
                   "x", note=f"external counted at least the baselines' difference, {floor:.0f} CPU-s/h"),
            Figure(SECTION, "one scheduled run: CPU-s", one_run, "CPU-s",
                   note=f"a batch job's start and one refresh; {d['one_run']['run_s']:.1f} s launch to end"),
            Figure(SECTION, "external with a run at every tick (no source probe): CPU-s per hour",
                   one_run * 3600_000 / INTERVAL_MS, "CPU-s/h",
                   note="estimated: 60 runs an hour of the run above; what the probe saves an idle index"),
        ]  # fmt: skip
        lags = [s["lag_s"] for s in d["freshness"]]
        over = max(s["lag_s"] / s["bound_s"] for s in d["freshness"])
        self.figures += [
            Figure(SECTION, "freshness lag p50 (INSERT SUCCESS -> searchable)", percentile(lags, 50), "s",
                   note=f"n={len(lags)}: {', '.join(f'{x:.1f}' for x in lags)} s"),
            Figure(SECTION, "freshness lag / (interval + its run), max", over, "x", Target("<=", 1.0),
                   note="; ".join(f"{s['lag_s']:.1f} s of {s['bound_s']:.1f} s" for s in d["freshness"])),
        ]  # fmt: skip


def _run_s(doc: ScheduleDoc) -> float:
    return max(0.0, (doc.last_end_time - doc.last_run_time) / 1000)


def run_bench(work: Path, plan: Plan) -> ScheduledBench:
    with system(work, **SETTINGS) as (plugin, base_url):
        client = Client(base_url)
        bench = ScheduledBench(plugin, client, plan)
        plugin.scheduler.run_once = bench.rounds.wrap(plugin.scheduler.run_once)  # type: ignore[method-assign]
        plugin.scheduler.start()
        try:
            for name, action in [
                ("setup: table, rows, a manual index", bench.setup),
                (f"baseline window ({plan.window_s:g} s)", bench.baseline("baseline window")),
                (f"ALTER to a stream, internal window ({plan.window_s:g} s)", bench.internal),
                ("ALTER to the scheduler, its first run", bench.to_scheduler),
                (f"external window ({plan.window_s:g} s)", bench.external),
                (f"freshness ({plan.inserts} inserts)", bench.freshness),
                ("ALTER to manual refresh", bench.to_manual),
                (f"baseline window again ({plan.window_s:g} s)", bench.baseline("baseline window again")),
            ]:
                began = time.perf_counter()
                print(f"== {name} ...", file=sys.stderr, flush=True)
                action()
                bench.details.setdefault("step_seconds", {})[name] = round(time.perf_counter() - began, 1)
            bench.report()
            state = plugin.store.index_states.get(DS, latest_id(INDEX))
            bench.details["index_state"] = state.doc.state.value if state is not None else "none"
            if state is None or state.doc.state is not FlintIndexState.ACTIVE:
                raise BenchError(f"the index is {bench.details['index_state']} after the run")
        finally:
            client.close()
        return bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduled", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 s windows, 2 inserts (about 9 minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (job logs) and print it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    plan = Plan.quick() if args.quick else Plan()
    report = new_report(quick=args.quick, plan=plan.__dict__)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="aq-bench-scheduled-"))
    work.chmod(0o711)  # run as root, jobs run as the job user, who passes through to its places
    failure: BenchError | None = None
    try:
        bench = run_bench(work, plan)
        report.add(bench.figures)
        report.details[SECTION] = bench.details
    except BenchError as exc:
        failure = exc
    finally:
        if args.keep:
            print(f"data directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failure is not None:
        report.skipped[SECTION] = f"failed: {str(failure).splitlines()[0]}"[:300]
    close_report(report, started, args.out)
    return print_report(report, args.out, failure)


if __name__ == "__main__":
    sys.exit(main())
