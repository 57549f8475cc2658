"""Flint index state documents (doc id = ``latestId``, base64 of the index name), in the request
index, and the named operations on them: an operation begins (into its transitioning state), then
commits its end state or rolls back; a dying stream fails its index; housekeeping repairs an index
whose operation's owner is gone. Every move passes the operations table of :mod:`query_core.states`
(``docs/documents.md``)."""

from __future__ import annotations

from typing import Any

from query_core.errors import ConflictError, InvalidTransitionError
from query_core.models import FlintIndexStateDoc, Versioned, now_millis
from query_core.states import INDEX_OPERATIONS, FlintIndexState, IndexOperation, can_remove_index_state, stall_repair
from query_core.store.connector import Filter, Term, Terms, Version
from query_core.store.documents import DocumentRepository

#: Longest error text kept on an index state document.
MAX_INDEX_ERROR = 2000

FAIL_STREAM = INDEX_OPERATIONS["fail stream"]


class IndexStateRepository(DocumentRepository[FlintIndexStateDoc]):
    model = FlintIndexStateDoc
    doc_type = "flintindexstate"

    def doc_id(self, doc: FlintIndexStateDoc) -> str:
        return doc.latest_id

    def describe(self, doc: FlintIndexStateDoc) -> str:
        return f"index state {doc.latest_id}"

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

    # -- the named operations ---------------------------------------------------------------
    #
    # None of them re-reads after a conflict: a conflicting write means another operation (or the
    # housekeeping) moved the index, and the caller decides what that means for its own.

    def begin(
        self,
        current: Versioned[FlintIndexStateDoc] | None,
        operation: IndexOperation,
        *,
        datasource: str | None = None,
        latest_id: str | None = None,
        index_name: str | None = None,
        **fields: Any,
    ) -> Versioned[FlintIndexStateDoc]:
        """The first write of ``operation``: from one of its start states into its transitioning
        state, with ``fields``. An index without a state document (``current`` None) is ``empty``,
        and its document is created then: ``datasource``, ``latest_id`` and ``index_name`` name it.

        Raises :class:`InvalidTransitionError` when the index is not in a start state of the
        operation, :class:`~query_core.errors.ConflictError` when it was moved meanwhile.
        """
        via = operation.via
        if via is None:
            raise ValueError(f"{operation.name} has no transitioning state: it only commits")
        if current is not None:
            operation.check_start(current.doc.state, index_name or current.doc.index_name or current.doc.latest_id)
            return self._move(current, via, **fields)
        if datasource is None or latest_id is None or index_name is None:
            raise ValueError("a new index state document needs its datasource, latest id and index name")
        operation.check_start(FlintIndexState.EMPTY, index_name)
        doc = FlintIndexStateDoc(
            latest_id=latest_id, state=via, data_source_name=datasource, index_name=index_name, **fields
        )
        return self.create(doc)

    def commit(
        self, current: Versioned[FlintIndexStateDoc], operation: IndexOperation, **fields: Any
    ) -> Versioned[FlintIndexStateDoc] | None:
        """The last write of ``operation``: its end state with ``fields`` (for an operation without
        a transitioning state, its one write), or, for an operation that ends without a document
        (vacuum), the document removed (None is returned then)."""
        if operation.end is None:
            self.delete(current)
            return None
        return self._move(current, operation.end, **fields)

    def roll_back(
        self,
        current: Versioned[FlintIndexStateDoc],
        operation: IndexOperation,
        started: FlintIndexState,
        **fields: Any,
    ) -> Versioned[FlintIndexStateDoc]:
        """A failed run of ``operation`` returns the index to ``started``, the state it began in,
        with ``fields`` (the error)."""
        return self._move(current, operation.rollback(started), **fields)

    def fail_stream(
        self, current: Versioned[FlintIndexStateDoc], error: str, *, job_id: str | None = None
    ) -> Versioned[FlintIndexStateDoc] | None:
        """The index's stream died: ``refreshing → failed`` with ``error`` as the cause. None when
        the index is no longer refreshing, or (with ``job_id``) is owned by another job."""
        doc = current.doc
        if doc.state not in FAIL_STREAM.start or (job_id is not None and doc.job_id and doc.job_id != job_id):
            return None
        end = FAIL_STREAM.end or FlintIndexState.FAILED
        return self._move(current, end, error=error[:MAX_INDEX_ERROR], last_update_time=now_millis())

    def record_error(self, current: Versioned[FlintIndexStateDoc], error: str) -> Versioned[FlintIndexStateDoc]:
        """Write ``error`` on the state document, keeping its state (work that failed around an
        operation rather than in it: an auto refresh that did not start)."""
        return self._move(current, current.doc.state, error=error[:MAX_INDEX_ERROR], last_update_time=now_millis())

    def repair_stalled(
        self, stalled: Versioned[FlintIndexStateDoc], reason: str, *, streaming: bool = False
    ) -> Versioned[FlintIndexStateDoc] | None:
        """An operation whose owner is gone, ended by housekeeping: the index moves where
        :func:`~query_core.states.stall_repair` says (rolled back, or finished), with ``reason`` as
        its error. None when it was not left mid-operation, or was moved meanwhile (it is left
        alone then: its owner was alive after all)."""
        target = stall_repair(stalled.doc.state, streaming)
        if target is None:
            return None
        try:
            return self._move(stalled, target, error=reason[:MAX_INDEX_ERROR], last_update_time=now_millis())
        except ConflictError:
            return None

    def delete(self, current: Versioned[FlintIndexStateDoc]) -> None:
        """Remove the state document, conditionally; only a vacuum in progress may."""
        doc = current.doc
        if not can_remove_index_state(doc.state):
            raise InvalidTransitionError(f"index state {doc.latest_id} is {doc.state.value}: only a vacuum removes it")
        version = Version(current.seq_no, current.primary_term)
        self.index.delete_if(self.index_for(doc.data_source_name), doc.latest_id, version)
