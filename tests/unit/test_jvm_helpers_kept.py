"""Which kept helper classes a job reads at all (flint_repl_job/jvm/, docs/job.md "The JVM's
helpers"): only a file of its own user's or root's that no one else may write. The rest of the
keeping (compile, keep, define, a damaged file) runs in Spark: tests/integration/test_jvm_helpers_spark.py."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from flint_repl_job import jvm


class NoJvm:
    """Stands where the Spark session would, and counts what is asked of it: the classes of a file
    refused never reach the JVM."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> object:
        self.asked.append(name)
        raise RuntimeError(f"no JVM here ({name})")


def jar(path: Path) -> Path:
    """A well-formed jar of one class file, as the job keeps them."""
    with zipfile.ZipFile(path, "w") as out:
        out.writestr("asyncquery/jvm/PlanJson.class", b"\xca\xfe\xba\xbe")
    return path


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_kept_classes_others_may_write_are_not_read(tmp_path: Path, mode: int) -> None:
    kept = jar(tmp_path / "PlanJson-0123.jar")
    kept.chmod(mode)
    spark = NoJvm()
    assert jvm.load_kept(spark, "PlanJson", kept) is None
    assert spark.asked == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_kept_classes_of_another_user_are_not_read(tmp_path: Path) -> None:
    kept = jar(tmp_path / "PlanJson-0123.jar")
    kept.chmod(0o600)
    os.chown(kept, 12345, 12345)
    spark = NoJvm()
    assert jvm.load_kept(spark, "PlanJson", kept) is None
    assert spark.asked == []


def test_a_file_of_this_user_s_alone_reaches_the_jvm(tmp_path: Path) -> None:
    """The control: the same jar, this user's and 0600, is handed to the JVM."""
    kept = jar(tmp_path / "PlanJson-0123.jar")
    kept.chmod(0o600)
    spark = NoJvm()
    assert jvm.load_kept(spark, "PlanJson", kept) is None  # this stand-in has no JVM to define it in
    assert spark.asked == ["_jvm"]


def test_no_kept_file_is_no_classes(tmp_path: Path) -> None:
    assert jvm.load_kept(NoJvm(), "PlanJson", tmp_path / "missing.jar") is None
