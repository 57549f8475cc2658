"""Durable file writes for the embedded index's journal and snapshots (files 0600)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a new, renamed or removed file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, write: Callable[[IO[str]], None]) -> int:
    """Write a file through a temporary name, ``fsync`` and an atomic rename; returns its size.
    (The caller ``fsync``s the directory once it has renamed everything it writes.)"""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "w", encoding="utf-8") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return size
