"""The embedded metastore as a child process: it starts, a leftover of a crashed service is
stopped before a new one takes its database, and a start-up failure says why."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from async_query.embedded.metastore import Metastore, MetastoreError
from async_query.security.job_user import JobUser
from tests.support import wait_for


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


def test_no_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MetastoreError, match="Java 17 is needed"):
        Metastore.start(tmp_path / "ms", tmp_path / "warehouse", files=tmp_path / "files")
