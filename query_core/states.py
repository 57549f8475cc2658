"""The state machine: states of each document kind and the one table of allowed moves.

Every write that changes a document goes through :func:`check_move` (called by the index module),
so a refused move can never reach the index, whoever attempts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from query_core.errors import InvalidTransitionError


class StatementState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class SessionState(StrEnum):
    NOT_STARTED = "not_started"
    RUNNING = "running"
    DEAD = "dead"
    FAIL = "fail"


class SessionType(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"
    STREAMING = "streaming"
    LOCAL = "local"


class PoolJobState(StrEnum):
    """The state of a warm pool job, in its pool slot document (``type: pooljob``)."""

    #: Launched (or about to be): not ready for a session yet.
    STARTING = "starting"
    #: Ready and beating, waiting for a session to claim it.
    IDLE = "idle"
    #: A new session took it (one conditional write); its job has not read the claim yet.
    CLAIMED = "claimed"
    #: The job read its claim and is the session's job now (tracked by the session document).
    SERVED = "served"
    #: Gone, stopped, or ended itself (idle too long); the slot takes the next job.
    DEAD = "dead"


class ScheduleState(StrEnum):
    """The state of a Flint index's schedule, in its document of the scheduler index
    (``type: schedule``; docs/flint.md, "Scheduled refresh")."""

    #: Armed by a CREATE whose job has not made the index yet; enabled once the index exists.
    PENDING = "pending"
    #: Waiting for its next run.
    ENABLED = "enabled"
    #: A run was claimed by one plugin process (one conditional write) and launched.
    RUNNING = "running"
    #: Off: the index is manual, streams, was dropped, or its datasource is disabled.
    DISABLED = "disabled"


class FlintIndexState(StrEnum):
    """The state of a Flint index, in its state document (``type: flintindexstate``)."""

    EMPTY = "empty"
    CREATING = "creating"
    ACTIVE = "active"
    REFRESHING = "refreshing"
    CANCELLING = "cancelling"
    DELETING = "deleting"
    DELETED = "deleted"
    VACUUMING = "vacuuming"
    UPDATING = "updating"
    RECOVERING = "recovering"
    FAILED = "failed"


S = TypeVar("S", StatementState, SessionState, FlintIndexState, PoolJobState, ScheduleState)

_S = StatementState
_Z = SessionState

#: Allowed moves, one table per document kind (the kinds share state names such as "running",
#: and StrEnum members equal their strings, so the tables must not share a dict). A state absent
#: from its own set may still be rewritten with other fields (a heartbeat on a running session)
#: unless it is terminal: terminal states never change.
STATEMENT_TRANSITIONS: dict[StatementState, frozenset[StatementState]] = {
    _S.WAITING: frozenset({_S.RUNNING, _S.CANCELLED, _S.FAILED, _S.TIMEOUT}),
    _S.RUNNING: frozenset({_S.SUCCESS, _S.FAILED, _S.TIMEOUT, _S.CANCELLED}),
    _S.SUCCESS: frozenset(),
    _S.FAILED: frozenset(),
    _S.TIMEOUT: frozenset(),
    _S.CANCELLED: frozenset(),
}
SESSION_TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    _Z.NOT_STARTED: frozenset({_Z.RUNNING, _Z.DEAD, _Z.FAIL}),
    _Z.RUNNING: frozenset({_Z.DEAD, _Z.FAIL}),
    _Z.DEAD: frozenset(),
    _Z.FAIL: frozenset(),
}


_P = PoolJobState
#: A pool job is claimed while starting or idle, and serves one session in its life.
POOL_JOB_TRANSITIONS: dict[PoolJobState, frozenset[PoolJobState]] = {
    _P.STARTING: frozenset({_P.IDLE, _P.CLAIMED, _P.DEAD}),
    _P.IDLE: frozenset({_P.CLAIMED, _P.DEAD}),
    _P.CLAIMED: frozenset({_P.SERVED, _P.DEAD}),
    _P.SERVED: frozenset(),
    _P.DEAD: frozenset(),
}

_C = ScheduleState
#: A schedule never ends: it is removed with its index (VACUUM). A run's claim moves it to
#: ``running`` and the run's outcome back to ``enabled``; ALTER, DROP and a disabled datasource
#: disable it from any state; a CREATE arms a disabled one again, an ALTER or RECOVER enables it.
SCHEDULE_TRANSITIONS: dict[ScheduleState, frozenset[ScheduleState]] = {
    _C.PENDING: frozenset({_C.ENABLED, _C.DISABLED}),
    _C.ENABLED: frozenset({_C.RUNNING, _C.DISABLED}),
    _C.RUNNING: frozenset({_C.ENABLED, _C.DISABLED}),
    _C.DISABLED: frozenset({_C.PENDING, _C.ENABLED}),
}

_F = FlintIndexState


@dataclass(frozen=True)
class IndexOperation:
    """One operation on a Flint index: it starts from one of ``start`` (a missing state document
    counts as ``empty``), moves to ``via`` with a conditional write, does its work, and commits
    ``end`` (None: the state document is removed) or rolls back to the state it started from."""

    name: str
    start: frozenset[FlintIndexState]
    via: FlintIndexState | None
    end: FlintIndexState | None

    def rollback(self, started: FlintIndexState) -> FlintIndexState:
        """Where a failed run of this operation returns the index: the state it started from."""
        if started not in self.start:
            raise InvalidTransitionError(f"{self.name} cannot start from {started.value}")
        return started

    def check_start(self, current: FlintIndexState, index: str = "index") -> None:
        if current not in self.start:
            allowed = ", ".join(sorted(s.value for s in self.start))
            raise InvalidTransitionError(f"cannot {self.name} {index}: it is {current.value} (allowed from: {allowed})")


def _op(
    name: str, start: set[FlintIndexState], via: FlintIndexState | None, end: FlintIndexState | None
) -> IndexOperation:
    return IndexOperation(name, frozenset(start), via, end)


#: The operations on Flint indexes (docs/documents.md), each with its start states, transitioning
#: state and end state. The transition table below is derived from it, so the two cannot disagree.
INDEX_OPERATIONS: dict[str, IndexOperation] = {
    op.name: op
    for op in (
        _op("create", {_F.EMPTY, _F.DELETED}, _F.CREATING, _F.ACTIVE),
        _op("start auto refresh", {_F.ACTIVE}, None, _F.REFRESHING),
        # A failed index (its stream died) is recovered by a full refresh, by ALTER (to auto
        # refresh: a new stream from its checkpoint; to manual: nothing left to stop), by RECOVER.
        _op("refresh", {_F.ACTIVE, _F.FAILED}, _F.REFRESHING, _F.ACTIVE),
        _op("alter to auto refresh", {_F.ACTIVE, _F.FAILED}, _F.UPDATING, _F.REFRESHING),
        _op("alter to manual refresh", {_F.REFRESHING, _F.FAILED}, _F.UPDATING, _F.ACTIVE),
        _op("cancel refresh", {_F.REFRESHING}, _F.CANCELLING, _F.ACTIVE),
        _op("drop", {_F.ACTIVE, _F.REFRESHING, _F.CREATING, _F.EMPTY, _F.FAILED}, _F.DELETING, _F.DELETED),
        _op("vacuum", {_F.DELETED}, _F.VACUUMING, None),
        _op("recover", {_F.ACTIVE, _F.REFRESHING, _F.FAILED}, _F.RECOVERING, _F.REFRESHING),
        _op("fail stream", {_F.REFRESHING}, None, _F.FAILED),
        # A scheduled index (refreshed by the service's scheduler) idles ``active`` and is
        # ``refreshing`` while a run is on; these use only moves the operations above allow.
        _op("schedule refresh", {_F.ACTIVE, _F.REFRESHING, _F.FAILED}, _F.UPDATING, _F.ACTIVE),
        _op("unschedule refresh", {_F.ACTIVE, _F.REFRESHING, _F.FAILED}, _F.UPDATING, _F.ACTIVE),
        _op("recover scheduled refresh", {_F.ACTIVE, _F.FAILED}, _F.RECOVERING, _F.ACTIVE),
    )
}


def _index_transitions() -> dict[FlintIndexState, frozenset[FlintIndexState]]:
    moves: dict[FlintIndexState, set[FlintIndexState]] = {state: set() for state in FlintIndexState}
    for op in INDEX_OPERATIONS.values():
        for start in op.start:
            first = op.via or op.end
            if first is not None and first != start:
                moves[start].add(first)
            if op.via is not None:
                moves[op.via].add(start)  # rollback
        if op.via is not None and op.end is not None:
            moves[op.via].add(op.end)
    return {state: frozenset(targets) for state, targets in moves.items()}


FLINT_INDEX_TRANSITIONS: dict[FlintIndexState, frozenset[FlintIndexState]] = _index_transitions()

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


#: The states a new document of each kind may be created in: a statement waits, a session has not
#: started, and an index's state document is created by the first write of an operation on an index
#: that has none (which counts as ``empty``).
#: (One set per kind: the kinds share state names, and StrEnum members equal their strings.)
INITIAL_STATES: dict[type[Any], frozenset[Any]] = {
    StatementState: frozenset({_S.WAITING}),
    SessionState: frozenset({_Z.NOT_STARTED}),
    FlintIndexState: FLINT_INDEX_TRANSITIONS[_F.EMPTY],
    PoolJobState: frozenset({_P.STARTING}),
    ScheduleState: frozenset({_C.PENDING, _C.ENABLED}),
}

State = StatementState | SessionState | FlintIndexState | PoolJobState | ScheduleState

#: The states a statement may be created in when the plugin answers it at once, without a job (the
#: catalog browse statements, docs/catalog.md): finished, its result written before it.
ANSWERED_STATES: frozenset[StatementState] = frozenset({_S.SUCCESS})


def check_answered(state: StatementState, what: str = "statement") -> None:
    """Raise :class:`InvalidTransitionError` unless a statement answered at once may be created in ``state``."""
    if state not in ANSWERED_STATES:
        raise InvalidTransitionError(f"{what} cannot be created {state.value}")


def check_initial(state: State, what: str = "document") -> None:
    """Raise :class:`InvalidTransitionError` unless a new document may start in ``state``."""
    if state not in INITIAL_STATES[type(state)]:
        raise InvalidTransitionError(f"{what} cannot be created {state.value}")


def can_remove_index_state(current: FlintIndexState) -> bool:
    """Only a vacuum in progress removes an index's state document."""
    return current == _F.VACUUMING


