"""Whose socket is at the far end of a loopback connection: what a client of the embedded index
checks before it sends the index's credential (docs/security.md, "The embedded index").

The embedded node listens on 127.0.0.1, and its port is free whenever the node is down (it died,
or is being started again): any local user may bind it then, and would receive whatever a client
sends there, the credential's ``Authorization`` header first. So a client given the uid the node
runs as (``OpenSearchConfig.peer_uid``) checks each connection it opens, once connected and before
it writes a byte: the kernel's table of TCP sockets (``/proc/net/tcp``) names the owner of the
socket at the far end (the one the listener accepted, whose owner is the listener's); any other
owner, and the connection is closed unused (:class:`PeerRefusedError`, a connection error to the
callers: the index is unavailable for as long as the impostor holds the port).

The check covers IPv4 loopback connections, the embedded node's; a connection elsewhere has
nothing to check here (a remote cluster's TLS is its identity). A machine without
``/proc/net/tcp`` cannot tell, and is refused: the embedded index runs on Linux.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: The kernel's tables of this network namespace's TCP sockets, IPv4 and IPv6.
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


class PeerRefusedError(ConnectionError):
    """The socket at the far end of a connection does not belong to the expected user."""


def _hex_address(host: str, port: int, mapped: bool = False) -> str:
    """``host:port`` as the kernel's table writes it: the address's 32-bit words each in host
    order (``mapped``: as an IPv4-mapped IPv6 address, in the table of IPv6 sockets)."""
    packed = socket.inet_aton(host)
    if mapped:
        packed = socket.inet_pton(socket.AF_INET6, "::ffff:" + host)
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    return "".join(f"{int.from_bytes(word, 'little'):08X}" for word in words) + f":{port:04X}"


def peer_owner(sock: socket.socket, tables: tuple[Path, Path] = TCP_TABLES) -> int | None:
    """The uid owning the far end of the connected IPv4 ``sock`` (None: not found). A JVM's
    listener is an IPv6 socket taking IPv4 connections: its end is in the IPv6 table, with the
    addresses mapped."""
    local_host, local_port = sock.getsockname()[:2]
    peer_host, peer_port = sock.getpeername()[:2]
    for table, mapped in zip(tables, (False, True), strict=True):
        far, near = _hex_address(peer_host, peer_port, mapped), _hex_address(local_host, local_port, mapped)
        try:
            lines = table.read_text(encoding="ascii").splitlines()[1:]
        except FileNotFoundError:
            continue  # no IPv6 on this machine
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[1] == far and fields[2] == near:
                return int(fields[7])
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
