"""Statement documents (doc id = statement id = query id), and the named operations on them:
start one, cancel one, settle one with its result, create one already answered. See
``docs/documents.md``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from query_core.errors import AsyncQueryError, InvalidTransitionError
from query_core.models import ResultDoc, StatementDoc, Versioned
from query_core.states import StatementState, check_answered, is_terminal
from query_core.store.connector import DocumentConnector, Range, Term, Terms
from query_core.store.documents import DocumentRepository
from query_core.store.results import ResultRepository
from query_core.store.usage import UsageRepository, result_bytes

log = logging.getLogger(__name__)

#: How long ago a waiting statement may have been submitted and still be found by a search.
WAITING_LOOKBACK = "now-1h"
_UNFINISHED = (StatementState.WAITING.value, StatementState.RUNNING.value)

#: Called with a statement as this process moved it to a terminal state (a cancel, or a settle
#: that applied): how a program counts the queries it ended (``docs/metrics.md``).
EndListener = Callable[[StatementDoc], None]


@dataclass(frozen=True)
class Settled:
    """How :meth:`StatementRepository.settle` left a statement: its last version, and whether the
    terminal state asked for was written (False: it had already finished, or was deleted)."""

    statement: Versioned[StatementDoc]
    applied: bool

    @property
    def state(self) -> StatementState:
        return self.statement.doc.state


class StatementRepository(DocumentRepository[StatementDoc]):
    model = StatementDoc
    doc_type = "statement"

    def __init__(
        self,
        index: DocumentConnector,
        request_index: str | None,
        results: ResultRepository,
        usage: UsageRepository | None = None,
    ) -> None:
        super().__init__(index, request_index)
        self.results = results
        #: Where the results written here are counted, against their submitter (docs/security.md).
        self.usage = usage
        self.end_listeners: list[EndListener] = []

    def doc_id(self, doc: StatementDoc) -> str:
        return doc.statement_id

    # -- searches ---------------------------------------------------------------------------

    def find_waiting(self, datasource: str, session_id: str, size: int = 10) -> list[Versioned[StatementDoc]]:
        """This session's waiting statements, oldest first, as the reference job finds them (a
        search: it sees a new statement only after the index refreshes)."""
        return self.search(
            datasource,
            Term("sessionId", session_id),
            Term("state", StatementState.WAITING.value),
            Range("submitTime", gte=WAITING_LOOKBACK),
            sort=(("submitTime", "asc"),),
            size=size,
        )

    def find_unfinished(self, datasource: str, session_id: str, size: int = 1000) -> list[Versioned[StatementDoc]]:
        return self.search(datasource, Term("sessionId", session_id), Terms("state", _UNFINISHED), size=size)

    def recent(
        self, submitted_by: str | None, size: int = 500, datasource: str | None = None, fresh: bool = False
    ) -> list[Versioned[StatementDoc]]:
        """Statements newest first, over every request index (or ``datasource``'s): ``submitted_by``'s
        only, or everyone's when None (a search: it lags writes by up to a refresh unless ``fresh``).
        The console's history (``docs/console.md``)."""
        filters = (Term("submittedBy", submitted_by),) if submitted_by is not None else ()
        return self.search(datasource, *filters, sort=(("submitTime", "desc"),), size=size, fresh=fresh)

    # -- the named operations ---------------------------------------------------------------

    def start(self, statement: Versioned[StatementDoc]) -> Versioned[StatementDoc] | None:
        """``waiting → running``; None when it moved on first (cancelled, failed) or is gone."""

        def run(current: Versioned[StatementDoc]) -> Versioned[StatementDoc] | None:
            if current.doc.state != StatementState.WAITING:
                return None
            return self._move(current, StatementState.RUNNING)

        return self._change(statement, run)

    def cancel(self, statement: Versioned[StatementDoc]) -> tuple[Versioned[StatementDoc], StatementState] | None:
        """Move to ``cancelled``: the cancelled version and the state it was cancelled from; None
        when the statement is gone. A finished statement is an :class:`InvalidTransitionError`."""
        query_id = statement.doc.query_id
        cancelled_from: list[StatementState] = []

        def cancel(current: Versioned[StatementDoc]) -> Versioned[StatementDoc]:
            if is_terminal(current.doc.state):
                raise InvalidTransitionError(f"can't cancel query {query_id}: it is already {current.doc.state.value}")
            cancelled = self._move(current, StatementState.CANCELLED)
            cancelled_from.append(current.doc.state)
            return cancelled

        written = self._change(statement, cancel)
        if written is None:
            return None
        self._ended(written.doc)
        return written, cancelled_from[-1]

    def settle(
        self,
        statement: Versioned[StatementDoc],
        state: StatementState,
        *,
        error: str = "",
        result: tuple[str, ResultDoc] | None = None,
    ) -> Settled:
        """End a statement in the terminal ``state`` with ``error``, never over a finished one.

        ``result`` (the result index and document) is written first, so that a reader never sees
        ``success`` without its result; a statement that finished meanwhile keeps its state (a
        cancel is never overwritten), and its result document is never read.
        """
        if result is not None:
            self._put_result(statement.doc, *result)
        found: list[Versioned[StatementDoc]] = []

        def end(current: Versioned[StatementDoc]) -> Versioned[StatementDoc] | None:
            if is_terminal(current.doc.state):
                found.append(current)
                return None
            return self._move(current, state, error=error)

        written = self._change(statement, end)
        if written is not None:
            self._ended(written.doc)
            return Settled(written, True)
        if found and found[-1].doc.state != state:
            log.info(
                "statement %s was already %s; left as it is", statement.doc.statement_id, found[-1].doc.state.value
            )
        return Settled(found[-1] if found else statement, False)

    def create_answered(self, doc: StatementDoc, result_index: str, result: ResultDoc) -> Versioned[StatementDoc]:
        """Create a statement the plugin answered itself, already ``success``: its result is
        written first, and no job ever sees it waiting (docs/catalog.md)."""
        check_answered(doc.state, self.describe(doc))
        self._put_result(doc, result_index, result)
        version = self.index.create(self.index_for(doc.data_source_name), self.doc_id(doc), doc.to_source())
        self._ended(doc)
        return Versioned(doc, version.seq_no, version.primary_term)

    def _put_result(self, doc: StatementDoc, result_index: str, result: ResultDoc) -> None:
        """Write a result the plugin made itself, and count it in its submitter's usage."""
        self.results.put(result_index, result)
        if self.usage is not None:
            try:
                self.usage.charge(doc.submitted_by, result_bytes(result))
            except AsyncQueryError as exc:  # counting must not fail the statement
                log.warning("result of %s not counted in its submitter's usage: %s", result.query_id, exc)

    def _ended(self, doc: StatementDoc) -> None:
        for listener in self.end_listeners:
            try:
                listener(doc)
            except Exception:  # counting must not break the product's work
                log.exception("statement end listener failed")

    def fail(self, statement: Versioned[StatementDoc], error: str) -> Versioned[StatementDoc]:
        """Move a statement to ``failed`` unless it has finished meanwhile; returns its last version."""
        return self.settle(statement, StatementState.FAILED, error=error).statement
