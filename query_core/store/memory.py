"""An in-memory twin of the index client, for unit tests of everything above the repositories:
:class:`MemoryIndex` for the documents and :class:`MemoryAdmin` (its ``admin``) for index
administration, both over one in-memory cluster (its indexes, lock, injected failures, counted
calls and call listeners).

It keeps the rules a real cluster has (``docs/documents.md``), held to them by the same contract
tests as :class:`~query_core.store.client.IndexClient`:

- every index has one ``_seq_no`` counter and primary term 1; a write moves the document to the
  next ``_seq_no``; conditional writes compare both;
- reads by id are real-time; a search sees the index as of its last refresh, as a real cluster
  does (one refresh every ``refresh_interval_s``, taken lazily when a search comes; ``0`` makes
  every write searchable at once, as the embedded index server does); :meth:`refresh` refreshes
  now;
- indexes are created and mapped as the cluster client and a cluster do it: a document write
  creates a product index with its mappings (``index_mappings``), index names a cluster refuses
  are refused, and a write maps the fields its index lacks (dynamic mapping: strings as ``text``
  with a ``keyword`` sub-field or, in ISO form, ``date``; whole numbers ``long``, other numbers
  ``float``, ``boolean``, objects by their fields), unless the mapping says ``dynamic: false``
  (left unmapped) or ``strict`` (the write is refused). Not modelled: a value that does not fit
  its field's type, and dates in other formats than ISO 8601;
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

import index_mappings
from query_core.errors import (
    AsyncQueryError,
    DocumentExistsError,
    IndexOperationError,
    IndexUnavailableError,
    InvalidRequestError,
    VersionConflictError,
)
from query_core.ids import index_kind
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


#: Characters a cluster refuses in an index name (besides upper case).
_REFUSED_NAME_CHARS = frozenset(' ,"*\\<|>/?#:')
#: A string that dynamic mapping takes for a date (``strict_date_optional_time``).
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{2}(?::\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\Z")
#: The field types a cluster knows; a mapping naming another is refused.
_FIELD_TYPES = frozenset(
    {
        "text", "keyword", "match_only_text", "wildcard", "constant_keyword", "long", "integer", "short", "byte",
        "double", "float", "half_float", "scaled_float", "unsigned_long", "date", "date_nanos", "boolean",
        "binary", "object", "nested", "flat_object", "ip", "geo_point", "geo_shape", "integer_range",
        "long_range", "float_range", "double_range", "date_range", "ip_range", "completion",
        "search_as_you_type", "token_count", "alias", "join", "rank_feature", "rank_features", "percolator",
        "knn_vector", "version",
    }
)  # fmt: skip
_TEXT = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}


class _MappingRefusedError(Exception):
    """A write the index's mapping refuses (``strict``); each call reports it as the client does."""


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


class _MemoryCluster:
    """The in-memory cluster both sides of the twin share: its indexes, one lock around
    everything, the failures to inject, the calls made and the call listeners."""

    def __init__(self, refresh_interval_s: float) -> None:
        self.refresh_interval_s = refresh_interval_s
        self.indexes: dict[str, _Index] = {}
        self.lock = threading.RLock()
        self.failures: list[AsyncQueryError] = []
        self.calls: dict[str, int] = {}
        self.call_listeners: list[CallListener] = []


