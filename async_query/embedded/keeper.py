"""The embedded index server's process: ``osmem-server`` behind the journaling proxy.

Run by :class:`async_query.embedded.index.EmbeddedIndex` as ``python -m async_query.embedded.keeper``,
a child of the service in the service's process group. At start it takes the data directory's
lock, binds its public port, leaves the host's network for one of its own
(:mod:`async_query.embedded.isolation`), starts ``osmem-server`` there on a private loopback port
seeded from the last snapshot, puts back
the snapshot's templates, replays the journal on top, opens a new journal segment, and only then
listens on the public port and prints one JSON line (its URLs) on stdout. It compacts in the
background (a snapshot whenever the journal since the last one outgrows a fraction of it), and
stops when its stdin closes (the service stopped or died) or on SIGTERM; SIGINT is ignored, so that
Ctrl-C in a terminal leaves the index to the service's own shutdown. ``osmem-server`` exits with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from async_query.embedded.isolation import bind_public, enter_private_network
from async_query.embedded.journal import Journal, list_segments
from async_query.embedded.osmem_http import IndexHttp
from async_query.embedded.osmem_process import OsmemProcess, OsmemStartError
from async_query.embedded.proxy import Proxy
from async_query.embedded.replay import ReplayReport, replay
from async_query.embedded.snapshot import (
    DEFINITION_SUFFIX,
    DOCUMENTS_SUFFIX,
    MANIFEST_FILE,
    Manifest,
    has_snapshot,
    read_manifest,
    restore_templates,
    snapshot_name,
    without_empty_documents,
    write_manifest,
)

log = logging.getLogger("async_query.embedded.keeper" if __name__ == "__main__" else __name__)

JOURNAL_DIR = "journal"
LOCK_FILE = "LOCK"
#: How long a start waits for the directory's previous index server to let go of it.
LOCK_WAIT_S = 60.0
#: How often the journal's size is compared with the compaction threshold.
COMPACT_CHECK_S = 0.5
COMPACT_RETRY_S = 10.0


@dataclass(frozen=True)
class Options:
    directory: Path
    port: int = 0
    commit_window_s: float = 0.0
    compact_ratio: float = 0.5
    compact_min_bytes: int = 1 << 20
    #: The ``Authorization`` header every request must carry (None: no check).
    authorization: bytes | None = field(default=None, repr=False)
    #: ``osmem-server`` in a network namespace of its own (:mod:`async_query.embedded.isolation`).
    isolate_network: bool = True


@dataclass
class CompactionStats:
    compactions: int = 0
    failures: int = 0
    cpu_s: float = 0.0
    bytes_written: int = 0
    seconds: float = 0.0
    #: Journal bytes the compactions absorbed (dropped once their snapshot was written).
    absorbed_bytes: int = 0
    #: The longest pause of writes for a cut (milliseconds).
    max_pause_ms: float = 0.0
    last: dict[str, Any] | None = None
    #: The last few compactions' reports (with ``at``, ``reason`` and ``absorbed_bytes``).
    recent: list[dict[str, Any]] = field(default_factory=list)


class Keeper:
    def __init__(
        self,
        options: Options,
        osmem: OsmemProcess,
        manifest: Manifest,
        replayed: ReplayReport,
        public: socket.socket | None = None,
        isolated: bool = False,
    ) -> None:
        self.options = options
        #: The public socket, bound before this process left the host's network (None: bind at run).
        self.public = public
        #: Whether ``osmem-server`` runs in a network namespace of its own.
        self.isolated = isolated
        self.directory = options.directory
        self.osmem = osmem
        self.manifest = manifest
        self.replayed = replayed
        #: Indexes changed since the last cut (None: any); what the next snapshot rewrites.
        self.changed: set[str] | None = replayed.touched
        #: Journal bytes in closed segments that no snapshot holds yet.
        self.carried = replayed.bytes
        self.compaction = CompactionStats()
        self.snapshots = SnapshotWorker(osmem.url, logging.getLevelName(log.getEffectiveLevel()))
        self.journal: Journal | None = None
        self.proxy: Proxy | None = None
        self._stop: asyncio.Event | None = None
        self._compacting: asyncio.Lock | None = None

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._compacting = asyncio.Lock()
        first = max(self.replayed.last_segment + 1, self.manifest.journal_from)
        self.journal = Journal(self.directory / JOURNAL_DIR, first, loop, self.options.commit_window_s)
        host, port = _address(self.osmem.url)
        self.proxy = Proxy((host, port), self.journal, self.control, self.on_append, self.options.authorization)
        public = await self.proxy.start("127.0.0.1", self.options.port, self.public)
        loop.add_signal_handler(signal.SIGTERM, self._stop.set)
        _watch_stdin(loop, self._stop)
        compactor = loop.create_task(self._compact_when_due())
        _announce(public, self)
        await self._stop.wait()
        compactor.cancel()
        await self.proxy.close()
        self.journal.close()
        await self.snapshots.close()
        log.info("embedded index server stopped (journal durable up to record %d)", self.journal.durable)

    def on_append(self, indexes: set[str] | None) -> None:
        if indexes is None or self.changed is None:
            self.changed = None
        else:
            self.changed |= indexes

    def uncompacted_bytes(self) -> int:
        assert self.journal is not None
        return self.carried + self.journal.stats.bytes_since_cut

    def threshold_bytes(self) -> int:
        return max(int(self.options.compact_ratio * self.manifest.snapshot_bytes), self.options.compact_min_bytes)

    async def _compact_when_due(self) -> None:
        while True:
            await asyncio.sleep(COMPACT_CHECK_S)
            if not self._due():
                continue
            try:
                await self.compact("due")
            except (OSError, RuntimeError, ValueError) as exc:
                self.compaction.failures += 1
                log.error("compaction of the embedded index failed (the journal keeps everything): %s", exc)
                await asyncio.sleep(COMPACT_RETRY_S)

    # -- compaction -------------------------------------------------------------------------

    def _due(self) -> bool:
        return self.uncompacted_bytes() >= self.threshold_bytes()

    async def compact(self, reason: str) -> dict[str, Any] | None:
        """Cut the journal, snapshot what changed since the previous cut, switch the manifest to
        it, and drop the journal segments and snapshot it replaces. A compaction found ``due``
        is skipped if another one (asked for) went first meanwhile; returns its report or None."""
        assert self.journal is not None and self.proxy is not None and self._compacting is not None
        async with self._compacting:
            if reason == "due" and not self._due():
                return None
            began = time.monotonic()
            await self.journal.prepare_roll()
            async with self.proxy.paused():
                paused = time.monotonic()
                rolled = self.journal.stats.bytes_since_cut
                closed = await self.journal.roll()
                changed, self.changed = self.changed, set()
            self.carried += rolled
            pause_ms = (time.monotonic() - paused) * 1000
            try:
                report = await self._snapshot(closed, changed)
            except BaseException:
                self.on_append(changed)  # the next snapshot writes them instead
                raise
            report.update(at=time.time(), reason=reason, absorbed_bytes=self.carried)
            self.compaction.absorbed_bytes += self.carried
            await self._switch(closed, report)
            self._record(report, began, pause_ms)
            return report

    async def _snapshot(self, closed: int, changed: set[str] | None) -> dict[str, Any]:
        previous = self.manifest.seed_dir(self.directory)
        target = self.directory / snapshot_name(closed)
        return await self.snapshots.take(previous, target, changed)

    async def _switch(self, closed: int, report: dict[str, Any]) -> None:
        """Make the new snapshot current, then remove what it replaces (file work off the loop)."""
        new = Manifest(snapshot_name(closed), closed + 1, int(report["snapshot_bytes"]), time.time())
        await asyncio.to_thread(_switch_files, self.directory, self.manifest, new)
        self.manifest = new
        self.carried = 0

    def _record(self, report: dict[str, Any], began: float, pause_ms: float) -> None:
        stats = self.compaction
        stats.compactions += 1
        stats.cpu_s += float(report.get("cpu_s", 0.0))
        stats.bytes_written += int(report.get("bytes_written", 0))
        stats.seconds += time.monotonic() - began
        stats.max_pause_ms = max(stats.max_pause_ms, pause_ms)
        stats.last = report
        stats.recent = [*stats.recent[-49:], report]
        log.info(
            "embedded index compacted: %d indexes written, %d linked, %d documents, %.1f MB in %.2f s",
            len(report.get("indexes_written", [])),
            report.get("indexes_linked", 0),
            report.get("documents", 0),
            report.get("bytes_written", 0) / 1e6,
            time.monotonic() - began,
        )

    # -- the proxy's own endpoints ----------------------------------------------------------

    async def control(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """``GET /_embedded/journal``: figures; ``POST /_embedded/compact``: compact now."""
        if path.rstrip("/") == "/_embedded/journal" and method in ("GET", "HEAD"):
            return 200, self.stats()
        if path.rstrip("/") == "/_embedded/compact" and method == "POST":
            await self.compact("asked")
            return 200, self.stats()
        return 404, {"error": {"type": "not_found", "reason": f"no such endpoint: {method} {path}"}, "status": 404}

    def stats(self) -> dict[str, Any]:
        assert self.journal is not None
        journal = asdict(self.journal.stats)
        journal.update(
            segment=self.journal.segment,
            appended=self.journal.appended,
            durable=self.journal.durable,
            uncompacted_bytes=self.uncompacted_bytes(),
            threshold_bytes=self.threshold_bytes(),
        )
        return {
            "journal": journal,
            "snapshot": asdict(self.manifest),
            "compaction": asdict(self.compaction),
            "replay": {k: v for k, v in asdict(self.replayed).items() if k != "touched"},
            "requests": dict(self.proxy.served) if self.proxy is not None else {},
            "osmem_url": self.osmem.url,
        }


class SnapshotWorker:
    """The snapshot process (``python -m async_query.embedded.snapshot``), started at the first
    compaction and kept: serializing documents runs beside the proxy's interpreter, not in it, and
    a compaction pays no interpreter start. It dies with this process (stdin closed, or SIGKILL
    from the kernel when this process is gone)."""

    def __init__(self, url: str, log_level: str) -> None:
        self.url = url
        self.log_level = log_level
        self._proc: asyncio.subprocess.Process | None = None

    async def take(self, previous: Path, target: Path, indexes: set[str] | None) -> dict[str, Any]:
        proc = await self._process()
        assert proc.stdin is not None and proc.stdout is not None
        command = {
            "previous": str(previous),
            "target": str(target),
            "indexes": None if indexes is None else sorted(indexes),
        }
        proc.stdin.write(json.dumps(command).encode() + b"\n")
        await proc.stdin.drain()
        line = await proc.stdout.readline()
        if not line:
            self._proc = None
            raise RuntimeError(f"the snapshot process exited ({await proc.wait()})")
        report: dict[str, Any] = json.loads(line)
        if "error" in report:
            raise RuntimeError(f"the snapshot failed: {report['error']}")
        return report

    async def _process(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "async_query.embedded.snapshot",
                f"--url={self.url}",
                f"--log-level={self.log_level}",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                preexec_fn=_die_with_parent,
            )
        return self._proc

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _switch_files(directory: Path, old: Manifest, new: Manifest) -> None:
    write_manifest(directory, new)
    for number, path in list_segments(directory / JOURNAL_DIR):
        if number < new.journal_from:
            path.unlink(missing_ok=True)
    if old.snapshot:
        shutil.rmtree(directory / old.snapshot, ignore_errors=True)
    else:
        _remove_flat_seed(directory)


# -- start-up ----------------------------------------------------------------------------------


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def _announce(public: int, keeper: Keeper) -> None:
    ready = {
        "url": f"http://127.0.0.1:{public}",
        "osmem_url": keeper.osmem.url,
        "pid": os.getpid(),
        "osmem_pid": keeper.osmem.process.pid,
        "isolated": keeper.isolated,
        "replayed": {k: v for k, v in asdict(keeper.replayed).items() if k != "touched"},
    }
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()


def read_credential() -> bytes:
    """The first line on stdin: ``{"authorization": <header value>}``, which every request must
    carry (the service writes it before anything else; it is never on a command line)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 4096)
        if not chunk:
            break
        line += chunk
    try:
        value = json.loads(line)["authorization"]
    except (ValueError, KeyError, TypeError):
        raise SystemExit("the embedded index server needs its credential on stdin") from None
    if not isinstance(value, str) or not value:
        raise SystemExit("the embedded index server needs its credential on stdin")
    return value.encode()


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Stop when stdin closes: the service closed it, or died (then the kernel closed it)."""

    def wait_for_eof() -> None:
        # The file descriptor, not sys.stdin: a thread blocked in a buffered read holds the
        # reader's lock, which the interpreter takes at exit (a fatal error when it cannot).
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=wait_for_eof, name="stdin-watch", daemon=True).start()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: a snapshot process dies with the index server that started it."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def lock_directory(directory: Path, wait_s: float = LOCK_WAIT_S) -> int:
    """Take the directory's lock (held until this process ends); waits for a previous holder
    that is still stopping."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RuntimeError(f"another index server still uses {directory}") from None
            time.sleep(0.1)


