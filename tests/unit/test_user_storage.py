"""What one user may store in the index (docs/security.md, "What one user may store"): each
statement is charged against its submitter at POST in one conditional write of the user's usage
document, read by id (so the bound holds across plugin processes and never waits for a search),
each result by whoever writes it; past the bound a POST is a 429 in the reference's error shape."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from async_query.datasources import Datasource
from async_query.runtime import Plugin
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from flint_repl_job.executor import ResultTarget
from flint_repl_job.result_stream import ResultLimits
from flint_repl_job.statement import StatementRunner
from query_core.errors import AsyncQueryError, InvalidRequestError, TooManyRequestsError
from query_core.ids import default_result_index
from query_core.models import now_millis
from query_core.store import Store
from query_core.store.results import chunk_id
from query_core.store.usage import (
    DOCUMENT_OVERHEAD,
    NOBODY,
    UsageRepository,
    UserStorageExceededError,
    result_bytes,
    statement_bytes,
)
from tests.conftest import PluginFactory
from tests.unit.test_result_pages import StreamingExecutor, job_config, make_rows

BOB = Principal.of("bob", ["analysts"])
CAROL = Principal.of("carol", ["analysts"])
#: Sessions are not what these tests bound: every POST here starts one.
SESSIONS: dict[str, Any] = {"max_sessions": 100, "max_sessions_per_user": 100}
DAY_MS = 86_400_000


def plugin_bounded(make_plugin: PluginFactory, max_bytes: int) -> Plugin:
    """A service bounding each user to ``max_bytes``, its datasource open to bob and carol."""
    analysts = Datasource(name="local", connector="local", allowed_roles=["analysts"])
    return make_plugin(max_user_index_bytes=max_bytes, datasources=[analysts], **SESSIONS)


def statement(chars: int) -> str:
    return "SELECT '" + "x" * (chars - 10) + "' AS a"


def submit(plugin: Plugin, principal: Principal, query: str) -> Any:
    ds = plugin.datasources.all()[0].name
    return plugin.service.submit(SubmitRequest(ds, "sql", query, principal=principal))


def test_past_the_bound_a_user_s_post_is_a_429_and_nothing_is_written_while_others_go_on(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = plugin_bounded(make_plugin, 10_000)
    text = statement(2_000)
    for _ in range(3):  # 3 x 2,516 bytes: 7,548
        submit(plugin, BOB, text)
    held = store.usage.held("bob", 60)
    assert held == 3 * statement_bytes(text) == 7_548
    with pytest.raises(UserStorageExceededError) as refused:
        submit(plugin, BOB, text)
    error = refused.value
    assert isinstance(error, TooManyRequestsError) and error.http_status == 429
    assert "user bob's statements and results of the last 60 days hold 7548 bytes" in error.message
    assert store.usage.held("bob", 60) == held  # nothing charged, and no statement written
    submit(plugin, CAROL, text)  # another user is not refused
    submit(plugin, BOB, "SELECT 1")  # a statement that still fits is accepted


def test_the_refusal_comes_in_the_reference_s_error_shape(make_plugin: PluginFactory) -> None:
    from async_query.api import product_error

    plugin = plugin_bounded(make_plugin, 3_000)
    submit(plugin, BOB, statement(2_000))
    with pytest.raises(UserStorageExceededError) as refused:
        submit(plugin, BOB, statement(2_000))
    reply = product_error(refused.value, "POST", "/_plugins/_async_query")
    assert reply.status_code == 429
    body = json.loads(bytes(reply.body))
    assert body["status"] == 429 and body["error"]["reason"] == "Too Many Requests"
    assert body["error"]["type"] == "StorageLimitExceededException"
    assert body["error"]["details"].startswith("user bob's statements and results")


def test_a_statement_larger_than_the_bound_itself_is_a_400(make_plugin: PluginFactory) -> None:
    plugin = plugin_bounded(make_plugin, 1_000)
    with pytest.raises(InvalidRequestError, match=r"larger \(\d+ bytes\) than what one user may store"):
        submit(plugin, BOB, statement(2_000))


def test_no_bound_charges_nothing(make_plugin: PluginFactory, store: Store) -> None:
    plugin = plugin_bounded(make_plugin, 0)
    submit(plugin, BOB, statement(2_000))
    assert store.usage.held("bob", 60) == 0


def test_two_plugin_processes_racing_one_user_hold_the_bound(make_plugin: PluginFactory, store: Store) -> None:
    """Twelve POSTs of one user through two services (two plugin processes' state) on one index,
    at once: exactly as many are accepted as the bound holds, and every accepted one is counted."""
    plugins = [plugin_bounded(make_plugin, 10_000) for _ in range(2)]
    text = statement(2_000)
    start = threading.Barrier(12)
    outcomes: list[str] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        start.wait()
        try:
            submit(plugins[n % 2], BOB, text)
            outcome = "accepted"
        except TooManyRequestsError:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("accepted") == 3 and outcomes.count("refused") == 9
    assert store.usage.held("bob", 60) == 3 * statement_bytes(text)


def test_what_was_written_before_the_window_no_longer_counts(store: Store) -> None:
    now = now_millis()
    store.usage.charge("bob", 5_000, now=now - 61 * DAY_MS)  # a result, past the results' retention
    store.usage.charge("bob", 700, now=now - 2 * DAY_MS)
    assert store.usage.held("bob", 60, now=now) == 700
    assert store.usage.held("bob", 90, now=now) == 5_700
    # A charge with a bound drops the days it no longer counts from the document.
    assert store.usage.charge("bob", 300, limit=10_000, window_days=60, now=now) == 1_000
    assert set(store.usage.read("bob").days) == {_day(now - 2 * DAY_MS), _day(now)}
    with pytest.raises(UserStorageExceededError):
        store.usage.charge("bob", 9_500, limit=10_000, window_days=60, now=now)


def _day(millis: int) -> str:
    from query_core.store.usage import day_of

    return day_of(millis)


def test_statements_without_a_submitter_are_the_anonymous_caller_s(store: Store) -> None:
    store.usage.charge(None, 100)
    assert store.usage.held(NOBODY, 60) == 100


def test_a_result_of_many_documents_counts_every_document_s_rows_against_its_submitter(
    make_plugin: PluginFactory, store: Store
) -> None:
    """The job counts what it wrote once the result is written: the statement's text again
    (``queryText``), the rows of every document (``chunks.bytes``), an overhead per document."""
    plugin = plugin_bounded(make_plugin, 10**9)
    ds = plugin.datasources.all()[0]
    submitted = submit(plugin, BOB, "SELECT * FROM t")
    after_post = store.usage.held("bob", 60)
    assert after_post == statement_bytes("SELECT * FROM t")
    limits = ResultLimits(1_000, 10**9, 10, 10**6)
    cfg = job_config(ds.name, submitted.session_id, limits)
    executor = StreamingExecutor(make_rows(45), ResultTarget(cfg.result_limits, store.results, ds.results))
    runner = StatementRunner(cfg, store, executor, threading.Event())
    running = store.statements.get(ds.name, submitted.query_id)
    assert running is not None
    runner.run(running)
    head = store.results.get(default_result_index(ds.name), submitted.query_id)
    assert head is not None and head.chunks is not None and len(head.chunks.chunk_rows) == 4
    rows = [head.lossless.datarows if head.lossless else ""]
    for n in range(1, 5):
        chunk = store.results.get_chunk(default_result_index(ds.name), submitted.query_id, n)
        assert chunk is not None, chunk_id(submitted.query_id, n)
        rows.append(chunk.datarows)
    stored_rows = sum(len(r.encode()) for r in rows) - 2 * 5 - 4 * 5  # less each document's brackets and commas
    assert abs(head.chunks.bytes - stored_rows) <= 5 * 50  # the rows' bytes, as the assembler counted them
    charged = store.usage.held("bob", 60) - after_post
    assert charged == result_bytes(head)
    assert charged >= head.chunks.bytes + len("SELECT * FROM t") + 5 * DOCUMENT_OVERHEAD


def test_a_charge_that_cannot_be_written_never_fails_the_statement(make_plugin: PluginFactory, store: Store) -> None:
    plugin = plugin_bounded(make_plugin, 10**9)
    ds = plugin.datasources.all()[0]
    submitted = submit(plugin, BOB, "SELECT 1")
    cfg = job_config(ds.name, submitted.session_id, ResultLimits(1_000, 10**9, 10, 10**6))
    executor = StreamingExecutor(make_rows(3), ResultTarget(cfg.result_limits, store.results, ds.results))
    runner = StatementRunner(cfg, store, executor, threading.Event())

    def refuse(*_: Any, **__: Any) -> int:
        raise AsyncQueryError("the usage document cannot be written")

    store.usage.charge = refuse  # type: ignore[method-assign]
    running = store.statements.get(ds.name, submitted.query_id)
    assert running is not None
    outcome = runner.run(running)
    assert outcome is not None and outcome.state.value == "success"


def test_a_charge_starts_from_what_this_process_last_wrote_and_rereads_after_another_s(store: Store) -> None:
    """A process's second charge of a user reads nothing (its own last write is the document's
    version); a charge of another process since makes that write conflict, and the charge reads
    the document again: neither charge is lost."""
    ours, theirs = UsageRepository(store.index), UsageRepository(store.index)
    ours.charge("bob", 100, limit=10_000)
    reads: list[str] = []
    real_get = store.index.get

    def counted(index: str, doc_id: str) -> Any:
        reads.append(doc_id)
        return real_get(index, doc_id)

    store.index.get = counted  # type: ignore[method-assign]
    assert ours.charge("bob", 200, limit=10_000) == 300 and reads == []
    theirs.charge("bob", 400)  # another process (a job's result): read, then written
    assert ours.charge("bob", 800, limit=10_000) == 1_500 and len(reads) == 2
    assert ours.held("bob", 60) == 1_500
