"""What operators watch, read the way they read it: ``/metrics`` over HTTP, parsed by
prometheus_client's own parser, and the reference's stats. Each test takes the figures before and
after what it does and checks that exactly the counters it should moved (the registry is the
process's, shared by every test). The service runs on the in-memory twin with a
RecordingLauncher; jobs are played by the test through their documents, as the real job writes
them (a heartbeat's figures, its session's end)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from async_query import metrics
from async_query.api import BASE, create_app
from async_query.job_figures import MetricsWorker
from async_query.launcher.base import JobRequest, JobRunState
from async_query.metrics import ROUTES, route_of
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query.stats import NAMES, RollingCounter, Stats
from query_core.errors import LauncherError
from query_core.ids import request_index
from query_core.models import (
    PICKUP_BUCKETS_S,
    RUN_BUCKETS_S,
    JobFigures,
    RunningStatement,
    now_millis,
)
from query_core.models import (
    Histogram as HistogramDoc,
)
from query_core.states import SessionState, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, job_beats, serve_http

Key = tuple[str, frozenset[tuple[str, str]]]


def scrape(client: httpx.Client) -> dict[Key, float]:
    """Every sample of ``/metrics``, by name and labels."""
    reply = client.get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    found: dict[Key, float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


@dataclass
class Figures:
    before: dict[Key, float]
    after: dict[Key, float]

    def moved(self, name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return self.after.get(key, 0.0) - self.before.get(key, 0.0)

    def now(self, name: str, **labels: str) -> float:
        return self.after.get((name, frozenset(labels.items())), 0.0)

    def moved_any(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        """Every label set of ``name`` that moved, and by how much."""
        keys = {k for k in (*self.before, *self.after) if k[0] == name}
        moved = {k[1]: self.after.get(k, 0.0) - self.before.get(k, 0.0) for k in keys}
        return {labels: v for labels, v in moved.items() if v}


class Watch:
    """Figures before and after a piece of work."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.before = scrape(client)
        self.stats_before = client.get("/_plugins/_sql/stats").json()

    def done(self) -> tuple[Figures, dict[str, int]]:
        stats = self.client.get("/_plugins/_sql/stats").json()
        return Figures(self.before, scrape(self.client)), {k: stats[k] - self.stats_before[k] for k in stats}


QUERY_ROUTE = ROUTES["query"]
SUBMIT_ROUTE = ROUTES["submit"]
LAUNCHER = "recordinglauncher"


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin()


@pytest.fixture
def http(plugin: Plugin) -> Iterator[httpx.Client]:
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        yield c


def post(http: httpx.Client, ds: str, query: str = "SELECT 1") -> str:
    reply = http.post(BASE, json={"datasource": ds, "lang": "sql", "query": query})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["queryId"])


# -- POST, GET, DELETE -----------------------------------------------------------------------------


def test_a_post_get_delete_cycle_moves_exactly_its_counters(http: httpx.Client, ds_name: str) -> None:
    watch = Watch(http)
    query_id = post(http, ds_name)
    assert http.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}
    assert http.delete(f"{BASE}/{query_id}").status_code == 204
    figures, stats = watch.done()

    count = "async_query_http_request_duration_seconds_count"
    assert figures.moved(count, route=SUBMIT_ROUTE, method="POST", status="2xx") == 1
    assert figures.moved(count, route=QUERY_ROUTE, method="GET", status="2xx") == 1
    assert figures.moved(count, route=QUERY_ROUTE, method="DELETE", status="2xx") == 1
    assert figures.moved_any("async_query_queries_submitted_total") == {
        frozenset({"datasource": ds_name, "kind": "interactive"}.items()): 1
    }
    assert figures.moved_any("async_query_queries_finished_total") == {
        frozenset({"datasource": ds_name, "kind": "interactive", "state": "cancelled"}.items()): 1
    }
    assert figures.moved_any("async_query_jobs_started_total") == {
        frozenset({"datasource": ds_name, "type": "interactive", "launcher": LAUNCHER}.items()): 1
    }
    assert figures.moved_any("async_query_launcher_call_duration_seconds_count") == {
        frozenset({"launcher": LAUNCHER, "operation": "start", "outcome": "ok"}.items()): 1
    }
    # the session's slot, the session, the statement and the submitter's usage (its first
    # statement) are created; nothing failed or was retried
    assert figures.moved("async_query_index_calls_total", operation="create", outcome="2xx") == 4
    assert not {labels for labels in figures.moved_any("async_query_index_calls_total") if ("outcome", "2xx") not in labels}
    assert not figures.moved_any("async_query_index_retries_total")
    # the reference's names, cumulative ones
    assert stats["async_query_create_api_request_count"] == 1
    assert stats["async_query_get_api_request_count"] == 1
    assert stats["async_query_cancel_api_request_count"] == 1
    assert not any(v for k, v in stats.items() if "failed" in k)


