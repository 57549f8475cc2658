"""Authorization on the query path, on the in-memory twin (docs/security.md): a datasource's
``allowedRoles`` on POST, a query for its submitter (or an admin) on GET and DELETE, a session for
the user who started it, and the session listing filtered by user in the search itself."""

from __future__ import annotations

import asyncio
import json

import pytest

from async_query.datasources import Datasource, local_datasource
from async_query.runtime import Plugin
from async_query.security.errors import ForbiddenError
from async_query.security.principal import ANONYMOUS, Principal
from async_query.service import Page, SubmitRequest
from query_core.errors import QueryNotFoundError
from query_core.ids import REQUEST_INDEX_PATTERN, new_id
from query_core.models import SessionDoc, StatementDoc
from query_core.states import SessionState, SessionType, StatementState
from query_core.store import Query, Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, seed

ALICE = Principal.of("alice", ["analysts"])
BOB = Principal.of("bob", ["analysts"])
EVE = Principal.of("eve", ["marketing", "lake_read_only"])
ROOT = Principal.of("root", ["all_access"])
LAKE = Datasource(name="lake", connector="local", allowed_roles=["analysts", "ops"])
LOCAL = local_datasource("local")  # no allowedRoles: admins only

QUERIES = {
    "interactive": "SELECT 1",
    "batch": "REFRESH SKIPPING INDEX ON lake.default.http_logs",
    "streaming": "CREATE SKIPPING INDEX ON lake.default.http_logs (status VALUE_SET) WITH (auto_refresh = true)",
    "index_dml": "DROP SKIPPING INDEX ON lake.default.http_logs",
    "malformed": "CREATE SKIPPING INDEX ON",
}


@pytest.fixture
def launcher() -> RecordingLauncher:
    return RecordingLauncher()


@pytest.fixture
def plugin(make_plugin: PluginFactory, launcher: RecordingLauncher) -> Plugin:
    return make_plugin(launcher, datasources=[LAKE, LOCAL])


def submit(plugin: Plugin, who: Principal, session_id: str | None = None, ds: str = "lake") -> str:
    return plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", session_id, principal=who)).query_id


def status(plugin: Plugin, query_id: str, who: Principal) -> str:
    return str(json.loads(plugin.service.get(query_id, who))["status"])


def everything_in(store: Store) -> list[object]:
    store.index.refresh(REQUEST_INDEX_PATTERN)
    return list(store.index.search(REQUEST_INDEX_PATTERN, Query()))


# -- POST: the datasource's allowedRoles -------------------------------------------------------------


@pytest.mark.parametrize("query", list(QUERIES.values()), ids=list(QUERIES))
def test_a_caller_outside_allowed_roles_gets_the_references_refusal_and_nothing_starts(
    plugin: Plugin, launcher: RecordingLauncher, store: Store, query: str
) -> None:
    alices = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", principal=ALICE))
    launched, written = len(launcher.started), len(everything_in(store))
    for session_id in (None, alices.session_id):
        with pytest.raises(ForbiddenError) as refused:
            plugin.service.submit(SubmitRequest("lake", "sql", query, session_id, principal=EVE))
        assert refused.value.http_status == 403
        assert refused.value.message == (
            "User is not authorized to access datasource lake. "
            "User should be mapped to any of the roles in [analysts, ops] for access."
        )
    assert len(launcher.started) == launched
    assert len(everything_in(store)) == written
    plugin.signals.flush()
    session = store.sessions.get("lake", alices.session_id)
    assert session is not None and session.doc.pending_statement_ids == [alices.query_id]


def test_an_empty_allowed_roles_list_admits_admins_only(plugin: Plugin, launcher: RecordingLauncher) -> None:
    with pytest.raises(ForbiddenError, match=r"access datasource local\. .* roles in \[\] for access\.$"):
        submit(plugin, ALICE, ds="local")
    assert launcher.started == []
    assert status(plugin, submit(plugin, ROOT, ds="local"), ROOT) == "WAITING"


def test_the_default_caller_is_unchanged(plugin: Plugin, store: Store) -> None:
    """Under ``none`` every caller is the anonymous admin: any datasource, any session, any query;
    and the documents stay in the reference's shape (its statement parser refuses unknown fields)."""
    first = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 1"))
    again = plugin.service.submit(SubmitRequest("local", "sql", "SELECT 2", first.session_id))
    assert again.session_id == first.session_id
    assert status(plugin, first.query_id, ANONYMOUS) == "WAITING"
    plugin.service.cancel(again.query_id)
    statement = store.statements.get("local", first.query_id)
    session = store.sessions.get("local", first.session_id)
    assert statement is not None and session is not None
    assert "submittedBy" not in statement.doc.to_source() and "submittedBy" not in session.doc.to_source()


