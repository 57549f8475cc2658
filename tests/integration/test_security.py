"""The service's security boundary over real HTTP, as an attacker would probe it.

``basic`` checks a real users file (argon2id); ``cluster`` asks a stand-in of the OpenSearch
security plugin's ``authinfo`` endpoint (tests.support.SecurityPluginStandIn: no security plugin
runs here). Documents live in a real index server; no Spark (a RecordingLauncher).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.datasource_api import BASE as DS_BASE
from async_query.datasources import Datasource
from async_query.runtime import Plugin
from async_query.security.setup import build_security
from async_query.security.users import UsersFile
from query_core.errors import UnknownDatasourceError
from query_core.ids import new_id
from query_core.states import StatementState
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL, index_env
from tests.support import (
    FAST_HASHER,
    ClusterUser,
    RecordingLauncher,
    SecurityPluginStandIn,
    free_port,
    serve_http,
    wait_for,
)

PASSWORDS = {"alice": "alice-Pa55word-1", "bob": "bob-Pa55word-22"}
QUERY_TEXT = "SELECT 'query-text-that-must-not-be-audited'"
CLUSTER_USERS = {
    # alice is admin through her security role; bob only has a backend role
    "alice": ClusterUser(PASSWORDS["alice"], backend_roles=("admin",), roles=("all_access", "own_index")),
    "bob": ClusterUser(PASSWORDS["bob"], backend_roles=("reader",), roles=("own_index",)),
}


@pytest.fixture(scope="module")
def users_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.json"
    users = UsersFile(path, FAST_HASHER)
    users.add("alice", PASSWORDS["alice"], ["all_access"])
    users.add("bob", PASSWORDS["bob"], ["reader"])
    return path


@dataclass
class Deployment:
    url: str
    plugin: Plugin
    mode: str
    stand_in: SecurityPluginStandIn | None = None

    @property
    def launcher(self) -> RecordingLauncher:
        found = self.plugin.launchers.shared["local"]
        assert isinstance(found, RecordingLauncher)
        return found

    def audit_lines(self) -> list[dict[str, Any]]:
        path = self.plugin.settings.data_dir / "audit" / "audit.log"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(params=["basic", "cluster"])
def secured(request: pytest.FixtureRequest, make_plugin: PluginFactory, users_path: Path) -> Iterator[Deployment]:
    """The service with ``basic`` or ``cluster`` authentication, served over HTTP."""
    if request.param == "basic":
        plugin = make_plugin(auth="basic", users_file=users_path)
        with serve_http(create_app(plugin)) as url:
            yield Deployment(url, plugin, "basic")
        return
    with SecurityPluginStandIn(CLUSTER_USERS) as stand_in:
        plugin = make_plugin(auth="cluster", opensearch_url=stand_in.url)
        with serve_http(create_app(plugin)) as url:
            yield Deployment(url, plugin, "cluster", stand_in)


def as_user(name: str, password: str | None = None) -> httpx.BasicAuth:
    return httpx.BasicAuth(name, PASSWORDS[name] if password is None else password)


def submit(deployment: Deployment, ds: str, auth: httpx.Auth) -> str:
    body = {"datasource": ds, "lang": "sql", "query": QUERY_TEXT}
    resp = httpx.post(deployment.url + BASE, json=body, auth=auth, verify=CLIENT_SSL)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["queryId"])


def requests_of_every_endpoint(ds: str, query_id: str) -> list[tuple[str, str, Any]]:
    new = {"name": "created_by_attacker", "connector": "local"}
    return [
        ("POST", BASE, {"datasource": ds, "lang": "sql", "query": "SELECT 1"}),
        ("GET", f"{BASE}/{query_id}", None),
        ("DELETE", f"{BASE}/{query_id}", None),
        ("GET", f"{BASE}/_sessions", None),
        ("POST", DS_BASE, new),
        ("PUT", DS_BASE, {**new, "name": ds}),
        ("PATCH", DS_BASE, {"name": ds, "description": "changed"}),
        ("GET", DS_BASE, None),
        ("GET", f"{DS_BASE}/{ds}", None),
        ("DELETE", f"{DS_BASE}/{ds}", None),
        ("GET", "/metrics", None),
        ("GET", "/_plugins/_sql/stats", None),
        ("POST", "/_plugins/_ppl/stats", None),
        ("GET", f"{BASE}/_health", None),
        ("GET", "/no/such/path", None),
    ]


BAD_CREDENTIALS = {
    "none": None,
    "wrong_password": ("alice", "not-her-password"),
    "unknown_user": ("mallory", PASSWORDS["alice"]),
    "empty_password": ("alice", ""),
    "malformed_basic": "Basic !!!not-base64!!!",
    "no_colon": "Basic " + base64.b64encode(b"alice").decode(),
    "bearer": "Bearer abc.def.ghi",
    "other_users_password": ("alice", PASSWORDS["bob"]),
}


def _headers(credentials: Any) -> dict[str, str]:
    if credentials is None:
        return {}
    if isinstance(credentials, str):
        return {"Authorization": credentials}
    user, password = credentials
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def assert_refused(resp: httpx.Response, status: int) -> dict[str, Any]:
    """The API's one error shape, with the security plugin's wording."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"status", "error"} and body["status"] == status
    assert set(body["error"]) == {"type", "reason", "details"}
    assert body["error"]["type"] == "OpenSearchSecurityException"
    assert body["error"]["reason"] == {401: "Unauthorized", 403: "Forbidden"}[status]
    assert body["error"]["details"]
    if status == 401:
        assert resp.headers["www-authenticate"].startswith('Basic realm="')
    return body


