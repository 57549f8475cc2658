"""What operators watch: every Prometheus metric of the plugin, defined once with its bounded
labels, and the small functions that record them (``docs/metrics.md``).

Labels are route templates, datasource names, query kinds, states and outcomes: never a query,
session or job id, never a raw path. The HTTP middleware is pure ASGI (it is on GET's hot path:
two clock reads, a ``bisect`` and two additions per request); what is counted where it happens
anyway (requests on the event loop, the caches' hits and misses) is copied into the Prometheus
metrics by :func:`flush`, before they are read and every metrics round.

Several worker processes of one service on one host share their figures through
``prometheus_client``'s multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` must name an empty
directory, set before the processes start (``docs/metrics.md``).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from query_core.errors import LauncherThrottledError, LauncherValidationError
from query_core.models import PICKUP_BUCKETS_S, RUN_BUCKETS_S
from query_core.models import Histogram as HistogramDoc

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Every metric lives in this registry (not prometheus_client's global one).
REGISTRY = CollectorRegistry(auto_describe=True)
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
if not MULTIPROCESS:  # in multiprocess mode the process figures would be one worker's
    ProcessCollector(registry=REGISTRY)
    PlatformCollector(registry=REGISTRY)
    GCCollector(registry=REGISTRY)

#: Request latency buckets (seconds): a cached GET takes a fraction of a millisecond.
HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAUNCHER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Histogram(
    "async_query_http_request_duration_seconds",
    "HTTP requests by route template, method and status class, and how long they took to answer",
    ["route", "method", "status"],
    buckets=HTTP_BUCKETS,
    registry=REGISTRY,
)
QUERIES_SUBMITTED = Counter(
    "async_query_queries_submitted",
    "Queries accepted by POST (201), by datasource and kind",
    ["datasource", "kind"],
    registry=REGISTRY,
)
QUERIES_FINISHED = Counter(
    "async_query_queries_finished",
    "Queries that reached a terminal state, by datasource, kind and that state (ended by this "
    "service, or by a job and reported by its heartbeat)",
    ["datasource", "kind", "state"],
    registry=REGISTRY,
)
PICKUP_SECONDS = Histogram(
    "async_query_statement_pickup_seconds",
    "From a statement's submission to its job starting it, by datasource and kind (from job heartbeats)",
    ["datasource", "kind"],
    buckets=PICKUP_BUCKETS_S,
    registry=REGISTRY,
)
RUN_SECONDS = Histogram(
    "async_query_statement_run_seconds",
    "How long statements ran in their job, by datasource and kind (from job heartbeats)",
    ["datasource", "kind"],
    buckets=RUN_BUCKETS_S,
    registry=REGISTRY,
)
SESSIONS = Gauge(
    "async_query_sessions",
    "Live sessions (refresh jobs are the batch and streaming ones) by datasource, type and state",
    ["datasource", "type", "state"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)
SESSIONS_ENDED = Counter(
    "async_query_sessions_ended_by_service",
    "Sessions this service ended itself (job confirmed gone, cancel past its deadline, stalled index DML)",
    ["datasource", "type", "state"],
    registry=REGISTRY,
)
JOBS_STARTED = Counter(
    "async_query_jobs_started",
    "Spark jobs started, by datasource, session type and launcher",
    ["datasource", "type", "launcher"],
    registry=REGISTRY,
)
POOL_CLAIMS = Counter(
    "async_query_pool_claims",
    "New interactive sessions by how they got their job: a warm pool job claimed, none to claim (a cold start), or a claimed job gone before it started the session (a fresh start)",
    ["datasource", "outcome"],
    registry=REGISTRY,
)
LAUNCHER_CALLS = Histogram(
    "async_query_launcher_call_duration_seconds",
    "Launcher calls (StartJobRun, GetJobRun, CancelJobRun; local start, describe, kill) by outcome, and their duration",
    ["launcher", "operation", "outcome"],
    buckets=LAUNCHER_BUCKETS,
    registry=REGISTRY,
)
INDEX_CALLS = Counter(
    "async_query_index_calls",
    "Calls of this service to the index cluster, by operation and outcome (status class, unreachable, error)",
    ["operation", "outcome"],
    registry=REGISTRY,
)
INDEX_RETRIES = Counter(
    "async_query_index_retries",
    "Retries of this service's index calls after transient failures, by operation",
    ["operation"],
    registry=REGISTRY,
)
CACHE_LOOKUPS = Counter(
    "async_query_cache_lookups",
    "Lookups of the GET path's caches, by cache and result (hit, miss)",
    ["cache", "result"],
    registry=REGISTRY,
)
JOB_ROWS = Counter(
    "async_query_job_rows",
    "Rows read and written by the jobs' statements (Spark's input and output metrics), by datasource, session type and direction",
    ["datasource", "type", "direction"],
    registry=REGISTRY,
)
JOB_BYTES = Counter(
    "async_query_job_bytes",
    "Bytes read and written by the jobs' statements (Spark's input and output metrics), by datasource, session type and direction",
    ["datasource", "type", "direction"],
    registry=REGISTRY,
)
JOB_INDEX_CALLS = Counter(
    "async_query_job_index_calls",
    "The jobs' calls to the index cluster, by datasource, session type and outcome (status class)",
    ["datasource", "type", "outcome"],
    registry=REGISTRY,
)
STREAM_BATCHES = Counter(
    "async_query_stream_micro_batches",
    "Micro-batches run by the streaming jobs, by datasource",
    ["datasource"],
    registry=REGISTRY,
)
ACCELERATED_QUERIES = Counter(
    "async_query_accelerated_queries",
    "Queries of the jobs that read a Flint index, by datasource and kind of index (skipping: files skipped; covering: read instead of the table)",
    ["datasource", "kind"],
    registry=REGISTRY,
)
FILES_SKIPPED = Counter(
    "async_query_files_skipped",
    "Files the jobs' queries did not read thanks to skipping indexes, by datasource",
    ["datasource"],
    registry=REGISTRY,
)
STREAM_LAG = Gauge(
    "async_query_stream_lag_seconds",
    "The largest lag among a datasource's live streams: how old the newest data its latest micro-batch read was",
    ["datasource"],
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
STREAMING_HOUSEKEEPER_FAILURES = Counter(
    "async_query_streaming_housekeeper_failures",
    "Rounds or streams the streaming housekeeper could not handle",
    registry=REGISTRY,
)
SCHEDULED_RUNS = Counter(
    "async_query_scheduled_runs",
    "Turns of scheduled refreshes, by datasource and outcome: launched, then success or failed; or "
    "skipped (the previous run still ran), unchanged (no source table changed), waiting (no refresh share)",
    ["datasource", "outcome"],
    registry=REGISTRY,
)
SCHEDULED_RUN_LAG = Histogram(
    "async_query_scheduled_run_lag_seconds",
    "From when a scheduled refresh fell due to its launch, by datasource",
    ["datasource"],
    buckets=(0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0),
    registry=REGISTRY,
)
HEALTHY = Gauge(
    "async_query_health_check_ok",
    "1 when the health check passes, 0 when it fails (index, metastore, launchers, housekeeping)",
    ["check"],
    multiprocess_mode="livemin",
    registry=REGISTRY,
)


class StatsRecorder(Protocol):
    """What the reference's stats (:class:`async_query.stats.Stats`) count as events happen."""

    def counts_request(self, route: str) -> bool: ...

    def request(self, route: str, method: str, status: int) -> None: ...

    def launcher_failed(self, launcher: str, call: str) -> None: ...

    def job_started(self, session_type: str) -> None: ...


