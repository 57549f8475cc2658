"""The console under ``cluster`` authentication (docs/console.md): its login form's credential is
checked by the index cluster's security plugin (a stand-in of its ``authinfo`` endpoint:
tests.support.SecurityPluginStandIn), kept sealed in the login cookie, and checked again with
every request, as the API checks every request's ``Authorization``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from async_query.api import create_app
from async_query.runtime import Plugin
from tests.conftest import PluginFactory
from tests.support import ClusterUser, SecurityPluginStandIn, serve_http
from tests.unit.test_console import Browser

USERS = {
    "alice": ClusterUser("alice-Pa55word-1", backend_roles=("admin",), roles=("all_access",)),
    "bob": ClusterUser("bob-Pa55word-22", backend_roles=("reader",), roles=("analysts",)),
}


@pytest.fixture
def cluster(make_plugin: PluginFactory) -> Iterator[tuple[str, SecurityPluginStandIn, Plugin]]:
    with SecurityPluginStandIn(dict(USERS)) as stand_in:
        plugin = make_plugin(auth="cluster", opensearch_url=stand_in.url, auth_cache_s=0)
        with serve_http(create_app(plugin)) as url:
            yield url, stand_in, plugin


def login(browser: Browser, user: str, password: str) -> int:
    reply = browser.http.post("/console/api/session", auth=httpx.BasicAuth(user, password), headers={"X-CSRF-Token": browser.csrf})
    return reply.status_code


def test_the_cluster_checks_the_login_and_every_request_after_it(cluster: tuple[str, SecurityPluginStandIn, Plugin]) -> None:
    url, stand_in, _ = cluster
    browser = Browser(url)
    assert login(browser, "bob", "not-his-password") == 401
    assert login(browser, "bob", USERS["bob"].password) == 200
    me = browser.call("GET", "/me").json()
    assert me == {"user": "bob", "admin": False, "auth": "cluster"}
    assert browser.call("GET", "/ops").status_code == 403
    # the cluster forgets bob: his console stops at the next request (no credential cache here)
    del stand_in.users["bob"]
    assert browser.call("GET", "/me").status_code == 401
    admin = Browser(url)
    assert login(admin, "alice", USERS["alice"].password) == 200
    assert admin.call("GET", "/me").json()["admin"] is True
    assert admin.call("GET", "/ops").status_code == 200
