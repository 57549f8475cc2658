"""The session's heartbeat, shared by every runner (interactive, batch, streaming).

It needs little of its runner (:class:`HeartbeatHost`): the job's configuration (session id, job
id, request index, intervals), the store, the stop event, the statement running and its progress,
and two calls on the session (read it, fail it). Each beat is the sessions' named operation
(:meth:`~query_core.store.sessions.SessionRepository.beat`), which checks the session is still the
job's.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import RunningQuery
from query_core.errors import SessionLostError
from query_core.models import JobFigures, RunningStatement, SessionDoc, StatementProgress, Versioned, now_millis
from query_core.store import Store

log = logging.getLogger(__name__)

#: Failed heartbeats in a row after which the job gives up and ends the session ``fail``.
MAX_BEAT_FAILURES = 5


class BeatLag:
    """How late this session's recent heartbeats landed against their schedule (milliseconds).

    The figure is the latest beat's lateness, or half the previous figure, whichever is larger:
    one very late beat is remembered for a few beats. The heartbeat advertises it with the
    interval, so the plugin can tell a session whose beats arrive late because the index or the
    machine is overloaded from one whose beats stopped.
    """

    def __init__(self) -> None:
        self.millis = 0

    def record(self, due_ms: int, landed_ms: int) -> int:
        self.millis = max(0, landed_ms - due_ms, self.millis // 2)
        return self.millis


class ProgressSource(Protocol):
    """Where a running statement's progress comes from (the executor)."""

    def progress(self, query_id: str) -> StatementProgress: ...


class BeatExtension(Protocol):
    """What a runner may add to its heartbeat (a streaming session's stream, say): its own
    interval while it has something to report, and extra session fields on each beat."""

    def beat_interval_ms(self) -> int | None:
        """The interval while no statement runs, or None for the idle interval."""
        ...

    def beat_fields(self) -> dict[str, Any]:
        """Session fields written with this beat (``update_session`` keywords); may be empty."""
        ...


class FigureSource(Protocol):
    """Where the job's figures come from (:class:`flint_repl_job.figures.JobCounters`)."""

    def snapshot(self) -> JobFigures: ...


class HeartbeatHost(Protocol):
    """What the heartbeat needs of the runner whose session it beats for."""

    @property
    def cfg(self) -> JobConfig:
        """Session id, job id (and the job runs excluded), request index and heartbeat intervals."""
        ...

    @property
    def store(self) -> Store: ...

    @property
    def executor(self) -> ProgressSource: ...

    @property
    def stop_event(self) -> threading.Event: ...

    @property
    def running(self) -> RunningQuery | None:
        """The statement running now, if any."""
        ...

    @property
    def running_since(self) -> int:
        """When it started (epoch millis)."""
        ...

    def read_session(self) -> Versioned[SessionDoc] | None: ...

    def fail(self, reason: str) -> None:
        """End the session ``fail`` with ``reason`` (called from the heartbeat's thread)."""
        ...


