"""The REST wire contract (docs/api.md) over real HTTP, with documents in a real index server.

No Spark: the service starts sessions through a RecordingLauncher, and the tests play the job's
part by moving documents through the store as the job would.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from pyspark.sql import Row
from pyspark.sql import types as t

from async_query.api import BASE, create_app
from async_query.datasources import Datasource
from async_query.launcher.base import JobRunState
from async_query.runtime import Plugin
from flint_repl_job.results import encode
from query_core.ids import new_id, request_index
from query_core.models import (
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementDoc,
    StatementProgress,
    Versioned,
    now_millis,
)
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, driver, serve_http

# -- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture
def other_datasource(ds_name: str, datasource: Datasource) -> Datasource:
    return datasource.model_copy(update={"name": f"{ds_name}other"})


@pytest.fixture
def plugin(make_plugin: PluginFactory, datasource: Datasource, other_datasource: Datasource) -> Plugin:
    # The tests here change sessions as other processes would (through a store of their own): a
    # POST must read the session, not take it as this process wrote it a moment before
    # (session_reuse_ms, tests/unit/test_pending_signals.py).
    return make_plugin(datasources=[datasource, other_datasource], session_reuse_ms=0)


def post(client: httpx.Client, ds: str, query: str = "SELECT 1", session_id: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {"datasource": ds, "lang": "sql", "query": query}
    if session_id is not None:
        body["sessionId"] = session_id
    return client.post(BASE, json=body)


def submit(client: httpx.Client, ds: str, query: str = "SELECT 1", session_id: str | None = None) -> dict[str, str]:
    resp = post(client, ds, query, session_id)
    assert resp.status_code == 201, resp.text
    return resp.json()


def get(client: httpx.Client, query_id: str) -> dict[str, Any]:
    resp = client.get(f"{BASE}/{query_id}")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    return json.loads(resp.text, parse_float=Decimal)


def assert_error(resp: httpx.Response, status: int, error_type: str | None = None) -> dict[str, Any]:
    """The one error shape: {"status", "error": {"type", "reason", "details"}}."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"status", "error"}
    assert body["status"] == status
    assert set(body["error"]) == {"type", "reason", "details"}
    assert all(isinstance(v, str) and v for v in body["error"].values())
    assert body["error"]["reason"] == "Invalid Request"
    if error_type is not None:
        assert body["error"]["type"] == error_type
    assert "Traceback" not in resp.text
    return body


def the_session(store: Store, ds: str, session_id: str) -> Versioned[SessionDoc]:
    found = store.sessions.get(ds, session_id)
    assert found is not None
    return found


def the_statement(store: Store, ds: str, query_id: str) -> Versioned[StatementDoc]:
    found = store.statements.get(ds, query_id)
    assert found is not None
    return found


def job_starts(store: Store, ds: str, session_id: str) -> Versioned[SessionDoc]:
    """What the job does when it starts: it claims the session, which runs, with a fresh heartbeat."""
    session = the_session(store, ds, session_id)
    claimed = store.sessions.claim(session, session.doc.job_id)
    assert claimed is not None
    return claimed


def move(store: Store, ds: str, query_id: str, *states: StatementState, error: str = "") -> Versioned[StatementDoc]:
    """The statement taken through ``states`` by the named operations (the last one with ``error``)."""
    current = the_statement(store, ds, query_id)
    for i, state in enumerate(states):
        if state == StatementState.RUNNING:
            started = store.statements.start(current)
            assert started is not None
            current = started
        elif state == StatementState.CANCELLED:
            cancelled = store.statements.cancel(current)
            assert cancelled is not None
            current = cancelled[0]
        else:
            settled = store.statements.settle(current, state, error=error if i == len(states) - 1 else "")
            assert settled.applied
            current = settled.statement
    return current


# -- POST ------------------------------------------------------------------------------------------


