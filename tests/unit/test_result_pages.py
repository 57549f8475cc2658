"""Results of more than one document, end to end on the in-memory twin: the job's statement runner
writes the chunks before the statement succeeds (played with a stand-in executor that streams
rows as the Spark one does), GET returns the first document in the reference's shape with the
markers, and paging reads any rows of the result from the documents that hold them."""

from __future__ import annotations

import dataclasses
import json
import threading
from concurrent.futures import Future
from decimal import Decimal
from typing import Any

import httpx
import pytest
from pyspark.sql import Row
from pyspark.sql import types as t

from async_query.api import BASE
from async_query.replies import Page
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from async_query_cli.commands import extent_note
from flint_repl_job.config import JobConfig
from flint_repl_job.executor import QueryOutput, ResultTarget, RunningQuery
from flint_repl_job.result_stream import ResultLimits, stream_rows
from flint_repl_job.runners import InteractiveJob
from flint_repl_job.statement import StatementRunner
from query_core.errors import IndexOperationError
from query_core.ids import RESULT_INDEX_PREFIX, default_result_index, request_index
from query_core.models import ResultDoc, StatementProgress
from query_core.states import SessionState, StatementState
from query_core.store import MemoryIndex, Store, Version
from query_core.store.results import chunk_id, slice_rows
from tests.conftest import PluginFactory

SCHEMA = t.StructType(
    [t.StructField("id", t.LongType()), t.StructField("s", t.StringType()), t.StructField("d", t.DecimalType(20, 2))]
)


def make_rows(n: int) -> list[Row]:
    # Strings with the characters a row splitter could trip on.
    return [Row(id=i, s=f'r{i}, "q" [x] {{y}} \\ é', d=Decimal(f"{i}.10")) for i in range(n)]


def expected(n: int) -> list[list[Any]]:
    return [[i, f'r{i}, "q" [x] {{y}} \\ é', Decimal(f"{i}.10")] for i in range(n)]


class StreamingExecutor:
    """Stands in for ``SparkExecutor``: a statement's rows are streamed into documents as the
    Spark one streams them (the same assembler and caps), synchronously."""

    def __init__(self, rows: list[Row], target: ResultTarget) -> None:
        self.rows = rows
        self.target = target

    def start(self, query_id: str, sql: str, lang: str = "sql") -> RunningQuery:
        future: Future[QueryOutput] = Future()
        try:
            encoded = stream_rows(SCHEMA, self.rows, self.target.limits, self.target.writer(query_id))
            future.set_result(QueryOutput.of(encoded))
        except Exception as exc:  # noqa: BLE001 - handed to the runner, as the real executor does
            future.set_exception(exc)
        return RunningQuery(query_id, future)

    def cancel(self, running: RunningQuery, grace_s: float, poll_s: float) -> bool:
        return True

    def progress(self, query_id: str) -> StatementProgress:
        return StatementProgress()


