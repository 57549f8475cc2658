"""Simulated jobs: session documents that heart-beat as the real job's would, without Spark.

Each simulated session is ``running`` with one ``running`` statement, and its heartbeat does what
:class:`flint_repl_job.heartbeat.Heartbeat` does: read the session by id, then one conditional write of
``lastUpdateTime``, ``runningStatements`` (with progress) and ``heartbeatIntervalMillis``. All
writes go through :class:`query_core.store.Store`, like the job's.
"""

from __future__ import annotations

import heapq
import logging
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flint_repl_job.heartbeat import BeatLag
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError
from query_core.ids import new_id, request_index
from query_core.models import (
    RunningStatement,
    SessionDoc,
    StatementDoc,
    StatementProgress,
    now_millis,
)
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import IndexClient, Store

log = logging.getLogger(__name__)


@dataclass
class SimSession:
    session_id: str
    statement_id: str
    job_id: str
    started_ms: int
    beats: int = 0
    #: How late its beats land, advertised with each beat as the job's heartbeat does.
    lag: BeatLag = field(default_factory=BeatLag)


@dataclass
class HeartbeatStats:
    writes: int = 0
    failures: int = 0
    #: How late each beat was against its schedule (ms): large values mean the bench's own
    #: writers could not keep up, and the write rate below target is the bench's, not the index's.
    lag_ms: list[float] = field(default_factory=list)
    #: When each of those beats was due (``time.monotonic()``, the same clock in every process).
    due_at: list[float] = field(default_factory=list)

    def lags_since(self, since: float) -> list[float]:
        """The lateness of the beats due at or after ``since`` (monotonic)."""
        return [lag for lag, due in zip(self.lag_ms, self.due_at, strict=True) if due >= since]


def client_of(store: Store) -> IndexClient:
    """The cluster client under ``store`` (benchmarks measure a real cluster, never the twin)."""
    assert isinstance(store.index, IndexClient), "benchmarks run against an index cluster"
    return store.index


