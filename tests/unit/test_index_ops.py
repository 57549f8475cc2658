"""Flint index operations as transactions over the state document, against a real index server:
commit, rollback with the error recorded, refused starts, two operations excluding each other, an
operation superseded by someone else's move, vacuum's removal, and the repairs of stalled states."""

from __future__ import annotations

import threading

import pytest

from query_core.errors import InvalidTransitionError
from query_core.flint import latest_id
from query_core.index_ops import (
    STALL_REPAIRS,
    IndexTarget,
    IndexTransaction,
    OperationSupersededError,
    repair_stalled,
    stall_repair,
)
from query_core.models import FlintIndexStateDoc, Versioned
from query_core.states import INDEX_OPERATIONS, FlintIndexState
from query_core.store import Store
from tests.support import seed

F = FlintIndexState
NAME = "flint_local_default_http_logs_skipping_index"


def target(ds: str) -> IndexTarget:
    return IndexTarget(ds, NAME)


def at(
    store: Store, ds: str, state: FlintIndexState, job_id: str = "", error: str = ""
) -> Versioned[FlintIndexStateDoc]:
    """A state document put in ``state`` directly (as if earlier operations had left it there)."""
    doc = FlintIndexStateDoc(
        latest_id=latest_id(NAME), data_source_name=ds, index_name=NAME, state=state, job_id=job_id, error=error
    )
    return seed(store, doc)


def stored(store: Store, ds: str) -> FlintIndexStateDoc | None:
    found = store.index_states.get(ds, latest_id(NAME))
    return found.doc if found is not None else None


def test_a_create_commits_active_with_its_owner_and_fields(store: Store, ds_name: str) -> None:
    seen: list[FlintIndexState] = []
    txn = IndexTransaction(store, target(ds_name), application_id="app-1", job_id="job-1")

    def work() -> str:
        seen.append(txn.state())
        return "made"

    result = txn.run("create", work, end_fields={"job_start_time": 42})
    assert result == "made"
    assert seen == [F.CREATING]  # the work ran in the transitioning state
    doc = stored(store, ds_name)
    assert doc is not None
    assert (doc.state, doc.job_id, doc.application_id, doc.job_start_time, doc.error) == (
        F.ACTIVE,
        "job-1",
        "app-1",
        42,
        "",
    )


def test_a_failed_refresh_rolls_back_to_where_it_started_with_the_error(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.ACTIVE)

    def work() -> None:
        assert stored(store, ds_name).state == F.REFRESHING  # type: ignore[union-attr]
        raise RuntimeError("source table is gone")

    with pytest.raises(RuntimeError, match="source table is gone"):
        IndexTransaction(store, target(ds_name), job_id="job-2").run("refresh", work)
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.ACTIVE
    assert doc.error == "source table is gone" and doc.job_id == "job-2"


def test_end_fields_given_as_a_function_are_taken_after_the_work(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.ACTIVE)
    done: list[str] = []

    def work() -> None:
        done.append("work")

    def completed() -> dict[str, int]:
        assert done == ["work"]  # the refresh is over when its completion time is taken
        return {"last_refresh_complete_time": 42}

    IndexTransaction(store, target(ds_name)).run("refresh", work, end_fields=completed)
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.ACTIVE and doc.last_refresh_complete_time == 42


def test_an_operation_refused_in_the_current_state_does_nothing(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.DELETED)
    ran: list[bool] = []
    with pytest.raises(InvalidTransitionError, match=f"cannot refresh {NAME}: it is deleted"):
        IndexTransaction(store, target(ds_name)).run("refresh", lambda: ran.append(True))
    assert ran == []
    assert stored(store, ds_name).state == F.DELETED  # type: ignore[union-attr]


def test_a_second_operation_on_the_same_index_is_refused_while_the_first_runs(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.ACTIVE)
    inside, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_work() -> None:
        inside.set()
        release.wait(10)

    def first() -> None:
        try:
            IndexTransaction(store, target(ds_name), job_id="first").run("refresh", first_work)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    try:
        with pytest.raises(InvalidTransitionError, match=r"cannot refresh .*: it is refreshing"):
            IndexTransaction(store, target(ds_name), job_id="second").run("refresh", lambda: None)
    finally:
        release.set()
    thread.join(10)
    assert errors == []
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.ACTIVE and doc.job_id == "first"