class RecordingIndex(MemoryIndex):
    """The twin, noting result writes and statement moves in order. It can refuse result
    documents over ``result_limit`` bytes, as a real cluster refuses a request over its limit
    (413), and statements' terminal moves (a request index whose mapping conflicts)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.result_limit: int | None = None
        self.refuse_statement_ends = False

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        if index.startswith(RESULT_INDEX_PREFIX):
            limit = self.result_limit
            if limit is not None and len(json.dumps(source)) > limit:
                raise IndexOperationError(f"put {index}/{doc_id}: 413 request body is larger than {limit} bytes")
            self.events.append("chunk" if "chunkOf" in source else f"result {source['status']}")
        return super().put(index, doc_id, source)

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        current = self.get(index, doc_id)
        # Statements only: a session's document carries a state too, and the plugin's background
        # work may update it while the statement runs.
        if "state" in partial and current is not None and current.source.get("type") == "statement":
            if self.refuse_statement_ends and partial["state"] in ("failed", "success"):
                raise IndexOperationError(f"update {index}/{doc_id}: 400 mapper_parsing_exception")
            self.events.append(f"statement {partial['state']}")
        return super().update_if(index, doc_id, partial, version)


@pytest.fixture
def store() -> Store:
    return Store(RecordingIndex())


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin(result_chunk_rows=10, result_chunk_bytes=1_000_000)


def job_config(ds: str, session_id: str, limits: ResultLimits) -> JobConfig:
    return JobConfig(
        session_id=session_id,
        datasource=ds,
        result_index=default_result_index(ds),
        request_index=request_index(ds),
        loop_frequency_ms=5,
        max_result_rows=limits.max_rows,
        max_result_bytes=limits.max_bytes,
        result_chunk_rows=limits.chunk_rows,
        result_chunk_bytes=limits.chunk_bytes,
    )


def run_query(
    plugin: Plugin, rows: list[Row], max_rows: int = 1_000, chunk_rows: int = 10, chunk_bytes: int = 10**6
) -> str:
    """POST a query, and run it as the job would, with these caps: its query id."""
    store = plugin.store
    ds = plugin.datasources.all()[0]
    submitted = plugin.service.submit(SubmitRequest(ds.name, "sql", "SELECT * FROM t"))
    limits = ResultLimits(max_rows, 10**9, chunk_rows, chunk_bytes)
    cfg = job_config(ds.name, submitted.session_id, limits)
    executor = StreamingExecutor(rows, ResultTarget(cfg.result_limits, store.results, ds.results))
    runner = StatementRunner(cfg, store, executor, threading.Event())
    statement = store.statements.get(ds.name, submitted.query_id)
    assert statement is not None
    runner.run(statement)
    return submitted.query_id


def get(plugin: Plugin, query_id: str, page: Page | None = None) -> dict[str, Any]:
    body = plugin.service.get(query_id) if page is None else plugin.service.get_page(query_id, page)
    return dict(json.loads(body, parse_float=Decimal))


# -- splitting stored rows ------------------------------------------------------------------------

ROWS_TEXT = '[[1,"a,b"],[2,"]\\"["],[3,{"k":[1,2]}],[4,null]]'


@pytest.mark.parametrize(
    ("start", "stop", "text", "count"),
    [
        (0, 4, '[1,"a,b"],[2,"]\\"["],[3,{"k":[1,2]}],[4,null]', 4),
        (1, 3, '[2,"]\\"["],[3,{"k":[1,2]}]', 2),
        (3, 10, "[4,null]", 1),
        (4, 10, "", 0),
        (2, 2, "", 0),
    ],
)
def test_rows_are_sliced_out_of_their_text_unchanged(start: int, stop: int, text: str, count: int) -> None:
    assert slice_rows(ROWS_TEXT, start, stop) == (text, count)


def test_an_empty_result_slices_to_nothing() -> None:
    assert slice_rows("[]", 0, 5) == ("", 0)


# -- writing and reading a large result -----------------------------------------------------------


def test_the_chunks_are_written_before_the_statement_succeeds(plugin: Plugin) -> None:
    query_id = run_query(plugin, make_rows(35))
    index = plugin.store.index
    assert isinstance(index, RecordingIndex)
    assert index.events[-6:] == ["statement running", "chunk", "chunk", "chunk", "result SUCCESS", "statement success"]
    ds = plugin.datasources.all()[0]
    chunk = plugin.store.results.get_chunk(ds.results, query_id, 3)
    assert chunk is not None and chunk.rows == 5 and chunk.chunk_of == query_id
    # The reference plugin finds a result by a search on queryId or jobRunId: a chunk has neither.
    source = index.get(ds.results, chunk_id(query_id, 3))
    assert source is not None and not {"queryId", "jobRunId"} & set(source.source)
    head = plugin.store.results.get(ds.results, query_id)
    assert head is not None and head.chunks is not None
    assert (head.chunks.rows, head.chunks.chunk_rows, head.chunks.truncated) == (35, [10, 10, 5], False)
    assert len(head.result) == 10  # the reference's encoding of the first document's rows


def test_get_without_paging_is_the_first_document_in_the_reference_shape_with_the_markers(
    plugin: Plugin,
) -> None:
    reply = get(plugin, run_query(plugin, make_rows(35)))
    assert reply["status"] == "SUCCESS"
    assert reply["datarows"] == expected(10)
    assert reply["total"] == reply["size"] == 10
    assert (reply["resultRows"], reply["truncated"]) == (35, False)
    assert [c["name"] for c in reply["schema"]] == ["id", "s", "d"]


def test_a_result_within_one_document_replies_exactly_as_before(plugin: Plugin) -> None:
    query_id = run_query(plugin, make_rows(3))
    reply = get(plugin, query_id)
    assert set(reply) == {"status", "schema", "datarows", "total", "size"}
    assert reply["datarows"] == expected(3)
    paged = get(plugin, query_id, Page(1, 5))
    assert paged["datarows"] == expected(3)[1:]
    assert (paged["offset"], paged["size"], paged["resultRows"], paged["truncated"]) == (1, 2, 3, False)


def test_pages_read_the_whole_result_in_order_across_documents(plugin: Plugin) -> None:
    query_id = run_query(plugin, make_rows(35))
    read: list[list[Any]] = []
    offset = 0
    while True:
        page = get(plugin, query_id, Page(offset, 7))
        assert page["offset"] == offset and page["resultRows"] == 35
        if not page["size"]:
            break
        read += page["datarows"]
        offset += page["size"]
    assert read == expected(35)
    spanning = get(plugin, query_id, Page(8, 10))
    assert spanning["datarows"] == expected(35)[8:18] and spanning["total"] == spanning["size"] == 10


def test_a_capped_result_succeeds_with_its_first_rows_and_says_so(plugin: Plugin) -> None:
    query_id = run_query(plugin, make_rows(100), max_rows=25)
    statement = plugin.store.statements.get("local", query_id)
    assert statement is not None and statement.doc.state == StatementState.SUCCESS
    reply = get(plugin, query_id)
    assert (reply["resultRows"], reply["truncated"], reply["size"]) == (25, True, 10)
    last = get(plugin, query_id, Page(20, 10))
    assert last["datarows"] == expected(25)[20:] and last["size"] == 5 and last["truncated"] is True
    assert get(plugin, query_id, Page(25, 10))["datarows"] == []


def test_a_page_stops_at_the_plugin_s_bytes_per_page(make_plugin: PluginFactory) -> None:
    plugin = make_plugin(result_chunk_rows=10, result_chunk_bytes=60)
    query_id = run_query(plugin, make_rows(35), chunk_rows=4)
    # Rows are about 35 bytes: a page holds one document's share past 60 bytes, and no more.
    page = get(plugin, query_id, Page(2, 10))
    assert page["size"] == 2 and page["datarows"] == expected(4)[2:]
    assert get(plugin, query_id, Page(4, 10))["size"] == 4


def test_a_page_whose_chunk_is_gone_says_so(plugin: Plugin) -> None:
    query_id = run_query(plugin, make_rows(35))
    ds = plugin.datasources.all()[0]
    assert plugin.store.index.delete(ds.results, chunk_id(query_id, 2))
    reply = get(plugin, query_id, Page(20, 5))
    assert reply == {"status": "FAILED", "error": "The result of this query is no longer available"}
    assert get(plugin, query_id, Page(0, 5))["size"] == 5


def test_paging_a_statement_that_has_not_succeeded_is_its_usual_reply(plugin: Plugin) -> None:
    submitted = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 1"))
    assert get(plugin, submitted.query_id, Page(0, 5)) == {"status": "WAITING"}


def test_a_result_of_the_reference_s_job_is_paged_from_its_own_encoding(plugin: Plugin) -> None:
    submitted = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 1"))
    store = plugin.store
    statement = store.statements.get("local", submitted.query_id)
    assert statement is not None
    store.results.put(
        plugin.datasources.all()[0].results,
        ResultDoc(
            query_id=submitted.query_id,
            status="SUCCESS",
            result=["{'n':1}", "{'n':2}", "{'n':3}"],
            schema=["{'column_name':'n','data_type':'integer'}"],
        ),
    )
    started = store.statements.start(statement)
    assert started is not None
    store.statements.settle(started, StatementState.SUCCESS)
    paged = get(plugin, submitted.query_id, Page(1, 1))
    assert paged["datarows"] == [[2]] and (paged["resultRows"], paged["truncated"]) == (3, False)


# -- the REST layer -------------------------------------------------------------------------------


def test_paging_parameters_are_read_from_the_query_string(plugin: Plugin, client: httpx.Client) -> None:
    query_id = run_query(plugin, make_rows(35))
    reply = client.get(f"{BASE}/{query_id}", params={"offset": 30})
    assert reply.status_code == 200
    assert json.loads(reply.text, parse_float=Decimal)["datarows"] == expected(35)[30:]
    assert client.get(f"{BASE}/{query_id}", params={"size": 3}).json()["size"] == 3


@pytest.mark.parametrize(
    ("params", "details"),
    [
        ({"offset": -1}, "offset must be 0 or more"),
        ({"size": 0}, "size must be between 1 and 10"),
        ({"size": 11}, "size must be between 1 and 10"),
        ({"offset": "ten"}, "offset"),
        ({"size": "1e3"}, "size"),
    ],
)
def test_bad_paging_parameters_are_a_400_in_the_error_shape(
    plugin: Plugin, client: httpx.Client, params: dict[str, Any], details: str
) -> None:
    query_id = run_query(plugin, make_rows(3))
    reply = client.get(f"{BASE}/{query_id}", params=params)
    assert reply.status_code == 400
    body = reply.json()
    assert body["status"] == 400 and body["error"]["reason"] == "Invalid Request"
    assert details in body["error"]["details"]


# -- a result the index refuses -------------------------------------------------------------------


def interactive_job(plugin: Plugin, session_id: str, rows: list[Row], chunk_rows: int) -> InteractiveJob:
    """The session's job, with a stand-in executor streaming ``rows`` for every statement."""
    session = plugin.store.sessions.get("local", session_id)
    assert session is not None
    limits = ResultLimits(10**6, 10**9, chunk_rows, 10**6)
    # A short inactivity limit: a job that wrongly went on would end its loop in seconds.
    cfg = dataclasses.replace(
        job_config("local", session_id, limits), job_id=session.doc.job_id, inactivity_limit_ms=2_000
    )
    target = ResultTarget(limits, plugin.store.results, cfg.result_index)
    return InteractiveJob(cfg, plugin.store, StreamingExecutor(rows, target))


