"""The embedded index's write-ahead journal: segment files of checksummed records, group commit.

A record is what one acknowledged request changed (see :mod:`async_query.embedded.effects`),
framed as ``<u32 length><u32 crc32><payload>`` (little endian). A segment file starts with
:data:`MAGIC` and holds records back to back. A record cut short by a crash, or whose checksum does
not match, ends its segment's replay: it was never acknowledged (a write is answered only once its
record is on disk), so dropping it loses nothing anyone was told about.

Segments are zero-filled ahead of the write position, a chunk at a time: most commits then
overwrite blocks the file already has, so the sync flushes data alone, not the file's size and
extents too. A zero length field ends a segment's records.

Segments are numbered. Each start of the index server opens a new one, and each compaction cut
closes the current one and opens the next, so a snapshot covers whole segments: those numbered
below the snapshot's ``journal_from`` (see :mod:`async_query.embedded.snapshot`).

Group commit: the event loop appends encoded records to a queue; one committer thread writes
everything queued with one synchronous write (the segment is opened ``O_DSYNC``: the write returns
once its data is durable, as a write and an ``fdatasync`` would), and reports the highest record
number now durable to the loop, which releases every reply waiting for it. While one write runs,
the next batch gathers. A failed write ends the process: what the journal cannot keep must not be
acknowledged, and what it already acknowledged is on disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from async_query.embedded.files import fsync_dir

log = logging.getLogger(__name__)

MAGIC = b"AQJRNL01"
SUFFIX = ".wal"
_FRAME = struct.Struct("<II")
#: A record larger than this is taken for garbage (a torn length field), not read.
MAX_RECORD_BYTES = 1 << 30
#: How far ahead of the write position a segment is zero-filled.
ZERO_CHUNK = 1 << 20
_ZEROS = bytes(ZERO_CHUNK)


def frame(payload: bytes) -> bytes:
    """One record as it is written: length, checksum, payload."""
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:012d}{SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """The journal's segment files, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        stem = path.name[: -len(SUFFIX)]
        if path.name.endswith(SUFFIX) and stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


@dataclass
class SegmentRead:
    """What reading one segment found: its records, and where a torn tail began, if any."""

    records: list[bytes] = field(default_factory=list)
    valid_bytes: int = 0
    torn_bytes: int = 0


def read_segment(path: Path) -> SegmentRead:
    """Every intact record of a segment, up to its end (zeros) or the first torn or corrupt one
    (``torn_bytes``: what lies between the last intact record and the trailing zeros)."""
    data = path.read_bytes()
    read = SegmentRead()
    if not data.startswith(MAGIC):
        read.torn_bytes = len(data.rstrip(b"\0"))
        return read
    offset = len(MAGIC)
    for payload, end in _records(data, offset):
        read.records.append(payload)
        offset = end
    read.valid_bytes = offset
    read.torn_bytes = max(0, len(data.rstrip(b"\0")) - offset)
    return read


def _records(data: bytes, offset: int) -> Iterator[tuple[bytes, int]]:
    while offset + _FRAME.size <= len(data):
        length, checksum = _FRAME.unpack_from(data, offset)
        start = offset + _FRAME.size
        end = start + length
        if length == 0 or length > MAX_RECORD_BYTES or end > len(data):
            return
        payload = data[start:end]
        if zlib.crc32(payload) != checksum:
            return
        yield payload, end
        offset = end


def cut_torn_tail(path: Path, valid_bytes: int) -> None:
    """Drop a torn tail so that later records of this segment never follow garbage."""
    with open(path, "r+b") as out:
        out.truncate(max(valid_bytes, len(MAGIC)))
        out.flush()
        os.fsync(out.fileno())


def _create_segment(directory: Path, number: int) -> int:
    path = segment_path(directory, number)
    # O_DSYNC: each write returns once its data is durable, as a write and an fdatasync would,
    # in one system call (the committer thread hands the interpreter lock back and forth once less).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DSYNC, 0o600)
    os.pwrite(fd, MAGIC + _ZEROS, 0)
    os.fsync(fd)
    fsync_dir(directory)
    return fd


@dataclass
class JournalStats:
    records: int = 0
    bytes_appended: int = 0
    commits: int = 0
    #: Journal bytes since the last compaction cut (what the next snapshot will absorb).
    bytes_since_cut: int = 0
    commit_seconds: float = 0.0


class _Roll:
    """A marker in the commit queue: close the segment here and open the next (``lsn``: the last
    record before it)."""

    def __init__(self, future: asyncio.Future[int], lsn: int) -> None:
        self.future = future
        self.lsn = lsn


