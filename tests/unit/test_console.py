"""The web console's server side (docs/console.md), on the in-memory twin with a launcher that
starts nothing: its page and assets under a strict policy, the login cookie, CSRF, who sees which
datasources, queries and history, the operators' page, downloads, and the gateway leaving it
alone. The page itself is driven in a real Chromium by tests/e2e/test_console_browser.py."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import time
from collections.abc import Iterator
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.console.downloads import csv_cell, members
from async_query.console.guard import CSP
from async_query.console.tokens import CSRF_COOKIE, LOGIN_COOKIE, ConsoleTokens
from async_query.datasources import Datasource, local_datasource
from async_query.gateway import owns
from async_query.runtime import Plugin
from async_query.security.users import UsersFile
from query_core.states import StatementState
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, RecordingLauncher, serve_http
from tests.unit.test_result_pages import expected, make_rows, run_query

PASSWORDS = {"alice": "alice-Pa55word-1", "bob": "bob-Pa55word-22", "root": "root-Pa55word-333"}
API = "/console/api"


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    users = UsersFile(path, FAST_HASHER)
    users.add("alice", PASSWORDS["alice"], ["analysts"])
    users.add("bob", PASSWORDS["bob"], ["analysts"])
    users.add("root", PASSWORDS["root"], ["all_access"])
    return path


@pytest.fixture
def plugin(make_plugin: PluginFactory, users: Path, ds_name: str) -> Plugin:
    datasources = [
        local_datasource(ds_name).model_copy(update={"allowed_roles": ["analysts"]}),
        Datasource(name="secret_lake", connector="local", allowed_roles=["auditors"]),
    ]
    return make_plugin(auth="basic", users_file=users, users_recheck_s=0, datasources=datasources)


@pytest.fixture
def url(plugin: Plugin) -> Iterator[str]:
    with serve_http(create_app(plugin)) as served:
        yield served


class Browser:
    """What a browser does with the console: keeps its cookies, reads the CSRF token from the page
    and sends it back on state-changing requests."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL)
        page = self.http.get("/console")
        assert page.status_code == 200, page.text
        found = re.search(r'<meta name="aq-csrf" content="([^"]+)">', page.text)
        assert found is not None
        self.csrf = found.group(1)
        self.page = page

    def login(self, user: str, password: str | None = None) -> httpx.Response:
        auth = httpx.BasicAuth(user, PASSWORDS[user] if password is None else password)
        return self.http.post(f"{API}/session", auth=auth, headers={"X-CSRF-Token": self.csrf})

    def call(self, method: str, path: str, body: Any = None, csrf: bool = True) -> httpx.Response:
        headers = {"X-CSRF-Token": self.csrf} if csrf and method not in ("GET", "HEAD") else {}
        return self.http.request(method, API + path, json=body, headers=headers)

    def submit(self, query: str, datasource: str = "local", **more: Any) -> dict[str, Any]:
        reply = self.call("POST", "/queries", {"datasource": datasource, "lang": "sql", "query": query, **more})
        assert reply.status_code == 201, reply.text
        return dict(reply.json())


def logged_in(url: str, user: str) -> Browser:
    browser = Browser(url)
    assert browser.login(user).status_code == 200
    return browser


# -- the page and its assets ----------------------------------------------------------------------


