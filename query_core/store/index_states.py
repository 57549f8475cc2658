"""Flint index state documents (doc id = ``latestId``, base64 of the index name), in the request
index; every move passes the operations table of :mod:`query_core.states`."""

from __future__ import annotations

from query_core.errors import InvalidTransitionError
from query_core.models import FlintIndexStateDoc, Versioned
from query_core.states import FlintIndexState, can_remove_index_state
from query_core.store.connector import Filter, Term, Terms, Version
from query_core.store.documents import DocumentRepository


class IndexStateRepository(DocumentRepository[FlintIndexStateDoc]):
    model = FlintIndexStateDoc
    doc_type = "flintindexstate"

    def doc_id(self, doc: FlintIndexStateDoc) -> str:
        return doc.latest_id

    def describe(self, doc: FlintIndexStateDoc) -> str:
        return f"index state {doc.latest_id}"

    def delete(self, current: Versioned[FlintIndexStateDoc]) -> None:
        """Remove the state document, conditionally; only a vacuum in progress may."""
        doc = current.doc
        if not can_remove_index_state(doc.state):
            raise InvalidTransitionError(f"index state {doc.latest_id} is {doc.state.value}: only a vacuum removes it")
        version = Version(current.seq_no, current.primary_term)
        self.index.delete_if(self.index_for(doc.data_source_name), doc.latest_id, version)

    def find(
        self,
        datasource: str | None,
        states: list[FlintIndexState] | None = None,
        job_id: str | None = None,
        size: int = 1000,
    ) -> list[Versioned[FlintIndexStateDoc]]:
        """Index state documents, by state and/or owning job (a search: refresh-delayed; for the
        housekeeping sweep, limits and cancels of long-running work, never for a fresh write)."""
        filters: list[Filter] = []
        if states is not None:
            filters.append(Terms("state", tuple(s.value for s in states)))
        if job_id is not None:
            filters.append(Term("jobId", job_id))
        return self.search(datasource, *filters, size=size)
