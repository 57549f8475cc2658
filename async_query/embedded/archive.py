"""Class-data archives of the embedded default's JVMs: a node starts on some 2 CPU-s less, a
metastore on some 1 CPU-s less.

A JVM loads, parses and verifies each class it runs, from the jars, at every start: most of the
OpenSearch node's start (about 5 CPU-s on a small machine; about 3 from an archive). The JVM can
write the classes it loaded into an archive as it exits (``-XX:ArchiveClassesAtExit``) and map
them from there at later starts (``-XX:SharedArchiveFile``).

A node (or metastore) started while there is no archive records one: it writes the recording
into a directory of its own (as its user) when it stops cleanly, and the service copies the
recording into the archive directory as a new file of the service's, readable by all, writable by
no other (the child's user reads the archive and never changes it: it is code every later child
maps), and renames it into place. A child that is killed or fails leaves no archive; two services
that record at once both adopt theirs, either being good. The archive's name carries a digest of
the JVM and of the class path's files (each one's size and time), so another JVM or other jars
record a new one, and a JVM that cannot map an archive starts without it: the archive is only ever
an optimisation. ``docs/durability.md`` ("How it runs").
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from async_query.security.job_user import JobUserError, find_java

log = logging.getLogger(__name__)

#: The JVM's own messages about recording or mapping an archive stay out of the child's log.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
#: The option of a JVM that records an archive as it exits.
RECORDS = "-XX:ArchiveClassesAtExit="


def digest(parts: Sequence[str], size: int) -> str:
    """The first ``size`` hex digits of a digest of ``parts``."""
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:size]


def stamp(path: Path) -> str:
    """``path``'s name, size and time (a JVM refuses an archive when a jar it was made from
    changed either): part of an archive's name."""
    try:
        found = path.stat()
    except OSError:
        return f"{path.name}:-"
    return f"{path.name}:{found.st_size}:{found.st_mtime_ns}"


def jvm_files() -> list[Path]:
    """The files of the JVM that runs the children (its launcher and its library)."""
    try:
        java = Path(os.path.realpath(find_java()))
    except JobUserError:
        return []
    return [java, java.parent.parent / "lib" / "server" / "libjvm.so"]


class ChildArchive:
    """The archive of one kind of child JVM (``kind``, running from ``classpath``), kept in
    ``directory`` (the service's, shared by its data directories)."""

    def __init__(self, directory: Path, kind: str, classpath: Sequence[Path]) -> None:
        self.directory = directory
        files = [*jvm_files(), *classpath]
        #: ``<kind>-<place>``: the archives of one installation (where the JVM and jars are).
        self.place = f"{kind}-{digest([str(f) for f in files], 8)}"
        self.path = directory / f"{self.place}-{digest([stamp(f) for f in files], 10)}.jsa"

    def java_options(self, scratch: Path) -> list[str]:
        """The options of a JVM starting now: map the archive, or record one into ``scratch``
        (a directory of the JVM's user)."""
        if self.path.exists():
            return [f"-XX:SharedArchiveFile={self.path}", *QUIET]
        return [f"{RECORDS}{self.recording(scratch)}", *QUIET]

    def recording(self, scratch: Path) -> Path:
        return scratch / f"{self.path.name}.recording"

    def adopt(self, scratch: Path, owner_uid: int) -> bool:
        """After a clean exit of a JVM that recorded into ``scratch`` as ``owner_uid``: its
        recording, copied into the archive's place (True when adopted). Only a regular file of
        that user's is read, never through a link."""
        recording = self.recording(scratch)
        try:
            fd = os.open(recording, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot read the class archive %s: %s", recording, exc)
            return False
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode) or found.st_uid != owner_uid or found.st_size == 0:
                log.warning("not adopting %s as a class archive: not a file of the JVM's user", recording)
                return False
            self._install(fd)
        except OSError as exc:
            log.warning("cannot keep the class archive %s: %s", self.path, exc)
            return False
        finally:
            os.close(fd)
            _remove(recording)
        log.info("%s starts from the class archive %s from now on", self.place, self.path)
        self._remove_replaced()
        return True

    def _remove_replaced(self) -> None:
        """The archives of earlier files in the same place (an upgrade or a reinstall): no JVM maps
        them any more, and each is some 50-85 MB."""
        for old in self.directory.glob(f"{glob.escape(self.place)}-*.jsa"):
            if old != self.path:
                _remove(old)

    def _install(self, source: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        out, name = tempfile.mkstemp(prefix=".", suffix=".part", dir=self.directory)
        try:
            os.fchmod(out, 0o644)
            with os.fdopen(out, "wb") as target, os.fdopen(os.dup(source), "rb") as origin:
                while chunk := origin.read(1 << 20):
                    target.write(chunk)
            os.replace(name, self.path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # a directory in its place, say: left to its user
        log.debug("cannot remove %s: %s", path, exc)