def test_post_creates_a_statement_and_a_session(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, plugin: Plugin
) -> None:
    resp = post(client, ds_name, "SELECT 'it''s' AS x")
    assert resp.status_code == 201
    reply = resp.json()
    assert set(reply) == {"queryId", "sessionId"}
    assert reply["queryId"] != reply["sessionId"]
    assert len(launcher.started) == 1
    request = launcher.started[0]
    assert request.session_id == reply["sessionId"]
    assert request.session_type == SessionType.INTERACTIVE
    assert request.conf["spark.flint.job.sessionId"] == reply["sessionId"]
    assert request.conf["spark.flint.datasource.name"] == ds_name

    # docs/documents.md: the reference's field names and state strings
    found = store.index.get(request_index(ds_name), reply["queryId"])
    assert found is not None
    statement = found.source
    assert {
        "type",
        "state",
        "statementId",
        "queryId",
        "sessionId",
        "lang",
        "query",
        "dataSourceName",
        "applicationId",
        "jobId",
        "submitTime",
        "error",
        "version",
    } <= set(statement)
    assert statement["type"] == "statement"
    assert statement["state"] == "waiting"
    assert statement["statementId"] == statement["queryId"] == reply["queryId"]
    assert statement["sessionId"] == reply["sessionId"]
    assert statement["lang"] == "sql"
    assert statement["query"] == "SELECT 'it''s' AS x"
    assert statement["dataSourceName"] == ds_name
    assert statement["applicationId"] == "test-app"
    assert statement["jobId"] == "job-1"
    assert statement["version"] == "1.0"
    assert isinstance(statement["submitTime"], int) and abs(statement["submitTime"] - now_millis()) < 60_000

    plugin.signals.flush()  # the job's signal is written just after the reply
    found = store.index.get(request_index(ds_name), reply["sessionId"])
    assert found is not None
    session = found.source
    assert {
        "type",
        "sessionType",
        "sessionId",
        "state",
        "dataSourceName",
        "applicationId",
        "jobId",
        "lastUpdateTime",
        "jobStartTime",
        "excludeJobIds",
        "error",
    } <= set(session)
    assert session["type"] == "session"
    assert session["sessionType"] == "interactive"
    assert session["sessionId"] == reply["sessionId"]
    assert session["state"] == "not_started"
    assert session["dataSourceName"] == ds_name
    assert session["applicationId"] == "test-app"
    assert session["jobId"] == "job-1"
    assert isinstance(session["lastUpdateTime"], int)
    assert session["excludeJobIds"] == []
    # the real-time signal for the job
    assert session["pendingStatementIds"] == [reply["queryId"]]


def test_post_accepts_upper_case_lang_and_ppl(client: httpx.Client, store: Store, ds_name: str) -> None:
    for lang, stored in (("SQL", "sql"), ("ppl", "ppl"), ("PPL", "ppl")):
        resp = client.post(BASE, json={"datasource": ds_name, "lang": lang, "query": "source=t | head 1"})
        assert resp.status_code == 201, resp.text
        assert the_statement(store, ds_name, resp.json()["queryId"]).doc.lang == stored


def test_post_reuses_a_live_session(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, plugin: Plugin
) -> None:
    first = submit(client, ds_name)
    job_starts(store, ds_name, first["sessionId"])
    second = submit(client, ds_name, "SELECT 2", session_id=first["sessionId"])
    assert second["sessionId"] == first["sessionId"]
    assert second["queryId"] != first["queryId"]
    assert len(launcher.started) == 1
    assert the_statement(store, ds_name, second["queryId"]).doc.session_id == first["sessionId"]
    plugin.signals.flush()
    session = the_session(store, ds_name, first["sessionId"]).doc
    assert session.pending_statement_ids == [first["queryId"], second["queryId"]]
    assert session.state == SessionState.RUNNING  # the signal did not disturb the session


def test_post_reuses_a_session_that_is_still_starting(
    client: httpx.Client, ds_name: str, launcher: RecordingLauncher
) -> None:
    first = submit(client, ds_name)
    second = submit(client, ds_name, session_id=first["sessionId"])
    assert second["sessionId"] == first["sessionId"]
    assert len(launcher.started) == 1


def _dead(store: Store, ds: str, sid: str) -> None:
    store.sessions.end(the_session(store, ds, sid), SessionState.DEAD)


def _fail(store: Store, ds: str, sid: str) -> None:
    store.sessions.end(the_session(store, ds, sid), SessionState.FAIL, error="job failed")


def _stale(store: Store, ds: str, sid: str) -> None:
    store.sessions.beat(job_starts(store, ds, sid), at=now_millis() - 3_600_000)


