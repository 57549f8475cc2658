"""What every repository of a stateful document kind shares: typed reads, the initial-state check
on creation, the one conditional write that moves a document (checked by the transition table in
:mod:`query_core.states`), searches, and the re-read-on-conflict loop.

The moving write is private: each kind's repository names its recurring operations (start a
statement, claim a session, begin an index operation...) on top of it, and callers use those.

A kind is a subclass naming its model, its ``type`` field and its id; see ``docs/documents.md``.
The request index is the datasource's own (``.query_execution_request_<datasource>``) unless the
repository is bound to another one (a job is told its request index, which the reference plugin
may choose otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from query_core.errors import UnknownFieldError, VersionConflictError
from query_core.ids import REQUEST_INDEX_PATTERN, request_index
from query_core.models import FlintIndexStateDoc, PoolJobDoc, ScheduleDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import check_initial, check_move
from query_core.store.connector import DocumentConnector, Filter, Found, Query, SortOrder, Term, Version

D = TypeVar("D", StatementDoc, SessionDoc, FlintIndexStateDoc, PoolJobDoc, ScheduleDoc)
V = TypeVar("V")

#: How many conflicting writes in a row a change survives before it gives up.
CHANGE_ATTEMPTS = 20


def retry_on_conflict(
    reread: Callable[[], V | None],
    change: Callable[[V], V | None],
    first: V | None = None,
    attempts: int = CHANGE_ATTEMPTS,
) -> V | None:
    """Apply ``change`` until no one else wrote in between, re-reading after each conflict.

    ``first`` is a version already in hand, tried before any read. ``change`` returns the written
    version, or None to give up (the document moved on in a way that makes the change moot).
    Returns the last written version, or None (also when the re-read finds nothing).
    """
    current = first
    for _ in range(attempts):
        if current is None:
            current = reread()
        if current is None:
            return None
        try:
            return change(current)
        except VersionConflictError:
            current = None
    raise VersionConflictError(f"gave up after {attempts} conflicting writes")


class DocumentRepository(Generic[D]):
    """Documents of one kind in the request indexes, behind typed, state-checked calls."""

    model: ClassVar[type[Any]]
    doc_type: ClassVar[str]

    def __init__(self, index: DocumentConnector, request_index: str | None = None) -> None:
        self.index = index
        #: The request index every call uses (None: the datasource's own).
        self.bound_index = request_index

    # -- naming -----------------------------------------------------------------------------

    def index_for(self, datasource: str | None) -> str:
        """The request index of ``datasource`` (None: every request index)."""
        if self.bound_index is not None:
            return self.bound_index
        return request_index(datasource) if datasource else REQUEST_INDEX_PATTERN

    def doc_id(self, doc: D) -> str:
        raise NotImplementedError

    # -- reads ------------------------------------------------------------------------------

    def parse(self, found: Found | None) -> Versioned[D] | None:
        """A read document as this kind's model; None if absent or of another type."""
        if found is None or found.source.get("type") != self.doc_type:
            return None
        return Versioned(self.model.model_validate(found.source), found.version.seq_no, found.version.primary_term)

    def get(self, datasource: str, doc_id: str) -> Versioned[D] | None:
        """Read by id, in real time."""
        return self.parse(self.index.get(self.index_for(datasource), doc_id))

    def reread(self, doc: D) -> Versioned[D] | None:
        return self.get(doc.data_source_name, self.doc_id(doc))

    def search(
        self,
        datasource: str | None,
        *filters: Filter,
        sort: tuple[tuple[str, SortOrder], ...] = (),
        size: int = 1000,
        fresh: bool = False,
    ) -> list[Versioned[D]]:
        """Documents of this kind matching ``filters`` (a search: it lags writes by up to a refresh,
        unless ``fresh``: the index is refreshed first, for a listing a person reads right after
        they wrote; never on a hot path)."""
        query = Query((Term("type", self.doc_type), *filters), sort, size)
        index = self.index_for(datasource)
        if fresh:
            self.index.refresh(index)
        hits = self.index.search(index, query)
        return [found for found in map(self.parse, hits) if found is not None]

    # -- writes -----------------------------------------------------------------------------

    def create(self, doc: D, *, recheck: bool = False) -> Versioned[D]:
        """Create-only write of a new document, which must start in an initial state of its kind."""
        check_initial(doc.state, self.describe(doc))
        version = self.index.create(
            self.index_for(doc.data_source_name), self.doc_id(doc), doc.to_source(), recheck=recheck
        )
        return Versioned(doc, version.seq_no, version.primary_term)

    def _move(self, current: Versioned[D], state: Any, **fields: Any) -> Versioned[D]:
        """The one conditional write that changes a document: ``state`` (its current one for a
        write that only changes fields) must be a move the transition table allows. Private: every
        caller above the store uses a named operation of a repository, built on this write.

        Raises :class:`~query_core.errors.InvalidTransitionError` or
        :class:`~query_core.errors.VersionConflictError`, and :class:`UnknownFieldError` for a
        keyword that is no field of the document (checked before anything is written).
        """
        doc = current.doc
        what = self.describe(doc)
        _check_fields(doc, fields, what)
        check_move(doc.state, state, what)
        updated = doc.model_copy(update={**fields, "state": state})
        changed = _aliases(doc, fields) | {"state"}
        partial = {k: v for k, v in updated.to_source().items() if k in changed}
        version = self.index.update_if(self.index_for(doc.data_source_name), self.doc_id(doc), partial, _version_of(current))
        return Versioned(updated, version.seq_no, version.primary_term)

    def _change(
        self, current: Versioned[D], fn: Callable[[Versioned[D]], Versioned[D] | None], attempts: int = CHANGE_ATTEMPTS
    ) -> Versioned[D] | None:
        """``fn`` applied to ``current``, and to a fresh read after each conflicting write (see
        :func:`retry_on_conflict`)."""
        return retry_on_conflict(lambda: self.reread(current.doc), fn, first=current, attempts=attempts)

    def describe(self, doc: D) -> str:
        """How messages name the document."""
        return f"{self.doc_type} {self.doc_id(doc)}"


def _version_of(current: Versioned[Any]) -> Version:
    return Version(current.seq_no, current.primary_term)


def _check_fields(doc: Any, fields: dict[str, Any], what: str) -> None:
    """Refuse, before anything is written, a keyword that names no field of the document: the
    model keeps unknown names (``extra="allow"``), so a misspelt one would be stored as it is,
    and the field meant left unchanged."""
    model = type(doc)
    unknown = sorted(name for name in fields if name not in model.model_fields)
    if unknown:
        raise UnknownFieldError(
            f"write of {what}: {model.__name__} has no field {', '.join(map(repr, unknown))}"
            " (fields are named in snake_case)"
        )


def _aliases(doc: Any, fields: dict[str, Any]) -> set[str]:
    model_fields = type(doc).model_fields
    return {model_fields[name].alias or name for name in fields}
