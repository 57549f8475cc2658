"""Datasources created over REST, in the ``.ql-datasources`` index (doc id = the name)."""

from __future__ import annotations

from typing import Any

from query_core.ids import DATASOURCE_INDEX
from query_core.store.connector import IndexConnector, Query


class DatasourceRepository:
    def __init__(self, index: IndexConnector) -> None:
        self.index = index

    def get(self, name: str) -> dict[str, Any] | None:
        found = self.index.get(DATASOURCE_INDEX, name)
        return None if found is None else found.source

    def create(self, name: str, source: dict[str, Any]) -> None:
        """Create-only: :class:`~query_core.errors.DocumentExistsError` when the name is taken."""
        self.index.create(DATASOURCE_INDEX, name, source)

    def replace(self, name: str, source: dict[str, Any]) -> bool:
        """Overwrite an existing datasource (conditionally); False when there is none of that name."""
        found = self.index.get(DATASOURCE_INDEX, name)
        if found is None:
            return False
        self.index.update_if(DATASOURCE_INDEX, name, source, found.version)
        return True

    def delete(self, name: str) -> bool:
        return self.index.delete(DATASOURCE_INDEX, name)

    def list(self) -> list[dict[str, Any]]:
        return [found.source for found in self.index.search(DATASOURCE_INDEX, Query(size=1000))]
