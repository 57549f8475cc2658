"""Flint index state documents in the request index: create-only, conditional moves that pass the
index state machine, and removal only by a vacuum."""

from __future__ import annotations

import pytest

from query_core.errors import DocumentExistsError, InvalidTransitionError, VersionConflictError
from query_core.flint import latest_id
from query_core.models import FlintIndexStateDoc
from query_core.states import INDEX_OPERATIONS, FlintIndexState
from query_core.store import IndexStore

F = FlintIndexState
NAME = "flint_local_default_http_logs_skipping_index"


def new_state(ds: str) -> FlintIndexStateDoc:
    return FlintIndexStateDoc(latest_id=latest_id(NAME), data_source_name=ds, index_name=NAME)


def test_an_index_lives_from_create_to_vacuum(store: IndexStore, ds_name: str) -> None:
    state = store.create_index_state(new_state(ds_name))
    with pytest.raises(DocumentExistsError):
        store.create_index_state(new_state(ds_name))
    for op_name in ("create", "refresh", "drop", "vacuum"):
        op = INDEX_OPERATIONS[op_name]
        op.check_start(state.doc.state, NAME)
        assert op.via is not None
        state = store.move_index_state(state, op.via, job_id="j-1")
        if op.end is not None:
            state = store.move_index_state(state, op.end)
    assert state.doc.state == F.VACUUMING
    stored = store.get_index_state(ds_name, latest_id(NAME))
    assert stored is not None and stored.doc.job_id == "j-1" and stored.doc.index_name == NAME
    store.delete_index_state(stored)
    assert store.get_index_state(ds_name, latest_id(NAME)) is None


def test_a_refused_move_writes_nothing_and_a_stale_version_conflicts(store: IndexStore, ds_name: str) -> None:
    state = store.create_index_state(new_state(ds_name))
    with pytest.raises(InvalidTransitionError, match="cannot move from empty to active"):
        store.move_index_state(state, F.ACTIVE)
    creating = store.move_index_state(state, F.CREATING)
    with pytest.raises(VersionConflictError):
        store.move_index_state(state, F.CREATING)  # the version read before the first move
    rolled_back = store.move_index_state(creating, INDEX_OPERATIONS["create"].rollback(F.EMPTY), error="boom")
    stored = store.get_index_state(ds_name, latest_id(NAME))
    assert stored is not None and stored.doc.state == F.EMPTY == rolled_back.doc.state and stored.doc.error == "boom"


def test_only_a_vacuum_removes_the_state(store: IndexStore, ds_name: str) -> None:
    state = store.create_index_state(new_state(ds_name))
    with pytest.raises(InvalidTransitionError, match="only a vacuum removes it"):
        store.delete_index_state(state)
    assert store.get_index_state(ds_name, latest_id(NAME)) is not None


def test_a_custom_request_index_keeps_its_states(store: IndexStore, ds_name: str) -> None:
    custom = f".query_execution_request_custom_{ds_name}"
    state = store.create_index_state(new_state(ds_name), index=custom)
    store.move_index_state(state, F.CREATING, index=custom)
    assert store.get_index_state(ds_name, latest_id(NAME)) is None
    found = store.get_index_state(ds_name, latest_id(NAME), index=custom)
    assert found is not None and found.doc.state == F.CREATING
