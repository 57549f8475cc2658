"""The transition table, move by move: every allowed and every refused pair of states."""

from __future__ import annotations

import itertools
from typing import Any, TypeVar

import pytest

from query_core import states
from query_core.errors import InvalidRequestError, InvalidTransitionError
from query_core.states import (
    SESSION_TRANSITIONS,
    STATEMENT_TRANSITIONS,
    SessionState,
    StatementState,
    can_move,
    check_move,
    is_terminal,
)

St = StatementState
Se = SessionState
State = TypeVar("State", StatementState, SessionState)

# The expected table, written out independently of the product's (docs/documents.md):
# waiting -> running -> success | failed | timeout; waiting | running -> cancelled;
# a statement that waits too long fails (waiting -> failed) or times out (waiting -> timeout).
STATEMENT_ALLOWED: set[tuple[StatementState, StatementState]] = {
    (St.WAITING, St.RUNNING),
    (St.WAITING, St.CANCELLED),
    (St.WAITING, St.FAILED),
    (St.WAITING, St.TIMEOUT),
    (St.RUNNING, St.SUCCESS),
    (St.RUNNING, St.FAILED),
    (St.RUNNING, St.TIMEOUT),
    (St.RUNNING, St.CANCELLED),
    # same-state rewrites of a non-terminal document (e.g. setting a field while it waits/runs)
    (St.WAITING, St.WAITING),
    (St.RUNNING, St.RUNNING),
}
STATEMENT_TERMINAL = {St.SUCCESS, St.FAILED, St.TIMEOUT, St.CANCELLED}

# not_started -> running -> dead | fail; a session that never starts may also end directly.
SESSION_ALLOWED: set[tuple[SessionState, SessionState]] = {
    (Se.NOT_STARTED, Se.RUNNING),
    (Se.NOT_STARTED, Se.DEAD),
    (Se.NOT_STARTED, Se.FAIL),
    (Se.RUNNING, Se.DEAD),
    (Se.RUNNING, Se.FAIL),
    # heartbeats and other field updates keep the state
    (Se.NOT_STARTED, Se.NOT_STARTED),
    (Se.RUNNING, Se.RUNNING),
}
SESSION_TERMINAL = {Se.DEAD, Se.FAIL}

STATEMENT_PAIRS = list(itertools.product(StatementState, StatementState))
SESSION_PAIRS = list(itertools.product(SessionState, SessionState))
MIXED_PAIRS = list(itertools.product(StatementState, SessionState)) + list(
    itertools.product(SessionState, StatementState)
)


def _id(pair: tuple[object, object]) -> str:
    a, b = pair
    return f"{type(a).__name__[:4]}.{a}->{type(b).__name__[:4]}.{b}"


def test_the_expected_table_covers_every_state() -> None:
    assert {s for pair in STATEMENT_ALLOWED for s in pair} | STATEMENT_TERMINAL == set(StatementState)
    assert {s for pair in SESSION_ALLOWED for s in pair} | SESSION_TERMINAL == set(SessionState)
    assert len(STATEMENT_PAIRS) == 36 and len(SESSION_PAIRS) == 16 and len(MIXED_PAIRS) == 48


@pytest.mark.parametrize("pair", STATEMENT_PAIRS, ids=_id)
def test_statement_moves(pair: tuple[StatementState, StatementState]) -> None:
    current, target = pair
    allowed = pair in STATEMENT_ALLOWED
    assert can_move(current, target) is allowed
    if allowed:
        check_move(current, target, "statement q1")
    else:
        with pytest.raises(InvalidTransitionError) as err:
            check_move(current, target, "statement q1")
        assert "statement q1" in err.value.message
        assert current.value in err.value.message


