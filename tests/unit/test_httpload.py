"""The bench's load generator against a server slower than the run's window."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.httpload import run_load

#: Each reply of the slow server takes this long: longer than the whole timed run below.
REPLY_S = 0.3


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        time.sleep(REPLY_S)  # the server's own slowness, not the test's synchronisation
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_timed_run_records_each_client_even_when_its_warm_up_request_outlasts_the_run(slow_url: str) -> None:
    result = run_load(slow_url, lambda c, i: ("GET", "/", None), 2, duration=0.05, warmup=0.01)
    assert result.statuses == {200: 2}
    assert result.errors == 0
    assert min(result.latencies_ms) >= REPLY_S * 1000 * 0.9
