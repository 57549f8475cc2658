"""A class-data sharing archive of the job JVM's classes: local jobs start in about half the CPU.

A Spark job's JVM loads and verifies some twenty thousand classes at start-up, on every
``spark-submit``: most of a new session's cold start on a small machine. The JVM can record the
classes a run loaded into an archive file (``-XX:ArchiveClassesAtExit``) and map them from it on
later runs (``-XX:SharedArchiveFile``), which roughly halves the CPU a job spends starting.

The archive is recorded once per directory by a short warm-up run of its own
(``flint_repl_job/warmup.py``), in the background, the first time a job starts without one; jobs
started meanwhile run without it. Only a warm-up that exits cleanly is adopted. The warm-up may
adopt its recording itself (the local launcher's does), so that a service stopped while it runs
still leaves the archive to the next start; the claim then names the warm-up's process, and no
other process starts a second one while it runs. A JVM that cannot
use the archive (another JVM build, another class path) warns and starts without it, so the
archive is only ever an optimisation. Its name carries the Spark version, the Java runtime and
pyspark's jars (where they are, each one's size and time) and the warm-up's text, so an upgrade or
a reinstall in the same place records a new one, which removes the old one once adopted. See
``docs/job.md``.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from async_query.embedded.archive import digest, jvm_files, stamp

log = logging.getLogger(__name__)

#: A claim to record the archive older than this was left by a process that stopped mid-way.
STALE_CLAIM_S = 3600.0
#: How long the warm-up may take before it is given up.
WARMUP_TIMEOUT_S = 600.0

#: Starts the warm-up with the given JVM options and log file; returns its process.
WarmupStarter = Callable[[list[str], Path], "subprocess.Popen[bytes]"]


def fingerprint(jars: Path | None = None, warmup: Path | None = None) -> str:
    """The archive's name, ``spark-<version>-<place>-<files>``: Spark's version, a digest of where
    the JVM and the jars (pyspark's, or those in ``jars``) are, and a digest of each of those
    files' size and time and of the text of the ``warmup`` that records it (what it loads is what
    the archive holds)."""
    import pyspark

    jars = jars or Path(os.path.realpath(pyspark.__file__)).parent / "jars"
    # The archive is valid for one JVM build and one class path, file for file: the JVM refuses it
    # when a jar it was made from has another size or time (a reinstall in the same place), so
    # those are part of its name, and a reinstall records a new one.
    java = jvm_files()
    files = [*java, *sorted(jars.glob("*.jar"))]
    java_path = java[0] if java else None
    place = digest([str(java_path), str(jars)], 8)
    recorder = [hashlib.sha1(warmup.read_bytes()).hexdigest()] if warmup is not None and warmup.is_file() else []
    return f"spark-{pyspark.__version__}-{place}-{digest([*(stamp(f) for f in files), *recorder], 10)}"


class ClassArchive:
    """The archive of one directory, shared by the jobs of every launcher pointing there."""

    def __init__(self, directory: Path, log_file: Path | None = None, warmup: Path | None = None) -> None:
        self.directory = directory
        #: The warm-up's output (by default beside the archive; the local launcher keeps it with its
        #: logs, the archive's directory being the job user's).
        self.log_file = log_file or directory / "warmup.log"
        name = fingerprint(warmup=warmup)
        self.path = directory / f"{name}.jsa"
        self._recording = directory / f"{name}.jsa.recording"
        self._claim_file = directory / f"{name}.jsa.claim"
        self._lock = threading.Lock()
        self._started = False
        #: The warm-up's thread, while it runs (tests wait on it).
        self.recorder: threading.Thread | None = None

    def java_options(self, start_warmup: WarmupStarter | None = None) -> list[str]:
        """The JVM options of the next job: map the archive if there is one; otherwise none,
        and (once per process) the warm-up that records it is started with ``start_warmup``."""
        if self.path.exists():
            return [f"-XX:SharedArchiveFile={self.path}"]
        if start_warmup is not None:
            self._record(start_warmup)
        return []

    def record_now(self, start_warmup: WarmupStarter) -> bool:
        """Record the archive unless there is one, and wait for the recording: True when the
        archive is there (False when the recording failed, or another process is making it)."""
        if not self.path.exists():
            self._record(start_warmup)
            if self.recorder is not None:
                self.recorder.join()
        return self.path.exists()

    def _record(self, start_warmup: WarmupStarter) -> None:
        with self._lock:
            if self._started or not self._claim():
                return
            self._started = True
        self.recorder = threading.Thread(target=self._warm_up, args=(start_warmup,), name="class-archive", daemon=True)
        self.recorder.start()

    def _claim(self) -> bool:
        """One recorder per directory, across processes: a create-only claim file naming the
        claiming process (a claim whose process is gone, or too old, is taken over)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self._claim_is_stale():
                self._claim_file.unlink(missing_ok=True)
            fd = os.open(self._claim_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        except OSError as exc:
            log.warning("no class archive for local jobs: %s", exc)
            return False
        with os.fdopen(fd, "w") as claim:
            claim.write(str(os.getpid()))
        return True

    def _claim_is_stale(self) -> bool:
        try:
            age = time.time() - self._claim_file.stat().st_mtime
            pid = int(self._claim_file.read_text() or "0")
        except (OSError, ValueError):
            return self._claim_file.exists()
        if age > STALE_CLAIM_S or pid <= 0:
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _remove_replaced(self) -> None:
        """Remove the archives of earlier files in the same place (an upgrade or a reinstall):
        the JVM refuses them now, and each is some 150 MB."""
        place = self.path.name.rsplit("-", 2)[1]  # any version's: an upgrade replaces them too
        for old in self.directory.glob(f"spark-*-{glob.escape(place)}-*.jsa"):
            if old != self.path:
                try:
                    old.unlink()
                except OSError as exc:
                    log.warning("cannot remove the replaced class archive %s: %s", old, exc)
                else:
                    log.info("removed the class archive %s, replaced by %s", old.name, self.path.name)

    def _warm_up(self, start_warmup: WarmupStarter) -> None:
        options = [f"-XX:ArchiveClassesAtExit={self._recording}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        try:
            proc = start_warmup(options, self.log_file)
            self._name_in_claim(proc.pid)
            code = proc.wait(timeout=WARMUP_TIMEOUT_S)
            if code == 0 and self._recording.exists() and self._recording.stat().st_size > 0:
                os.replace(self._recording, self.path)
            if code == 0 and self.path.exists():
                log.info("local jobs now start from the class archive %s", self.path)
                self._remove_replaced()
            else:
                log.warning("the run recording the class archive ended with code %s; jobs start without it", code)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("cannot record the class archive of local jobs: %s", exc)
        finally:
            self._recording.unlink(missing_ok=True)
            self._claim_file.unlink(missing_ok=True)

    def _name_in_claim(self, pid: int) -> None:
        """The claim names the warm-up's process from now on: should this process stop first, the
        warm-up goes on (and adopts its own recording where it does), and no other process starts
        another while it runs."""
        try:
            self._claim_file.write_text(str(pid))
        except OSError as exc:
            log.warning("cannot name the class archive's warm-up in its claim: %s", exc)
