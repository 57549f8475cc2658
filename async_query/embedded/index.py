"""The embedded index: ``osmem-server`` behind a journaling proxy, kept on disk across restarts.

``osmem-server`` holds documents in memory only. The index server process
(:mod:`async_query.embedded.keeper`, a child of the service) puts a proxy in front of it, on the
one URL every writer uses (the service, its Spark jobs and their executors): a write is
acknowledged only once its effect is in a write-ahead journal on disk, and a read is answered only
once every write it could have seen is. Snapshots compact the journal in the background, as often
as the write rate calls for. A restart loads the last snapshot and replays the journal on top, so a
crash (kill -9 of everything) loses nothing that was acknowledged. ``docs/durability.md`` tells
the design and its reasons.

The index server answers only requests that carry its credential (HTTP basic authentication): one
generated at each start unless the caller hands the previous one back (a restart under running
clients), given to the index server on its stdin (never on a command line), to the service's own
connection and to its jobs (as their index password, which travels in their environment).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from async_query.embedded.osmem_process import ready_line
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError

log = logging.getLogger(__name__)

#: How long a start may take: loading a large snapshot and replaying the journal.
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class JournalOptions:
    """How the index server journals and compacts (see :class:`async_query.settings.Settings`)."""

    #: How long a commit waits for more writes to join its sync (0: none; commits still
    #: group every write that arrives while the previous one syncs).
    commit_window_ms: float = 0.0
    #: Compact once the journal since the last snapshot reaches this fraction of the snapshot...
    compact_ratio: float = 0.5
    #: ...and at least this many bytes.
    compact_min_bytes: int = 1 << 20
    #: ``osmem-server`` in a network namespace of its own, where this process may make one
    #: (off: its private URL is reachable from the host, for tests and benches that read it).
    isolate_network: bool = True

    def arguments(self) -> list[str]:
        return [
            f"--commit-window-ms={self.commit_window_ms}",
            f"--compact-ratio={self.compact_ratio}",
            f"--compact-min-bytes={self.compact_min_bytes}",
            *([] if self.isolate_network else ["--no-isolate-network"]),
        ]


#: The user name of the embedded index's credential.
INDEX_USER = "async-query"


@dataclass(frozen=True)
class IndexCredential:
    """What a client of the embedded index must send (basic authentication)."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def generate(cls) -> IndexCredential:
        return cls(INDEX_USER, secrets.token_urlsafe(32))

    def header(self) -> str:
        """The ``Authorization`` header's value."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


class EmbeddedIndex:
    """The index server process serving ``directory``; :attr:`url` is the one to hand out, with
    :attr:`credential` (:meth:`config` makes a connection of both)."""

    def __init__(
        self, process: subprocess.Popen[bytes], ready: dict[str, Any], directory: Path, credential: IndexCredential
    ) -> None:
        self.process = process
        self.directory = directory
        self.credential = credential
        self.url: str = ready["url"]
        #: ``osmem-server`` itself, behind the proxy: a write made there is not journaled (tests
        #: and benches only; reachable from the host only when not :attr:`isolated`).
        self.private_url: str = ready["osmem_url"]
        #: Whether ``osmem-server`` runs in a network namespace of its own.
        self.isolated: bool = bool(ready.get("isolated", False))
        self.osmem_pid: int = ready["osmem_pid"]
        self.replayed: dict[str, Any] = ready.get("replayed", {})
        self._closed = False

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def auth(self) -> tuple[str, str]:
        """(user, password), as HTTP clients take basic authentication."""
        return self.credential.username, self.credential.password

    def config(self, **overrides: Any) -> OpenSearchConfig:
        """A connection to this index (``overrides``: other :class:`OpenSearchConfig` fields)."""
        return OpenSearchConfig(**{**overrides, **self.connection_fields()})

    def connection_fields(self) -> dict[str, Any]:
        """The :class:`OpenSearchConfig` fields that reach this index: URL and credential."""
        return {"url": self.url, "auth": "basic", "username": self.credential.username, "password": self.credential.password}

    @classmethod
    def start(
        cls,
        directory: Path,
        port: int = 0,
        options: JournalOptions | None = None,
        credential: IndexCredential | None = None,
    ) -> EmbeddedIndex:
        """Start the index server on ``directory`` (its snapshot loaded, its journal replayed).
        ``port`` 0 takes a free one; a fixed port lets a restarted server keep its clients, and
        so does handing it the previous server's ``credential`` (default: a new one)."""
        credential = credential or IndexCredential.generate()
        directory = directory.resolve()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        began = time.monotonic()
        command = [sys.executable, "-m", "async_query.embedded.keeper", f"--dir={directory}", f"--port={port}"]
        command += (options or JournalOptions()).arguments()
        command.append(f"--log-level={logging.getLevelName(logging.getLogger().getEffectiveLevel())}")
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdin is not None
        try:  # the credential's first and only way in: a line on the index server's stdin
            process.stdin.write(json.dumps({"authorization": credential.header()}).encode() + b"\n")
            process.stdin.flush()
        except OSError:
            pass  # it exited already: the wait below says so
        ready = _wait_ready(process)
        embedded = cls(process, ready, directory, credential)
        log.info("embedded index server at %s (%s) ready in %.1f s", embedded.url, directory, time.monotonic() - began)
        return embedded

    def stats(self) -> dict[str, Any]:
        """The index server's figures: journal, snapshots, compactions, last replay."""
        return dict(httpx.get(f"{self.url}/_embedded/journal", auth=self.auth, timeout=30).json())

    def compact(self) -> dict[str, Any]:
        """Compact now (snapshot, drop the journal it covers); returns the figures after."""
        return dict(httpx.post(f"{self.url}/_embedded/compact", auth=self.auth, timeout=600).json())

    def close(self) -> None:
        """Stop the index server: every acknowledged write is already durable (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("the embedded index server did not stop in %.0f s; killing it", STOP_TIMEOUT_S)
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def kill(self) -> None:
        """SIGKILL the index server and ``osmem-server``: a crash, for tests."""
        self._closed = True
        for pid in (self.process.pid, self.osmem_pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


def _wait_ready(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The index server's first stdout line (its URLs), or an error once it exited or timed out."""
    found = ready_line(process, name="index-start")
    if found is None:
        if process.poll() is None:
            process.kill()
        process.wait()
        raise AsyncQueryError(f"cannot start the embedded index server (exit code {process.returncode}; see its log)")
    return found