def _never_started(store: Store, ds: str, sid: str) -> None:
    store.sessions.beat(the_session(store, ds, sid), at=now_millis() - 3_600_000)


@pytest.mark.parametrize("end", [_dead, _fail], ids=["dead", "fail"])
def test_post_replaces_an_ended_session(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, end: Any
) -> None:
    first = submit(client, ds_name)
    end(store, ds_name, first["sessionId"])
    second = submit(client, ds_name, session_id=first["sessionId"])
    assert second["sessionId"] != first["sessionId"]
    assert len(launcher.started) == 2
    assert launcher.described == []  # the documents answered
    assert the_statement(store, ds_name, second["queryId"]).doc.session_id == second["sessionId"]
    assert the_session(store, ds_name, second["sessionId"]).doc.state == SessionState.NOT_STARTED


@pytest.mark.parametrize("suspect", [_stale, _never_started], ids=["stale", "never_started"])
def test_post_replaces_a_suspect_session_whose_job_is_gone(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, suspect: Any
) -> None:
    first = submit(client, ds_name)
    suspect(store, ds_name, first["sessionId"])
    launcher.state = JobRunState.FAILED
    second = submit(client, ds_name, session_id=first["sessionId"])
    assert second["sessionId"] != first["sessionId"]
    assert len(launcher.started) == 2
    assert launcher.described == ["job-1"]  # one call confirmed the death
    old = the_session(store, ds_name, first["sessionId"]).doc
    assert old.state == SessionState.DEAD
    assert "job-1" in old.error
    # what the dead session left unfinished is failed with a clear error
    orphan = the_statement(store, ds_name, first["queryId"]).doc
    assert orphan.state == StatementState.FAILED
    assert orphan.error.startswith("Session ended before the statement finished")
    assert get(client, first["queryId"]) == {"status": "FAILED", "error": orphan.error}


@pytest.mark.parametrize("suspect", [_stale, _never_started], ids=["stale", "never_started"])
def test_post_reuses_a_suspect_session_whose_job_still_runs(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, suspect: Any
) -> None:
    first = submit(client, ds_name)
    suspect(store, ds_name, first["sessionId"])
    launcher.state = JobRunState.RUNNING
    second = submit(client, ds_name, session_id=first["sessionId"])
    assert second["sessionId"] == first["sessionId"]
    assert len(launcher.started) == 1
    assert launcher.described == ["job-1"]


def test_post_with_another_datasources_session_gets_a_new_one(
    client: httpx.Client, store: Store, ds_name: str, other_datasource: Datasource, launcher: RecordingLauncher
) -> None:
    theirs = submit(client, other_datasource.name)
    job_starts(store, other_datasource.name, theirs["sessionId"])
    mine = submit(client, ds_name, session_id=theirs["sessionId"])
    assert mine["sessionId"] != theirs["sessionId"]
    assert len(launcher.started) == 2
    assert the_statement(store, ds_name, mine["queryId"]).doc.data_source_name == ds_name


def test_post_with_a_batch_session_gets_an_interactive_one(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher
) -> None:
    batch = store.sessions.create(
        SessionDoc(session_id=new_id(ds_name), data_source_name=ds_name, session_type=SessionType.BATCH)
    )
    job_starts(store, ds_name, batch.doc.session_id)
    reply = submit(client, ds_name, session_id=batch.doc.session_id)
    assert reply["sessionId"] != batch.doc.session_id
    assert len(launcher.started) == 1


@pytest.mark.parametrize(
    "given",
    ["garbage", "", "!!!", "QUFB" * 500, "unknown-well-formed"],
    ids=["garbage", "empty", "symbols", "huge", "unknown_well_formed"],
)
def test_post_with_an_unusable_session_id_gets_a_new_one(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, given: str
) -> None:
    if given == "unknown-well-formed":
        given = new_id(ds_name)
    reply = submit(client, ds_name, session_id=given)
    assert reply["sessionId"] != given
    assert len(launcher.started) == 1
    assert the_session(store, ds_name, reply["sessionId"]).doc.state == SessionState.NOT_STARTED


# -- GET -------------------------------------------------------------------------------------------


def test_get_waiting(client: httpx.Client, ds_name: str) -> None:
    reply = submit(client, ds_name)
    assert get(client, reply["queryId"]) == {"status": "WAITING"}


