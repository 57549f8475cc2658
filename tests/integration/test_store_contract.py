"""The store's contract, run against both connectors: a real OpenSearch node (or the cluster at
``OPENSEARCH_URL``) and the in-memory twin, which it holds to the real engine (``docs/documents.md``).

The repositories: create-only writes, conditional writes and their conflicts, refused moves,
searches after a refresh, the named state operations. The connector's two interfaces, every call
of each: documents (reads by id, on the event loop too, writes, searches, listeners) and index
administration (indexes, mappings and their ``_meta``, bulk writes, scans, dynamic mapping). What
only a real cluster can show (retries, the driver, templates) is in ``test_index_client.py``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from query_core.config import OpenSearchConfig
from query_core.errors import (
    AsyncQueryError,
    DocumentExistsError,
    IndexOperationError,
    InvalidRequestError,
    InvalidTransitionError,
    SessionLostError,
    VersionConflictError,
)
from query_core.ids import DEPLOYMENT_INDEX, SCHEDULER_INDEX, USAGE_INDEX, new_id, request_index
from query_core.models import FlintIndexStateDoc, ResultDoc, SessionDoc, StatementDoc, Versioned, now_millis
from query_core.realtime import ReadNotServed
from query_core.states import (
    INDEX_OPERATIONS,
    FlintIndexState,
    ScheduleState,
    SessionState,
    SessionType,
    StatementState,
)
from query_core.store import (
    IndexClient,
    MemoryIndex,
    Query,
    Range,
    ScheduleTerms,
    Store,
    Term,
    Terms,
    retry_on_conflict,
)
from query_core.store.connector import CALL_OUTCOMES
from query_core.store.index_states import MAX_INDEX_ERROR
from query_core.store.usage import UsageRepository, day_of, usage_id


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
    running = store.statements._move(v0, StatementState.RUNNING)
    with pytest.raises(VersionConflictError):
        store.statements._move(v0, StatementState.CANCELLED)
    found = store.statements.get(ds_name, v0.doc.statement_id)
    assert found is not None
    assert found.doc.state == StatementState.RUNNING
    assert found.seq_no == running.seq_no


def test_a_whole_document_write_at_a_version_replaces_it_and_a_stale_or_deleted_one_conflicts(store: Store) -> None:
    index, doc_id = USAGE_INDEX, f"r-{new_id('x')}"
    first = store.index.create(index, doc_id, {"type": "usage", "days": [{"day": "2026-01-01", "bytes": 1}]})
    second = store.index.replace_if(index, doc_id, {"type": "usage", "lastUpdateTime": 5}, first)
    assert second.seq_no > first.seq_no
    found = store.index.get(index, doc_id)
    assert found is not None and found.source == {"type": "usage", "lastUpdateTime": 5}  # whole: days gone
    with pytest.raises(VersionConflictError):
        store.index.replace_if(index, doc_id, {"type": "usage"}, first)
    store.index.delete_if(index, doc_id, second)
    with pytest.raises(VersionConflictError):
        store.index.replace_if(index, doc_id, {"type": "usage"}, second)
    assert store.index.get(index, doc_id) is None


def test_racing_threads_exactly_one_wins(store: Store, ds_name: str) -> None:
    v0 = store.statements.create(statement(ds_name, new_id(ds_name)))
    v1 = store.statements._move(v0, StatementState.RUNNING)
    targets = [StatementState.SUCCESS, StatementState.CANCELLED, StatementState.FAILED, StatementState.TIMEOUT] * 2
    barrier = threading.Barrier(len(targets))
    outcomes: list[tuple[StatementState, str]] = []
    lock = threading.Lock()

    def race(target: StatementState) -> None:
        barrier.wait(timeout=10)
        try:
            store.statements._move(v1, target, error=f"by {target.value}")
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
            store.sessions._move(v0, SessionState.RUNNING, last_update_time=i)
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
        store.statements._move(waiting, StatementState.SUCCESS)  # waiting -> success skips running
    after = store.statements.get(ds_name, waiting.doc.statement_id)
    assert after is not None and after.seq_no == waiting.seq_no and after.doc.state == StatementState.WAITING

    done = store.statements._move(store.statements._move(waiting, StatementState.RUNNING), StatementState.CANCELLED)
    for target in StatementState:
        with pytest.raises(InvalidTransitionError):
            store.statements._move(done, target, error="late")
    after = store.statements.get(ds_name, waiting.doc.statement_id)
    assert after is not None
    assert after.seq_no == done.seq_no
    assert after.doc.state == StatementState.CANCELLED and after.doc.error == ""


def test_a_dead_session_takes_no_heartbeat(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    dead = store.sessions.end(v0, SessionState.DEAD, error="gone")
    assert dead is not None
    with pytest.raises(InvalidTransitionError):
        store.sessions.beat(dead, at=now_millis())
    with pytest.raises(InvalidTransitionError):
        store.sessions._move(dead, SessionState.RUNNING)
    after = store.sessions.get(ds_name, v0.doc.session_id)
    assert after is not None and after.seq_no == dead.seq_no and after.doc.state == SessionState.DEAD


def test_a_heartbeat_is_a_conditional_write_of_liveness_fields_only(store: Store, ds_name: str) -> None:
    created = store.sessions.create(session(ds_name))
    v0 = store.sessions.claim(created, created.doc.job_id)
    assert v0 is not None
    beat = store.sessions.beat(v0, at=5, heartbeat_interval_millis=2_000)
    assert beat is not None
    found = store.sessions.get(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.last_update_time == 5 and found.doc.state == SessionState.RUNNING
    assert found.seq_no == beat.seq_no
    with pytest.raises(VersionConflictError):  # a stale version, as any conditional write
        store.sessions._move(v0, SessionState.RUNNING, last_update_time=6)
    again = store.sessions.get(ds_name, v0.doc.session_id)
    assert again is not None and again.doc.state == SessionState.RUNNING and again.seq_no == beat.seq_no


def test_a_misspelt_field_is_refused_before_any_write(store: Store, ds_name: str) -> None:
    """A keyword that is no field of the document is a programming error: nothing is written
    (it would otherwise be stored under the misspelt name and the real field left as it was)."""
    st = store.statements.create(statement(ds_name, new_id(ds_name)))
    with pytest.raises(ValueError, match="eror") as err:
        store.statements._move(st, StatementState.FAILED, eror="boom")
    assert not isinstance(err.value, AsyncQueryError)  # not a client error: no handler may turn it into a 4xx
    after = store.index.get(request_index(ds_name), st.doc.statement_id)
    assert after is not None
    assert after.version.seq_no == st.seq_no and after.source == st.doc.to_source()

    se = store.sessions.create(session(ds_name))
    with pytest.raises(ValueError, match="lastUpdateTime"):
        store.sessions.beat(se, lastUpdateTime=1)  # the stored alias is not the field's name either
    with pytest.raises(ValueError, match="hearbeat_interval_millis"):
        store.sessions.claim(se, "job-a", error="", hearbeat_interval_millis=1)
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
    store.statements.start(running)
    store.statements.create(statement(ds_name, sid, submit_time=now - 2 * 3600 * 1000))
    refresh(store, ds_name)

    found = store.statements.find_waiting(ds_name, sid)
    assert [v.doc.statement_id for v in found] == [first.statement_id, second.statement_id, third.statement_id]
    # the versions returned are usable for conditional writes
    assert store.statements.start(found[0]) is not None
    assert len(store.statements.find_waiting(ds_name, sid, size=2)) == 2


def test_find_waiting_statements_on_a_missing_index(store: Store, ds_name: str) -> None:
    assert store.statements.find_waiting(ds_name, new_id(ds_name)) == []


def test_find_unfinished_statements_and_sessions(store: Store, ds_name: str) -> None:
    s = store.sessions.create(session(ds_name))
    store.sessions.claim(s, "job-a")
    dead = store.sessions.create(session(ds_name))
    store.sessions.end(dead, SessionState.DEAD)
    sid = s.doc.session_id
    waiting = store.statements.create(statement(ds_name, sid))
    running = store.statements.start(store.statements.create(statement(ds_name, sid)))
    assert running is not None
    done = store.statements.start(store.statements.create(statement(ds_name, sid)))
    assert done is not None and store.statements.settle(done, StatementState.SUCCESS).applied
    refresh(store, ds_name)
    unfinished = {v.doc.statement_id for v in store.statements.find_unfinished(ds_name, sid)}
    assert unfinished == {waiting.doc.statement_id, running.doc.statement_id}
    assert [v.doc.session_id for v in store.sessions.find(ds_name, [SessionState.RUNNING])] == [sid]
    assert {v.doc.session_id for v in store.sessions.find(None, list(SessionState))} == {sid, dead.doc.session_id}
    streaming = store.sessions.create(session(ds_name, session_type=SessionType.STREAMING))
    refresh(store, ds_name)
    found = store.sessions.find(None, [SessionState.NOT_STARTED], session_type=SessionType.STREAMING)
    assert [v.doc.session_id for v in found] == [streaming.doc.session_id]


@pytest.mark.bare_cluster
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
    bound.statements.start(waiting)
    session_now = bound.sessions.get(ds_name, se.doc.session_id)
    assert session_now is not None
    bound.sessions.claim(session_now, "j1")

    moved = bound.statements.get(ds_name, st.doc.statement_id)
    assert moved is not None and moved.doc.state == StatementState.RUNNING
    running = bound.sessions.get(ds_name, se.doc.session_id)
    assert running is not None and running.doc.state == SessionState.RUNNING and running.doc.job_id == "j1"
    # nothing in the index the datasource name gives
    assert store.sessions.get(ds_name, se.doc.session_id) is None
    assert store.statements.get(ds_name, st.doc.statement_id) is None
    assert not store.admin.index_exists(request_index(ds_name))


# -- re-reading after a conflict -------------------------------------------------------------------------------


def test_update_with_retry_rereads_after_a_conflict(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    store.sessions._move(v0, SessionState.RUNNING, last_update_time=1)  # someone else moves it first
    seen: list[int] = []
    reads = 0

    def reread() -> Versioned[SessionDoc] | None:
        nonlocal reads
        reads += 1
        return store.sessions.get(ds_name, v0.doc.session_id)

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        seen.append(current.seq_no)
        ids = [*current.doc.pending_statement_ids, "q1"]
        return store.sessions._move(current, current.doc.state, pending_statement_ids=ids)

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
        store.statements._move(v0, StatementState.CANCELLED)
    reread = lambda: store.statements.get(ds_name, v0.doc.statement_id)  # noqa: E731
    change = lambda current: store.statements._move(current, StatementState.CANCELLED)  # noqa: E731
    assert retry_on_conflict(reread, change, first=v0) is None


def test_update_with_retry_is_bounded(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    store.sessions.beat(v0, at=5)
    calls = 0

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        nonlocal calls
        calls += 1
        return store.sessions._move(current, current.doc.state, last_update_time=6)

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
    same = store.sessions._move(v0, v0.doc.state, error="")
    assert (same.seq_no, same.primary_term) == (v0.seq_no, v0.primary_term)
    moved = store.sessions._move(same, same.doc.state, error="changed")
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
    running = store.statements.start(store.statements.create(statement(ds_name, new_id(ds_name))))
    assert running is not None
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
    running = store.statements.start(waiting)
    assert running is not None
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
    running = store.sessions.claim(v0, "job-a")
    assert running is not None
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
    assert store.sessions.append_pending(found, ["q5", "q6"], keep=4) is not None  # several at once, in order
    found = store.sessions.get(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.pending_statement_ids == ["q3", "q4", "q5", "q6"]
    store.sessions.end(found, SessionState.DEAD)
    assert store.sessions.append_pending(found, "late", keep=3) is None


def test_only_a_vacuum_removes_an_index_state(store: Store, ds_name: str) -> None:
    doc = FlintIndexStateDoc(latest_id="aWR4", state=FlintIndexState.DELETING, data_source_name=ds_name)
    deleting = store.index_states.create(doc)
    with pytest.raises(InvalidTransitionError):
        store.index_states.delete(deleting)
    deleted = store.index_states.commit(deleting, INDEX_OPERATIONS["drop"])
    assert deleted is not None
    vacuuming = store.index_states.begin(deleted, INDEX_OPERATIONS["vacuum"])
    with pytest.raises(VersionConflictError):
        store.index_states.delete(Versioned(vacuuming.doc, deleted.seq_no, deleted.primary_term))  # stale
    store.index_states.delete(vacuuming)
    assert store.index_states.get(ds_name, "aWR4") is None


def test_claim_takes_a_session_for_its_job_only(store: Store, ds_name: str) -> None:
    """The ownership rules: one live job per session."""
    v0 = store.sessions.create(session(ds_name, exclude_job_ids=["job-x"]))
    with pytest.raises(SessionLostError, match="job job-x is excluded"):
        store.sessions.claim(v0, "job-x")
    with pytest.raises(SessionLostError, match="job job-y is excluded"):
        store.sessions.claim(v0, "job-y", excluded=["job-y"])  # the job's own list
    claimed = store.sessions.claim(v0, "job-a", application_id="app", heartbeat_interval_millis=5_000)
    assert claimed is not None
    doc = claimed.doc
    assert (doc.state, doc.job_id, doc.application_id, doc.heartbeat_interval_millis) == (
        SessionState.RUNNING,
        "job-a",
        "app",
        5_000,
    )
    assert doc.job_start_time == doc.last_update_time > 0
    again = store.sessions.claim(v0, "job-a")  # from a stale version: re-read, still its own
    assert again is not None and again.doc.state == SessionState.RUNNING
    with pytest.raises(SessionLostError, match="is owned by job job-a"):
        store.sessions.claim(again, "job-b")
    ended = store.sessions.end(again, SessionState.DEAD)
    assert ended is not None
    with pytest.raises(SessionLostError, match="is dead"):
        store.sessions.claim(ended, "job-a")
    store.index.delete(request_index(ds_name), v0.doc.session_id)
    assert store.sessions.claim(v0, "job-a") is None  # gone


def test_beat_keeps_the_state_and_stops_once_the_session_is_not_the_jobs(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name))
    claimed = store.sessions.claim(v0, "job-a")
    assert claimed is not None
    beaten = store.sessions.beat(v0, at=42, heartbeat_interval_millis=1_000)  # stale: re-read
    assert beaten is not None and beaten.doc.state == SessionState.RUNNING
    assert (beaten.doc.last_update_time, beaten.doc.heartbeat_interval_millis) == (42, 1_000)
    assert beaten.doc.job_id == "job-a"
    fresh = store.sessions.beat(beaten, job_id="job-a")
    assert fresh is not None and fresh.doc.last_update_time > 42
    with pytest.raises(SessionLostError, match="is owned by job job-a"):
        store.sessions.beat(fresh, job_id="job-b")
    with pytest.raises(SessionLostError, match="excluded"):
        store.sessions.beat(fresh, job_id="job-a", excluded=["job-a"])
    after = store.sessions.get(ds_name, v0.doc.session_id)
    assert after is not None and after.seq_no == fresh.seq_no


def test_start_runs_a_session_of_the_plugins_own_work_until_it_ends(store: Store, ds_name: str) -> None:
    v0 = store.sessions.create(session(ds_name, session_type=SessionType.LOCAL))
    started = store.sessions.start(v0)
    assert started is not None and started.doc.state == SessionState.RUNNING and started.doc.last_update_time > 0
    assert started.doc.job_id == ""
    ended = store.sessions.end(started, SessionState.DEAD)
    assert ended is not None
    assert store.sessions.start(v0) is None  # ended meanwhile: left as it is
    final = store.sessions.get(ds_name, v0.doc.session_id)
    assert final is not None and final.doc.state == SessionState.DEAD


def index_state(ds: str, state: FlintIndexState, **fields: Any) -> FlintIndexStateDoc:
    return FlintIndexStateDoc(
        latest_id=new_id(ds), state=state, data_source_name=ds, index_name="flint_idx", **fields
    )


def test_an_index_operation_begins_then_commits_or_rolls_back(store: Store, ds_name: str) -> None:
    create, refresh_op = INDEX_OPERATIONS["create"], INDEX_OPERATIONS["refresh"]
    latest = new_id(ds_name)
    with pytest.raises(ValueError, match="latest id and index name"):
        store.index_states.begin(None, create)
    with pytest.raises(InvalidTransitionError, match="cannot refresh flint_idx: it is empty"):
        store.index_states.begin(None, refresh_op, datasource=ds_name, latest_id=latest, index_name="flint_idx")
    creating = store.index_states.begin(
        None, create, datasource=ds_name, latest_id=latest, index_name="flint_idx", job_id="j-1"
    )
    assert creating.doc.state == FlintIndexState.CREATING and creating.doc.index_name == "flint_idx"
    with pytest.raises(DocumentExistsError):  # a second operation on an index that had no document
        store.index_states.begin(None, create, datasource=ds_name, latest_id=latest, index_name="flint_idx")
    active = store.index_states.commit(creating, create)
    assert active is not None and active.doc.state == FlintIndexState.ACTIVE
    with pytest.raises(InvalidTransitionError, match="allowed from: deleted, empty"):
        store.index_states.begin(active, create)
    refreshing = store.index_states.begin(active, refresh_op)
    with pytest.raises(VersionConflictError):
        store.index_states.begin(active, refresh_op)  # stale: another operation began first
    back = store.index_states.roll_back(refreshing, refresh_op, FlintIndexState.ACTIVE, error="boom")
    assert back.doc.state == FlintIndexState.ACTIVE and back.doc.error == "boom"
    with pytest.raises(InvalidTransitionError):
        store.index_states.roll_back(back, refresh_op, FlintIndexState.DELETED)  # no start state of a refresh
    stored = store.index_states.get(ds_name, latest)
    assert stored is not None and stored.seq_no == back.seq_no and stored.doc.job_id == "j-1"


def committed(store: Store, current: Versioned[FlintIndexStateDoc], operation: str) -> Versioned[FlintIndexStateDoc]:
    done = store.index_states.commit(current, INDEX_OPERATIONS[operation])
    assert done is not None
    return done


def test_a_dead_stream_fails_only_a_refreshing_index_of_its_job(store: Store, ds_name: str) -> None:
    active = committed(store, store.index_states.create(index_state(ds_name, FlintIndexState.CREATING)), "create")
    assert store.index_states.fail_stream(active, "died") is None  # not refreshing
    theirs = store.index_states.create(index_state(ds_name, FlintIndexState.CREATING, job_id="other"))
    refreshing = committed(store, committed(store, theirs, "create"), "start auto refresh")
    assert store.index_states.fail_stream(refreshing, "died", job_id="mine") is None  # another job's
    failed = store.index_states.fail_stream(refreshing, "x" * 5_000, job_id="other")
    assert failed is not None and failed.doc.state == FlintIndexState.FAILED
    assert failed.doc.error == "x" * MAX_INDEX_ERROR
    with pytest.raises(VersionConflictError):
        store.index_states.fail_stream(refreshing, "again")  # stale: the caller decides


def test_an_error_is_recorded_with_the_state_kept(store: Store, ds_name: str) -> None:
    active = committed(store, store.index_states.create(index_state(ds_name, FlintIndexState.CREATING)), "create")
    noted = store.index_states.record_error(active, "auto refresh did not start")
    assert noted.doc.state == FlintIndexState.ACTIVE and noted.doc.error == "auto refresh did not start"
    assert noted.doc.last_update_time > 0 and noted.seq_no > active.seq_no


def test_a_stalled_operation_is_repaired_unless_it_moved_meanwhile(store: Store, ds_name: str) -> None:
    active = committed(store, store.index_states.create(index_state(ds_name, FlintIndexState.CREATING)), "create")
    refreshing = store.index_states.begin(active, INDEX_OPERATIONS["refresh"])
    assert store.index_states.repair_stalled(refreshing, "owner gone", streaming=True) is not None
    stored = store.index_states.get(ds_name, refreshing.doc.latest_id)
    assert stored is not None and stored.doc.state == FlintIndexState.FAILED and stored.doc.error == "owner gone"
    assert store.index_states.repair_stalled(refreshing, "too late") is None  # stale: left alone
    assert store.index_states.repair_stalled(stored, "stable") is None  # failed is no operation's middle


# -- the connector: documents -----------------------------------------------------------------------


def test_reads_by_id_one_or_several_in_the_order_asked(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    assert store.index.get(index, "a") is None  # no index yet
    assert store.index.get_many(index, ["a", "b"]) == [None, None]
    a = store.index.create(index, "a", {"type": "x", "n": 1})
    b = store.index.create(index, "b", {"type": "x", "n": 2})
    found = store.index.get_many(index, ["b", "missing", "a"])
    assert [f.doc_id if f else None for f in found] == ["b", None, "a"]
    assert found[0] is not None and found[0].source == {"type": "x", "n": 2} and found[0].version == b
    assert found[2] is not None and found[2].version == a
    one = store.index.get(index, "a")
    assert one is not None and one.source == {"type": "x", "n": 1} and one.version == a


def test_reads_on_the_event_loop_answer_as_the_blocking_ones(store: Store, ds_name: str) -> None:
    """The same answers, or :class:`ReadNotServed` where a connector cannot read that way (the
    cluster client without its lean reader): never another answer."""
    index = request_index(ds_name)
    store.index.create(index, "a", {"type": "x"})
    for ids in (["a"], ["a", "missing"], ["missing"]):
        try:
            on_loop = asyncio.run(store.index.get_many_async(index, ids))
        except ReadNotServed:
            assert isinstance(store.index, IndexClient) and store.index.lean_readers[1] is None
            continue
        assert on_loop == store.index.get_many(index, ids)
    try:
        assert asyncio.run(store.index.get_many_async(f"{index}-none", ["a"])) == [None]  # no such index
    except ReadNotServed:
        assert isinstance(store.index, IndexClient) and store.index.lean_readers[1] is None


def test_put_overwrites_and_delete_says_whether_there_was_something(store: Store, ds_name: str) -> None:
    index = f"query_execution_result_{ds_name}"
    first = store.index.put(index, "r", {"status": "FAILED"})
    second = store.index.put(index, "r", {"status": "SUCCESS"})
    assert second.seq_no > first.seq_no
    found = store.index.get(index, "r")
    assert found is not None and found.source == {"status": "SUCCESS"} and found.version == second
    assert store.index.delete(index, "r") and not store.index.delete(index, "r")
    assert store.index.get(index, "r") is None
    assert not store.index.delete(f"{index}-none", "r")  # no such index


def test_conditional_writes_apply_only_at_the_version_held(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    v0 = store.index.create(index, "d", {"type": "x", "a": 1, "b": 1})
    v1 = store.index.update_if(index, "d", {"b": 2}, v0)
    found = store.index.get(index, "d")
    assert found is not None and found.source == {"type": "x", "a": 1, "b": 2} and found.version == v1
    assert store.index.update_if(index, "d", {"b": 2}, v1) == v1  # nothing changes: same version
    with pytest.raises(VersionConflictError):
        store.index.update_if(index, "d", {"b": 3}, v0)
    with pytest.raises(VersionConflictError):
        store.index.delete_if(index, "d", v0)
    with pytest.raises(VersionConflictError):
        store.index.update_if(index, "missing", {"b": 3}, v0)
    store.index.delete_if(index, "d", v1)
    assert store.index.get(index, "d") is None
    with pytest.raises(VersionConflictError):
        store.index.delete_if(index, "d", v1)  # gone: no longer at that version either


def test_delete_by_query_deletes_what_a_search_finds(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    for i, state in enumerate(["waiting", "running", "waiting"]):
        store.index.create(index, f"d{i}", {"type": "statement", "state": state})
    assert store.index.delete_by_query(f"{index}-none", Query()) == 0  # no such index
    store.index.refresh(index)
    assert store.index.delete_by_query(index, Query((Term("state", "waiting"),))) == 2
    assert [f.doc_id for f in store.index.get_many(index, ["d0", "d1", "d2"]) if f] == ["d1"]
    store.index.refresh(index)
    assert [f.doc_id for f in store.index.search(index, Query())] == ["d1"]


def test_listeners_hear_of_every_write_and_call(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    written: list[str] = []
    calls: list[tuple[str, str, int]] = []
    store.index.write_listeners.append(written.append)
    store.index.call_listeners.append(lambda operation, outcome, retries: calls.append((operation, outcome, retries)))
    v0 = store.index.create(index, "d", {"type": "x"})
    v1 = store.index.update_if(index, "d", {"a": 1}, v0)
    with pytest.raises(VersionConflictError):
        store.index.update_if(index, "d", {"a": 2}, v0)  # tried: a cache of it must go all the same
    store.index.delete_if(index, "d", v1)
    store.index.delete(index, "d")
    assert written == ["d"] * 5
    assert ("create", "2xx", 0) in calls and ("update", "2xx", 0) in calls
    calls.clear()
    store.index.get(index, "d")
    store.index.search(index, Query())
    assert calls == [("get", "2xx", 0), ("search", "2xx", 0)]
    assert all(outcome in CALL_OUTCOMES for _, outcome, _ in calls)


def test_both_sides_share_their_call_listeners(store: Store, ds_name: str) -> None:
    """The documents and the index administration are one connection: a call listener added on
    either side hears the calls of both, under one operation name each."""
    index = flint_index(ds_name, "listened")
    calls: list[str] = []
    store.admin.call_listeners.append(lambda operation, outcome, retries: calls.append(f"{operation} {outcome}"))
    assert store.index.call_listeners == store.admin.call_listeners
    assert store.admin.create_index(index, {"mappings": {"properties": {"n": {"type": "long"}}}})
    assert store.admin.index_exists(index)
    store.index.get(index, "nothing")
    assert calls == ["create_index 2xx", "exists 2xx", "get 2xx"]


def test_a_connector_answers_a_ping_and_closes(store: Store, ds_name: str, opensearch_config: OpenSearchConfig) -> None:
    assert store.index.ping() and store.admin.ping()
    other = IndexClient(opensearch_config) if isinstance(store.index, IndexClient) else MemoryIndex()
    assert other.ping() and other.admin.ping()
    assert not other.admin.index_exists(flint_index(ds_name, "pinged"))
    other.close()
    admin = IndexClient(opensearch_config).admin if isinstance(store.index, IndexClient) else MemoryIndex().admin
    assert admin.ping() and admin.mappings("flint_nothing_here*") == {}  # an admin alone, as a data source has
    admin.close()


# -- the connector: index administration -----------------------------------------------------------


def flint_index(ds: str, name: str) -> str:
    return f"flint_{ds}_contract_{name}"


def test_an_index_is_created_once_and_deleted_once(store: Store, ds_name: str) -> None:
    admin, index = store.admin, flint_index(ds_name, "a")
    assert not admin.index_exists(index)
    assert admin.create_index(index, {"mappings": {"properties": {"n": {"type": "long"}}}})
    assert admin.index_exists(index)
    assert not admin.create_index(index, {})  # it exists: left as it is
    assert admin.mappings(index)[index] == {"properties": {"n": {"type": "long"}}}
    assert admin.delete_index(index)
    assert not admin.index_exists(index) and not admin.delete_index(index)
    assert admin.mappings(index) == {}


def test_mappings_keep_their_meta_which_is_replaced_whole(store: Store, ds_name: str) -> None:
    admin = store.admin
    first, second = flint_index(ds_name, "m1"), flint_index(ds_name, "m2")
    mappings = {
        "dynamic": False,
        "_meta": {"kind": "covering", "options": {"auto_refresh": "false"}},
        "properties": {"file_path": {"type": "keyword"}, "o": {"type": "object", "properties": {"n": {"type": "long"}}}},
    }
    assert admin.create_index(first, {"settings": {"index": {"number_of_shards": 1}}, "mappings": mappings})
    assert admin.create_index(second, {"mappings": {"_meta": {"kind": "mv"}}})
    kept = {
        "dynamic": "false",  # as a cluster answers it
        "_meta": {"kind": "covering", "options": {"auto_refresh": "false"}},
        "properties": {"file_path": {"type": "keyword"}, "o": {"properties": {"n": {"type": "long"}}}},
    }
    assert admin.mappings(first) == {first: kept}
    assert admin.mappings(flint_index(ds_name, "m*")) == {first: kept, second: {"_meta": {"kind": "mv"}}}
    assert admin.mappings(flint_index(ds_name, "none*")) == {} and admin.mappings(flint_index(ds_name, "x")) == {}
    admin.put_mapping_meta(first, {"kind": "covering", "latestId": "abc"})
    assert admin.mappings(first)[first] == {**kept, "_meta": {"kind": "covering", "latestId": "abc"}}
    with pytest.raises(IndexOperationError, match="index_not_found"):
        admin.put_mapping_meta(flint_index(ds_name, "x"), {"kind": "mv"})


def test_bulk_writes_are_scanned_back_and_deleted_all_at_once(store: Store, ds_name: str) -> None:
    admin, index = store.admin, flint_index(ds_name, "b")
    assert admin.create_index(index, {"mappings": {"properties": {"n": {"type": "long"}}}})
    docs: list[tuple[str | None, dict[str, Any]]] = [("1", {"n": 1}), (None, {"n": 2}), ("1", {"n": 3})]
    assert admin.bulk_index(index, docs) == 3  # the same id twice: the second overwrites the first
    store.index.refresh(index)  # a scan, like a search, sees the index as of its last refresh
    scanned = dict(admin.scan(index, batch=1))  # one document per page: every page is read
    assert sorted(scanned.values(), key=lambda source: source["n"]) == [{"n": 2}, {"n": 3}]
    assert "1" in scanned and scanned["1"] == {"n": 3}
    assert admin.bulk_index(index, [("fresh", {"n": 4})]) == 1  # not refreshed: deleted all the same
    assert admin.delete_all(index) == 3
    assert list(admin.scan(index)) == []
    assert admin.mappings(index)[index] == {"properties": {"n": {"type": "long"}}}  # the index stays
    assert admin.bulk_index(flint_index(ds_name, "new"), [("k", {"n": 1})]) == 1  # created by the write
    assert admin.index_exists(flint_index(ds_name, "new"))
    missing = flint_index(ds_name, "none")
    with pytest.raises(IndexOperationError, match="index_not_found"):
        admin.delete_all(missing)
    with pytest.raises(IndexOperationError, match="index_not_found"):
        list(admin.scan(missing))


def test_a_write_maps_the_fields_its_index_lacks_unless_told_not_to(store: Store, ds_name: str) -> None:
    admin, index = store.admin, flint_index(ds_name, "dyn")
    source = {"s": "text", "d": "2024-01-02T03:04:05Z", "i": 3, "f": 1.5, "b": True, "o": {"x": 1}, "no": None, "e": []}
    admin.bulk_index(index, [("1", source)])
    text = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    assert admin.mappings(index)[index] == {
        "properties": {
            "s": text,
            "d": {"type": "date"},
            "i": {"type": "long"},
            "f": {"type": "float"},
            "b": {"type": "boolean"},
            "o": {"properties": {"x": {"type": "long"}}},
        }
    }
    admin.bulk_index(index, [("2", {"o": {"y": [{"z": "a"}]}})])  # a new field of a mapped object
    assert admin.mappings(index)[index]["properties"]["o"] == {
        "properties": {"x": {"type": "long"}, "y": {"properties": {"z": text}}}
    }

    closed, strict = flint_index(ds_name, "closed"), flint_index(ds_name, "strict")
    admin.create_index(closed, {"mappings": {"dynamic": False, "properties": {"a": {"type": "keyword"}}}})
    admin.bulk_index(closed, [("1", {"a": "x", "extra": 5})])  # kept, not mapped
    assert admin.mappings(closed)[closed] == {"dynamic": "false", "properties": {"a": {"type": "keyword"}}}
    admin.create_index(strict, {"mappings": {"dynamic": "strict", "properties": {"a": {"type": "keyword"}}}})
    with pytest.raises(IndexOperationError, match="strict_dynamic_mapping_exception"):
        admin.bulk_index(strict, [("1", {"a": "x"}), ("2", {"a": "y", "extra": 5})])
    store.index.refresh(strict)
    assert [doc_id for doc_id, _ in admin.scan(strict)] == ["1"]  # the other documents are written


def test_what_a_cluster_refuses_to_create(store: Store, ds_name: str) -> None:
    admin = store.admin
    for name in ("Upper", "_underscore", "a b", "a*", "a:b", "."):
        with pytest.raises(InvalidRequestError, match="invalid_index_name_exception"):
            admin.create_index(name, {})
    with pytest.raises(IndexOperationError, match="invalid_index_name_exception"):
        admin.bulk_index("Upper", [("1", {"a": 1})])
    index = flint_index(ds_name, "bad")
    with pytest.raises(InvalidRequestError, match="No handler for type \\[nosuchtype\\]"):
        admin.create_index(index, {"mappings": {"properties": {"a": {"type": "nosuchtype"}}}})
    assert not admin.index_exists(index)


def test_a_product_index_made_by_a_document_write_has_the_products_mappings(store: Store, ds_name: str) -> None:
    requests, results = request_index(ds_name), f"query_execution_result_{ds_name}"
    store.index.create(requests, "d", {"type": "statement", "state": "waiting", "unmapped": 1})
    store.index.put(results, "r", {"status": "SUCCESS"})
    mapped = store.admin.mappings(requests)[requests]
    assert mapped["dynamic"] == "false" and "unmapped" not in mapped["properties"]
    assert mapped["properties"]["state"] == {"type": "keyword"}
    assert mapped["properties"]["submitTime"]["type"] == "date"
    assert store.admin.mappings(results)[results]["properties"]["result"] == {"type": "object", "enabled": False}


# -- schedules of scheduled refresh ------------------------------------------------------------------


def schedule_terms(ds: str, name: str = "by_a", interval: str = "1 minute") -> ScheduleTerms:
    index = f"flint_{ds}_default_t_{name}_index"
    return ScheduleTerms(ds, index, interval, 60_000, "ana", ("analyst",), f"REFRESH INDEX {name} ON t")


def test_a_schedule_is_armed_enabled_claimed_once_launched_and_settled(store: Store, ds_name: str) -> None:
    terms = schedule_terms(ds_name)
    armed = store.schedules.arm(terms, now=1_000)
    assert armed is not None and armed.doc.state == ScheduleState.PENDING and armed.doc.owner_roles == ["analyst"]
    assert store.schedules.claim(armed, "p1", 2_000) is None  # a pending schedule runs nothing
    enabled = store.schedules.activate(armed, terms.scheduled_query, "1 minute", 60_000, next_run=5_000, now=2_000)
    assert enabled is not None and (enabled.doc.state, enabled.doc.next_run_time) == (ScheduleState.ENABLED, 5_000)
    assert store.schedules.arm(terms) is None  # an enabled schedule is not armed again
    # Of two processes claiming the tick at the version they read, one wins.
    claims = [store.schedules.claim(enabled, f"p{n}", 65_000, source_digest="d1", now=5_001) for n in range(2)]
    assert [c is not None for c in claims] == [True, False]
    claimed = claims[0]
    assert claimed is not None and claimed.doc.run.due_time == 5_000 and claimed.doc.next_run_time == 65_000
    launched = store.schedules.launched(claimed, "q1", "s1", "j1", now=5_002)
    assert launched is not None and (launched.doc.run.query_id, launched.doc.runs) == ("q1", 1)
    assert store.schedules.launched(launched, "q2", "s2", "j2") is None  # told once
    skipped = store.schedules.pass_turn(launched, "skipped", "", 125_000, now=65_001)
    assert skipped is not None and (skipped.doc.state, skipped.doc.skips) == (ScheduleState.RUNNING, 1)
    failed = store.schedules.settle(skipped, "failed", "boom", 125_000, now=70_000)
    assert failed is not None and (failed.doc.state, failed.doc.failures, failed.doc.run.query_id) == (
        ScheduleState.ENABLED,
        1,
        "",
    )
    again = store.schedules.claim(failed, "p1", 185_000, source_digest="d2", now=125_000)
    assert again is not None
    done = store.schedules.settle(again, "success", "", 185_000, now=126_000)
    assert done is not None and (done.doc.failures, done.doc.refreshed_digest, done.doc.last_outcome) == (0, "d2", "success")
    found = store.schedules.of(terms.index_name)
    assert found is not None and found.doc == done.doc and (found.seq_no, found.primary_term) == (done.seq_no, done.primary_term)


def test_statements_win_over_the_scheduler_s_bookkeeping(store: Store, ds_name: str) -> None:
    terms = schedule_terms(ds_name)
    enabled = store.schedules.enable(terms, next_run=5_000, now=1_000)
    claimed = store.schedules.claim(enabled, "p1", 65_000, now=5_000)
    assert claimed is not None
    interval = store.schedules.change_interval(terms.index_name, "5 minutes", 300_000, 305_000, now=6_000)
    assert interval is not None and (interval.doc.state, interval.doc.interval) == (ScheduleState.RUNNING, "5 minutes")
    assert store.schedules.launched(claimed, "q", "s", "j") is None  # the claim's version moved: re-read
    disabled = store.schedules.disable(terms.index_name, "altered to manual refresh")
    assert disabled is not None and disabled.doc.state == ScheduleState.DISABLED
    assert store.schedules.disable(terms.index_name, "again") is not None  # idempotent
    assert store.schedules.settle(interval, "success", "", 1) is None
    rearmed = store.schedules.arm(terms)
    assert rearmed is not None and rearmed.doc.state == ScheduleState.PENDING and rearmed.doc.last_error == ""
    enabled = store.schedules.enable(terms, next_run=9_000)
    assert (enabled.doc.state, enabled.doc.failures, enabled.doc.next_run_time) == (ScheduleState.ENABLED, 0, 9_000)
    assert store.schedules.remove(terms.index_name) and not store.schedules.remove(terms.index_name)
    assert store.schedules.of(terms.index_name) is None
    assert store.schedules.disable(terms.index_name, "gone") is None


def test_active_schedules_are_found_after_a_refresh_soonest_first(store: Store, ds_name: str) -> None:
    names = ["c", "a", "b", "off"]
    for n, name in enumerate(names):
        store.schedules.enable(schedule_terms(ds_name, name), next_run=10_000 - n * 1_000)
    off = schedule_terms(ds_name, "off").index_name
    store.schedules.disable(off, "manual")
    store.index.refresh(SCHEDULER_INDEX)
    mine = [s.doc.index_name for s in store.schedules.active() if s.doc.data_source_name == ds_name]
    assert mine == [schedule_terms(ds_name, name).index_name for name in ("b", "a", "c")]
    read = store.schedules.of_many([off, schedule_terms(ds_name, "a").index_name, "flint_none"])
    assert set(read) == {off, schedule_terms(ds_name, "a").index_name}
    assert read[off].state == ScheduleState.DISABLED
    mapped = store.admin.mappings(SCHEDULER_INDEX)[SCHEDULER_INDEX]
    assert mapped["dynamic"] == "false" and mapped["properties"]["state"] == {"type": "keyword"}
    assert mapped["properties"]["nextRunTime"]["type"] == "date" and "run" not in mapped["properties"]


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


def test_a_search_past_the_result_window_gets_every_hit_in_order(store: Store) -> None:
    """More hits than a cluster gives one search (10,000) are read in pages, none twice or missed."""
    index = "flint_local_default_many_skipping_index"
    store.admin.create_index(index, {"mappings": {"properties": {"n": {"type": "long"}, "k": {"type": "keyword"}}}})
    count = 10_050
    store.admin.bulk_index(index, [(f"d{i:05d}", {"n": i % 7, "k": "x"}) for i in range(count)])
    store.index.refresh(index)
    found = store.index.search(index, Query((Term("k", "x"),), sort=(("n", "desc"),), size=20_000))
    assert len(found) == count and len({f.doc_id for f in found}) == count
    assert [f.source["n"] for f in found] == sorted((i % 7 for i in range(count)), reverse=True)
    assert len(store.index.search(index, Query(size=10_001))) == 10_001


def test_a_scan_reads_every_document_or_only_the_fields_asked(store: Store) -> None:
    index = "flint_local_default_scanned_skipping_index"
    store.admin.create_index(index, {"mappings": {"properties": {"file_path": {"type": "keyword"}}}})
    store.admin.bulk_index(index, [(f"d{i}", {"file_path": f"f{i}", "n": i, "big": "x" * 100}) for i in range(25)])
    store.index.refresh(index)
    whole = dict(store.admin.scan(index, batch=10))
    narrow = dict(store.admin.scan(index, batch=10, fields=["file_path", "n"]))
    assert len(whole) == 25 and whole["d3"] == {"file_path": "f3", "n": 3, "big": "x" * 100}
    assert narrow == {f"d{i}": {"file_path": f"f{i}", "n": i} for i in range(25)}
    chosen = dict(store.admin.scan(index, fields=["n"], filters=(Range("n", gte=3, lt=9), Terms("file_path", ("f4", "f8", "f20")))))
    assert chosen == {"d4": {"n": 4}, "d8": {"n": 8}}


def test_a_scan_keeps_nested_fields_by_their_dotted_names(store: Store) -> None:
    index = "query_execution_result_scanned"
    docs: list[tuple[str | None, dict[str, Any]]] = [
        ("q1", {"queryId": "q1", "lossless": {"total": 3, "datarows": "[[1],[2],[3]]"}}),
        ("q2", {"queryId": "q2", "lossless": {"total": 10, "datarows": "[]"}, "chunks": {"rows": 25, "chunk_rows": [15]}}),
        ("q3", {"queryId": "q3"}),
    ]
    store.admin.bulk_index(index, docs)
    store.index.refresh(index)
    fields = ["queryId", "lossless.total", "chunks.rows"]
    narrow = dict(store.admin.scan(index, fields=fields, filters=(Terms("queryId", ("q1", "q2", "q3")),)))
    assert narrow == {
        "q1": {"queryId": "q1", "lossless": {"total": 3}},
        "q2": {"queryId": "q2", "lossless": {"total": 10}, "chunks": {"rows": 25}},
        "q3": {"queryId": "q3"},
    }


def test_the_twin_can_fail_on_purpose(ds_name: str) -> None:
    from query_core.errors import IndexUnavailableError

    twin = MemoryIndex()
    store = Store(twin)
    twin.fail_next(1)
    with pytest.raises(IndexUnavailableError):
        store.sessions.create(session(ds_name))
    assert store.sessions.create(session(ds_name)) is not None


def test_recent_statements_newest_first_by_submitter_and_result_summaries_without_rows(store: Store, ds_name: str) -> None:
    from query_core.models import LosslessResult, ResultChunks

    sid, now = new_id(ds_name), now_millis()
    mine = [store.statements.create(statement(ds_name, sid, submitted_by="alice", submit_time=now - 3000 + i)) for i in range(3)]
    store.statements.create(statement(ds_name, sid, submitted_by="bob", submit_time=now))
    refresh(store, ds_name)
    newest_first = [v.doc.query_id for v in reversed(mine)]
    assert [v.doc.query_id for v in store.statements.recent("alice", datasource=ds_name)] == newest_first
    assert [v.doc.submitted_by for v in store.statements.recent(None, datasource=ds_name)] == ["bob", "alice", "alice", "alice"]
    assert store.statements.recent("carol", datasource=ds_name) == []
    results = f"query_execution_result_{ds_name}"
    small, big = mine[0].doc.query_id, mine[1].doc.query_id
    rows = LosslessResult(schema=[], datarows="[[1],[2]]", total=2)
    store.results.put(results, ResultDoc(query_id=small, status="SUCCESS", query_run_time=12, lossless=rows))
    chunked = ResultChunks(rows=25, chunk_rows=[15])
    store.results.put(results, ResultDoc(query_id=big, status="SUCCESS", lossless=rows.model_copy(update={"total": 10}), chunks=chunked))
    store.index.refresh(results)
    found = store.results.summaries(results, [small, big, mine[2].doc.query_id])
    assert {query_id: summary.rows for query_id, summary in found.items()} == {small: 2, big: 25}
    assert found[small].run_ms == 12 and found[small].update_time > 0
    assert store.results.summaries(f"query_execution_result_{ds_name}_none", [small]) == {}


# -- what each user stores (docs/security.md, "What one user may store") ------------------------------


def test_a_user_s_usage_is_charged_in_conditional_writes_read_by_id_and_bounded(store: Store) -> None:
    from query_core.store.usage import UserStorageExceededError

    user = "user-" + new_id("usage")  # the deployment-wide index is shared by every test
    assert store.usage.held(user, 60) == 0
    assert store.usage.charge(user, 400, limit=1_000) == 400
    assert store.usage.charge(user, 500, limit=1_000) == 900
    with pytest.raises(UserStorageExceededError):
        store.usage.charge(user, 200, limit=1_000)
    assert store.usage.held(user, 60) == 900  # read by id: no refresh between the writes and this
    assert store.usage.charge(user, 5_000) == 5_900  # a result, counted whatever the bound
    start = threading.Barrier(8)

    def charge() -> None:
        start.wait()
        for _ in range(5):
            store.usage.charge(user, 10)

    threads = [threading.Thread(target=charge) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.usage.held(user, 60) == 5_900 + 8 * 5 * 10  # no charge lost to a race


# -- users' usage ----------------------------------------------------------------------------------


def test_usage_lives_in_its_own_index_and_an_earlier_version_s_document_is_carried_over(store: Store) -> None:
    """An earlier version kept usage documents in the deployment index: they still count, and the
    user's next charge carries the figure over to the usage index (docs/documents.md)."""
    user = f"u-{new_id('x')}"
    doc_id = usage_id(user)
    today = day_of(now_millis())
    store.index.create(DEPLOYMENT_INDEX, doc_id, {"type": "usage", "days": [{"day": today, "bytes": 100}]})
    assert store.usage.read(user).total() == 100
    assert store.usage.charge(user, 10, limit=1_000) == 110
    carried = store.index.get(USAGE_INDEX, doc_id)
    assert carried is not None and carried.source["days"] == [{"day": today, "bytes": 110}]
    assert UsageRepository(store.index).charge(user, 5) == 115  # another process reads it there


def test_the_usage_index_syncs_its_translog_each_second(opensearch_config: OpenSearchConfig) -> None:
    """The one index whose writes need no disk sync of their own; every other product index keeps
    OpenSearch's default, a sync before each write is acknowledged (docs/durability.md)."""
    store = Store.connect(opensearch_config)
    try:
        store.usage.charge(f"u-{new_id('x')}", 10)
        store.sessions.create(session("tl"))
        admin = IndexClient(opensearch_config)
        usage = admin.admin.index_definition(USAGE_INDEX)["settings"]["index"]
        requests = admin.admin.index_definition(request_index("tl"))["settings"]["index"]
        admin.close()
    finally:
        store.close()
    assert usage["translog"] == {"durability": "async", "sync_interval": "1s"}
    assert "translog" not in requests  # the default: request
