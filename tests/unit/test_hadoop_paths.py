"""Locations read as Hadoop reads them (query_core/validation/paths.py): the port of Hadoop's
``Path`` gives what Hadoop gives (the vectors below were taken from Hadoop itself, and
tests/integration/test_hostile_guard.py compares the port with the JVM's ``Path`` on them and on
generated strings), and a location is below its root only after that reading, decoded too, and
with symbolic links followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from query_core.validation.paths import PathError, Place, hadoop_path, is_below, shown_location

#: (text, (scheme, authority, decoded path)) as ``new Path(text).toUri()`` gives them; None where
#: Hadoop throws.
HADOOP_VECTORS: list[tuple[str, tuple[str | None, str | None, str] | None]] = [
    ("/srv/wh/x?/../../../outside", (None, None, "/outside")),
    ("file:/srv/wh/x?/../../../o", ("file", None, "/o")),
    ("/srv/wh/x#/../../etc", (None, None, "/srv/etc")),
    ("/srv/wh/%2e%2e/etc", (None, None, "/srv/wh/%2e%2e/etc")),
    ("/wh/t%2F..%2F..%2Fetc", (None, None, "/wh/t%2F..%2F..%2Fetc")),
    ("/srv/wh/../../../../etc", (None, None, "/../../etc")),
    ("/srv/wh/..", (None, None, "/srv/")),
    ("/srv//wh///t/", (None, None, "/srv/wh/t")),
    ("file:///srv/wh/t", ("file", None, "/srv/wh/t")),
    ("file://host/srv", ("file", "host", "/srv")),
    ("file:/wh/t?#", ("file", None, "/wh/t?#")),
    ("s3://b/wh/../x", ("s3", "b", "/x")),
    ("hdfs://nn:8020/wh/./t", ("hdfs", "nn:8020", "/wh/t")),
    ("///etc", (None, None, "/etc")),
    ("////etc", (None, None, "/etc")),
    ("file:///%2Fx:///", ("file", None, "/%2Fx:")),
    ("file:///", ("file", None, "/")),
    ("file:////etc", ("file", None, "/etc")),
    ("file://", ("file", None, "/")),
    ("file://x", ("file", "x", "")),
    ("//", (None, None, "/")),
    ("//host/a/../../b", (None, "host", "/../b")),
    ("/a/./b/.", (None, None, "/a/b/")),
    ("a/../../b", (None, None, "../b")),
    ("/a/..", (None, None, "/")),
    ("/..", (None, None, "/..")),
    ("/../..", (None, None, "/../..")),
    ("file:/../etc", ("file", None, "/../etc")),
    (".", (None, None, "")),
    ("..", (None, None, "..")),
    ("./a:b", (None, None, "./a:b")),
    ("x/./y:z", (None, None, "x/y:z")),
    ("/a/b:c", (None, None, "/a/b:c")),
    ("/wh/.../..", (None, None, "/wh/")),
    ("/wh/..x", (None, None, "/wh/..x")),
    ("/wh/a b", (None, None, "/wh/a b")),
    ("/wh/ü/x", (None, None, "/wh/ü/x")),
    ("a+b:/x", ("a+b", None, "/x")),
    ("C:/x", ("C", None, "/x")),
    ("a:b", None),
    ("1x:/a", None),
    ("file:wh", None),
    ("file:./wh", None),
    ("file:", None),
    ("s3:", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), HADOOP_VECTORS)
def test_the_port_reads_a_location_as_hadoop_does(
    text: str, expected: tuple[str | None, str | None, str] | None
) -> None:
    if expected is None:
        with pytest.raises(PathError):
            hadoop_path(text)
        return
    found = hadoop_path(text)
    assert (found.scheme, found.authority, found.path) == expected


ROOT = "file:/srv/var/warehouse"


@pytest.mark.parametrize(
    ("location", "below"),
    [
        ("/srv/var/warehouse/t", True),
        ("file:///srv/var/warehouse/db/t", True),
        ("/srv/var/warehouse/a b/t", True),
        ("/srv/var/warehouse/x?y/t", False),  # a glob Spark would expand (has_glob): never taken as below
        ("/srv/var/warehouse//t/", True),
        ("/srv/var/warehouse", False),
        ("/srv/var/warehouse/", False),
        ("/srv/var/warehouse/.", False),
        ("/srv/var/warehouse2/t", False),
        ("/srv/var/warehouse/x?/../../../outside", False),  # the known attack: Hadoop keeps ? and climbs
        ("/srv/var/warehouse/x#/../../etc", False),
        ("/srv/var/warehouse/x?/../../warehouse2", False),
        ("/srv/var/warehouse/../../../etc", False),
        ("/srv/var/warehouse/t/../../x", False),
        ("/srv/var/warehouse/t/../u", True),
        ("/srv/var/warehouse/%2e%2e/etc", False),  # decoded by some readers: refused in both readings
        ("/srv/var/warehouse/%2E%2E/%2E%2E/etc", False),
        ("/srv/var/warehouse/t%2F..%2F..%2F..%2Fetc", False),
        ("/srv/var/warehouse/a%20b", True),
        ("/srv/var/warehouse/%252e%252e/x", True),  # decoded once: a directory called %2e%2e
        ("file://host/srv/var/warehouse/t", False),
        ("hdfs://nn/srv/var/warehouse/t", False),
        ("srv/var/warehouse/t", False),
        ("./t", False),
        ("warehouse/t", False),
        ("file:srv/var/warehouse/t", False),
        ("FILE:/srv/var/warehouse/t", True),
        ("", False),
    ],
)
def test_a_location_is_below_its_root_only_as_hadoop_resolves_it(location: str, below: bool) -> None:
    assert is_below(location, ROOT) is below


def test_other_file_systems_compare_scheme_and_authority() -> None:
    assert is_below("s3://bucket/wh/t", "s3://bucket/wh")
    assert is_below("S3://Bucket/wh/t", "s3://bucket/wh")
    assert not is_below("s3://other/wh/t", "s3://bucket/wh")
    assert not is_below("s3://bucket/wh/x?/../../y", "s3://bucket/wh")
    assert not is_below("/wh/t", "s3://bucket/wh")
    assert not is_below("/srv/wh/t", "")


def test_a_symbolic_link_that_leaves_the_root_is_outside(tmp_path: Path) -> None:
    root = tmp_path / "warehouse"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "escape")
    os.symlink(root / "db", root / "alias")
    (root / "db").mkdir()
    assert is_below(str(root / "db" / "t"), root.as_uri())
    assert is_below(str(root / "alias" / "t"), str(root))  # a link that stays inside
    assert not is_below(str(root / "escape"), str(root))
    assert not is_below(str(root / "escape" / "t"), str(root))
    assert not is_below(f"{root}/escape/new/deeper", str(root))


def test_a_root_named_through_a_link_holds_what_is_written_below_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    assert is_below(str(tmp_path / "link" / "t"), str(tmp_path / "link"))
    # Below the root as written, and below it once links are followed: both must hold.
    assert not is_below(str(real / "t"), str(tmp_path / "link"))


@pytest.mark.parametrize("location", ["/srv/wh/t\x00x", "/srv/wh/t%00x", "/srv/wh/t\nx", "/srv/wh/t\x7f", "/srv/wh/\x85"])
def test_a_location_holding_a_control_character_is_outside_without_an_error(location: str) -> None:
    """Found by an attack: a NUL reached ``os.path.realpath``, whose ``ValueError`` was a 500."""
    assert not is_below(location, "/srv/wh")
    assert not is_below("/srv/wh/t", "/srv/w\x00h")


def test_a_control_character_the_job_s_reading_decodes_is_outside_too() -> None:
    """Whatever the reader (the job's Hadoop) makes of a location: a control character in the path
    it gives is refused before the path reaches the operating system."""

    def decoding(location: str) -> Place | None:
        return Place("file", "", location.replace("~", "\x00")) if location.startswith("/") else None

    assert is_below("/srv/wh/t", "/srv/wh", decoding)
    assert not is_below("/srv/wh/t~", "/srv/wh", decoding)
    assert shown_location("/srv/wh/t\x00") == "/srv/wh/t\\u0000, which holds a control character"
    assert shown_location("/srv/wh/t") == "/srv/wh/t"