def recording(plugin: Plugin) -> RecordingIndex:
    index = plugin.store.index
    assert isinstance(index, RecordingIndex)
    return index


def wide_after_ten(n: int) -> list[Row]:
    """Ten narrow rows, then wide ones: the first document fits, a chunk does not."""
    return [*make_rows(10), *(Row(id=i, s="z" * 500, d=Decimal("0.00")) for i in range(10, n))]


@pytest.mark.parametrize(
    ("rows", "chunk_rows", "refused"),
    [(make_rows(200), 1_000, ""), (wide_after_ten(200), 10, "-1")],
    ids=["the first document", "a chunk"],
)
def test_a_result_the_index_refuses_fails_its_statement_with_the_cause_and_the_session_goes_on(
    plugin: Plugin, rows: list[Row], chunk_rows: int, refused: str
) -> None:
    recording(plugin).result_limit = 4_000
    submitted = plugin.service.submit(SubmitRequest("local", "sql", "SELECT * FROM big"))
    job = interactive_job(plugin, submitted.session_id, rows, chunk_rows)
    job.wait_for_session()
    job.claim()

    plugin.signals.flush()  # the statement's signal, written just after its POST's reply
    assert job.run_once()
    reply = get(plugin, submitted.query_id)
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Fail to write result, cause: put query_execution_result_local/")
    assert reply["error"].endswith(f"{submitted.query_id}{refused}: 413 request body is larger than 4000 bytes")

    # The session lives on: its next statement runs in it.
    job.statements.executor = StreamingExecutor(
        make_rows(2), ResultTarget(job.cfg.result_limits, plugin.store.results, job.cfg.result_index)
    )
    second = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 2", submitted.session_id))
    assert second.session_id == submitted.session_id
    plugin.signals.flush()  # the statement's signal, written just after its POST's reply
    assert job.run_once()
    assert get(plugin, second.query_id)["datarows"] == expected(2)
    assert not job.stop_event.is_set()


