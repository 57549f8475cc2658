"""Authorization on the query path over real HTTP with ``basic`` authentication, as an attacker
would probe it (docs/security.md): documents in a real index server, no Spark (a RecordingLauncher).
The logic's cases are unit tests (tests/unit/test_query_authorization.py); these hold the wiring:
the caller reaches the service on every endpoint, refusals are in the error shape, and the audit
log says who was refused what."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.datasources import Datasource
from async_query.runtime import Plugin
from async_query.security.users import UsersFile
from query_core.ids import REQUEST_INDEX_PATTERN, request_index
from query_core.states import StatementState
from query_core.store import Query, Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, RecordingLauncher, client_of, driver, serve_http

PASSWORDS = {"root": "root-Pa55word-1", "bob": "bob-Pa55word-22", "carol": "carol-Pa55word-3"}
ROLES = {"root": ["all_access"], "bob": ["analysts"], "carol": ["analysts"]}


@pytest.fixture(scope="module")
def users_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.json"
    users = UsersFile(path, FAST_HASHER)
    for name, password in PASSWORDS.items():
        users.add(name, password, ROLES[name])
    return path


@dataclass
class Deployment:
    url: str
    plugin: Plugin
    ds: str

    @property
    def launcher(self) -> RecordingLauncher:
        found = self.plugin.launchers.shared["local"]
        assert isinstance(found, RecordingLauncher)
        return found

    def as_user(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=httpx.BasicAuth(name, PASSWORDS[name]), timeout=30, verify=CLIENT_SSL)

    def audit(self) -> list[dict[str, Any]]:
        path = self.plugin.settings.data_dir / "audit" / "audit.log"
        return [json.loads(line) for line in path.read_text().splitlines()]


def deployed(make_plugin: PluginFactory, users_path: Path, datasource: Datasource, roles: list[str]) -> Iterator[Deployment]:
    lake = datasource.model_copy(update={"allowed_roles": roles})
    plugin = make_plugin(auth="basic", users_file=users_path, datasources=[lake])
    with serve_http(create_app(plugin)) as url:
        yield Deployment(url, plugin, lake.name)


@pytest.fixture
def analysts(make_plugin: PluginFactory, users_path: Path, datasource: Datasource) -> Iterator[Deployment]:
    """A datasource bob and carol (``analysts``) may query."""
    yield from deployed(make_plugin, users_path, datasource, ["analysts"])


def post(client: httpx.Client, ds: str, session_id: str | None = None) -> httpx.Response:
    body = {"datasource": ds, "lang": "sql", "query": "SELECT 1", **({"sessionId": session_id} if session_id else {})}
    return client.post(BASE, json=body)


def refusal(resp: httpx.Response) -> str:
    """The API's error shape for a 403; returns its details."""
    assert resp.status_code == 403, resp.text
    body = resp.json()
    assert set(body) == {"status", "error"} and body["status"] == 403
    assert body["error"]["type"] == "OpenSearchSecurityException" and body["error"]["reason"] == "Forbidden"
    return str(body["error"]["details"])


def test_a_user_outside_allowed_roles_gets_the_references_refusal_and_no_session_starts(
    make_plugin: PluginFactory, users_path: Path, datasource: Datasource, store: Store
) -> None:
    for deployment in deployed(make_plugin, users_path, datasource, ["data_eng", "ops"]):
        with deployment.as_user("bob") as bob:
            resp = post(bob, deployment.ds)
        assert refusal(resp) == (
            f"User is not authorized to access datasource {deployment.ds}. "
            "User should be mapped to any of the roles in [data_eng, ops] for access."
        )
        assert deployment.launcher.started == []
        store.index.refresh(REQUEST_INDEX_PATTERN)
        assert store.index.search(request_index(deployment.ds), Query()) == []
        [line] = deployment.audit()
        assert (line["user"], line["action"], line["datasource"], line["queryId"], line["outcome"]) == (
            "bob",
            "query.submit",
            deployment.ds,
            None,
            "forbidden",
        )
        with deployment.as_user("root") as root:  # an admin may
            assert post(root, deployment.ds).status_code == 201


