"""Telling live sessions from dead ones, asking the launcher as rarely as possible.

A session whose heartbeat is fresh is alive: no call. A session whose heartbeat is stale (or that
has not started within its start-up limit) is *suspected*; one ``describe`` (EMR Serverless
``GetJobRun``) answers for it, shared by every caller asking at the same time and cached for a
short while. A confirmed death moves the session to ``dead`` and
its unfinished statements to ``failed``, with an error that says what happened; but a session
whose claimed warm pool job died before it started the session is given a job of its own instead
(``restart``), and its statements run there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from async_query import logs, metrics
from async_query.caches import Cache
from async_query.launcher.base import JobDescription, JobRunState, Launcher
from query_core.errors import AsyncQueryError
from query_core.models import SessionDoc, Versioned, now_millis
from query_core.states import SessionState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)


#: How many launcher answers are kept (one per suspect session).
ANSWERS_KEPT = 10_000
#: The most a job's advertised lateness may stretch its staleness limit, in heartbeat intervals:
#: beats that late are an overloaded index or machine, or a job that stopped beating.
MAX_LAG_INTERVALS = 4


@dataclass(frozen=True)
class Staleness:
    """When a session's documents alone no longer vouch for it."""

    #: Missed heartbeats (of the interval the job advertises) before a running session is suspect.
    stale_heartbeats: float
    #: Seconds a not-yet-started session may take to start.
    start_timeout_s: float
    #: Heartbeat interval assumed when a session does not advertise one.
    default_interval_ms: int

    def limit_ms(self, session: SessionDoc) -> float:
        """How long after its last heartbeat a running session is still fresh.

        ``stale_heartbeats`` beats of the interval the job advertises, each stretched by how late
        the job says its recent beats landed (capped at :data:`MAX_LAG_INTERVALS` intervals):
        beats late because the index or the machine is overloaded do not make a healthy session
        look dead.
        """
        interval = session.heartbeat_interval_millis or self.default_interval_ms
        lag = min(max(session.heartbeat_lag_millis, 0), interval * MAX_LAG_INTERVALS)
        return (interval + lag) * self.stale_heartbeats

    def is_fresh(self, session: SessionDoc, now: int | None = None) -> bool:
        return self.fresh_for_ms(session, now) > 0

    def fresh_for_ms(self, session: SessionDoc, now: int | None = None) -> float:
        """How much longer the session's documents alone vouch for it (0 or less: it is suspect).

        A session that claimed an idle warm pool job (it records the slot and the job's interval)
        has a started job: it counts as a running one does, from the claim, not with the start-up
        limit."""
        now = now if now is not None else now_millis()
        if session.state == SessionState.RUNNING or (
            session.state == SessionState.NOT_STARTED and session.pool_slot and session.heartbeat_interval_millis
        ):
            return session.last_update_time + self.limit_ms(session) - now
        if session.state == SessionState.NOT_STARTED:
            return session.last_update_time + self.start_timeout_s * 1000 - now
        return 0.0


#: Gives a session whose claimed pool job died before it started the session a job of its own: the
#: session with its new job, or None when it cannot (``async_query.pool.SessionJobs.restart``).
Restart = Callable[[Versioned[SessionDoc], str], Versioned[SessionDoc] | None]


