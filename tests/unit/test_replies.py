"""Reply rendering that needs no index: the POST reply by query kind, GET replies by state."""

from __future__ import annotations

import json

import pytest

from async_query.dispatch import QueryKind
from async_query.replies import statement_reply, submitted_reply
from query_core.models import (
    ColumnSchema,
    LosslessResult,
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementDoc,
    StatementProgress,
    Versioned,
)
from query_core.states import StatementState


def test_only_interactive_replies_carry_a_session_id() -> None:
    assert submitted_reply(QueryKind.INTERACTIVE, "q", "s") == {"queryId": "q", "sessionId": "s"}
    for kind in (QueryKind.BATCH, QueryKind.STREAMING, QueryKind.INDEX_DML):
        assert submitted_reply(kind, "q", "s") == {"queryId": "q"}


def statement(state: StatementState, error: str = "") -> Versioned[StatementDoc]:
    doc = StatementDoc(
        statement_id="q", query_id="q", session_id="s", query="x", data_source_name="d", state=state, error=error
    )
    return Versioned(doc, 0, 1)


@pytest.mark.parametrize(
    ("state", "error", "body", "final"),
    [
        (StatementState.WAITING, "", {"status": "WAITING"}, False),
        (StatementState.RUNNING, "", {"status": "RUNNING"}, False),
        (StatementState.FAILED, "boom", {"status": "FAILED", "error": "boom"}, True),
        (StatementState.TIMEOUT, "", {"status": "TIMEOUT", "error": ""}, True),
        (StatementState.CANCELLED, "", {"status": "CANCELLED"}, True),
        (
            StatementState.SUCCESS,
            "",
            {"status": "FAILED", "error": "The result of this query is no longer available"},
            True,
        ),
    ],
)
def test_statement_replies(state: StatementState, error: str, body: dict[str, str], final: bool) -> None:
    reply = statement_reply(statement(state, error), None, None)
    assert json.loads(reply.body) == body
    assert reply.final is final


def test_running_reply_carries_the_heartbeats_progress() -> None:
    progress = StatementProgress(stages_total=1, tasks_total=10, tasks_completed=3)
    session = SessionDoc(
        session_id="s",
        data_source_name="d",
        running_statements=[RunningStatement(query_id="q", start_time=1, progress=progress)],
    )
    reply = statement_reply(statement(StatementState.RUNNING), Versioned(session, 0, 1), None)
    assert json.loads(reply.body) == {"status": "RUNNING", "progress": progress.model_dump(by_alias=True)}


def test_success_splices_the_stored_rows() -> None:
    lossless = LosslessResult(schema=[ColumnSchema(name="a", type="long")], datarows="[[1],[2]]", total=2)
    reply = statement_reply(
        statement(StatementState.SUCCESS), None, ResultDoc(query_id="q", status="SUCCESS", lossless=lossless)
    )
    assert (
        reply.body
        == b'{"status":"SUCCESS","schema":[{"name":"a","type":"long"}],"datarows":[[1],[2]],"total":2,"size":2}'
    )
    assert reply.final