#: The stats of the reference's ``/_plugins/_sql/stats``: set where the plugin is built
#: (:mod:`async_query.runtime`), None while no plugin counts them.
stats: StatsRecorder | None = None


# -- recording ---------------------------------------------------------------------------------


def query_submitted(datasource: str, kind: str) -> None:
    QUERIES_SUBMITTED.labels(datasource, kind).inc()


def query_finished(datasource: str, kind: str, state: str, count: int = 1) -> None:
    QUERIES_FINISHED.labels(datasource, kind, state).inc(count)


def session_ended_by_service(datasource: str, session_type: str, state: str) -> None:
    SESSIONS_ENDED.labels(datasource, session_type, state).inc()


def job_started(datasource: str, session_type: str, launcher: str) -> None:
    JOBS_STARTED.labels(datasource, session_type, launcher).inc()
    if stats is not None:
        stats.job_started(session_type)


def pool_claimed(datasource: str, outcome: str) -> None:
    POOL_CLAIMS.labels(datasource, outcome).inc()


def streaming_housekeeper_failed() -> None:
    STREAMING_HOUSEKEEPER_FAILURES.inc()


def scheduled_run(datasource: str, outcome: str, lag_s: float | None = None) -> None:
    """A scheduled refresh's turn: launched (``lag_s`` after it fell due), or how it ended."""
    SCHEDULED_RUNS.labels(datasource, outcome).inc()
    if lag_s is not None:
        SCHEDULED_RUN_LAG.labels(datasource).observe(max(0.0, lag_s))


