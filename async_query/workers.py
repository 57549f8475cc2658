"""Background work of the plugin, off the request path: explicit, testable loops.

Each worker has a named interval, waits on "new work, stop, or timeout", exposes
:meth:`Worker.run_once` for tests, and stops within a bounded grace period.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from async_query import metrics
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import Launcher, stop_job_within
from async_query.liveness import LivenessChecker
from query_core.errors import AsyncQueryError
from query_core.flint.metas import flint_meta
from query_core.flint.naming import index_name_of
from query_core.flint.refresh_options import manual_refresh_options
from query_core.ids import DEPLOYMENT_INDEX, request_index
from query_core.index_ops import STALL_REPAIRS, IndexTarget, IndexTransaction, repair_stalled
from query_core.models import FlintIndexStateDoc, SessionDoc, Versioned, now_millis
from query_core.states import FlintIndexState, SessionState, SessionType, StatementState, is_terminal
from query_core.store import Query, Range, Store, Term

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000


class Worker:
    """A loop in a daemon thread: ``run_once`` every ``interval_s``, or sooner when woken."""

    name = "worker"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: When the last round ended (epoch ms, 0: none yet) and why it failed ("" if it did not).
        self.last_run_ms = 0
        self.last_error = ""

    def run_once(self) -> None:
        raise NotImplementedError

    def wait_s(self) -> float:
        """How long to wait before the next round (unless woken)."""
        return self.interval_s

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, grace_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=grace_s)

    @property
    def stopped_unexpectedly(self) -> bool:
        """Started, not asked to stop, and its thread is gone (the health check's concern)."""
        return self._thread is not None and not self._stop.is_set() and not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
                self.last_error = ""
            except Exception as exc:
                log.exception("%s round failed", self.name)
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.last_run_ms = now_millis()
            self._wake.wait(self.wait_s())
            self._wake.clear()


@dataclass
class PendingCancel:
    query_id: str
    datasource: str
    session_id: str
    deadline: float
    #: Wall-clock time of the cancel: only a heartbeat written after it can show the work stopped.
    cancelled_at_ms: int


class CancelSupervisor(Worker):
    """Makes every cancel complete in bounded time, even when the job ignores it.

    DELETE moves the statement to ``cancelled`` and returns. The job is expected to stop the
    statement's Spark work; its heartbeat then stops listing the statement. If the heartbeat still
    lists it when the deadline passes, the session's job is cancelled through the launcher and the
    session is ended ``dead`` (its other unfinished statements fail with a clear error).
    """

    name = "cancel-supervisor"

    def __init__(
        self,
        store: Store,
        liveness: LivenessChecker,
        launcher_of: Callable[[SessionDoc], Launcher],
        deadline_s: float,
        interval_s: float = 0.2,
        stop_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(interval_s)
        self.store = store
        self.liveness = liveness
        self.launcher_of = launcher_of
        self.deadline_s = deadline_s
        self.stop_timeout_s = stop_timeout_s
        self.escalations = 0
        self._pending: dict[str, PendingCancel] = {}
        self._lock = threading.Lock()

    def watch(self, query_id: str, datasource: str, session_id: str) -> None:
        """Supervise a cancel from now on (a cancel already watched keeps its deadline)."""
        with self._lock:
            if query_id not in self._pending:
                deadline = time.monotonic() + self.deadline_s
                self._pending[query_id] = PendingCancel(query_id, datasource, session_id, deadline, now_millis())
        self.wake()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def run_once(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
        for item in pending:
            if self._settled(item):
                with self._lock:
                    self._pending.pop(item.query_id, None)

    def _settled(self, item: PendingCancel) -> bool:
        session = self.store.sessions.get(item.datasource, item.session_id)
        if session is None or is_terminal(session.doc.state):
            return True
        listed = any(r.query_id == item.query_id for r in session.doc.running_statements)
        if (
            not listed
            and session.doc.state == SessionState.RUNNING
            and session.doc.last_update_time >= item.cancelled_at_ms
        ):
            return True  # a heartbeat written after the cancel shows the statement stopped (a session
            # not started yet has written none)
        if time.monotonic() < item.deadline:
            return False
        error = f"Statement {item.query_id} did not stop within {self.deadline_s:g} s of its cancel; the session's job was cancelled"
        log.warning("%s", error)
        try:
            stop_job_within(self.launcher_of(session.doc), session.doc.job_id, self.stop_timeout_s)
        except AsyncQueryError as exc:
            # The session is ended all the same: its job stops when its heartbeat finds that.
            log.warning("cannot cancel job %s of session %s: %s", session.doc.job_id, item.session_id, exc)
        self.liveness.end_session(session, SessionState.DEAD, error)
        self.escalations += 1
        return True


class Lease:
    """A lease document: one plugin process at a time does some housekeeping (a datasource's, in
    its request index; or the deployment's, in the deployment index). Taken by a create-only
    write, renewed or taken over by conditional writes (a lock, :mod:`query_core.store.locks`)."""

    def __init__(self, store: Store, name: str, lease_ms: int, owner: str | None = None) -> None:
        self.store = store
        self.name = name
        self.lease_ms = lease_ms
        self.owner = owner or secrets.token_hex(8)

    def acquire(self, datasource: str | None = None) -> bool:
        """Take or renew the lease of ``datasource`` (None: the deployment's)."""
        index = request_index(datasource) if datasource is not None else DEPLOYMENT_INDEX
        return self.store.locks.acquire_lease(index, self.name, self.owner, self.lease_ms)


class Housekeeper(Worker):
    """Deletes old request and result documents, confirms stale sessions dead, ends index DML
    queries left unfinished, and repairs indexes left mid-operation.

    Requests older than ``request_days`` and results older than ``result_days`` are deleted. The
    sweeps make sure that a statement reaches a terminal state, and an index a stable state, even
    when no client ever asks again and the process that was running them is gone. Every process
    also prunes what its own launchers keep of finished jobs (local job logs, pid files and
    process entries) older than ``job_files_days``.
    """

    name = "housekeeper"

    def __init__(
        self,
        store: Store,
        datasources: DatasourceRegistry,
        liveness: LivenessChecker,
        interval_s: float,
        request_days: float,
        result_days: float,
        lease: Lease,
        supervisor: CancelSupervisor | None = None,
        *,
        dml_timeout_s: float = 300.0,
        index_op_stall_s: float = 300.0,
        launchers: Callable[[], Iterable[Launcher]] = tuple,
        job_files_days: float = 7.0,
    ) -> None:
        super().__init__(interval_s)
        self.launchers = launchers
        self.job_files_days = job_files_days
        self.supervisor = supervisor
        self.store = store
        self.datasources = datasources
        self.liveness = liveness
        self.request_days = request_days
        self.result_days = result_days
        self.lease = lease
        self.dml_timeout_s = dml_timeout_s
        self.stalled_indexes = StalledIndexRepair(store, liveness, index_op_stall_s)
        self.deleted = 0

    def run_once(self) -> None:
        self.prune_launchers()
        for datasource in self.datasources.all():
            try:
                if self.lease.acquire(datasource.name):
                    self.deleted += self.clean(datasource.name, datasource.results)
                    self.sweep(datasource.name)
                    self.stalled_indexes.sweep(datasource.name)
            except AsyncQueryError as exc:
                log.warning("housekeeping of %s failed: %s", datasource.name, exc)

    def prune_launchers(self) -> None:
        """This process's launchers forget finished jobs and delete their old files (no lease: what
        they keep is this process's, or this machine's)."""
        for launcher in self.launchers():
            try:
                launcher.prune(self.job_files_days * DAY_MS / 1000)
            except Exception:
                log.exception("pruning the finished jobs of launcher %s failed", type(launcher).__name__)

    def clean(self, datasource: str, result_index: str) -> int:
        now = now_millis()
        requests = request_index(datasource)
        request_cutoff = now - int(self.request_days * DAY_MS)
        index = self.store.index
        deleted = index.delete_by_query(
            requests, Query((Term("type", "statement"), Range("submitTime", lt=request_cutoff)))
        )
        deleted += index.delete_by_query(
            requests, Query((Term("type", "session"), Range("lastUpdateTime", lt=request_cutoff)))
        )
        deleted += index.delete_by_query(
            result_index, Query((Range("updateTime", lt=now - int(self.result_days * DAY_MS)),))
        )
        if deleted:
            log.info("housekeeping deleted %d old documents of datasource %s", deleted, datasource)
        return deleted

    def sweep(self, datasource: str) -> None:
        """Confirm stale sessions dead, end index DML sessions past their timeout, and supervise
        cancels that no process here is watching (a heartbeat still listing a cancelled
        statement, say after a plugin restart)."""
        for session in self.store.sessions.find(datasource, [SessionState.NOT_STARTED, SessionState.RUNNING]):
            if session.doc.session_type == SessionType.LOCAL:
                self._sweep_local(session)  # no job, no heartbeat: never ask a launcher
                continue
            if not self.liveness.staleness.is_fresh(session.doc):
                self.liveness.check(session)
                continue
            for running in session.doc.running_statements:
                statement = self.store.statements.get(datasource, running.query_id)
                if (
                    self.supervisor is not None
                    and statement is not None
                    and statement.doc.state == StatementState.CANCELLED
                ):
                    self.supervisor.watch(running.query_id, datasource, session.doc.session_id)

    def _sweep_local(self, session: Versioned[SessionDoc]) -> None:
        """End an index DML session (and fail its statement) not finished within the timeout:
        the plugin process that was running it has stopped."""
        age_ms = now_millis() - session.doc.last_update_time
        if age_ms <= self.dml_timeout_s * 1000:
            return
        error = (
            f"Index DML query did not finish within {self.dml_timeout_s:g} s "
            "(the plugin process running it stopped); check the index's state and run it again"
        )
        self.liveness.end_session(session, SessionState.DEAD, error)


#: The states an index is left in mid-operation (every ``via`` state of the operations table).
TRANSITIONING = sorted(STALL_REPAIRS, key=lambda state: state.value)


class StalledIndexRepair:
    """Repairs indexes left in a transitioning state by an operation whose owner is gone.

    The owner is the job the state document names: while a session of that job is alive (fresh,
    or stale but confirmed running by the launcher), the index is left alone; ``refreshing``
    under a live streaming job is its stable state. Once every session of the job has ended, the
    index moves to where :func:`query_core.index_ops.stall_repair` says, with an error naming the
    job. An index whose job has no session here (a job this plugin did not start), or that names
    no job, is repaired once its state document has not changed for ``stall_s`` seconds, and,
    when it names a job, the launcher confirms that job is no longer running.
    """

    def __init__(self, store: Store, liveness: LivenessChecker, stall_s: float) -> None:
        self.store = store
        self.liveness = liveness
        self.stall_s = stall_s
        self.repaired = 0

    def sweep(self, datasource: str) -> None:
        for stalled in self.store.index_states.find(datasource, TRANSITIONING):
            found = self.owner_gone(datasource, stalled.doc)
            if found is None:
                continue
            reason, streaming = found
            if repair_stalled(self.store, stalled, reason, streaming=streaming) is not None:
                self.repaired += 1
                log.warning("index %s repaired: %s", stalled.doc.index_name or stalled.doc.latest_id, reason)

    def owner_gone(self, datasource: str, state: FlintIndexStateDoc) -> tuple[str, bool] | None:
        """Why the index's operation will never finish, and whether its owner was a streaming
        job; None while the owner may still be at work."""
        what = f"Left {state.state.value} by an operation that will not finish"
        sessions = self.store.sessions.find(datasource, list(SessionState), job_id=state.job_id) if state.job_id else []
        if sessions:
            checked = [self.liveness.check(s).doc for s in sessions]
            if any(not is_terminal(s.state) for s in checked):
                return None
            streaming = any(s.session_type == SessionType.STREAMING for s in checked)
            return owner_ended(state, checked[0], streaming), streaming
        idle_s = (now_millis() - state.last_update_time) / 1000
        if idle_s <= self.stall_s:
            return None
        if not state.job_id:
            return f"{what}: no job owns it, and it was left unchanged for {idle_s:.0f} s", False
        described = self.liveness.describe(
            SessionDoc(session_id=f"index-owner:{state.job_id}", data_source_name=datasource, job_id=state.job_id)
        )
        if described is None or not described.state.finished:
            return None  # running, or the launcher cannot tell: never touch a live owner's index
        return (
            f"{what}: job {state.job_id}, of which no session is known, is {described.state.value.lower()}",
            False,
        )


def owner_ended(state: FlintIndexStateDoc, ended: SessionDoc, streaming: bool) -> str:
    """Why an index's operation will never finish: the session of its owner job ``ended``."""
    what = f"Left {state.state.value} by an operation that will not finish"
    if streaming and state.state == FlintIndexState.REFRESHING:
        what = "The stream refreshing this index stopped"
    detail = f": {ended.error}" if ended.error else ""
    return (
        f"{what}: job {state.job_id} ({ended.session_type.value} session {ended.session_id}) "
        f"ended {ended.state.value}{detail}"
    )


class StreamingHousekeeper(Worker):
    """Stops the streams that should no longer run, every ``interval_s`` (15 minutes by default).

    For each live streaming session of the deployment (one search over every request index, so a
    deleted datasource's sessions are found too), and each index its job keeps ``refreshing``:

    - the datasource was deleted, or the index itself is gone: the index is dropped (``deleting →
      deleted``), as a DROP would; the data stay until VACUUM;
    - the datasource is disabled: the index is altered to manual refresh (``updating → active``),
      its ``_meta`` saying so.

    The operation's move of the index asks the job to stop; :class:`async_query.streams.StreamStopper`
    waits for it, boundedly, and cancels the job past the deadline. A stale session is confirmed
    through the liveness check first (one coalesced ``describe``); one found dead leaves its index
    to the stream watcher (:mod:`async_query.stream_watch`), which fails it with the cause. One
    plugin process at a time does this work (a lease in the deployment's slot index).
    """

    name = "streaming-housekeeper"

    def __init__(
        self,
        store: Store,
        datasources: DatasourceRegistry,
        liveness: LivenessChecker,
        stop_stream: Callable[[Versioned[SessionDoc]], object],
        interval_s: float,
        owner: str | None = None,
    ) -> None:
        super().__init__(interval_s)
        self.store = store
        self.datasources = datasources
        self.liveness = liveness
        self.stop_stream = stop_stream
        self.lease = Lease(store, "streaming-housekeeping-lease", int(interval_s * 2000), owner)
        #: Streams stopped, by the reason given.
        self.stopped: list[str] = []

    def run_once(self) -> None:
        try:
            if not self.lease.acquire():
                return
            sessions = self.store.sessions.find(None, [SessionState.NOT_STARTED, SessionState.RUNNING])
        except AsyncQueryError as exc:
            log.warning("streaming housekeeping failed: %s", exc)
            metrics.streaming_housekeeper_failed()
            return
        for session in sessions:
            if session.doc.session_type != SessionType.STREAMING:
                continue
            try:
                self.check(session)
            except AsyncQueryError as exc:
                log.warning("streaming housekeeping of session %s failed: %s", session.doc.session_id, exc)
                metrics.streaming_housekeeper_failed()

    def check(self, session: Versioned[SessionDoc]) -> None:
        doc = session.doc
        if not self.liveness.staleness.is_fresh(doc) and is_terminal(self.liveness.check(session).doc.state):
            return  # dead: the stream watcher fails its index with the cause
        datasource = self.datasources.find(doc.data_source_name)
        for state in self.store.index_states.find(
            doc.data_source_name, [FlintIndexState.REFRESHING], job_id=doc.job_id
        ):
            index_name = index_name_of(state.doc.latest_id, state.doc.index_name)
            why = self._why_stop(datasource, doc.data_source_name, index_name)
            if why is not None:
                self._stop_stream_of(session, index_name, *why)

    def _why_stop(self, datasource: Datasource | None, name: str, index_name: str) -> tuple[str, str] | None:
        """The operation that stops the stream of ``index_name``, and why; None: let it run."""
        if datasource is None:
            return "drop", f"datasource {name} was deleted"
        if not self.store.admin.index_exists(index_name):
            return "drop", f"index {index_name} no longer exists"
        if datasource.status != "ACTIVE":
            return "alter to manual refresh", f"datasource {name} is disabled"
        return None

    def _stop_stream_of(self, session: Versioned[SessionDoc], index_name: str, operation: str, reason: str) -> None:
        target = IndexTarget(session.doc.data_source_name, index_name)

        def work() -> None:
            self.stop_stream(session)
            if operation == "alter to manual refresh":
                meta = flint_meta(self.store.admin, index_name)
                if meta:
                    self.store.admin.put_mapping_meta(index_name, {**meta, "options": manual_refresh_options(meta)})

        IndexTransaction(self.store, target).run(operation, work)
        self.stopped.append(reason)
        log.warning("stopped the stream of index %s (%s): %s", index_name, operation, reason)
