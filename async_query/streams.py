"""Stopping a streaming session's job: asked through the documents, cancelled past a deadline.

A streaming job watches its index's state document; an operation that must stop the stream (ALTER
to manual refresh, DROP, the streaming housekeeper) has already moved that document out of
``refreshing`` by the time it stops the job, and that move *is* the request. The job then stops
its stream between micro-batches (its checkpoint stays consistent, so a later ALTER back to auto
refresh resumes without duplicates or gaps) and ends its session.

:class:`StreamStopper` waits for that end, reading the session by id. Past ``timeout_s`` it cancels
the job through its launcher (bounded too) and ends the session itself, so the operation always
finishes in bounded time, whatever the job or the network does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from query_core.errors import AsyncQueryError
from query_core.models import FlintIndexStateDoc, SessionDoc, Versioned
from query_core.states import FlintIndexState, SessionState, SessionType, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

#: How often the stopper reads the session while it waits for the job to end it.
POLL_S = 0.2


class StreamStopper:
    """``stop_job(datasource, job_id)`` cancels a job through its launcher, bounded in time;
    ``end_session(session, state, error)`` ends a session and fails what it left unfinished
    (:meth:`async_query.liveness.LivenessChecker.end_session`)."""

    def __init__(
        self,
        store: Store,
        stop_job: Callable[[str, str], None],
        end_session: Callable[[Versioned[SessionDoc], SessionState, str], object],
        timeout_s: float,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.stop_job = stop_job
        self.end_session = end_session
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._closing = threading.Event()
        #: How many stops ended gracefully, and how many needed the launcher.
        self.graceful = 0
        self.cancelled = 0

    def close(self) -> None:
        """Stop waiting: stops in progress go straight to the launcher."""
        self._closing.set()

    def stop(self, session: Versioned[SessionDoc]) -> bool:
        """Wait for the session's job to end it; past the deadline, cancel the job and end the
        session here. Returns True when the job stopped by itself."""
        doc = session.doc
        deadline = time.monotonic() + self.timeout_s
        while True:
            current = self.store.sessions.get(doc.data_source_name, doc.session_id)
            if current is None or is_terminal(current.doc.state):
                self.graceful += 1
                log.info("streaming session %s stopped its job %s", doc.session_id, doc.job_id)
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing.wait(min(self.poll_s, remaining)):
                break
        self._cancel(current)
        return False

    def _cancel(self, session: Versioned[SessionDoc]) -> None:
        doc = session.doc
        self.cancelled += 1
        reason = f"the job did not stop its stream within {self.timeout_s:g} s of being asked; it was cancelled"
        try:
            self.stop_job(doc.data_source_name, doc.job_id)
        except AsyncQueryError as exc:
            # The session still ends: the job stops by itself once it sees the index moved or
            # its session ended (its heartbeat checks), whenever it can reach the index again.
            log.warning("cannot cancel job %s of streaming session %s: %s", doc.job_id, doc.session_id, exc)
            reason += f" (the cancel failed: {exc.message})"
        log.warning("streaming session %s: %s", doc.session_id, reason)
        self.end_session(session, SessionState.DEAD, reason)


class RefreshStopper:
    """Stops the job that refreshes an index, as its state document names it (DROP, ALTER to
    manual refresh, ALTER to the scheduler, a disabled datasource): a stream through
    ``stop_stream`` (:meth:`StreamStopper.stop`), a batch refresh (a scheduled run) through
    ``stop_job(datasource, job_id)``, its launcher, bounded in time."""

    def __init__(
        self,
        store: Store,
        stop_job: Callable[[str, str], None],
        stop_stream: Callable[[Versioned[SessionDoc]], object],
    ) -> None:
        self.store = store
        self.stop_job = stop_job
        self.stop_stream = stop_stream

    def stop(self, datasource: str, before: Versioned[FlintIndexStateDoc] | None) -> None:
        """Stop the job the state document names, if its session is live.

        A job with no session document at all (started by the reference plugin, say) is asked to
        stop too when the index was ``refreshing``, on a best-effort basis: its state is unknown
        here. A job whose sessions all ended is left alone.
        """
        if before is None or not before.doc.job_id:
            return
        state = before.doc
        sessions = self.store.sessions.find(datasource, list(SessionState), job_id=state.job_id)
        live = [s for s in sessions if not is_terminal(s.doc.state)]
        streaming = [s for s in live if s.doc.session_type == SessionType.STREAMING]
        if streaming:
            for session in streaming:
                self.stop_stream(session)
            log.info("stopped the stream of job %s refreshing %s", state.job_id, state.index_name or state.latest_id)
        elif live:
            self.stop_job(datasource, state.job_id)
            log.info("stopped job %s refreshing index %s", state.job_id, state.index_name or state.latest_id)
        elif not sessions and state.state == FlintIndexState.REFRESHING:
            try:
                self.stop_job(datasource, state.job_id)
            except AsyncQueryError as exc:
                log.warning("cannot stop job %s (no session of it is known): %s", state.job_id, exc)
