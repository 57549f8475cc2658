"""The pending-id signal of a POST into a session, written just after the POST's reply.

A POST into an interactive session writes its statement (create-only, the translog synced) and
then appends the statement's id to the session document's pending list, the signal the session's
job reads by id so that it picks the statement up without waiting for a search to see it. The
append is a conditional write of the session document, as long again as the statement's own, and
nothing depends on it being made before the reply: the job also finds its session's waiting
statements by searching for them (``docs/architecture.md``, "Documents are the truth"). So
:class:`PendingSignals` makes it right after the reply, in its own thread:

- a statement is acknowledged once it is in the index, as before; a signal lost with its process
  only delays the statement's pickup by the job's search interval;
- POSTs into one session in the same moment are appended in one write (fewer conflicts on the
  session document, which its job's heartbeats also write);
- a session that ended before its append fails the statements it was to take (they still reach a
  terminal state, with an error that says to submit them again);
- the session as the append wrote it is kept for ``reuse_s`` (:meth:`PendingSignals.written`): the
  next POST into it within that time takes it from there instead of reading it. A read by id of a
  document written since the index's last refresh makes the index refresh first, and a session
  POSTed into a moment ago is such a document. The copy is this process's own last write (any
  other write of this process to the session drops it, and one told while the append was under
  way keeps it from being kept: the store tells of a write once it is answered, so another
  thread's write that landed after the append's may be told before it), no older than
  ``reuse_s``, and what the POST decides from it is checked again where it matters: the append is
  a conditional write, so a session that ended meanwhile is seen there and the statement failed
  as above.

The loop is a :class:`~async_query.workers.Worker`: woken by each POST, with a run-once mode
(:meth:`PendingSignals.run_once`, what tests and :meth:`flush` call) and a stop that writes what
is still queued, within its grace period.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from async_query.caches import Cache
from async_query.workers import Worker
from query_core.errors import AsyncQueryError
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.store import Store

log = logging.getLogger(__name__)

#: How long the loop sleeps when nothing wakes it (a POST does; this only bounds a missed wake).
IDLE_INTERVAL_S = 1.0
#: The most sessions whose last append is kept for the next POST (the most recent ones).
KEPT_SESSIONS = 10_000


@dataclass
class _Queued:
    """The signals queued for one session: its last version seen and its new statements."""

    session: Versioned[SessionDoc]
    statements: list[Versioned[StatementDoc]] = field(default_factory=list)


class PendingSignals(Worker):
    """Appends POSTed statements' ids to their sessions' pending lists, off the request path."""

    name = "pending-signals"

    def __init__(self, store: Store, keep: int, interval_s: float = IDLE_INTERVAL_S, reuse_s: float = 0.0) -> None:
        super().__init__(interval_s)
        self.store = store
        #: How many ids a session's list keeps (the last ones).
        self.keep = keep
        #: How long a session as an append wrote it is taken for the next POST (0: never).
        self.reuse_s = reuse_s
        #: Session id -> the session as this process's last append wrote it, for ``reuse_s``.
        self._written: Cache[str, Versioned[SessionDoc]] = Cache(KEPT_SESSIONS, ttl_s=reuse_s)
        #: Writes of this process told by threads other than the appending one, counted; and per
        #: document the count at its last such write: an append's copy is kept only if none to
        #: its session was told while it was under way (:meth:`_keep`).
        self._told = 0
        self._last_told: Cache[str, int] = Cache(KEPT_SESSIONS)
        #: The thread making an append now (its own writes are not another thread's).
        self._appender: int | None = None
        #: Orders a copy's keeping with the drops of writes made by other threads.
        self._kept_lock = threading.Lock()
        self._queued: dict[tuple[str, str], _Queued] = {}
        self._lock = threading.Lock()
        #: Held by a round for its whole length, so that a flush waits for a round under way.
        self._writing = threading.Lock()
        self._started = False
        self._closed = False

    def add(self, session: Versioned[SessionDoc], statement: Versioned[StatementDoc]) -> None:
        """Queue ``statement``'s signal to ``session`` (written at once, in the loop's thread)."""
        key = (session.doc.data_source_name, session.doc.session_id)
        with self._lock:
            queued = self._queued.setdefault(key, _Queued(session))
            queued.statements.append(statement)
            closed = self._closed
            if not self._started and not closed:
                self._started = True
                self.start()
        if closed:  # a POST that raced the service's stop: written here, before its reply
            self.run_once()
        else:
            self.wake()

    def written(self, session_id: str) -> Versioned[SessionDoc] | None:
        """The session as this process's last append wrote it, if that was less than ``reuse_s``
        ago and no other write of this process to it came since (see the module's documentation)."""
        return self._written.get(session_id) if self.reuse_s > 0 else None

    def forget(self, doc_id: str) -> None:
        """A write of this process to document ``doc_id``: a kept copy of it is dropped (a write
        listener of the store's connector)."""
        if self.reuse_s > 0:
            with self._kept_lock:
                self._written.pop(doc_id)
                if threading.get_ident() != self._appender:
                    self._told += 1
                    self._last_told.put(doc_id, self._told)

    def _appending(self) -> int:
        """This thread starts an append: the count of other threads' writes told so far."""
        with self._kept_lock:
            self._appender = threading.get_ident()
            return self._told

    def _keep(self, session: Versioned[SessionDoc], since: int) -> None:
        """Keep the session as this thread's append just wrote it, unless another thread of this
        process told of a write to it since the append began (``since``, :meth:`_appending`). That
        write may have landed after the append's even when it was told first, and keeping the copy
        would bring back a stale version, such as a running session that has just ended. Should
        more writes have been told meanwhile than :attr:`_last_told` holds, nothing is kept."""
        if self.reuse_s > 0:
            session_id = session.doc.session_id
            with self._kept_lock:
                told = self._last_told.peek(session_id)
                if (told is None or told <= since) and self._told - since < KEPT_SESSIONS:
                    self._written.put(session_id, session)

    @property
    def queued(self) -> int:
        """Statements whose signal is not written yet."""
        with self._lock:
            return sum(len(q.statements) for q in self._queued.values())

    def run_once(self) -> None:
        """Write every queued signal: one append per session. Returns once what was queued when
        it was called is written, by this call or by one that was under way."""
        with self._writing:
            with self._lock:
                batch, self._queued = list(self._queued.values()), {}
            for queued in batch:
                self._append(queued)

    def flush(self) -> None:
        """Write what is queued now, in the caller's thread (what tests call before they read)."""
        self.run_once()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the loop, then write what is still queued."""
        with self._lock:
            self._closed = True
        super().stop(grace_s)
        self.run_once()

    def _append(self, queued: _Queued) -> None:
        ids = [s.doc.statement_id for s in queued.statements]
        since = self._appending()
        try:
            written = self.store.sessions.append_pending(queued.session, ids, self.keep)
        except AsyncQueryError as exc:  # the job's search still finds them
            log.warning("session %s: pending ids not written (%s)", queued.session.doc.session_id, exc)
            return
        finally:
            with self._kept_lock:
                self._appender = None
        if written is not None:
            self._keep(written, since)
            return
        error = f"Session {queued.session.doc.session_id} ended before the statement could run; submit it again"
        for statement in queued.statements:
            try:
                self.store.statements.fail(statement, error)
            except AsyncQueryError as exc:  # the session's end sweep fails it (liveness)
                log.warning("statement %s of an ended session not failed here (%s)", statement.doc.statement_id, exc)