class _MemorySide:
    """What both sides of the twin have: the shared cluster, and the steps of a call on it."""

    def __init__(self, cluster: _MemoryCluster) -> None:
        self._cluster = cluster
        self._indexes = cluster.indexes
        self._lock = cluster.lock
        self._failures = cluster.failures
        #: Calls made on either side, by name ("get", "search"...), for tests that count index work.
        self.calls = cluster.calls
        #: The cluster's own list: a listener added on either side hears the calls of both.
        self.call_listeners = cluster.call_listeners

    @property
    def refresh_interval_s(self) -> float:
        return self._cluster.refresh_interval_s

    def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        failure = self._failures.pop(0) if self._failures else None
        if self.call_listeners:
            outcome = "2xx" if failure is None else "unreachable" if isinstance(failure, IndexUnavailableError) else "5xx"
            tell_call(self.call_listeners, _OPERATIONS.get(name, name), outcome)
        if failure is not None:
            raise failure

    def _index(self, name: str, create: bool = False) -> _Index | None:
        """The index ``name``; with ``create``, created when missing (by a bulk write: dynamic
        mappings; the caller has checked the name)."""
        found = self._indexes.get(name)
        if found is None and create:
            found = self._indexes[name] = _Index(refreshed_at=time.monotonic())
        return found

    def _matching(self, pattern: str) -> list[tuple[str, _Index]]:
        return [(name, idx) for name, idx in sorted(self._indexes.items()) if fnmatch.fnmatchcase(name, pattern)]

    def _store(self, idx: _Index, doc_id: str, source: dict[str, Any]) -> Version:
        """Write a document, mapping the fields its index lacks; :class:`_MappingRefusedError` (nothing
        written) when the mapping refuses one."""
        _map_new_fields(idx.body, source)
        seq_no = idx.next_seq()
        idx.docs[doc_id] = (source, seq_no)
        return Version(seq_no, PRIMARY_TERM)

    def _searchable(self, idx: _Index) -> dict[str, tuple[dict[str, Any], int]]:
        if time.monotonic() - idx.refreshed_at >= self.refresh_interval_s:
            self._refresh(idx)
        return idx.searchable

    @staticmethod
    def _refresh(idx: _Index) -> None:
        idx.searchable = dict(idx.docs)
        idx.refreshed_at = time.monotonic()

    def ping(self) -> bool:
        return not self._failures

    def close(self) -> None:
        """Nothing to release."""


class MemoryIndex(_MemorySide):
    """In-memory documents behind the :class:`~query_core.store.connector.IndexConnector` calls;
    :attr:`admin` administers the indexes of the same in-memory cluster."""

    def __init__(self, refresh_interval_s: float = 1.0) -> None:
        super().__init__(_MemoryCluster(refresh_interval_s))
        self.write_listeners: list[WriteListener] = []
        #: The index administration of the same in-memory cluster.
        self.admin = MemoryAdmin(self._cluster)

    # -- test controls ------------------------------------------------------------------------

    def fail_next(self, count: int = 1, error: AsyncQueryError | None = None) -> None:
        """Make the next ``count`` calls (of either side) fail with ``error`` (default: the index is
        unavailable)."""
        with self._lock:
            self._failures += [error or IndexUnavailableError("index server unavailable (injected)")] * count

    def _product_index(self, name: str) -> _Index:
        """The product index ``name``, created with its kind's mappings when missing (as the
        cluster client does before a document write)."""
        found = self._indexes.get(name)
        if found is None:
            refusal = _name_refusal(name)
            if refusal is not None:
                raise InvalidRequestError(f"create index {name}: invalid_index_name_exception: {refusal}")
            body = _normalized(index_mappings.load(index_kind(name)))
            found = self._indexes[name] = _Index(body=body, refreshed_at=time.monotonic())
        return found

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
                idx = self._product_index(index)
                if doc_id in idx.docs:
                    raise DocumentExistsError(f"create {index}/{doc_id}: document already exists")
                return self._write(idx, f"create {index}/{doc_id}", doc_id, copy.deepcopy(source))
        finally:
            tell(self.write_listeners, doc_id)

    def _write(self, idx: _Index, what: str, doc_id: str, source: dict[str, Any]) -> Version:
        """:meth:`_store` for a document call: a refusal as the client reports a 400."""
        try:
            return self._store(idx, doc_id, source)
        except _MappingRefusedError as exc:
            raise InvalidRequestError(f"{what}: strict_dynamic_mapping_exception: {exc}") from None

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        with self._lock:
            self._enter("put")
            idx = self._product_index(index)
            return self._write(idx, f"put {index}/{doc_id}", doc_id, copy.deepcopy(source))

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        try:
            with self._lock:
                self._enter("update_if")
                idx = self._checked(index, doc_id, version, "update")
                current = idx.docs[doc_id][0]
                source = {**current, **copy.deepcopy(partial)}
                if source == current:  # a real cluster detects a no-op update: no new version
                    return version
                return self._write(idx, f"update {index}/{doc_id}", doc_id, source)
        finally:
            tell(self.write_listeners, doc_id)

    def replace_if(self, index: str, doc_id: str, source: dict[str, Any], version: Version) -> Version:
        try:
            with self._lock:
                self._enter("replace_if")
                idx = self._checked(index, doc_id, version, "replace")
                return self._write(idx, f"replace {index}/{doc_id}", doc_id, copy.deepcopy(source))
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


