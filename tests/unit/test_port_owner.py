"""Who owns a loopback socket (``query_core/peer.py``), and the metastore clients
that send nothing to a socket of another user than the metastore's (docs/security.md, "What
listens where"). Real sockets on the loopback address; "another user" is any uid but this
process's."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from async_query.catalog.bulk import BulkReadError, TablesEndpoint, read_tables
from async_query.catalog.readers import CatalogUnavailableError, HiveMetastoreReader
from query_core.peer import PeerRefusedError as PeerRefusedError
from query_core.peer import check_peer, listener_owners, listens_as, peer_owner

ME = os.geteuid()
SOMEONE_ELSE = ME + 4321


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    with server:
        yield server


def test_a_listening_socket_is_its_process_s_user_s(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert listener_owners(port) == {ME}
    assert listens_as(port, ME) and not listens_as(port, SOMEONE_ELSE)


def test_nothing_listens_on_a_closed_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening
        assert listener_owners(port) == set()


def test_a_connection_s_peer_is_the_listener_s_user_s(listener: socket.socket) -> None:
    with socket.create_connection(listener.getsockname()) as conn:
        assert peer_owner(conn) == ME
        check_peer(conn, ME)
        check_peer(conn, None)  # not checked
        with pytest.raises(PeerRefusedError):
            check_peer(conn, SOMEONE_ELSE)


def _received(listener: socket.socket) -> bytes:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(2)
        try:
            return conn.recv(4096)
        except OSError:
            return b""


def test_the_bulk_reads_send_no_token_to_another_user_s_socket(listener: socket.socket) -> None:
    endpoint = TablesEndpoint(listener.getsockname()[1], "secret-token-0123456789", owner=SOMEONE_ELSE)
    with pytest.raises(BulkReadError, match="belongs to uid"):
        read_tables(endpoint, "default", None, timeout_s=5)
    assert _received(listener) == b""


def test_the_thrift_reader_sends_nothing_to_another_user_s_socket(listener: socket.socket) -> None:
    reader = HiveMetastoreReader(f"thrift://127.0.0.1:{listener.getsockname()[1]}", timeout_s=5, owner=SOMEONE_ELSE)
    try:
        with pytest.raises(CatalogUnavailableError, match="belongs to uid"):
            reader.databases()
    finally:
        reader.close()
    assert _received(listener) == b""
