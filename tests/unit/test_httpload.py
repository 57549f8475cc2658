"""The bench's load generator against a server slower than the run's window."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from bench.httpload import run_load
from tests.support import serve_http

#: Each reply of the slow server takes this long: longer than the whole timed run below.
REPLY_S = 0.3


def _slow_app() -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(REPLY_S)  # the server's own slowness, not the test's synchronisation
        return {}

    return app


def test_a_timed_run_records_each_client_even_when_its_warm_up_request_outlasts_the_run() -> None:
    with serve_http(_slow_app()) as url:
        result = run_load(url, lambda c, i: ("GET", "/", None), 2, duration=0.05, warmup=0.01)
    assert result.statuses == {200: 2}
    assert result.errors == 0
    assert min(result.latencies_ms) >= REPLY_S * 1000 * 0.9