def test_get_running_with_progress(client: httpx.Client, store: Store, ds_name: str) -> None:
    reply = submit(client, ds_name)
    qid = reply["queryId"]
    move(store, ds_name, qid, StatementState.RUNNING)
    job_starts(store, ds_name, reply["sessionId"])
    assert get(client, qid) == {"status": "RUNNING"}  # no heartbeat about it yet

    running = RunningStatement(
        query_id=qid,
        start_time=now_millis(),
        progress=StatementProgress(stages_completed=1, stages_total=3, tasks_completed=7, tasks_total=20),
    )
    other = RunningStatement(
        query_id=new_id(ds_name), start_time=now_millis(), progress=StatementProgress(stages_total=9)
    )
    store.sessions.beat(the_session(store, ds_name, reply["sessionId"]), running_statements=[other, running])
    assert get(client, qid) == {
        "status": "RUNNING",
        "progress": {"stagesCompleted": 1, "stagesTotal": 3, "tasksCompleted": 7, "tasksTotal": 20},
    }


RESULT_SCHEMA = t.StructType(
    [
        t.StructField("name", t.StringType()),
        t.StructField("big", t.LongType()),
        t.StructField("price", t.DecimalType(38, 9)),
        t.StructField("day", t.DateType()),
        t.StructField("raw", t.BinaryType()),
        t.StructField("tags", t.ArrayType(t.StringType())),
        t.StructField("attrs", t.MapType(t.StringType(), t.LongType())),
        t.StructField("point", t.StructType([t.StructField("x", t.DoubleType()), t.StructField("y", t.DoubleType())])),
    ]
)
TRICKY = 'say "hi", it\'s \\ ünïcödé 😀'


def test_get_success_reads_the_lossless_result(
    client: httpx.Client, store: Store, ds_name: str, datasource: Datasource
) -> None:
    import datetime as dt

    reply = submit(client, ds_name)
    qid = reply["queryId"]
    rows = [
        Row(
            name=TRICKY,
            big=2**63 - 1,
            price=Decimal("12345678901234567890.123456789"),
            day=dt.date(2024, 2, 29),
            raw=bytearray(b"\x00\xff"),
            tags=["a", None],
            attrs={"k": 2**60},
            point=Row(x=0.1, y=None),
        ),
        Row(name=None, big=None, price=None, day=None, raw=None, tags=None, attrs=None, point=None),
    ]
    result, schema, lossless = encode(RESULT_SCHEMA, rows)
    move(store, ds_name, qid, StatementState.RUNNING)
    # the job writes the result before it marks the statement success
    store.results.put(
        datasource.results,
        ResultDoc(
            query_id=qid,
            query_text="SELECT 1",
            session_id=reply["sessionId"],
            status="SUCCESS",
            result=result,
            schema=schema,
            lossless=lossless,
            data_source_name=ds_name,
        ),
    )
    move(store, ds_name, qid, StatementState.SUCCESS)

    body = get(client, qid)
    assert body == {
        "status": "SUCCESS",
        "schema": [
            {"name": "name", "type": "string"},
            {"name": "big", "type": "long"},
            {"name": "price", "type": "decimal"},
            {"name": "day", "type": "date"},
            {"name": "raw", "type": "binary"},
            {"name": "tags", "type": "array"},
            {"name": "attrs", "type": "map"},
            {"name": "point", "type": "struct"},
        ],
        "datarows": [
            [
                TRICKY,
                2**63 - 1,
                Decimal("12345678901234567890.123456789"),
                "2024-02-29",
                "AP8=",
                ["a", None],
                {"k": 2**60},
                {"x": Decimal("0.1"), "y": None},
            ],
            [None] * 8,
        ],
        "total": 2,
        "size": 2,
    }
    # a finished reply is stable
    assert get(client, qid) == body