class _Launcher(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def call_names(self) -> dict[str, str]: ...


def launcher_call(launcher: _Launcher, call: str, fn: Callable[[], T]) -> T:
    """``fn()``, a call of ``launcher`` (``start``, ``describe`` or ``cancel``), counted by its
    outcome under the launcher's own name for it (``StartJobRun``...) and timed."""
    kind = launcher.kind or type(launcher).__name__.lower()
    operation = launcher.call_names.get(call, call)
    started = time.perf_counter()
    outcome = "error"
    try:
        answer = fn()
        outcome = "ok"
        return answer
    except LauncherThrottledError:
        outcome = "throttled"
        raise
    except LauncherValidationError:
        outcome = "refused"
        raise
    finally:
        LAUNCHER_CALLS.labels(kind, operation, outcome).observe(time.perf_counter() - started)
        if outcome != "ok" and stats is not None:
            stats.launcher_failed(kind, call)


#: The counter of each (operation, outcome) seen: a GET's index read looks its counter up here
#: rather than through ``labels`` (a third of the cost). Bounded by the client's operations.
_index_calls: dict[tuple[str, str], Any] = {}


class _CallCounts:
    """One thread's index calls by (operation, outcome), counted without a lock (only that thread
    writes them) and copied into :data:`INDEX_CALLS` by :func:`flush`, as requests are."""

    __slots__ = ("copied", "counts", "thread")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.copied: dict[tuple[str, str], int] = {}
        #: Its thread, to forget these counts once it has ended and they are copied.
        self.thread = threading.current_thread()

    def copy(self) -> None:
        for key, count in list(self.counts.items()):
            grown = count - self.copied.get(key, 0)
            if grown > 0:
                _index_counter(key).inc(grown)
                self.copied[key] = count


_thread_counts = threading.local()
_all_counts: list[_CallCounts] = []
_all_counts_lock = threading.Lock()


def _index_counter(key: tuple[str, str]) -> Any:
    counter = _index_calls.get(key)
    if counter is None:
        counter = _index_calls.setdefault(key, INDEX_CALLS.labels(*key))
    return counter


def index_call(operation: str, outcome: str, retries: int) -> None:
    """The index client's call listener (``query_core.store.connector.CallListener``): counted
    where it happens, on the event loop or a worker thread, without a lock (in multiprocess mode,
    where every count is written to a shared file anyway, into the counter at once)."""
    if MULTIPROCESS:
        _index_counter((operation, outcome)).inc()
    else:
        mine: _CallCounts | None = getattr(_thread_counts, "counts", None)
        if mine is None:
            mine = _thread_counts.counts = _CallCounts()
            with _all_counts_lock:
                _all_counts.append(mine)
        key = (operation, outcome)
        mine.counts[key] = mine.counts.get(key, 0) + 1
    if retries:
        INDEX_RETRIES.labels(operation).inc(retries)


def add_histogram(histogram: Histogram, labels: tuple[str, ...], delta: HistogramDoc) -> None:
    """Add observations counted elsewhere (a job's buckets, already differenced) to ``histogram``,
    whose buckets must be the same bounds. prometheus_client has no public call for it: this
    adds to its per-bucket values, as ``observe`` does (``tests/unit/test_metrics.py`` holds it)."""
    child: Any = histogram.labels(*labels)
    buckets = child._buckets
    if len(delta.counts) != len(buckets):
        log.warning("histogram %s: %d buckets reported, %d expected; ignored", histogram._name, len(delta.counts), len(buckets))
        return
    for value, count in zip(buckets, delta.counts, strict=True):
        if count > 0:
            value.inc(count)
    if delta.sum > 0:
        child._sum.inc(delta.sum)


# -- caches: counted where they are looked up, copied into counters when read -----------------


class _Counted(Protocol):
    hits: int
    misses: int


class CacheFeed:
    """Copies the hit and miss counts of named caches into :data:`CACHE_LOOKUPS` (by difference)."""

    def __init__(self) -> None:
        self._caches: dict[str, _Counted] = {}
        self._copied: dict[str, tuple[int, int]] = {}

    def watch(self, name: str, cache: _Counted) -> None:
        self._caches[name] = cache
        self._copied[name] = (cache.hits, cache.misses)

    def copy(self) -> None:
        for name, cache in list(self._caches.items()):
            hits, misses = cache.hits, cache.misses
            old_hits, old_misses = self._copied[name]
            self._copied[name] = (hits, misses)
            if hits > old_hits:
                CACHE_LOOKUPS.labels(name, "hit").inc(hits - old_hits)
            if misses > old_misses:
                CACHE_LOOKUPS.labels(name, "miss").inc(misses - old_misses)


caches = CacheFeed()


# -- reading -------------------------------------------------------------------------------------


def exposition() -> tuple[bytes, str]:
    """The metrics in the Prometheus text format: this process's, or in multiprocess mode every
    worker's, merged."""
    flush()
    if MULTIPROCESS:
        merged = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def samples(metric: Counter | Histogram | Gauge, suffix: str = "") -> Iterable[tuple[dict[str, str], float]]:
    """This process's samples of ``metric`` (``suffix``: ``_total``, ``_count``...)."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == family.name + suffix:
                yield sample.labels, sample.value


# -- HTTP ----------------------------------------------------------------------------------------

ASYNC_BASE = "/_plugins/_async_query"
DATASOURCE_BASE = "/_plugins/_query/_datasources"
#: The route templates requests are counted under (the app's own path templates).
ROUTES = {
    "submit": ASYNC_BASE,
    "sessions": ASYNC_BASE + "/_sessions",
    "health": ASYNC_BASE + "/_health",
    "query": ASYNC_BASE + "/{query_id}",
    "datasources": DATASOURCE_BASE,
    "datasource": DATASOURCE_BASE + "/{name}",
    "sql_stats": "/_plugins/_sql/stats",
    "ppl_stats": "/_plugins/_ppl/stats",
    "metrics": "/metrics",
    # the web console's page, assets and endpoints, as one route (docs/console.md)
    "console": "/console",
}
#: Any other path (unknown, or passed through in gateway mode).
OTHER_ROUTE = "other"
_EXACT = {
    ASYNC_BASE: ROUTES["submit"],
    ASYNC_BASE + "/": ROUTES["submit"],
    ROUTES["sessions"]: ROUTES["sessions"],
    ROUTES["health"]: ROUTES["health"],
    DATASOURCE_BASE: ROUTES["datasources"],
    DATASOURCE_BASE + "/": ROUTES["datasources"],
    ROUTES["sql_stats"]: ROUTES["sql_stats"],
    ROUTES["ppl_stats"]: ROUTES["ppl_stats"],
    ROUTES["metrics"]: ROUTES["metrics"],
}
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def route_of(path: str) -> str:
    """The route template of a request path (ids never become labels)."""
    exact = _EXACT.get(path)
    if exact is not None:
        return exact
    if path.startswith(ROUTES["console"]) and (len(path) == len(ROUTES["console"]) or path[len(ROUTES["console"])] == "/"):
        return ROUTES["console"]
    for base, template in ((ASYNC_BASE + "/", ROUTES["query"]), (DATASOURCE_BASE + "/", ROUTES["datasource"])):
        if path.startswith(base):
            rest = path[len(base) :]
            return template if rest and "/" not in rest else OTHER_ROUTE
    return OTHER_ROUTE


class _Tally:
    """The requests of one (route, method, status), counted on the event loop without a lock
    (only its thread writes them) and copied into :data:`HTTP_REQUESTS` by :func:`flush`: a
    request costs a ``bisect`` and two additions, not the histogram's locked updates."""

    __slots__ = ("copied", "copied_sum", "counts", "labels", "sum")

    def __init__(self, labels: tuple[str, str, str]) -> None:
        self.labels = labels
        self.counts = [0] * (len(HTTP_BUCKETS) + 1)
        self.sum = 0.0
        self.copied = list(self.counts)
        self.copied_sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(HTTP_BUCKETS, seconds)] += 1
        self.sum += seconds

    def copy(self) -> None:
        """Add what was counted since the last copy to the histogram (one flusher at a time)."""
        counts, total = list(self.counts), self.sum
        grown = [now - before for now, before in zip(counts, self.copied, strict=True)]
        if any(grown):
            add_histogram(HTTP_REQUESTS, self.labels, HistogramDoc(counts=grown, sum=max(0.0, total - self.copied_sum)))
        self.copied, self.copied_sum = counts, total


