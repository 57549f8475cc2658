"""The two small interfaces of a cluster, and the typed queries they take.

- :class:`DocumentConnector`: the product's documents (statements, sessions, results, index
  states, datasources, locks), the one interface every repository is written against;
- :class:`IndexAdmin`: whole indexes and their contents in bulk, for the Flint data indexes (which
  are not documents of this product): create, delete, mappings and their ``_meta``, bulk writes,
  scans. Its users (the job's Flint engine and its ``opensearch`` data source, the plugin's index
  DML and housekeeping) depend on it alone.

Two connectors implement both (:class:`IndexConnector`: the documents, and their ``admin``, the
index administration over the same connection): :class:`query_core.store.client.IndexClient`
(an OpenSearch cluster, the only user of opensearch-py) and :class:`query_core.store.memory.MemoryIndex`
(an in-memory twin for unit tests). One contract suite holds both to the same behaviour, every call
of both interfaces (``tests/integration/test_store_contract.py``), to these rules (those of
documents are explained in ``docs/documents.md``):

- reads by id are real-time: a write is visible to the next read by id;
- searches see a write only after the index refreshes (a real cluster refreshes every second):
  nothing on a hot path may depend on a search seeing a fresh write;
- a create-only write of a taken id raises :class:`~query_core.errors.DocumentExistsError`;
- a conditional write (``update_if``/``delete_if``) at a version that is no longer the document's
  (or of a document that is gone) raises :class:`~query_core.errors.VersionConflictError`;
- an index is created on its first write; a read or search of a missing index finds nothing;
- index administration of a missing index: ``index_exists`` and ``delete_index`` say so,
  ``mappings`` finds nothing, and ``put_mapping_meta``, ``delete_all`` and ``scan`` raise
  :class:`~query_core.errors.IndexOperationError`;
- an index created without a mapping for a field maps it on the first write that has it (strings
  as ``text`` with a ``keyword`` sub-field, or ``date`` when they read as one; whole numbers as
  ``long``, others as ``float``; ``boolean``; objects by their fields), unless its mapping says
  ``dynamic: false`` (the field is kept unmapped) or ``strict`` (the write is refused).

Queries are a tiny typed language (:class:`Query` of :class:`Term`, :class:`Terms` and
:class:`Range` filters, a sort and a size) rather than raw query DSL, so the twin need not parse
the DSL and every query the product makes is one the twin answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

JsonScalar = str | int | float | bool


@dataclass(frozen=True)
class Version:
    """Where a document stood when it was read or written: the key of a conditional write."""

    seq_no: int
    primary_term: int


@dataclass(frozen=True)
class Found:
    """A document read by id or found by a search: its id, source and version."""

    doc_id: str
    source: dict[str, Any]
    version: Version


@dataclass(frozen=True)
class Term:
    """The field equals ``value``."""

    field: str
    value: JsonScalar


@dataclass(frozen=True)
class Terms:
    """The field equals one of ``values``."""

    field: str
    values: tuple[JsonScalar, ...]


@dataclass(frozen=True)
class Range:
    """The field lies in a range. Bounds are numbers (epoch millis for dates) or date math of
    the form ``now-<n><unit>`` (units ``s``, ``m``, ``h``, ``d``)."""

    field: str
    gte: int | str | None = None
    lt: int | str | None = None


Filter = Term | Terms | Range
SortOrder = Literal["asc", "desc"]


@dataclass(frozen=True)
class Query:
    """Documents matching every filter (none: all), sorted, at most ``size`` of them."""

    filters: tuple[Filter, ...] = ()
    sort: tuple[tuple[str, SortOrder], ...] = ()
    size: int = 1000


#: Called with a document's id after this process wrote it (or tried to: a conflict means someone
#: else did), so caches of documents can drop their copy.
WriteListener = Callable[[str], None]
#: Called once per call to the cluster with its operation (``get``, ``search``, ``create_index``...),
#: its outcome (:data:`CALL_OUTCOMES`) and how many times it was retried: how a program counts its
#: index calls (the plugin's metrics, a job's heartbeat figures; ``docs/metrics.md``).
CallListener = Callable[[str, str, int], None]
#: The outcomes of an index call: the status class of the cluster's answer, ``unreachable`` when
#: none came (connection refused or reset, timeout), ``error`` for a failure on this side.
CALL_OUTCOMES = ("2xx", "4xx", "5xx", "unreachable", "error")


class Connection(Protocol):
    """What both interfaces share: one cluster's call listeners, a liveness check and a close."""

    call_listeners: list[CallListener]

    def ping(self) -> bool: ...

    def close(self) -> None: ...