@pytest.mark.parametrize("kind", ["interactive", "batch", "streaming", "index_dml"])
def test_the_submitter_is_recorded_on_the_statement_and_its_session(
    plugin: Plugin, store: Store, kind: str
) -> None:
    submitted = plugin.service.submit(SubmitRequest("lake", "sql", QUERIES[kind], principal=ALICE))
    statement = store.statements.get("lake", submitted.query_id)
    session = store.sessions.get("lake", submitted.session_id)
    assert statement is not None and session is not None
    assert statement.doc.submitted_by == session.doc.submitted_by == "alice"
    assert statement.doc.to_source()["submittedBy"] == "alice"


# -- POST into a session ---------------------------------------------------------------------------


def test_submitting_into_another_users_session_starts_one_of_ones_own(
    plugin: Plugin, launcher: RecordingLauncher, store: Store
) -> None:
    alices = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", principal=ALICE))
    again = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 2", alices.session_id, principal=ALICE))
    assert again.session_id == alices.session_id and len(launcher.started) == 1

    for intruder in (BOB, ROOT):  # an admin too: the session's Spark state is alice's
        theirs = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 3", alices.session_id, principal=intruder))
        assert theirs.session_id != alices.session_id
        session = store.sessions.get("lake", theirs.session_id)
        assert session is not None and session.doc.submitted_by == intruder.name
    assert len(launcher.started) == 3
    plugin.signals.flush()
    session = store.sessions.get("lake", alices.session_id)
    assert session is not None and session.doc.pending_statement_ids == [alices.query_id, again.query_id]


def test_a_session_with_no_recorded_starter_takes_admins_statements_only(
    plugin: Plugin, launcher: RecordingLauncher
) -> None:
    """A session written before starters were recorded (or by the reference plugin)."""
    session_id = new_id("lake")
    seed(plugin.store, SessionDoc(session_id=session_id, data_source_name="lake", session_type=SessionType.INTERACTIVE))
    assert plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", session_id, principal=ROOT)).session_id == session_id
    assert plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", session_id)).session_id == session_id  # none
    assert plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", session_id, principal=ALICE)).session_id != session_id
    assert len(launcher.started) == 1


# -- GET and DELETE: the submitter or an admin -----------------------------------------------------


def test_a_user_cannot_read_another_users_query(plugin: Plugin) -> None:
    query_id = submit(plugin, ALICE)
    with pytest.raises(ForbiddenError) as refused:
        plugin.service.get(query_id, BOB)
    assert refused.value.message == (
        f"User bob is not authorized to access async query {query_id}: it was submitted by another user."
    )
    assert "alice" not in refused.value.message
    with pytest.raises(ForbiddenError):
        asyncio.run(plugin.service.get_without_blocking(query_id, BOB))
    assert status(plugin, query_id, ALICE) == "WAITING"
    assert status(plugin, query_id, ROOT) == "WAITING"


def test_a_user_cannot_page_through_another_users_result(plugin: Plugin) -> None:
    """GET with ``?offset=`` reads result documents apart from the reply cache: the same check."""
    query_id = submit(plugin, ALICE)
    with pytest.raises(ForbiddenError):
        plugin.service.get_page(query_id, Page(offset=0, size=10), BOB)
    assert json.loads(plugin.service.get_page(query_id, Page(offset=0, size=10), ALICE))["status"] == "WAITING"
    assert json.loads(plugin.service.get_page(query_id, Page(offset=0, size=10), ROOT))["status"] == "WAITING"


def test_an_unknown_id_is_the_same_400_for_everyone(plugin: Plugin) -> None:
    """A non-owner learns that an id exists (a 403), nothing more; an unknown id stays a 400."""
    for who in (BOB, ROOT):
        with pytest.raises(QueryNotFoundError):
            plugin.service.get(new_id("lake"), who)
        with pytest.raises(QueryNotFoundError):
            plugin.service.cancel(new_id("lake"), who)


