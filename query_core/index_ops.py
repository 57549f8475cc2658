"""Operations on a Flint index as transactions over its state document.

Every operation (the operations table of ``docs/documents.md``) runs the same way, whoever runs it (the plugin for DROP and
ALTER, a batch job for CREATE, REFRESH and VACUUM): check the index's current state is one the
operation may start from, move to its transitioning state with a conditional write, do the work,
then commit the end state, or roll back to the state it started from with the error recorded.

The conditional writes make two operations on one index exclude each other: the second one's
move to its transitioning state fails. When the state document changes under a running operation
(a DELETE moved a refresh to ``cancelling``, a DROP moved it to ``deleting``), the operation
neither commits nor rolls back: whoever moved the document now owns it.

A worker can die between the two writes. :func:`stall_repair` says where the housekeeping sweep
takes an index whose operation's owner is gone, so no index stays ``refreshing`` or ``deleting``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from query_core.errors import ConflictError, InvalidTransitionError
from query_core.flint.naming import latest_id
from query_core.models import FlintIndexStateDoc, Versioned, now_millis
from query_core.states import INDEX_OPERATIONS, FlintIndexState, IndexOperation
from query_core.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Longest error text kept on an index state document.
MAX_INDEX_ERROR = 2000

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
            assert op.end is not None, f"{op.name} has neither a transitioning nor an end state"
            result = work()
            self._write(current, op.end, {"error": "", **ending()})
            return result
        moving = self._write(current, op.via, {**(via_fields or {}), "error": ""})
        try:
            result = work()
        except BaseException as exc:
            self._finish(moving, started, {"error": _error_text(exc)}, op, "roll back")
            raise
        if op.end is None:
            self._remove(moving, op)
        else:
            self._finish(moving, op.end, ending(), op, "commit")
        return result

    # -- writes -----------------------------------------------------------------------------

    def _owner(self) -> dict[str, Any]:
        owner: dict[str, Any] = {"last_update_time": now_millis()}
        if self.job_id:
            owner["job_id"] = self.job_id
        if self.application_id:
            owner["application_id"] = self.application_id
        return owner

    def _write(
        self, current: Versioned[FlintIndexStateDoc] | None, state: FlintIndexState, fields: dict[str, Any]
    ) -> Versioned[FlintIndexStateDoc]:
        """The move into ``state``; a concurrent writer makes it an :class:`InvalidTransitionError`."""
        fields = {**self._owner(), **fields}
        try:
            if current is None:
                doc = FlintIndexStateDoc(
                    latest_id=self.target.latest_id,
                    state=state,
                    data_source_name=self.target.datasource,
                    index_name=self.target.index_name,
                    **fields,
                )
                return self.store.index_states.create(doc)
            return self.store.index_states.move(current, state, **fields)
        except ConflictError:
            raise InvalidTransitionError(
                f"index {self.target.index_name} is being changed by another operation; try again"
            ) from None

    def _finish(
        self,
        moving: Versioned[FlintIndexStateDoc],
        state: FlintIndexState,
        fields: dict[str, Any],
        op: IndexOperation,
        what: str,
    ) -> None:
        try:
            self.store.index_states.move(moving, state, **self._owner(), **fields)
        except ConflictError:
            self._superseded(moving, op, what)

    def _remove(self, moving: Versioned[FlintIndexStateDoc], op: IndexOperation) -> None:
        try:
            self.store.index_states.delete(moving)
        except ConflictError:
            self._superseded(moving, op, "commit")

    def _superseded(self, moving: Versioned[FlintIndexStateDoc], op: IndexOperation, what: str) -> None:
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

#: Where the housekeeping sweep moves an index whose operation's owner is gone (a killed job, a
#: crashed plugin), by the transitioning state it was left in. Work done by a job is rolled back
#: (the data may be half-written; the user can run it again); work the plugin does itself is
#: idempotent and is finished (DROP and ALTER to manual stop a job; a cancel stops a refresh).
#: ``refreshing`` is a stable state for an auto-refreshing index: see :func:`stall_repair`.
STALL_REPAIRS: dict[FlintIndexState, FlintIndexState] = {
    _F.CREATING: _F.EMPTY,
    _F.REFRESHING: _F.ACTIVE,
    _F.VACUUMING: _F.DELETED,
    _F.DELETING: _F.DELETED,
    _F.UPDATING: _F.ACTIVE,
    _F.CANCELLING: _F.ACTIVE,
    _F.RECOVERING: _F.FAILED,
}


def stall_repair(state: FlintIndexState, streaming: bool = False) -> FlintIndexState | None:
    """The state a stalled index moves to, or None when ``state`` is not left mid-operation.

    ``streaming``: the owner was a streaming job, so ``refreshing`` was its stable state and the
    stream's death fails the index instead.
    """
    if state is _F.REFRESHING and streaming:
        return _F.FAILED
    return STALL_REPAIRS.get(state)


def repair_stalled(
    store: Store,
    stalled: Versioned[FlintIndexStateDoc],
    reason: str,
    *,
    streaming: bool = False,
) -> Versioned[FlintIndexStateDoc] | None:
    """Move ``stalled`` to its repair state with ``reason`` as its error (conditionally: a
    document that moved meanwhile is left alone, None is returned)."""
    target = stall_repair(stalled.doc.state, streaming)
    if target is None:
        return None
    try:
        return store.index_states.move(stalled, target, error=reason[:MAX_INDEX_ERROR], last_update_time=now_millis())
    except ConflictError:
        return None
