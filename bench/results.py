"""Large results with real jobs: the job's driver memory and the time to the first page, for a
result of 1M and of 5M rows, in the same run.

``python -m bench.results [--quick] [--out PATH] [--rows 1000000,5000000]``: the service runs in
this process (its REST API on a uvicorn thread, local ``spark-submit`` jobs on ``local[2]`` with
Spark's default driver memory), on a real OpenSearch node (or ``OPENSEARCH_URL``), with its
default caps and chunk sizes. For each row count, in a session of its own (a fresh job, so that
the processes' peaks are that query's):

* ``SELECT 1`` opens the session (its cold start is not counted);
* the query ``SELECT id, repeat('x', 100) AS s FROM range(N)`` (the rows of the report that started
  this: 3M of them used to kill the session) is POSTed, and GET polled every 50 ms: **time to first
  page** is from just before the POST to the GET that answers ``SUCCESS`` with the first page;
* meanwhile, every 50 ms, the resident memory of the job's processes is sampled from ``/proc``:
  the driver's JVM (the ``spark-submit`` process), the driver's Python process (the job's
  ``main.py``), and Spark's Python workers (in ``local`` mode the executors' Python runs on the
  driver's machine too); after the query, the JVM's and the Python driver's own high-water marks
  (``VmHWM``) are read as well. **Driver peak** is the JVM's plus the Python driver's peak;
* and the JVM's heap in use (``jstat -gc`` every 250 ms, when the JDK has it): the JVM's resident
  size is mostly heap it keeps once grown, up to Spark's default 1 GB;
* then 10 GETs with paging (``size`` 1,000) at offsets spread over the stored rows, past the first
  document: their p50;
* the job is stopped before the next row count starts.

Targets: the driver's peak for 5M rows within 25% of its peak for 1M rows (flat in the row count:
rows are streamed and stop at the cap), and a paged GET under 100 ms. Run it under the Spark lock:
``flock /work/spark.lock``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from async_query.api import create_app
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from bench.emr import serve_app
from bench.index_node import index_node
from bench.report import Figure, Target, close_report, new_report, print_report
from bench.stats import percentile
from query_core.store import Store, quiet_driver_logs
from tests.faults.procs import job_pid

log = logging.getLogger(__name__)

SECTION = "large results (local Spark)"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "results.json"
BASE = "/_plugins/_async_query"
DS = "local"
QUERY = "SELECT id, repeat('x', 100) AS s FROM range({rows})"
TERMINAL = frozenset({"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"})
#: Deadlines (seconds): a cold start, and one large query.
COLD_S = 240.0
QUERY_S = 600.0
SAMPLE_S = 0.05
PAGES = 10
PAGE_ROWS = 1_000
MB = 1024 * 1024


class BenchError(RuntimeError):
    """The bench cannot go on: says why."""


# -- the job's processes, from /proc ------------------------------------------------------------------


def _status_kb(pid: int, field_name: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class JobProcesses:
    """The driver's JVM, its Python process, and the Python workers under the JVM."""

    jvm: int
    python: int
    workers: tuple[int, ...]

    @classmethod
    def of(cls, jvm: int) -> JobProcesses:
        tree = _children()
        python = 0
        workers: list[int] = []
        pending = list(tree.get(jvm, []))
        while pending:
            pid = pending.pop()
            command = _cmdline(pid)
            if "flint_repl_job" in command or command.rstrip().endswith("main.py"):
                python = pid
            elif "python" in command:
                workers.append(pid)
                pending.extend(tree.get(pid, []))
        return cls(jvm, python, tuple(workers))


@dataclass
class Peaks:
    """Resident memory sampled during one query (bytes)."""

    jvm: int = 0
    python: int = 0
    driver: int = 0
    workers: int = 0
    #: The JVM's heap in use, at its peak (0: not measured).
    heap: int = 0

    def sample(self, jvm: int) -> None:
        procs = self._driver_peaks(jvm, "VmRSS")
        self.workers = max(self.workers, sum(_status_kb(p, "VmRSS") for p in procs.workers) * 1024)

    def add_high_water_marks(self, jvm: int) -> None:
        """The processes' own peaks (``VmHWM``): nothing between two samples is missed."""
        self._driver_peaks(jvm, "VmHWM")

    def _driver_peaks(self, jvm: int, field: str) -> JobProcesses:
        """The driver's processes' ``field`` (of ``/proc/<pid>/status``) taken into the peaks."""
        procs = JobProcesses.of(jvm)
        jvm_bytes = _status_kb(procs.jvm, field) * 1024
        python_bytes = _status_kb(procs.python, field) * 1024
        self.jvm = max(self.jvm, jvm_bytes)
        self.python = max(self.python, python_bytes)
        self.driver = max(self.driver, jvm_bytes + python_bytes)
        return procs