# -- authentication ----------------------------------------------------------------------------


@pytest.mark.parametrize("credentials", list(BAD_CREDENTIALS.values()), ids=list(BAD_CREDENTIALS))
def test_every_endpoint_refuses_bad_credentials_alike(
    secured: Deployment, datasource: Datasource, credentials: Any
) -> None:
    query_id = submit(secured, datasource.name, as_user("alice"))
    started = len(secured.launcher.started)
    bodies = set()
    with httpx.Client(base_url=secured.url, headers=_headers(credentials), verify=CLIENT_SSL) as client:
        for method, path, body in requests_of_every_endpoint(datasource.name, query_id):
            resp = client.request(method, path, json=body)
            bodies.add(json.dumps(assert_refused(resp, 401)))
    # never saying which part was wrong: one body whatever the endpoint and the mistake
    assert len(bodies) == 1
    assert "password" not in bodies.pop().lower()
    # and nothing happened
    assert len(secured.launcher.started) == started
    statement = secured.plugin.store.statements.get(datasource.name, query_id)
    assert statement is not None and statement.doc.state == StatementState.WAITING
    assert secured.plugin.datasources.get(datasource.name).description == datasource.description
    assert secured.plugin.datasources.find("created_by_attacker") is None


def test_valid_credentials_reach_every_endpoint(secured: Deployment, datasource: Datasource) -> None:
    with httpx.Client(base_url=secured.url, auth=as_user("alice"), verify=CLIENT_SSL) as client:
        query_id = submit(secured, datasource.name, as_user("alice"))
        assert client.get(f"{BASE}/{query_id}").json() == {"status": "WAITING"}
        assert client.get(f"{BASE}/_sessions").status_code == 200
        assert client.get(f"{DS_BASE}/{datasource.name}").json()["name"] == datasource.name
        assert client.delete(f"{BASE}/{query_id}").status_code == 204
        assert client.get(f"{BASE}/{query_id}").json() == {"status": "CANCELLED"}
    # a non-admin may not read an admin's query (tests/integration/test_query_authorization.py)
    resp = httpx.get(f"{secured.url}{BASE}/{query_id}", auth=as_user("bob"), verify=CLIENT_SSL)
    assert_refused(resp, 403)


