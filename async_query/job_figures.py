"""The jobs' figures, from their sessions' documents into the plugin's metrics (``docs/metrics.md``).

A job writes its cumulative figures with every heartbeat and with its session's end
(:class:`query_core.models.JobFigures`); it makes no write of its own for them. Every round, the
process holding the deployment's metrics lease searches the sessions written since a little before
its last round, and adds to its counters what each job's figures grew by since it last saw them
(kept per session and job). So a figure is counted once, however many heartbeats repeat it, and
by one process of the deployment: the lease holder's ``/metrics`` has them (sum over instances).

When a process takes the lease (a start, a handover), its first round only takes note of the
figures so far: they were counted before, by the previous holder, or belong to jobs older than
this process's counters. The same round sets the gauges of live sessions and stream lag.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from async_query import metrics
from async_query.dispatch import kind_of_session
from async_query.workers import Lease, Worker
from query_core.errors import AsyncQueryError
from query_core.models import Histogram, JobFigures, SessionDoc, Versioned, now_millis
from query_core.states import SessionState, is_terminal
from query_core.store import Range, Store

log = logging.getLogger(__name__)

#: Sessions written this long before the last round are searched again (a search lags writes by
#: a refresh, and a job's clock may differ from this host's a little).
OVERLAP_MS = 60_000
#: A session not found by any round for this long is forgotten (deleted, or its job long silent).
FORGET_MS = 24 * 3600 * 1000
#: At most this many sessions per search.
SEARCH_SIZE = 10_000
LIVE = [SessionState.NOT_STARTED, SessionState.RUNNING]


@dataclass
class _Seen:
    figures: JobFigures
    state: SessionState
    updated: int
    found: int


def _grown(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: value - before.get(key, 0) for key, value in now.items() if value > before.get(key, 0)}


def _histogram_growth(now: Histogram, before: Histogram) -> Histogram | None:
    if not now.counts or now.counts == before.counts:
        return None
    old = before.counts if len(before.counts) == len(now.counts) else [0] * len(now.counts)
    return Histogram(counts=[max(0, n - o) for n, o in zip(now.counts, old, strict=True)], sum=max(0.0, now.sum - before.sum))


class JobFigureFeed:
    """Differences the jobs' cumulative figures per session and adds the growth to the metrics."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._since = 0
        #: False until a round has taken note of the figures so far (see the module's doc).
        self.active = False
        self._gauged: set[tuple[str, str, str]] = set()
        self._lagged: set[str] = set()

    def forget(self) -> None:
        """This process no longer holds the lease: drop what it saw, and zero its gauges."""
        self._seen.clear()
        self.active = False
        self._set_gauges({}, {})

    def round(self, store: Store) -> None:
        """One round: search the sessions written lately, count what their figures grew by."""
        now = now_millis()
        since = (self._since if self.active else now) - OVERLAP_MS
        written = store.sessions.search(None, Range("lastUpdateTime", gte=since), size=SEARCH_SIZE)
        live = store.sessions.find(None, LIVE, size=SEARCH_SIZE)
        for session in [*written, *live]:
            self._feed(session.doc, now, count=self.active)
        self._prune(now, since)
        self._since = now
        self.active = True
        self._set_gauges(_live_counts(live), _stream_lags(live))

    def _feed(self, doc: SessionDoc, now: int, count: bool) -> None:
        key = (doc.session_id, doc.job_id)
        seen = self._seen.get(key)
        figures = doc.metrics or JobFigures()
        if seen is not None and seen.updated > doc.last_update_time:
            seen.found = now  # an older copy (the search lags): nothing new
            return
        if count:
            self._count(doc, figures, seen.figures if seen is not None else JobFigures())
        self._seen[key] = _Seen(figures, doc.state, doc.last_update_time, now)

    def _count(self, doc: SessionDoc, now: JobFigures, before: JobFigures) -> None:
        datasource, session_type = doc.data_source_name, doc.session_type.value
        kind = kind_of_session(doc.session_type).value
        for state, n in _grown(now.statements, before.statements).items():
            metrics.query_finished(datasource, kind, state, n)
        for histogram, grown in (
            (metrics.PICKUP_SECONDS, _histogram_growth(now.pickup, before.pickup)),
            (metrics.RUN_SECONDS, _histogram_growth(now.run, before.run)),
        ):
            if grown is not None:
                metrics.add_histogram(histogram, (datasource, kind), grown)
        for direction, rows, size in (
            ("read", now.rows_read - before.rows_read, now.bytes_read - before.bytes_read),
            ("written", now.rows_written - before.rows_written, now.bytes_written - before.bytes_written),
        ):
            if rows > 0:
                metrics.JOB_ROWS.labels(datasource, session_type, direction).inc(rows)
            if size > 0:
                metrics.JOB_BYTES.labels(datasource, session_type, direction).inc(size)
        for outcome, n in _grown(now.opensearch_calls, before.opensearch_calls).items():
            metrics.JOB_INDEX_CALLS.labels(datasource, session_type, outcome).inc(n)
        if now.micro_batches > before.micro_batches:
            metrics.STREAM_BATCHES.labels(datasource).inc(now.micro_batches - before.micro_batches)
        for index_kind, n in _grown(now.accelerated_queries, before.accelerated_queries).items():
            metrics.ACCELERATED_QUERIES.labels(datasource, index_kind).inc(n)
        if now.files_skipped > before.files_skipped:
            metrics.FILES_SKIPPED.labels(datasource).inc(now.files_skipped - before.files_skipped)

    def _prune(self, now: int, since: int) -> None:
        """Forget ended sessions no search can find any more, and any not found for long."""
        for key, seen in list(self._seen.items()):
            if (is_terminal(seen.state) and seen.updated < since) or now - seen.found > FORGET_MS:
                del self._seen[key]

    def _set_gauges(self, sessions: dict[tuple[str, str, str], int], lags: dict[str, float]) -> None:
        """Set the gauges of every label set seen so far (those gone to 0)."""
        for labels in self._gauged | set(sessions):
            metrics.SESSIONS.labels(*labels).set(sessions.get(labels, 0))
        self._gauged |= set(sessions)
        for datasource in self._lagged | set(lags):
            metrics.STREAM_LAG.labels(datasource).set(lags.get(datasource, 0.0))
        self._lagged |= set(lags)