def test_get_success_from_a_reference_result_document(
    client: httpx.Client, store: Store, ds_name: str, datasource: Datasource
) -> None:
    """A result written by the reference job: no ``lossless`` field, single-quoted rows."""
    reply = submit(client, ds_name)
    qid = reply["queryId"]
    move(store, ds_name, qid, StatementState.RUNNING)
    store.index.put(
        datasource.results,
        qid,
        {
            "result": ["{'id':1,'name':'alice','score':1.5}", "{'id':2}"],
            "schema": [
                "{'column_name':'id','data_type':'integer'}",
                "{'column_name':'name','data_type':'string'}",
                "{'column_name':'score','data_type':'double'}",
            ],
            "jobRunId": "run-1",
            "applicationId": "app-1",
            "dataSourceName": ds_name,
            "status": "SUCCESS",
            "error": "",
            "queryId": qid,
            "queryText": "SELECT id, name, score FROM t",
            "sessionId": reply["sessionId"],
            "updateTime": now_millis(),
            "queryRunTime": 1234,
        },
    )
    move(store, ds_name, qid, StatementState.SUCCESS)
    assert get(client, qid) == {
        "status": "SUCCESS",
        "schema": [
            {"name": "id", "type": "integer"},
            {"name": "name", "type": "string"},
            {"name": "score", "type": "double"},
        ],
        "datarows": [[1, "alice", Decimal("1.5")], [2, None, None]],
        "total": 2,
        "size": 2,
    }


def test_get_success_without_its_result_is_a_clear_failure(
    client: httpx.Client, store: Store, ds_name: str
) -> None:
    qid = submit(client, ds_name)["queryId"]
    move(store, ds_name, qid, StatementState.RUNNING, StatementState.SUCCESS)
    body = get(client, qid)
    assert body["status"] == "FAILED"
    assert "no longer available" in body["error"]


@pytest.mark.parametrize(
    ("states", "error", "expected"),
    [
        (
            (StatementState.RUNNING, StatementState.FAILED),
            "Syntax error: [PARSE_SYNTAX_ERROR] at 'SELEC'",
            {"status": "FAILED", "error": "Syntax error: [PARSE_SYNTAX_ERROR] at 'SELEC'"},
        ),
        (
            (StatementState.FAILED,),
            "Query waited longer than 600000 ms",
            {"status": "FAILED", "error": "Query waited longer than 600000 ms"},
        ),
        ((StatementState.RUNNING, StatementState.CANCELLED), None, {"status": "CANCELLED"}),
        ((StatementState.CANCELLED,), None, {"status": "CANCELLED"}),
        (
            (StatementState.RUNNING, StatementState.TIMEOUT),
            "Query ran longer than 1800 s",
            {"status": "TIMEOUT", "error": "Query ran longer than 1800 s"},
        ),
    ],
    ids=["failed", "wait_failed", "cancelled_running", "cancelled_waiting", "timeout"],
)
def test_get_terminal_states(
    client: httpx.Client,
    store: Store,
    ds_name: str,
    states: tuple[StatementState, ...],
    error: str | None,
    expected: dict[str, str],
) -> None:
    qid = submit(client, ds_name)["queryId"]
    move(store, ds_name, qid, *states, error=error or "")
    assert get(client, qid) == expected


@pytest.mark.parametrize("end", [SessionState.DEAD, SessionState.FAIL])
@pytest.mark.parametrize("statement_state", [StatementState.WAITING, StatementState.RUNNING])
def test_get_in_a_dead_session_is_failed_with_a_clear_error(
    client: httpx.Client, store: Store, ds_name: str, end: SessionState, statement_state: StatementState
) -> None:
    reply = submit(client, ds_name)
    qid, sid = reply["queryId"], reply["sessionId"]
    job_starts(store, ds_name, sid)
    if statement_state == StatementState.RUNNING:
        move(store, ds_name, qid, StatementState.RUNNING)
    error = "Spark driver ran out of memory" if end == SessionState.FAIL else ""
    store.sessions.end(the_session(store, ds_name, sid), end, error=error)

    body = get(client, qid)
    assert body["status"] == "FAILED"
    # The POST's pending-id signal is written right after its reply: should the session end first,
    # the signal's conditional write fails the statement itself (async_query/pending_signals.py).
    ended_first = f"Session {sid} ended before the statement could run; submit it again"
    if not (statement_state == StatementState.WAITING and body["error"] == ended_first):
        assert body["error"].startswith("Session ended before the statement finished"), body["error"]
        assert (error or f"session {sid} is {end.value}") in body["error"]
    stored = the_statement(store, ds_name, qid).doc
    assert stored.state == StatementState.FAILED and stored.error == body["error"]