def test_one_check_per_credentials_then_the_cache(secured: Deployment, datasource: Datasource) -> None:
    query_id = submit(secured, datasource.name, as_user("alice"))
    assert httpx.get(f"{secured.url}{BASE}/_sessions", auth=as_user("bob"), verify=CLIENT_SSL).status_code == 200  # bob's one check
    calls = secured.stand_in.calls if secured.stand_in else 0
    with httpx.Client(base_url=secured.url, auth=as_user("bob"), verify=CLIENT_SSL) as client:
        for _ in range(20):
            assert client.get(f"{BASE}/_sessions").status_code == 200
    if secured.stand_in is not None:
        assert secured.stand_in.calls == calls, "the cluster was asked again for cached credentials"
    # a wrong password is checked every time, never cached
    for _ in range(2):
        assert_refused(httpx.get(f"{secured.url}{BASE}/{query_id}", auth=as_user("bob", "guess"), verify=CLIENT_SSL), 401)
    if secured.stand_in is not None:
        assert secured.stand_in.calls == calls + 2


def test_cluster_mode_sends_only_the_callers_header(
    make_plugin: PluginFactory, datasource: Datasource, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SecurityPluginStandIn(CLUSTER_USERS) as stand_in:
        plugin = make_plugin(
            auth="cluster", opensearch_url=stand_in.url, opensearch_username="svc", opensearch_password="svc-secret"
        )
        with serve_http(create_app(plugin)) as url:
            resp = httpx.get(f"{url}{BASE}/_sessions", auth=as_user("bob"), headers={"X-Other": "not forwarded"}, verify=CLIENT_SSL)
            assert resp.status_code == 200, resp.text
        sent = stand_in.headers[-1]
        assert sent["authorization"] == _headers(("bob", PASSWORDS["bob"]))["Authorization"]
        assert "x-other" not in sent
        assert "svc-secret" not in json.dumps(stand_in.headers)


def test_cluster_mode_outage_is_a_503_not_a_wrong_password(
    make_plugin: PluginFactory, datasource: Datasource
) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    plugin = make_plugin(auth="cluster", opensearch_url=gone)
    with serve_http(create_app(plugin)) as url:
        resp = httpx.get(f"{url}{BASE}/_sessions", auth=as_user("alice"), verify=CLIENT_SSL)
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["type"] == "OpenSearchSecurityException"
    assert "www-authenticate" not in resp.headers


async def _concurrently(url: str, auth: httpx.Auth, count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url, auth=auth, verify=CLIENT_SSL) as client:
        replies = await asyncio.gather(*(client.get(f"{BASE}/_sessions") for _ in range(count)))
    return [r.status_code for r in replies]


def test_concurrent_requests_share_one_check(secured: Deployment) -> None:
    calls = secured.stand_in.calls if secured.stand_in else 0
    statuses = asyncio.run(_concurrently(secured.url, as_user("alice"), 12))
    assert statuses == [200] * 12
    if secured.stand_in is not None:
        assert secured.stand_in.calls == calls + 1
    assert asyncio.run(_concurrently(secured.url, as_user("alice", "wrong-one"), 3)) == [401] * 3


def test_two_authorization_headers_are_refused(secured: Deployment) -> None:
    good = _headers(("alice", PASSWORDS["alice"]))["Authorization"]
    reply = _raw(
        secured.url,
        f"GET {BASE}/_sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x\r\n"
        f"Authorization: {good}\r\nConnection: close\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]


def test_a_removed_user_is_refused_without_a_restart(
    make_plugin: PluginFactory, tmp_path: Path, datasource: Datasource
) -> None:
    path = tmp_path / "users.json"
    UsersFile(path, FAST_HASHER).add("carol", "carol-Pa55word", ["reader"])
    plugin = make_plugin(auth="basic", users_file=path, users_recheck_s=0.05)
    with serve_http(create_app(plugin)) as url:
        auth = httpx.BasicAuth("carol", "carol-Pa55word")
        assert httpx.get(f"{url}{BASE}/_sessions", auth=auth, verify=CLIENT_SSL).status_code == 200  # now cached
        assert UsersFile(path).remove("carol")
        wait_for(
            lambda: httpx.get(f"{url}{BASE}/_sessions", auth=auth, verify=CLIENT_SSL).status_code == 401,
            timeout=10,
            what="the removed user to be refused",
        )


# -- authorization: datasource writes are for admins ---------------------------------------------


def test_a_non_admin_cannot_change_datasources(secured: Deployment, datasource: Datasource) -> None:
    new = {"name": "bobs_datasource", "connector": "local"}
    with httpx.Client(base_url=secured.url, auth=as_user("bob"), verify=CLIENT_SSL) as client:
        refusals = [
            client.post(DS_BASE, json=new),
            client.put(DS_BASE, json={"name": datasource.name, "connector": "local", "allowedRoles": ["reader"]}),
            client.patch(DS_BASE, json={"name": datasource.name, "allowedRoles": ["reader"]}),
            client.delete(f"{DS_BASE}/{datasource.name}"),
            client.delete(f"{DS_BASE}/no_such_one"),  # not even whether it exists
            client.post(DS_BASE, json={"not": "a datasource"}),  # nor whether the body is valid
        ]
        for resp in refusals:
            body = assert_refused(resp, 403)
            assert body["error"]["details"] == (
                "User bob is not authorized to change datasources. User should be mapped to an admin role for access."
            )
        # reading is allowed
        assert client.get(f"{DS_BASE}/{datasource.name}").status_code == 200
    assert secured.plugin.datasources.find("bobs_datasource") is None
    assert secured.plugin.store.datasources.get("bobs_datasource") is None
    assert secured.plugin.datasources.get(datasource.name).allowed_roles == []


def test_an_admin_can_change_datasources(secured: Deployment) -> None:
    new = {"name": "alices_datasource", "connector": "local", "allowedRoles": ["reader"]}
    with httpx.Client(base_url=secured.url, auth=as_user("alice"), verify=CLIENT_SSL) as client:
        assert client.post(DS_BASE, json=new).status_code == 201
        assert client.patch(DS_BASE, json={"name": "alices_datasource", "description": "d"}).status_code == 200
        assert secured.plugin.store.datasources.get("alices_datasource") is not None
        assert client.delete(f"{DS_BASE}/alices_datasource").status_code == 204
    with pytest.raises(UnknownDatasourceError):
        secured.plugin.datasources.get("alices_datasource")


# -- none: loopback only ---------------------------------------------------------------------------


@pytest.fixture
def open_service(make_plugin: PluginFactory) -> Iterator[tuple[str, Plugin]]:
    plugin = make_plugin()  # ASYNC_QUERY_AUTH=none, the default
    with serve_http(create_app(plugin)) as url:
        yield url, plugin


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST:9000", "127.0.0.1:80", "[::1]:1"])
def test_none_serves_loopback_hosts(open_service: tuple[str, Plugin], host: str) -> None:
    url, _ = open_service
    resp = httpx.get(f"{url}{BASE}/_sessions", headers={"Host": host}, verify=CLIENT_SSL)
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        "attacker.example:9000",
        "127.0.0.1.nip.io",
        "localhost.attacker.example",
        "10.0.0.5:9000",
        "0.0.0.0",
        "localhost:x",
        "[::2]",
    ],
)
def test_none_refuses_other_hosts(
    open_service: tuple[str, Plugin], datasource: Datasource, host: str
) -> None:
    """A page on attacker.example whose name now resolves to 127.0.0.1 (DNS rebinding) gets nothing."""
    url, plugin = open_service
    headers = {"Host": host}
    body = {"datasource": datasource.name, "lang": "sql", "query": "SELECT 1"}
    assert_refused(httpx.post(f"{url}{BASE}", json=body, headers=headers, verify=CLIENT_SSL), 403)
    assert_refused(httpx.get(f"{url}{BASE}/{new_id(datasource.name)}", headers=headers, verify=CLIENT_SSL), 403)
    assert_refused(httpx.delete(f"{url}{DS_BASE}/{datasource.name}", headers=headers, verify=CLIENT_SSL), 403)
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher) and launcher.started == []
    assert plugin.datasources.get(datasource.name) is not None