def test_two_operations_reading_the_same_version_one_wins(store: Store, ds_name: str) -> None:
    """Both pass the start check on the same version; the conditional move lets one through."""
    at(store, ds_name, F.ACTIVE)
    loser = IndexTransaction(store, target(ds_name), job_id="loser")
    read = loser.current()
    IndexTransaction(store, target(ds_name), job_id="winner").run("drop", lambda: None)
    loser.current = lambda: read  # type: ignore[method-assign]  # the version read before the winner wrote
    ran: list[bool] = []
    with pytest.raises(InvalidTransitionError, match="being changed by another operation"):
        loser.run("refresh", lambda: ran.append(True))
    assert ran == []
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.DELETED and doc.job_id == "winner"


@pytest.mark.parametrize("work_fails", [False, True], ids=["would commit", "would roll back"])
def test_a_superseded_operation_neither_commits_nor_rolls_back(
    store: Store, ds_name: str, work_fails: bool
) -> None:
    """A DELETE moved the refresh to cancelling while it ran: the refresh leaves the document alone."""
    at(store, ds_name, F.ACTIVE)

    def work() -> None:
        current = store.index_states.get(ds_name, latest_id(NAME))
        assert current is not None
        store.index_states.begin(current, INDEX_OPERATIONS["cancel refresh"], error="cancelled by the user")
        if work_fails:
            raise RuntimeError("killed")

    with pytest.raises(OperationSupersededError, match="the index is now cancelling"):
        IndexTransaction(store, target(ds_name), job_id="refresher").run("refresh", work)
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.CANCELLING and doc.error == "cancelled by the user"


def test_a_vacuum_removes_the_state_document_and_a_create_starts_again(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.DELETED)
    txn = IndexTransaction(store, target(ds_name), job_id="vacuumer")
    txn.run("vacuum", lambda: None)
    assert stored(store, ds_name) is None
    assert txn.state() == F.EMPTY
    txn.run("create", lambda: None)
    assert stored(store, ds_name).state == F.ACTIVE  # type: ignore[union-attr]


def test_an_operation_without_a_transitioning_state_commits_after_its_work(store: Store, ds_name: str) -> None:
    at(store, ds_name, F.ACTIVE, error="old error")
    IndexTransaction(store, target(ds_name), job_id="stream").run("start auto refresh", lambda: None)
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.REFRESHING and doc.error == "" and doc.job_id == "stream"


EXPECTED_REPAIRS = {
    F.CREATING: F.EMPTY,
    F.REFRESHING: F.ACTIVE,
    F.VACUUMING: F.DELETED,
    F.DELETING: F.DELETED,
    F.UPDATING: F.ACTIVE,
    F.CANCELLING: F.ACTIVE,
    F.RECOVERING: F.FAILED,
}


def test_the_repairs_cover_every_transitioning_state() -> None:
    assert STALL_REPAIRS == EXPECTED_REPAIRS
    assert stall_repair(F.REFRESHING, streaming=True) == F.FAILED
    for stable in (F.EMPTY, F.ACTIVE, F.DELETED, F.FAILED):
        assert stall_repair(stable) is None


@pytest.mark.parametrize(("state", "expected"), list(EXPECTED_REPAIRS.items()), ids=[s.value for s in EXPECTED_REPAIRS])
def test_repair_stalled_moves_each_state_with_the_reason(
    store: Store, ds_name: str, state: FlintIndexState, expected: FlintIndexState
) -> None:
    stalled = at(store, ds_name, state, job_id="gone")
    repaired = repair_stalled(store, stalled, "job gone ended dead")
    assert repaired is not None and repaired.doc.state == expected
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == expected and doc.error == "job gone ended dead"


def test_repair_of_a_dead_stream_fails_the_index(store: Store, ds_name: str) -> None:
    stalled = at(store, ds_name, F.REFRESHING, job_id="stream")
    repaired = repair_stalled(store, stalled, "stream died", streaming=True)
    assert repaired is not None and stored(store, ds_name).state == F.FAILED  # type: ignore[union-attr]


def test_repair_leaves_alone_a_document_that_moved_meanwhile_and_a_stable_one(store: Store, ds_name: str) -> None:
    stalled = at(store, ds_name, F.REFRESHING)
    store.index_states.commit(stalled, INDEX_OPERATIONS["refresh"])  # the owner committed after the sweep read it
    assert repair_stalled(store, stalled, "too late") is None
    doc = stored(store, ds_name)
    assert doc is not None and doc.state == F.ACTIVE and doc.error == ""
    current = store.index_states.get(ds_name, latest_id(NAME))
    assert current is not None and repair_stalled(store, current, "stable") is None
