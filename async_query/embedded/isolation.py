"""``osmem-server`` out of every other local process's reach: a network namespace of its own.

``osmem-server`` has no authentication and listens on TCP only, so on the host's loopback any
local process could read and write the index behind the index server's back (and its credential).
The index server therefore binds its public port in the host's network namespace first, then
moves itself into a new, empty one (only its own loopback, brought up here) before it starts
``osmem-server``: the server, its snapshot worker and every connection the index server makes to
them live there, and nothing outside can connect to them. The public socket, bound before the
move, stays in the host's namespace and serves as before.

Making a network namespace needs ``CAP_SYS_ADMIN`` (the service running as root, as where jobs run
as another user). Without it the index server goes on unisolated and says so: the credential still
guards its public port, not ``osmem-server``'s private one (``docs/security.md``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import logging
import os
import socket
import struct

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def bind_public(host: str, port: int) -> socket.socket:
    """The public socket, bound (not yet listening: a connection before the index server is ready
    is refused, not left waiting)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def enter_private_network() -> str | None:
    """Move this process (its calling thread, and every process and thread it starts from now on)
    into a new network namespace with its loopback up. Returns None when done, else why not."""
    if not hasattr(os, "unshare") and not _libc_has_unshare():
        return "this platform has no network namespaces"
    try:
        _unshare(CLONE_NEWNET)
    except OSError as exc:
        return f"no network namespace of its own ({os.strerror(exc.errno or 0)}: needs CAP_SYS_ADMIN)"
    try:
        _loopback_up()
    except OSError as exc:  # pragma: no cover - a fresh namespace always has its loopback
        return f"the private network's loopback cannot be brought up ({exc})"
    return None


def network_namespace(pid: int | str = "self") -> str:
    """The network namespace of a process (``net:[<inode>]``), to tell two apart."""
    return os.readlink(f"/proc/{pid}/ns/net")


def _libc_has_unshare() -> bool:
    name = ctypes.util.find_library("c")
    return name is not None and hasattr(ctypes.CDLL(name), "unshare")


def _unshare(flags: int) -> None:
    unshare = getattr(os, "unshare", None)
    if unshare is not None:  # Python 3.12 and later
        unshare(flags)
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
