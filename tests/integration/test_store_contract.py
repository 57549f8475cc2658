"""The repositories' contract, run against both connectors: the index server (osmem-server, or the
cluster at ``OPENSEARCH_URL``) and the in-memory twin (``docs/documents.md``): create-only writes,
conditional writes and their conflicts, refused moves, searches after a refresh, the named state
operations. What only a real cluster can show (mappings, retries, the driver) is in
``test_index_client.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from query_core.errors import (
    AsyncQueryError,
    DocumentExistsError,
    InvalidTransitionError,
    VersionConflictError,
)
from query_core.ids import new_id, request_index
from query_core.models import ResultDoc, SessionDoc, StatementDoc, Versioned, now_millis
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import MemoryIndex, Query, Store, Term, retry_on_conflict


@pytest.fixture(params=["index", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A store over the index server, or over the in-memory twin: every test here runs on both."""
    if request.param == "memory":
        yield Store.in_memory()
        return
    s = Store.connect(request.getfixturevalue("opensearch_config"))
    yield s
    s.close()


def statement(ds: str, session_id: str, **fields: Any) -> StatementDoc:
    sid = new_id(ds)
    return StatementDoc(
        statement_id=sid, query_id=sid, session_id=session_id, query="SELECT 1", data_source_name=ds, **fields
    )


def session(ds: str, **fields: Any) -> SessionDoc:
    return SessionDoc(session_id=new_id(ds), data_source_name=ds, **fields)


def refresh(store: Store, ds: str) -> None:
    store.index.refresh(request_index(ds))


# -- create-only and conditional writes ------------------------------------------------------------


def test_create_and_read_back(store: Store, ds_name: str) -> None:
    doc = statement(ds_name, new_id(ds_name))
    created = store.statements.create(doc)
    found = store.statements.get(ds_name, doc.statement_id)
    assert found is not None
    assert found.doc == doc
    assert (found.seq_no, found.primary_term) == (created.seq_no, created.primary_term)


def test_create_only_conflict(store: Store, ds_name: str) -> None:
    doc = statement(ds_name, new_id(ds_name))
    store.statements.create(doc)
    other = doc.model_copy(update={"query": "SELECT 2"})
    with pytest.raises(DocumentExistsError):
        store.statements.create(other)
    found = store.statements.get(ds_name, doc.statement_id)
    assert found is not None and found.doc.query == "SELECT 1"  # never overwritten


def test_create_only_conflict_for_sessions(store: Store, ds_name: str) -> None:
    doc = session(ds_name)
    store.sessions.create(doc)
    with pytest.raises(DocumentExistsError):
        store.sessions.create(doc.model_copy(update={"job_id": "other"}))


def test_get_of_missing_documents_and_indexes(store: Store, ds_name: str) -> None:
    assert store.statements.get(ds_name, new_id(ds_name)) is None  # index does not exist yet
    s = store.sessions.create(session(ds_name))
    assert store.statements.get(ds_name, new_id(ds_name)) is None
    # a session is not a statement, and the other way round
    assert store.statements.get(ds_name, s.doc.session_id) is None
    st = store.statements.create(statement(ds_name, s.doc.session_id))
    assert store.sessions.get(ds_name, st.doc.statement_id) is None


def test_two_updates_from_the_same_version_one_wins(store: Store, ds_name: str) -> None:
    v0 = store.statements.create(statement(ds_name, new_id(ds_name)))
    running = store.statements.move(v0, StatementState.RUNNING)
    with pytest.raises(VersionConflictError):
        store.statements.move(v0, StatementState.CANCELLED)
    found = store.statements.get(ds_name, v0.doc.statement_id)
    assert found is not None
    assert found.doc.state == StatementState.RUNNING
    assert found.seq_no == running.seq_no


