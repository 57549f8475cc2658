"""The index module against a real HTTP index server (osmem-server, a fresh clone per test)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from osmem_server import OsmemServer

import index_mappings
from query_core.config import OpenSearchConfig
from query_core.errors import (
    AsyncQueryError,
    DocumentExistsError,
    IndexUnavailableError,
    InvalidRequestError,
    InvalidTransitionError,
    VersionConflictError,
)
from query_core.ids import new_id, request_index
from query_core.models import ResultDoc, SessionDoc, StatementDoc, Versioned, now_millis
from query_core.states import SessionState, StatementState
from query_core.store import IndexStore
from tests.support import free_port


def statement(ds: str, session_id: str, **fields: Any) -> StatementDoc:
    sid = new_id(ds)
    return StatementDoc(
        statement_id=sid, query_id=sid, session_id=session_id, query="SELECT 1", data_source_name=ds, **fields
    )


def session(ds: str, **fields: Any) -> SessionDoc:
    return SessionDoc(session_id=new_id(ds), data_source_name=ds, **fields)


def refresh(store: IndexStore, ds: str) -> None:
    store.client.indices.refresh(index=request_index(ds))


# -- create-only and conditional writes ------------------------------------------------------------


def test_create_and_read_back(store: IndexStore, ds_name: str) -> None:
    doc = statement(ds_name, new_id(ds_name))
    created = store.create_statement(doc)
    found = store.get_statement(ds_name, doc.statement_id)
    assert found is not None
    assert found.doc == doc
    assert (found.seq_no, found.primary_term) == (created.seq_no, created.primary_term)


def test_create_only_conflict(store: IndexStore, ds_name: str) -> None:
    doc = statement(ds_name, new_id(ds_name))
    store.create_statement(doc)
    other = doc.model_copy(update={"query": "SELECT 2"})
    with pytest.raises(DocumentExistsError):
        store.create_statement(other)
    found = store.get_statement(ds_name, doc.statement_id)
    assert found is not None and found.doc.query == "SELECT 1"  # never overwritten


def test_create_only_conflict_for_sessions(store: IndexStore, ds_name: str) -> None:
    doc = session(ds_name)
    store.create_session(doc)
    with pytest.raises(DocumentExistsError):
        store.create_session(doc.model_copy(update={"job_id": "other"}))


def test_get_of_missing_documents_and_indexes(store: IndexStore, ds_name: str) -> None:
    assert store.get_statement(ds_name, new_id(ds_name)) is None  # index does not exist yet
    s = store.create_session(session(ds_name))
    assert store.get_statement(ds_name, new_id(ds_name)) is None
    # a session is not a statement, and the other way round
    assert store.get_statement(ds_name, s.doc.session_id) is None
    st = store.create_statement(statement(ds_name, s.doc.session_id))
    assert store.get_session(ds_name, st.doc.statement_id) is None


def test_two_updates_from_the_same_version_one_wins(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_statement(statement(ds_name, new_id(ds_name)))
    running = store.move_statement(v0, StatementState.RUNNING)
    with pytest.raises(VersionConflictError):
        store.move_statement(v0, StatementState.CANCELLED)
    found = store.get_statement(ds_name, v0.doc.statement_id)
    assert found is not None
    assert found.doc.state == StatementState.RUNNING
    assert found.seq_no == running.seq_no


def test_racing_threads_exactly_one_wins(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_statement(statement(ds_name, new_id(ds_name)))
    v1 = store.move_statement(v0, StatementState.RUNNING)
    targets = [StatementState.SUCCESS, StatementState.CANCELLED, StatementState.FAILED, StatementState.TIMEOUT] * 2
    barrier = threading.Barrier(len(targets))
    outcomes: list[tuple[StatementState, str]] = []
    lock = threading.Lock()

    def race(target: StatementState) -> None:
        barrier.wait(timeout=10)
        try:
            store.move_statement(v1, target, error=f"by {target.value}")
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
    final = store.get_statement(ds_name, v0.doc.statement_id)
    assert final is not None
    assert final.doc.state == winners[0]
    assert final.doc.error == f"by {winners[0].value}"


def test_racing_heartbeats_on_a_session(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_session(session(ds_name))
    barrier = threading.Barrier(6)
    wins: list[int] = []

    def beat(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            store.update_session(v0, SessionState.RUNNING, last_update_time=i)
            wins.append(i)
        except VersionConflictError:
            pass

    threads = [threading.Thread(target=beat, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(wins) == 1
    found = store.get_session(ds_name, v0.doc.session_id)
    assert found is not None and found.doc.last_update_time == wins[0]


# -- refused moves never reach the index -----------------------------------------------------------


def test_invalid_moves_are_refused_without_writing(store: IndexStore, ds_name: str) -> None:
    waiting = store.create_statement(statement(ds_name, new_id(ds_name)))
    with pytest.raises(InvalidTransitionError):
        store.move_statement(waiting, StatementState.SUCCESS)  # waiting -> success skips running
    after = store.get_statement(ds_name, waiting.doc.statement_id)
    assert after is not None and after.seq_no == waiting.seq_no and after.doc.state == StatementState.WAITING

    done = store.move_statement(store.move_statement(waiting, StatementState.RUNNING), StatementState.CANCELLED)
    for target in StatementState:
        with pytest.raises(InvalidTransitionError):
            store.move_statement(done, target, error="late")
    after = store.get_statement(ds_name, waiting.doc.statement_id)
    assert after is not None
    assert after.seq_no == done.seq_no
    assert after.doc.state == StatementState.CANCELLED and after.doc.error == ""


def test_a_dead_session_takes_no_heartbeat(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_session(session(ds_name))
    dead = store.update_session(v0, SessionState.DEAD, error="gone")
    with pytest.raises(InvalidTransitionError):
        store.update_session(dead, last_update_time=now_millis())
    with pytest.raises(InvalidTransitionError):
        store.update_session(dead, SessionState.RUNNING)
    after = store.get_session(ds_name, v0.doc.session_id)
    assert after is not None and after.seq_no == dead.seq_no and after.doc.state == SessionState.DEAD


def test_a_misspelt_field_is_refused_before_any_write(store: IndexStore, ds_name: str) -> None:
    """A keyword that is no field of the document is a programming error: nothing is written
    (it would otherwise be stored under the misspelt name and the real field left as it was)."""
    st = store.create_statement(statement(ds_name, new_id(ds_name)))
    with pytest.raises(ValueError, match="eror") as err:
        store.move_statement(st, StatementState.FAILED, eror="boom")
    assert not isinstance(err.value, AsyncQueryError)  # not a client error: no handler may turn it into a 4xx
    after = store.get(request_index(ds_name), st.doc.statement_id)
    assert after is not None
    assert after[1] == st.seq_no and after[0] == st.doc.to_source()

    se = store.create_session(session(ds_name))
    with pytest.raises(ValueError, match="lastUpdateTime"):
        store.update_session(se, lastUpdateTime=1)  # the stored alias is not the field's name either
    with pytest.raises(ValueError, match="hearbeat_interval_millis"):
        store.update_session(se, SessionState.RUNNING, error="", hearbeat_interval_millis=1)
    after = store.get(request_index(ds_name), se.doc.session_id)
    assert after is not None
    assert after[1] == se.seq_no and after[0] == se.doc.to_source()


def test_a_move_writes_only_what_changed(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_statement(statement(ds_name, new_id(ds_name)))
    # someone else's field, unknown to the model, survives a partial update
    store.client.update(
        index=request_index(ds_name),
        id=v0.doc.statement_id,
        body={"doc": {"foreignField": "kept"}},
        if_seq_no=v0.seq_no,
        if_primary_term=v0.primary_term,
        refresh=False,
    )
    current = store.get_statement(ds_name, v0.doc.statement_id)
    assert current is not None
    store.move_statement(current, StatementState.RUNNING)
    source, _, _ = store.get(request_index(ds_name), v0.doc.statement_id) or ({}, 0, 0)
    assert source["state"] == "running"
    assert source["foreignField"] == "kept"
    assert source["query"] == "SELECT 1"


# -- lazy index creation ---------------------------------------------------------------------------


def test_request_index_is_created_lazily_from_index_mappings(store: IndexStore, ds_name: str) -> None:
    index = request_index(ds_name)
    assert not store.client.indices.exists(index=index)
    store.create_statement(statement(ds_name, new_id(ds_name)))
    assert store.client.indices.exists(index=index)
    mapping = store.client.indices.get_mapping(index=index)[index]["mappings"]
    assert str(mapping["dynamic"]).lower() == "false"
    props = mapping["properties"]
    assert props["submitTime"]["type"] == "date"
    assert props["submitTime"]["format"] == "strict_date_time||epoch_millis"
    assert props["lastUpdateTime"]["type"] == "date"
    assert props["state"]["type"] == "keyword"
    assert props["query"]["type"] == "text"
    expected = index_mappings.load("request_index")["mappings"]["properties"]
    assert {k: v["type"] for k, v in props.items()} == {k: v["type"] for k, v in expected.items()}
    settings = store.client.indices.get_settings(index=index)[index]["settings"]["index"]
    assert str(settings["number_of_shards"]) == "1"
    assert settings["auto_expand_replicas"] == "0-2"


def test_result_index_is_created_lazily_from_index_mappings(store: IndexStore, ds_name: str) -> None:
    index = f"query_execution_result_{ds_name}"
    qid = new_id(ds_name)
    store.put_result(
        index,
        ResultDoc(
            query_id=qid, status="SUCCESS", result=["{'a':1}"], schema=["{'column_name':'a','data_type':'integer'}"]
        ),
    )
    mapping = store.client.indices.get_mapping(index=index)[index]["mappings"]
    props = mapping["properties"]
    assert props["result"].get("enabled") in (False, "false")
    assert props["schema"].get("enabled") in (False, "false")
    assert props["updateTime"]["type"] == "date"
    assert props["queryRunTime"]["type"] == "long"
    assert props["status"]["type"] == "keyword"
    found = store.get_result(index, qid)
    assert found is not None and found.result == ["{'a':1}"] and found.status == "SUCCESS"


def test_put_result_is_idempotent(store: IndexStore, ds_name: str) -> None:
    index = f"query_execution_result_{ds_name}"
    qid = new_id(ds_name)
    store.put_result(index, ResultDoc(query_id=qid, status="FAILED", error="first"))
    store.put_result(index, ResultDoc(query_id=qid, status="FAILED", error="retry"))
    found = store.get_result(index, qid)
    assert found is not None and found.error == "retry"


# -- searches ----------------------------------------------------------------------------------------


def test_find_waiting_statements_oldest_first(store: IndexStore, ds_name: str) -> None:
    sid = new_id(ds_name)
    now = now_millis()
    second = statement(ds_name, sid, submit_time=now - 2_000)
    first = statement(ds_name, sid, submit_time=now - 3_000)
    third = statement(ds_name, sid, submit_time=now - 1_000)
    for doc in (second, third, first):
        store.create_statement(doc)
    # not found: another session's, a running one, one submitted more than an hour ago
    store.create_statement(statement(ds_name, new_id(ds_name), submit_time=now - 5_000))
    running = store.create_statement(statement(ds_name, sid, submit_time=now - 4_000))
    store.move_statement(running, StatementState.RUNNING)
    store.create_statement(statement(ds_name, sid, submit_time=now - 2 * 3600 * 1000))
    refresh(store, ds_name)

    found = store.find_waiting_statements(ds_name, sid)
    assert [v.doc.statement_id for v in found] == [first.statement_id, second.statement_id, third.statement_id]
    # the versions returned are usable for conditional writes
    store.move_statement(found[0], StatementState.RUNNING)
    assert len(store.find_waiting_statements(ds_name, sid, size=2)) == 2


def test_documents_of_a_custom_request_index_stay_there(store: IndexStore, ds_name: str) -> None:
    """The job is told its request index (``spark.flint.job.requestIndex``); every call it makes
    names that index instead of deriving it from the datasource."""
    index = f".query_execution_request_custom_{ds_name}"
    se = store.create_session(session(ds_name), index=index)
    st = store.create_statement(statement(ds_name, se.doc.session_id), index=index)
    props = store.client.indices.get_mapping(index=index)[index]["mappings"]["properties"]
    assert props["submitTime"]["type"] == "date"  # created with the request index's mappings
    store.client.indices.refresh(index=index)

    [waiting] = store.find_waiting_statements(ds_name, se.doc.session_id, index=index)
    assert waiting.doc.statement_id == st.doc.statement_id
    store.move_statement(waiting, StatementState.RUNNING, index=index)
    session_now = store.get_session(ds_name, se.doc.session_id, index=index)
    assert session_now is not None
    store.update_session(session_now, SessionState.RUNNING, job_id="j1", index=index)

    moved = store.get_statement(ds_name, st.doc.statement_id, index=index)
    assert moved is not None and moved.doc.state == StatementState.RUNNING
    running = store.get_session(ds_name, se.doc.session_id, index=index)
    assert running is not None and running.doc.state == SessionState.RUNNING and running.doc.job_id == "j1"
    # nothing in the index the datasource name gives
    assert store.get_session(ds_name, se.doc.session_id) is None
    assert store.get_statement(ds_name, st.doc.statement_id) is None
    assert not store.client.indices.exists(index=request_index(ds_name))


def test_find_waiting_statements_on_a_missing_index(store: IndexStore, ds_name: str) -> None:
    assert store.find_waiting_statements(ds_name, new_id(ds_name)) == []


def test_find_unfinished_statements_and_sessions(store: IndexStore, ds_name: str) -> None:
    s = store.create_session(session(ds_name))
    store.update_session(s, SessionState.RUNNING)
    dead = store.create_session(session(ds_name))
    store.update_session(dead, SessionState.DEAD)
    sid = s.doc.session_id
    waiting = store.create_statement(statement(ds_name, sid))
    running = store.move_statement(store.create_statement(statement(ds_name, sid)), StatementState.RUNNING)
    store.move_statement(
        store.move_statement(store.create_statement(statement(ds_name, sid)), StatementState.RUNNING),
        StatementState.SUCCESS,
    )
    refresh(store, ds_name)
    unfinished = {v.doc.statement_id for v in store.find_unfinished_statements(ds_name, sid)}
    assert unfinished == {waiting.doc.statement_id, running.doc.statement_id}
    assert [v.doc.session_id for v in store.find_sessions(ds_name, [SessionState.RUNNING])] == [sid]
    assert {v.doc.session_id for v in store.find_sessions(None, list(SessionState))} == {sid, dead.doc.session_id}


# -- update_with_retry -------------------------------------------------------------------------------


def test_update_with_retry_rereads_after_a_conflict(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_session(session(ds_name))
    store.update_session(v0, SessionState.RUNNING, last_update_time=1)  # someone else moves it first
    seen: list[int] = []
    reads = 0

    def reread() -> Versioned[SessionDoc] | None:
        nonlocal reads
        reads += 1
        return store.get_session(ds_name, v0.doc.session_id)

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        seen.append(current.seq_no)
        return store.update_session(current, pending_statement_ids=[*current.doc.pending_statement_ids, "q1"])

    written = store.update_with_retry(reread, change, first=v0)
    assert written is not None
    assert reads == 1
    assert seen[0] == v0.seq_no and seen[1] > v0.seq_no
    final = store.get_session(ds_name, v0.doc.session_id)
    assert final is not None
    assert final.doc.pending_statement_ids == ["q1"]
    assert final.doc.state == SessionState.RUNNING and final.doc.last_update_time == 1  # the other write kept


def test_update_with_retry_gives_up_when_change_says_so(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_session(session(ds_name))
    assert store.update_with_retry(lambda: v0, lambda current: None) is None
    assert store.update_with_retry(lambda: None, lambda current: current) is None


def test_a_conditional_write_to_a_deleted_document_is_a_conflict(store: IndexStore, ds_name: str) -> None:
    """The version held is no longer the document's: the caller re-reads (and finds nothing)."""
    v0 = store.create_statement(statement(ds_name, new_id(ds_name)))
    store.client.delete(index=request_index(ds_name), id=v0.doc.statement_id, refresh=True)
    with pytest.raises(VersionConflictError):
        store.move_statement(v0, StatementState.CANCELLED)
    reread = lambda: store.get_statement(ds_name, v0.doc.statement_id)  # noqa: E731
    change = lambda current: store.move_statement(current, StatementState.CANCELLED)  # noqa: E731
    assert store.update_with_retry(reread, change, first=v0) is None


