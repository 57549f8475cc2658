"""The command line and credentials: the client sends them (and keeps none), ``user`` manages them."""

from __future__ import annotations

import argparse
import base64
import io
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.cli import main
from async_query.datasources import Datasource
from async_query.security.users import UsersFile, read_users
from async_query_cli.client import PASSWORD_ENV, USER_ENV
from async_query_cli.commands import EXIT_API_ERROR, EXIT_OK, resolve_credentials
from async_query_cli.state import FILE_NAME, STATE_DIR_ENV
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, serve_http

PASSWORD = "alice-Pa55word-1"


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test remembers sessions in its own directory, with no credentials from the machine."""
    for name in (USER_ENV, PASSWORD_ENV, "ASYNC_QUERY_URL", "ASYNC_QUERY_USERS_FILE", "ASYNC_QUERY_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    state = tmp_path / "cli-state"
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    return state


@pytest.fixture
def url(make_plugin: PluginFactory, tmp_path: Path) -> Iterator[str]:
    users = tmp_path / "users.json"
    UsersFile(users, FAST_HASHER).add("alice", PASSWORD, ["all_access"])
    plugin = make_plugin(auth="basic", users_file=users)
    with serve_http(create_app(plugin)) as served:
        yield served


def _secrets() -> list[str]:
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    return [PASSWORD, token, "Authorization", "Basic "]


# -- the client ----------------------------------------------------------------------------------


def test_the_cli_sends_credentials_and_keeps_none(
    url: str,
    datasource: Datasource,
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    code = main(["submit", "SELECT 1", "--url", url, "--datasource", datasource.name, "--user", "alice"])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    session_id = dict(line.split(": ", 1) for line in captured.out.strip().splitlines())["sessionId"]
    # the remembered-sessions file: the session, and no secret
    text = (clean_env / FILE_NAME).read_text()
    assert session_id in text
    for secret in _secrets():
        assert secret not in text
    assert "alice" not in text
    # the user may also come from the environment
    monkeypatch.setenv(USER_ENV, "alice")
    assert main(["sessions", "--url", url]) == EXIT_OK
    assert session_id in capsys.readouterr().out


def test_without_credentials_the_cli_says_what_to_do(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["sessions", "--url", url]) == EXIT_API_ERROR
    err = capsys.readouterr().err
    assert "401 Unauthorized (OpenSearchSecurityException)" in err
    assert "pass --user NAME" in err and PASSWORD_ENV in err
    monkeypatch.setenv(PASSWORD_ENV, "not-the-password")
    assert main(["sessions", "--url", url, "--user", "alice"]) == EXIT_API_ERROR
    err = capsys.readouterr().err
    assert "the user name or password was not accepted" in err
    assert "not-the-password" not in err


def test_the_cli_asks_for_the_password_and_never_reads_it_from_a_pipe(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["sessions", "--url", url, "--user", "alice"]) == EXIT_API_ERROR
    err = capsys.readouterr().err
    assert f"no password for alice: set {PASSWORD_ENV}" in err


@pytest.mark.parametrize("userinfo", ["alice:" + PASSWORD, "alice"])
def test_credentials_in_the_url_are_refused(
    url: str, userinfo: str, clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_credentials = url.replace("http://", f"http://{userinfo}@")
    assert main(["submit", "SELECT 1", "--url", with_credentials]) == EXIT_API_ERROR
    err = capsys.readouterr().err
    assert "must not hold credentials" in err and "--user" in err
    assert PASSWORD not in err
    assert not (clean_env / FILE_NAME).exists()


@pytest.mark.parametrize(
    ("url", "warned"),
    [("http://db.example:9000", True), ("https://db.example:9000", False), ("http://localhost:9000", False)],
)
def test_a_password_over_plain_http_to_another_host_is_warned_about(
    url: str, warned: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked where the credentials are gathered, before any connection is made."""
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert resolve_credentials(argparse.Namespace(user="alice"), url) == ("alice", PASSWORD)
    err = capsys.readouterr().err
    assert ("sending the password of alice over plain HTTP" in err) is warned
    assert PASSWORD not in err


