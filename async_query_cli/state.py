"""The CLI's remembered sessions: one session id per (service URL, datasource), like Dashboards.

OpenSearch Dashboards keeps the session id of each datasource in its sessionStorage and sends it
with the next query, so a series of queries runs warm in one Spark job. ``async-query submit`` does
the same with a small JSON file in the user's state directory (:func:`state_dir`)::

    {"version": 1, "sessions": [{"url": "http://127.0.0.1:9000", "datasource": "local",
                                 "sessionId": "...", "updatedAt": 1700000000.0}, ...]}

The file is only a cache: a missing, unreadable or corrupt file reads as empty, and a bad entry is
skipped. Writes go to a temporary file in the same directory that then replaces the file
(``os.replace``), so a reader never sees half a file; of two CLI processes writing at once the last
one wins. Only the :data:`MAX_ENTRIES` most recently used entries are kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

STATE_DIR_ENV = "ASYNC_QUERY_STATE_DIR"
FILE_NAME = "sessions.json"
VERSION = 1
#: Entries kept (most recently used first); older ones are dropped on write.
MAX_ENTRIES = 64
#: Longest session id kept (real ids are a few dozen characters; anything longer is not one).
MAX_ID_LEN = 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$ASYNC_QUERY_STATE_DIR``, else ``$XDG_STATE_HOME/async-query``, else ``~/.local/state/async-query``."""
    env = os.environ if environ is None else environ
    explicit = env.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    # The XDG spec: a relative path is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "async-query"
    return Path.home() / ".local" / "state" / "async-query"


def normalize_url(url: str) -> str:
    """The service URL as a key: scheme and host lower case, default port, credentials, query,
    fragment and trailing slashes dropped (``HTTP://Host:80/x/`` -> ``http://host/x``)."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return text.rstrip("/")
    scheme = parts.scheme.lower()
    if not scheme or not host:
        return text.rstrip("/")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


@dataclass(frozen=True)
class Entry:
    url: str
    datasource: str
    session_id: str
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "datasource": self.datasource,
            "sessionId": self.session_id,
            "updatedAt": self.updated_at,
        }

    @classmethod
    def from_json(cls, raw: object) -> Entry | None:
        """An entry, or None if ``raw`` is not a well-formed one."""
        if not isinstance(raw, dict):
            return None
        url, datasource, session_id = raw.get("url"), raw.get("datasource"), raw.get("sessionId")
        updated = raw.get("updatedAt", 0.0)
        if not all(isinstance(v, str) and v for v in (url, datasource, session_id)):
            return None
        if len(str(session_id)) > MAX_ID_LEN or isinstance(updated, bool) or not isinstance(updated, int | float):
            return None
        return cls(str(url), str(datasource), str(session_id), float(updated))


class RememberedSessions:
    """The remembered session ids, in one JSON file (``state_dir() / sessions.json`` by default)."""

    def __init__(self, path: Path | None = None, max_entries: int = MAX_ENTRIES) -> None:
        self.path = path if path is not None else state_dir() / FILE_NAME
        self.max_entries = max(1, max_entries)

    def get(self, url: str, datasource: str) -> str | None:
        """The session id last used for this service and datasource, if any."""
        key = (normalize_url(url), datasource)
        for entry in self.entries():
            if (entry.url, entry.datasource) == key:
                return entry.session_id
        return None

    def put(self, url: str, datasource: str, session_id: str) -> None:
        """Remember ``session_id`` for this service and datasource (raises ``OSError`` if the file
        cannot be written; the caller decides whether that matters)."""
        key = (normalize_url(url), datasource)
        entry = Entry(key[0], datasource, session_id, time.time())
        kept = [e for e in self.entries() if (e.url, e.datasource) != key]
        self._write([entry, *kept][: self.max_entries])

    def forget(self, url: str, datasource: str) -> None:
        """Drop the entry of this service and datasource (a no-op when there is none)."""
        key = (normalize_url(url), datasource)
        entries = self.entries()
        kept = [e for e in entries if (e.url, e.datasource) != key]
        if len(kept) != len(entries):
            self._write(kept)

    def entries(self) -> list[Entry]:
        """All well-formed entries, most recently used first; [] for a missing or corrupt file."""
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON: start afresh
            log.debug("ignoring the session state file %s: %s", self.path, exc)
            return []
        found = raw.get("sessions") if isinstance(raw, dict) else None
        if not isinstance(found, list):
            return []
        entries: list[Entry] = []
        seen: set[tuple[str, str]] = set()
        for item in found:
            entry = Entry.from_json(item)
            if entry is None or (entry.url, entry.datasource) in seen:
                continue
            seen.add((entry.url, entry.datasource))
            entries.append(entry)
        entries.sort(key=lambda e: e.updated_at, reverse=True)
        return entries[: self.max_entries]

    def _write(self, entries: list[Entry]) -> None:
        """Atomically replace the file: write a temporary file next to it, then ``os.replace``."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = json.dumps({"version": VERSION, "sessions": [e.to_json() for e in entries]}, indent=1)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(body + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