def test_the_page_and_its_assets_come_with_a_strict_policy_and_no_inline_code(url: str) -> None:
    browser = Browser(url)
    page = browser.page
    assert page.headers["content-security-policy"] == CSP
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP and "script-src 'self'" in CSP
    assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{CSRF_COOKIE}={browser.csrf};")
    assert {"HttpOnly", "SameSite=Strict", "Path=/console"} <= {p.strip() for p in cookie.split(";")}
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is (test_the_cookies_are_secure_over_tls)
    # no inline script or style in the page; every asset it names is served, under the same policy
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.text) and "style=" not in page.text
    for asset in re.findall(r'(?:src|href)="(/console/static/[^"]+)"', page.text):
        served = browser.http.get(asset)
        assert served.status_code == 200 and served.headers["content-security-policy"] == CSP
    script = browser.http.get("/console/static/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    again = browser.http.get("/console/static/app.js", headers={"If-None-Match": script.headers["etag"]})
    assert again.status_code == 304
    assert browser.http.get("/console/static/%2e%2e/%2e%2e/settings.py").status_code == 404
    assert browser.http.get("/console/static/nothing.js").status_code == 404


def test_the_scripts_never_parse_html_or_evaluate_strings() -> None:
    static = resources.files("async_query.console") / "static"
    scripts = [entry for entry in static.iterdir() if entry.name.endswith(".js")]
    assert len(scripts) >= 6
    for script in scripts:
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", ".style."):
            assert sink not in text, f"{script.name} uses {sink}"


# -- logging in -------------------------------------------------------------------------------------


def test_login_seals_the_credential_in_an_httponly_strict_cookie_checked_on_every_request(
    url: str, users: Path
) -> None:
    browser = Browser(url)
    assert browser.call("GET", "/me").status_code == 401
    refused = browser.login("alice", "not-her-password")
    assert refused.status_code == 401 and "www-authenticate" not in refused.headers  # no browser dialog
    reply = browser.login("alice")
    assert reply.status_code == 200 and reply.json() == {"user": "alice", "admin": False, "auth": "basic"}
    cookie = next(v for v in reply.headers.get_list("set-cookie") if v.startswith(LOGIN_COOKIE + "="))
    assert {"HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=28800"} <= {p.strip() for p in cookie.split(";")}
    sealed = cookie.split(";")[0].split("=", 1)[1]
    assert PASSWORDS["alice"] not in sealed and base64.b64encode(PASSWORDS["alice"].encode()).decode() not in sealed
    assert browser.call("GET", "/me").json()["user"] == "alice"  # the cookie alone now
    # a changed password ends the console's login as it ends the API's
    UsersFile(users, FAST_HASHER).add("alice", "a-new-Pa55word-9", ["analysts"], replace=True)
    assert browser.call("GET", "/me").status_code == 401
    # a cookie that is not one of ours is no login
    forged = Browser(url)
    forged.http.cookies.set(LOGIN_COOKIE, "Z0FBQUFBQm5vdC1vdXJzCg==", path="/console")
    assert forged.call("GET", "/me").status_code == 401


def test_logout_forgets_the_cookie(url: str) -> None:
    browser = logged_in(url, "alice")
    assert browser.call("DELETE", "/session").status_code == 200
    assert browser.call("GET", "/me").status_code == 401


def test_an_expired_or_foreign_login_cookie_is_no_login() -> None:
    tokens = ConsoleTokens(b"k" * 32, session_s=60)
    sealed = tokens.seal_login(b"Basic YWxpY2U6eA==")
    assert tokens.open_login(sealed) == b"Basic YWxpY2U6eA=="
    assert ConsoleTokens(b"other" * 8, session_s=60).open_login(sealed) is None  # another deployment's key
    stale = tokens.seal_login(b"Basic YWxpY2U6eA==", issued_at=int(time.time()) - 61)
    assert tokens.open_login(stale) is None
    assert tokens.open_login("not a token") is None


def test_the_cookies_are_secure_over_tls(plugin: Plugin) -> None:
    transport = httpx.ASGITransport(app=create_app(plugin))

    async def fetch() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="https://localhost") as client:
            return await client.get("/console")

    import asyncio

    page = asyncio.run(fetch())
    assert "Secure" in {p.strip() for p in page.headers["set-cookie"].split(";")}


# -- CSRF ---------------------------------------------------------------------------------------------


def test_a_state_changing_request_without_the_csrf_token_is_refused_and_audited(url: str, plugin: Plugin) -> None:
    browser = logged_in(url, "alice")
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher)
    body = {"datasource": "local", "lang": "sql", "query": "SELECT 1"}
    for headers in ({}, {"X-CSRF-Token": "forged.0000"}, {"X-CSRF-Token": Browser(url).csrf}):
        refused = browser.http.post(f"{API}/queries", json=body, headers=headers)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["reason"] == "Forbidden" and "CSRF" in refused.json()["error"]["details"]
    assert browser.http.post(f"{API}/session", headers={}).status_code == 403
    assert launcher.started == []
    audit = [json.loads(line) for line in (plugin.settings.data_dir / "audit" / "audit.log").read_text().splitlines()]
    assert [a["status"] for a in audit if a["action"] == "console.csrf"] == [403] * 4
    # a console request refused by the authentication is audited as the console's too
    assert Browser(url).call("GET", "/history").status_code == 401
    audit = [json.loads(line) for line in (plugin.settings.data_dir / "audit" / "audit.log").read_text().splitlines()]
    assert (audit[-1]["action"], audit[-1]["status"], audit[-1]["path"]) == ("console", 401, "/console/api/history")
    # with the token, the same request goes through (and is audited as a submission)
    submitted = browser.submit("SELECT 1")
    audit = [json.loads(line) for line in (plugin.settings.data_dir / "audit" / "audit.log").read_text().splitlines()]
    entry = next(a for a in audit if a["action"] == "query.submit")
    assert (entry["user"], entry["datasource"], entry["queryId"], entry["status"]) == (
        "alice",
        "local",
        submitted["queryId"],
        201,
    )
    assert "SELECT" not in json.dumps(audit) and PASSWORDS["alice"] not in json.dumps(audit)