def test_a_non_owners_get_neither_reads_the_result_nor_moves_the_query(plugin: Plugin, store: Store) -> None:
    """The check comes before anything the handler does: here, failing a statement whose session
    has ended."""
    submitted = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", principal=ALICE))
    session = store.sessions.get("lake", submitted.session_id)
    assert session is not None
    store.sessions.end(session, SessionState.DEAD, "idle")
    plugin.reads.session_cache.forget(submitted.session_id)
    with pytest.raises(ForbiddenError):
        plugin.service.get(submitted.query_id, BOB)
    statement = store.statements.get("lake", submitted.query_id)
    assert statement is not None and statement.doc.state == StatementState.WAITING
    assert status(plugin, submitted.query_id, ALICE) == "FAILED"


def test_a_cached_reply_is_served_to_its_submitter_only(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin(datasources=[LAKE])
    query_id = submit(plugin, ALICE)
    plugin.service.cancel(query_id, ALICE)
    assert status(plugin, query_id, ALICE) == "CANCELLED"
    assert plugin.reads.replies.get(query_id) is not None  # a finished reply is cached
    for call in (lambda: plugin.service.get(query_id, BOB), lambda: asyncio.run(plugin.service.get_without_blocking(query_id, BOB))):
        with pytest.raises(ForbiddenError):
            call()

    # Another process, whose cache was filled by an admin's GET, does not know the submitter:
    # it reads the statement before it answers anyone else.
    other = make_plugin(datasources=[LAKE])
    assert status(other, query_id, ROOT) == "CANCELLED"
    assert other.reads.replies.get(query_id) is not None and other.reads.owner_of_query.get(query_id) is None
    assert asyncio.run(other.service.get_without_blocking(query_id, BOB)) is None  # not the cached reply
    with pytest.raises(ForbiddenError):
        other.service.get(query_id, BOB)
    assert status(other, query_id, ALICE) == "CANCELLED"


def test_a_query_with_no_recorded_submitter_is_for_admins_only(plugin: Plugin) -> None:
    session_id, query_id = new_id("lake"), new_id("lake")
    seed(plugin.store, SessionDoc(session_id=session_id, data_source_name="lake", state=SessionState.DEAD))
    seed(
        plugin.store,
        StatementDoc(
            statement_id=query_id,
            query_id=query_id,
            session_id=session_id,
            query="SELECT 1",
            data_source_name="lake",
            state=StatementState.FAILED,
        ),
    )
    assert status(plugin, query_id, ROOT) == "FAILED"
    with pytest.raises(ForbiddenError):
        plugin.service.get(query_id, ALICE)
    with pytest.raises(ForbiddenError):
        plugin.service.cancel(query_id, ALICE)


def test_a_user_cannot_cancel_another_users_query(
    plugin: Plugin, launcher: RecordingLauncher, store: Store
) -> None:
    query_id = submit(plugin, ALICE)
    finished = submit(plugin, ALICE)
    plugin.service.cancel(finished, ALICE)
    for target in (query_id, finished):  # not even learning that one has finished (a 400 would say so)
        with pytest.raises(ForbiddenError):
            plugin.service.cancel(target, BOB)
    statement = store.statements.get("lake", query_id)
    assert statement is not None and statement.doc.state == StatementState.WAITING
    assert launcher.cancelled == []
    plugin.service.cancel(query_id, ROOT)
    assert status(plugin, query_id, ALICE) == "CANCELLED"


# -- the session listing ---------------------------------------------------------------------------


def test_the_listing_shows_a_user_their_own_sessions_filtered_in_the_search(
    plugin: Plugin, store: Store
) -> None:
    bobs = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", principal=BOB)).session_id
    alices = [plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", principal=ALICE)).session_id for _ in range(3)]
    store.index.refresh(REQUEST_INDEX_PATTERN)

    def listed(who: Principal, size: int = 100) -> set[str]:
        return {s.session_id for s in plugin.service.sessions(None, None, size, who)}

    assert listed(ALICE) == set(alices)
    assert listed(BOB) == {bobs}
    # bob's is the oldest: a filter applied after a search of the newest one would find nothing
    assert listed(BOB, size=1) == {bobs}
    assert listed(EVE) == set()
    assert listed(ROOT) == {bobs, *alices} == listed(ANONYMOUS)
    assert {s.session_id for s in plugin.service.sessions("lake", [SessionState.NOT_STARTED], 2, ALICE)} < set(alices)