def test_a_statement_whose_failed_result_is_refused_too_is_failed_and_the_session_goes_on(
    plugin: Plugin,
) -> None:
    recording(plugin).result_limit = 0  # a result index whose mapping refuses every result
    submitted = plugin.service.submit(SubmitRequest("local", "sql", "SELECT * FROM big"))
    job = interactive_job(plugin, submitted.session_id, make_rows(5), 1_000)
    job.wait_for_session()
    job.claim()

    plugin.signals.flush()  # the statement's signal, written just after its POST's reply
    assert job.run_once()
    statement = plugin.store.statements.get("local", submitted.query_id)
    assert statement is not None and statement.doc.state == StatementState.FAILED
    assert statement.doc.error.startswith("Fail to run query. Cause: put query_execution_result_local/")
    assert not job.stop_event.is_set()


def test_a_statement_the_job_cannot_end_ends_its_session_and_never_stays_running(
    plugin: Plugin,
) -> None:
    """When not even the statement's failure can be written, the job ends the session: a
    statement must not stay ``running`` in a live session that no longer runs it."""
    index = recording(plugin)
    index.result_limit = 0
    index.refuse_statement_ends = True
    submitted = plugin.service.submit(SubmitRequest("local", "sql", "SELECT * FROM big"))
    job = interactive_job(plugin, submitted.session_id, make_rows(5), 1_000)

    assert job.run() == SessionState.FAIL
    index.refuse_statement_ends = False
    session = plugin.store.sessions.get("local", submitted.session_id)
    assert session is not None and "mapper_parsing_exception" in session.doc.error
    reply = get(plugin, submitted.query_id)
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Session ended before the statement finished: Session failed:")


def test_the_command_line_says_what_a_large_reply_leaves_out() -> None:
    rows = [[1], [2], [3]]
    assert extent_note({"datarows": rows}) == ""
    assert extent_note({"datarows": rows, "resultRows": 3, "truncated": False}) == ""
    assert extent_note({"datarows": rows, "resultRows": 35_000, "truncated": False}) == (
        "(the first 3 of 35,000 rows; GET with ?offset= reads the others)"
    )
    assert extent_note({"datarows": rows, "resultRows": 1_000_000, "truncated": True}) == (
        "(the first 3 of 1,000,000 rows stored; the query had more rows than the result cap)"
    )


def test_paging_an_unknown_query_is_the_usual_400(client: httpx.Client) -> None:
    reply = client.get(f"{BASE}/bm9zdWNocXVlcnlsb2NhbA==", params={"offset": 0, "size": 5})
    assert reply.status_code == 400
    assert reply.json()["error"]["type"] == "AsyncQueryNotFoundException"