def test_the_get_path_s_cache_lookups_are_counted(http: httpx.Client, ds_name: str) -> None:
    query_id = post(http, ds_name)
    assert http.delete(f"{BASE}/{query_id}").status_code == 204
    watch = Watch(http)
    for _ in range(3):  # a finished reply: read once, then from the reply cache
        assert http.get(f"{BASE}/{query_id}").json() == {"status": "CANCELLED"}
    figures, _ = watch.done()
    assert figures.moved("async_query_cache_lookups_total", cache="replies", result="hit") == 2
    assert figures.moved("async_query_cache_lookups_total", cache="replies", result="miss") >= 1


def test_labels_are_route_templates_never_ids(http: httpx.Client, ds_name: str) -> None:
    query_id = post(http, ds_name)
    http.get(f"{BASE}/{query_id}")
    http.get(f"{BASE}/{query_id}/extra")
    http.get("/_plugins/_query/_datasources/no-such-datasource")
    text = http.get("/metrics").text
    assert query_id not in text and "no-such-datasource" not in text
    routes = set(re.findall(r'route="([^"]*)"', text))
    assert routes <= {*ROUTES.values(), "other"}
    assert {QUERY_ROUTE, "other", ROUTES["datasource"]} <= routes


def test_every_route_of_the_app_is_counted_under_its_own_template(plugin: Plugin) -> None:
    def paths_of(routes: list[Any]) -> set[str]:
        found: set[str] = set()
        for route in routes:
            included = getattr(route, "original_router", None)  # an included router (no prefix here)
            found |= paths_of(included.routes) if included is not None else {getattr(route, "path", "")}
        return found

    paths = paths_of(create_app(plugin).routes)
    mine = {p for p in paths if p.startswith(("/_plugins", "/metrics"))}
    assert mine | {ROUTES["console"]} == set(ROUTES.values())
    console = {p for p in paths if p.startswith("/console")}  # the console's endpoints: one route
    assert console and all(route_of(p) == ROUTES["console"] for p in console)
    for template in mine:
        assert route_of(template.replace("{query_id}", "abcd").replace("{name}", "ds1")) == template


# -- failures -------------------------------------------------------------------------------------


class FailingLauncher(RecordingLauncher):
    def start(self, request: JobRequest) -> str:
        raise LauncherError("cannot start spark-submit: no such file")


def test_a_failed_post_and_a_missing_query_are_counted_as_system_and_client_errors(
    make_plugin: PluginFactory, ds_name: str
) -> None:
    plugin = make_plugin(FailingLauncher())
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http:
        watch = Watch(http)
        reply = http.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT 1"})
        assert reply.status_code == 500
        assert http.get(f"{BASE}/no-such-query").status_code in (400, 404)
        figures, stats = watch.done()
    count = "async_query_http_request_duration_seconds_count"
    assert figures.moved(count, route=SUBMIT_ROUTE, method="POST", status="5xx") == 1
    assert figures.moved_any("async_query_launcher_call_duration_seconds_count") == {
        frozenset({"launcher": "failinglauncher", "operation": "start", "outcome": "error"}.items()): 1
    }
    assert not figures.moved_any("async_query_jobs_started_total")
    assert not figures.moved_any("async_query_queries_submitted_total")
    assert stats["async_query_create_api_request_count"] == 1
    assert stats["async_query_create_api_failed_request_count_syserr"] == 1
    assert stats["async_query_get_api_failed_request_count_cuserr"] == 1
    assert stats["async_query_create_api_failed_request_count_cuserr"] == 0


