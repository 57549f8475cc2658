"""Failed logins over real HTTP (docs/security.md, "Failed logins"): an address that fails too
often is refused, unchecked, in the error shape with ``Retry-After``; a header verified before
still gets in; another address does not notice; the audit log says who was refused. ``basic``
checks a real users file; ``cluster`` asks a stand-in of the security plugin's ``authinfo``
endpoint (no security plugin runs here), which counts the checks it is asked for.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.runtime import Plugin
from async_query.security.users import UsersFile
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, ClusterUser, SecurityPluginStandIn, serve_http

PASSWORD = "alice-Pa55word-1"
ALLOWED = 3


@pytest.fixture
def users_path(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    UsersFile(path, FAST_HASHER).add("alice", PASSWORD, ["all_access"])
    return path


@contextmanager
def _served(plugin: Plugin) -> Iterator[str]:
    with serve_http(create_app(plugin)) as url:
        yield url


@pytest.fixture(params=["basic", "cluster"])
def deployment(
    request: pytest.FixtureRequest, make_plugin: PluginFactory, users_path: Path
) -> Iterator[tuple[str, Plugin, SecurityPluginStandIn | None]]:
    limits = {"auth_failures_allowed": ALLOWED, "auth_failures_window_s": 600, "auth_block_s": 300}
    if request.param == "basic":
        plugin = make_plugin(auth="basic", users_file=users_path, **limits)
        with _served(plugin) as url:
            yield url, plugin, None
        return
    with SecurityPluginStandIn({"alice": ClusterUser(PASSWORD, roles=("all_access",))}) as stand_in:
        plugin = make_plugin(auth="cluster", opensearch_url=stand_in.url, **limits)
        with _served(plugin) as url:
            yield url, plugin, stand_in


def _client(url: str, password: str, address: str = "127.0.0.1") -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address, verify=CLIENT_SSL)
    return httpx.Client(base_url=url, auth=httpx.BasicAuth("alice", password), transport=transport)


def _audit(plugin: Plugin) -> list[dict[str, Any]]:
    path = plugin.settings.data_dir / "audit" / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_address_that_fails_too_often_is_refused_unchecked_but_a_verified_header_and_other_addresses_are_not(
    deployment: tuple[str, Plugin, SecurityPluginStandIn | None],
) -> None:
    url, plugin, stand_in = deployment
    with _client(url, PASSWORD) as verified:
        assert verified.get(f"{BASE}/_sessions").status_code == 200  # verified now, then kept
        for _ in range(ALLOWED):
            with _client(url, "not-her-password") as guess:
                assert guess.get(f"{BASE}/_sessions").status_code == 401
        checks = stand_in.calls if stand_in else 0

        # From that address, another guess and the right password in a header not verified
        # before (the scheme in lower case: the same credentials, another header): both
        # refused, and neither checked.
        right = "basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        with _client(url, "another-guess") as guess, httpx.Client(base_url=url, verify=CLIENT_SSL) as unverified:
            for resp in (
                guess.get(f"{BASE}/_sessions"),
                unverified.get(f"{BASE}/_sessions", headers={"Authorization": right}),
            ):
                assert resp.status_code == 429, resp.text
                assert resp.headers["retry-after"] in {"299", "300"}
                body = resp.json()
                assert body["status"] == 429 and set(body["error"]) == {"type", "reason", "details"}
                assert body["error"]["type"] == "OpenSearchSecurityException"
                assert body["error"]["reason"] == "Too Many Requests"
                assert "too many failed logins" in body["error"]["details"]
        if stand_in is not None:
            assert stand_in.calls == checks
        # A header verified before the failures still gets in: it proves its holder knows the password.
        assert verified.get(f"{BASE}/_sessions").status_code == 200

    # Another address is not refused.
    with _client(url, PASSWORD, address="127.0.0.2") as elsewhere:
        assert elsewhere.get(f"{BASE}/_sessions").status_code == 200
    # (and the header refused above was a right one)
    with httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address="127.0.0.2", verify=CLIENT_SSL)) as plain:
        assert plain.get(f"{BASE}/_sessions", headers={"Authorization": right}).status_code == 200
    refused = [line for line in _audit(plugin) if line.get("status") == 429]
    assert refused and all(line.get("remote") == "127.0.0.1" for line in refused)
