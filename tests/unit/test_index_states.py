"""The Flint index state machine: every operation's start, transitioning and end states, its
rollback, and every allowed and refused move (docs/documents.md, written out independently)."""

from __future__ import annotations

import itertools

import pytest

from query_core.errors import InvalidTransitionError
from query_core.states import (
    FLINT_INDEX_TRANSITIONS,
    INDEX_OPERATIONS,
    FlintIndexState,
    can_move,
    can_remove_index_state,
    check_move,
    is_terminal,
)

F = FlintIndexState

# operation: (start states, via, end) as docs/documents.md's table gives them.
EXPECTED_OPERATIONS: dict[str, tuple[set[FlintIndexState], FlintIndexState | None, FlintIndexState | None]] = {
    "create": ({F.EMPTY, F.DELETED}, F.CREATING, F.ACTIVE),
    "start auto refresh": ({F.ACTIVE}, None, F.REFRESHING),
    "refresh": ({F.ACTIVE, F.FAILED}, F.REFRESHING, F.ACTIVE),
    "alter to auto refresh": ({F.ACTIVE, F.FAILED}, F.UPDATING, F.REFRESHING),
    "alter to manual refresh": ({F.REFRESHING, F.FAILED}, F.UPDATING, F.ACTIVE),
    "cancel refresh": ({F.REFRESHING}, F.CANCELLING, F.ACTIVE),
    "drop": ({F.ACTIVE, F.REFRESHING, F.CREATING, F.EMPTY, F.FAILED}, F.DELETING, F.DELETED),
    "vacuum": ({F.DELETED}, F.VACUUMING, None),
    "recover": ({F.ACTIVE, F.REFRESHING, F.FAILED}, F.RECOVERING, F.REFRESHING),
    "fail stream": ({F.REFRESHING}, None, F.FAILED),
    "schedule refresh": ({F.ACTIVE, F.REFRESHING, F.FAILED}, F.UPDATING, F.ACTIVE),
    "unschedule refresh": ({F.ACTIVE, F.REFRESHING, F.FAILED}, F.UPDATING, F.ACTIVE),
    "recover scheduled refresh": ({F.ACTIVE, F.FAILED}, F.RECOVERING, F.ACTIVE),
}

# Every allowed move, from the table above by hand: start -> via, via -> end, via -> start (rollback).
ALLOWED: set[tuple[FlintIndexState, FlintIndexState]] = {
    # create
    (F.EMPTY, F.CREATING), (F.DELETED, F.CREATING), (F.CREATING, F.ACTIVE),
    (F.CREATING, F.EMPTY), (F.CREATING, F.DELETED),
    # auto refresh starts, manual refresh
    (F.ACTIVE, F.REFRESHING), (F.REFRESHING, F.ACTIVE),
    # alter
    (F.ACTIVE, F.UPDATING), (F.UPDATING, F.REFRESHING), (F.UPDATING, F.ACTIVE),
    (F.REFRESHING, F.UPDATING),
    # a failed index recovered by a full refresh or an ALTER (rollbacks return it to failed)
    (F.FAILED, F.REFRESHING), (F.REFRESHING, F.FAILED), (F.FAILED, F.UPDATING), (F.UPDATING, F.FAILED),
    # cancel a refresh
    (F.REFRESHING, F.CANCELLING), (F.CANCELLING, F.ACTIVE), (F.CANCELLING, F.REFRESHING),
    # drop
    (F.ACTIVE, F.DELETING), (F.REFRESHING, F.DELETING), (F.CREATING, F.DELETING), (F.EMPTY, F.DELETING),
    (F.FAILED, F.DELETING), (F.DELETING, F.DELETED), (F.DELETING, F.ACTIVE), (F.DELETING, F.REFRESHING),
    (F.DELETING, F.CREATING), (F.DELETING, F.EMPTY), (F.DELETING, F.FAILED),
    # vacuum (the end is the document's removal)
    (F.DELETED, F.VACUUMING), (F.VACUUMING, F.DELETED),
    # recover
    (F.ACTIVE, F.RECOVERING), (F.REFRESHING, F.RECOVERING), (F.FAILED, F.RECOVERING),
    (F.RECOVERING, F.REFRESHING), (F.RECOVERING, F.ACTIVE), (F.RECOVERING, F.FAILED),
}  # fmt: skip


def test_the_operations_are_the_specified_ones() -> None:
    actual = {name: (set(op.start), op.via, op.end) for name, op in INDEX_OPERATIONS.items()}
    assert actual == EXPECTED_OPERATIONS


@pytest.mark.parametrize(("current", "target"), list(itertools.product(FlintIndexState, FlintIndexState)))
def test_every_move(current: FlintIndexState, target: FlintIndexState) -> None:
    allowed = (current, target) in ALLOWED or current == target  # same-state rewrites (no state is terminal)
    assert can_move(current, target) is allowed
    if allowed:
        check_move(current, target, "index x")
    else:
        with pytest.raises(InvalidTransitionError, match=f"cannot move from {current.value} to {target.value}"):
            check_move(current, target, "index x")


def test_the_table_holds_exactly_the_allowed_moves() -> None:
    derived = {(s, t) for s, targets in FLINT_INDEX_TRANSITIONS.items() for t in targets}
    assert derived == ALLOWED
    assert not any(is_terminal(state) for state in FlintIndexState)


@pytest.mark.parametrize("name", sorted(INDEX_OPERATIONS))
def test_each_operation_rolls_back_to_where_it_started(name: str) -> None:
    op = INDEX_OPERATIONS[name]
    for state in FlintIndexState:
        if state in op.start:
            op.check_start(state)
            assert op.rollback(state) == state
            if op.via is not None:
                assert can_move(state, op.via) and can_move(op.via, state)
        else:
            with pytest.raises(InvalidTransitionError, match=f"cannot {name} idx: it is {state.value}"):
                op.check_start(state, "idx")
            with pytest.raises(InvalidTransitionError):
                op.rollback(state)


def test_only_a_vacuum_removes_the_state_document() -> None:
    assert [s for s in FlintIndexState if can_remove_index_state(s)] == [F.VACUUMING]


def test_kinds_never_mix() -> None:
    from query_core.states import SessionState, StatementState

    assert not can_move(F.ACTIVE, StatementState.RUNNING)  # type: ignore[type-var]
    assert not can_move(SessionState.RUNNING, F.REFRESHING)  # type: ignore[type-var]
