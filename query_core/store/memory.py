"""An in-memory twin of the index client, for unit tests of everything above the repositories.

It keeps the rules a real cluster has (``docs/documents.md``), held to them by the same contract
tests as :class:`~query_core.store.client.IndexClient`:

- every index has one ``_seq_no`` counter and primary term 1; a write moves the document to the
  next ``_seq_no``; conditional writes compare both;
- reads by id are real-time; a search sees the index as of its last refresh, as a real cluster
  does (one refresh every ``refresh_interval_s``, taken lazily when a search comes; ``0`` makes
  every write searchable at once, as the embedded index server does); :meth:`refresh` refreshes
  now;
- failures can be injected (:meth:`fail_next`) to test what callers do when the index is away;
- call listeners are told of every call, under the cluster client's operation names: ``2xx``, or
  the injected failure's outcome (a conflict is told as answered, ``2xx``: the twin decides it
  after the call is counted).

Thread-safe: one lock around everything (tests drive workers and handlers from several threads).
"""

from __future__ import annotations

import copy
import fnmatch
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from query_core.errors import AsyncQueryError, DocumentExistsError, IndexUnavailableError, VersionConflictError
from query_core.store.connector import (
    CallListener,
    Filter,
    Found,
    Query,
    Range,
    Term,
    Terms,
    Version,
    WriteListener,
    tell,
    tell_call,
)

PRIMARY_TERM = 1
_DATE_MATH = re.compile(r"now(?:-(\d+)([smhd]))?\Z")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: The twin's calls under the operation names the cluster client tells its call listeners.
_OPERATIONS = {
    "get_many": "mget",
    "update_if": "update",
    "delete_if": "delete",
    "index_exists": "exists",
    "mappings": "get_mapping",
    "put_mapping_meta": "put_mapping",
    "bulk_index": "bulk",
    "delete_all": "delete_by_query",
}


@dataclass
class _Index:
    body: dict[str, Any] = field(default_factory=dict)
    docs: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    seq_no: int = -1
    #: The documents a search sees (the last refresh's copy) and when it was taken (monotonic).
    searchable: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    refreshed_at: float = 0.0

    def next_seq(self) -> int:
        self.seq_no += 1
        return self.seq_no