# -- what each user sees --------------------------------------------------------------------------------


def test_only_the_datasources_a_user_may_query_are_offered(url: str) -> None:
    alice, root = logged_in(url, "alice"), logged_in(url, "root")
    assert alice.call("GET", "/datasources").json() == {"datasources": [{"name": "local"}]}
    assert {d["name"] for d in root.call("GET", "/datasources").json()["datasources"]} == {"local", "secret_lake"}
    for path in ("/catalog/secret_lake/schemas", "/catalog/secret_lake/indexes"):
        assert alice.call("GET", path).status_code == 403
    assert alice.call("POST", "/queries", {"datasource": "secret_lake", "lang": "sql", "query": "SELECT 1"}).status_code == 403


def test_queries_and_sessions_belong_to_their_submitter(url: str) -> None:
    alice, bob = logged_in(url, "alice"), logged_in(url, "bob")
    mine = alice.submit("SELECT 1")
    assert alice.call("GET", f"/queries/{mine['queryId']}").json()["status"] == "WAITING"
    assert bob.call("GET", f"/queries/{mine['queryId']}").status_code == 403
    assert bob.call("DELETE", f"/queries/{mine['queryId']}").status_code == 403
    assert bob.call("GET", f"/queries/{mine['queryId']}/download").status_code == 403
    # bob naming alice's session gets one of his own
    theirs = bob.submit("SELECT 2", sessionId=mine["sessionId"])
    assert theirs["sessionId"] != mine["sessionId"]
    assert alice.call("DELETE", f"/queries/{mine['queryId']}").status_code == 204
    assert alice.call("GET", f"/queries/{mine['queryId']}").json()["status"] == "CANCELLED"
    assert alice.call("GET", f"/queries/{mine['queryId']}?size=0").status_code == 400


def test_history_is_each_users_own_newest_first_searchable_and_everyones_for_admins(url: str, plugin: Plugin) -> None:
    alice, bob, root = logged_in(url, "alice"), logged_in(url, "bob"), logged_in(url, "root")
    first = alice.submit("SELECT 'first'")
    second = alice.submit("SELECT 'second' AS Ünïcode")
    bobs = bob.submit("SELECT 'bobs'")
    plugin.store.index.refresh("*")
    history = alice.call("GET", "/history").json()
    assert [q["queryId"] for q in history["queries"]] == [second["queryId"], first["queryId"]]
    assert history["everyone"] is False
    entry = history["queries"][0]
    assert (entry["query"], entry["datasource"], entry["lang"], entry["status"], entry["submittedBy"]) == (
        "SELECT 'second' AS Ünïcode",
        "local",
        "sql",
        "WAITING",
        "alice",
    )
    assert entry["submitTime"] > 0 and entry["endTime"] is None
    assert [q["queryId"] for q in alice.call("GET", "/history?q=ünï").json()["queries"]] == [second["queryId"]]
    assert [q["queryId"] for q in bob.call("GET", "/history").json()["queries"]] == [bobs["queryId"]]
    everyone = root.call("GET", "/history").json()
    assert everyone["everyone"] is True
    assert {q["submittedBy"] for q in everyone["queries"]} == {"alice", "bob"}
    assert alice.call("GET", "/history?size=0").status_code == 400


def test_the_operators_page_is_for_admins_and_shows_every_users_sessions(url: str, plugin: Plugin) -> None:
    alice, bob, root = logged_in(url, "alice"), logged_in(url, "bob"), logged_in(url, "root")
    alice.submit("SELECT 1")
    bob.submit("SELECT 2")
    plugin.store.index.refresh("*")
    refused = alice.call("GET", "/ops")
    assert refused.status_code == 403 and "operators" in refused.json()["error"]["details"]
    ops = root.call("GET", "/ops").json()
    assert {s["submittedBy"] for s in ops["sessions"]} == {"alice", "bob"}
    assert ops["health"]["serving"] is True and "index" in ops["health"]["checks"]
    names = {family["name"] for family in ops["metrics"]}
    assert "async_query_queries_submitted" in names
    assert all(not s["name"].endswith("_bucket") for f in ops["metrics"] for s in f["samples"])