# -- user add / list / remove ------------------------------------------------------------------------


def _user(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return main(["user", *argv])


def test_user_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ASYNC_QUERY_DATA_DIR", str(tmp_path / "var"))
    path = tmp_path / "var" / "users.json"
    assert _user(["add", "alice", "--role", "all_access", "--password-stdin"], PASSWORD + "\n", monkeypatch) == 0
    assert (
        _user(["add", "bob", "--role", "reader", "--role", "x", "--password-stdin"], "bob-Pa55word\r\n", monkeypatch)
        == 0
    )
    assert capsys.readouterr().out.splitlines() == [
        f"added user alice with roles all_access in {path}",
        f"added user bob with roles reader, x in {path}",
    ]
    # private, and no password in it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert PASSWORD not in text and "bob-Pa55word" not in text
    assert all(u.password_hash.startswith("$argon2id$") for u in read_users(path).values())

    assert _user(["list"], "", monkeypatch) == 0
    listed = capsys.readouterr().out
    assert listed.splitlines() == ["name   roles", "alice  all_access", "bob    reader, x", f"(2 users in {path})"]
    assert "$argon2" not in listed

    assert _user(["add", "bob", "--role", "reader", "--password-stdin"], "bob-Pa55word\n", monkeypatch) == 2
    assert "exists; pass --replace" in capsys.readouterr().err
    assert (
        _user(["add", "bob", "--role", "writer", "--password-stdin", "--replace"], "new-Pa55word\n", monkeypatch) == 0
    )
    assert "updated user bob with roles writer" in capsys.readouterr().out
    assert read_users(path)["bob"].roles == ("writer",)

    assert _user(["remove", "bob"], "", monkeypatch) == 0
    assert _user(["remove", "bob"], "", monkeypatch) == 2
    assert "no user named 'bob'" in capsys.readouterr().err
    assert set(read_users(path)) == {"alice"}


@pytest.mark.parametrize(
    ("argv", "stdin", "expected"),
    [
        (["add", "a:b", "--role", "r", "--password-stdin"], PASSWORD, "invalid user name"),
        (["add", "anonymous", "--role", "r", "--password-stdin"], PASSWORD, "is reserved"),
        (["add", "carol", "--role", "r w", "--password-stdin"], PASSWORD, "invalid role"),
        (["add", "carol", "--role", "r", "--password-stdin"], "short\n", "too short"),
        (["add", "carol", "--role", "r", "--password-stdin"], "", "too short"),
        (["add", "carol", "--role", "r"], PASSWORD, "no terminal to ask the password on"),
    ],
    ids=["colon", "reserved", "role_space", "short", "empty", "no_tty"],
)
def test_user_add_refusals(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    expected: str,
) -> None:
    path = tmp_path / "users.json"
    assert _user(["--users-file", str(path), *argv], stdin, monkeypatch) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert PASSWORD not in err
    assert not path.exists()


def test_a_user_added_while_serving_can_log_in(
    make_plugin: PluginFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "users.json"
    assert (
        _user(
            ["--users-file", str(path), "add", "alice", "--role", "all_access", "--password-stdin"],
            PASSWORD,
            monkeypatch,
        )
        == 0
    )
    plugin = make_plugin(auth="basic", users_file=path, users_recheck_s=0.05)
    with serve_http(create_app(plugin)) as served:
        assert httpx.get(f"{served}{BASE}/_sessions", auth=("dave", "dave-Pa55word"), verify=CLIENT_SSL).status_code == 401
        assert (
            _user(
                ["--users-file", str(path), "add", "dave", "--role", "r", "--password-stdin"],
                "dave-Pa55word",
                monkeypatch,
            )
            == 0
        )
        from tests.support import wait_for

        wait_for(
            lambda: httpx.get(f"{served}{BASE}/_sessions", auth=("dave", "dave-Pa55word"), verify=CLIENT_SSL).status_code == 200,
            timeout=10,
            what="the new user to be let in",
        )
    lines = (plugin.settings.data_dir / "audit" / "audit.log").read_text()
    assert json.loads(lines.splitlines()[-1])["user"] == "dave"
