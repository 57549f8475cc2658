"""Streaming sessions (auto-refreshed Flint indexes) with real jobs: freshness, heartbeat writes
and the time to stop a stream.

``python -m bench.streaming [--quick] [--out PATH] [--keep]``: the service runs in this process
(its REST API on a uvicorn thread, local ``spark-submit`` jobs on ``local[2]``), with a Hive
Metastore shared by its jobs and a real OpenSearch node (or ``OPENSEARCH_URL``). A parquet table
is created and filled from an interactive session over the REST API; a covering index on it is
created with ``auto_refresh = true, refresh_interval = '1 second'``, which starts a streaming job.
The service's heartbeat settings are its defaults (``heartbeat_streaming_ms`` 10 s,
``stream_check_ms`` 1 s, ``stream_stop_timeout_s`` 60 s). Then, in this order:

* **heartbeat writes, no inserts**: the streaming session document's ``_version`` delta over a
  window (60 s; ``--quick`` 20 s) that opens on a heartbeat and closes on the one nearest that
  long after (both seen by polling the document every 50 ms), per minute of that span; the
  micro-batches run meanwhile from the beats' ``streamProgress.batches``;
* **freshness lag**: N single-row INSERTs (20; ``--quick`` 5), one after another: from the moment
  the INSERT's GET answers ``SUCCESS`` (polled every 20 ms) to the row being found in the index
  by a term query on its unique value (polled every 50 ms);
* **heartbeat writes, inserts every second**: as above, while a thread INSERTs a row every second
  (one micro-batch each): the writes per minute must not grow with the micro-batches; then the
  bench waits until the last row is searchable (the stream has caught up);
* **stop**: M cycles (5; ``--quick`` 2) of ``ALTER INDEX ... WITH (auto_refresh = false)``: from
  just before the POST to both the streaming session ``dead`` (read by id every 50 ms) and every
  process of the job's process group gone; between cycles ``ALTER ... WITH (auto_refresh = true)``
  starts the stream again (its time to ``SUCCESS`` is reported too). Stops that needed the
  launcher's cancel are counted from ``service.stream_stopper.cancelled`` (target 0);
* **dead stream**: K cycles (2) of a running stream (started by ``ALTER ... WITH
  (auto_refresh = true)``, then ``RECOVER INDEX JOB``) whose job's process group is killed with
  ``kill -9`` just after a steady heartbeat (the worst moment: the session stays fresh for the
  longest): from the kill to the index's state document ``failed`` (read by id every 50 ms),
  with only the stream watcher running (no housekeeping sweep), at the default staleness (3 missed
  beats of 10 s). Target: within 60 s.

Every wait has a deadline: a stream that does not start, a row that never shows, a stop that never
ends is a clear error naming the job's log (``<data dir>/logs/<session id>.log``, its tail
printed), not a hang. Run it alone, under the Spark lock: ``flock /tmp/spark.lock``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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
from bench.report import Figure, Target, close_report, new_report, print_report
from bench.sim import client_of
from bench.stats import percentile, summary
from query_core.flint import latest_id
from query_core.ids import request_index
from query_core.models import SessionDoc
from query_core.states import FlintIndexState, SessionState, SessionType
from query_core.store import Query, Store, Term, quiet_driver_logs
from tests.faults.procs import group_members, job_pid

log = logging.getLogger(__name__)

SECTION = "streaming (local Spark)"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "streaming.json"
BASE = "/_plugins/_async_query"
DS = "local"
TABLE = f"{DS}.default.bench_stream_events"
INDEX = f"flint_{DS}_default_bench_stream_events_pages_index"
CREATE = f"CREATE INDEX pages ON {TABLE} (page, n) WITH (auto_refresh = true, refresh_interval = '1 second')"
ALTER_OFF = f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = false)"
ALTER_ON = f"ALTER INDEX pages ON {TABLE} WITH (auto_refresh = true)"
RECOVER = f"RECOVER INDEX JOB {INDEX}"
TERMINAL = frozenset({"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"})
#: The warm interactive session must outlive the whole run (no figure depends on it).
INACTIVITY_LIMIT_MS = 900_000

# Deadlines (seconds): nothing waits for ever.
#: A streaming job from POST to its statement SUCCESS: spark-submit, a JVM, the stream's start.
STREAM_START_S = 240.0
#: An interactive statement (the first one is the session's cold start).
STATEMENT_S = 180.0
#: A row from its INSERT's SUCCESS to the index.
FRESH_S = 90.0
#: A killed stream's index from the kill to ``failed`` (the target is 60 s).
KILLED_S = 180.0
#: Polling periods.
STATUS_POLL_S = 0.02
INDEX_POLL_S = 0.05
DOC_POLL_S = 0.05


class BenchError(RuntimeError):
    """The bench cannot go on (a stream did not start, a row never showed...): says why."""

    #: The run so far (its figures), attached by :func:`run_bench`.
    bench: StreamingBench | None = None


@dataclass(frozen=True)
class StreamingPlan:
    #: Sequential single-row INSERTs timed until searchable.
    inserts: int = 20
    #: Length of each heartbeat window (with no inserts, then with inserts every second).
    window_s: float = 60.0
    #: ALTER to manual refresh cycles timed until the stream has stopped.
    stop_cycles: int = 5
    #: The busy window INSERTs a row this often.
    insert_every_s: float = 1.0
    #: Streams killed with ``kill -9``, timed until their index is failed.
    kill_cycles: int = 2

    @classmethod
    def quick(cls) -> StreamingPlan:
        return cls(inserts=5, window_s=20.0, stop_cycles=2)


class Client:
    """The REST API, as a client uses it (one keep-alive connection per thread)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._local = threading.local()
        self._all: list[httpx.Client] = []

    @property
    def http(self) -> httpx.Client:
        http = getattr(self._local, "http", None)
        if http is None:
            http = self._local.http = httpx.Client(base_url=self.base_url, timeout=30)
            self._all.append(http)
        return http

    def submit(self, query: str, session_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"datasource": DS, "lang": "sql", "query": query}
        if session_id:
            body["sessionId"] = session_id
        reply = self.http.post(BASE, json=body)
        if reply.status_code != 201:
            raise BenchError(f"POST {query!r} answered {reply.status_code}: {reply.text[:500]}")
        return dict(reply.json())

    def get(self, query_id: str) -> dict[str, Any]:
        reply = self.http.get(f"{BASE}/{query_id}")
        if reply.status_code != 200:
            raise BenchError(f"GET {query_id} answered {reply.status_code}: {reply.text[:500]}")
        return dict(reply.json())

    def wait_terminal(self, query_id: str, timeout_s: float) -> tuple[dict[str, Any] | None, float]:
        """GET every 20 ms until the query is finished: (the reply, when it was seen), or (None,
        now) past the deadline."""
        deadline = time.perf_counter() + timeout_s
        while True:
            reply = self.get(query_id)
            seen = time.perf_counter()
            if reply.get("status") in TERMINAL:
                return reply, seen
            if seen >= deadline:
                return None, seen
            time.sleep(STATUS_POLL_S)

    def close(self) -> None:
        for http in self._all:
            http.close()


