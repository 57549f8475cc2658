"""Source files as the acceleration compares them: one spelling of a path, and the snapshot of a
table's files that tells whether a covering index is fresh (``docs/acceleration.md``).

Spark spells one file three ways: ``input_file_name()`` (what a skipping index records) and a file
index's ``inputFiles`` write ``file:///tmp/t/part-0.parquet``, a scan's ``_metadata.file_path``
writes ``file:/tmp/t/part-0.parquet``. :func:`normalize_path` maps all of them to the last form,
which is the one the scan's file pruning compares. Other schemes (``s3://bucket/key``) have an
authority and are spelled the same everywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_EMPTY_AUTHORITY = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):///")

#: The key of ``_meta.properties`` under which a full refresh records the files it read.
SNAPSHOT_PROPERTY = "sourceSnapshot"


def normalize_path(path: str) -> str:
    """``path`` as a scan's ``_metadata.file_path`` spells it (``scheme:/...`` when the URI has an
    empty authority)."""
    return _EMPTY_AUTHORITY.sub(r"\1:/", path, count=1)


@dataclass(frozen=True)
class SourceSnapshot:
    """Which files a table had: their number and the SHA-256 of their sorted, normalized paths.

    Spark writes every new file of a table under a new name (a job's unique id is part of it), so
    the set of names tells whether any file was added, removed or rewritten."""

    files: int
    sha256: str

    @classmethod
    def of(cls, paths: Iterable[str]) -> SourceSnapshot:
        names = sorted({normalize_path(p) for p in paths})
        digest = hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()
        return cls(len(names), digest)

    def to_property(self) -> dict[str, Any]:
        return {"files": self.files, "sha256": self.sha256}

    @classmethod
    def from_property(cls, value: Any) -> SourceSnapshot | None:
        """The snapshot recorded in an index's ``_meta.properties``; None if there is none."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(int(value["files"]), str(value["sha256"]))
        except (KeyError, TypeError, ValueError):
            return None


__all__ = ["SNAPSHOT_PROPERTY", "SourceSnapshot", "normalize_path"]