def test_a_session_death_is_confirmed_by_one_describe(make_plugin: PluginFactory, store: Store, ds_name: str) -> None:
    launcher = RecordingLauncher(state=JobRunState.FAILED)
    plugin = make_plugin(launcher)
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http:
        query_id = post(http, ds_name)
        session_id = plugin.reads.session_of_query.peek(query_id)
        assert session_id is not None
        session = store.sessions.get(ds_name, session_id)
        assert session is not None
        # the job claimed it, then went silent ten minutes ago
        job_beats(store, session, 600_000, heartbeat_interval_millis=1_000)
        watch = Watch(http)
        for _ in range(3):
            assert http.get(f"{BASE}/{query_id}").json()["status"] == "FAILED"
        figures, _ = watch.done()
    assert launcher.described == ["job-1"]
    assert figures.moved_any("async_query_launcher_call_duration_seconds_count") == {
        frozenset({"launcher": LAUNCHER, "operation": "describe", "outcome": "ok"}.items()): 1
    }
    assert figures.moved_any("async_query_sessions_ended_by_service_total") == {
        frozenset({"datasource": ds_name, "type": "interactive", "state": "dead"}.items()): 1
    }
    assert figures.moved_any("async_query_queries_finished_total") == {
        frozenset({"datasource": ds_name, "kind": "interactive", "state": "failed"}.items()): 1
    }


# -- a refresh job, played through its documents ---------------------------------------------------

REFRESH = "REFRESH SKIPPING INDEX ON local.default.http_logs"


def figures_of(
    statements: dict[str, int],
    rows_read: int = 0,
    calls: int = 0,
    accelerated: dict[str, int] | None = None,
    skipped: int = 0,
) -> JobFigures:
    pickup = [0] * (len(PICKUP_BUCKETS_S) + 1)
    run = [0] * (len(RUN_BUCKETS_S) + 1)
    done = sum(statements.values())
    pickup[PICKUP_BUCKETS_S.index(0.5)] = done  # picked up in 0.3 s
    run[RUN_BUCKETS_S.index(2.5)] = done  # ran 2 s
    return JobFigures(
        statements=statements,
        pickup=HistogramDoc(counts=pickup, sum=0.3 * done),
        run=HistogramDoc(counts=run, sum=2.0 * done),
        rows_read=rows_read,
        bytes_read=rows_read * 20,
        opensearch_calls={"2xx": calls},
        accelerated_queries=accelerated or {},
        files_skipped=skipped,
    )


