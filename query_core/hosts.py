"""What counts as this machine: loopback addresses to listen on, and loopback Host and Origin
headers (kept light: the command line client uses it too)."""

from __future__ import annotations

import ipaddress

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def is_loopback_bind(host: str) -> bool:
    """Whether listening on (or connecting to) ``host`` stays on this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


def loopback_host(host: bytes | None) -> bool:
    """Whether a Host header names this machine by a loopback name (any port)."""
    if not host:
        return False
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        name, _, port = text.partition("]")
        name += "]"
        port = port[1:] if port.startswith(":") else port
    else:
        name, _, port = text.partition(":")
    return name in LOOPBACK_HOSTS and (port == "" or port.isdigit())


def loopback_origin(origin: bytes | None) -> bool:
    """Whether an Origin header is absent (not a browser's cross-site request) or a loopback page's."""
    if origin is None:
        return True
    scheme, sep, rest = origin.partition(b"://")
    return bool(sep) and scheme.lower() in (b"http", b"https") and loopback_host(rest)
