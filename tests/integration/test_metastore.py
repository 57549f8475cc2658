"""The embedded metastore as a child process: it starts, a leftover of a crashed service is
stopped before a new one takes its database, and a start-up failure says why."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from async_query.embedded.metastore import Metastore, MetastoreError
from async_query.security.job_user import JobUser
from tests.listeners import listeners
from tests.support import mapped_files, wait_for

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier

#: A Python of the machine's, that any user may run; and a local user who is neither root nor the job user.
SYSTEM_PYTHON = "/usr/bin/python3"
OTHER_UID = 1


def process_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_a_leftover_metastore_is_stopped_before_a_new_one_starts(tmp_path: Path) -> None:
    files = tmp_path / "files"
    leftover = Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=files)
    try:
        # The service that started it is gone without closing it (its pid file stays behind).
        assert (files / "metastore.pid").exists()
        fresh = Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=files)
        try:
            wait_for(lambda: leftover.proc.poll() is not None, timeout=15, what="the leftover to stop")
            assert listening(fresh.port) and fresh.started_s > 0
            assert (tmp_path / "warehouse").is_dir()
            # It runs as the job user, who owns its database and warehouse; its log and pid file
            # are ours, where that user cannot swap them for links.
            user = JobUser.resolve()
            assert process_uid(fresh.proc.pid) == user.uid
            for owned in (tmp_path / "ms" / "metastore_db", tmp_path / "warehouse"):
                assert owned.stat().st_uid == user.uid and owned.stat().st_mode & 0o077 == 0
            assert (files / "metastore.log").stat().st_uid == os.geteuid()
        finally:
            fresh.close()
        assert not listening(fresh.port) and not (files / "metastore.pid").exists()
    finally:
        leftover.close()


def test_a_metastore_started_without_a_class_archive_records_one_as_it_stops_and_the_next_maps_it(
    tmp_path: Path,
) -> None:
    archives = tmp_path / "archives"
    first = Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files", class_archive=archives)
    assert first.archive is not None and first.recording
    first.close()
    kept = first.archive.path.stat()
    assert (kept.st_uid, stat.S_IMODE(kept.st_mode)) == (os.geteuid(), 0o644)  # the service's: the job user reads it
    assert list(archives.iterdir()) == [first.archive.path]

    again = Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files", class_archive=archives)
    try:
        assert not again.recording
        assert str(first.archive.path) in mapped_files(again.proc.pid)
    finally:
        again.close()


def test_no_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MetastoreError, match="Java 17 is needed"):
        Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files")


def test_the_warm_up_reads_the_tables_held_in_batches_and_stops_quietly(tmp_path: Path) -> None:
    from pymetastore.hive_metastore.ttypes import Database

    from async_query.catalog.readers import HiveMetastoreReader
    from bench.browse import spark_like_table

    metastore = Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files")
    try:
        assert metastore.warm_up(500) == 0  # nothing held yet: nothing to read, no error
        reader = HiveMetastoreReader(metastore.uri, timeout_s=60)
        try:
            location = (tmp_path / "warehouse" / "lake.db").as_uri()
            reader._call("create_database", Database(name="lake", locationUri=location, parameters={}))
            for name in ("a", "b", "c"):
                reader._call("create_table", spark_like_table("lake", name, f"{location}/{name}", partitioned=False))
        finally:
            reader.close()
        assert metastore.warm_up(10) == 10  # the three tables read again and again, ten reads in all
        assert metastore.warm_up(100) == 15  # a small catalog: at most five passes over it
    finally:
        metastore.close()
    assert metastore.warm_up(10) == 0  # stopped: gives up without raising


#: One Thrift call by hand (``get_all_databases``, strict binary protocol), sent by a process of
#: ``uid`` with the machine's own Python and its standard library alone: what comes back.
THRIFT_CALL = """
import socket, struct, sys
name = b"get_all_databases"
call = struct.pack(">I", 0x80010001) + struct.pack(">I", len(name)) + name + struct.pack(">I", 1) + b"\\x00"
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30) as s:
    s.sendall(call)
    sys.stdout.write(s.recv(4).hex())
"""


def thrift_call_as(uid: int, port: int) -> str:
    done = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", THRIFT_CALL, str(port)], user=uid, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON), reason="switching users needs root")
def test_a_metastore_in_a_private_directory_listens_on_loopback_for_its_own_user_and_root_only(tmp_path: Path) -> None:
    closed = tmp_path / "closed"  # as a data directory in a directory made by mktemp -d
    closed.mkdir(mode=0o700)
    metastore = Metastore.start(closed / "var" / "metastore", closed / "var" / "warehouse", files=tmp_path / "files")
    try:
        user = JobUser.resolve()
        assert process_uid(metastore.proc.pid) == user.uid
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700  # shown to it by a private view, not opened
        bound = {(found.address, found.port) for found in listeners(metastore.proc.pid)}
        assert bound == {("127.0.0.1", metastore.port)} | ({("127.0.0.1", metastore.tables.port)} if metastore.tables else set())
        reply = "80010002"  # a Thrift reply
        assert thrift_call_as(0, metastore.port) == reply  # the service
        assert thrift_call_as(user.uid, metastore.port) == reply  # its jobs
        assert thrift_call_as(OTHER_UID, metastore.port) == ""  # any other local user: closed at once
        assert metastore.proc.poll() is None
    finally:
        metastore.close()