def test_get_of_a_finished_statement_in_a_dead_session_keeps_its_state(
    client: httpx.Client, store: Store, ds_name: str
) -> None:
    reply = submit(client, ds_name)
    move(store, ds_name, reply["queryId"], StatementState.RUNNING, StatementState.CANCELLED)
    store.sessions.end(the_session(store, ds_name, reply["sessionId"]), SessionState.DEAD)
    assert get(client, reply["queryId"]) == {"status": "CANCELLED"}


# -- DELETE ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("running", [False, True], ids=["waiting", "running"])
def test_delete_then_get_cancelled(client: httpx.Client, store: Store, ds_name: str, running: bool) -> None:
    qid = submit(client, ds_name)["queryId"]
    if running:
        move(store, ds_name, qid, StatementState.RUNNING)
    resp = client.delete(f"{BASE}/{qid}")
    assert resp.status_code == 204
    assert get(client, qid) == {"status": "CANCELLED"}
    assert the_statement(store, ds_name, qid).doc.state == StatementState.CANCELLED


@pytest.mark.parametrize(
    "states",
    [
        (StatementState.RUNNING, StatementState.SUCCESS),
        (StatementState.FAILED,),
        (StatementState.RUNNING, StatementState.TIMEOUT),
        (StatementState.CANCELLED,),
    ],
    ids=["success", "failed", "timeout", "cancelled"],
)
def test_delete_of_a_finished_statement_is_refused(
    client: httpx.Client, store: Store, ds_name: str, states: tuple[StatementState, ...]
) -> None:
    qid = submit(client, ds_name)["queryId"]
    done = move(store, ds_name, qid, *states)
    body = assert_error(client.delete(f"{BASE}/{qid}"), 400, "IllegalStateException")
    assert states[-1].value in body["error"]["details"]
    after = the_statement(store, ds_name, qid)
    assert after.doc.state == states[-1] and after.seq_no == done.seq_no


def test_delete_twice(client: httpx.Client, ds_name: str) -> None:
    qid = submit(client, ds_name)["queryId"]
    assert client.delete(f"{BASE}/{qid}").status_code == 204
    assert_error(client.delete(f"{BASE}/{qid}"), 400, "IllegalStateException")


# -- bad input -------------------------------------------------------------------------------------

BAD_BODIES: dict[str, Any] = {
    "unknown_field": {"datasource": "DS", "lang": "sql", "query": "SELECT 1", "foo": 1},
    "unknown_field_camel": {"datasource": "DS", "lang": "sql", "query": "SELECT 1", "sessionid": "x"},
    "null_datasource": {"datasource": None, "lang": "sql", "query": "SELECT 1"},
    "missing_datasource": {"lang": "sql", "query": "SELECT 1"},
    "empty_datasource": {"datasource": "", "lang": "sql", "query": "SELECT 1"},
    "null_lang": {"datasource": "DS", "lang": None, "query": "SELECT 1"},
    "missing_lang": {"datasource": "DS", "query": "SELECT 1"},
    "bad_lang": {"datasource": "DS", "lang": "python", "query": "SELECT 1"},
    "numeric_lang": {"datasource": "DS", "lang": 1, "query": "SELECT 1"},
    "null_query": {"datasource": "DS", "lang": "sql", "query": None},
    "missing_query": {"datasource": "DS", "lang": "sql"},
    "empty_query": {"datasource": "DS", "lang": "sql", "query": ""},
    "query_not_a_string": {"datasource": "DS", "lang": "sql", "query": ["SELECT 1"]},
    "session_not_a_string": {"datasource": "DS", "lang": "sql", "query": "SELECT 1", "sessionId": 5},
    "unknown_datasource": {"datasource": "nosuchds", "lang": "sql", "query": "SELECT 1"},
    "bad_datasource_name": {"datasource": "../etc", "lang": "sql", "query": "SELECT 1"},
    "empty_object": {},
}


