"""Which user owns a TCP socket on the loopback address, from the kernel's tables of TCP sockets
(``/proc/net/tcp``, ``tcp6``), as ``LoopbackMetastore.java`` checks its peers.

A port on 127.0.0.1 is any local user's to bind first: a port a child is told to listen on (on its
command line, readable by every local user) can be taken before the child binds it. So the service
does not take "something listens there" for its child: the listening socket must belong to the
child's user (:func:`listener_owners`), and a client connected to it checks, before it sends
anything, that its peer's socket does (:func:`check_peer`). See docs/security.md, "What listens
where".
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
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


class UntrustedPeerError(OSError):
    """The socket at the other end belongs to another user than the one expected."""


def _entries() -> Iterator[tuple[str, int, str, int, str, int]]:
    """(local address, local port, remote address, remote port, state, uid) of every TCP socket."""
    for table in TABLES:
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
        except OSError:
            continue


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
    """The uid owning the other end of ``conn``, a TCP connection over loopback (None: unknown)."""
    try:
        _, here = conn.getsockname()[:2]
        _, there = conn.getpeername()[:2]
    except OSError:
        return None
    # The other end's socket: its local port is our peer's, its remote port ours.
    found = {
        uid
        for _, lport, _, rport, state, uid in _entries()
        if lport == there and rport == here and state not in (LISTEN, TIME_WAIT)
    }
    return found.pop() if len(found) == 1 else None


def check_peer(conn: socket.socket, uid: int | None) -> None:
    """Raise :class:`UntrustedPeerError` unless ``conn``'s other end is ``uid``'s (None: not checked)."""
    if uid is None:
        return
    owner = peer_owner(conn)
    if owner != uid:
        raise UntrustedPeerError(f"the socket at port {conn.getpeername()[1]} belongs to uid {owner}, not {uid}")