class Journal:
    """Appends records (from the event loop), makes them durable in groups (a committer thread).

    Record numbers (LSNs) count from 1 in this process; :meth:`wait_durable` returns once a
    record is on disk.
    """

    def __init__(self, directory: Path, first_segment: int, loop: asyncio.AbstractEventLoop, window_s: float = 0.0):
        self.directory = directory
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.segment = first_segment
        self.window_s = window_s
        self.stats = JournalStats()
        self.appended = 0
        self.durable = 0
        self._loop = loop
        self._fd = _create_segment(directory, first_segment)
        #: The next segment, created ahead of a roll (number, file descriptor).
        self._spare: tuple[int, int] | None = None
        self._offset = len(MAGIC)
        self._zeroed = len(MAGIC) + ZERO_CHUNK
        self._queue: list[bytes | _Roll] = []
        self._queued_lsn = 0
        self._cond = threading.Condition()
        self._closing = False
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._thread = threading.Thread(target=self._commit_loop, name="journal-commit", daemon=True)
        self._thread.start()

    # -- the event loop's side --------------------------------------------------------------

    def append(self, payload: bytes) -> int:
        """Queue one record; returns its number (durable once :meth:`wait_durable` says so)."""
        record = frame(payload)
        self.appended += 1
        self.stats.records += 1
        self.stats.bytes_appended += len(record)
        self.stats.bytes_since_cut += len(record)
        with self._cond:
            self._queue.append(record)
            self._queued_lsn = self.appended
            self._cond.notify()
        return self.appended

    def is_durable(self, lsn: int) -> bool:
        return lsn <= self.durable

    async def wait_durable(self, lsn: int) -> None:
        if lsn <= self.durable:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((lsn, waiter))
        await waiter

    async def prepare_roll(self) -> None:
        """Create the next segment ahead of :meth:`roll` (zero-filled and synced: milliseconds
        that are then not spent while writes are paused)."""
        number = self.segment + 1
        if self._spare is None or self._spare[0] != number:
            fd = await asyncio.to_thread(_create_segment, self.directory, number)
            self._spare = (number, fd)

    async def roll(self) -> int:
        """Close the current segment once what is queued is durable, open the next; returns the
        number of the segment closed. Called with writes paused, so it is a clean cut."""
        future: asyncio.Future[int] = self._loop.create_future()
        with self._cond:
            self._queue.append(_Roll(future, self.appended))
            self._cond.notify()
        closed = await future
        self.stats.bytes_since_cut = 0
        return closed

    def _made_durable(self, lsn: int) -> None:
        self.durable = max(self.durable, lsn)
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.durable:
            _, waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        """Make everything queued durable, then stop the committer (idempotent)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout=30)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._spare is not None:  # an empty segment: replay reads nothing from it
            os.close(self._spare[1])
            self._spare = None

    # -- the committer thread ---------------------------------------------------------------

    def _commit_loop(self) -> None:
        try:
            while True:
                batch, last = self._next_batch()
                if batch is None:
                    return
                self._commit(batch, last)
        except OSError as exc:  # the journal cannot keep what it would acknowledge: stop at once
            log.critical("the embedded index journal failed (%s): stopping the index server", exc)
            os._exit(70)

    def _next_batch(self) -> tuple[list[bytes | _Roll] | None, int]:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None, 0
        if self.window_s > 0:
            time.sleep(self.window_s)  # let more writes join this commit
        with self._cond:
            batch, self._queue = self._queue, []
            return batch, self._queued_lsn

    def _commit(self, batch: list[bytes | _Roll], last: int) -> None:
        began = time.perf_counter()
        pending: list[bytes] = []
        for item in batch:
            if isinstance(item, _Roll):
                self._write_and_sync(pending)
                pending = []
                self._roll(item)
            else:
                pending.append(item)
        self._write_and_sync(pending)
        self.stats.commits += 1
        self.stats.commit_seconds += time.perf_counter() - began
        self._loop.call_soon_threadsafe(self._made_durable, last)

    def _write_and_sync(self, records: list[bytes]) -> None:
        if not records:
            return
        data = b"".join(records)
        end = self._offset + len(data)
        self._pwrite_all(data, self._offset)  # durable on return (O_DSYNC)
        if end + _FRAME.size > self._zeroed:  # the records grew the file: zeros ahead again
            self._pwrite_all(_ZEROS, end)
            self._zeroed = end + ZERO_CHUNK
        self._offset = end

    def _pwrite_all(self, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def _roll(self, marker: _Roll) -> None:
        self._loop.call_soon_threadsafe(self._made_durable, marker.lsn)  # before the roll's answer
        os.close(self._fd)  # nothing left to sync: every write was O_DSYNC, the size was synced at creation
        closed = self.segment
        self.segment += 1
        spare, self._spare = self._spare, None
        self._fd = (
            spare[1]
            if spare is not None and spare[0] == self.segment
            else _create_segment(self.directory, self.segment)
        )
        self._offset = len(MAGIC)
        self._zeroed = len(MAGIC) + ZERO_CHUNK
        self._loop.call_soon_threadsafe(_resolve, marker.future, closed)


def _resolve(future: asyncio.Future[int], value: int) -> None:
    if not future.done():
        future.set_result(value)
