"""A private view (docs/security.md, "A private view"): what a child of a root service sees when the
job user cannot pass to what it needs. Planning is checked everywhere; entering a view needs root
(CI runs the suite as root) and a machine that makes mount namespaces."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from async_query.security import views
from async_query.security.job_user import JobUser
from async_query.security.setup import serve_checks
from async_query.settings import Settings

AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="a view is entered as root (CI runs the suite as root)")
NOBODY = JobUser("nobody", 65534, 65534, frozenset({65534}))


def closed_tree(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """``home`` (0700) holding a readable ``code`` directory, a ``data`` place to write, and a
    ``secret`` file beside them."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    code = home / "project" / "code"
    code.mkdir(parents=True)
    (code / "module.py").write_text("print('code')\n")
    data = home / "data"
    data.mkdir(mode=0o700)
    os.chown(data, NOBODY.uid, NOBODY.gid) if AS_ROOT else None
    secret = home / "project" / "secret"
    secret.write_text("the service's\n")
    secret.chmod(0o644)  # readable by its modes: only the veil keeps it out of reach
    for directory in (home / "project", code):
        directory.chmod(0o755)
    home.chmod(0o700)
    return home, code, data, secret


@needs_root
def test_the_veil_is_the_topmost_directory_the_job_user_cannot_pass_and_only_needed_places_are_shown(tmp_path: Path) -> None:
    home, code, data, secret = closed_tree(tmp_path)
    view = views.plan_view(NOBODY, [code], [data])
    assert view.needed and view.veils == (str(home),)
    assert view.binds == (views.Place(str(data), True), views.Place(str(code), False))
    assert views.veil_of(NOBODY, secret) == home
    # Nothing blocked, no view; a user who does not switch never gets one.
    assert views.plan_view(NOBODY, [Path("/usr/bin")]) == views.View()
    assert views.plan_view(JobUser.resolve("root", allow_root=True), [code]) == views.View()
    # A place that does not exist yet is veiled like the others, and not shown.
    later = views.plan_view(NOBODY, [home / "later"])
    assert later.veils == (str(home),) and later.binds == ()


@needs_root
def test_a_child_in_its_view_reads_and_writes_its_places_and_nothing_else_behind_the_veil(tmp_path: Path) -> None:
    home, code, data, secret = closed_tree(tmp_path)
    report = tmp_path / "report"
    script = (
        f'id -u; umask; pwd; cat {code}/module.py; ls {home} >/dev/null 2>&1 && echo LISTED || echo UNLISTED;'
        f"cat {secret} 2>/dev/null || echo NO-SECRET;"
        f"touch {code}/new 2>/dev/null && echo WROTE-CODE || echo CODE-READ-ONLY;"
        f"echo written > {data}/out && echo WROTE-DATA"
    )
    mask = os.umask(0o077)  # the service's own (async-query serve): the way down is still passable
    with report.open("wb") as out:
        proc = views.spawn(
            ["sh", "-c", script],
            NOBODY,
            view=views.plan_view(NOBODY, [code], [data]),
            cwd=data,
            env={"PATH": os.environ["PATH"]},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        os.umask(mask)
        assert proc.wait(timeout=30) == 0, report.read_text()
    lines = report.read_text().splitlines()
    assert lines[:5] == ["65534", "0077", str(data), "print('code')", "UNLISTED"], lines  # the veil: passed, not listed
    assert lines[5:] == ["NO-SECRET", "CODE-READ-ONLY", "WROTE-DATA"], lines
    written = data / "out"
    assert written.read_text() == "written\n" and written.stat().st_uid == NOBODY.uid
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # The operator's directories are as they were, and nothing of the view is left on the machine.
    assert stat.S_IMODE(home.stat().st_mode) == 0o700 and not (code / "new").exists()
    assert str(home) not in Path("/proc/self/mountinfo").read_text()


@needs_root
def test_this_machine_makes_views_and_a_child_that_cannot_enter_one_says_why_in_one_line(tmp_path: Path) -> None:
    views.available()  # CI's machine: root, mount namespaces
    home, code, _, _ = closed_tree(tmp_path)
    missing = views.View((str(home),), (views.Place(str(code)), views.Place(str(tmp_path / "gone"))))
    done = subprocess.run(
        views.entry_command(missing, NOBODY, ["true"], "/"), capture_output=True, check=False
    )
    assert done.returncode == 125
    assert done.stderr.decode().count("\n") == 1 and "cannot enter the job's private view" in done.stderr.decode()


def test_a_view_the_machine_cannot_make_is_one_line_naming_the_settings_of_another_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "_probe", lambda: "unshare: Operation not permitted")
    with pytest.raises(views.ViewUnavailableError) as raised:
        views.available()
    message = raised.value.message
    assert "\n" not in message and "unshare: Operation not permitted" in message
    assert "ASYNC_QUERY_LOCAL_JOB_USER" in message and "ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT" in message
    assert "chmod" not in message


@needs_root
def test_serve_refuses_in_one_line_where_a_view_is_needed_and_the_machine_cannot_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "mktemp-d"
    private.mkdir(mode=0o700)
    settings = Settings(data_dir=private / "data")
    assert serve_checks(settings, "127.0.0.1").errors == []  # this machine makes views
    monkeypatch.setattr(views, "_probe", lambda: "unshare: Operation not permitted")
    [error] = serve_checks(settings, "127.0.0.1").errors
    assert "\n" not in error and "unshare: Operation not permitted" in error and "ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT" in error
