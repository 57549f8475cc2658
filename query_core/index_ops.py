"""Operations on a Flint index as transactions over its state document.

Every operation (the operations table of ``docs/documents.md``) runs the same way, whoever runs it (the plugin for DROP and
ALTER, a batch job for CREATE, REFRESH and VACUUM): check the index's current state is one the
operation may start from, move to its transitioning state with a conditional write, do the work,
then commit the end state, or roll back to the state it started from with the error recorded
(the writes are the named operations of :class:`~query_core.store.index_states.IndexStateRepository`).

The conditional writes make two operations on one index exclude each other: the second one's
move to its transitioning state fails. When the state document changes under a running operation
(a DELETE moved a refresh to ``cancelling``, a DROP moved it to ``deleting``), the operation
neither commits nor rolls back: whoever moved the document now owns it.

A worker can die between the two writes. :func:`~query_core.states.stall_repair` says where the
housekeeping sweep takes an index whose operation's owner is gone, so no index stays
``refreshing`` or ``deleting``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from query_core.errors import ConflictError, InvalidTransitionError
from query_core.flint.naming import latest_id
from query_core.models import FlintIndexStateDoc, Versioned, now_millis
from query_core.states import INDEX_OPERATIONS, STALL_REPAIRS, FlintIndexState, IndexOperation, stall_repair
from query_core.store import Store
from query_core.store.index_states import MAX_INDEX_ERROR

__all__ = [
    "MAX_INDEX_ERROR",
    "STALL_REPAIRS",
    "IndexTarget",
    "IndexTransaction",
    "OperationSupersededError",
    "repair_stalled",
    "stall_repair",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

_F = FlintIndexState


@dataclass(frozen=True)
class IndexTarget:
    """Which index a transaction is about (its state document is in the request index of the
    store the transaction is given: the datasource's own, or the one a job is bound to)."""

    datasource: str
    index_name: str

    @property
    def latest_id(self) -> str:
        return latest_id(self.index_name)


class OperationSupersededError(InvalidTransitionError):
    """The state document moved under a running operation: someone else owns the index now."""


class IndexTransaction:
    """Runs operations on one index; ``job_id``/``application_id`` are recorded as the owner."""

    def __init__(self, store: Store, target: IndexTarget, *, application_id: str = "", job_id: str = "") -> None:
        self.store = store
        self.target = target
        self.application_id = application_id
        self.job_id = job_id

    def current(self) -> Versioned[FlintIndexStateDoc] | None:
        """The state document, read by id (real-time)."""
        return self.store.index_states.get(self.target.datasource, self.target.latest_id)

    def state(self) -> FlintIndexState:
        """The index's state; a missing document is ``empty``."""
        current = self.current()
        return current.doc.state if current is not None else _F.EMPTY

    def run(
        self,
        operation: IndexOperation | str,
        work: Callable[[], T],
        *,
        via_fields: dict[str, Any] | None = None,
        end_fields: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
    ) -> T:
        """Run ``work`` as ``operation``: start check, transitioning state, commit or rollback.

        Raises :class:`InvalidTransitionError` when the index is not in a start state of the
        operation (nothing has been done then), the work's own exception after a rollback, and
        :class:`OperationSupersededError` when the document was moved by someone else meanwhile.
        ``end_fields`` may be a function, called once the work is done (a completion time).
        """
        op = INDEX_OPERATIONS[operation] if isinstance(operation, str) else operation
        current = self.current()
        started = current.doc.state if current is not None else _F.EMPTY
        op.check_start(started, self.target.index_name)

        def ending() -> dict[str, Any]:
            return (end_fields() if callable(end_fields) else end_fields) or {}

        if op.via is None:
            assert current is not None, f"{op.name} starts from an index that has a state document"
            result = work()
            fields = {**self._owner(), "error": "", **ending()}
            self._exclusive(lambda: self.store.index_states.commit(current, op, **fields))
            return result
        moving = self._exclusive(lambda: self._begin(current, op, {**(via_fields or {}), "error": ""}))
        try:
            result = work()
        except BaseException as exc:
            fields = {**self._owner(), "error": _error_text(exc)}
            self._finish(lambda: self.store.index_states.roll_back(moving, op, started, **fields), op, "roll back")
            raise
        fields = {**self._owner(), **ending()}
        self._finish(lambda: self.store.index_states.commit(moving, op, **fields), op, "commit")
        return result

    # -- writes -----------------------------------------------------------------------------

    def _owner(self) -> dict[str, Any]:
        owner: dict[str, Any] = {"last_update_time": now_millis()}
        if self.job_id:
            owner["job_id"] = self.job_id
        if self.application_id:
            owner["application_id"] = self.application_id
        return owner

    def _begin(
        self, current: Versioned[FlintIndexStateDoc] | None, op: IndexOperation, fields: dict[str, Any]
    ) -> Versioned[FlintIndexStateDoc]:
        target = self.target
        return self.store.index_states.begin(
            current,
            op,
            datasource=target.datasource,
            latest_id=target.latest_id,
            index_name=target.index_name,
            **{**self._owner(), **fields},
        )

    def _exclusive(self, write: Callable[[], T]) -> T:
        """The write that starts an operation; a concurrent writer makes it an
        :class:`InvalidTransitionError`."""
        try:
            return write()
        except ConflictError:
            raise InvalidTransitionError(
                f"index {self.target.index_name} is being changed by another operation; try again"
            ) from None

    def _finish(self, write: Callable[[], object], op: IndexOperation, what: str) -> None:
        """The write that ends an operation (a commit, a rollback); a concurrent writer means the
        operation was superseded."""
        try:
            write()
        except ConflictError:
            self._superseded(op, what)

    def _superseded(self, op: IndexOperation, what: str) -> None:
        now = self.current()
        seen = now.doc.state.value if now is not None else "removed"
        log.warning("cannot %s %s of %s: its state moved to %s meanwhile", what, op.name, self.target.index_name, seen)
        raise OperationSupersededError(
            f"{op.name} of index {self.target.index_name} was interrupted: the index is now {seen}"
        )


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:MAX_INDEX_ERROR]


# -- repairs --------------------------------------------------------------------------------------


def repair_stalled(
    store: Store,
    stalled: Versioned[FlintIndexStateDoc],
    reason: str,
    *,
    streaming: bool = False,
) -> Versioned[FlintIndexStateDoc] | None:
    """Move ``stalled`` to its repair state (:func:`stall_repair`) with ``reason`` as its error
    (conditionally: a document that moved meanwhile is left alone, None is returned)."""
    return store.index_states.repair_stalled(stalled, reason, streaming=streaming)