@pytest.mark.parametrize(
    "head",
    ["GET {path} HTTP/1.0\r\n", "GET {path} HTTP/1.1\r\nHost: localhost\r\nHost: attacker.example\r\n"],
    ids=["no_host", "two_hosts"],
)
def test_none_refuses_a_missing_or_doubled_host(open_service: tuple[str, Plugin], head: str) -> None:
    url, _ = open_service
    reply = _raw(url, head.format(path=f"{BASE}/_sessions") + "Connection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403"), reply[:200]


@pytest.mark.parametrize("origin", ["https://attacker.example", "null", "http://localhost.attacker.example:9000"])
def test_none_refuses_pages_of_other_sites(
    open_service: tuple[str, Plugin], datasource: Datasource, origin: str
) -> None:
    """A page of another site posting to 127.0.0.1 from the user's browser gets nothing."""
    url, plugin = open_service
    body = {"datasource": datasource.name, "lang": "sql", "query": "SELECT 1"}
    assert_refused(httpx.post(f"{url}{BASE}", json=body, headers={"Origin": origin}, verify=CLIENT_SSL), 403)
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher) and launcher.started == []


@pytest.mark.parametrize("origin", ["http://localhost:5601", "https://127.0.0.1", "http://[::1]:8080"])
def test_none_serves_loopback_pages(open_service: tuple[str, Plugin], origin: str) -> None:
    url, _ = open_service
    assert httpx.get(f"{url}{BASE}/_sessions", headers={"Origin": origin}, verify=CLIENT_SSL).status_code == 200