def check_reuse(current: State, new: State, what: str = "document") -> None:
    """Raise :class:`InvalidTransitionError` unless a document in ``current`` may be written over by
    a new one in ``new``: a pool slot takes its next job once its last one has ended (the next
    job's document starts over, in an initial state)."""
    if not is_terminal(current):
        raise InvalidTransitionError(f"{what} is {current.value}: it cannot take a new document yet")
    check_initial(new, what)


def _table(state: State) -> dict[Any, frozenset[Any]]:
    if isinstance(state, StatementState):
        return STATEMENT_TRANSITIONS
    if isinstance(state, SessionState):
        return SESSION_TRANSITIONS
    if isinstance(state, PoolJobState):
        return POOL_JOB_TRANSITIONS
    if isinstance(state, ScheduleState):
        return SCHEDULE_TRANSITIONS
    return FLINT_INDEX_TRANSITIONS


def is_terminal(state: State) -> bool:
    return not _table(state)[state]


def can_move(current: S, target: S) -> bool:
    """True when a write taking a document from ``current`` to ``target`` is allowed."""
    if type(current) is not type(target):
        return False
    if current == target:
        return not is_terminal(current)
    return target in _table(current)[current]


def check_move(current: S, target: S, what: str = "document") -> None:
    """Raise :class:`InvalidTransitionError` unless ``current -> target`` is allowed."""
    if can_move(current, target):
        return
    if is_terminal(current):
        raise InvalidTransitionError(f"{what} is already {current.value} and can no longer change")
    raise InvalidTransitionError(f"{what} cannot move from {current.value} to {target.value}")
