"""Flint index state documents in the request index: create-only, conditional moves that pass the
index state machine, and removal only by a vacuum."""

from __future__ import annotations

import pytest

from query_core.errors import DocumentExistsError, InvalidTransitionError, VersionConflictError
from query_core.flint import latest_id
from query_core.models import FlintIndexStateDoc
from query_core.states import INDEX_OPERATIONS, FlintIndexState
from query_core.store import Store
from tests.support import seed

F = FlintIndexState
CREATE = INDEX_OPERATIONS["create"]
NAME = "flint_local_default_http_logs_skipping_index"


def new_state(ds: str) -> FlintIndexStateDoc:
    return FlintIndexStateDoc(latest_id=latest_id(NAME), data_source_name=ds, index_name=NAME)


def test_an_index_lives_from_create_to_vacuum(store: Store, ds_name: str) -> None:
    state = seed(store, new_state(ds_name))
    with pytest.raises(DocumentExistsError):
        seed(store, new_state(ds_name))
    for op_name in ("create", "refresh", "drop", "vacuum"):
        op = INDEX_OPERATIONS[op_name]
        op.check_start(state.doc.state, NAME)
        assert op.via is not None
        state = store.index_states.begin(state, op, job_id="j-1")
        if op.end is not None:
            committed = store.index_states.commit(state, op)
            assert committed is not None
            state = committed
    assert state.doc.state == F.VACUUMING
    stored = store.index_states.get(ds_name, latest_id(NAME))
    assert stored is not None and stored.doc.job_id == "j-1" and stored.doc.index_name == NAME
    store.index_states.delete(stored)
    assert store.index_states.get(ds_name, latest_id(NAME)) is None


def test_a_refused_move_writes_nothing_and_a_stale_version_conflicts(store: Store, ds_name: str) -> None:
    state = seed(store, new_state(ds_name))
    with pytest.raises(InvalidTransitionError, match="cannot move from empty to active"):
        store.index_states.commit(state, CREATE)  # its end, without its beginning
    creating = store.index_states.begin(state, CREATE)
    with pytest.raises(VersionConflictError):
        store.index_states.begin(state, CREATE)  # the version read before the first move
    rolled_back = store.index_states.roll_back(creating, CREATE, F.EMPTY, error="boom")
    stored = store.index_states.get(ds_name, latest_id(NAME))
    assert stored is not None and stored.doc.state == F.EMPTY == rolled_back.doc.state and stored.doc.error == "boom"


def test_only_a_vacuum_removes_the_state(store: Store, ds_name: str) -> None:
    state = seed(store, new_state(ds_name))
    with pytest.raises(InvalidTransitionError, match="only a vacuum removes it"):
        store.index_states.delete(state)
    assert store.index_states.get(ds_name, latest_id(NAME)) is not None


def test_a_custom_request_index_keeps_its_states(store: Store, ds_name: str) -> None:
    custom = f".query_execution_request_custom_{ds_name}"
    bound = store.bound_to(custom)
    state = seed(bound, new_state(ds_name))
    bound.index_states.begin(state, CREATE)
    assert store.index_states.get(ds_name, latest_id(NAME)) is None
    found = bound.index_states.get(ds_name, latest_id(NAME))
    assert found is not None and found.doc.state == F.CREATING