def test_a_refresh_job_moves_exactly_its_counters_once(
    plugin: Plugin, http: httpx.Client, store: Store, ds_name: str
) -> None:
    index = request_index(ds_name)
    feed = plugin.metrics_worker
    feed.run_once()  # the service's first round, at its start
    query_id = post(http, ds_name, REFRESH)
    session_id = plugin.reads.session_of_query.peek(query_id)
    assert session_id is not None
    store.index.refresh(index)
    watch = Watch(http)
    feed.run_once()
    waiting, _ = watch.done()
    assert waiting.now("async_query_sessions", datasource=ds_name, type="batch", state="not_started") == 1

    # the job: claims the session, starts the statement, beats with its figures, succeeds, ends
    job = store.bound_to(index)  # the job's own repositories, as in its process
    session = job.sessions.get(ds_name, session_id)
    statement = job.statements.get(ds_name, query_id)
    assert session is not None and statement is not None
    claimed = job.sessions.claim(
        session,
        session.doc.job_id,
        running_statements=[RunningStatement(query_id=query_id, start_time=now_millis())],
        metrics=figures_of({}, calls=3, accelerated={"skipping": 1}, skipped=10),
    )
    assert claimed is not None
    session = claimed
    running = job.statements.start(statement)
    assert running is not None
    store.index.refresh(index)
    feed.run_once()
    job.statements.settle(running, StatementState.SUCCESS)
    end_figures = figures_of({"success": 1}, rows_read=100, calls=7, accelerated={"skipping": 2, "covering": 1}, skipped=40)
    job.sessions.end(session, SessionState.DEAD, metrics=end_figures)
    store.index.refresh(index)
    feed.run_once()
    feed.run_once()  # found again: nothing counted twice
    figures, stats = watch.done()

    labels = {"datasource": ds_name, "kind": "batch"}
    assert figures.moved_any("async_query_queries_finished_total") == {frozenset({**labels, "state": "success"}.items()): 1}
    assert figures.moved("async_query_statement_pickup_seconds_count", **labels) == 1
    assert figures.moved("async_query_statement_pickup_seconds_bucket", **labels, le="0.25") == 0
    assert figures.moved("async_query_statement_pickup_seconds_bucket", **labels, le="0.5") == 1
    assert figures.moved("async_query_statement_pickup_seconds_sum", **labels) == pytest.approx(0.3)
    assert figures.moved("async_query_statement_run_seconds_count", **labels) == 1
    assert figures.moved("async_query_statement_run_seconds_sum", **labels) == pytest.approx(2.0)
    job_labels = {"datasource": ds_name, "type": "batch"}
    assert figures.moved("async_query_job_rows_total", **job_labels, direction="read") == 100
    assert figures.moved("async_query_job_bytes_total", **job_labels, direction="read") == 2000
    assert figures.moved_any("async_query_job_index_calls_total") == {frozenset({**job_labels, "outcome": "2xx"}.items()): 7}
    assert figures.moved("async_query_accelerated_queries_total", datasource=ds_name, kind="skipping") == 2
    assert figures.moved("async_query_accelerated_queries_total", datasource=ds_name, kind="covering") == 1
    assert figures.moved("async_query_files_skipped_total", datasource=ds_name) == 40
    assert figures.now("async_query_sessions", datasource=ds_name, type="batch", state="not_started") == 0
    assert figures.now("async_query_sessions", datasource=ds_name, type="batch", state="running") == 0
    assert stats["async_query_create_api_request_count"] == 0


def test_a_process_that_takes_over_the_figures_counts_only_what_comes_after(
    plugin: Plugin, store: Store, ds_name: str
) -> None:
    index = request_index(ds_name)
    one, two = MetricsWorker(store, 15, owner="one"), MetricsWorker(store, 15, owner="two")
    one.run_once()
    submitted = plugin.service.submit(SubmitRequest(ds_name, "sql", REFRESH))
    session = store.sessions.get(ds_name, submitted.session_id)
    assert session is not None
    store.sessions.claim(session, session.doc.job_id, metrics=figures_of({"success": 1}, calls=5))
    store.index.refresh(index)
    labels = {"datasource": ds_name, "kind": "batch", "state": "success"}
    before = _value("async_query_queries_finished_total", labels)
    one.run_once()
    assert _value("async_query_queries_finished_total", labels) == before + 1
    # the lease passes to another process (this one's renewal expires at once)
    one.lease.lease_ms = -1
    one.run_once()
    two.run_once()  # takes over: notes the figures so far, counts nothing
    assert two.feed.active
    assert _value("async_query_queries_finished_total", labels) == before + 1
    current = store.sessions.get(ds_name, submitted.session_id)
    assert current is not None
    store.sessions.beat(current, metrics=figures_of({"success": 2}, calls=9))
    store.index.refresh(index)
    two.run_once()
    one.run_once()  # no longer the holder: counts nothing
    assert not one.feed.active
    assert _value("async_query_queries_finished_total", labels) == before + 2


def _value(name: str, labels: dict[str, str]) -> float:
    body, _ = metrics.exposition()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


# -- the reference's stats -------------------------------------------------------------------------

