"""The audit log: one JSON line per authenticated request and per refusal.

``<data_dir>/audit/audit.log`` (directory 0700, files 0600), each line::

    {"time": "2025-01-31T12:00:00.123Z", "user": "alice", "action": "query.get", "datasource": "local",
     "queryId": "...", "outcome": "ok", "status": 200, "method": "GET", "path": "/_plugins/...",
     "remote": "127.0.0.1"}

It never holds a secret or a query's text: no header, body or query string is written, and the
user of a refused login only when that name is a known user (a name that is not may be a password
typed in the wrong field). Each line is handed to the OS at once (one ``write`` on an ``O_APPEND``
descriptor, so lines never interleave), not synced: a machine crash can lose the last lines.
Past ``max_bytes`` the file is rotated (``audit.log.1`` ... ``audit.log.<backups>``).

A failing write (a full disk) does not fail the request: it is logged, at most once a minute.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from async_query.security.files import open_private_append, private_dir

log = logging.getLogger(__name__)

FILE_NAME = "audit.log"
#: Longest path or id written (anything longer is cut: they are untrusted).
MAX_FIELD = 400
_ERROR_EVERY_S = 60.0
#: One encoder for every line (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def outcome_of(status: int) -> str:
    """``ok`` below 400; ``unauthenticated`` (401), ``forbidden`` (403), ``error`` otherwise."""
    if status < 400:
        return "ok"
    return {401: "unauthenticated", 403: "forbidden"}.get(status, "error")


_second: list[Any] = [-1, ""]


def utc_stamp(now: float) -> str:
    """ISO 8601 UTC with milliseconds (``2025-01-31T12:00:00.123Z``); the part down to the second
    is formatted once per second."""
    whole = int(now)
    cached = _second
    if cached[0] != whole:
        cached[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        cached[0] = whole
    return f"{cached[1]}.{int((now - whole) * 1000):03d}Z"


class AuditLog:
    """Appends audit lines to ``<directory>/audit.log``; thread-safe."""

    def __init__(self, directory: Path, max_bytes: int = 100_000_000, backups: int = 5) -> None:
        self.directory = private_dir(directory)
        self.path = directory / FILE_NAME
        self.max_bytes = max_bytes
        self.backups = max(0, backups)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._last_error = -_ERROR_EVERY_S

    def write(self, record: dict[str, Any]) -> None:
        line = (_ENCODER.encode(record) + "\n").encode()
        try:
            with self._lock:
                fd = self._open()
                if 0 < self.max_bytes < self._size + len(line) and self._size > 0:
                    self._rotate()
                    fd = self._open()
                os.write(fd, line)
                self._size += len(line)
        except OSError as exc:
            self._failed(exc)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_private_append(self.path)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def _rotate(self) -> None:
        self._close_fd()
        if self.backups == 0:
            os.unlink(self.path)
            return
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{FILE_NAME}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{FILE_NAME}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{FILE_NAME}.1"))

    def _failed(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._last_error >= _ERROR_EVERY_S:
            self._last_error = now
            log.error("cannot write the audit log %s: %s (requests go on; lines are lost)", self.path, exc)
        with self._lock:
            self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close_fd()