def test_insecure_no_auth_lifts_the_host_check(make_plugin: PluginFactory) -> None:
    plugin = make_plugin()
    with serve_http(create_app(plugin, security=build_security(plugin.settings, insecure_no_auth=True))) as url:
        assert httpx.get(f"{url}{BASE}/_sessions", headers={"Host": "10.0.0.5:9000"}, verify=CLIENT_SSL).status_code == 200


def _raw(url: str, request: str) -> bytes:
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# -- audit -----------------------------------------------------------------------------------------


def test_the_audit_log_has_a_line_per_request_and_refusal_and_no_secret(
    secured: Deployment, datasource: Datasource
) -> None:
    query_id = submit(secured, datasource.name, as_user("alice"))
    httpx.get(f"{secured.url}{BASE}/{query_id}", auth=as_user("bob"), verify=CLIENT_SSL)
    httpx.get(f"{secured.url}{BASE}/{query_id}", verify=CLIENT_SSL)
    httpx.get(f"{secured.url}{BASE}/{query_id}", auth=as_user("alice", "wrong-password-x"), verify=CLIENT_SSL)
    httpx.get(f"{secured.url}{BASE}/{query_id}", auth=as_user("mallory", "typed-password-as-name"), verify=CLIENT_SSL)
    httpx.delete(f"{secured.url}{DS_BASE}/{datasource.name}", auth=as_user("bob"), verify=CLIENT_SSL)
    httpx.post(f"{secured.url}{DS_BASE}", json={"name": "audited", "connector": "local"}, auth=as_user("alice"), verify=CLIENT_SSL)

    lines = secured.audit_lines()
    assert [(line["user"], line["action"], line["outcome"], line["status"]) for line in lines] == [
        ("alice", "query.submit", "ok", 201),
        ("bob", "query.get", "forbidden", 403),  # alice's query
        (None, "query.get", "unauthenticated", 401),
        ("alice" if secured.mode == "basic" else None, "query.get", "unauthenticated", 401),
        (None, "query.get", "unauthenticated", 401),  # an unknown name may be a password: never kept
        ("bob", "datasource.delete", "forbidden", 403),
        ("alice", "datasource.create", "ok", 201),
    ]
    assert all(line["queryId"] == query_id for line in lines[:5])
    assert all(line["datasource"] == datasource.name for line in lines[:6])
    assert lines[-1]["datasource"] == "audited"
    for line in lines:
        assert set(line) == {
            "time",
            "user",
            "action",
            "datasource",
            "queryId",
            "outcome",
            "status",
            "method",
            "path",
            "remote",
        }
        assert line["time"].endswith("Z") and line["remote"] == "127.0.0.1"

    text = (secured.plugin.settings.data_dir / "audit" / "audit.log").read_text()
    secrets = [*PASSWORDS.values(), "wrong-password-x", "typed-password-as-name", "mallory", QUERY_TEXT, "SELECT"]
    secrets += [_headers(("alice", p))["Authorization"].split()[1] for p in (PASSWORDS["alice"], "wrong-password-x")]
    for secret in secrets:
        assert secret not in text


