"""Query kinds over real HTTP: what the classifier refuses today, and GET/DELETE routed by the
``sessionType`` the documents record (docs/flint.md). No Spark: a RecordingLauncher starts nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from async_query.api import BASE
from async_query.runtime import Plugin
from query_core.flint import FlintSyntaxError, parse
from query_core.ids import new_id
from query_core.models import SessionDoc, StatementDoc
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, seed


@pytest.fixture
def plugin(make_plugin: PluginFactory) -> Plugin:
    return make_plugin()


def post(client: httpx.Client, ds: str, query: str, lang: str = "sql") -> httpx.Response:
    return client.post(BASE, json={"datasource": ds, "lang": lang, "query": query})


def reference_error(resp: httpx.Response, error_type: str) -> str:
    """Asserts the reference's 400 error shape and returns its details."""
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert set(body) == {"status", "error"} and body["status"] == 400
    assert set(body["error"]) == {"type", "reason", "details"}
    assert body["error"]["reason"] == "Invalid Request"
    assert body["error"]["type"] == error_type
    assert "Traceback" not in resp.text
    details = body["error"]["details"]
    assert isinstance(details, str) and details
    return details


def nothing_written(plugin: Plugin, store: Store, ds: str, launcher: RecordingLauncher) -> None:
    assert launcher.started == []
    assert store.sessions.find(ds, list(SessionState)) == []


STREAMING = {
    "create_auto": (
        "CREATE INDEX idx ON {ds}.db.t (a, b) WITH (auto_refresh = true)",
        "flint_{ds}_db_t_idx_index",
    ),
    "alter_auto": ("ALTER MATERIALIZED VIEW db.mv WITH (auto_refresh = true)", "flint_{ds}_db_mv"),
    "recover": ("RECOVER INDEX JOB flint_{ds}_db_t_idx_index", "flint_{ds}_db_t_idx_index"),
}


def test_recover_of_another_datasource_s_index_is_refused_and_nothing_is_written(
    client: httpx.Client, plugin: Plugin, store: Store, ds_name: str, launcher: RecordingLauncher
) -> None:
    resp = post(client, ds_name, "RECOVER INDEX JOB flint_glue_db_t_idx_index")
    assert resp.status_code == 400, resp.text
    assert f"is not of this query's datasource '{ds_name}'" in resp.json()["error"]["details"]
    nothing_written(plugin, store, ds_name, launcher)


@pytest.mark.parametrize(("query", "index"), list(STREAMING.values()), ids=list(STREAMING))
def test_streaming_statements_launch_a_streaming_job_named_by_its_index(
    client: httpx.Client, store: Store, ds_name: str, launcher: RecordingLauncher, query: str, index: str
) -> None:
    resp = post(client, ds_name, query.format(ds=ds_name))
    assert resp.status_code == 201, resp.text
    assert set(resp.json()) == {"queryId"}
    [request] = launcher.started
    assert request.session_type == SessionType.STREAMING
    assert request.job_name("async-query") == f"async-query:streaming:{index.format(ds=ds_name)}"
    assert request.conf["spark.flint.job.type"] == "streaming"
    assert request.conf["spark.flint.index.checkpoint.mandatory"] == "true"  # this launcher names no root
    statement = store.statements.get(ds_name, resp.json()["queryId"])
    assert statement is not None and statement.doc.state == StatementState.WAITING
    session = store.sessions.get(ds_name, statement.doc.session_id)
    assert session is not None and session.doc.session_type == SessionType.STREAMING
    assert session.doc.job_id == "job-1"


@pytest.mark.parametrize(
    ("query", "session_type", "launches"),
    [
        ("CREATE SKIPPING INDEX ON t (a PARTITION)", SessionType.BATCH, 1),
        ("REFRESH MATERIALIZED VIEW mv", SessionType.BATCH, 1),
        ("VACUUM INDEX idx ON t", SessionType.BATCH, 1),
        ("DROP SKIPPING INDEX ON t", SessionType.LOCAL, 0),
        ("ALTER INDEX idx ON t WITH (auto_refresh = false)", SessionType.LOCAL, 0),
    ],
)
def test_batch_and_index_dml_statements_are_accepted_without_a_session_id(
    client: httpx.Client,
    store: Store,
    ds_name: str,
    launcher: RecordingLauncher,
    query: str,
    session_type: SessionType,
    launches: int,
) -> None:
    resp = post(client, ds_name, query)
    assert resp.status_code == 201, resp.text
    assert set(resp.json()) == {"queryId"}
    assert len(launcher.started) == launches
    statement = store.statements.get(ds_name, resp.json()["queryId"])
    assert statement is not None and statement.doc.query == query
    session = store.sessions.get(ds_name, statement.doc.session_id)
    assert session is not None and session.doc.session_type == session_type