#: The reference's names (its ``MetricName``), but ``default``, which it never shows.
REFERENCE_NAMES = {
    "request_total", "request_count", "failed_request_count_syserr", "failed_request_count_cuserr",
    "failed_request_count_cb", "default_cursor_request_total", "default_cursor_request_count",
    "circuit_breaker", "ppl_request_total", "ppl_request_count", "ppl_failed_request_count_syserr",
    "ppl_failed_request_count_cuserr", "datasource_create_request_count", "datasource_get_request_count",
    "datasource_put_request_count", "datasource_patch_request_count", "datasource_delete_request_count",
    "datasource_failed_request_count_syserr", "datasource_failed_request_count_cuserr",
    "async_query_create_api_request_count", "async_query_get_api_request_count",
    "async_query_cancel_api_request_count", "async_query_get_api_failed_request_count_syserr",
    "async_query_get_api_failed_request_count_cuserr", "async_query_create_api_failed_request_count_syserr",
    "async_query_create_api_failed_request_count_cuserr", "async_query_cancel_api_failed_request_count_syserr",
    "async_query_cancel_api_failed_request_count_cuserr", "emr_start_job_request_failure_count",
    "emr_get_job_request_failure_count", "emr_cancel_job_request_failure_count",
    "emr_streaming_jobs_creation_count", "emr_interactive_jobs_creation_count", "emr_batch_jobs_creation_count",
    "streaming_job_housekeeper_task_failure_count",
}  # fmt: skip


def test_the_stats_have_the_reference_s_names_and_shape(http: httpx.Client) -> None:
    assert set(NAMES) == REFERENCE_NAMES
    for path in ("/_plugins/_sql/stats", "/_plugins/_ppl/stats"):
        for method in ("GET", "POST"):
            reply = http.request(method, path)
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert set(body) == REFERENCE_NAMES
            assert all(isinstance(v, int) for v in body.values())


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_rolling_counter_shows_the_last_whole_interval() -> None:
    clock = Clock()
    counter = RollingCounter(window_s=3600, interval_s=60, clock=clock)
    counter.add(3)
    assert counter.value() == 0  # this interval is not over
    clock.now += 60
    counter.add()
    assert counter.value() == 3
    clock.now += 60
    assert counter.value() == 1
    clock.now += 120
    assert counter.value() == 0


def test_the_datasource_api_and_jobs_feed_the_rolling_stats(plugin: Plugin, ds_name: str) -> None:
    clock = Clock()
    kept, stats = metrics.stats, Stats(clock=clock)
    metrics.stats = plugin.stats = stats
    try:
        with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, verify=CLIENT_SSL) as client:
            assert client.get(f"/_plugins/_query/_datasources/{ds_name}").status_code == 200
            assert client.get("/_plugins/_query/_datasources/missing").status_code in (400, 404)
            post(client, ds_name)
            assert client.get("/_plugins/_sql/stats").json()["datasource_get_request_count"] == 0
            clock.now += 60
            shown = client.get("/_plugins/_sql/stats").json()
    finally:
        metrics.stats = kept
    assert shown["datasource_get_request_count"] == 2
    assert shown["datasource_failed_request_count_cuserr"] == 1
    assert shown["datasource_failed_request_count_syserr"] == 0
    assert shown["emr_interactive_jobs_creation_count"] == 1
    assert shown["emr_batch_jobs_creation_count"] == 0
    clock.now += 60
    assert stats.snapshot()["emr_interactive_jobs_creation_count"] == 0


# -- pieces ------------------------------------------------------------------------------------------


def test_added_observations_are_what_observing_them_gives() -> None:
    """``add_histogram`` reaches into prometheus_client's histogram: held to ``observe`` here."""
    registry = CollectorRegistry()
    observed = Histogram("observed_seconds", "", ["a"], buckets=RUN_BUCKETS_S, registry=registry)
    added = Histogram("added_seconds", "", ["a"], buckets=RUN_BUCKETS_S, registry=registry)
    values = [0.01, 0.3, 0.3, 7.0, 4000.0]
    counts = [0] * (len(RUN_BUCKETS_S) + 1)
    for v in values:
        observed.labels("x").observe(v)
        counts[bisect.bisect_left(RUN_BUCKETS_S, v)] += 1
    metrics.add_histogram(added, ("x",), HistogramDoc(counts=counts, sum=sum(values)))
    def samples(histogram: Histogram, name: str) -> list[tuple[str, dict[str, str], float]]:
        [family] = histogram.collect()
        found = [(s.name.removeprefix(name), s.labels, s.value) for s in family.samples]
        return [s for s in found if s[0] != "_seconds_created"]

    assert samples(observed, "observed") == samples(added, "added")
    assert len(samples(added, "added")) == len(RUN_BUCKETS_S) + 3  # buckets, +Inf, count, sum