_tallies: dict[tuple[str, str, int], _Tally] = {}
_flushing = threading.Lock()


def flush() -> None:
    """Bring the metrics up to date with what is counted elsewhere first (requests, caches):
    before they are read, and every metrics round (so other worker processes see them)."""
    with _flushing:
        for tally in list(_tallies.values()):
            tally.copy()
        with _all_counts_lock:
            counts = list(_all_counts)
        for mine in counts:
            mine.copy()
        ended = [mine for mine in counts if not mine.thread.is_alive()]
        if ended:
            with _all_counts_lock:
                for mine in ended:
                    mine.copy()  # anything it counted since the copy above
                    _all_counts.remove(mine)
        caches.copy()


def _tally(route: str, method: str, status: int) -> _Tally:
    key = (route, method, status)
    found = _tallies.get(key)
    if found is None:
        found = _tallies.setdefault(key, _Tally((route, method, f"{status // 100}xx")))
    return found


class MetricsMiddleware:
    """ASGI middleware: every HTTP request counted in :data:`HTTP_REQUESTS` by route template,
    method and status class, with the time to its answer's end. The outermost layer: refusals
    (401, 403, 413) are counted too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        #: What to call for each (route, method, status) seen: bounded by the routes, methods
        #: and statuses, whatever the paths and methods (others share a name).
        self._children: dict[tuple[str, str, int], Callable[[float], None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        finally:
            self._observer(scope["path"], scope["method"], status)(time.perf_counter() - started)

    def _observer(self, path: str, method: str, status: int) -> Callable[[float], None]:
        route = route_of(path)
        key = (route, method if method in _METHODS else "other", status)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = _observer(*key)
        return found


def _observer(route: str, method: str, status: int) -> Callable[[float], None]:
    observe = _tally(route, method, status).observe
    if stats is None or not stats.counts_request(route):
        return observe
    counted = stats

    def observe_and_count(seconds: float) -> None:
        observe(seconds)
        counted.request(route, method, status)

    return observe_and_count