@pytest.mark.parametrize(
    "query",
    [
        "CREATE SKIPPING INDEX ON t (a NO_SUCH_KIND)",
        "DROP INDEX ON t",
        "REFRESH MATERIALIZED VIEW",
        "CREATE INDEX idx ON t (a) WITH (no_such_option = 1)",
        "ALTER SKIPPING INDEX ON t WITH (refresh_interval = '1 minute')",
        "SHOW FLINT INDEX glue",
    ],
)
def test_a_malformed_flint_statement_is_a_400_with_the_parsers_position(
    client: httpx.Client,
    plugin: Plugin,
    store: Store,
    ds_name: str,
    launcher: RecordingLauncher,
    query: str,
) -> None:
    with pytest.raises(FlintSyntaxError) as expected:
        parse(query)
    details = reference_error(post(client, ds_name, query), "SyntaxCheckException")
    assert details == expected.value.message
    if expected.value.line is not None:
        assert f"(line {expected.value.line}, column {expected.value.column})" in details
    nothing_written(plugin, store, ds_name, launcher)


def test_the_parsers_position_is_in_the_reply(client: httpx.Client, ds_name: str) -> None:
    details = reference_error(post(client, ds_name, "DROP INDEX ON t"), "SyntaxCheckException")
    assert "line 1, column" in details


@pytest.mark.parametrize(
    ("query", "lang"),
    [
        ("SHOW FLINT INDEX IN {ds}", "sql"),
        ("DESC SKIPPING INDEX ON t", "sql"),
        ("DESC index", "sql"),  # a table named index, for Spark
        ("source = t | where a > 1 | stats count() by b", "ppl"),
    ],
)
def test_interactive_queries_are_accepted_as_before(
    client: httpx.Client, plugin: Plugin, launcher: RecordingLauncher, ds_name: str, query: str, lang: str
) -> None:
    resp = post(client, ds_name, query.format(ds=ds_name), lang)
    assert resp.status_code == 201, resp.text
    assert set(resp.json()) == {"queryId", "sessionId"}
    # A browse statement (SHOW FLINT INDEX) is answered by the read model, its session started in
    # the background: wait for that start before counting.
    browse = plugin.handlers.interactive.browse
    if browse is not None:
        browse.wait_for_starts()
    assert len(launcher.started) == 1


@pytest.mark.parametrize(
    "query",
    [
        "SHOW FLINT INDEXES IN other",
        "SHOW FLINT INDEX EXTENDED IN other.default",
        "SHOW MATERIALIZED VIEWS IN OTHER.default",
        "DESC SKIPPING INDEX ON other.default.secret",
        "DROP INDEX cov ON other.default.secret",
        "CREATE MATERIALIZED VIEW other.default.mvx AS SELECT a FROM e",
        "CREATE SKIPPING INDEX ON other.db.t (a VALUE_SET)",
        "REFRESH INDEX cov ON other.default.t",
        "SHOW INDEXES ON other.default.t",
    ],
)
def test_a_flint_statement_about_another_datasource_is_a_400_and_nothing_is_written(
    client: httpx.Client, plugin: Plugin, store: Store, ds_name: str, launcher: RecordingLauncher, query: str
) -> None:
    """An attack: sent to one datasource, a Flint statement naming another as its catalog read,
    created or dropped that one's indexes (their names carry the catalog), past its allowedRoles."""
    details = reference_error(post(client, ds_name, query), "IllegalArgumentException")
    assert details.startswith(f"catalog 'other' is not this query's datasource {ds_name!r}") or details.startswith(
        f"catalog 'OTHER' is not this query's datasource {ds_name!r}"
    )
    nothing_written(plugin, store, ds_name, launcher)
    # Its own name, in any case, is its own.
    assert post(client, ds_name, f"SHOW FLINT INDEXES IN {ds_name.upper()}").status_code == 201


def statement_in(store: Store, ds: str, session_type: SessionType | None, **fields: Any) -> str:
    """A statement written by hand into a session of ``session_type`` (None: no session document)."""
    session_id = new_id(ds)
    if session_type is not None:
        seed(store, SessionDoc(session_id=session_id, data_source_name=ds, session_type=session_type))
    query_id = new_id(ds)
    seed(store,
        StatementDoc(
            statement_id=query_id, query_id=query_id, session_id=session_id, query="x", data_source_name=ds, **fields
        )
    )
    return query_id


@pytest.mark.parametrize(
    ("session_type", "refusal"),
    [
        (
            SessionType.STREAMING,
            "can't cancel index DML query, using ALTER auto_refresh=off statement to stop job, "
            "using VACUUM statement to stop job and delete data",
        ),
        (SessionType.LOCAL, "can't cancel index DML query"),
    ],
)
def test_get_and_delete_route_on_the_recorded_session_type(
    client: httpx.Client, store: Store, ds_name: str, session_type: SessionType, refusal: str
) -> None:
    query_id = statement_in(store, ds_name, session_type)
    assert client.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}
    assert reference_error(client.delete(f"{BASE}/{query_id}"), "IllegalArgumentException") == refusal
    assert client.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}  # untouched

    failed = statement_in(store, ds_name, session_type, state=StatementState.FAILED, error="boom")
    assert client.get(f"{BASE}/{failed}").json() == {"status": "FAILED", "error": "boom"}


def test_a_statement_without_a_session_document_is_interactive(
    client: httpx.Client, store: Store, ds_name: str
) -> None:
    """As the reference's statements are when their session document is gone: GET and DELETE work."""
    query_id = statement_in(store, ds_name, None)
    assert client.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}
    assert client.delete(f"{BASE}/{query_id}").status_code == 204
    assert client.get(f"{BASE}/{query_id}").json() == {"status": "CANCELLED"}
