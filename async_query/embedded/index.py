"""The embedded index server (``osmem-server``), kept on disk across restarts.

The server holds its documents in memory. This module snapshots every index that changed into a
seed directory (``<index>.index.json`` with its mappings and settings, ``<index>.ndjson`` with its
documents as a bulk body, the layout ``osmem-server --seed`` loads) every ``interval_s`` seconds
and once more on a graceful stop, and seeds a new server from it at start. So a graceful stop
loses nothing and a crash loses at most the last interval's writes.

A snapshot reads each changed index whole: fine for the query history of one machine. Each file is
written to a temporary name and renamed into place, so a crash mid-snapshot leaves the previous
version of that index, never a torn file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError
from query_core.ids import REQUEST_INDEX_PREFIX
from query_core.store import IndexClient

log = logging.getLogger(__name__)

DEFINITION_SUFFIX = ".index.json"
DOCUMENTS_SUFFIX = ".ndjson"


def _replace(path: Path, write: Any) -> None:
    """Write a file through a temporary name and an atomic rename (``write`` gets the open file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        write(out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


class Snapshotter:
    """Copies changed indexes of a cluster into a seed directory."""

    def __init__(self, store: IndexClient, directory: Path) -> None:
        self.store = store
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._marks: dict[str, tuple[int, int]] = {}
        self.snapshots = 0

    def snapshot(self) -> list[str]:
        """Write what changed since the last call; returns the indexes written.

        Request indexes are written first, and each later index is judged changed by a mark read
        just before it is read: the job writes a result before its statement's ``success``, so
        every ``success`` a snapshot holds finds its result in that snapshot too (a mark read
        once for the whole pass could find the result index unchanged and leave its new result
        out, while the request index, read later, already held the ``success``)."""
        marks = self.store.write_marks()
        written: list[str] = []
        for name in sorted(marks, key=lambda n: (not n.startswith(REQUEST_INDEX_PREFIX), n)):
            mark = marks[name] if not written else self.store.write_marks().get(name, marks[name])
            if self._marks.get(name) != mark:
                self._write_index(name)
                self._marks[name] = mark
                written.append(name)
        for gone in set(self._marks) - set(marks):
            for suffix in (DEFINITION_SUFFIX, DOCUMENTS_SUFFIX):
                (self.directory / f"{gone}{suffix}").unlink(missing_ok=True)
            del self._marks[gone]
        if written:
            self.snapshots += 1
        return written

    def adopt(self) -> int:
        """Take the cluster as it is now as already written (it was just loaded from this
        directory); returns how many documents it holds."""
        self._marks = self.store.write_marks()
        return sum(docs for _, docs in self._marks.values())

    def _write_index(self, name: str) -> None:
        definition = self.store.index_definition(name)
        _replace(self.directory / f"{name}{DEFINITION_SUFFIX}", lambda out: json.dump(definition, out))

        def documents(out: Any) -> None:
            for doc_id, source in self.store.scan(name):
                out.write(json.dumps({"index": {"_id": doc_id}}, ensure_ascii=False))
                out.write("\n")
                out.write(json.dumps(source, ensure_ascii=False, separators=(",", ":")))
                out.write("\n")

        _replace(self.directory / f"{name}{DOCUMENTS_SUFFIX}", documents)


class EmbeddedIndex:
    """``osmem-server`` on a free loopback port, seeded from and snapshotted to ``directory``."""

    def __init__(self, server: Any, directory: Path, interval_s: float) -> None:
        self.server = server
        self.url: str = server.url
        self.store = IndexClient(OpenSearchConfig(url=self.url, retry_seconds=5.0))
        self.snapshotter = Snapshotter(self.store, directory)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="index-snapshots", daemon=True)
        self._closed = False

    @classmethod
    def start(cls, directory: Path, interval_s: float = 2.0, port: int = 0) -> EmbeddedIndex:
        """Start the server with the last snapshot's documents; snapshots start at once.
        ``port`` 0 takes a free one; a fixed port lets a restarted server keep its clients."""
        directory.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        server = _start_server(directory, port)
        embedded = cls(server, directory, interval_s)
        try:
            loaded = embedded.snapshotter.adopt()
        except AsyncQueryError:
            embedded.close()
            raise
        log.info(
            "embedded index server at %s: %d documents loaded from %s in %.1f s",
            embedded.url,
            loaded,
            directory,
            time.monotonic() - began,
        )
        embedded._thread.start()
        return embedded

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._snapshot_logged()

    def _snapshot_logged(self) -> None:
        try:
            self.snapshotter.snapshot()
        except (AsyncQueryError, OSError) as exc:
            log.warning("snapshot of the embedded index failed (will try again): %s", exc)

    def close(self) -> None:
        """Take a last snapshot, then stop the server (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        self._snapshot_logged()
        self.store.close()
        self.server.close()


def _start_server(directory: Path, port: int = 0) -> Any:
    """The server, seeded from ``directory`` when it holds a snapshot. A snapshot the server cannot
    load is set aside (never deleted) and the server starts empty, saying so loudly."""
    from osmem_server import OsmemError, OsmemServer

    has_snapshot = any(p.name.endswith(DEFINITION_SUFFIX) for p in directory.iterdir())
    try:
        return OsmemServer.start(addr=f"127.0.0.1:{port}", japanese=False, seed=[directory] if has_snapshot else None)
    except OsmemError as exc:
        if not has_snapshot:
            raise AsyncQueryError(f"cannot start the embedded index server: {exc}") from exc
        aside = directory.with_name(f"{directory.name}.unloadable-{time.strftime('%Y%m%d-%H%M%S')}")
        directory.rename(aside)
        directory.mkdir()
        log.error("the embedded index snapshot could not be loaded (%s); kept at %s, starting empty", exc, aside)
    try:
        return OsmemServer.start(addr=f"127.0.0.1:{port}", japanese=False)
    except OsmemError as exc:
        raise AsyncQueryError(f"cannot start the embedded index server: {exc}") from exc
