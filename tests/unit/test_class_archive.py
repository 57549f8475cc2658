"""The class-data sharing archive of local jobs: a warm-up run records it once per directory,
jobs map it once adopted; a recording that did not end cleanly is thrown away (``docs/job.md``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import JobRequest
from async_query.launcher.class_archive import ClassArchive, fingerprint
from async_query.launcher.local import XML_WALL, LocalLauncher, adopting
from query_core.states import SessionType
from tests.support import wait_for


def java_options_of(cmd: list[str]) -> str:
    return cmd[cmd.index("--driver-java-options") + 1] if "--driver-java-options" in cmd else ""


class FakeWarmup:
    """Plays the warm-up's JVM: once ``gate`` exists (at once without one), writes the archive
    where it is told to, then exits with ``code``."""

    def __init__(self, code: int, gate: Path | None = None) -> None:
        self.code = code
        self.gate = gate
        self.runs: list[list[str]] = []

    def __call__(self, options: list[str], log_file: Path) -> subprocess.Popen[bytes]:
        self.runs.append(options)
        [target] = [o.split("=", 1)[1] for o in options if o.startswith("-XX:ArchiveClassesAtExit=")]
        wait = f'while [ ! -e "{self.gate}" ]; do sleep 0.01; done; ' if self.gate else ""
        return subprocess.Popen(["sh", "-c", f'{wait}printf archive > "{target}"; exit {self.code}'])


def test_a_warm_up_records_the_archive_once_and_every_job_then_maps_it(tmp_path: Path) -> None:
    directory = tmp_path / "jvm"
    first, second = ClassArchive(directory), ClassArchive(directory)  # two launchers, one directory
    warmup = FakeWarmup(0, gate=tmp_path / "go")
    assert first.java_options(warmup) == []  # no archive yet: this job starts without one
    assert second.java_options(warmup) == []  # one recorder per directory, while it records
    assert first.recorder is not None and second.recorder is None
    (tmp_path / "go").touch()
    first.recorder.join(timeout=10)
    assert len(warmup.runs) == 1
    mapped = [f"-XX:SharedArchiveFile={first.path}"]
    assert first.java_options(warmup) == mapped and second.java_options(warmup) == mapped
    assert first.path.read_bytes() == b"archive"


def test_a_warm_up_that_fails_leaves_no_archive_and_frees_the_directory(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path)
    assert archive.java_options(FakeWarmup(1)) == []
    assert archive.recorder is not None
    archive.recorder.join(timeout=10)
    assert not archive.path.exists() and list(tmp_path.iterdir()) == []
    later = ClassArchive(tmp_path)  # another process may try again
    assert later.java_options(FakeWarmup(0)) == [] and later.recorder is not None


def test_the_launcher_passes_its_java_options_and_the_archive_to_the_driver(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true", java_options="-XX:+UseSerialGC")
    request = JobRequest("sid", Datasource(name="local"), SessionType.INTERACTIVE, {})
    wall = " ".join(XML_WALL)  # always first (docs/security.md)
    assert java_options_of(launcher.command(request)) == f"{wall} -XX:+UseSerialGC"
    with_archive = launcher.command(request, ["-XX:SharedArchiveFile=/a dir/x.jsa"])
    assert java_options_of(with_archive) == f'{wall} -XX:+UseSerialGC "-XX:SharedArchiveFile=/a dir/x.jsa"'
    assert launcher.class_archive.directory == (tmp_path / "var" / "jvm").resolve()


def test_a_jar_replaced_in_the_same_place_names_another_archive(tmp_path: Path) -> None:
    """The JVM refuses an archive whose jars changed size or time (a reinstall where the old one
    was): the archive's name changes with them, so a new one is recorded."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"one")
    (jars / "other.jar").write_bytes(b"two")
    first = fingerprint(jars)
    assert fingerprint(jars) == first  # stable while nothing changes
    os.utime(jars / "other.jar", ns=(1_000_000_000, 1_000_000_000))  # the same bytes, written again
    second = fingerprint(jars)
    assert second != first
    (jars / "other.jar").write_bytes(b"three")
    os.utime(jars / "other.jar", ns=(1_000_000_000, 1_000_000_000))  # same time, another size
    assert fingerprint(jars) not in {first, second}


def test_another_warm_up_names_another_archive(tmp_path: Path) -> None:
    """The archive holds what its warm-up loaded: a warm-up of other text (a new release of the
    job's start) records a new one."""
    warmup = tmp_path / "warmup.py"
    warmup.write_text("one")
    first = fingerprint(warmup=warmup)
    assert fingerprint(warmup=warmup) == first
    warmup.write_text("two")
    assert fingerprint(warmup=warmup) != first
    assert fingerprint() != first


