"""What statements run through the service changed in a datasource's catalog: one document per
datasource in its request index (doc id ``catalogchanges``), the log the plugins' catalog read
models follow (``docs/documents.md``).

A job that ran a statement which changed the catalog (DDL, CTAS, an INSERT or MSCK that added
partitions, in SQL or PPL) appends what it changed here, as reported by Spark's catalog itself,
before it marks the statement ``success``: so every plugin process has what to invalidate before
any GET of that statement says SUCCESS. Each entry has a number (``version``, one more than the
last); the document keeps the last :data:`KEEP` entries, and a reader that finds it has missed some
forgets the whole catalog.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from query_core.errors import DocumentExistsError, VersionConflictError
from query_core.ids import request_index
from query_core.models import _Doc, now_millis
from query_core.store.connector import IndexConnector, Version
from query_core.store.documents import CHANGE_ATTEMPTS

#: The document's id in each request index.
DOC_ID = "catalogchanges"
#: How many entries the document keeps.
KEEP = 200


class CatalogChange(_Doc):
    """A database (``table`` None: the database itself, created, dropped or altered) or one of its tables."""

    database: str
    table: str | None = None


class CatalogChangeEntry(_Doc):
    version: int
    query_id: str = ""
    session_id: str = ""
    changes: list[CatalogChange] = Field(default_factory=list)
    time: int = Field(default_factory=now_millis)


class CatalogChangesDoc(_Doc):
    type: Literal["catalogchanges"] = "catalogchanges"
    data_source_name: str
    #: The number of the last entry (0: none yet).
    version: int = 0
    entries: list[CatalogChangeEntry] = Field(default_factory=list)
    last_update_time: int = Field(default_factory=now_millis)

    def since(self, version: int) -> list[CatalogChangeEntry] | None:
        """The entries after ``version``; None when some of them are no longer kept."""
        if version >= self.version:
            return []
        first = self.entries[0].version if self.entries else self.version + 1
        if version + 1 < first:
            return None
        return [e for e in self.entries if e.version > version]


class CatalogChangeRepository:
    """The catalog change log of each datasource (or of the bound request index, for a job)."""

    def __init__(self, index: IndexConnector, request_index: str | None = None) -> None:
        self.index = index
        self.bound_index = request_index

    def _index(self, datasource: str) -> str:
        return self.bound_index or request_index(datasource)

    def get(self, datasource: str) -> tuple[CatalogChangesDoc, Version] | None:
        """The log, read by id (real-time); None when nothing was ever recorded."""
        found = self.index.get(self._index(datasource), DOC_ID)
        if found is None or found.source.get("type") != "catalogchanges":
            return None
        return CatalogChangesDoc.model_validate(found.source), found.version

    def record(self, datasource: str, changes: list[CatalogChange], query_id: str = "", session_id: str = "") -> int:
        """Append one entry (conditional write, retried on conflict); returns its number."""
        index = self._index(datasource)

        def append(current: tuple[CatalogChangesDoc, Version] | None) -> int | None:
            doc = current[0] if current is not None else CatalogChangesDoc(data_source_name=datasource)
            entry = CatalogChangeEntry(version=doc.version + 1, query_id=query_id, session_id=session_id, changes=changes)
            updated = doc.model_copy(
                update={"version": entry.version, "entries": [*doc.entries, entry][-KEEP:], "last_update_time": now_millis()}
            )
            if current is None:
                try:
                    self.index.create(index, DOC_ID, updated.to_source())
                except DocumentExistsError:
                    return None
            else:
                source = updated.to_source()
                self.index.update_if(index, DOC_ID, {k: source[k] for k in ("version", "entries", "lastUpdateTime")}, current[1])
            return entry.version

        for _ in range(CHANGE_ATTEMPTS):
            try:
                written = append(self.get(datasource))
            except VersionConflictError:
                continue
            if written is not None:
                return written
        raise VersionConflictError(f"gave up recording a catalog change in {index} after {CHANGE_ATTEMPTS} conflicts")
