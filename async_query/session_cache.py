"""Session documents as GET last read them, for at most a few hundred milliseconds.

What a session contributes to a GET of a running statement (heartbeat freshness, progress) changes
once per heartbeat interval (seconds), while a statement may be polled many times a second by
many clients. So GET reads the statement by id every time (its state is never answered stale) and
takes the session from here when this process read it less than ``max_age_s`` ago. A write of
this process to a session (the connector's write listeners) drops its entry, so this process never
acts on a copy older than its own last write.
"""

from __future__ import annotations

import threading
import time

from async_query.caches import Cache
from query_core.models import SessionDoc, Versioned


class SessionCache:
    """A bounded, short-lived map from session id to the session document last read."""

    def __init__(self, max_age_s: float, entries: int = 10_000) -> None:
        self.max_age_s = max_age_s
        self._items: Cache[str, Versioned[SessionDoc]] = Cache(entries, ttl_s=max_age_s)
        self._lock = threading.Lock()
        #: Bumped by every :meth:`forget`: a read that started before a write of this process
        #: must not be kept after it.
        self._generation = 0

    @property
    def cache(self) -> Cache[str, Versioned[SessionDoc]]:
        """The bounded cache underneath (its hit and miss counts are the metrics')."""
        return self._items

    def generation(self) -> int:
        """Take before reading a session; hand to :meth:`put` with what was read."""
        return self._generation

    def get(self, session_id: str) -> Versioned[SessionDoc] | None:
        """The session read less than ``max_age_s`` ago, or None."""
        return self._items.get(session_id) if self.max_age_s > 0 else None

    def put(self, session: Versioned[SessionDoc], generation: int, read_at: float | None = None) -> None:
        """Keep ``session``, read in ``generation`` at ``read_at`` (monotonic; default now), unless
        this process wrote a session since, or a newer version of it is already kept. Its age
        counts from the read."""
        age = 0.0 if read_at is None else time.monotonic() - read_at
        if self.max_age_s - age <= 0:
            return
        key = session.doc.session_id
        with self._lock:
            if generation != self._generation:
                return
            kept = self._items.get(key)
            if kept is not None and kept.seq_no > session.seq_no:
                return
            self._items.put(key, session, ttl_s=self.max_age_s - age)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._generation += 1
            self._items.pop(session_id)