class HeapWatch:
    """The driver JVM's heap in use (young and old generations), from one long-lived ``jstat -gc``
    printing every 250 ms: what the JVM holds, where its resident size is mostly heap it keeps
    once grown. Nothing when the JDK has no ``jstat``."""

    def __init__(self, jvm: int) -> None:
        self.peak = 0
        self._proc: subprocess.Popen[str] | None = None
        if shutil.which("jstat"):
            self._proc = subprocess.Popen(
                ["jstat", "-gc", str(jvm), "250"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            threading.Thread(target=self._read, name="bench-jstat", daemon=True).start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        header: list[str] = []
        for line in self._proc.stdout:
            cells = line.split()
            if cells and cells[0] == "S0C":
                header = cells
                continue
            try:
                values = dict(zip(header, map(float, cells), strict=True))
            except ValueError:
                continue
            used_kb = sum(values.get(name, 0.0) for name in ("S0U", "S1U", "EU", "OU"))
            self.peak = max(self.peak, int(used_kb * 1024))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)


class Sampler:
    """Samples :class:`Peaks` every :data:`SAMPLE_S` in a thread while a query runs."""

    def __init__(self, jvm: int) -> None:
        self.jvm = jvm
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._heap: HeapWatch | None = None

    def __enter__(self) -> Peaks:
        self._heap = HeapWatch(self.jvm)
        self._thread.start()
        return self.peaks

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.peaks.add_high_water_marks(self.jvm)
        if self._heap is not None:
            self._heap.stop()
            self.peaks.heap = self._heap.peak

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peaks.sample(self.jvm)
            self._stop.wait(SAMPLE_S)


# -- the bench -----------------------------------------------------------------------------------------


@dataclass
class ResultsBench:
    plugin: Plugin
    base_url: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=60)

    def submit(self, query: str, session_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"datasource": DS, "lang": "sql", "query": query}
        if session_id:
            body["sessionId"] = session_id
        reply = self.http.post(BASE, json=body)
        if reply.status_code != 201:
            raise BenchError(f"POST {query!r} answered {reply.status_code}: {reply.text[:300]}")
        return dict(reply.json())

    def wait(self, query_id: str, timeout_s: float, poll_s: float = SAMPLE_S) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout_s
        while True:
            reply = self.http.get(f"{BASE}/{query_id}")
            body = dict(reply.json())
            if body.get("status") in TERMINAL:
                return body
            if time.perf_counter() > deadline:
                raise BenchError(f"{query_id} not finished after {timeout_s:g} s: {body}")
            time.sleep(poll_s)

    def job_of(self, query_id: str) -> str:
        statement = self.plugin.store.statements.get(DS, query_id)
        if statement is None:
            raise BenchError(f"no statement {query_id}")
        return statement.doc.job_id

    def one(self, rows: int) -> dict[str, Any]:
        """One row count, in a session of its own; returns its figures as a dict."""
        warm = self.submit("SELECT 1")
        if self.wait(warm["queryId"], COLD_S).get("status") != "SUCCESS":
            raise BenchError("the session's first SELECT 1 did not succeed")
        session, job = warm["sessionId"], self.job_of(warm["queryId"])
        jvm = job_pid(self.plugin.settings.data_dir, job)
        try:
            with Sampler(jvm) as peaks:
                began = time.perf_counter()
                big = self.submit(QUERY.format(rows=rows), session)
                reply = self.wait(big["queryId"], QUERY_S)
                first_page_s = time.perf_counter() - began
            if reply.get("status") != "SUCCESS":
                raise BenchError(f"{rows} rows ended {reply.get('status')}: {reply.get('error', '')[:300]}")
            paged = self.pages(big["queryId"], int(reply.get("resultRows", reply["size"])), int(reply["size"]))
        finally:
            self.plugin.launchers.shared["local"].cancel(job)
        return {
            "rows": rows,
            "first_page_s": round(first_page_s, 2),
            "driver_peak_mb": round(peaks.driver / MB, 1),
            "jvm_peak_mb": round(peaks.jvm / MB, 1),
            "python_driver_peak_mb": round(peaks.python / MB, 1),
            "jvm_heap_used_peak_mb": round(peaks.heap / MB, 1),
            "workers_peak_mb": round(peaks.workers / MB, 1),
            "first_page_rows": reply["size"],
            "first_page_bytes": len(json.dumps(reply)),
            "rows_stored": reply.get("resultRows", reply["size"]),
            "truncated": reply.get("truncated", False),
            "paged_get_ms": paged,
        }

    def pages(self, query_id: str, stored: int, first: int) -> list[float]:
        """GETs of pages past the first document, at offsets spread over the stored rows (ms)."""
        took: list[float] = []
        span = max(stored - first - PAGE_ROWS, 1)
        for i in range(PAGES):
            offset = first + span * i // PAGES
            began = time.perf_counter()
            reply = self.http.get(f"{BASE}/{query_id}", params={"offset": offset, "size": PAGE_ROWS})
            took.append((time.perf_counter() - began) * 1000)
            body = reply.json()
            if reply.status_code != 200 or body.get("offset") != offset or not body.get("size"):
                raise BenchError(f"page at {offset} answered {reply.status_code}: {reply.text[:300]}")
        return [round(ms, 1) for ms in took]

    def run(self, counts: list[int]) -> None:
        runs = []
        for rows in counts:
            print(f"== {rows:,} rows ...", file=sys.stderr, flush=True)
            figures = self.one(rows)
            print(f"   {figures}", file=sys.stderr, flush=True)
            runs.append(figures)
        self.details["runs"] = runs
        self.details["settings"] = {
            name: getattr(self.plugin.settings, name)
            for name in ("max_result_rows", "max_result_bytes", "result_chunk_rows", "result_chunk_bytes")
        }
        self.figures += self.report(runs)

    def report(self, runs: list[dict[str, Any]]) -> list[Figure]:
        figures = []
        for run in runs:
            label = f"{run['rows'] / 1_000_000:g}M rows"
            note = f"{run['rows_stored']:,} rows stored, truncated {str(run['truncated']).lower()}"
            figures += [
                Figure(SECTION, f"driver peak RSS, JVM + Python ({label})", run["driver_peak_mb"], "MB", note=note),
                Figure(SECTION, f"  of which Python driver ({label})", run["python_driver_peak_mb"], "MB"),
                Figure(SECTION, f"driver JVM heap in use, peak ({label})", run["jvm_heap_used_peak_mb"] or None, "MB"),
                Figure(SECTION, f"Python workers peak RSS ({label})", run["workers_peak_mb"], "MB"),
                Figure(SECTION, f"time to first page ({label})", run["first_page_s"], "s"),
                Figure(
                    SECTION,
                    f"paged GET p50, past the first document ({label})",
                    percentile(run["paged_get_ms"], 50),
                    "ms",
                    Target("<", 100),
                ),
            ]
        if len(runs) >= 2:
            low, high = runs[0], runs[-1]
            ratio = f"{high['rows'] / 1_000_000:g}M / {low['rows'] / 1_000_000:g}M"
            figures += [
                Figure(
                    SECTION,
                    f"driver peak ratio, {ratio}",
                    round(high["driver_peak_mb"] / low["driver_peak_mb"], 2),
                    "x",
                    Target("<=", 1.25),
                ),
                Figure(
                    SECTION,
                    f"time to first page ratio, {ratio}",
                    round(high["first_page_s"] / low["first_page_s"], 2),
                    "x",
                ),
            ]
        return figures