def test_an_archive_adopted_removes_those_of_earlier_files_in_the_same_place(tmp_path: Path) -> None:
    """An upgrade or a reinstall in the same place leaves an archive the JVM refuses (150 MB):
    the new one, once adopted, removes it; archives of other places (other installations
    sharing the directory) stay."""
    directory = tmp_path / "jvm"
    archive = ClassArchive(directory)
    _, version, place, _ = archive.path.name.removesuffix(".jsa").split("-")
    directory.mkdir()
    replaced = [directory / f"spark-{version}-{place}-0000000000.jsa", directory / f"spark-4.0.0-{place}-1111111111.jsa"]
    others = [directory / f"spark-{version}-00000000-2222222222.jsa", directory / "notes.txt"]
    for path in replaced + others:
        path.write_bytes(b"x")
    assert archive.java_options(FakeWarmup(0)) == []
    assert archive.recorder is not None
    archive.recorder.join(timeout=30)
    assert archive.path.exists()
    assert not any(path.exists() for path in replaced)
    assert all(path.exists() for path in others)


def test_record_now_waits_for_the_recording_and_reports_whether_there_is_an_archive(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "jvm")
    warmup = FakeWarmup(0)
    assert archive.record_now(warmup) is True and archive.path.read_bytes() == b"archive"
    assert archive.record_now(warmup) is True and len(warmup.runs) == 1  # there is one: no second run
    failing = ClassArchive(tmp_path / "other")
    assert failing.record_now(FakeWarmup(1)) is False and not failing.path.exists()


def test_a_launcher_whose_job_user_cannot_write_the_archive_directory_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "jvm"
    shared.mkdir(mode=0o500)  # an existing directory, not the launcher's to take over
    try:
        launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true", class_archive=shared)
        assert launcher.record_class_archive() is False
    finally:
        shared.chmod(0o700)
    assert "cannot write the class archive's directory" in caplog.text


def test_the_archive_is_kept_beside_the_index_jars_where_the_job_user_can_have_it(tmp_path: Path) -> None:
    """One archive per installation (a new data directory's first jobs start from it too), unless
    a setting names a place, or the job user cannot have the installation's (then the data
    directory's own)."""
    from async_query.runtime import class_archive_cache
    from async_query.settings import Settings

    cache = class_archive_cache(Settings(data_dir=tmp_path / "a", index_cache_dir=tmp_path / "cache"))
    assert cache == tmp_path / "cache" / "jvm"
    first = LocalLauncher(tmp_path / "a", "aq", spark_submit="/bin/true", class_archive_cache=cache)
    second = LocalLauncher(tmp_path / "b", "aq", spark_submit="/bin/true", class_archive_cache=cache)
    assert first.class_archive.directory == second.class_archive.directory == cache
    named = LocalLauncher(tmp_path / "a", "aq", spark_submit="/bin/true", class_archive=tmp_path / "x", class_archive_cache=cache)
    assert named.class_archive.directory == tmp_path / "x"
    taken = tmp_path / "taken"
    taken.mkdir(mode=0o500)  # not the job user's to write
    try:
        own = LocalLauncher(tmp_path / "c", "aq", spark_submit="/bin/true", class_archive_cache=taken)
    finally:
        taken.chmod(0o700)
    assert own.class_archive.directory == (tmp_path / "c" / "jvm").resolve()


def test_the_claim_names_the_warm_up_so_no_process_starts_another_while_it_runs(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "jvm")
    warmup = FakeWarmup(0, gate=tmp_path / "go")
    assert archive.java_options(warmup) == [] and archive.recorder is not None
    claim = tmp_path / "jvm" / f"{archive.path.name}.claim"
    # The recorder names the warm-up in the claim once it has started it.
    wait_for(lambda: claim.read_text() not in ("", str(os.getpid())), timeout=10, what="the warm-up in the claim")
    pid = int(claim.read_text())
    assert pid != os.getpid()
    os.kill(pid, 0)  # the warm-up's process, alive
    assert ClassArchive(tmp_path / "jvm")._claim() is False  # not stale: it runs
    (tmp_path / "go").touch()
    archive.recorder.join(timeout=10)
    assert archive.path.exists() and not claim.exists()


def test_the_local_warm_up_adopts_its_own_recording(tmp_path: Path) -> None:
    """Run as the launcher runs it: the recording becomes the archive when the run ends cleanly,
    whoever waits for it (a service stopped meanwhile leaves the archive to the next start)."""
    recording, final = tmp_path / "a.jsa.recording", tmp_path / "a.jsa"
    options = [f"-XX:ArchiveClassesAtExit={recording}"]
    command = adopting(["sh", "-c", f'printf archive > "{recording}"'], options, final)
    assert subprocess.run(command, check=False).returncode == 0
    assert final.read_bytes() == b"archive" and not recording.exists()
    failed = adopting(["sh", "-c", f'printf partial > "{recording}"; exit 3'], options, tmp_path / "b.jsa")
    assert subprocess.run(failed, check=False).returncode == 3
    assert not (tmp_path / "b.jsa").exists()
    assert adopting(["true"], [], final) == ["true"]  # nothing recorded: run as it is
