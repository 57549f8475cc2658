"""Result documents in a datasource's result index (doc id = query id; a retry overwrites the same
document). See ``docs/results.md`` for their encoding."""

from __future__ import annotations

from query_core.models import ResultDoc
from query_core.store.connector import IndexConnector


class ResultRepository:
    def __init__(self, index: IndexConnector) -> None:
        self.index = index

    def put(self, result_index: str, doc: ResultDoc) -> None:
        self.index.put(result_index, doc.query_id, doc.to_source())

    def get(self, result_index: str, query_id: str) -> ResultDoc | None:
        found = self.index.get(result_index, query_id)
        return None if found is None else ResultDoc.model_validate(found.source)
