"""The CLI's remembered sessions file (no servers)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from async_query_cli.state import (
    FILE_NAME,
    MAX_ID_LEN,
    STATE_DIR_ENV,
    RememberedSessions,
    normalize_url,
    state_dir,
)

URL = "http://127.0.0.1:9000"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / FILE_NAME


def test_state_dir_prefers_the_env_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir({STATE_DIR_ENV: "/x/y", "XDG_STATE_HOME": "/xdg"}) == Path("/x/y")
    assert state_dir({STATE_DIR_ENV: "", "XDG_STATE_HOME": "/xdg"}) == Path("/xdg/async-query")
    assert state_dir({"XDG_STATE_HOME": "relative/is/ignored"}) == tmp_path / "home/.local/state/async-query"
    assert state_dir({}) == tmp_path / "home/.local/state/async-query"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "s"))
    assert state_dir() == tmp_path / "s"
    assert RememberedSessions().path == tmp_path / "s" / FILE_NAME


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
        ("  HTTP://LocalHost:9000//  ", "http://localhost:9000"),
        ("http://host:80/", "http://host"),
        ("https://host:443/prefix/", "https://host/prefix"),
        ("https://host:8443/Prefix", "https://host:8443/Prefix"),
        ("https://user:secret@host/?q=1#frag", "https://host"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
        ("not a url/", "not a url"),
        ("http://host:notaport/", "http://host:notaport"),
    ],
)
def test_normalize_url(given: str, key: str) -> None:
    assert normalize_url(given) == key


def test_missing_file_is_empty_and_put_then_get(path: Path) -> None:
    state = RememberedSessions(path)
    assert state.get(URL, "local") is None
    state.put(URL, "local", "S1")
    assert state.get(URL, "local") == "S1"
    assert state.get(URL + "/", "local") == "S1"
    assert state.get(URL, "other") is None
    assert state.get("http://127.0.0.1:9001", "local") is None
    state.put(URL, "local", "S2")
    assert RememberedSessions(path).get(URL, "local") == "S2"
    saved = json.loads(path.read_text())
    assert saved["version"] == 1
    assert [(e["url"], e["datasource"], e["sessionId"]) for e in saved["sessions"]] == [(URL, "local", "S2")]


def test_the_file_is_private_and_no_temporary_files_are_left(path: Path) -> None:
    RememberedSessions(path).put(URL, "local", "S1")
    RememberedSessions(path).put(URL, "other", "S2")
    assert sorted(p.name for p in path.parent.iterdir()) == [FILE_NAME]
    assert path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"\xff\xfe\x00garbage",
        b"[]",
        b"null",
        b'{"sessions": {"a": 1}}',
        b'{"sessions": "x"}',
    ],
)
def test_a_corrupt_file_reads_as_empty_and_is_replaced(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    state = RememberedSessions(path)
    assert state.entries() == []
    assert state.get(URL, "local") is None
    state.put(URL, "local", "S1")
    assert RememberedSessions(path).get(URL, "local") == "S1"


def test_bad_entries_are_skipped(path: Path) -> None:
    path.parent.mkdir(parents=True)
    good = {"url": URL, "datasource": "local", "sessionId": "GOOD", "updatedAt": 5}
    bad = [
        "x",
        None,
        {"url": URL, "datasource": "a"},
        {"url": URL, "datasource": "b", "sessionId": ""},
        {"url": URL, "datasource": "c", "sessionId": 7},
        {"url": URL, "datasource": "d", "sessionId": "S", "updatedAt": "yesterday"},
        {"url": URL, "datasource": "e", "sessionId": "x" * (MAX_ID_LEN + 1)},
    ]
    path.write_text(json.dumps({"version": 1, "sessions": [*bad, good]}))
    state = RememberedSessions(path)
    assert [e.session_id for e in state.entries()] == ["GOOD"]
    assert state.get(URL, "local") == "GOOD"
    for ds in "abcde":
        assert state.get(URL, ds) is None


def test_an_unreadable_path_reads_as_empty(path: Path) -> None:
    path.mkdir(parents=True)  # a directory where the file should be
    assert RememberedSessions(path).get(URL, "local") is None
    with pytest.raises(OSError):
        RememberedSessions(path).put(URL, "local", "S1")


def test_only_the_most_recent_entries_are_kept(path: Path) -> None:
    state = RememberedSessions(path, max_entries=3)
    for i in range(5):
        state.put(URL, f"ds{i}", f"S{i}")
    assert [e.datasource for e in state.entries()] == ["ds4", "ds3", "ds2"]
    state.put(URL, "ds2", "S2")  # using an entry again keeps it
    state.put(URL, "ds5", "S5")
    assert [e.datasource for e in state.entries()] == ["ds5", "ds2", "ds4"]
    assert len(json.loads(path.read_text())["sessions"]) == 3


def test_forget(path: Path) -> None:
    state = RememberedSessions(path)
    state.forget(URL, "local")
    assert not path.exists()
    state.put(URL, "local", "S1")
    state.put(URL, "other", "S2")
    state.forget(URL + "/", "local")
    assert state.get(URL, "local") is None
    assert state.get(URL, "other") == "S2"


def _hammer(path: str, worker: int, rounds: int) -> None:
    state = RememberedSessions(Path(path))
    for i in range(rounds):
        state.put(URL, f"ds{worker}", f"S{worker}-{i}")
        state.get(URL, "ds0")


def test_concurrent_writers_never_leave_a_corrupt_file(path: Path) -> None:
    """Processes writing at once: every read sees a whole file, the last writer of a key wins."""
    path.parent.mkdir(parents=True)
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_hammer, args=(str(path), w, 40)) for w in range(4)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        if path.exists():
            json.loads(path.read_text())  # never a half-written file
        time.sleep(0.001)
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    entries = RememberedSessions(path).entries()
    assert entries, "at least one writer's entry survives"
    for entry in entries:
        worker = entry.datasource.removeprefix("ds")
        assert entry.session_id.startswith(f"S{worker}-")
    assert [p.name for p in path.parent.iterdir()] == [FILE_NAME]
    assert os.access(path, os.R_OK)
