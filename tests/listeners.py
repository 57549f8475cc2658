"""What a process tree listens on, read from ``/proc`` (docs/security.md, "What listens where").

Every process under a root (the service: its index, metastores, jobs and their JVMs and Python
workers, whatever it starts later) is found by its parent; each one's listening TCP sockets
(``/proc/<pid>/net/tcp`` and ``tcp6``, state ``LISTEN``) and bound UDP sockets are matched to its
open file descriptors. A process in a network namespace of its own is reported with that
namespace, so a test can tell "bound to loopback" from "out of the machine's network".
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = ("127.", "::1")
TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    pid: int
    command: str
    protocol: str
    address: str
    port: int
    #: The process's network namespace is not the root's (it lives out of the machine's network).
    own_namespace: bool

    def __repr__(self) -> str:
        return f"{self.protocol} {self.address}:{self.port} pid {self.pid} ({self.command[:120]})"

    @property
    def loopback(self) -> bool:
        return self.address.startswith(LOOPBACK)


def descendants(root: int) -> list[int]:
    """``root`` and every process under it, by their parents."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def listeners(root: int) -> list[Listener]:
    """Every listening socket of ``root``'s process tree."""
    root_namespace = _namespace(root)
    found: list[Listener] = []
    for pid in descendants(root):
        try:
            inodes = _socket_inodes(pid)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            namespace = _namespace(pid)
        except OSError:
            continue  # gone meanwhile
        for protocol in ("tcp", "tcp6", "udp", "udp6"):
            for address, port in _bound(pid, protocol, inodes):
                found.append(Listener(pid, command, protocol, address, port, namespace != root_namespace))
    return found


def _namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _bound(pid: int, protocol: str, inodes: set[str]) -> list[tuple[str, int]]:
    try:
        lines = Path(f"/proc/{pid}/net/{protocol}").read_text().splitlines()[1:]
    except OSError:
        return []
    bound = []
    for line in lines:
        fields = line.split()
        # TCP: listening; UDP: bound and not connected (it takes datagrams from anyone).
        listening = fields[3] == TCP_LISTEN if protocol.startswith("tcp") else fields[2].strip("0:") == ""
        if listening and fields[9] in inodes:
            address, port = fields[1].rsplit(":", 1)
            bound.append((_address(address), int(port, 16)))
    return bound


def _address(hex_address: str) -> str:
    """An address of ``/proc/net``'s tables (host byte order, per 32-bit word), as text; an
    IPv4-mapped IPv6 address as its IPv4 form."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words).removeprefix("::ffff:")
