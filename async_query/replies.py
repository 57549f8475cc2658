"""Reply rendering: the JSON bodies of POST and GET, byte for byte as the wire contract has them,
and the POST's own body (:class:`CreateAsyncQueryRequest`, read alike by the REST layer and the
console).

GET replies are bytes, not dicts: a SUCCESS reply splices the result's stored rows (exact JSON
text) without re-parsing them. Finished replies never change, so the service caches them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from async_query.dispatch import QueryKind
from query_core.models import PoolJobDoc, ResultDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import StatementState, is_terminal
from query_core.store.results import ResultPage


class CreateAsyncQueryRequest(BaseModel):
    """The POST body. Unknown fields are refused, as the reference refuses them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    datasource: str = Field(min_length=1)
    lang: Literal["sql", "ppl"]
    query: str = Field(min_length=1)
    session_id: str | None = Field(default=None, alias="sessionId")

    @field_validator("lang", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value



@dataclass(frozen=True)
class Reply:
    """A GET reply, and whether it is final (the statement is terminal: the reply may be cached)."""

    body: bytes
    final: bool


# -- POST -----------------------------------------------------------------------------------------


def submitted_reply(kind: QueryKind, query_id: str, session_id: str | None) -> dict[str, Any]:
    """The POST reply: ``sessionId`` only for interactive queries (``docs/api.md``), which
    clients keep and send back; other kinds' sessions are not for reuse."""
    if kind is QueryKind.INTERACTIVE:
        return {"queryId": query_id, "sessionId": session_id}
    return {"queryId": query_id}


# -- GET ------------------------------------------------------------------------------------------


def statement_reply(
    statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None, result: ResultDoc | None
) -> Reply:
    """The GET reply for a statement in its current state.

    ``result`` is read only for a SUCCESS statement (see :func:`needs_result`); ``session`` gives a
    running statement's progress.
    """
    doc = statement.doc
    final = is_terminal(doc.state)
    if doc.state != StatementState.SUCCESS:
        return Reply(not_success_reply(doc, session), final)
    if result is None:
        # The job writes the result before it marks the statement success; a missing result
        # means it was deleted (housekeeping) or never written by a foreign job.
        return Reply(GONE, final)
    return Reply(success_reply(result), final)


#: The reply for a successful statement whose result (or part of it) is no longer stored.
GONE = b'{"status":"FAILED","error":"The result of this query is no longer available"}'


def needs_result(statement: StatementDoc) -> bool:
    """Whether the reply for ``statement`` is built from its result document."""
    return statement.state == StatementState.SUCCESS


def not_success_reply(doc: StatementDoc, session: Versioned[SessionDoc] | None) -> bytes:
    """WAITING, RUNNING (with Spark's progress when the heartbeat has it), FAILED, CANCELLED, TIMEOUT."""
    body: dict[str, Any] = {"status": doc.state.value.upper()}
    if doc.error or doc.state in (StatementState.FAILED, StatementState.TIMEOUT):
        body["error"] = doc.error
    progress = _progress_of(doc.query_id, session) if doc.state == StatementState.RUNNING else None
    if progress is not None:
        body["progress"] = progress
    return _json(body)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json(value: Any) -> bytes:
    return _json_text(value).encode()


def _progress_of(query_id: str, session: Versioned[SessionDoc] | None) -> dict[str, int] | None:
    """Spark's progress for a running statement, from its session's last heartbeat."""
    if session is None:
        return None
    for running in session.doc.running_statements:
        if running.query_id == query_id and running.progress is not None:
            return running.progress.model_dump(by_alias=True)
    return None


#: The reply for a result written in the reference's encoding that does not read back.
_UNREADABLE = {
    "status": "FAILED",
    "error": "The result was written in the reference's lossy form and cannot be read back",
}


@dataclass(frozen=True)
class Page:
    """The rows GET asks for with ``offset`` and ``size`` (an addition: ``docs/api.md``)."""

    offset: int
    size: int


def success_reply(result: ResultDoc) -> bytes:
    """The SUCCESS reply, splicing the stored lossless rows (exact JSON text) without re-parsing:
    the rows of the result's first document, and, for a result stored in several documents or cut
    at the cap, where the rest is (``resultRows``, ``truncated``)."""
    if result.lossless is not None:
        schema = _schema_text(result)
        total = result.lossless.total
        rows = result.lossless.datarows
    else:
        try:
            schema_list, row_list = reference_rows(result)
        except (ValueError, KeyError, TypeError, AttributeError):
            # The reference's quote-swapped encoding cannot hold every value (a quote in a
            # string breaks it): say so rather than guess.
            return _json(_UNREADABLE)
        schema, rows, total = (
            _json_text(schema_list),
            _json_text(row_list),
            len(row_list),
        )
    return _success_text(schema, rows, total, _extent(result))


def page_reply(result: ResultDoc, page: ResultPage | None, asked: Page) -> bytes:
    """A SUCCESS reply for the rows ``asked`` for: ``page`` as read from the result's documents,
    or, for a result written by the reference's job (no lossless form, one document), sliced from
    its rows here."""
    if page is not None:
        schema, rows, count = _schema_text(result), page.datarows, page.count
    else:
        try:
            schema_list, row_list = reference_rows(result)
        except (ValueError, KeyError, TypeError, AttributeError):
            return _json(_UNREADABLE)
        chosen = row_list[asked.offset : asked.offset + asked.size]
        schema, rows, count = _json_text(schema_list), _json_text(chosen), len(chosen)
    return _success_text(schema, rows, count, f',"offset":{asked.offset}' + _extent(result, always=True))


def _schema_text(result: ResultDoc) -> str:
    assert result.lossless is not None
    return _json_text([c.model_dump() for c in result.lossless.schema_])


def _extent(result: ResultDoc, always: bool = False) -> str:
    """The additions saying how large the whole result is: ``resultRows`` (rows stored, over every
    document) and ``truncated`` (the query had more rows than the caps let through). Left out of a
    reply without paging when the first document holds the whole result (the reference's shape)."""
    chunks = result.chunks
    if chunks is None and not always:
        return ""
    if chunks is not None:
        rows, truncated = chunks.rows, chunks.truncated
    elif result.lossless is not None:
        rows, truncated = result.lossless.total, False
    else:
        rows, truncated = len(result.result), False
    return f',"resultRows":{rows},"truncated":{"true" if truncated else "false"}'


def _success_text(schema: str, rows: str, count: int, extra: str) -> bytes:
    text = f'{{"status":"SUCCESS","schema":{schema},"datarows":{rows},"total":{count},"size":{count}{extra}}}'
    return text.encode()


def reference_rows(result: ResultDoc) -> tuple[list[dict[str, str]], list[list[Any]]]:
    """Schema and rows from the reference's lossy encoding (for results written by its job)."""
    columns = [json.loads(c.replace("'", '"')) for c in result.schema_]
    schema = [{"name": c["column_name"], "type": c["data_type"]} for c in columns]
    rows = []
    for text in result.result:
        row = json.loads(text.replace("'", '"'))
        rows.append([row.get(c["name"]) for c in schema])
    return schema, rows


def session_view(session: SessionDoc) -> dict[str, Any]:
    """A session as the session listing shows it (``docs/api.md``)."""
    return session.model_dump(
        by_alias=True,
        mode="json",
        include={
            "session_id",
            "session_type",
            "state",
            "data_source_name",
            "application_id",
            "job_id",
            "last_update_time",
            "job_start_time",
            "error",
            "running_statements",
            "submitted_by",
        },
    )


def pool_job_view(job: PoolJobDoc) -> dict[str, Any]:
    """A warm pool job as the session listing shows it."""
    return job.model_dump(
        by_alias=True,
        mode="json",
        include={
            "slot_id",
            "pool_key",
            "state",
            "engine",
            "application_id",
            "job_id",
            "job_start_time",
            "last_update_time",
            "session_id",
            "data_source_name",
            "error",
        },
    )