def _remove_flat_seed(directory: Path) -> None:
    """Seed files of the earlier layout, once a snapshot directory replaces them."""
    for path in directory.iterdir():
        if path.is_file() and path.name.endswith((DEFINITION_SUFFIX, DOCUMENTS_SUFFIX)):
            path.unlink()


def _clear_leftovers(directory: Path, manifest: Manifest) -> None:
    """Snapshot directories a crashed compaction left (not the manifest's), temporary files."""
    for path in directory.iterdir():
        if path.name.startswith("snap-") and path.name != manifest.snapshot:
            shutil.rmtree(path, ignore_errors=True)
        elif path.name == MANIFEST_FILE + ".tmp":
            path.unlink(missing_ok=True)


def _start_server(directory: Path) -> tuple[OsmemProcess, Manifest]:
    """``osmem-server`` seeded from the last snapshot. A snapshot it cannot load is set aside with
    its journal (never deleted), and the server starts empty, saying so loudly."""
    manifest = read_manifest(directory)
    if manifest.snapshot and not has_snapshot(manifest.seed_dir(directory)):
        raise RuntimeError(f"{directory}: the manifest names snapshot {manifest.snapshot}, which is missing")
    _clear_leftovers(directory, manifest)
    seed = manifest.seed_dir(directory)
    if not has_snapshot(seed):
        return OsmemProcess.start(None), manifest
    without_empty_documents(seed)
    try:
        return OsmemProcess.start(seed), manifest
    except OsmemStartError as exc:
        aside = directory.with_name(f"{directory.name}.unloadable-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copytree(directory, aside, ignore=shutil.ignore_patterns(LOCK_FILE))
        for path in directory.iterdir():
            if path.name != LOCK_FILE:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        log.error("the embedded index snapshot could not be loaded (%s); kept at %s, starting empty", exc, aside)
    return OsmemProcess.start(None), Manifest()


def prepare(directory: Path) -> tuple[OsmemProcess, Manifest, ReplayReport]:
    """Start the server from the snapshot and replay the journal on top."""
    began = time.monotonic()
    osmem, manifest = _start_server(directory)
    client = IndexHttp(osmem.url)
    try:
        templates = restore_templates(client, manifest.seed_dir(directory))
        replayed = replay(client, directory / JOURNAL_DIR, manifest.journal_from)
    except BaseException:
        osmem.close()
        raise
    finally:
        client.close()
    log.info(
        "embedded index: snapshot %s loaded, %d templates, %d journal records replayed (%d documents, %d requests, "
        "%d failures) in %.1f s",
        manifest.snapshot or "(none)",
        templates,
        replayed.records,
        replayed.documents,
        replayed.requests,
        replayed.failures,
        time.monotonic() - began,
    )
    return osmem, manifest, replayed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The embedded index server with its journal.")
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--commit-window-ms", type=float, default=0.0)
    parser.add_argument("--compact-ratio", type=float, default=0.5)
    parser.add_argument("--compact-min-bytes", type=int, default=1 << 20)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--no-isolate-network", dest="isolate_network", action="store_false")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    authorization = read_credential()
    # The committer thread takes the interpreter back after each durable write: let it have it
    # within a millisecond, not the default five, when the event loop is busy.
    sys.setswitchinterval(0.001)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = Options(
        args.dir,
        args.port,
        args.commit_window_ms / 1000,
        args.compact_ratio,
        args.compact_min_bytes,
        authorization,
        args.isolate_network,
    )
    options.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    options.directory.chmod(0o700)
    lock_directory(options.directory)
    public = bind_public("127.0.0.1", options.port)
    isolated = False
    if options.isolate_network:
        why_not = enter_private_network()
        isolated = why_not is None
        if why_not is not None:
            log.warning("embedded index: %s; osmem-server listens on the host's loopback", why_not)
    osmem, manifest, replayed = prepare(options.directory)
    keeper = Keeper(options, osmem, manifest, replayed, public, isolated)
    try:
        _event_loop_run(keeper.run())
    finally:
        osmem.close()
    return 0


def _event_loop_run(main_coroutine: Any) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coroutine)
        return
    uvloop.run(main_coroutine)


if __name__ == "__main__":
    sys.exit(main())