@pytest.mark.parametrize("pair", SESSION_PAIRS, ids=_id)
def test_session_moves(pair: tuple[SessionState, SessionState]) -> None:
    current, target = pair
    allowed = pair in SESSION_ALLOWED
    assert can_move(current, target) is allowed
    if allowed:
        check_move(current, target, "session s1")
    else:
        with pytest.raises(InvalidTransitionError) as err:
            check_move(current, target, "session s1")
        assert "session s1" in err.value.message


@pytest.mark.parametrize("pair", MIXED_PAIRS, ids=_id)
def test_mixing_statement_and_session_states_is_refused(pair: tuple[object, object]) -> None:
    current, target = pair
    assert can_move(current, target) is False  # type: ignore[type-var]
    with pytest.raises(InvalidTransitionError):
        check_move(current, target)  # type: ignore[type-var]


@pytest.mark.parametrize("state", list(StatementState) + list(SessionState), ids=lambda s: f"{type(s).__name__}.{s}")
def test_is_terminal(state: StatementState | SessionState) -> None:
    assert is_terminal(state) is (state in STATEMENT_TERMINAL | SESSION_TERMINAL)


def _assert_refuses_every_move(state: State) -> None:
    for target in type(state):
        assert not can_move(state, target)
    with pytest.raises(InvalidTransitionError, match="can no longer change"):
        check_move(state, state, "doc")


@pytest.mark.parametrize("state", sorted(STATEMENT_TERMINAL), ids=str)
def test_terminal_statement_states_refuse_everything_including_themselves(state: StatementState) -> None:
    _assert_refuses_every_move(state)


@pytest.mark.parametrize("state", sorted(SESSION_TERMINAL), ids=str)
def test_terminal_session_states_refuse_everything_including_themselves(state: SessionState) -> None:
    _assert_refuses_every_move(state)


def test_refused_move_is_a_client_error() -> None:
    with pytest.raises(InvalidTransitionError) as err:
        check_move(St.SUCCESS, St.RUNNING)
    assert isinstance(err.value, InvalidRequestError)
    assert err.value.http_status == 400
    assert err.value.error_type == "IllegalStateException"


def test_shared_state_names_compare_equal_as_strings() -> None:
    """The premise of the next test: without separate tables, "running" would mean one thing."""
    assert St.RUNNING == Se.RUNNING == "running"
    assert hash(St.RUNNING) == hash(Se.RUNNING)


def test_tables_are_separate_and_keyed_by_their_own_enum() -> None:
    """A merged dict would let the session "running" entry replace the statement one (or back)."""
    assert STATEMENT_TRANSITIONS is not SESSION_TRANSITIONS
    assert set(STATEMENT_TRANSITIONS) == set(StatementState)
    assert set(SESSION_TRANSITIONS) == set(SessionState)
    assert all(type(k) is StatementState for k in STATEMENT_TRANSITIONS)
    assert all(type(k) is SessionState for k in SESSION_TRANSITIONS)
    for targets in STATEMENT_TRANSITIONS.values():
        assert all(type(t) is StatementState for t in targets)
    for session_targets in SESSION_TRANSITIONS.values():
        assert all(type(t) is SessionState for t in session_targets)
    # "running" means different things in the two tables.
    assert can_move(St.RUNNING, St.SUCCESS) and not can_move(Se.RUNNING, Se.NOT_STARTED)
    assert STATEMENT_TRANSITIONS[St.RUNNING] != SESSION_TRANSITIONS[Se.RUNNING]


def test_a_merged_table_would_have_been_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Self-check of this file: the parametrized expectations fail against a shared dict."""
    merged: dict[Any, frozenset[Any]] = {**STATEMENT_TRANSITIONS, **SESSION_TRANSITIONS}
    monkeypatch.setattr(states, "STATEMENT_TRANSITIONS", merged)
    monkeypatch.setattr(states, "SESSION_TRANSITIONS", merged)
    mismatches = [p for p in STATEMENT_PAIRS if states.can_move(*p) is not (p in STATEMENT_ALLOWED)]
    assert (St.RUNNING, St.SUCCESS) in mismatches
