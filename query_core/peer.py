"""Whose socket is at a loopback port: what the service checks of the children it starts (the
embedded index, the metastores), and what their clients check before they send anything
(docs/security.md, "The embedded index" and "What listens where").

A port on 127.0.0.1 is any local user's to bind whenever its owner is not listening: before a
child binds the port it was told (on its command line, readable by every local user), and while a
child is down (it died, or is being started again). Whoever binds it then would receive what a
client sends there: the embedded index's ``Authorization`` header first. So:

- the service takes a child for started only when the socket listening on its port belongs to the
  child's user (:func:`listens_as`);
- a client given the uid its server runs as (``OpenSearchConfig.peer_uid`` for the embedded index)
  checks each connection it opens, once connected and before it writes a byte: the socket at the
  far end (the one the listener accepted, whose owner is the listener's) must belong to that uid
  (:func:`check_peer`); any other, and the connection is closed unused (:class:`PeerRefusedError`,
  a connection error to the callers: the server is unavailable while the impostor holds the port).

Both read the kernel's tables of TCP sockets (``/proc/net/tcp``, ``tcp6``). Only IPv4 loopback
connections are checked (the embedded servers'); a connection elsewhere has nothing to check here
(a remote cluster's TLS is its identity). A machine without those tables cannot tell, and is
refused: the embedded servers run on Linux.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: The kernel's tables of this network namespace's TCP sockets, IPv4 and IPv6.
TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
#: Reads of the tables before a socket is taken for missing: the kernel writes a table in pieces,
#: and a socket opened or closed meanwhile may hide another's line from one read (under many
#: connections, as in a busy test run).
TABLE_READS = 3
#: The kernel's state numbers of a listening socket, and of one closed but kept (whose uid is lost).
LISTEN = "0A"
TIME_WAIT = "06"
#: Addresses a listener on which answers a connection to 127.0.0.1 (as the tables write them:
#: IPv4 in the host's byte order, little-endian here; IPv6 as four such words).
_REACHES_LOOPBACK = {
    "0100007F",  # 127.0.0.1
    "00000000",  # 0.0.0.0
    "00000000000000000000000000000000",  # ::
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


class PeerRefusedError(ConnectionError):
    """The socket at the far end of a connection does not belong to the expected user."""


def _entries(tables: tuple[Path, ...] = TABLES) -> Iterator[tuple[str, int, str, int, str, int]]:
    """(local address, local port, remote address, remote port, state, uid) of every TCP socket.
    A JVM's listener is an IPv6 socket taking IPv4 connections: its sockets are in the IPv6 table."""
    for table in tables:
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)  # the header
                for line in lines:
                    fields = line.split()
                    if len(fields) < 8:
                        continue
                    local, _, lport = fields[1].rpartition(":")
                    remote, _, rport = fields[2].rpartition(":")
                    yield local, int(lport, 16), remote, int(rport, 16), fields[3], int(fields[7])
        except FileNotFoundError:
            continue  # no IPv6 on this machine


def listener_owners(port: int) -> set[int]:
    """The uids of the sockets listening on ``port`` that a connection to 127.0.0.1 may reach
    (empty: nothing listens there)."""
    return {
        uid
        for local, lport, _, _, state, uid in _entries()
        if lport == port and state == LISTEN and local in _REACHES_LOOPBACK
    }


def listens_as(port: int, uid: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` and every such listener is ``uid``'s."""
    return listener_owners(port) == {uid}


def peer_owner(conn: socket.socket) -> int | None:
    """The uid owning the far end of ``conn``, a TCP connection over loopback (None: unknown)."""
    try:
        here = conn.getsockname()[1]
        there = conn.getpeername()[1]
    except OSError:
        return None
    # The far end's socket: its local port is our peer's, its remote port ours.
    for _ in range(TABLE_READS):
        found = {
            uid
            for _, lport, _, rport, state, uid in _entries()
            if lport == there and rport == here and state not in (LISTEN, TIME_WAIT)
        }
        if found:
            return found.pop() if len(found) == 1 else None
    return None


def is_loopback_ipv4(sock: socket.socket) -> bool:
    return sock.family == socket.AF_INET and sock.getpeername()[0].startswith("127.")


def refusal(sock: socket.socket, uid: int | None) -> str | None:
    """Why the connection ``sock`` must not be used (None: it may). ``uid`` None, or a connection
    off this machine's loopback: nothing to check."""
    if uid is None or not is_loopback_ipv4(sock):
        return None
    port = sock.getpeername()[1]
    try:
        owner = peer_owner(sock)
    except OSError as exc:
        return f"cannot tell who listens on port {port} ({exc}); nothing was sent to it"
    if owner == uid:
        return None
    whose = "no socket found" if owner is None else f"uid {owner}"
    return (
        f"port {port} is not the embedded index's (its listener belongs to {whose}, not uid {uid}); "
        "nothing was sent to it"
    )


def check_peer(sock: socket.socket, uid: int | None) -> None:
    """Close ``sock`` and raise :class:`PeerRefusedError` unless it may be used (:func:`refusal`)."""
    reason = refusal(sock, uid)
    if reason is not None:
        sock.close()
        raise PeerRefusedError(reason)


class CheckedBackend:
    """httpcore's network backend (sync), each new connection checked (:func:`check_peer`):
    what an ``httpx`` client of the embedded index connects through (:func:`checked_transport`)."""

    def __init__(self, inner: Any, uid: int) -> None:
        self._inner = inner
        self._uid = uid

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        stream = self._inner.connect_tcp(*args, **kwargs)
        reason = refusal(stream.get_extra_info("socket"), self._uid)
        if reason is not None:
            stream.close()
            raise _connect_error(reason)
        return stream

    def __getattr__(self, name: str) -> Any:  # connect_unix_socket, sleep
        return getattr(self._inner, name)


class AsyncCheckedBackend(CheckedBackend):
    """The same for httpcore's async backend."""

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        stream = await self._inner.connect_tcp(*args, **kwargs)
        reason = refusal(stream.get_extra_info("socket"), self._uid)
        if reason is not None:
            await stream.aclose()
            raise _connect_error(reason)
        return stream


def _connect_error(reason: str) -> Exception:
    """httpcore's own connection error (httpx's ``ConnectError`` to its callers)."""
    import httpcore

    return httpcore.ConnectError(reason)


def checked_transport(transport: T, uid: int | None) -> T:
    """``transport`` (an ``httpx.HTTPTransport`` or ``AsyncHTTPTransport``) with each new
    connection checked against ``uid`` (None: as it is)."""
    if uid is None:
        return transport
    pool = transport._pool  # type: ignore[attr-defined]
    checked = AsyncCheckedBackend if hasattr(pool, "aclose") else CheckedBackend
    pool._network_backend = checked(pool._network_backend, uid)
    return transport
