"""Sections that need the real job (local Spark through the service's launcher).

All of them run in one warm interactive session, opened by the first POST (its cold start is
reported too). Documents are read directly from the index by id (real-time gets):

* pickup: POST sent -> the statement document seen ``running``, polled every ~1 ms;
* warm ``SELECT 1``: POST sent -> a GET answering ``SUCCESS`` (GET polled every 2 ms);
* writes per statement: each document's ``_version`` (1 on create, +1 per write) for the statement
  and its result, the session document's ``_version`` delta over the batch, and the index server's
  own ``index_total`` counter as a cross-check;
* cancel: DELETE of a running long statement (its Spark task started) -> the next statement of the
  session, queued behind it, seen ``running`` (the job only takes it once the cancelled Spark work
  has stopped);
* heartbeat writes per minute: the session document's ``_version`` delta over a window with 0, 1
  and 8 statements in the session (the job runs one at a time: "8" is 1 running + 7 queued).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.report import Figure, Target
from bench.sim import doc_version, index_writes, poll_until
from bench.stats import percentile, summary
from query_core.ids import request_index
from query_core.models import SessionDoc
from query_core.states import StatementState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

BASE = "/_plugins/_async_query"
SECTION = "job (local Spark)"
#: A statement that keeps Spark's tasks busy until cancelled: a count over a cross join of two
#: ranges, which runs in tasks, where a job-group cancel interrupts it, and needs no function a
#: datasource's validation refuses. About 2 minutes on 2 cores, so a cancel that does not work
#: costs minutes, not the bench.
LONG_QUERY = "SELECT count(*) AS n FROM range({rows}) a, range({rows}) b"
LONG_ROWS = 270_000
#: How long the long statement may take to leave the queue after its cancel (it runs about this long).
LONG_S = 120


@dataclass(frozen=True)
class SparkPlan:
    pickups: int = 40
    round_trips: int = 40
    cancels: int = 10
    running_window_s: float = 20.0
    queued_window_s: float = 20.0
    #: Two idle heartbeats (30 s apart by default) fit in it exactly.
    idle_window_s: float = 60.0

    @classmethod
    def quick(cls) -> SparkPlan:
        return cls(pickups=8, round_trips=8, cancels=3, running_window_s=6.0, queued_window_s=6.0, idle_window_s=30.0)


@dataclass
class IdleWindow:
    version: int
    started: float


@dataclass
class SparkBench:
    base_url: str
    store: Store
    datasource: str
    result_index: str
    plan: SparkPlan
    session_id: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=30)
        self.index = request_index(self.datasource)

    def close(self) -> None:
        self.http.close()

    # -- plumbing ---------------------------------------------------------------------------

    def post(self, query: str, new_session: bool = False) -> str:
        body: dict[str, Any] = {"datasource": self.datasource, "lang": "sql", "query": query}
        if not new_session:
            body["sessionId"] = self.session_id
        reply = self.http.post(BASE, json=body)
        reply.raise_for_status()
        data = reply.json()
        if new_session:
            self.session_id = data["sessionId"]
        elif data.get("sessionId") != self.session_id:
            raise RuntimeError(f"the warm session {self.session_id} was replaced by {data.get('sessionId')}")
        return str(data["queryId"])

    def get(self, query_id: str) -> dict[str, Any]:
        reply = self.http.get(f"{BASE}/{query_id}")
        reply.raise_for_status()
        return dict(reply.json())

    def state(self, query_id: str) -> StatementState | None:
        found = self.store.statements.get(self.datasource, query_id)
        return None if found is None else found.doc.state

    def session(self) -> SessionDoc:
        found = self.store.sessions.get(self.datasource, self.session_id)
        if found is None:
            raise RuntimeError(f"session {self.session_id} disappeared")
        return found.doc

    def session_version(self) -> int:
        version = doc_version(self.store, self.index, self.session_id)
        if version is None:
            raise RuntimeError(f"session {self.session_id} disappeared")
        return version

    def wait_status(self, query_id: str, timeout: float = 60.0, interval: float = 0.002) -> dict[str, Any]:
        """GET until terminal (the client's view)."""
        reply, _ = poll_until(
            lambda: (r := self.get(query_id)) and r["status"] not in ("WAITING", "RUNNING") and r, timeout, interval
        )
        return dict(reply)

    def wait_terminal(self, query_id: str, timeout: float = 60.0) -> None:
        def done() -> bool:
            state = self.state(query_id)
            return state is not None and is_terminal(state)

        poll_until(done, timeout, 0.005)

    def wait_left_waiting(self, query_id: str, timeout: float = 60.0) -> float:
        """perf_counter time at which the statement was first seen past ``waiting``."""
        _, seen = poll_until(lambda: self.state(query_id) not in (None, StatementState.WAITING), timeout, 0.001)
        return seen

    def wait_spark_started(self, query_id: str, timeout: float = 30.0) -> None:
        """Until the job's heartbeat reports Spark tasks for the statement (its work is running)."""

        def started() -> bool:
            for running in self.session().running_statements:
                if running.query_id == query_id and running.progress and running.progress.tasks_total > 0:
                    return True
            return False

        poll_until(started, timeout, 0.05)

    # -- sections ---------------------------------------------------------------------------

    def open_session(self) -> list[Figure]:
        started = time.perf_counter()
        query_id = self.post("SELECT 1", new_session=True)
        reply = self.wait_status(query_id, timeout=180, interval=0.05)
        cold = time.perf_counter() - started
        if reply["status"] != "SUCCESS":
            raise RuntimeError(f"the first query of the session ended {reply}")
        self.details["cold_start_s"] = round(cold, 2)
        return [Figure(SECTION, "first query of a new session (cold start)", cold, "s", note="spark-submit + JVM")]

    def pickup(self) -> list[Figure]:
        samples = []
        for _ in range(self.plan.pickups):
            t0 = time.perf_counter()
            query_id = self.post("SELECT 1")
            samples.append((self.wait_left_waiting(query_id) - t0) * 1000)
            self.wait_terminal(query_id)
        self.details["pickup_ms"] = summary(samples)
        return [
            Figure(SECTION, "pickup p50 (POST sent -> running)", percentile(samples, 50), "ms", Target("<", 100)),
            Figure(SECTION, "pickup p99", percentile(samples, 99), "ms", note=f"n={len(samples)}, polled every ~1 ms"),
        ]

    def round_trips(self) -> list[Figure]:
        """Warm ``SELECT 1`` round trips, and the index writes each statement cost."""
        samples: list[float] = []
        statement_writes: list[int] = []
        result_writes: list[int] = []
        session_before = self.session_version()
        totals_before = self._index_totals()
        for _ in range(self.plan.round_trips):
            t0 = time.perf_counter()
            query_id = self.post("SELECT 1")
            reply = self.wait_status(query_id)
            samples.append((time.perf_counter() - t0) * 1000)
            if reply["status"] != "SUCCESS" or reply.get("datarows") != [[1]]:
                raise RuntimeError(f"SELECT 1 answered {reply}")
            statement_writes.append(doc_version(self.store, self.index, query_id) or 0)
            result_writes.append(doc_version(self.store, self.result_index, query_id) or 0)
        n = self.plan.round_trips
        session_writes = (self.session_version() - session_before) / n
        totals_after = self._index_totals()
        per_statement = (sum(statement_writes) + sum(result_writes)) / n + session_writes
        server_count = None
        (req0, res0), (req1, res1) = totals_before, totals_after
        if req0 is not None and res0 is not None and req1 is not None and res1 is not None:
            server_count = (req1 - req0 + res1 - res0) / n
        self.details["round_trip_ms"] = summary(samples)
        self.details["writes_per_statement"] = {
            "statement_doc": sum(statement_writes) / n,
            "result_doc": sum(result_writes) / n,
            "session_doc": session_writes,
            "total": per_statement,
            "server_index_total_per_statement": server_count,
        }
        breakdown = (
            f"statement {sum(statement_writes) / n:.2g} + result {sum(result_writes) / n:.2g} "
            f"+ session {session_writes:.2g}"
        )
        return [
            Figure(SECTION, "warm SELECT 1 round trip p50", percentile(samples, 50), "ms", Target("<", 300)),
            Figure(SECTION, "warm SELECT 1 round trip p99", percentile(samples, 99), "ms", note=f"n={n}"),
            Figure(SECTION, "index writes per interactive statement", per_statement, "writes", note=breakdown),
            Figure(
                SECTION,
                "  same, by the index server's counter",
                server_count,
                "writes",
                note="includes any heartbeat that fell in the batch",
            ),
        ]

    def _index_totals(self) -> tuple[int | None, int | None]:
        return index_writes(self.store, self.index), index_writes(self.store, self.result_index)

    def cancels(self) -> list[Figure]:
        samples: list[float] = []
        delete_ms: list[float] = []
        for _ in range(self.plan.cancels):
            long_id = self.post(LONG_QUERY.format(rows=LONG_ROWS))
            self.wait_left_waiting(long_id)
            self.wait_spark_started(long_id)
            next_id = self.post("SELECT 1")
            t0 = time.perf_counter()
            self.http.delete(f"{BASE}/{long_id}").raise_for_status()
            delete_ms.append((time.perf_counter() - t0) * 1000)
            samples.append((self.wait_left_waiting(next_id, timeout=LONG_S) - t0) * 1000)
            if self.state(long_id) != StatementState.CANCELLED:
                raise RuntimeError(f"the cancelled statement is {self.state(long_id)}")
            self.wait_status(next_id)
        self.details["cancel_ms"] = summary(samples)
        self.details["delete_http_ms"] = summary(delete_ms)
        return [
            Figure(SECTION, "cancel p50 (DELETE -> next statement starts)", percentile(samples, 50), "ms"),
            Figure(
                SECTION,
                "cancel p99",
                percentile(samples, 99),
                "ms",
                Target("<", 1000),
                note=f"n={len(samples)}; DELETE itself p50 {percentile(delete_ms, 50):.1f} ms",
            ),
        ]

    def heartbeat_busy(self) -> list[Figure]:
        """Heartbeat writes per minute with 1 statement running, then 1 running + 7 queued."""
        long_id = self.post(LONG_QUERY.format(rows=LONG_ROWS))
        self.wait_left_waiting(long_id)
        self.wait_spark_started(long_id)
        one = self._rate(self.plan.running_window_s)
        queued = [self.post("SELECT 1") for _ in range(7)]
        eight = self._rate(self.plan.queued_window_s)
        still_waiting = sum(self.state(q) == StatementState.WAITING for q in queued)
        for query_id in [long_id, *queued]:
            self.http.delete(f"{BASE}/{query_id}")
        # One statement afterwards: the job has taken in the cancels and is idle from here on.
        self.wait_status(self.post("SELECT 1"))
        self.details["heartbeat_running_1"] = one
        self.details["heartbeat_running_8"] = {**eight, "queued_still_waiting_at_end": still_waiting}
        return [
            Figure(
                SECTION,
                "heartbeat writes/min, 1 statement running",
                one["per_minute"],
                "writes/min",
                note=f"window {one['window_s']:.0f} s, interval {one['interval_ms']} ms",
            ),
            Figure(
                SECTION,
                "heartbeat writes/min, 8 statements (1 running + 7 queued)",
                eight["per_minute"],
                "writes/min",
                note=f"one runs at a time per session; window {eight['window_s']:.0f} s",
            ),
        ]

    def _rate(self, window: float) -> dict[str, Any]:
        v0, t0 = self.session_version(), time.perf_counter()
        time.sleep(window)
        v1, t1 = self.session_version(), time.perf_counter()
        return {
            "writes": v1 - v0,
            "window_s": round(t1 - t0, 2),
            "per_minute": (v1 - v0) * 60 / (t1 - t0),
            "interval_ms": self.session().heartbeat_interval_millis,
        }

    def begin_idle(self) -> IdleWindow:
        return IdleWindow(self.session_version(), time.perf_counter())

    def end_idle(self, window: IdleWindow) -> list[Figure]:
        remaining = self.plan.idle_window_s - (time.perf_counter() - window.started)
        if remaining > 0:
            time.sleep(remaining)
        writes = self.session_version() - window.version
        elapsed = time.perf_counter() - window.started
        interval = self.session().heartbeat_interval_millis
        self.details["heartbeat_idle"] = {"writes": writes, "window_s": round(elapsed, 2), "interval_ms": interval}
        return [
            Figure(
                SECTION,
                "heartbeat writes/min, idle (0 running)",
                writes * 60 / elapsed,
                "writes/min",
                note=f"window {elapsed:.0f} s, interval {interval} ms",
            )
        ]