class MemoryAdmin(_MemorySide):
    """The indexes of the in-memory cluster behind the :class:`~query_core.store.connector.IndexAdmin`
    calls (a :class:`MemoryIndex`'s ``admin``)."""

    # -- whole indexes ------------------------------------------------------------------------

    def index_exists(self, index: str) -> bool:
        with self._lock:
            self._enter("index_exists")
            return index in self._indexes

    def create_index(self, index: str, body: dict[str, Any]) -> bool:
        with self._lock:
            self._enter("create_index")
            refusal = _name_refusal(index)
            if refusal is not None:
                raise InvalidRequestError(f"create index {index}: invalid_index_name_exception: {refusal}")
            if index in self._indexes:
                return False
            unknown = _unknown_type(body.get("mappings", {}))
            if unknown is not None:
                raise InvalidRequestError(
                    f"create index {index}: mapper_parsing_exception: Failed to parse mapping [_doc]: "
                    f"No handler for type [{unknown[1]}] declared on field [{unknown[0]}]"
                )
            self._indexes[index] = _Index(body=_normalized(body), refreshed_at=time.monotonic())
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
            idx = self._existing(index, "put mapping")
            idx.body.setdefault("mappings", {})["_meta"] = copy.deepcopy(meta)

    def _existing(self, index: str, what: str) -> _Index:
        """The index, or the cluster's 404 as the client reports it."""
        idx = self._index(index)
        if idx is None:
            raise IndexOperationError(f"{what} {index}: 404 index_not_found_exception: no such index [{index}]")
        return idx

    def bulk_index(self, index: str, docs: Sequence[tuple[str | None, dict[str, Any]]]) -> int:
        """Every document the mapping takes is written; the first one refused is then reported, as
        the cluster client reports a refused item of a bulk request."""
        with self._lock:
            self._enter("bulk_index")
            refusal = _name_refusal(index)
            if refusal is not None and docs:
                raise IndexOperationError(
                    f"bulk {index}: document {docs[0][0] or '(new)'} refused (400): "
                    f"invalid_index_name_exception: {refusal}"
                )
            idx = self._index(index, create=True)
            assert idx is not None
            refused: list[str] = []
            for doc_id, source in docs:
                try:
                    self._store(idx, doc_id if doc_id is not None else f"auto-{idx.seq_no + 1}", copy.deepcopy(source))
                except _MappingRefusedError as exc:
                    refused.append(f"document {doc_id or '(new)'} refused (400): strict_dynamic_mapping_exception: {exc}")
            if refused:
                raise IndexOperationError(f"bulk {index}: {refused[0]}")
            return len(docs)

    def delete_all(self, index: str) -> int:
        """Every document, those not yet refreshed included (the cluster's is refreshed first)."""
        with self._lock:
            self._enter("delete_all")
            idx = self._existing(index, "delete_by_query")
            self._refresh(idx)
            doomed = [doc_id for doc_id in self._searchable(idx) if doc_id in idx.docs]
            for doc_id in doomed:
                idx.next_seq()
                del idx.docs[doc_id]
            self._refresh(idx)
            return len(doomed)

    def scan(
        self, index: str, batch: int = 1000, fields: Sequence[str] | None = None, filters: tuple[Filter, ...] = ()
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every document a search sees (as of the last refresh, as a cluster's scroll)."""
        with self._lock:
            self._enter("scan")
            idx = self._existing(index, "scan")
            items = [(doc_id, copy.deepcopy(src)) for doc_id, (src, _) in self._searchable(idx).items()]
        items = [(doc_id, src) for doc_id, src in items if _matches(src, filters)]
        if fields is not None:
            items = [(doc_id, _projected(src, fields)) for doc_id, src in items]
        yield from items


def _projected(source: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The parts of ``source`` that ``fields`` name (``a.b`` names ``b`` inside the object ``a``),
    as a cluster's ``_source`` filtering keeps them."""
    kept: dict[str, Any] = {}
    for name in fields:
        parts = name.split(".")
        value: Any = source
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            target = kept
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = copy.deepcopy(value)
    return kept


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


# -- indexes and mappings --------------------------------------------------------------------------


def _name_refusal(index: str) -> str | None:
    """Why a cluster refuses ``index`` as an index name; None when it takes it."""
    if index in (".", ".."):
        return f"Invalid index name [{index}], must not be '.' or '..'"
    if index.startswith(("_", "-", "+")):
        return f"Invalid index name [{index}], must not start with '_', '-', or '+'"
    if index != index.lower() or any(c in _REFUSED_NAME_CHARS for c in index):
        return (
            f"Invalid index name [{index}], must be lowercase and must not contain the following characters: "
            '[ , ", *, \\, <, |, ,, >, /, ?]'
        )
    return None


def _unknown_type(mapping: dict[str, Any], path: str = "") -> tuple[str, str] | None:
    """The first field of ``mapping`` (and its sub-fields) of a type no cluster knows: (field, type)."""
    for name, spec in mapping.get("properties", {}).items():
        field_path = f"{path}{name}"
        kind = spec.get("type")
        if kind is not None and kind not in _FIELD_TYPES:
            return field_path, str(kind)
        found = _unknown_type(spec, f"{field_path}.") or _unknown_type(
            {"properties": spec.get("fields", {})}, f"{field_path}."
        )
        if found is not None:
            return found
    return None


def _normalized(body: dict[str, Any]) -> dict[str, Any]:
    """A create-index body as a cluster keeps its mappings: ``dynamic`` as a string, and an object
    field with fields of its own without ``type: object``."""

    def mapping(spec: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k != "properties"}
        if isinstance(out.get("dynamic"), bool):
            out["dynamic"] = str(out["dynamic"]).lower()
        if "properties" in spec:
            out["properties"] = {name: mapping(field) for name, field in spec["properties"].items()}
            if out.get("type") == "object":
                del out["type"]
        return out

    body = copy.deepcopy(body)
    if "mappings" in body:
        body["mappings"] = mapping(body["mappings"])
    return body


def _map_new_fields(body: dict[str, Any], source: dict[str, Any]) -> None:
    """Map the fields of ``source`` that the index's mappings lack, as a cluster's dynamic mapping
    does. :class:`_MappingRefusedError` (nothing mapped) when a ``strict`` mapping meets a new field."""
    mapping = body.get("mappings", {})
    additions: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
    _new_fields(mapping, source, str(mapping.get("dynamic", "true")).lower(), "", additions)
    if not additions:
        return
    body.setdefault("mappings", mapping)
    for owner, name, spec in additions:
        owner.setdefault("properties", {})[name] = spec
        if owner.get("type") == "object":
            del owner["type"]


def _new_fields(
    mapping: dict[str, Any],
    source: dict[str, Any],
    dynamic: str,
    path: str,
    additions: list[tuple[dict[str, Any], str, dict[str, Any]]],
) -> None:
    known = mapping.get("properties", {})
    for name, value in source.items():
        spec = known.get(name)
        if spec is None:
            new = None if dynamic == "false" else _dynamic_spec(value)
            if new is None:
                continue
            if dynamic == "strict":
                where = path.rstrip(".") or "_doc"
                raise _MappingRefusedError(
                    f"mapping set to strict, dynamic introduction of [{name}] within [{where}] is not allowed"
                )
            additions.append((mapping, name, new))
            continue
        if "properties" in spec or spec.get("type") in ("object", "nested", None):
            if spec.get("enabled", True) is False:
                continue
            inner = str(spec.get("dynamic", dynamic)).lower()
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    _new_fields(spec, item, inner, f"{path}{name}.", additions)


def _dynamic_spec(value: Any) -> dict[str, Any] | None:
    """The mapping a cluster gives a new field holding ``value``; None while there is nothing to
    map (null, an empty list)."""
    if isinstance(value, list):
        items = [v for v in value if v is not None]
        if items and all(isinstance(v, dict) for v in items):
            return _object_spec(items)
        return _dynamic_spec(items[0]) if items else None
    if isinstance(value, dict):
        return _object_spec([value])
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "long"}
    if isinstance(value, float):
        return {"type": "float"}
    if isinstance(value, str):
        return {"type": "date"} if _ISO_DATE.match(value) else copy.deepcopy(_TEXT)
    return None


def _object_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for obj in objects:
        for name, value in obj.items():
            spec = _dynamic_spec(value)
            if spec is not None:
                properties.setdefault(name, spec)
    return {"properties": properties} if properties else {"type": "object"}
