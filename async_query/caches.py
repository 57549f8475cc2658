"""The one cache of the plugin: bounded (by entries, or by a size such as bytes), least recently used
out first, entries optionally expiring, safe to share between threads.

Every cache of the plugin is one of these (finished replies, the session of a query, sessions as
GET last read them, launcher answers about suspect sessions, datasource lookups), so none of them
can grow without bound, whatever the clients ask for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K")
V = TypeVar("V")


class Cache(Generic[K, V]):
    """At most ``maxsize`` entries (or, with ``sizeof``, values of at most ``maxsize`` in all).

    ``ttl_s`` is how long an entry is served after it was put (None: until it is pushed out); a
    put may give its own. A value larger than the whole cache is not kept.
    """

    def __init__(self, maxsize: int, ttl_s: float | None = None, sizeof: Callable[[V], int] | None = None) -> None:
        self.maxsize = maxsize
        self.ttl_s = ttl_s
        size: Callable[[tuple[float, V]], int] = (lambda item: sizeof(item[1])) if sizeof else (lambda item: 1)
        self._items: LRUCache[K, tuple[float, V]] = LRUCache(maxsize=max(1, maxsize), getsizeof=size)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None and item[0] < time.monotonic():
                del self._items[key]
                item = None
            if item is None:
                self.misses += 1
                return None
            self.hits += 1
            return item[1]

    def peek(self, key: K) -> V | None:
        """The value of ``key`` if kept and fresh, without counting a hit or a miss (bookkeeping
        lookups that are no part of the cache's work)."""
        with self._lock:
            item = self._items.get(key)
            return item[1] if item is not None and item[0] >= time.monotonic() else None

    def put(self, key: K, value: V, ttl_s: float | None = None) -> None:
        ttl = ttl_s if ttl_s is not None else self.ttl_s
        expires = time.monotonic() + ttl if ttl is not None else float("inf")
        with self._lock:
            try:
                self._items[key] = (expires, value)
            except ValueError:  # larger than the whole cache: not kept
                self._items.pop(key, None)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def size(self) -> int:
        """What the entries weigh in all (their count, without ``sizeof``)."""
        with self._lock:
            return int(self._items.currsize)