def test_a_user_cannot_read_or_cancel_another_users_query(analysts: Deployment, store: Store) -> None:
    with analysts.as_user("bob") as bob, analysts.as_user("carol") as carol, analysts.as_user("root") as root:
        query_id = post(bob, analysts.ds).json()["queryId"]
        for resp in (carol.get(f"{BASE}/{query_id}"), carol.delete(f"{BASE}/{query_id}")):
            assert refusal(resp) == (
                f"User carol is not authorized to access async query {query_id}: it was submitted by another user."
            )
        statement = store.statements.get(analysts.ds, query_id)
        assert statement is not None and statement.doc.state == StatementState.WAITING
        assert root.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}
        assert bob.delete(f"{BASE}/{query_id}").status_code == 204
        assert bob.get(f"{BASE}/{query_id}").json() == {"status": "CANCELLED"}  # now a cached reply
        refusal(carol.get(f"{BASE}/{query_id}"))

    lines = [(x["user"], x["action"], x["outcome"], x["status"]) for x in analysts.audit()]
    assert lines == [
        ("bob", "query.submit", "ok", 201),
        ("carol", "query.get", "forbidden", 403),
        ("carol", "query.cancel", "forbidden", 403),
        ("root", "query.get", "ok", 200),
        ("bob", "query.cancel", "ok", 204),
        ("bob", "query.get", "ok", 200),
        ("carol", "query.get", "forbidden", 403),
    ]
    assert all(x["queryId"] == query_id and x["datasource"] == analysts.ds for x in analysts.audit())


def test_sessions_belong_to_the_user_who_started_them(analysts: Deployment, store: Store) -> None:
    with analysts.as_user("bob") as bob, analysts.as_user("carol") as carol, analysts.as_user("root") as root:
        bobs = post(bob, analysts.ds).json()["sessionId"]
        assert post(bob, analysts.ds, bobs).json()["sessionId"] == bobs
        carols = post(carol, analysts.ds, bobs).json()["sessionId"]  # bob's: carol gets her own
        assert carols != bobs
        assert len(analysts.launcher.started) == 2
        store.index.refresh(REQUEST_INDEX_PATTERN)

        def listed(client: httpx.Client) -> set[str]:
            resp = client.get(f"{BASE}/_sessions", params={"datasource": analysts.ds})
            assert resp.status_code == 200, resp.text
            return {s["sessionId"] for s in resp.json()["sessions"]}

        assert listed(bob) == {bobs}
        assert listed(carol) == {carols}
        assert listed(root) == {bobs, carols}
    assert [x["datasource"] for x in analysts.audit() if x["action"] == "sessions.list"] == [analysts.ds] * 3


@pytest.mark.bare_cluster
def test_a_request_index_of_an_older_version_gets_the_submitter_field(
    make_plugin: PluginFactory, users_path: Path, datasource: Datasource, store: Store
) -> None:
    """An index created before ``submittedBy`` was mapped (``dynamic: false``: an unmapped field
    is not searchable) has the field added on this process's first write to it, so that the
    session listing finds a user's new sessions there; an older template is replaced too."""
    old = request_index(datasource.name)
    properties = {"type": {"type": "keyword"}, "state": {"type": "keyword"}, "lastUpdateTime": {"type": "date"}}
    mappings = {"dynamic": False, "properties": properties}
    assert store.admin.create_index(old, {"mappings": mappings})
    template = "async-query-request-index"
    older = {"index_patterns": [".query_execution_request_*"], "priority": 100, "template": {"mappings": mappings}}
    driver(store).indices.put_index_template(name=template, body=older)
    for deployment in deployed(make_plugin, users_path, datasource, ["analysts"]):
        with deployment.as_user("bob") as bob:
            session_id = post(bob, deployment.ds).json()["sessionId"]
            store.index.refresh(old)
            sessions = bob.get(f"{BASE}/_sessions").json()["sessions"]
        assert [s["sessionId"] for s in sessions] == [session_id]
        mapped = client_of(store).admin.mappings(old)[old]["properties"]
        assert mapped["submittedBy"] == {"type": "keyword"} and mapped["state"] == {"type": "keyword"}
        [found] = driver(store).indices.get_index_template(name=template)["index_templates"]
        assert "submittedBy" in found["index_template"]["template"]["mappings"]["properties"]
