"""Files only the service's user may read: directories 0700, files 0600, replaced atomically."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
#: The umask of ``serve``: whatever the service and its children create is private.
PRIVATE_UMASK = 0o077


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make it 0700, also when it already existed.

    Only ``path`` itself is tightened: a 0700 directory keeps everything under it from other
    users, whatever the modes of what is inside."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if path.stat().st_mode & 0o777 != PRIVATE_DIR:
        try:
            path.chmod(PRIVATE_DIR)
        except PermissionError:
            log.warning("cannot make %s private (mode 0700): it belongs to another user", path)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, atomically (a reader sees the old file or the new one, and
    a crash leaves one of the two), as a 0600 file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, PRIVATE_FILE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_dir(path.parent)


def _sync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every file system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def open_private_append(path: Path) -> int:
    """An append-only descriptor of ``path``, created 0600 if missing."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
