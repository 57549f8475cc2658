"""The Flint indexes of a table, and a skipping index's documents, read through the store.

One mapping request per table finds its indexes (their ``_meta``), one read by id per index its
state document, one scroll of only the fields a query needs a skipping index's documents. Any
failure (the index cluster down, an index gone meanwhile, a ``_meta`` that is not understood)
raises :class:`IndexLookupError`; the accelerator then reads the table as if it had no index.

A skipping index's documents are kept between queries (:data:`MAX_CACHED_DOCUMENTS` at most, the
least recently used dropped first) and read again only when the table lists a file they do not
describe. That is safe because a document states facts about one file, and a table's files are
never rewritten under the same name (Spark writes each new file under a new one): a document
read earlier is as true as one read now, and a file it does not know is asked about again. The
cache is keyed by the index's columns, so an index made again with other columns is read anew.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from flint_repl_job.acceleration.skipping import FILE_PATH_FIELD, documents_by_path
from query_core.errors import AsyncQueryError
from query_core.flint import IndexKind
from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_metas
from query_core.flint.naming import FLINT_INDEX_PREFIX, latest_id, sanitize_index_name
from query_core.states import FlintIndexState
from query_core.store import Store

#: Index documents kept between queries, all skipping indexes together.
MAX_CACHED_DOCUMENTS = 200_000

Documents = Mapping[str, Mapping[str, Any]]


class IndexLookupError(Exception):
    """The indexes of a table could not be read: the query reads the table as if it had none."""


@dataclass(frozen=True)
class FoundIndex:
    meta: IndexMeta
    state: FlintIndexState | None


@dataclass(frozen=True)
class TableIndexes:
    """The skipping index of a table, if any, and its covering indexes sorted by name."""

    skipping: FoundIndex | None
    covering: tuple[FoundIndex, ...]

    @property
    def any(self) -> bool:
        return self.skipping is not None or bool(self.covering)


NO_INDEXES = TableIndexes(None, ())


class IndexLookup:
    def __init__(self, store: Store, datasource: str) -> None:
        self.store = store
        self.datasource = datasource
        self._documents: LRUCache[tuple[str, str, tuple[str, ...]], Documents] = LRUCache(
            maxsize=MAX_CACHED_DOCUMENTS, getsizeof=len
        )

    def indexes_of(self, table: str) -> TableIndexes:
        """The skipping and covering indexes of ``table`` (``catalog.db.table``)."""
        pattern = sanitize_index_name(FLINT_INDEX_PREFIX + table.replace(".", "_") + "_") + "*"
        try:
            metas = flint_metas(self.store.admin, pattern)
        except AsyncQueryError as exc:
            raise IndexLookupError(f"cannot list the indexes of {table}: {exc}") from exc
        skipping: FoundIndex | None = None
        covering = []
        for name, raw in sorted(metas.items()):
            meta = IndexMeta.from_meta(name, raw)
            if meta is None or meta.source.lower() != table.lower() or meta.kind is IndexKind.MV:
                continue
            found = FoundIndex(meta, self._state(name))
            if meta.kind is IndexKind.SKIPPING:
                skipping = found
            else:
                covering.append(found)
        return TableIndexes(skipping, tuple(covering))

    def _state(self, index_name: str) -> FlintIndexState | None:
        try:
            found = self.store.index_states.get(self.datasource, latest_id(index_name))
        except AsyncQueryError as exc:
            raise IndexLookupError(f"cannot read the state of {index_name}: {exc}") from exc
        return found.doc.state if found is not None else None

    def skipping_documents(self, meta: IndexMeta, fields: Sequence[str], listed: Sequence[str]) -> Documents:
        """The skipping index's documents by normalized file path, with only ``fields``: those
        read before if they describe every file of ``listed`` (normalized paths), else read now."""
        wanted = tuple(sorted({FILE_PATH_FIELD, *fields}))
        key = (meta.index_name, json.dumps(meta.indexed_columns, sort_keys=True, default=str), wanted)
        cached = self._documents.get(key)
        if cached is not None and all(path in cached for path in listed):
            return cached
        try:
            hits = [source for _, source in self.store.admin.scan(meta.index_name, batch=10_000, fields=wanted)]
        except AsyncQueryError as exc:
            raise IndexLookupError(f"cannot read {meta.index_name}: {exc}") from exc
        found = documents_by_path(hits)
        if len(found) <= MAX_CACHED_DOCUMENTS:
            self._documents[key] = found
        return found


__all__ = ["MAX_CACHED_DOCUMENTS", "NO_INDEXES", "FoundIndex", "IndexLookup", "IndexLookupError", "TableIndexes"]
