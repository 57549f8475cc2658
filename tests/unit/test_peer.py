"""The check a client of the embedded index makes of each connection before it sends anything
(:mod:`query_core.peer`)."""

from __future__ import annotations

import os
import socket

import httpx
import pytest

from query_core import peer
from query_core.peer import PeerRefusedError, check_peer, checked_transport, peer_owner
from tests.node import CLIENT_SSL


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_a_loopback_connection_names_its_listener_s_owner(family: socket.AddressFamily) -> None:
    """An IPv4 listener, and an IPv6 one taking IPv4 connections (a JVM's): the same owner."""
    with socket.socket(family) as listener:
        listener.bind(("127.0.0.1" if family == socket.AF_INET else "::", 0))
        listener.listen()
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1])) as conn:
            assert peer_owner(conn) == os.geteuid()
            check_peer(conn, os.geteuid())  # allowed: nothing raised, still open
            assert conn.fileno() != -1


def test_a_read_of_the_tables_that_missed_the_socket_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel writes its table in pieces: a socket opened or closed meanwhile may hide another's
    line from one read. A connection found on the next read is its owner's, not refused."""
    entries = peer._entries
    reads: list[int] = []

    def one_read_misses_it(*args: object) -> object:
        reads.append(1)
        return iter(()) if len(reads) == 1 else entries()

    monkeypatch.setattr(peer, "_entries", one_read_misses_it)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1])) as conn:
            check_peer(conn, os.geteuid())
            assert conn.fileno() != -1 and len(reads) == 2


def test_another_owner_is_refused_and_the_connection_closed_unused() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        conn = socket.create_connection(("127.0.0.1", listener.getsockname()[1]))
        with pytest.raises(PeerRefusedError, match=r"is not the embedded index's .* nothing was sent"):
            check_peer(conn, os.geteuid() + 1)
        assert conn.fileno() == -1
        accepted, _ = listener.accept()
        with accepted:
            accepted.settimeout(2)
            assert accepted.recv(10) == b""  # closed without a byte


def test_an_httpx_client_refuses_a_listener_of_another_owner_as_a_connection_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        transport = checked_transport(httpx.HTTPTransport(verify=CLIENT_SSL), os.geteuid() + 1)
        with httpx.Client(transport=transport, timeout=2) as client, pytest.raises(httpx.ConnectError):
            client.get(url, headers={"Authorization": "Basic c2VjcmV0"})
