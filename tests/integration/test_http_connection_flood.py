"""A client without credentials holding every connection slot (docs/security.md, "Resource limits").

Found by an attack as another local user: connections that open and send part of a request head,
each re-opened before the 10 s head timeout cuts it, held the service's 512 connection slots with
about 60 new connections a second; every other client, the admin with a valid password included,
had each connection closed as soon as it was accepted, for as long as the flood lasted. Nobody
authenticated is needed for it (the slots are taken before any request is read), and on loopback
every local user shares one address. A slot held by a connection that has not sent a whole request
head should not keep a client that has one from being served.
"""

from __future__ import annotations

import httpx

from async_query.api import BASE
from async_query.runtime import Plugin
from tests.integration.test_http_limits import SlowClient, limited  # noqa: F401 - the fixture
from tests.node import CLIENT_SSL
from tests.support import wait_for


def test_connections_that_never_finish_a_head_cannot_keep_a_whole_request_out(
    limited: tuple[str, int, Plugin],  # noqa: F811 - the fixture imported above
) -> None:
    url, port, _ = limited  # at most 16 connections, heads within 1 s
    holding = [SlowClient(port, b"GET / HTTP/1.1\r\nHo", every_s=0.05) for _ in range(16)]
    for client in holding:
        client.start()
    wait_for(lambda: all(c.sent > 0 for c in holding), what="the flood's connections to open")
    with httpx.Client(base_url=url, timeout=5, verify=CLIENT_SSL) as http:
        try:
            answered: object = http.get(f"{BASE}/_sessions").status_code
        except httpx.TransportError as exc:
            answered = exc
    assert answered == 200, f"a whole request was refused while half-sent heads held every slot: {answered!r}"