def test_update_with_retry_is_bounded(store: IndexStore, ds_name: str) -> None:
    v0 = store.create_session(session(ds_name))
    store.update_session(v0, last_update_time=5)
    calls = 0

    def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
        nonlocal calls
        calls += 1
        return store.update_session(current, last_update_time=6)

    with pytest.raises(VersionConflictError):
        store.update_with_retry(lambda: v0, change, attempts=4)  # the re-read is always stale
    assert calls == 4


# -- transient failures ------------------------------------------------------------------------------


class _RetryEvents(logging.Handler):
    """Sets an event when the index module logs that it is retrying a call."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retrying = threading.Event()
        self.count = 0
        #: The highest retry number logged for any one call.
        self.max_retry = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retry" in record.getMessage():
            self.count += 1
            if isinstance(record.args, tuple) and record.args and isinstance(record.args[-1], int):
                self.max_retry = max(self.max_retry, record.args[-1])
            self.retrying.set()


@pytest.fixture
def retry_events() -> Iterator[_RetryEvents]:
    handler = _RetryEvents()
    logger = logging.getLogger("query_core.store")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_retry_on_transient_failure_survives_a_server_restart(retry_events: _RetryEvents) -> None:
    port = free_port()
    addr = f"127.0.0.1:{port}"
    server = OsmemServer.start(addr=addr, japanese=False)
    restarted: OsmemServer | None = None
    store = IndexStore(OpenSearchConfig(url=f"http://{addr}", retry_seconds=30, retry_attempts=1000, request_timeout=5))
    try:
        assert store.ping()
        server.close()
        assert not store.ping()

        doc = statement("local", new_id("local"))
        thread, outcome = _in_thread(lambda: store.create_statement(doc))
        assert retry_events.retrying.wait(timeout=10), "the call did not retry"
        assert thread.is_alive() and not outcome

        restarted = OsmemServer.start(addr=addr, japanese=False)
        thread.join(timeout=20)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert isinstance(outcome["value"], Versioned)
        found = store.get_statement("local", doc.statement_id)
        assert found is not None and found.doc == doc
        # the index it created on the new server has our mappings
        index = request_index("local")
        props = store.client.indices.get_mapping(index=index)[index]["mappings"]["properties"]
        assert props["submitTime"]["type"] == "date"
    finally:
        store.close()
        server.close()
        if restarted is not None:
            restarted.close()


def test_retries_are_bounded_in_time(retry_events: _RetryEvents) -> None:
    port = free_port()  # nothing listens there
    store = IndexStore(
        OpenSearchConfig(url=f"http://127.0.0.1:{port}", retry_seconds=1.0, retry_attempts=1000, request_timeout=1)
    )
    try:
        started = time.monotonic()
        with pytest.raises(IndexUnavailableError) as err:
            store.get_statement("local", new_id("local"))
        elapsed = time.monotonic() - started
    finally:
        store.close()
    assert 0.9 <= elapsed < 6.0
    assert retry_events.count >= 2
    assert err.value.http_status == 503


def test_retries_are_bounded_in_attempts(retry_events: _RetryEvents) -> None:
    port = free_port()
    store = IndexStore(
        OpenSearchConfig(url=f"http://127.0.0.1:{port}", retry_seconds=60, retry_attempts=3, request_timeout=1)
    )
    try:
        started = time.monotonic()
        with pytest.raises(IndexUnavailableError):
            store.create_statement(statement("local", new_id("local")))
        elapsed = time.monotonic() - started
    finally:
        store.close()
    assert retry_events.max_retry == 2  # three attempts per call, two sleeps between them
    assert elapsed < 10


def test_client_errors_are_not_retried(store: IndexStore, ds_name: str, retry_events: _RetryEvents) -> None:
    store.create_session(session(ds_name))
    with pytest.raises(InvalidRequestError):
        store.search(request_index(ds_name), {"query": {"no_such_query": {}}})
    assert retry_events.count == 0