class SimulatedSessions:
    """``count`` live interactive sessions in ``datasource``, each running one statement.

    Given ``jobs_dir`` (a local launcher's ``<data dir>/jobs``), their jobs are answered
    ``RUNNING`` there while the sessions are entered (:class:`StandInJobs`), as live jobs' would
    be: a local launcher is asked about its jobs even while their heartbeats are fresh.
    """

    def __init__(
        self,
        store: Store,
        datasource: str,
        count: int,
        interval_ms: int = 2_000,
        application_id: str = "bench",
        job_ids: list[str] | None = None,
        jobs_dir: Path | None = None,
        submitted_by: str | None = None,
    ) -> None:
        """``submitted_by`` is recorded as the user who started the sessions and their statements."""
        self.store = store
        self.submitted_by = submitted_by
        self.datasource = datasource
        self.count = count
        self.interval_ms = interval_ms
        self.application_id = application_id
        self._job_ids = job_ids
        self._stand_ins = (
            StandInJobs(jobs_dir, job_ids or [f"bench-sim-{i}" for i in range(count)]) if jobs_dir is not None else None
        )
        self.sessions: list[SimSession] = []
        self.stats = HeartbeatStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._child: _HeartbeatChild | None = None

    # -- documents --------------------------------------------------------------------------

    def create(self, parallel: int = 8) -> list[SimSession]:
        """Write the session and statement documents as a running job leaves them (a running
        session with a running statement: written as they stand, not moved there)."""
        index = request_index(self.datasource)

        def make(i: int) -> SimSession:
            job_id = self._job_ids[i] if self._job_ids else f"bench-sim-{i}"
            sim = SimSession(new_id(self.datasource), new_id(self.datasource), job_id, now_millis())
            session = SessionDoc(
                session_id=sim.session_id,
                session_type=SessionType.INTERACTIVE,
                state=SessionState.RUNNING,
                data_source_name=self.datasource,
                application_id=self.application_id,
                job_id=job_id,
                job_start_time=sim.started_ms,
                heartbeat_interval_millis=self.interval_ms,
                running_statements=[self._running(sim)],
                submitted_by=self.submitted_by,
            )
            self.store.index.create(index, sim.session_id, session.to_source(), recheck=True)
            statement = StatementDoc(
                statement_id=sim.statement_id,
                query_id=sim.statement_id,
                session_id=sim.session_id,
                query="SELECT count(*) FROM range(1000000000)",
                data_source_name=self.datasource,
                application_id=self.application_id,
                job_id=job_id,
                state=StatementState.RUNNING,
                submitted_by=self.submitted_by,
            )
            self.store.index.create(index, sim.statement_id, statement.to_source())
            return sim

        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="sim-create") as pool:
            self.sessions = list(pool.map(make, range(self.count)))
        return self.sessions

    def _running(self, sim: SimSession) -> RunningStatement:
        done = min(200, 10 * sim.beats)
        progress = StatementProgress(stages_completed=0, stages_total=1, tasks_completed=done, tasks_total=200)
        return RunningStatement(query_id=sim.statement_id, start_time=sim.started_ms, progress=progress)

    def beat(self, sim: SimSession, due_ms: int | None = None) -> None:
        """One heartbeat, as the job writes it: read by id, then one conditional write (with how
        late the session's beats have landed against their schedule, ``due_ms``)."""
        sim.beats += 1
        session = self.store.sessions.get(self.datasource, sim.session_id)
        if session is not None:
            landed = now_millis()
            self.store.sessions.beat(
                session,
                at=landed,
                running_statements=[self._running(sim)],
                heartbeat_interval_millis=self.interval_ms,
                heartbeat_lag_millis=sim.lag.record(landed if due_ms is None else due_ms, landed),
            )
        with self._lock:
            self.stats.writes += 1

    # -- heart-beating ----------------------------------------------------------------------

    def start(self, writers: int = 4) -> None:
        """Heart-beat every session every interval, spread evenly, from ``writers`` threads."""
        self._stop.clear()
        rng = random.Random(7)
        writers = max(1, min(writers, len(self.sessions)))
        interval = self.interval_ms / 1000
        now = time.monotonic()
        for w in range(writers):
            mine = self.sessions[w::writers]
            # First beat at a random phase in the interval, so the write rate is flat.
            queue = [(now + rng.random() * interval, i) for i in range(len(mine))]
            heapq.heapify(queue)
            thread = threading.Thread(
                target=self._writer, args=(mine, queue, interval), name=f"sim-heartbeat-{w}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _writer(self, mine: list[SimSession], queue: list[tuple[float, int]], interval: float) -> None:
        while queue and not self._stop.is_set():
            due, i = queue[0]
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            heapq.heapreplace(queue, (due + interval, i))
            lag = (time.monotonic() - due) * 1000
            try:
                self.beat(mine[i], now_millis() - int(lag))
            except AsyncQueryError as exc:
                with self._lock:
                    self.stats.failures += 1
                log.warning("simulated heartbeat of %s failed: %s", mine[i].session_id, exc)
            with self._lock:
                self.stats.lag_ms.append(lag)
                self.stats.due_at.append(due)

    def start_in_process(self, writers: int = 4) -> None:
        """Heart-beat as :meth:`start` does, from a child process: real jobs are processes of their
        own, and writer threads in the bench's process would compete with its load generator for
        the interpreter, inflating the latencies it measures and slowing the beats."""
        self._child = _HeartbeatChild(self, writers)

    def writes_so_far(self) -> int:
        """Heartbeats written so far (by the child process, if the beats come from one)."""
        return self._child.writes() if self._child is not None else self.stats.writes

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()
        child, self._child = self._child, None
        if child is not None:
            self.stats = child.stop()

    def end(self, parallel: int = 8, timeout: float = 30.0) -> None:
        """End every session (``dead``, as a job does when it exits) and wait until a search sees it.

        The service counts live sessions with a search to enforce its session limit, so sessions
        left for dead by their heartbeat alone would keep new sessions out until they went stale.
        """
        self.stop()

        def finish(sim: SimSession) -> None:
            session = self.store.sessions.get(self.datasource, sim.session_id)
            if session is not None:
                self.store.sessions.end(session, SessionState.DEAD)

        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="sim-end") as pool:
            list(pool.map(finish, self.sessions))
        ours = {s.session_id for s in self.sessions}

        def none_live() -> bool:
            live = self.store.sessions.find(self.datasource, [SessionState.RUNNING], size=10_000)
            return not any(v.doc.session_id in ours for v in live)

        poll_until(none_live, timeout, 0.2)

    def snapshot(self) -> tuple[int, int]:
        """(writes, beats scheduled so far) for rate measurements."""
        with self._lock:
            return self.stats.writes, len(self.stats.lag_ms)

    def __enter__(self) -> SimulatedSessions:
        if self._stand_ins is not None:
            self._stand_ins.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.end()
        finally:
            if self._stand_ins is not None:
                self._stand_ins.__exit__()


class _HeartbeatChild:
    """A process beating a :class:`SimulatedSessions`' sessions; its stats come back at stop."""

    def __init__(self, sim: SimulatedSessions, writers: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._writes = ctx.Value("q", 0)
        self._stop = ctx.Event()
        ready = ctx.Event()
        self._conn, child_conn = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_beat_in_child,
            args=(
                client_of(sim.store).cfg.model_dump_json(),
                sim.datasource,
                sim.sessions,
                sim.interval_ms,
                writers,
                self._writes,
                self._stop,
                ready,
                child_conn,
            ),
            name="bench-heartbeats",
            daemon=True,
        )
        self._proc.start()
        # The window a caller measures must not include the child's start-up (imports, the
        # sessions' transfer): until it beats, every session would look silent.
        if not ready.wait(120):
            self._proc.kill()
            raise RuntimeError("the heartbeat process did not start beating within 120 s")

    def writes(self) -> int:
        return int(self._writes.value)

    def stop(self) -> HeartbeatStats:
        self._stop.set()
        try:
            if not self._conn.poll(60):
                raise RuntimeError("the heartbeat process did not report its figures")
            stats: HeartbeatStats = self._conn.recv()
            return stats
        finally:
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()