def _fill(value: Any, ds: str) -> Any:
    if isinstance(value, dict):
        return {k: (ds if v == "DS" else v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("body", list(BAD_BODIES.values()), ids=list(BAD_BODIES))
def test_post_bad_bodies(client: httpx.Client, ds_name: str, launcher: RecordingLauncher, body: Any) -> None:
    assert_error(client.post(BASE, json=_fill(body, ds_name)), 400)
    assert launcher.started == []


def test_post_bad_body_details_name_the_problem(client: httpx.Client, ds_name: str) -> None:
    unknown = assert_error(client.post(BASE, json=_fill(BAD_BODIES["unknown_field"], ds_name)), 400)
    assert "foo" in unknown["error"]["details"]
    missing = assert_error(client.post(BASE, json=_fill(BAD_BODIES["missing_query"], ds_name)), 400)
    assert "query" in missing["error"]["details"]
    ds = assert_error(client.post(BASE, json=_fill(BAD_BODIES["unknown_datasource"], ds_name)), 400)
    assert "nosuchds" in ds["error"]["details"]


RAW_BODIES = {
    "malformed_json": b'{"datasource": "local", "lang": "sql", "query": ',
    "trailing_garbage": b'{"datasource": "local", "lang": "sql", "query": "SELECT 1"} x',
    "array": b'[{"datasource": "local", "lang": "sql", "query": "SELECT 1"}]',
    "string": b'"SELECT 1"',
    "number": b"42",
    "null": b"null",
    "empty": b"",
    "not_utf8": b'{"datasource": "\xff\xfe", "lang": "sql", "query": "x"}',
}


@pytest.mark.parametrize("raw", list(RAW_BODIES.values()), ids=list(RAW_BODIES))
def test_post_malformed_bodies(client: httpx.Client, launcher: RecordingLauncher, raw: bytes) -> None:
    resp = client.post(BASE, content=raw, headers={"content-type": "application/json"})
    assert_error(resp, 400)
    assert launcher.started == []


def test_post_without_json_content_type(client: httpx.Client, ds_name: str) -> None:
    body = json.dumps({"datasource": ds_name, "lang": "sql", "query": "SELECT 1"}).encode()
    resp = client.post(BASE, content=body, headers={"content-type": "text/plain"})
    assert resp.status_code < 500
    if resp.status_code != 201:
        assert_error(resp, resp.status_code)


def test_post_oversized_body(make_plugin: PluginFactory, ds_name: str) -> None:
    plugin = make_plugin(max_body_bytes=4_000)
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher)
    big = {"datasource": ds_name, "lang": "sql", "query": "SELECT '" + "x" * 10_000 + "'"}
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        assert_error(c.post(BASE, json=big), 413)
        # a body that does not say its length is held to the same limit
        chunks = iter([json.dumps(big).encode()[i : i + 1000] for i in range(0, 11_000, 1000)])
        resp = c.post(BASE, content=chunks, headers={"content-type": "application/json"})
        assert_error(resp, 413)
        # within the limit it is fine, chunked or not
        small = json.dumps({**big, "query": "SELECT 1"}).encode()
        assert c.post(BASE, content=small, headers={"content-type": "application/json"}).status_code == 201
        chunked = c.post(BASE, content=iter([small[:10], small[10:]]), headers={"content-type": "application/json"})
        assert chunked.status_code == 201, chunked.text
    assert len(launcher.started) == 2


def test_post_overlong_query(make_plugin: PluginFactory, ds_name: str) -> None:
    plugin = make_plugin(max_query_chars=100)
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        body = assert_error(c.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "x" * 101}), 400)
        assert "100" in body["error"]["details"]
        assert c.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "x" * 100}).status_code == 201


MALFORMED_IDS = {
    "garbage": "garbage",
    "symbols": "%21%40%23",
    "too_short_base64": "YWJj",
    "random_part_only": "YWJjZGVmZ2hpag==",
    "bad_datasource_chars": "YWJjZGVmZ2hpamJhZCBuYW1l",  # base64 of "abcdefghijbad name"
    "huge": "QUFB" * 2_000,
    "unicode": "%C3%BC" * 20,
    "spaces": "a%20b%20c%20d%20e%20f%20g%20h%20i",
}


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("query_id", list(MALFORMED_IDS.values()), ids=list(MALFORMED_IDS))
def test_malformed_ids(client: httpx.Client, method: str, query_id: str) -> None:
    resp = client.request(method, f"{BASE}/{query_id}")
    assert_error(resp, 400, "IllegalArgumentException")


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_unknown_well_formed_ids(
    client: httpx.Client, store: Store, ds_name: str, method: str, other_datasource: Datasource
) -> None:
    # before the index exists, after it exists, and for a datasource that is not configured
    assert_error(client.request(method, f"{BASE}/{new_id(ds_name)}"), 400, "AsyncQueryNotFoundException")
    session = submit(client, ds_name)["sessionId"]
    assert_error(client.request(method, f"{BASE}/{new_id(ds_name)}"), 400, "AsyncQueryNotFoundException")
    assert_error(client.request(method, f"{BASE}/{new_id('nosuchds')}"), 400, "AsyncQueryNotFoundException")
    # a session id is not a query id
    assert_error(client.request(method, f"{BASE}/{session}"), 400, "AsyncQueryNotFoundException")
    # a query id of one datasource is not found in another's index
    assert_error(client.request(method, f"{BASE}/{new_id(other_datasource.name)}"), 400, "AsyncQueryNotFoundException")


