"""Failed logins, counted per client address: an address that fails too often is refused for a
while without a password check (docs/security.md, "Failed logins").

Every failed check of an Authorization header (a wrong password, an unknown user, a header the
cluster refuses) counts against the address it came from. Once an address has
``auth_failures_allowed`` failures within ``auth_failures_window_s``, every request from it that
would need a check is answered 429 for ``auth_block_s`` seconds, without one: guessing a password
then costs the guesser time instead of costing the service a core per guess. A header already
verified (in the credential cache) is still let in: it proves its holder knows the password, so
refusing it protects nothing.

Counting is per address, never per user name: a count per user would let anyone lock a user out by
failing in their name. Both tables are bounded (``MAX_TRACKED`` addresses, the least recently
seen dropped first), so a flood of addresses costs memory only up to that bound.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache, TTLCache

from async_query.security.errors import TooManyFailedLoginsError

#: Addresses whose failures are counted at once, and addresses blocked at once.
MAX_TRACKED = 100_000


@dataclass
class _Count:
    first: float
    failures: int


class FailedLogins:
    """Failures per client address, and the addresses refused for now."""

    def __init__(
        self,
        allowed: int,
        window_s: float,
        block_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = MAX_TRACKED,
    ) -> None:
        #: 0 (or a zero window or block): nothing is counted or refused.
        self.enabled = allowed > 0 and window_s > 0 and block_s > 0
        self.allowed = allowed
        self.window_s = window_s
        self.block_s = block_s
        self._clock = clock
        self._counts: LRUCache[str, _Count] = LRUCache(maxsize=max_tracked)
        self._blocked: TTLCache[str, float] = TTLCache(maxsize=max_tracked, ttl=max(block_s, 1.0), timer=clock)
        self._lock = threading.Lock()

    def check(self, client: str | None) -> None:
        """Raise :class:`TooManyFailedLoginsError` while ``client`` is refused."""
        if not self.enabled or client is None:
            return
        with self._lock:
            until = self._blocked.get(client)
        if until is not None:
            left = until - self._clock()
            if left > 0:
                raise TooManyFailedLoginsError(math.ceil(left))

    def failed(self, client: str | None) -> None:
        """Count a failed check from ``client``; the failure that reaches the limit blocks it."""
        if not self.enabled or client is None:
            return
        now = self._clock()
        with self._lock:
            count = self._counts.get(client)
            if count is None or now - count.first >= self.window_s:
                count = _Count(now, 0)
            count.failures += 1
            self._counts[client] = count
            if count.failures >= self.allowed:
                self._blocked[client] = now + self.block_s
                del self._counts[client]

    def blocked(self) -> int:
        """How many addresses are refused now (for health and tests)."""
        with self._lock:
            self._blocked.expire()
            return len(self._blocked)


__all__ = ["MAX_TRACKED", "FailedLogins"]