def test_racing_threads_exactly_one_wins(store: Store, ds_name: str) -> None:
    v0 = store.statements.create(statement(ds_name, new_id(ds_name)))
    v1 = store.statements.move(v0, StatementState.RUNNING)
    targets = [StatementState.SUCCESS, StatementState.CANCELLED, StatementState.FAILED, StatementState.TIMEOUT] * 2
    barrier = threading.Barrier(len(targets))
    outcomes: list[tuple[StatementState, str]] = []
    lock = threading.Lock()

    def race(target: StatementState) -> None:
        barrier.wait(timeout=10)
        try:
            store.statements.move(v1, target, error=f"by {target.value}")
            outcome = "won"
        except VersionConflictError:
            outcome = "lost"
        with lock:
            outcomes.append((target, outcome))

    threads = [threading.Thread(target=race, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(outcomes) == len(targets)
    winners = [target for target, outcome in outcomes if outcome == "won"]
    assert len(winners) == 1
    final = store.statements.get(ds_name, v0.doc.statement_id)
    assert final is not None
    assert final.doc.state == winners[0]
    assert final.doc.error == f"by {winners[0].value}"


def test_racing_heartbeats_on_a_session(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    barrier = threading.Barrier(6)
    wins: list[int] = []

    def beat(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            store.sessions.update(v0, SessionState.RUNNING, last_update_time=i)
            wins.append(i)
        except VersionConflictError:
            pass

    threads = [threading.Thread(target=beat, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(wins) == 1
    found = store.sessions.get(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.last_update_time == wins[0]


# -- refused moves never reach the index -----------------------------------------------------------


def test_invalid_moves_are_refused_without_writing(store: Store, ds_name: str) -> None:
    waiting = store.statements.create(statement(ds_name, new_id(ds_name)))
    with pytest.raises(InvalidTransitionError):
        store.statements.move(waiting, StatementState.SUCCESS)  # waiting -> success skips running
    after = store.statements.get(ds_name, waiting.doc.statement_id)
    assert after is not None and after.seq_no == waiting.seq_no and after.doc.state == StatementState.WAITING

    done = store.statements.move(store.statements.move(waiting, StatementState.RUNNING), StatementState.CANCELLED)
    for target in StatementState:
        with pytest.raises(InvalidTransitionError):
            store.statements.move(done, target, error="late")
    after = store.statements.get(ds_name, waiting.doc.statement_id)
    assert after is not None
    assert after.seq_no == done.seq_no
    assert after.doc.state == StatementState.CANCELLED and after.doc.error == ""


def test_a_dead_session_takes_no_heartbeat(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    dead = store.sessions.update(v0, SessionState.DEAD, error="gone")
    with pytest.raises(InvalidTransitionError):
        store.sessions.update(dead, last_update_time=now_millis())
    with pytest.raises(InvalidTransitionError):
        store.sessions.update(dead, SessionState.RUNNING)
    after = store.sessions.get(ds_name, v0.doc.session_id)
    assert after is not None and after.seq_no == dead.seq_no and after.doc.state == SessionState.DEAD


def test_a_heartbeat_is_a_conditional_write_of_liveness_fields_only(store: Store, ds_name: str) -> None:
    v0 = store.sessions.update(store.sessions.create(session(ds_name)), SessionState.RUNNING)
    beat = store.sessions.beat(v0, last_update_time=5, heartbeat_interval_millis=2_000)
    found = store.sessions.get(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.last_update_time == 5 and found.doc.state == SessionState.RUNNING
    assert found.seq_no == beat.seq_no
    with pytest.raises(VersionConflictError):
        store.sessions.beat(v0, last_update_time=6)  # a stale version, as any conditional write
    with pytest.raises(ValueError):
        store.sessions.move(beat, SessionState.DEAD, liveness=True)  # a state change is never one
    again = store.sessions.get(ds_name, v0.doc.session_id)
    assert again is not None and again.doc.state == SessionState.RUNNING and again.seq_no == beat.seq_no


def test_a_misspelt_field_is_refused_before_any_write(store: Store, ds_name: str) -> None:
    """A keyword that is no field of the document is a programming error: nothing is written
    (it would otherwise be stored under the misspelt name and the real field left as it was)."""
    st = store.statements.create(statement(ds_name, new_id(ds_name)))
    with pytest.raises(ValueError, match="eror") as err:
        store.statements.move(st, StatementState.FAILED, eror="boom")
    assert not isinstance(err.value, AsyncQueryError)  # not a client error: no handler may turn it into a 4xx
    after = store.index.get(request_index(ds_name), st.doc.statement_id)
    assert after is not None
    assert after.version.seq_no == st.seq_no and after.source == st.doc.to_source()

    se = store.sessions.create(session(ds_name))
    with pytest.raises(ValueError, match="lastUpdateTime"):
        store.sessions.update(se, lastUpdateTime=1)  # the stored alias is not the field's name either
    with pytest.raises(ValueError, match="hearbeat_interval_millis"):
        store.sessions.update(se, SessionState.RUNNING, error="", hearbeat_interval_millis=1)
    after = store.index.get(request_index(ds_name), se.doc.session_id)
    assert after is not None
    assert after.version.seq_no == se.seq_no and after.source == se.doc.to_source()


def test_put_result_is_idempotent(store: Store, ds_name: str) -> None:
    index = f"query_execution_result_{ds_name}"
    qid = new_id(ds_name)
    store.results.put(index, ResultDoc(query_id=qid, status="FAILED", error="first"))
    store.results.put(index, ResultDoc(query_id=qid, status="FAILED", error="retry"))
    found = store.results.get(index, qid)
    assert found is not None and found.error == "retry"


# -- searches ----------------------------------------------------------------------------------------


def test_find_waiting_statements_oldest_first(store: Store, ds_name: str) -> None:
    sid = new_id(ds_name)
    now = now_millis()
    second = statement(ds_name, sid, submit_time=now - 2_000)
    first = statement(ds_name, sid, submit_time=now - 3_000)
    third = statement(ds_name, sid, submit_time=now - 1_000)
    for doc in (second, third, first):
        store.statements.create(doc)
    # not found: another session's, a running one, one submitted more than an hour ago
    store.statements.create(statement(ds_name, new_id(ds_name), submit_time=now - 5_000))
    running = store.statements.create(statement(ds_name, sid, submit_time=now - 4_000))
    store.statements.move(running, StatementState.RUNNING)
    store.statements.create(statement(ds_name, sid, submit_time=now - 2 * 3600 * 1000))
    refresh(store, ds_name)

    found = store.statements.find_waiting(ds_name, sid)
    assert [v.doc.statement_id for v in found] == [first.statement_id, second.statement_id, third.statement_id]
    # the versions returned are usable for conditional writes
    store.statements.move(found[0], StatementState.RUNNING)
    assert len(store.statements.find_waiting(ds_name, sid, size=2)) == 2


def test_find_waiting_statements_on_a_missing_index(store: Store, ds_name: str) -> None:
    assert store.statements.find_waiting(ds_name, new_id(ds_name)) == []


def test_find_unfinished_statements_and_sessions(store: Store, ds_name: str) -> None:
    s = store.sessions.create(session(ds_name))
    store.sessions.update(s, SessionState.RUNNING)
    dead = store.sessions.create(session(ds_name))
    store.sessions.update(dead, SessionState.DEAD)
    sid = s.doc.session_id
    waiting = store.statements.create(statement(ds_name, sid))
    running = store.statements.move(store.statements.create(statement(ds_name, sid)), StatementState.RUNNING)
    store.statements.move(
        store.statements.move(store.statements.create(statement(ds_name, sid)), StatementState.RUNNING),
        StatementState.SUCCESS,
    )
    refresh(store, ds_name)
    unfinished = {v.doc.statement_id for v in store.statements.find_unfinished(ds_name, sid)}
    assert unfinished == {waiting.doc.statement_id, running.doc.statement_id}
    assert [v.doc.session_id for v in store.sessions.find(ds_name, [SessionState.RUNNING])] == [sid]
    assert {v.doc.session_id for v in store.sessions.find(None, list(SessionState))} == {sid, dead.doc.session_id}
    streaming = store.sessions.create(session(ds_name, session_type=SessionType.STREAMING))
    refresh(store, ds_name)
    found = store.sessions.find(None, [SessionState.NOT_STARTED], session_type=SessionType.STREAMING)
    assert [v.doc.session_id for v in found] == [streaming.doc.session_id]


def test_documents_of_a_custom_request_index_stay_there(store: Store, ds_name: str) -> None:
    """The job is told its request index (``spark.flint.job.requestIndex``); a store bound to it
    uses that index instead of deriving it from the datasource."""
    index = f".query_execution_request_custom_{ds_name}"
    bound = store.bound_to(index)
    se = bound.sessions.create(session(ds_name))
    st = bound.statements.create(statement(ds_name, se.doc.session_id))
    bound.index.refresh(index)

    [waiting] = bound.statements.find_waiting(ds_name, se.doc.session_id)
    assert waiting.doc.statement_id == st.doc.statement_id
    bound.statements.move(waiting, StatementState.RUNNING)
    session_now = bound.sessions.get(ds_name, se.doc.session_id)
    assert session_now is not None
    bound.sessions.update(session_now, SessionState.RUNNING, job_id="j1")

    moved = bound.statements.get(ds_name, st.doc.statement_id)
    assert moved is not None and moved.doc.state == StatementState.RUNNING
    running = bound.sessions.get(ds_name, se.doc.session_id)
    assert running is not None and running.doc.state == SessionState.RUNNING and running.doc.job_id == "j1"
    # nothing in the index the datasource name gives
    assert store.sessions.get(ds_name, se.doc.session_id) is None
    assert store.statements.get(ds_name, st.doc.statement_id) is None
    assert not store.index.index_exists(request_index(ds_name))


# -- re-reading after a conflict -------------------------------------------------------------------------------


def test_update_with_retry_rereads_after_a_conflict(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    store.sessions.update(v0, SessionState.RUNNING, last_update_time=1)  # someone else moves it first
    seen: list[int] = []
    reads = 0

    def reread() -> Versioned[SessionDoc] | None:
        nonlocal reads
        reads += 1
        return store.sessions.get(ds_name, v0.doc.session_id)

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        seen.append(current.seq_no)
        return store.sessions.update(current, pending_statement_ids=[*current.doc.pending_statement_ids, "q1"])

    written = retry_on_conflict(reread, change, first=v0)
    assert written is not None
    assert reads == 1
    assert seen[0] == v0.seq_no and seen[1] > v0.seq_no
    final = store.sessions.get(ds_name, v0.doc.session_id)
    assert final is not None
    assert final.doc.pending_statement_ids == ["q1"]
    assert final.doc.state == SessionState.RUNNING and final.doc.last_update_time == 1  # the other write kept


def test_update_with_retry_gives_up_when_change_says_so(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    assert retry_on_conflict(lambda: v0, lambda current: None) is None
    assert retry_on_conflict(lambda: None, lambda current: current) is None


def test_a_conditional_write_to_a_deleted_document_is_a_conflict(store: Store, ds_name: str) -> None:
    """The version held is no longer the document's: the caller re-reads (and finds nothing)."""
    v0 = store.statements.create(statement(ds_name, new_id(ds_name)))
    store.index.delete(request_index(ds_name), v0.doc.statement_id)
    with pytest.raises(VersionConflictError):
        store.statements.move(v0, StatementState.CANCELLED)
    reread = lambda: store.statements.get(ds_name, v0.doc.statement_id)  # noqa: E731
    change = lambda current: store.statements.move(current, StatementState.CANCELLED)  # noqa: E731
    assert retry_on_conflict(reread, change, first=v0) is None


def test_update_with_retry_is_bounded(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    store.sessions.update(v0, last_update_time=5)
    calls = 0

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        nonlocal calls
        calls += 1
        return store.sessions.update(current, last_update_time=6)

    with pytest.raises(VersionConflictError):
        retry_on_conflict(lambda: v0, change, attempts=4)  # the re-read is always stale
    assert calls == 4


# -- visibility --------------------------------------------------------------------------------------


def test_a_read_by_id_sees_a_write_at_once_and_a_search_after_a_refresh(store: Store, ds_name: str) -> None:
    created = store.statements.create(statement(ds_name, new_id(ds_name)))
    assert store.statements.get(ds_name, created.doc.statement_id) is not None
    refresh(store, ds_name)
    found = store.statements.find_unfinished(ds_name, created.doc.session_id)
    assert [f.doc.statement_id for f in found] == [created.doc.statement_id]


def test_the_twin_hides_a_write_from_searches_until_the_index_refreshes(ds_name: str) -> None:
    """As a real cluster does (it refreshes every second): code that waits for a search to see a
    fresh write fails on the twin as it would on a cluster, though the embedded server shows
    writes at once."""
    twin = Store(MemoryIndex(refresh_interval_s=3600))
    refresh(twin, ds_name)
    created = twin.statements.create(statement(ds_name, new_id(ds_name)))
    assert twin.statements.find_unfinished(ds_name, created.doc.session_id) == []
    refresh(twin, ds_name)
    assert len(twin.statements.find_unfinished(ds_name, created.doc.session_id)) == 1


def test_an_update_that_changes_nothing_keeps_the_version(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    same = store.sessions.update(v0, error="")
    assert (same.seq_no, same.primary_term) == (v0.seq_no, v0.primary_term)
    moved = store.sessions.update(same, error="changed")
    assert moved.seq_no > v0.seq_no


def test_documents_are_created_in_their_initial_states_only(store: Store, ds_name: str) -> None:
    with pytest.raises(InvalidTransitionError):
        store.statements.create(statement(ds_name, new_id(ds_name), state=StatementState.SUCCESS))
    with pytest.raises(InvalidTransitionError):
        store.sessions.create(session(ds_name, state=SessionState.RUNNING))
    assert store.index.search(request_index(ds_name), Query()) == []


# -- the named state operations ----------------------------------------------------------------------


def result(query_id: str, status: str = "SUCCESS") -> ResultDoc:
    return ResultDoc(query_id=query_id, status=status)  # type: ignore[arg-type]


def test_settle_writes_the_result_then_the_terminal_state(store: Store, ds_name: str) -> None:
    running = store.statements.move(
        store.statements.create(statement(ds_name, new_id(ds_name))), StatementState.RUNNING
    )
    results_index = f"query_execution_result_{ds_name}"
    settled = store.statements.settle(
        running, StatementState.SUCCESS, result=(results_index, result(running.doc.query_id))
    )
    assert settled.applied and settled.state == StatementState.SUCCESS
    assert store.results.get(results_index, running.doc.query_id) is not None
    final = store.statements.get(ds_name, running.doc.statement_id)
    assert final is not None and final.doc.state == StatementState.SUCCESS


def test_settle_never_overwrites_a_finished_statement(store: Store, ds_name: str) -> None:
    waiting = store.statements.create(statement(ds_name, new_id(ds_name)))
    running = store.statements.move(waiting, StatementState.RUNNING)
    cancelled = store.statements.cancel(running)
    assert cancelled is not None and cancelled[1] == StatementState.RUNNING
    settled = store.statements.settle(running, StatementState.SUCCESS, error="")  # from a stale version
    assert not settled.applied and settled.state == StatementState.CANCELLED
    with pytest.raises(InvalidTransitionError, match="already cancelled"):
        store.statements.cancel(running)


def test_start_moves_only_a_waiting_statement(store: Store, ds_name: str) -> None:
    waiting = store.statements.create(statement(ds_name, new_id(ds_name)))
    store.statements.fail(waiting, "gone")
    assert store.statements.start(waiting) is None  # re-read: it failed meanwhile
    other = store.statements.create(statement(ds_name, new_id(ds_name)))
    started = store.statements.start(other)
    assert started is not None and started.doc.state == StatementState.RUNNING


def test_end_session_is_once_and_only_by_its_job(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    running = store.sessions.update(v0, SessionState.RUNNING, job_id="job-a")
    assert store.sessions.end(running, SessionState.DEAD, job_id="job-b") is None  # not job-b's
    ended = store.sessions.end(v0, SessionState.FAIL, "broken", job_id="job-a")  # from a stale version
    assert ended is not None and ended.doc.state == SessionState.FAIL and ended.doc.error == "broken"
    assert store.sessions.end(ended, SessionState.DEAD) is None  # its end stands
    final = store.sessions.get(ds_name, v0.doc.session_id)
    assert final is not None and final.doc.state == SessionState.FAIL


def test_append_pending_keeps_the_last_ids_and_stops_at_the_end(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    for i in range(5):
        assert store.sessions.append_pending(v0, f"q{i}", keep=3) is not None  # stale v0: re-read each time
    found = store.sessions.get(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.pending_statement_ids == ["q2", "q3", "q4"]
    store.sessions.end(found, SessionState.DEAD)
    assert store.sessions.append_pending(found, "late", keep=3) is None


def test_only_a_vacuum_removes_an_index_state(store: Store, ds_name: str) -> None:
    from query_core.models import FlintIndexStateDoc
    from query_core.states import FlintIndexState

    doc = FlintIndexStateDoc(latest_id="aWR4", state=FlintIndexState.DELETING, data_source_name=ds_name)
    deleting = store.index_states.create(doc)
    with pytest.raises(InvalidTransitionError):
        store.index_states.delete(deleting)
    deleted = store.index_states.move(deleting, FlintIndexState.DELETED)
    vacuuming = store.index_states.move(deleted, FlintIndexState.VACUUMING)
    with pytest.raises(VersionConflictError):
        store.index_states.delete(Versioned(vacuuming.doc, deleted.seq_no, deleted.primary_term))  # stale
    store.index_states.delete(vacuuming)
    assert store.index_states.get(ds_name, "aWR4") is None


# -- locks and datasources ---------------------------------------------------------------------------


def test_one_of_two_racing_takers_wins_a_lock(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    barrier = threading.Barrier(4)
    wins: list[str] = []

    def take(owner: str) -> None:
        barrier.wait(timeout=10)
        if store.locks.take(index, "lock", {"type": "lock", "owner": owner}, lambda held: False):
            wins.append(owner)

    threads = [threading.Thread(target=take, args=(f"o{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(wins) == 1
    assert not store.locks.release(index, "lock", {"owner": ""}, lambda held: held.get("owner") == "nobody")
    assert store.locks.release(index, "lock", {"owner": ""}, lambda held: held.get("owner") == wins[0])
    assert store.locks.take(index, "lock", {"owner": "next"}, lambda held: held.get("owner") == "")


def test_a_lease_is_renewed_by_its_owner_and_taken_over_once_expired(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    assert store.locks.acquire_lease(index, "lease", "a", lease_ms=60_000)
    assert store.locks.acquire_lease(index, "lease", "a", lease_ms=60_000)
    assert not store.locks.acquire_lease(index, "lease", "b", lease_ms=60_000)
    assert store.locks.acquire_lease(index, "lease", "a", lease_ms=-1)  # expired at once
    assert store.locks.acquire_lease(index, "lease", "b", lease_ms=60_000)


def test_datasources_are_created_once_replaced_and_deleted(store: Store) -> None:
    store.datasources.create("lake", {"name": "lake", "connector": "local"})
    with pytest.raises(DocumentExistsError):
        store.datasources.create("lake", {"name": "lake"})
    assert store.datasources.replace("lake", {"name": "lake", "description": "new"})
    assert not store.datasources.replace("sea", {"name": "sea"})
    found = store.datasources.get("lake")
    assert found is not None and found["description"] == "new"
    store.index.refresh(".ql-datasources")
    assert [d["name"] for d in store.datasources.list()] == ["lake"]
    assert store.datasources.delete("lake") and not store.datasources.delete("lake")
    assert store.datasources.get("lake") is None


def test_a_search_takes_typed_filters(store: Store, ds_name: str) -> None:
    sid = new_id(ds_name)
    now = now_millis()
    docs = [store.statements.create(statement(ds_name, sid, submit_time=now - age)) for age in (10, 20, 30)]
    refresh(store, ds_name)
    found = store.index.search(
        request_index(ds_name), Query((Term("sessionId", sid),), sort=(("submitTime", "desc"),), size=2)
    )
    assert [f.doc_id for f in found] == [docs[0].doc.statement_id, docs[1].doc.statement_id]
    assert isinstance(found[0].source, dict) and found[0].version.primary_term >= 1


def test_the_twin_can_fail_on_purpose(ds_name: str) -> None:
    from query_core.errors import IndexUnavailableError

    twin = MemoryIndex()
    store = Store(twin)
    twin.fail_next(1)
    with pytest.raises(IndexUnavailableError):
        store.sessions.create(session(ds_name))
    assert store.sessions.create(session(ds_name)) is not None
