"""The concurrency limit in front of the app: requests beyond it are a 503 in the error shape,
answered at once; a place frees when a request ends. (The server's socket limits are tested with
real sockets in tests/integration/test_http_limits.py.)"""

from __future__ import annotations

import asyncio

import httpx
from starlette.types import Receive, Scope, Send

from async_query.http_limits import ConcurrencyLimit


def test_requests_beyond_the_limit_are_a_503_in_the_error_shape_until_one_ends() -> None:
    release = asyncio.Event()

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    limited = ConcurrencyLimit(slow_app, limit=2)

    async def scenario() -> tuple[list[int], httpx.Response, int]:
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            held = [asyncio.create_task(client.get("/")) for _ in range(2)]
            while limited.active < 2:
                await asyncio.sleep(0)  # let both reach the app
            refused = await client.get("/")
            release.set()
            statuses = [(await task).status_code for task in held]
            again = await client.get("/")
            return statuses, refused, again.status_code

    statuses, refused, again = asyncio.run(scenario())
    assert statuses == [200, 200] and again == 200
    assert refused.status_code == 503
    assert refused.json() == {
        "status": 503,
        "error": {
            "type": "ServiceUnavailableException",
            "reason": "Service Unavailable",
            "details": "more than 2 requests at once; try again later",
        },
    }
    assert limited.refused == 1 and limited.active == 0