class DocumentConnector(Connection, Protocol):
    """The product's documents (see the module's documentation for the rules)."""

    write_listeners: list[WriteListener]

    def get(self, index: str, doc_id: str) -> Found | None:
        """The document, read in real time; None when absent."""
        ...

    def get_many(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        """Several documents of one index in one round trip, in the order asked."""
        ...

    async def get_many_async(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        """The same on the event loop, without a worker thread (GET's hot path). Raises
        :class:`~query_core.realtime.ReadNotServed` when it cannot be had that way: the caller
        then reads the blocking way, with retries."""
        ...

    def create(self, index: str, doc_id: str, source: dict[str, Any], *, recheck: bool = False) -> Version:
        """Create-only write. ``recheck`` makes sure again that the index exists with its
        mappings (a new session does: an index server that lost its indexes lost every session)."""
        ...

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        """Idempotent overwrite, for documents whose id makes a retry harmless (results)."""
        ...

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        """Partial update applied only while the document is at ``version``."""
        ...

    def replace_if(self, index: str, doc_id: str, source: dict[str, Any], version: Version) -> Version:
        """Whole-document write applied only while the document is at ``version`` (for documents
        written whole; it costs the cluster no read of the document, unlike :meth:`update_if`)."""
        ...

    def delete_if(self, index: str, doc_id: str, version: Version) -> None:
        """Delete applied only while the document is at ``version``."""
        ...

    def delete(self, index: str, doc_id: str) -> bool:
        """Delete unconditionally; False when there was nothing to delete."""
        ...

    def search(self, index: str, query: Query) -> list[Found]:
        """Matching documents as of the last refresh (``index`` may be a ``*`` pattern)."""
        ...

    def delete_by_query(self, index: str, query: Query) -> int:
        """Delete the matching documents (as of the last refresh); returns how many."""
        ...

    def refresh(self, index: str) -> None:
        """Make every write so far searchable (tests; the product never waits for it)."""
        ...


class IndexAdmin(Connection, Protocol):
    """Whole indexes and their contents in bulk: the Flint data indexes."""

    def index_exists(self, index: str) -> bool: ...

    def create_index(self, index: str, body: dict[str, Any]) -> bool:
        """Create ``index`` with ``body`` (settings, mappings) unless it exists; True if created."""
        ...

    def delete_index(self, index: str) -> bool:
        """Delete ``index`` and its documents; False when there was none."""
        ...

    def mappings(self, pattern: str) -> dict[str, dict[str, Any]]:
        """The mappings of every index matching ``pattern`` (a name or a ``*`` pattern), by name."""
        ...

    def put_mapping_meta(self, index: str, meta: dict[str, Any]) -> None:
        """Replace the mapping's ``_meta`` of ``index``."""
        ...

    def bulk_index(self, index: str, docs: Sequence[tuple[str | None, dict[str, Any]]]) -> int:
        """Index documents (id None: the server picks one); returns how many were indexed. The
        index is created on the first write, with dynamic mappings."""
        ...

    def delete_all(self, index: str) -> int:
        """Delete every document of ``index``, those written a moment ago included (the index and
        its mapping stay); returns how many."""
        ...

    def scan(
        self, index: str, batch: int = 1000, fields: Sequence[str] | None = None, filters: tuple[Filter, ...] = ()
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every document of the index (matching every filter) as (id, source); with ``fields``,
        each source holds only those of its fields (the others are not sent)."""
        ...


class IndexConnector(DocumentConnector, Protocol):
    """Both interfaces over one cluster: the documents, and :attr:`admin` the administration of
    its indexes, sharing the connection (its call listeners, ping and close). What
    :class:`~query_core.store.client.IndexClient` and :class:`~query_core.store.memory.MemoryIndex`
    are, and what a :class:`~query_core.store.Store` holds."""

    @property
    def admin(self) -> IndexAdmin:
        """The index administration of the same cluster, on the same connection."""
        ...


def tell(listeners: list[WriteListener], doc_id: str) -> None:
    """Tell every write listener that ``doc_id`` was written (or a write of it was tried)."""
    for listener in listeners:
        listener(doc_id)


def tell_call(listeners: list[CallListener], operation: str, outcome: str, retries: int = 0) -> None:
    """Tell every call listener how one index call went; a failing listener never fails the call."""
    for listener in listeners:
        try:
            listener(operation, outcome, retries)
        except Exception:  # counting must not break the product's work
            logging.getLogger(__name__).exception("index call listener failed")