# -- results ------------------------------------------------------------------------------------------


@pytest.fixture
def chunked(make_plugin: PluginFactory) -> Plugin:
    """A service under ``none`` that stores results 10 rows a document."""
    return make_plugin(result_chunk_rows=10)


def test_a_result_is_paged_and_downloaded_whole_as_csv_and_json(chunked: Plugin) -> None:
    query_id = run_query(chunked, make_rows(35), chunk_rows=10)
    with serve_http(create_app(chunked)) as url:
        browser = Browser(url)
        page = browser.call("GET", f"/queries/{query_id}?offset=30&size=10").json()
        assert (page["status"], page["offset"], page["size"], page["resultRows"]) == ("SUCCESS", 30, 5, 35)
        assert browser.call("GET", f"/queries/{query_id}?size=11").status_code == 400  # beyond one document's rows
        as_json = browser.call("GET", f"/queries/{query_id}/download?format=json")
        assert as_json.headers["content-disposition"] == f'attachment; filename="{query_id}.json"'
        whole = json.loads(as_json.text, parse_float=Decimal)
        assert [c["name"] for c in whole["schema"]] == ["id", "s", "d"]
        assert whole["datarows"] == expected(35)
        as_csv = browser.call("GET", f"/queries/{query_id}/download?format=csv")
        assert as_csv.headers["content-type"].startswith("text/csv")
        rows = list(csv.reader(io.StringIO(as_csv.text)))
        assert rows[0] == ["id", "s", "d"]
        assert rows[1:] == [[csv_cell(v) for v in row] for row in expected(35)]
        assert rows[3] == ["2", 'r2, "q" [x] {y} \\ é', "2.10"]
        chunked.store.index.refresh("*")
        entry = browser.call("GET", "/history").json()["queries"][0]
        assert (entry["queryId"], entry["status"], entry["rows"]) == (query_id, "SUCCESS", 35)
        assert entry["endTime"] >= entry["submitTime"]


def test_a_query_that_has_not_succeeded_is_no_download(chunked: Plugin) -> None:
    with serve_http(create_app(chunked)) as url:
        browser = Browser(url)
        waiting = browser.submit("SELECT 1")
        refused = browser.call("GET", f"/queries/{waiting['queryId']}/download")
        assert refused.status_code == 400 and "WAITING" in refused.json()["error"]["details"]
        statement = chunked.store.statements.get("local", waiting["queryId"])
        assert statement is not None and statement.doc.state == StatementState.WAITING


@pytest.mark.parametrize(
    ("value", "cell"),
    [(None, ""), (True, "true"), (False, "false"), (Decimal("1.10"), "1.10"), (12345678901234567890, "12345678901234567890"), ({"a": [1, None]}, '{"a":[1,null]}'), ("é,\"", 'é,"')],
)
def test_csv_writes_each_kind_of_value(value: Any, cell: str) -> None:
    assert csv_cell(value) == cell


def test_members_are_read_back_as_their_exact_text() -> None:
    text = '{"status":"SUCCESS", "schema":[{"name":"x\\"y"}],"datarows":[[1.10,"}"]],"size":1}'
    assert members(text) == {"status": '"SUCCESS"', "schema": '[{"name":"x\\"y"}]', "datarows": '[[1.10,"}"]]', "size": "1"}


# -- the gateway -----------------------------------------------------------------------------------------


def test_the_gateway_never_passes_the_console_on() -> None:
    for path in ("/console", "/console/static/app.js", "/console/api/queries"):
        assert owns(path)
    assert not owns("/consoles")


def test_a_console_that_is_off_is_not_found(make_plugin: PluginFactory) -> None:
    with serve_http(create_app(make_plugin(console_enabled=False))) as url:
        assert httpx.get(url + "/console", verify=CLIENT_SSL).status_code == 404
        assert httpx.get(url + "/console/api/me", verify=CLIENT_SSL).status_code == 404


def test_the_console_is_one_route_in_the_metrics() -> None:
    from async_query.metrics import route_of

    for path in ("/console", "/console/static/app.js", "/console/api/queries/Wk9pbnhDeWMweWxvY2Fs"):
        assert route_of(path) == "/console"
    assert route_of("/consoles") == "other"
