"""The Flint indexes of a table, and a skipping index's documents, read through the store.

One mapping request per table finds its indexes (their ``_meta``), one read by id per index its
state document, one scroll of only the fields a query needs a skipping index's documents. Any
failure (the index cluster down, an index gone meanwhile, a ``_meta`` that is not understood)
raises :class:`IndexLookupError`; the accelerator then reads the table as if it had no index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flint_repl_job.acceleration.skipping import FILE_PATH_FIELD, documents_by_path
from flint_repl_job.indexes.meta import IndexMeta
from query_core.errors import AsyncQueryError
from query_core.flint import IndexKind
from query_core.flint.metas import flint_metas
from query_core.flint.naming import FLINT_INDEX_PREFIX, latest_id, sanitize_index_name
from query_core.states import FlintIndexState
from query_core.store import Store

#: States in which an index's contents may be read (the reference refuses only ``deleted``; an
#: index being deleted or vacuumed is about to lose its contents).
READABLE_STATES = frozenset(
    {
        FlintIndexState.ACTIVE,
        FlintIndexState.REFRESHING,
        FlintIndexState.UPDATING,
        FlintIndexState.CANCELLING,
        FlintIndexState.RECOVERING,
    }
)


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

    def indexes_of(self, table: str) -> TableIndexes:
        """The skipping and covering indexes of ``table`` (``catalog.db.table``)."""
        pattern = sanitize_index_name(FLINT_INDEX_PREFIX + table.replace(".", "_") + "_") + "*"
        try:
            metas = flint_metas(self.store.index, pattern)
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

    def skipping_documents(self, index_name: str, fields: Sequence[str]) -> dict[str, Any]:
        """The skipping index's documents by normalized file path, with only ``fields``."""
        wanted = sorted({FILE_PATH_FIELD, *fields})
        try:
            hits = [source for _, source in self.store.index.scan(index_name, batch=10_000, fields=wanted)]
        except AsyncQueryError as exc:
            raise IndexLookupError(f"cannot read {index_name}: {exc}") from exc
        return documents_by_path(hits)


__all__ = ["NO_INDEXES", "READABLE_STATES", "FoundIndex", "IndexLookup", "IndexLookupError", "TableIndexes"]