def _beat_in_child(
    cfg_json: str,
    datasource: str,
    sessions: list[SimSession],
    interval_ms: int,
    writers: int,
    writes: Any,
    stop: Any,
    ready: Any,
    conn: Any,
) -> None:
    """The child of :class:`_HeartbeatChild`: beat until told to stop, then send the stats."""
    store = Store.connect(OpenSearchConfig.model_validate_json(cfg_json))
    sim = SimulatedSessions(store, datasource, len(sessions), interval_ms=interval_ms)
    sim.sessions = sessions
    sim.start(writers=writers)
    ready.set()
    while not stop.wait(0.1):
        writes.value = sim.stats.writes
    sim.stop()
    writes.value = sim.stats.writes
    conn.send(sim.stats)
    store.close()


class StandInJobs:
    """One process that the local launcher describes as ``RUNNING`` for every given job id.

    ``LocalLauncher.describe`` answers RUNNING for a job whose ``<jobs dir>/<job id>.pid`` names a
    live process whose environment names the job (``SERVERLESS_EMR_JOB_ID=<job id>``). One idle
    process carries a variable per job id (``BENCH_SIM_JOB_<n>=SERVERLESS_EMR_JOB_ID=<job id>``)
    and every pid file names it, so a simulated session the service suspects is confirmed alive by
    the launcher, as a real job's would be, without one process per session. The process exits
    when its stdin closes (also if the bench dies); the pid files are removed on exit.
    """

    def __init__(self, jobs_dir: Path, job_ids: list[str]) -> None:
        self.jobs_dir = jobs_dir
        self.job_ids = job_ids
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> StandInJobs:
        env = {"PATH": os.environ.get("PATH", "")}
        env.update({f"BENCH_SIM_JOB_{n}": f"SERVERLESS_EMR_JOB_ID={job}" for n, job in enumerate(self.job_ids)})
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdout.write('up'); sys.stdout.flush(); sys.stdin.buffer.read()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        # Its word that it runs: before the exec, /proc/<pid>/environ still shows this process's.
        assert self.proc.stdout is not None
        self.proc.stdout.read(2)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        for job in self.job_ids:
            (self.jobs_dir / f"{job}.pid").write_text(str(self.proc.pid))
        return self

    def __exit__(self, *exc: object) -> None:
        for job in self.job_ids:
            (self.jobs_dir / f"{job}.pid").unlink(missing_ok=True)
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def declared_dead(store: Store, datasource: str, sims: list[SimSession]) -> tuple[int, int]:
    """(sessions ``dead``/``fail``, statements ``failed``) among ``sims``: real-time reads."""
    index = request_index(datasource)
    dead = failed = 0
    for start in range(0, len(sims), 500):
        chunk = sims[start : start + 500]
        ids = [s.session_id for s in chunk] + [s.statement_id for s in chunk]
        found = store.index.get_many(index, ids)
        sessions, statements = found[: len(chunk)], found[len(chunk) :]
        dead += sum(1 for d in sessions if d and d.source.get("state") in (SessionState.DEAD, SessionState.FAIL))
        failed += sum(1 for d in statements if d and d.source.get("state") == StatementState.FAILED)
    return dead, failed


def index_writes(store: Store, index: str) -> int | None:
    """Successful document writes the index server has counted for ``index`` (primaries).

    This is the server's own ``indexing.index_total`` (every create, index and update counts
    once); None when the server does not report it.
    """
    try:
        stats: Any = client_of(store).driver.indices.stats(index=index, metric="indexing")
        return int(stats["_all"]["primaries"]["indexing"]["index_total"])
    except Exception:
        log.warning("index stats of %s are not available", index, exc_info=True)
        return None


def doc_version(store: Store, index: str, doc_id: str) -> int | None:
    """A document's ``_version``: it starts at 1 on create and grows by one with every write."""
    try:
        found: Any = client_of(store).driver.get(index=index, id=doc_id, _source="false")
    except Exception:  # noqa: BLE001 - a missing document or index has no version
        return None
    return int(found["_version"]) if found.get("found") else None


def poll_until(probe: Callable[[], Any], timeout: float, interval: float = 0.001) -> tuple[Any, float]:
    """Call ``probe`` every ``interval`` s until it returns something truthy; (value, perf time).

    This is a measurement tool: the time returned is when the condition was first observed.
    """
    deadline = time.perf_counter() + timeout
    while True:
        value = probe()
        seen = time.perf_counter()
        if value:
            return value, seen
        if seen >= deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)
