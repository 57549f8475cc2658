"""The files a table's scan lists, as the acceleration reads them (``docs/acceleration.md``).

Sending a listing of a thousand paths from the JVM to Python costs tens of milliseconds (one long
reply through the gateway's socket), more than everything else a query's acceleration does. The
JVM hashes the listing instead (SHA-256 of its paths, joined by a separator no path holds; a few
calls, 32 bytes back), and the paths themselves are sent only for a hash not seen before. A hash
names one listing, order included, so a listing read earlier under the same hash is the listing
now: a file added, removed or renamed changes the hash and is read afresh. Listings are kept for
the session, :data:`MAX_CACHED_PATHS` paths at most over all of them, the least recently used
dropped first.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from flint_repl_job.acceleration.files import normalize_path

if TYPE_CHECKING:
    from flint_repl_job.acceleration.plans import Plans

#: Paths kept over all listings.
MAX_CACHED_PATHS = 200_000


class Listings:
    """Scans' file listings, each read from the JVM once per distinct listing."""

    def __init__(self, plans: Plans, max_paths: int = MAX_CACHED_PATHS) -> None:
        self.plans = plans
        self.max_paths = max_paths
        self._paths: LRUCache[bytes, tuple[str, ...]] = LRUCache(maxsize=max_paths, getsizeof=lambda p: max(len(p), 1))
        self._lock = threading.Lock()  # a statement left running past its timeout may still ask
        #: Listings read from the JVM (not from the cache), for tests and figures.
        self.reads = 0

    def files(self, relation: Any) -> tuple[str, ...]:
        """The normalized paths the scan of file relation ``relation`` (a ``LogicalRelation``)
        lists, after the optimizer's partition pruning."""
        listed = relation.relation().location().inputFiles()
        key = self.plans.digest(listed)
        with self._lock:
            found = self._paths.get(key)
        if found is None:
            found = tuple(normalize_path(p) for p in self.plans.strings(listed))
            with self._lock:
                self.reads += 1
                if max(len(found), 1) <= self.max_paths:
                    self._paths[key] = found
        return found


__all__ = ["MAX_CACHED_PATHS", "Listings"]
