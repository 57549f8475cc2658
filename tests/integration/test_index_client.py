"""The index client against a real HTTP index server: what the in-memory twin cannot show (lazy
creation of the product's indexes with their mappings, fields it does not know surviving a partial
update, bounded retries of transient failures, client errors not retried)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import index_mappings
from query_core.config import OpenSearchConfig
from query_core.errors import IndexUnavailableError, InvalidRequestError
from query_core.ids import new_id, request_index
from query_core.models import ResultDoc, SessionDoc, StatementDoc, Versioned
from query_core.store import Store
from tests.faults.procs import FixedPortIndex
from tests.support import driver, free_port


def statement(ds: str, session_id: str, **fields: Any) -> StatementDoc:
    sid = new_id(ds)
    return StatementDoc(
        statement_id=sid, query_id=sid, session_id=session_id, query="SELECT 1", data_source_name=ds, **fields
    )


def session(ds: str, **fields: Any) -> SessionDoc:
    return SessionDoc(session_id=new_id(ds), data_source_name=ds, **fields)


def test_a_move_writes_only_what_changed(store: Store, ds_name: str) -> None:
    v0 = store.statements.create(statement(ds_name, new_id(ds_name)))
    # someone else's field, unknown to the model, survives a partial update
    driver(store).update(
        index=request_index(ds_name),
        id=v0.doc.statement_id,
        body={"doc": {"foreignField": "kept"}},
        if_seq_no=v0.seq_no,
        if_primary_term=v0.primary_term,
        refresh=False,
    )
    current = store.statements.get(ds_name, v0.doc.statement_id)
    assert current is not None
    store.statements.start(current)
    found = store.index.get(request_index(ds_name), v0.doc.statement_id)
    assert found is not None
    source = found.source
    assert source["state"] == "running"
    assert source["foreignField"] == "kept"
    assert source["query"] == "SELECT 1"


# -- lazy index creation ---------------------------------------------------------------------------


@pytest.mark.bare_cluster
def test_request_index_is_created_lazily_from_index_mappings(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    assert not driver(store).indices.exists(index=index)
    store.statements.create(statement(ds_name, new_id(ds_name)))
    assert driver(store).indices.exists(index=index)
    mapping = driver(store).indices.get_mapping(index=index)[index]["mappings"]
    assert str(mapping["dynamic"]).lower() == "false"
    props = mapping["properties"]
    assert props["submitTime"]["type"] == "date"
    assert props["submitTime"]["format"] == "strict_date_time||epoch_millis"
    assert props["lastUpdateTime"]["type"] == "date"
    assert props["state"]["type"] == "keyword"
    assert props["query"]["type"] == "text"
    expected = index_mappings.load("request_index")["mappings"]["properties"]
    assert {k: v["type"] for k, v in props.items()} == {k: v["type"] for k, v in expected.items()}
    settings = driver(store).indices.get_settings(index=index)[index]["settings"]["index"]
    assert str(settings["number_of_shards"]) == "1"
    assert settings["auto_expand_replicas"] == "0-2"


def test_result_index_is_created_lazily_from_index_mappings(store: Store, ds_name: str) -> None:
    index = f"query_execution_result_{ds_name}"
    qid = new_id(ds_name)
    store.results.put(
        index,
        ResultDoc(
            query_id=qid, status="SUCCESS", result=["{'a':1}"], schema=["{'column_name':'a','data_type':'integer'}"]
        ),
    )
    mapping = driver(store).indices.get_mapping(index=index)[index]["mappings"]
    props = mapping["properties"]
    assert props["result"].get("enabled") in (False, "false")
    assert props["schema"].get("enabled") in (False, "false")
    assert props["updateTime"]["type"] == "date"
    assert props["queryRunTime"]["type"] == "long"
    assert props["status"]["type"] == "keyword"
    found = store.results.get(index, qid)
    assert found is not None and found.result == ["{'a':1}"] and found.status == "SUCCESS"


def test_a_custom_request_index_gets_the_request_index_mappings(store: Store, ds_name: str) -> None:
    index = f".query_execution_request_custom_{ds_name}"
    store.bound_to(index).sessions.create(session(ds_name))
    props = driver(store).indices.get_mapping(index=index)[index]["mappings"]["properties"]
    assert props["submitTime"]["type"] == "date"


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
    index = FixedPortIndex()
    store = Store.connect(index.config(retry_seconds=30, retry_attempts=1000, request_timeout=5))
    try:
        assert store.index.ping()
        index.stop()
        assert not store.index.ping()

        doc = statement("local", new_id("local"))
        thread, outcome = _in_thread(lambda: store.statements.create(doc))
        assert retry_events.retrying.wait(timeout=10), "the call did not retry"
        assert thread.is_alive() and not outcome

        index.start(empty=True)  # back, as a cluster restored empty
        thread.join(timeout=20)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert isinstance(outcome["value"], Versioned)
        found = store.statements.get("local", doc.statement_id)
        assert found is not None and found.doc == doc
        # the index it created on the empty cluster has our mappings
        index_name = request_index("local")
        props = driver(store).indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"]
        assert props["submitTime"]["type"] == "date"
    finally:
        store.close()
        index.close()


def test_a_connection_lost_on_either_side_makes_the_next_write_check_its_index_again(ds_name: str) -> None:
    """The documents and the index administration share one connection: a call of either that
    finds the cluster gone makes the next document write check its index again (a cluster that
    comes back restored empty lost it), so the index is made with our mappings, not the cluster's
    guesses."""
    index = FixedPortIndex()
    store = Store.connect(index.config(retry_seconds=0.5, retry_attempts=2, request_timeout=2))
    name = request_index(ds_name)
    try:
        for lose in (lambda: store.admin.index_exists("flint_gone"), lambda: store.index.get(name, "gone")):
            store.sessions.create(session(ds_name))  # the index is known from here on
            index.stop()
            with pytest.raises(IndexUnavailableError):
                lose()
            index.start(empty=True)
            store.statements.create(statement(ds_name, new_id(ds_name)))
            props = driver(store).indices.get_mapping(index=name)[name]["mappings"]["properties"]
            assert props["submitTime"]["type"] == "date"  # a guess would map the millis as a long
    finally:
        store.close()
        index.close()


def test_retries_are_bounded_in_time(retry_events: _RetryEvents) -> None:
    port = free_port()  # nothing listens there
    store = Store.connect(
        OpenSearchConfig(url=f"http://127.0.0.1:{port}", retry_seconds=1.0, retry_attempts=1000, request_timeout=1)
    )
    try:
        started = time.monotonic()
        with pytest.raises(IndexUnavailableError) as err:
            store.statements.get("local", new_id("local"))
        elapsed = time.monotonic() - started
    finally:
        store.close()
    assert 0.9 <= elapsed < 6.0
    assert retry_events.count >= 2
    assert err.value.http_status == 503


def test_retries_are_bounded_in_attempts(retry_events: _RetryEvents) -> None:
    port = free_port()
    store = Store.connect(
        OpenSearchConfig(url=f"http://127.0.0.1:{port}", retry_seconds=60, retry_attempts=3, request_timeout=1)
    )
    try:
        started = time.monotonic()
        with pytest.raises(IndexUnavailableError):
            store.statements.create(statement("local", new_id("local")))
        elapsed = time.monotonic() - started
    finally:
        store.close()
    assert retry_events.max_retry == 2  # three attempts per call, two sleeps between them
    assert elapsed < 10


def test_client_errors_are_not_retried(store: Store, ds_name: str, retry_events: _RetryEvents) -> None:
    store.sessions.create(session(ds_name))
    with pytest.raises(InvalidRequestError):
        driver_error = store.admin.create_index(request_index(ds_name) + "-Bad-Name", {})  # upper case is refused
        assert driver_error is None
    assert retry_events.count == 0


# -- statement text: stored, not full-text indexed (docs/documents.md) ------------------------------


def _stored_only(spec: dict[str, Any]) -> bool:
    return spec["type"] == "text" and str(spec.get("index")).lower() == "false"


def test_statement_text_and_errors_are_stored_not_indexed(store: Store, ds_name: str) -> None:
    index = request_index(ds_name)
    store.statements.create(statement(ds_name, new_id(ds_name)))
    props = driver(store).indices.get_mapping(index=index)[index]["mappings"]["properties"]
    assert _stored_only(props["query"]) and _stored_only(props["error"]), props
    results = f"query_execution_result_{ds_name}"
    store.results.put(results, ResultDoc(query_id=new_id(ds_name), query_text="SELECT 1", status="SUCCESS"))
    props = driver(store).indices.get_mapping(index=results)[results]["mappings"]["properties"]
    assert _stored_only(props["queryText"]) and _stored_only(props["error"]), props


@pytest.mark.bare_cluster
def test_an_index_and_a_template_of_an_older_version_keep_working_and_the_template_is_replaced(
    store: Store, ds_name: str, opensearch_config: OpenSearchConfig
) -> None:
    """An index made when statement text was full-text indexed keeps its mapping (a text field
    cannot be changed in place) and takes the product's documents as before; an older template
    (``query`` indexed) is replaced, so that an index the cluster creates from now on stores text."""
    old = request_index(ds_name)
    before = index_mappings.load("request_index")
    before["mappings"]["properties"]["query"] = {"type": "text"}
    before["mappings"]["properties"]["error"] = {"type": "text"}
    assert store.admin.create_index(old, before)
    template = "async-query-request-index"
    older = {"index_patterns": [".query_execution_request_*"], "priority": 100, "template": before}
    driver(store).indices.put_index_template(name=template, body=older)
    fresh = Store.connect(opensearch_config)  # a new process: templates and indexes checked again
    try:
        written = statement(ds_name, new_id(ds_name))
        fresh.statements.create(written)
        found = fresh.statements.get(ds_name, written.statement_id)
        assert found is not None and found.doc.query == "SELECT 1"
        kept = driver(store).indices.get_mapping(index=old)[old]["mappings"]["properties"]["query"]
        assert kept == {"type": "text"}  # unchanged: docs/documents.md says how to move it
        [replaced] = driver(store).indices.get_index_template(name=template)["index_templates"]
        assert _stored_only(replaced["index_template"]["template"]["mappings"]["properties"]["query"])
    finally:
        fresh.close()
