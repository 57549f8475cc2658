"""The embedded index's class archive (async_query/embedded/archive.py): recorded by a node that
stops cleanly, adopted as a file of the service's, and only from a regular file of the node's user.
The recording and the mapping by a real node: tests/integration/test_embedded_index.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from async_query.embedded.archive import ChildArchive


@pytest.fixture
def jar(tmp_path: Path) -> Path:
    path = tmp_path / "lib" / "a.jar"
    path.parent.mkdir()
    path.write_bytes(b"jar")
    return path


def test_a_jvm_records_where_there_is_no_archive_and_maps_the_archive_once_adopted(tmp_path: Path, jar: Path) -> None:
    archive = ChildArchive(tmp_path / "archives", "node", [jar])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert f"-XX:ArchiveClassesAtExit={scratch / (archive.path.name + '.recording')}" in archive.java_options(scratch)

    archive.recording(scratch).write_bytes(b"classes")
    assert archive.adopt(scratch, os.geteuid())
    assert archive.path.read_bytes() == b"classes" and not archive.recording(scratch).exists()
    assert stat.S_IMODE(archive.path.stat().st_mode) == 0o644
    assert archive.java_options(scratch)[0] == f"-XX:SharedArchiveFile={archive.path}"


def test_another_jar_or_the_same_jar_changed_is_another_archive_which_replaces_the_first(
    tmp_path: Path, jar: Path
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before = ChildArchive(tmp_path / "archives", "node", [jar])
    before.recording(scratch).write_bytes(b"classes")
    assert before.adopt(scratch, os.geteuid())
    other_place = ChildArchive(tmp_path / "archives", "node", [tmp_path / "elsewhere.jar"])
    other_place.recording(scratch).write_bytes(b"classes")
    assert other_place.adopt(scratch, os.geteuid())

    jar.write_bytes(b"another build")  # a reinstall in the same place
    after = ChildArchive(tmp_path / "archives", "node", [jar])
    assert after.path != before.path and after.place == before.place
    after.recording(scratch).write_bytes(b"new classes")
    assert after.adopt(scratch, os.geteuid())
    assert sorted((tmp_path / "archives").iterdir()) == sorted([after.path, other_place.path])
    assert ChildArchive(tmp_path, "metastore", [jar]).path.name.startswith("metastore-")


@pytest.mark.parametrize("planted", ["link", "directory", "empty", "another user's"])
def test_only_a_regular_file_of_the_jvm_s_user_is_adopted(tmp_path: Path, jar: Path, planted: str) -> None:
    """The node's user writes the recording, in its own directory: whatever it leaves there is
    never read through a link (a file of the service's, copied where every node maps it), and
    nothing but a regular file it wrote becomes the archive."""
    archive = ChildArchive(tmp_path / "archives", "node", [jar])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    recording = archive.recording(scratch)
    secret = tmp_path / "secret"
    secret.write_text("the service's")
    owner = os.geteuid()
    if planted == "link":
        recording.symlink_to(secret)
    elif planted == "directory":
        recording.mkdir()
    elif planted == "empty":
        recording.touch()
    else:
        recording.write_bytes(b"classes")
        owner += 1
    assert not archive.adopt(scratch, owner)
    assert not archive.path.exists()
    assert not archive.adopt(tmp_path / "nothing recorded", os.geteuid())  # a node killed records nothing