def test_the_audit_log_is_private(secured: Deployment) -> None:
    httpx.get(f"{secured.url}{BASE}/_sessions", auth=as_user("alice"), verify=CLIENT_SSL)
    audit_dir = secured.plugin.settings.data_dir / "audit"
    assert stat.S_IMODE(audit_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((audit_dir / "audit.log").stat().st_mode) == 0o600


def test_none_audits_as_anonymous(open_service: tuple[str, Plugin]) -> None:
    url, plugin = open_service
    httpx.get(f"{url}{BASE}/_sessions", verify=CLIENT_SSL)
    httpx.get(f"{url}{BASE}/_sessions", headers={"Host": "attacker.example"}, verify=CLIENT_SSL)
    lines = [json.loads(x) for x in (plugin.settings.data_dir / "audit" / "audit.log").read_text().splitlines()]
    assert [(x["user"], x["action"], x["status"]) for x in lines] == [
        ("anonymous", "sessions.list", 200),
        (None, "sessions.list", 403),
    ]


# -- serve ---------------------------------------------------------------------------------------


def _entry_point() -> list[str]:
    script = Path(sys.executable).parent / "async-query"
    return [str(script)] if script.exists() else [sys.executable, "-m", "async_query.cli"]


def _serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_"))}
    env.update(
        ASYNC_QUERY_DATA_DIR=str(tmp_path / "var"),
        ASYNC_QUERY_LOCAL_CATALOG="in-memory",
        ASYNC_QUERY_WARM_POOL_SIZE="0",
        **extra,
    )
    return env


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "myhost.example"])
def test_serve_refuses_a_non_loopback_address_without_auth(tmp_path: Path, host: str) -> None:
    done = subprocess.run(
        [*_entry_point(), "serve", "--host", host, "--port", str(free_port())],
        env=_serve_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"refusing to listen on {host} without authentication" in done.stderr
    assert "ASYNC_QUERY_AUTH=basic" in done.stderr and "--insecure-no-auth" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "var").exists(), "it stopped before touching anything"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ASYNC_QUERY_AUTH": "basic"}, "needs a readable users file"),
        ({"ASYNC_QUERY_AUTH": "basic", "ASYNC_QUERY_USERS_FILE": "/dev/null"}, "is not valid JSON"),
        ({"ASYNC_QUERY_AUTH": "cluster"}, "needs OPENSEARCH_URL"),
        ({"ASYNC_QUERY_AUTH": "ldap"}, "invalid settings: auth"),
    ],
    ids=["basic_no_file", "basic_bad_file", "cluster_no_url", "unknown_mode"],
)
def test_serve_refuses_an_unusable_auth_setup(tmp_path: Path, env: dict[str, str], expected: str) -> None:
    done = subprocess.run(
        [*_entry_point(), "serve", "--port", str(free_port())],
        env=_serve_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_serve_refuses_cluster_auth_on_a_cluster_without_security_plugin(tmp_path: Path, index_url: str) -> None:
    done = subprocess.run(
        [*_entry_point(), "serve", "--port", str(free_port())],
        env=_serve_env(tmp_path, ASYNC_QUERY_AUTH="cluster", **index_env(index_url)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "has no security plugin" in done.stderr


@pytest.mark.slow
def test_serve_with_basic_auth_keeps_its_files_private(tmp_path: Path) -> None:
    """The real ``async-query serve`` on the embedded index: credentials checked, and everything it
    and its children write under the data directory private (index snapshots, a job's log and pid
    file: the job is ``true``, which starts and ends at once, so no Spark runs)."""
    users_file = tmp_path / "users.json"
    UsersFile(users_file, FAST_HASHER).add("alice", PASSWORDS["alice"], ["all_access"])
    port = free_port()
    env = _serve_env(
        tmp_path,
        ASYNC_QUERY_AUTH="basic",
        ASYNC_QUERY_USERS_FILE=str(users_file),
        ASYNC_QUERY_SPARK_SUBMIT=shutil.which("true") or "/bin/true",
    )
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*_entry_point(), "serve", "--port", str(port), "--log-level", "warning"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url) or proc.poll() is not None, timeout=240, what="serve to answer")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        assert_refused(httpx.get(f"{url}{BASE}/_sessions", verify=CLIENT_SSL), 401)
        body = {"datasource": "local", "lang": "sql", "query": "SELECT 1"}
        resp = httpx.post(f"{url}{BASE}", json=body, auth=as_user("alice"), verify=CLIENT_SSL)
        assert resp.status_code == 201, resp.text
    finally:
        proc.terminate()  # a graceful stop: the embedded index writes its last snapshot
        proc.wait(timeout=60)
        log.close()
    data_dir = tmp_path / "var"
    modes = {str(p.relative_to(data_dir)): stat.S_IMODE(p.stat().st_mode) for p in [data_dir, *data_dir.rglob("*")]}
    # Run as root, jobs run as the job user, who passes through the data directory (and the one of
    # the jobs' temporary directories) to its own places, never listing them: 0711.
    passable = {".", "tmp"} if os.geteuid() == 0 else set()
    assert modes["."] == (0o711 if passable else 0o700)
    assert modes["audit/audit.log"] == 0o600
    assert any(name.startswith("logs/") and name.endswith(".log") for name in modes), modes
    assert any(name.startswith("jobs/") and name.endswith(".pid") for name in modes), modes
    assert any(name.startswith("index/") and (data_dir / name).is_file() for name in modes), modes  # journal, snapshot
    assert all(mode & 0o077 == 0 for name, mode in modes.items() if name not in passable), modes
    assert all(modes[name] == 0o711 for name in passable)
    assert '"user":"alice","action":"query.submit"' in (data_dir / "audit" / "audit.log").read_text()


def test_serve_over_tls(tmp_path: Path, index_url: str) -> None:
    """``--tls-cert``/``--tls-key``: the service answers HTTPS, and plain HTTP gets nothing."""
    cert, key = _self_signed(tmp_path)
    users_file = tmp_path / "users.json"
    UsersFile(users_file, FAST_HASHER).add("alice", PASSWORDS["alice"], ["all_access"])
    port = free_port()
    env = _serve_env(
        tmp_path, ASYNC_QUERY_AUTH="basic", ASYNC_QUERY_USERS_FILE=str(users_file), **index_env(index_url)
    )
    log = (tmp_path / "serve.log").open("wb")
    argv = [*_entry_point(), "serve", "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)]
    proc = subprocess.Popen([*argv, "--log-level", "warning"], env=env, stdout=log, stderr=log)
    url = f"https://localhost:{port}"
    trusted = ssl.create_default_context(cafile=str(cert))
    try:
        wait_for(lambda: _answers(url, verify=trusted) or proc.poll() is not None, timeout=60, what="serve")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        resp = httpx.get(f"{url}{BASE}/_sessions", auth=as_user("alice"), verify=trusted)
        assert resp.status_code == 200, resp.text
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://localhost:{port}{BASE}/_sessions", auth=as_user("alice"), timeout=5, verify=CLIENT_SSL)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert f"async query service on https://127.0.0.1:{port}/" in (tmp_path / "serve.log").read_text()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)  # as a private key is kept (serve refuses one the job user could read)
    return cert_path, key_path


def _answers(url: str, verify: ssl.SSLContext | bool = True) -> bool:
    try:
        httpx.get(url + "/", timeout=2, verify=verify)
    except httpx.HTTPError:
        return False
    return True
