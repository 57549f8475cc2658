"""The state machine: states of each document kind and the one table of allowed moves.

Every write that changes a document goes through :func:`check_move` (called by the index module),
so a refused move can never reach the index, whoever attempts it.
"""

from __future__ import annotations

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


S = TypeVar("S", StatementState, SessionState)

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


def _table(state: StatementState | SessionState) -> dict[Any, frozenset[Any]]:
    return STATEMENT_TRANSITIONS if isinstance(state, StatementState) else SESSION_TRANSITIONS


def is_terminal(state: StatementState | SessionState) -> bool:
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