class Heartbeat:
    """One conditional write of the session document per interval, whatever runs.

    It carries liveness (``lastUpdateTime``), the statements running and their Spark progress, the
    interval itself (so the plugin can tell how stale is too stale), and the job's figures. The interval is short while
    statements run and long when idle; a change of activity re-times the next beat, it does not
    add one.

    A failed beat is tried again at the next interval. After ``max_failures`` failures in a row,
    or should the thread end in any other way, the runner is told (:meth:`HeartbeatHost.fail`):
    a job without a heartbeat would look dead to the plugin while it runs on.
    """

    def __init__(
        self,
        job: HeartbeatHost,
        max_failures: int = MAX_BEAT_FAILURES,
        extension: BeatExtension | None = None,
        figures: FigureSource | None = None,
    ) -> None:
        self.job = job
        #: The job's cumulative figures, written with every beat (``docs/job.md``).
        self.figures = figures
        #: Extra fields and interval of the runner's own (see :class:`BeatExtension`).
        self.extension = extension
        self.max_failures = max_failures
        self.writes = 0
        self.failures = 0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._last = time.monotonic()
        #: When the beat being written was due (monotonic seconds).
        self._due = self._last
        self.lag = BeatLag()
        self._reported_running = False
        self._progress_failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def retime(self) -> None:
        self._wake.set()

    def interval_ms(self) -> int:
        """Short while a statement runs, and once more after the last beat that reported one, so
        that the end of a statement (a cancel honoured) shows within one short interval."""
        cfg = self.job.cfg
        busy = self.job.running is not None or self._reported_running
        return cfg.heartbeat_running_ms if busy else self._quiet_interval_ms()

    def _quiet_interval_ms(self) -> int:
        """The interval while no statement runs: the extension's, else the idle one."""
        own = self.extension.beat_interval_ms() if self.extension is not None else None
        return own if own is not None else self.job.cfg.heartbeat_idle_ms

    def _extra_fields(self) -> dict[str, Any]:
        """The extension's fields for this beat; none when it fails (a beat without them beats no beat)."""
        if self.extension is None:
            return {}
        try:
            return self.extension.beat_fields()
        except Exception as exc:  # noqa: BLE001 - Py4J errors, say: the beat goes on without
            log.warning("heartbeat: no extra fields this beat: %s: %s", type(exc).__name__, exc)
            return {}

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.job.fail(f"Session failed: heartbeat stopped: {type(exc).__name__}: {exc}")
            raise

    def _loop(self) -> None:
        while not self.job.stop_event.is_set():
            due = self._last + self.interval_ms() / 1000
            if self._wake.wait(max(0.0, due - time.monotonic())):
                self._wake.clear()
                continue
            self._due = due
            self._last = time.monotonic()  # the period runs from the start of a beat: no drift
            try:
                self.beat()
            except SessionLostError as exc:
                log.warning("heartbeat: %s; stopping", exc)
                self.job.stop_event.set()
                return
            except Exception as exc:  # noqa: BLE001 - counted: too many in a row end the session
                if not self._failed(exc):
                    return
            else:
                self.failures = 0

    def _failed(self, exc: Exception) -> bool:
        """Count a failed beat; False once there were too many in a row (the runner is told)."""
        self.failures += 1
        if self.failures >= self.max_failures:
            log.error("heartbeat failed %d times in a row; ending the session", self.failures, exc_info=exc)
            self.job.fail(
                f"Session failed: heartbeat failed {self.failures} times in a row: {type(exc).__name__}: {exc}"
            )
            return False
        log.warning("heartbeat failed (%d in a row); will try again next interval", self.failures, exc_info=exc)
        return True

    def _progress(self, query_id: str) -> StatementProgress | None:
        """Spark's progress of a statement; None when it cannot be had (progress is optional)."""
        try:
            progress = self.job.executor.progress(query_id)
        except Exception as exc:  # noqa: BLE001 - a beat without progress beats no beat (Py4J errors, say)
            level = logging.DEBUG if self._progress_failing else logging.WARNING  # once per streak
            log.log(level, "no progress for statement %s, beating without: %s: %s", query_id, type(exc).__name__, exc)
            self._progress_failing = True
            return None
        self._progress_failing = False
        return progress

    def beat(self) -> None:
        job = self.job
        running = job.running
        report = [
            RunningStatement(query_id=r.query_id, start_time=job.running_since, progress=self._progress(r.query_id))
            for r in ([running] if running else [])
        ]
        # The interval advertised is the one until the *next* beat, so the plugin knows when
        # this session's heartbeat becomes stale.
        cfg = job.cfg
        next_ms = cfg.heartbeat_running_ms if report or job.running is not None else self._quiet_interval_ms()
        extra = self._extra_fields()
        if self.figures is not None:  # after the extension's fields, which may feed them
            extra["metrics"] = self.figures.snapshot()

        due_ms = now_millis() - int((time.monotonic() - self._due) * 1000)
        current = job.read_session()
        written = None
        if current is not None:
            landed = now_millis()
            written = job.store.sessions.beat(
                current,
                at=landed,
                job_id=cfg.job_id,
                excluded=cfg.exclude_jobs,
                running_statements=report,
                heartbeat_interval_millis=next_ms,
                heartbeat_lag_millis=self.lag.record(due_ms, landed),
                **extra,
            )
        if written is None:
            raise SessionLostError(f"session {cfg.session_id} disappeared")
        self._reported_running = bool(report)
        self.writes += 1