def _live_counts(live: list[Versioned[SessionDoc]]) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    for session in live:
        doc = session.doc
        key = (doc.data_source_name, doc.session_type.value, doc.state.value)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _stream_lags(live: list[Versioned[SessionDoc]]) -> dict[str, float]:
    lags: dict[str, float] = {}
    for session in live:
        doc = session.doc
        if doc.metrics is not None and doc.metrics.stream_lag_millis > 0:
            lag = doc.metrics.stream_lag_millis / 1000
            lags[doc.data_source_name] = max(lags.get(doc.data_source_name, 0.0), lag)
    return lags


class MetricsWorker(Worker):
    """The plugin's metrics round, every ``interval_s``: copy the requests' and caches' counts,
    refresh the health gauges, and, holding the deployment's metrics lease, feed the jobs' figures."""

    name = "metrics"

    def __init__(self, store: Store, interval_s: float, owner: str | None = None, health: object = None) -> None:
        super().__init__(interval_s)
        self.store = store
        self.feed = JobFigureFeed()
        self.lease = Lease(store, "metrics-lease", int(interval_s * 3000), owner)
        self.health = health

    def run_once(self) -> None:
        metrics.flush()
        refresh = getattr(self.health, "report", None)
        if refresh is not None:
            refresh()
        try:
            if not self.lease.acquire():
                if self.feed.active:
                    self.feed.forget()
                return
            self.feed.round(self.store)
        except AsyncQueryError as exc:
            log.warning("metrics round failed: %s", exc)