class MemoryIndex:
    """In-memory documents and indexes behind the :class:`~query_core.store.connector.IndexConnector` calls."""

    def __init__(self, refresh_interval_s: float = 1.0) -> None:
        self.refresh_interval_s = refresh_interval_s
        self.write_listeners: list[WriteListener] = []
        self.call_listeners: list[CallListener] = []
        self._indexes: dict[str, _Index] = {}
        self._lock = threading.RLock()
        self._failures: list[AsyncQueryError] = []
        #: Calls made, by name ("get", "search"...), for tests that count index work.
        self.calls: dict[str, int] = {}

    # -- test controls ------------------------------------------------------------------------

    def fail_next(self, count: int = 1, error: AsyncQueryError | None = None) -> None:
        """Make the next ``count`` calls fail with ``error`` (default: the index is unavailable)."""
        with self._lock:
            self._failures += [error or IndexUnavailableError("index server unavailable (injected)")] * count

    def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        failure = self._failures.pop(0) if self._failures else None
        if self.call_listeners:
            outcome = "2xx" if failure is None else "unreachable" if isinstance(failure, IndexUnavailableError) else "5xx"
            tell_call(self.call_listeners, _OPERATIONS.get(name, name), outcome)
        if failure is not None:
            raise failure

    def _index(self, name: str, create: bool = False) -> _Index | None:
        found = self._indexes.get(name)
        if found is None and create:
            found = self._indexes[name] = _Index(refreshed_at=time.monotonic())
        return found

    def _matching(self, pattern: str) -> list[tuple[str, _Index]]:
        return [(name, idx) for name, idx in sorted(self._indexes.items()) if fnmatch.fnmatchcase(name, pattern)]

    # -- documents --------------------------------------------------------------------------

    def get(self, index: str, doc_id: str) -> Found | None:
        with self._lock:
            self._enter("get")
            return self._read(index, doc_id)

    def _read(self, index: str, doc_id: str) -> Found | None:
        idx = self._index(index)
        if idx is None or doc_id not in idx.docs:
            return None
        source, seq_no = idx.docs[doc_id]
        return Found(doc_id, copy.deepcopy(source), Version(seq_no, PRIMARY_TERM))

    def get_many(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        with self._lock:
            self._enter("get_many")
            return [self._read(index, doc_id) for doc_id in doc_ids]

    async def get_many_async(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        return self.get_many(index, doc_ids)

    def create(self, index: str, doc_id: str, source: dict[str, Any], *, recheck: bool = False) -> Version:
        try:
            with self._lock:
                self._enter("create")
                idx = self._index(index, create=True)
                assert idx is not None
                if doc_id in idx.docs:
                    raise DocumentExistsError(f"create {index}/{doc_id}: document already exists")
                return self._store(idx, doc_id, copy.deepcopy(source))
        finally:
            tell(self.write_listeners, doc_id)

    def _store(self, idx: _Index, doc_id: str, source: dict[str, Any]) -> Version:
        seq_no = idx.next_seq()
        idx.docs[doc_id] = (source, seq_no)
        return Version(seq_no, PRIMARY_TERM)

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        with self._lock:
            self._enter("put")
            idx = self._index(index, create=True)
            assert idx is not None
            return self._store(idx, doc_id, copy.deepcopy(source))

    def update_liveness_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        """As :meth:`update_if` (memory has no durability to spare)."""
        return self.update_if(index, doc_id, partial, version)

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        try:
            with self._lock:
                self._enter("update_if")
                idx = self._checked(index, doc_id, version, "update")
                current = idx.docs[doc_id][0]
                source = {**current, **copy.deepcopy(partial)}
                if source == current:  # a real cluster detects a no-op update: no new version
                    return version
                return self._store(idx, doc_id, source)
        finally:
            tell(self.write_listeners, doc_id)

    def _checked(self, index: str, doc_id: str, version: Version, what: str) -> _Index:
        idx = self._index(index)
        current = idx.docs.get(doc_id) if idx is not None else None
        if idx is None or current is None:
            raise VersionConflictError(f"{what} {index}/{doc_id}: document missing")
        if current[1] != version.seq_no or version.primary_term != PRIMARY_TERM:
            raise VersionConflictError(
                f"{what} {index}/{doc_id}: version conflict, required seqNo [{version.seq_no}], "
                f"current document has seqNo [{current[1]}]"
            )
        return idx

    def delete_if(self, index: str, doc_id: str, version: Version) -> None:
        try:
            with self._lock:
                self._enter("delete_if")
                idx = self._checked(index, doc_id, version, "delete")
                idx.next_seq()
                del idx.docs[doc_id]
        finally:
            tell(self.write_listeners, doc_id)

    def delete(self, index: str, doc_id: str) -> bool:
        try:
            with self._lock:
                self._enter("delete")
                idx = self._index(index)
                if idx is None or doc_id not in idx.docs:
                    return False
                idx.next_seq()
                del idx.docs[doc_id]
                return True
        finally:
            tell(self.write_listeners, doc_id)

    def search(self, index: str, query: Query) -> list[Found]:
        with self._lock:
            self._enter("search")
            hits = [
                Found(doc_id, copy.deepcopy(source), Version(seq_no, PRIMARY_TERM))
                for _, idx in self._matching(index)
                for doc_id, (source, seq_no) in self._searchable(idx).items()
                if _matches(source, query.filters)
            ]
        return _sorted(hits, query)[: query.size]

    def _searchable(self, idx: _Index) -> dict[str, tuple[dict[str, Any], int]]:
        if time.monotonic() - idx.refreshed_at >= self.refresh_interval_s:
            self._refresh(idx)
        return idx.searchable

    @staticmethod
    def _refresh(idx: _Index) -> None:
        idx.searchable = dict(idx.docs)
        idx.refreshed_at = time.monotonic()

    def delete_by_query(self, index: str, query: Query) -> int:
        with self._lock:
            self._enter("delete_by_query")
            deleted = 0
            for _, idx in self._matching(index):
                doomed = [
                    doc_id for doc_id, (source, _) in self._searchable(idx).items() if _matches(source, query.filters)
                ]
                for doc_id in doomed:
                    if doc_id in idx.docs:
                        idx.next_seq()
                        del idx.docs[doc_id]
                        deleted += 1
        return deleted

    def refresh(self, index: str) -> None:
        with self._lock:
            for _, idx in self._matching(index):
                self._refresh(idx)

    # -- whole indexes ------------------------------------------------------------------------

    def index_exists(self, index: str) -> bool:
        with self._lock:
            self._enter("index_exists")
            return index in self._indexes

    def create_index(self, index: str, body: dict[str, Any]) -> bool:
        with self._lock:
            self._enter("create_index")
            if index in self._indexes:
                return False
            self._indexes[index] = _Index(body=copy.deepcopy(body), refreshed_at=time.monotonic())
            return True

    def delete_index(self, index: str) -> bool:
        with self._lock:
            self._enter("delete_index")
            return self._indexes.pop(index, None) is not None

    def mappings(self, pattern: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            self._enter("mappings")
            return {name: copy.deepcopy(idx.body.get("mappings", {})) for name, idx in self._matching(pattern)}

    def put_mapping_meta(self, index: str, meta: dict[str, Any]) -> None:
        with self._lock:
            self._enter("put_mapping_meta")
            idx = self._index(index)
            if idx is None:
                raise VersionConflictError(f"put mapping {index}: no such index")
            idx.body.setdefault("mappings", {})["_meta"] = copy.deepcopy(meta)

    def bulk_index(self, index: str, docs: Sequence[tuple[str | None, dict[str, Any]]]) -> int:
        with self._lock:
            self._enter("bulk_index")
            idx = self._index(index, create=True)
            assert idx is not None
            for doc_id, source in docs:
                self._store(idx, doc_id if doc_id is not None else f"auto-{idx.seq_no + 1}", copy.deepcopy(source))
            return len(docs)

    def delete_all(self, index: str) -> int:
        with self._lock:
            self._enter("delete_all")
            idx = self._index(index)
            if idx is None:
                return 0
            deleted = len(idx.docs)
            idx.docs.clear()
            idx.next_seq()
            return deleted

    def scan(self, index: str, batch: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
        with self._lock:
            self._enter("scan")
            idx = self._index(index)
            items = [] if idx is None else [(doc_id, copy.deepcopy(src)) for doc_id, (src, _) in idx.docs.items()]
        yield from items

    # -- the connection ---------------------------------------------------------------------

    def ping(self) -> bool:
        return not self._failures

    def close(self) -> None:
        """Nothing to release."""


# -- queries --------------------------------------------------------------------------------------


def _field(source: dict[str, Any], name: str) -> Any:
    value: Any = source
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _bound(value: int | str) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _DATE_MATH.match(value)
    if match is None:
        raise ValueError(f"date math {value!r} is not of the form now-<n><unit>")
    offset = int(match.group(1)) * _UNIT_MS[match.group(2)] if match.group(1) else 0
    return time.time() * 1000 - offset


def _matches_one(source: dict[str, Any], item: Filter) -> bool:
    value = _field(source, item.field)
    values = value if isinstance(value, list) else [value]
    if isinstance(item, Term):
        return item.value in values
    if isinstance(item, Terms):
        return any(v in item.values for v in values)
    assert isinstance(item, Range)
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return any(
        (item.gte is None or n >= _bound(item.gte)) and (item.lt is None or n < _bound(item.lt)) for n in numbers
    )


def _matches(source: dict[str, Any], filters: tuple[Filter, ...]) -> bool:
    return all(_matches_one(source, item) for item in filters)


def _sorted(hits: list[Found], query: Query) -> list[Found]:
    """Sorted by the query's fields, in the order given; a document without a field sorts last."""
    for name, order in reversed(query.sort):
        present = [h for h in hits if _field(h.source, name) is not None]
        missing = [h for h in hits if _field(h.source, name) is None]
        present.sort(key=lambda h, n=name: _field(h.source, n), reverse=order == "desc")  # type: ignore[misc]
        hits = present + missing
    return hits