class LivenessChecker:
    """Confirms suspected deaths with one coalesced, cached ``describe`` per session.

    An answer is reused for ``cache_s`` seconds; for a running session whose job is confirmed
    running, until its next heartbeat is due if that is later: a suspect whose job runs is trusted
    again for a whole interval, not asked about on every GET.
    """

    def __init__(
        self,
        store: Store,
        launcher_of: Callable[[SessionDoc], Launcher],
        staleness: Staleness,
        cache_s: float = 5.0,
        restart: Restart | None = None,
    ) -> None:
        self.store = store
        self.launcher_of = launcher_of
        self.staleness = staleness
        self.cache_s = cache_s
        self.restart = restart
        self._lock = threading.Lock()
        self._inflight: dict[str, Future[JobDescription | None]] = {}
        #: The launcher's answers, by session id (each kept for :meth:`_keep_s`).
        self._answers: Cache[str, JobDescription] = Cache(ANSWERS_KEPT)

    def check(self, session: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        """The session, moved to ``dead`` if its job is confirmed gone.

        A fresh session is trusted without a call, unless asking costs nothing (a local job's
        state is a look at its process): then a job that died is noticed at the next check, not
        only once its heartbeat has gone stale. Answers are cached either way.
        """
        if is_terminal(session.doc.state):
            return session
        doc = session.doc
        if self.staleness.is_fresh(doc) and not self.launcher_of(doc).describe_is_free:
            return session
        return self._confirm(session)[0]

    def vouches_for(self, doc: SessionDoc) -> bool:
        """True when :meth:`check` would find the session alive without a write: fresh, and,
        where asking is free, its job's recent answer says it runs. Such an answer is asked for
        here when there is none (it costs a look at a local process: the caller, on the event
        loop, need not hand the request to a worker thread for it), unless another caller is
        asking already (then False: no waiting here)."""
        if not self.staleness.is_fresh(doc):
            return False
        if not self.launcher_of(doc).describe_is_free:
            return True
        answer = self._answers.get(doc.session_id)
        if answer is None:
            with self._lock:
                asking = doc.session_id in self._inflight
            if asking:
                return False
            answer = self.describe(doc)
        return answer is not None and not answer.state.finished

    def _confirm(self, session: Versioned[SessionDoc]) -> tuple[Versioned[SessionDoc], JobDescription | None]:
        """Ask the launcher (coalesced, cached); end the session if its job is gone."""
        doc = session.doc
        described = self.describe(doc)
        if described is None or not described.state.finished:
            return session, described
        # The job is gone: the session is ``dead``. (``fail`` is the job's own report of an
        # unrecoverable error, written by the job itself.)
        detail = f": {described.details}" if described.details else ""
        error = f"Job {doc.job_id} of session {doc.session_id} is {described.state.value.lower()}{detail}"
        restarted = self._restart(session, error)
        if restarted is not None:
            return restarted, JobDescription(restarted.doc.job_id, JobRunState.PENDING)
        return self.end_session(session, SessionState.DEAD, error), described

    def _restart(self, session: Versioned[SessionDoc], error: str) -> Versioned[SessionDoc] | None:
        """A session whose claimed pool job died before it started the session, given a job of
        its own (None: it is not such a session, or no job could be had)."""
        doc = session.doc
        if self.restart is None or doc.state != SessionState.NOT_STARTED or not doc.pool_slot:
            return None
        try:
            restarted = self.restart(session, error)
        except AsyncQueryError as exc:
            log.warning("session %s: no job could replace its claimed pool job: %s", doc.session_id, exc)
            return None
        self._answers.pop(doc.session_id)  # the answer was about the job replaced
        if restarted is None or is_terminal(restarted.doc.state):
            return None
        return restarted

    def confirm_alive(self, session: Versioned[SessionDoc]) -> bool:
        """True when the session can take work: fresh by its documents, or, when its heartbeat is
        stale, its job confirmed running (one coalesced call). A confirmed death ends it."""
        if is_terminal(session.doc.state):
            return False
        if self.staleness.is_fresh(session.doc):
            return True
        checked, described = self._confirm(session)
        if is_terminal(checked.doc.state):
            return False
        return described is not None and not described.state.finished

    def describe(self, doc: SessionDoc) -> JobDescription | None:
        """One launcher call per session at a time, its answer reused for ``cache_s`` seconds."""
        key = doc.session_id
        with self._lock:
            cached = self._answers.get(key)
            if cached is not None:
                return cached
            future = self._inflight.get(key)
            owner = future is None
            if future is None:
                future = Future()
                self._inflight[key] = future
        if not owner:
            try:
                return future.result(timeout=60)
            except TimeoutError:  # the owner's call hangs: "unknown" for the others meanwhile
                return None
        described: JobDescription | None = None
        try:
            described = self._ask_launcher(doc)
        finally:
            # Whatever happened (even an interrupt), the callers waiting for this answer get one:
            # None, "unknown", when the launcher could not say.
            with self._lock:
                self._inflight.pop(key, None)
                if described is not None:
                    self._answers.put(key, described, ttl_s=self._keep_s(doc, described))
            future.set_result(described)
        return described

    def _keep_s(self, doc: SessionDoc, described: JobDescription) -> float:
        """How long an answer about ``doc``'s job is reused."""
        if described.state.finished or doc.state != SessionState.RUNNING:
            return self.cache_s
        interval = doc.heartbeat_interval_millis or self.staleness.default_interval_ms
        return max(self.cache_s, interval / 1000)

    def _ask_launcher(self, doc: SessionDoc) -> JobDescription | None:
        """The launcher's answer, or None (unknown) when it fails: a session is never ended on a
        failed call, only on a confirmed death."""
        try:
            launcher = self.launcher_of(doc)
            return metrics.launcher_call(launcher, "describe", lambda: launcher.describe(doc.job_id))
        except AsyncQueryError as exc:
            log.warning("cannot describe job %s of session %s: %s", doc.job_id, doc.session_id, exc)
        except Exception:
            log.exception("describing job %s of session %s failed unexpectedly", doc.job_id, doc.session_id)
        return None

    def end_session(self, session: Versioned[SessionDoc], state: SessionState, error: str) -> Versioned[SessionDoc]:
        """Move the session to its end state and fail whatever it left unfinished."""
        doc = session.doc
        sessions = self.store.sessions
        with logs.about(session_id=doc.session_id):
            written = sessions.end(session, state, error)
            if written is not None:
                metrics.session_ended_by_service(doc.data_source_name, doc.session_type.value, state.value)
            ended = written or sessions.reread(doc) or session
            log.warning("session %s ended %s: %s", doc.session_id, state.value, error)
            self.fail_unfinished(ended.doc, f"Session ended before the statement finished: {ended.doc.error or error}")
        return ended

    def fail_unfinished(self, session: SessionDoc, error: str) -> None:
        """Fail the session's waiting and running statements (the real-time list, then a search)."""
        seen: set[str] = set()
        for statement_id in session.pending_statement_ids:
            statement = self.store.statements.get(session.data_source_name, statement_id)
            if statement is not None:
                seen.add(statement_id)
                self.store.statements.fail(statement, error)
        for statement in self.store.statements.find_unfinished(session.data_source_name, session.session_id):
            if statement.doc.statement_id not in seen:
                self.store.statements.fail(statement, error)
