"""Which address a request comes from: its connection's peer, or, when that peer is one of the
proxies the settings name (``ASYNC_QUERY_TRUSTED_PROXIES``), the client its ``X-Forwarded-For``
names (docs/security.md, "Client addresses"). The failed-login limit, the audit log and the
gateway's ``X-Forwarded-For`` all read the one address this leaves in ``scope["client"]``.

uvicorn believes ``X-Forwarded-For`` from 127.0.0.1 by default (``proxy_headers``): any local
process, or anyone whose requests a local proxy passes on, could then name its own address, spread
failed logins over made-up addresses, lock a real one out, and write any address into the audit
log. ``serve`` turns that off (:data:`SERVER_OPTIONS`), and the app applies uvicorn's own
middleware itself, trusting the named proxies only: read right to left, the first address that
is not a trusted proxy is the client, as uvicorn's trusted hosts work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from starlette.types import ASGIApp, Scope
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

#: The uvicorn options every server of the app runs with: uvicorn's own proxy-header handling off,
#: whatever ``FORWARDED_ALLOW_IPS`` says (the app applies the settings' trusted proxies itself).
SERVER_OPTIONS: dict[str, Any] = {"proxy_headers": False}

#: Headers by which a caller can name addresses: the gateway passes none of the caller's upstream,
#: and sends ``X-Forwarded-For`` with the client's address as read here.
FORWARDING_HEADERS = frozenset(
    {b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-port", b"x-forwarded-proto", b"x-real-ip"}
)


def with_client_addresses(app: ASGIApp, trusted_proxies: Sequence[str]) -> ASGIApp:
    """``app``, with ``scope["client"]`` read from ``X-Forwarded-For`` for requests whose peer is
    one of ``trusted_proxies`` (addresses or networks); ``app`` itself when none is named."""
    if not trusted_proxies:
        return app
    # uvicorn types its middleware with its own ASGI types; it is an ASGI app like any other.
    middleware: Any = ProxyHeadersMiddleware(app, trusted_hosts=list(trusted_proxies))  # type: ignore[arg-type]
    return cast(ASGIApp, middleware)


def client_address(scope: Scope) -> str | None:
    """The request's client address, as :func:`with_client_addresses` left it."""
    client = scope.get("client")
    return str(client[0]) if client else None