@dataclass
class Beat:
    """The streaming session document as one poll saw it."""

    version: int
    at: float
    batches: int
    doc: SessionDoc


@dataclass
class StreamingBench:
    plugin: Plugin
    client: Client
    plan: StreamingPlan
    #: The interactive session the table is written from.
    session_id: str = ""
    #: The running stream: its session and job.
    stream_session: str = ""
    stream_job: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)

    @property
    def store(self) -> Store:
        return self.plugin.store

    @property
    def data_dir(self) -> Path:
        return Path(self.plugin.settings.data_dir).resolve()

    # -- diagnostics ----------------------------------------------------------------------------

    def log_tail(self, session_id: str, lines: int = 40) -> str:
        path = self.data_dir / "logs" / f"{session_id}.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no job log at {path})"
        return f"last {len(text)} lines of {path}:\n" + "\n".join(text)

    def session_doc(self, session_id: str) -> SessionDoc | None:
        found = self.store.sessions.get(DS, session_id)
        return found.doc if found is not None else None

    def _failure(self, what: str, session_id: str) -> BenchError:
        doc = self.session_doc(session_id) if session_id else None
        state = f"session {session_id}: {doc.state.value}" if doc is not None else f"session {session_id or '?'}"
        error = f" ({doc.error})" if doc is not None and doc.error else ""
        progress = doc.stream_progress if doc is not None else None
        stream = f"; stream error: {progress.last_error}" if progress is not None and progress.last_error else ""
        tail = self.log_tail(session_id) if session_id else ""
        return BenchError(f"{what}\n{state}{error}{stream}\n{tail}")

    # -- statements -----------------------------------------------------------------------------

    def run_sql(self, query: str, timeout_s: float = STATEMENT_S) -> float:
        """Run ``query`` in the interactive session; when its GET first answered SUCCESS."""
        submitted = self.client.submit(query, self.session_id or None)
        self.session_id = str(submitted.get("sessionId") or self.session_id)
        reply, seen = self.client.wait_terminal(submitted["queryId"], timeout_s)
        if reply is None or reply["status"] != "SUCCESS":
            outcome = f"did not finish within {timeout_s:g} s" if reply is None else f"ended {reply}"
            raise self._failure(f"{query!r} {outcome}", self.session_id)
        return seen

    def insert(self, page: str, n: int) -> float:
        """One row; when its INSERT answered SUCCESS."""
        return self.run_sql(f"INSERT INTO {TABLE} VALUES (TIMESTAMP '2026-01-01 00:00:00', '{page}', {n})")

    def start_stream(self, query: str) -> float:
        """POST a streaming query and wait for its SUCCESS (its stream runs); seconds taken."""
        began = time.perf_counter()
        submitted = self.client.submit(query)
        query_id = str(submitted["queryId"])
        statement = self.store.statements.get(DS, query_id)
        session_id = statement.doc.session_id if statement is not None else ""
        session = self.session_doc(session_id) if session_id else None
        if session is None or session.session_type is not SessionType.STREAMING:
            found = "no session" if session is None else f"a {session.session_type.value} session"
            raise BenchError(f"{query!r} was not run as a streaming query: {found}")
        reply, seen = self.client.wait_terminal(query_id, STREAM_START_S)
        if reply is None or reply["status"] != "SUCCESS":
            outcome = f"did not start within {STREAM_START_S:g} s" if reply is None else f"ended {reply}"
            raise self._failure(f"the stream of {query!r} {outcome}", session_id)
        current = self.session_doc(session_id)
        if current is None or current.state is not SessionState.RUNNING:
            raise self._failure(f"{query!r} succeeded but its streaming session is not running", session_id)
        self.stream_session, self.stream_job = session_id, current.job_id
        return seen - began

    # -- the index and the session document ---------------------------------------------------

    def searchable(self, page: str) -> bool:
        return bool(self.store.index.search(INDEX, Query((Term("page", page),), size=1)))

    def wait_searchable(self, page: str) -> float:
        deadline = time.perf_counter() + FRESH_S
        while True:
            found = self.searchable(page)
            seen = time.perf_counter()
            if found:
                return seen
            if seen >= deadline:
                raise self._failure(
                    f"row {page!r} was not searchable in {INDEX} within {FRESH_S:g} s", self.stream_session
                )
            time.sleep(INDEX_POLL_S)

    def read_beat(self) -> Beat:
        found: Any = client_of(self.store).driver.get(index=request_index(DS), id=self.stream_session)
        seen = time.perf_counter()
        doc = SessionDoc.model_validate(found["_source"])
        batches = doc.stream_progress.batches if doc.stream_progress is not None else 0
        return Beat(int(found["_version"]), seen, batches, doc)

    def next_beat(self, after: Beat | None = None) -> Beat:
        """The first write of the streaming session document after ``after`` (or after now)."""
        first = after or self.read_beat()
        interval_s = self.plugin.settings.heartbeat_streaming_ms / 1000
        deadline = time.perf_counter() + 2 * interval_s + 15
        while True:
            beat = self.read_beat()
            if beat.version > first.version:
                return beat
            if beat.doc.state is not SessionState.RUNNING:
                raise self._failure("the streaming session ended during a heartbeat window", self.stream_session)
            if beat.at >= deadline:
                raise self._failure(
                    f"the streaming session was not written for {2 * interval_s + 15:g} s (its heartbeat stopped)",
                    self.stream_session,
                )
            time.sleep(DOC_POLL_S)

    # -- the measurements ---------------------------------------------------------------------

    def setup(self) -> None:
        began = time.perf_counter()
        self.run_sql(f"CREATE TABLE {TABLE} (ts TIMESTAMP, page STRING, n INT) USING parquet")
        self.details["table_created_s"] = round(time.perf_counter() - began, 1)
        print(f"   table created in {self.details['table_created_s']} s (a new session)", file=sys.stderr, flush=True)
        self.insert("/seed", 0)
        start_s = self.start_stream(CREATE)
        print(f"   stream started in {start_s:.1f} s", file=sys.stderr, flush=True)
        self.wait_searchable("/seed")
        self.details["stream_start_s"] = round(start_s, 1)
        self.figures.append(
            Figure(
                SECTION, "stream start (CREATE INDEX POST -> SUCCESS)", start_s, "s", note="spark-submit + JVM + stream"
            )
        )

    def heartbeat_window(self, busy: bool) -> dict[str, Any]:
        """The session document's writes from one heartbeat to the one nearest ``window_s`` later.

        The window opens on a write seen by polling; it closes on the first write after
        ``window_s`` minus half an interval, so that a beat due right at the window's end is not
        missed (or counted) by a few milliseconds' jitter: the span is a whole number of beats.
        """
        inserter = _Inserter(self, self.plan.insert_every_s) if busy else None
        half_interval_s = self.plugin.settings.heartbeat_streaming_ms / 2000
        start = self.next_beat()
        if inserter is not None:
            inserter.start()
        try:
            time.sleep(max(0.0, start.at + self.plan.window_s - half_interval_s - time.perf_counter()))
            end = self.next_beat()
        finally:
            if inserter is not None:
                inserter.stop()
        if inserter is not None and inserter.error is not None:
            raise inserter.error
        caught_up_s = 0.0
        if inserter is not None and inserter.count:
            # Let the stream catch up with the last row before anything else is measured: a stop
            # would otherwise meet (and wait for) a micro-batch in flight, in this job or in the
            # next one started from the checkpoint (its first micro-batch on a cold JVM: 6-9 s).
            stopped_at = time.perf_counter()
            caught_up_s = self.wait_searchable(f"/busy-{inserter.count - 1}") - stopped_at
        span = end.at - start.at
        writes = end.version - start.version
        return {
            "writes": writes,
            "span_s": round(span, 2),
            "writes_per_min": writes / span * 60,
            "micro_batches": end.batches - start.batches,
            "inserts": inserter.count if inserter is not None else 0,
            "caught_up_after_s": round(caught_up_s, 2),
            "interval_ms": end.doc.heartbeat_interval_millis,
            # What the beats that opened and closed the window reported.
            "progress": [b.doc.stream_progress.to_source() if b.doc.stream_progress else None for b in (start, end)],
        }

    def heartbeats(self, busy: bool) -> None:
        window = self.heartbeat_window(busy)
        key = "heartbeat_busy" if busy else "heartbeat_idle"
        self.details[key] = window
        label = f"inserts every {self.plan.insert_every_s:g} s" if busy else "no inserts"
        note = (
            f"{window['writes']} writes in {window['span_s']} s (beat to beat); "
            f"interval {window['interval_ms']} ms advertised"
        )
        if busy:
            note += f"; {window['inserts']} inserts"
        self.figures += [
            Figure(
                SECTION,
                f"heartbeat writes/min per streaming session, {label}",
                window["writes_per_min"],
                "writes/min",
                note=note,
            ),
            Figure(
                SECTION,
                f"micro-batches in that window, {label}",
                window["micro_batches"],
                "batches",
                note="streamProgress.batches delta",
            ),
        ]
        if busy and "heartbeat_idle" in self.details:
            idle = self.details["heartbeat_idle"]["writes_per_min"]
            ratio = window["writes_per_min"] / idle if idle else float("nan")
            self.details["heartbeat_busy_over_idle"] = ratio
            self.figures.append(
                Figure(
                    SECTION,
                    "heartbeat writes, busy / idle",
                    ratio,
                    "x",
                    Target("<=", 1.1),
                    note=f"{window['micro_batches']} vs {self.details['heartbeat_idle']['micro_batches']} micro-batches",
                )
            )

    def freshness(self) -> None:
        lags: list[float] = []
        round_trips: list[float] = []
        for i in range(self.plan.inserts):
            page = f"/fresh-{i}"
            posted = time.perf_counter()
            succeeded = self.insert(page, i + 1)
            lags.append((self.wait_searchable(page) - succeeded) * 1000)
            round_trips.append((succeeded - posted) * 1000)
        self.details["freshness_lag_ms"] = summary(lags)
        self.details["insert_round_trip_ms"] = summary(round_trips)
        self.figures += [
            Figure(SECTION, "freshness lag p50 (INSERT SUCCESS -> searchable)", percentile(lags, 50), "ms"),
            Figure(
                SECTION,
                "freshness lag p99",
                percentile(lags, 99),
                "ms",
                note=f"n={len(lags)}; index polled every {INDEX_POLL_S * 1000:g} ms; refresh_interval 1 s",
            ),
            Figure(
                SECTION,
                "INSERT round trip p50 (POST -> SUCCESS)",
                percentile(round_trips, 50),
                "ms",
                note="interactive session, one row",
            ),
        ]

    def stop_cycle(self) -> dict[str, Any]:
        """ALTER to manual refresh: from the POST to the session ended and the job's processes gone."""
        session_id, job_id = self.stream_session, self.stream_job
        pid = job_pid(self.data_dir, job_id)
        stopper = self.plugin.stream_stopper
        cancelled_before = stopper.cancelled
        timeout_s = self.plugin.settings.stream_stop_timeout_s + 60
        began = time.perf_counter()
        submitted = self.client.submit(ALTER_OFF)
        ended_at: float | None = None
        gone_at: float | None = None
        answered_at: float | None = None
        ended: SessionDoc | None = None
        reply: dict[str, Any] = {}
        # The three are watched together, each seen within one poll of when it happened.
        while ended_at is None or gone_at is None or answered_at is None:
            now = time.perf_counter()
            if ended_at is None:
                doc = self.session_doc(session_id)
                if doc is not None and doc.state in (SessionState.DEAD, SessionState.FAIL):
                    ended_at, ended = now, doc
            if gone_at is None and not group_members(pid):
                gone_at = now
            if answered_at is None:
                reply = self.client.get(submitted["queryId"])
                if reply.get("status") in TERMINAL:
                    answered_at = now
            if now - began > timeout_s:
                raise self._failure(
                    f"the stream did not stop within {timeout_s:g} s of ALTER (session ended: {ended_at is not None}, "
                    f"processes of group {pid} gone: {gone_at is not None}, ALTER finished: {answered_at is not None})",
                    session_id,
                )
            if ended_at is None or gone_at is None or answered_at is None:
                time.sleep(DOC_POLL_S)
        if reply.get("status") != "SUCCESS":
            raise self._failure(f"ALTER to manual refresh ended {reply}", session_id)
        assert ended is not None
        return {
            "stopped_s": max(ended_at, gone_at) - began,
            "session_ended_s": ended_at - began,
            "processes_gone_s": gone_at - began,
            "alter_success_s": answered_at - began,
            "session_state": ended.state.value,
            "session_error": ended.error,
            "cancelled": stopper.cancelled - cancelled_before,
            "job_log": self.stop_lines(session_id),
        }

    def stop_lines(self, session_id: str) -> list[str]:
        """What the job logged about stopping (kept with each cycle, to explain a slow one)."""
        path = self.data_dir / "logs" / f"{session_id}.log"
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        marks = ("stopping its stream", "stream of ", "still busy", "mid-batch", "ERROR")
        return [line[:300] for line in lines if any(mark in line for mark in marks)][-10:]

    def stops(self) -> None:
        cycles: list[dict[str, Any]] = []
        restarts: list[float] = []
        for cycle in range(self.plan.stop_cycles):
            if cycle:
                restarts.append(self.start_stream(ALTER_ON))
            cycles.append(self.stop_cycle())
            print(
                f"   stop {cycle + 1}/{self.plan.stop_cycles}: {cycles[-1]['stopped_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        self.details["stop_cycles"] = cycles
        self.details["restart_s"] = [round(r, 2) for r in restarts]
        stopped = [c["stopped_s"] for c in cycles]
        ended = [c["session_ended_s"] for c in cycles]
        gone = [c["processes_gone_s"] for c in cycles]
        alter = [c["alter_success_s"] for c in cycles]
        cancelled = sum(c["cancelled"] for c in cycles)
        not_dead = sum(1 for c in cycles if c["session_state"] != SessionState.DEAD.value)
        self.figures += [
            Figure(SECTION, "stop p50 (ALTER auto_refresh=false POST -> stream stopped)", percentile(stopped, 50), "s"),
            Figure(
                SECTION,
                "stop p99",
                percentile(stopped, 99),
                "s",
                note=(
                    f"n={len(stopped)}; session dead p50 {percentile(ended, 50):.2f} s, "
                    f"job processes gone p50 {percentile(gone, 50):.2f} s"
                ),
            ),
            Figure(SECTION, "ALTER auto_refresh=false POST -> SUCCESS p50", percentile(alter, 50), "s"),
            Figure(
                SECTION,
                "stops that needed the launcher's cancel",
                cancelled,
                "stops",
                Target("==", 0),
                note=f"of {len(cycles)}; sessions not ended dead: {not_dead}",
            ),
        ]
        if restarts:
            self.figures.append(
                Figure(
                    SECTION,
                    "restart p50 (ALTER auto_refresh=true POST -> SUCCESS)",
                    percentile(restarts, 50),
                    "s",
                    note=f"n={len(restarts)}; a new streaming job each",
                )
            )


    def kill_cycle(self, restart: str) -> dict[str, Any]:
        """Start the stream with ``restart``, kill its job's process group, and time the index's
        move to ``failed`` (the stream watcher alone at work)."""
        import signal

        self.start_stream(restart)
        session_id, job_id = self.stream_session, self.stream_job
        pid = job_pid(self.data_dir, job_id)
        # The worst moment: just after a steady beat (one that promises the next in a whole
        # streaming interval), so the session stays fresh for the longest.
        steady_ms = self.plugin.settings.heartbeat_streaming_ms
        beat = self.next_beat()
        while beat.doc.heartbeat_interval_millis != steady_ms:
            beat = self.next_beat(beat)
        deadline_s = KILLED_S
        killed_at = time.perf_counter()
        os.killpg(pid, signal.SIGKILL)
        while True:
            found = self.store.index_states.get(DS, latest_id(INDEX))
            now = time.perf_counter()
            if found is not None and found.doc.state is FlintIndexState.FAILED:
                break
            if now - killed_at > deadline_s:
                state = found.doc.state.value if found is not None else "gone"
                raise self._failure(f"the index was still {state} {deadline_s:g} s after kill -9 of its job", session_id)
            time.sleep(DOC_POLL_S)
        session = self.session_doc(session_id)
        return {
            "failed_s": now - killed_at,
            "killed_after_beat_s": killed_at - beat.at,
            "session_state": session.state.value if session is not None else "",
            "index_error": found.doc.error[:300],
        }

    def kills(self) -> None:
        watcher = self.plugin.stream_watcher
        watcher.start()
        try:
            cycles = [self.kill_cycle(ALTER_ON if n == 0 else RECOVER) for n in range(self.plan.kill_cycles)]
        finally:
            watcher.stop()
        self.details["kill_cycles"] = cycles
        failed = [c["failed_s"] for c in cycles]
        interval_ms = self.plugin.settings.heartbeat_streaming_ms
        self.figures.append(
            Figure(
                SECTION,
                "kill -9 of a streaming job -> index failed (max)",
                max(failed),
                "s",
                Target("<=", 60),
                note=(
                    f"n={len(failed)}: {', '.join(f'{f:.1f}' for f in failed)} s; killed just after a beat; stream "
                    f"watcher only, stale after {self.plugin.settings.stale_heartbeats:g} beats of "
                    f"{interval_ms / 1000:g} s"
                ),
            )
        )


class _Inserter:
    """INSERTs one row every ``every_s`` seconds (back to back when one takes longer) until stopped."""

    def __init__(self, bench: StreamingBench, every_s: float) -> None:
        self.bench = bench
        self.every_s = every_s
        self.count = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-streaming-inserts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=STATEMENT_S + 10)

    def _run(self) -> None:
        next_at = time.perf_counter()
        try:
            while not self._stop.is_set():
                self.bench.insert(f"/busy-{self.count}", self.count)
                self.count += 1
                next_at += self.every_s
                self._stop.wait(max(0.0, next_at - time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001 - handed to the bench's thread
            self.error = exc


# -- the system under test ---------------------------------------------------------------------------


@contextmanager
def system(work: Path, **overrides: Any) -> Iterator[tuple[Plugin, str]]:
    """The index, the metastore and the service on real HTTP (its settings the defaults, but
    ``overrides``); everything stopped after."""
    with ExitStack() as stack:
        index = stack.enter_context(index_node(work / "index"))
        began = time.perf_counter()
        home = work / "metastore"
        metastore = Metastore.start(home, home / "warehouse", files=work / "metastore-files")
        stack.callback(metastore.close)
        print(f"   metastore up in {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
        settings = Settings(**{"data_dir": work / "service", "inactivity_limit_ms": INACTIVITY_LIMIT_MS, **overrides})
        opensearch = index.config
        catalog = catalog_settings(home / "warehouse", metastore.uri)
        launcher = LocalLauncher(settings.data_dir, settings.cluster_name, "local[2]", catalog_conf=catalog)
        plugin = build_plugin(
            settings,
            Store.connect(opensearch),
            DatasourceRegistry([local_datasource(DS)]),
            {"local": launcher},
            opensearch,
        )
        stack.callback(_kill_leftover_jobs, Path(settings.data_dir))
        stack.callback(plugin.close)
        base_url = stack.enter_context(serve_app(create_app(plugin)))
        yield plugin, base_url


def _kill_leftover_jobs(data_dir: Path) -> None:
    """Any job still alive after the service closed (its launcher stops them): killed by group."""
    import signal

    jobs = data_dir.resolve() / "jobs"
    for pid_file in jobs.glob("*.pid") if jobs.is_dir() else []:
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if group_members(pid):
            log.warning("job %s (pgid %d) outlived the service: killing it", pid_file.stem, pid)
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def run_bench(work: Path, plan: StreamingPlan, step: Callable[[str], None] | None = None) -> StreamingBench:
    """Every measurement in order; the bench (figures and details so far) is attached to a
    :class:`BenchError` as ``bench`` when one stops the run."""
    say = step or (lambda _: None)
    with system(work) as (plugin, base_url):
        client = Client(base_url)
        bench = StreamingBench(plugin, client, plan)
        bench.details["settings"] = {
            "heartbeat_streaming_ms": plugin.settings.heartbeat_streaming_ms,
            "stream_check_ms": plugin.settings.stream_check_ms,
            "stream_stop_timeout_s": plugin.settings.stream_stop_timeout_s,
            "index_state_id": latest_id(INDEX),
        }
        try:
            for name, action in [
                ("setup: table, rows, stream", bench.setup),
                (f"heartbeat window, no inserts ({plan.window_s:g} s)", lambda: bench.heartbeats(busy=False)),
                (f"freshness ({plan.inserts} inserts)", bench.freshness),
                (f"heartbeat window, inserts every {plan.insert_every_s:g} s", lambda: bench.heartbeats(busy=True)),
                (f"stop cycles ({plan.stop_cycles})", bench.stops),
                (f"kill cycles ({plan.kill_cycles})", bench.kills),
            ]:
                began = time.perf_counter()
                say(name)
                action()
                took = time.perf_counter() - began
                bench.details.setdefault("step_seconds", {})[name] = round(took, 1)
                say(f"   {took:.1f} s")
        except BenchError as exc:
            exc.bench = bench
            raise
        finally:
            client.close()
        return bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts and 20 s windows (about 2-3 minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (job logs) and print it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    plan = StreamingPlan.quick() if args.quick else StreamingPlan()
    report = new_report(quick=args.quick, plan=plan.__dict__)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="aq-bench-streaming-"))
    work.chmod(0o711)  # run as root, jobs run as the job user, who passes through to its places
    failure: BenchError | None = None
    bench: StreamingBench | None = None
    try:
        bench = run_bench(
            work,
            plan,
            lambda text: print(text if text.startswith(" ") else f"== {text} ...", file=sys.stderr, flush=True),
        )
    except BenchError as exc:
        failure = exc
        bench = exc.bench
    finally:
        if args.keep:
            print(f"data directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if bench is not None:
        report.add(bench.figures)
        report.details[SECTION] = bench.details
    if failure is not None:
        report.skipped[SECTION] = f"failed: {str(failure).splitlines()[0]}"[:300]
        report.details["error"] = str(failure)
    close_report(report, started, args.out)
    return print_report(report, args.out, failure)


if __name__ == "__main__":
    sys.exit(main())