def test_unknown_paths_and_methods(client: httpx.Client) -> None:
    assert_error(client.get(f"{BASE}/a/b"), 404)
    assert_error(client.put(BASE, json={}), 405)
    assert_error(client.get("/nothing/here"), 404)


# -- listing sessions --------------------------------------------------------------------------------


def test_list_sessions(client: httpx.Client, store: Store, ds_name: str, other_datasource: Datasource) -> None:
    first = submit(client, ds_name)
    second = submit(client, ds_name)
    theirs = submit(client, other_datasource.name)
    job_starts(store, ds_name, first["sessionId"])
    qid = first["queryId"]
    move(store, ds_name, qid, StatementState.RUNNING)
    store.sessions.beat(
        the_session(store, ds_name, first["sessionId"]),
        running_statements=[RunningStatement(query_id=qid, start_time=123, progress=StatementProgress(tasks_total=4))],
    )
    for ds in (ds_name, other_datasource.name):
        driver(store).indices.refresh(index=request_index(ds))

    resp = client.get(f"{BASE}/_sessions")
    assert resp.status_code == 200
    sessions = resp.json()["sessions"]
    assert {s["sessionId"] for s in sessions} == {first["sessionId"], second["sessionId"], theirs["sessionId"]}
    assert sessions[0]["sessionId"] == first["sessionId"]  # most recently active first
    running = sessions[0]
    assert running["state"] == "running"
    assert running["sessionType"] == "interactive"
    assert running["dataSourceName"] == ds_name
    assert running["jobId"] and running["applicationId"] == "test-app"
    assert running["runningStatements"][0]["queryId"] == qid
    assert running["runningStatements"][0]["progress"]["tasksTotal"] == 4
    assert "pendingStatementIds" not in running

    only_running = client.get(f"{BASE}/_sessions", params={"state": "running"}).json()["sessions"]
    assert [s["sessionId"] for s in only_running] == [first["sessionId"]]
    mine = client.get(f"{BASE}/_sessions", params={"datasource": ds_name, "state": "not_started,RUNNING"}).json()
    assert {s["sessionId"] for s in mine["sessions"]} == {first["sessionId"], second["sessionId"]}
    assert len(client.get(f"{BASE}/_sessions", params={"size": 1}).json()["sessions"]) == 1
    assert client.get(f"{BASE}/_sessions", params={"state": "dead"}).json() == {"sessions": [], "poolJobs": []}


@pytest.mark.parametrize(
    "params",
    [{"state": "sleeping"}, {"size": 0}, {"size": 1001}, {"size": "many"}, {"datasource": "nosuchds"}],
    ids=["bad_state", "size_0", "size_1001", "size_text", "unknown_datasource"],
)
def test_list_sessions_bad_input(client: httpx.Client, params: dict[str, Any]) -> None:
    assert_error(client.get(f"{BASE}/_sessions", params=params), 400)


def test_list_sessions_before_any_index_exists(client: httpx.Client) -> None:
    resp = client.get(f"{BASE}/_sessions")
    assert resp.status_code == 200 and resp.json() == {"sessions": [], "poolJobs": []}


def test_an_unreadable_reference_result_is_failed_not_a_500() -> None:
    from async_query.replies import success_reply
    from query_core.models import ResultDoc

    broken = ResultDoc(
        query_id="q", status="SUCCESS", result=["{'s':'it's'}"], schema=["{'column_name':'s','data_type':'string'}"]
    )
    reply = json.loads(success_reply(broken))
    assert reply["status"] == "FAILED" and "cannot be read back" in reply["error"]
