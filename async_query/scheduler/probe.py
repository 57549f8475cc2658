"""Whether an index's source tables changed since its last scheduled refresh, told without Spark.

A scheduled run costs a Spark job's start (seconds of CPU) even when nothing is new: an idle index
would cost more than the stream it replaces. So before a run, the scheduler takes a fingerprint of
the index's source tables: the files under each table's location (path, size, modification time),
read from the plugin's side. When it equals the fingerprint taken when the last successful run was
claimed, nothing was added, changed or removed since: the turn is recorded ``unchanged`` and no job
starts. When it cannot tell (a location it cannot list: not on a file system this process sees, a
catalog it does not read, too many files), the run goes ahead, as it would with no probe at all.

The fingerprint is more cautious than the refresh itself: Spark's file stream source picks up new
files only, so any change here at worst launches a run that finds nothing new. Files Hadoop hides
(names starting with ``_`` or ``.``: ``_SUCCESS``, checksums, staging directories) are left out.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

from async_query.datasources import Datasource

log = logging.getLogger(__name__)

#: Where a table's files are (its location URI), or None when unknown: (datasource, qualified table).
Locate = Callable[[Datasource, str], str | None]
#: A table with more files than this is not fingerprinted (the run goes ahead).
MAX_FILES = 100_000


class SourceProbe:
    """Fingerprints of an index's source tables (see the module's documentation)."""

    def __init__(self, locate: Locate, max_files: int = MAX_FILES) -> None:
        self.locate = locate
        self.max_files = max_files

    def fingerprint(self, datasource: Datasource, tables: list[str]) -> str | None:
        """One digest of every file of ``tables``; None when any of them cannot be listed."""
        if not tables:
            return None
        digest = hashlib.sha256()
        for table in sorted(tables):
            directory = _local_directory(self.locate(datasource, table))
            if directory is None:
                return None
            try:
                files = sorted(_files(directory, self.max_files))
            except (OSError, _TooManyFilesError) as exc:
                log.info("source %s of %s not fingerprinted: %s", table, datasource.name, exc)
                return None
            digest.update(f"{table}\0{len(files)}\n".encode())
            for relative, size, mtime_ns in files:
                digest.update(f"{relative}\0{size}\0{mtime_ns}\n".encode())
        return digest.hexdigest()


class _TooManyFilesError(Exception):
    pass


def _local_directory(location: str | None) -> Path | None:
    """The directory of a ``file:`` (or scheme-less, absolute) location this process can list."""
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
        return None
    path = Path(unquote(parsed.path))
    return path if path.is_absolute() and path.is_dir() else None


def _files(top: Path, limit: int) -> Iterator[tuple[str, int, int]]:
    """(path relative to ``top``, size, modification time in ns) of each visible file below it."""
    count = 0
    stack = [top]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(("_", ".")):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                    continue
                count += 1
                if count > limit:
                    raise _TooManyFilesError(f"more than {limit} files under {top}")
                stat = entry.stat(follow_symlinks=False)
                yield os.path.relpath(entry.path, top), stat.st_size, stat.st_mtime_ns