@contextmanager
def system(work: Path) -> Iterator[tuple[Plugin, str]]:
    """The index and the service on real HTTP, its jobs with an in-memory catalog of their own."""
    with ExitStack() as stack:
        index = stack.enter_context(index_node(work / "index"))
        settings = Settings(data_dir=work / "service", inactivity_limit_ms=900_000)
        opensearch = index.config
        launcher = LocalLauncher(settings.data_dir, settings.cluster_name, "local[2]")
        store = Store.connect(opensearch)
        plugin = build_plugin(
            settings, store, DatasourceRegistry([local_datasource(DS)], store), {"local": launcher}, opensearch
        )
        stack.callback(plugin.close)
        yield plugin, stack.enter_context(serve_app(create_app(plugin)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,5000000", help="row counts, comma separated (default 1M,5M)")
    parser.add_argument("--quick", action="store_true", help="100k and 500k rows")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    counts = [100_000, 500_000] if args.quick else [int(n) for n in args.rows.split(",")]
    report = new_report(rows=counts, query=QUERY)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="aq-bench-results-"))
    work.chmod(0o711)  # run as root, jobs run as the job user, who passes through to its places
    failure: BenchError | None = None
    try:
        with system(work) as (plugin, base_url):
            bench = ResultsBench(plugin, base_url)
            try:
                bench.run(counts)
            except BenchError as exc:
                failure = exc
            report.add(bench.figures)
            report.details[SECTION] = bench.details
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failure is not None:
        report.skipped[SECTION] = f"failed: {failure}"[:300]
    close_report(report, started, args.out)
    return print_report(report, args.out, failure)


if __name__ == "__main__":
    sys.exit(main())
