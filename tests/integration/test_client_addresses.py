"""Client addresses over real HTTP (docs/security.md, "Client addresses"): proxy headers are
believed only from the proxies ``ASYNC_QUERY_TRUSTED_PROXIES`` names, and the failed-login limit,
the audit log and the gateway's ``X-Forwarded-For`` all use the address so read.

The service is served as ``serve`` serves it (uvicorn's own proxy-header handling off); clients
connect from distinct loopback addresses (127.0.0.1, .2, .3), so that each is a peer of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.gateway import Gateway, service_credentials
from async_query.runtime import Plugin
from async_query.security.users import UsersFile
from query_core.config import OpenSearchConfig
from tests.conftest import PluginFactory
from tests.integration.test_gateway import Upstream
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, serve_http

PASSWORD = "alice-Pa55word-1"
ALLOWED = 3
SPOOFED = "198.51.100.9"


@pytest.fixture
def users_path(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    UsersFile(path, FAST_HASHER).add("alice", PASSWORD, ["all_access"])
    return path


def _plugin(make_plugin: PluginFactory, users_path: Path, **settings: Any) -> Plugin:
    limits = {"auth_failures_allowed": ALLOWED, "auth_failures_window_s": 600, "auth_block_s": 300}
    return make_plugin(auth="basic", users_file=users_path, **limits, **settings)


@contextmanager
def _client(url: str, password: str, peer: str = "127.0.0.1", forwarded: str | None = None) -> Iterator[httpx.Client]:
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    transport = httpx.HTTPTransport(local_address=peer, verify=CLIENT_SSL)
    with httpx.Client(
        base_url=url, auth=httpx.BasicAuth("alice", password), transport=transport, headers=headers
    ) as client:
        yield client


def _status(url: str, password: str, peer: str = "127.0.0.1", forwarded: str | None = None) -> int:
    with _client(url, password, peer, forwarded) as client:
        return client.get(f"{BASE}/_sessions").status_code


def _remotes(plugin: Plugin) -> list[str | None]:
    path = plugin.settings.data_dir / "audit" / "audit.log"
    return [json.loads(line)["remote"] for line in path.read_text().splitlines()]


def test_a_new_forwarded_address_per_guess_does_not_escape_the_limit(
    make_plugin: PluginFactory, users_path: Path
) -> None:
    """The attack: 15 wrong passwords, each with a new X-Forwarded-For, never reached the limit.
    Without a trusted proxy every guess counts against the connection's peer."""
    plugin = _plugin(make_plugin, users_path)
    with serve_http(create_app(plugin)) as url:
        for i in range(ALLOWED):
            assert _status(url, "not-her-password", forwarded=f"203.0.113.{i + 1}") == 401
        assert _status(url, PASSWORD, forwarded="203.0.113.200") == 429  # the peer is refused
        assert _status(url, PASSWORD, peer="127.0.0.2") == 200  # another peer is not
    assert set(_remotes(plugin)) == {"127.0.0.1", "127.0.0.2"}  # never an address a caller wrote


def test_failing_under_someone_else_s_address_does_not_lock_them_out(
    make_plugin: PluginFactory, users_path: Path
) -> None:
    """The attack: 10 wrong passwords from 127.0.0.1 (which uvicorn trusted) with X-Forwarded-For
    198.51.100.9 locked that address out for everyone who sent it, and not the guesser. Now the
    guesser's own peer is refused, 198.51.100.9 is never counted, and nobody else notices."""
    plugin = _plugin(make_plugin, users_path)
    with serve_http(create_app(plugin)) as url:
        for _ in range(ALLOWED + 2):
            assert _status(url, "not-her-password", forwarded=SPOOFED) in (401, 429)
        assert _status(url, PASSWORD) == 429  # the guesser, whatever it forwards (or not)
        assert _status(url, PASSWORD, peer="127.0.0.2", forwarded=SPOOFED) == 200
    assert SPOOFED not in _remotes(plugin)
    assert plugin.settings.trusted_proxies == []


def test_behind_a_trusted_proxy_the_address_it_forwards_counts(make_plugin: PluginFactory, users_path: Path) -> None:
    """127.0.0.1 plays the proxy. Its X-Forwarded-For is read right to left, the first address
    that is not a trusted proxy being the client: a client's failures refuse that client, not the
    proxy (nor the others behind it); what a client wrote to the left of it counts for nothing;
    and a peer that is no trusted proxy is judged by its own address, whatever it forwards."""
    plugin = _plugin(make_plugin, users_path, trusted_proxies=["127.0.0.1"])
    with serve_http(create_app(plugin)) as url:
        # The client wrote an address of its own; the proxy appended the one it saw.
        for i in range(ALLOWED):
            assert _status(url, "not-her-password", forwarded=f"203.0.113.{i + 1}, {SPOOFED}") == 401
        assert _status(url, PASSWORD, forwarded=SPOOFED) == 429
        assert _status(url, PASSWORD, forwarded=f"{SPOOFED}, 127.0.0.1") == 429  # trusted hops are skipped
        # (Checked before the password is verified once: a verified header is let in from anywhere.)
        assert _status(url, PASSWORD, forwarded="203.0.113.50, 192.0.2.4") == 200  # another client of the proxy
        assert _status(url, PASSWORD) == 200  # the proxy itself, forwarding nothing
        assert _status(url, PASSWORD, peer="127.0.0.2", forwarded=SPOOFED) == 200  # not a proxy: its own address
    remotes = _remotes(plugin)
    assert remotes.count(SPOOFED) == ALLOWED + 2
    assert "192.0.2.4" in remotes and "127.0.0.2" in remotes
    assert not any(r and r.startswith("203.0.113.") for r in remotes)


def test_the_gateway_forwards_the_client_address_it_read_not_the_callers(
    make_plugin: PluginFactory, users_path: Path
) -> None:
    upstream = Upstream()
    try:
        for trusted, peer, sent, expected in (
            ([], "127.0.0.2", SPOOFED, "127.0.0.2"),
            (["127.0.0.1"], "127.0.0.1", f"203.0.113.1, {SPOOFED}", SPOOFED),
        ):
            plugin = make_plugin(trusted_proxies=trusted)
            gateway = Gateway(upstream.url, service_credentials(OpenSearchConfig(url=upstream.url)))
            with serve_http(create_app(plugin, gateway=gateway)) as url:
                with httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=peer, verify=CLIENT_SSL)) as client:
                    headers = {"X-Forwarded-For": sent, "Forwarded": "for=203.0.113.9", "X-Real-IP": "203.0.113.9"}
                    assert client.get("/_cat/indices", headers=headers).status_code == 200
            seen = upstream.seen[-1]
            assert seen.header("x-forwarded-for") == [expected]
            assert seen.header("forwarded") == [] and seen.header("x-real-ip") == []
    finally:
        upstream.close()
