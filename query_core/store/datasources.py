"""Datasources created over REST, in the ``.ql-datasources`` index (doc id = the name).

Writes are rare and are followed by a refresh, as the reference writes them (``RefreshPolicy.IMMEDIATE``):
a listing right after a create sees it."""

from __future__ import annotations

from typing import Any

from query_core.ids import DATASOURCE_INDEX
from query_core.store.connector import DocumentConnector, Query


class DatasourceRepository:
    def __init__(self, index: DocumentConnector) -> None:
        self.index = index

    def get(self, name: str) -> dict[str, Any] | None:
        found = self.index.get(DATASOURCE_INDEX, name)
        return None if found is None else found.source

    def create(self, name: str, source: dict[str, Any]) -> None:
        """Create-only: :class:`~query_core.errors.DocumentExistsError` when the name is taken."""
        self.index.create(DATASOURCE_INDEX, name, source)
        self.index.refresh(DATASOURCE_INDEX)

    def replace(self, name: str, source: dict[str, Any]) -> bool:
        """Overwrite an existing datasource with ``source``, whole (a property it no longer has is
        gone); False when there is none of that name."""
        if self.index.get(DATASOURCE_INDEX, name) is None:
            return False
        self.index.put(DATASOURCE_INDEX, name, source)
        self.index.refresh(DATASOURCE_INDEX)
        return True

    def delete(self, name: str) -> bool:
        deleted = self.index.delete(DATASOURCE_INDEX, name)
        self.index.refresh(DATASOURCE_INDEX)
        return deleted

    def list(self) -> list[dict[str, Any]]:
        return [found.source for found in self.index.search(DATASOURCE_INDEX, Query(size=1000))]
