"""A small blocking HTTP client of the index server's private port (replay and snapshots).

Both talk to ``osmem-server`` directly, never through the journaling proxy: replay rebuilds what
the journal already holds, and a snapshot only reads. One keep-alive connection, reopened once when
the server closed it while idle.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class IndexHttpError(Exception):
    """The index server answered with an unexpected status."""

    def __init__(self, method: str, target: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {target}: {status} {body[:300].decode('utf-8', 'replace')}")
        self.status = status
        self.body = body


class IndexHttp:
    def __init__(self, url: str, timeout: float = 300.0) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 9200
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, target: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request; returns the status and the whole body."""
        headers = {
            "Content-Type": "application/x-ndjson" if target.split("?")[0].endswith("_bulk") else "application/json"
        }
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                reply = conn.getresponse()
                return reply.status, reply.read()
            except (ConnectionError, http.client.BadStatusLine) as exc:  # closed while idle
                self.close()
                if attempt == 2:
                    raise ConnectionError(f"{method} {target}: {exc}") from exc
        raise AssertionError("unreachable")

    def json(self, method: str, target: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        """A request whose body and reply are JSON; raises :class:`IndexHttpError` unless ``ok``."""
        data = None if body is None else json.dumps(body).encode()
        status, reply = self.request(method, target, data)
        if status not in ok:
            raise IndexHttpError(method, target, status, reply)
        return json.loads(reply) if reply else None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
