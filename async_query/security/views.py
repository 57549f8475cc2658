"""What a child of a root service sees: the places it needs, shown past directories it cannot pass.

A service run as root starts its children that run statements or hold data (local jobs, their
class-archive warm-up, the metastores) as the unprivileged job user (:mod:`.job_user`). They need
this Python, this installation's code and their own places in the data directory; a service
installed under a private home (``/root``, 0700) or given a data directory in a private
directory has them where that user cannot pass. Opening those directories to every local user is
not the service's to do. Instead each such child runs in a *private view*: a mount namespace of
its own in which every directory the job user cannot pass through on the way to a needed place
(the topmost one: a *veil*) is covered by an empty ``tmpfs``, and each needed place is mounted
again at its own path, read-only unless the child writes it. Paths stay the same, so nothing is
translated; and a veil only covers what the job user could not reach anyway, so the view adds
exactly the needed places and takes nothing away. The service's files beside them (the users
file, the sealing key, the index) stay behind the veil, or behind their own modes as before.

Where nothing needed is blocked (a service installed where the job user may read it) no view is
made: the child starts as the job user directly, as before. Where a view is needed but the machine
cannot make one (no mount namespaces: an unprivileged container, say), starting says so in one
line with the settings that choose another way. See docs/security.md ("A private view").
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from async_query.security import view_entry
from async_query.security.job_user import JOB_UMASK, JobUser, JobUserError, R, X

#: The script that enters a view (run by path, with the standard library alone).
ENTRY = Path(view_entry.__file__).resolve()
#: The settings that choose another way when no view can be made.
OTHER_WAYS = (
    "install the service and its data directory where the job user can pass, or set ASYNC_QUERY_LOCAL_JOB_USER="
    "root with ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT=true to run local jobs as root"
)


class ViewUnavailableError(JobUserError):
    """A child needs a private view and this machine cannot make one."""


@dataclass(frozen=True)
class Place:
    """A place a child needs: a path, and whether it writes there."""

    path: str
    writable: bool = False


@dataclass(frozen=True)
class View:
    """The veils and the places shown past them (empty: no view is needed)."""

    veils: tuple[str, ...] = ()
    binds: tuple[Place, ...] = ()

    @property
    def needed(self) -> bool:
        return bool(self.veils)

    def plan(self, user: JobUser, cwd: Path | str, *, die_with_parent: int = 0, ignore_stop_signals: bool = False) -> str:
        """The plan :mod:`.view_entry` reads (JSON; paths and ids only)."""
        return json.dumps(
            {
                "veils": list(self.veils),
                "binds": [[place.path, place.writable] for place in self.binds],
                "uid": user.uid,
                "gid": user.gid,
                "umask": JOB_UMASK,
                "cwd": str(cwd),
                "pdeathsig": int(die_with_parent),
                "ignore_stop_signals": ignore_stop_signals,
            }
        )


def veil_of(user: JobUser, path: Path | str) -> Path | None:
    """The topmost directory above ``path`` the job user cannot pass through (None: it can pass
    every one). ``path`` itself is not looked at: its own modes are the place's."""
    for directory in reversed(Path(path).parents):
        try:
            if not user.passes(directory):
                return directory
        except OSError:
            return None
    return None


def plan_view(user: JobUser, reads: Iterable[Path | str], writes: Iterable[Path | str] = ()) -> View:
    """The view in which ``user`` reaches ``reads`` and ``writes`` (each resolved, links followed,
    as the kernel will), veiling what blocks the way; empty when nothing does or no switch of users
    happens. A place that does not exist (yet) is veiled like the others but not shown."""
    if not user.switches:
        return View()
    places: dict[str, bool] = {}
    for path, writable in [*((p, False) for p in reads), *((p, True) for p in writes)]:
        real = os.path.realpath(path)
        places[real] = writable or places.get(real, False)
    veils: set[str] = set()
    shown: list[Place] = []
    for path, writable in sorted(places.items()):
        veil = veil_of(user, path)
        if veil is not None:
            veils.add(str(veil))
            if os.path.exists(path):
                shown.append(Place(path, writable))
    return View(tuple(sorted(veils)), tuple(shown))


def entry_command(
    view: View, user: JobUser, command: list[str], cwd: Path | str, *, die_with_parent: int = 0, ignore_stop_signals: bool = False
) -> list[str]:
    """``command`` as it is run through the view's entry (as root, which leaves root there)."""
    plan = view.plan(user, cwd, die_with_parent=die_with_parent, ignore_stop_signals=ignore_stop_signals)
    return [sys.executable, "-I", "-S", str(ENTRY), plan, "--", *command]


def spawn(
    command: list[str],
    user: JobUser,
    *,
    view: View,
    cwd: Path | str,
    env: Mapping[str, str],
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    new_session: bool = False,
    die_with_parent: int = 0,
    ignore_stop_signals: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as ``user`` with a umask of 077: through a private view where ``view``
    is needed (checked to be possible on this machine first), else directly. ``die_with_parent``:
    the signal it gets when the thread that started it ends (Linux; 0: none); ``ignore_stop_signals``:
    SIGINT and SIGTERM ignored (a terminal's Ctrl-C, or a stop sent to the service's whole process
    group, is the service's to handle: it stops such a child itself, last, once nothing needs it)."""
    if view.needed:
        available()
        return subprocess.Popen(
            entry_command(view, user, command, cwd, die_with_parent=die_with_parent, ignore_stop_signals=ignore_stop_signals),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
            cwd="/",
            start_new_session=new_session,
        )
    return subprocess.Popen(
        command,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=dict(env),
        cwd=cwd,
        start_new_session=new_session,
        preexec_fn=(lambda: _in_child(die_with_parent, ignore_stop_signals)) if die_with_parent or ignore_stop_signals else None,
        **user.popen_options(),
    )


def _in_child(death: int, ignore_stop_signals: bool) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: ``death`` to this process when the thread that started it goes (a crashed service);
    SIGINT and SIGTERM ignored where asked."""
    if death and sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(view_entry.PR_SET_PDEATHSIG, death)
    if ignore_stop_signals:
        view_entry.ignore_stop_signals()


@functools.cache
def _probe() -> str | None:
    """Whether this machine makes private views: one is tried (a veiled directory with a place
    shown past it, entered as ``nobody``'s uid), once per process. None: it does; else what failed."""
    if os.geteuid() != 0:
        return "the service does not run as root"
    with tempfile.TemporaryDirectory(prefix="async-query-view-") as top:  # 0700: a veil
        shown = Path(top) / "shown"
        shown.mkdir()
        shown.chmod(0o755)  # whatever the umask
        probe = JobUser("probe", 65534, 65534, frozenset({65534}))
        command = entry_command(plan_view(probe, [shown]), probe, ["ls", str(shown)], "/")
        done = subprocess.run(command, capture_output=True, timeout=30, cwd="/", check=False)
        if done.returncode == 0:
            return None
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit code {done.returncode}"


def available() -> None:
    """Raise :class:`ViewUnavailableError` (one line: what failed, and the settings that choose
    another way) where this machine cannot make private views."""
    problem = _probe()
    if problem is not None:
        raise ViewUnavailableError(f"local jobs need a private view of this installation and this machine cannot make one ({problem}): {OTHER_WAYS}")


def reaches(user: JobUser, path: Path | str, want: int = R) -> bool:
    """Whether ``user`` has ``want`` on ``path`` as its children see it: by the modes of every
    directory above it, or, past a veil, by its own modes alone (its view shows the way)."""
    real = os.path.realpath(path)
    if veil_of(user, real) is None:
        return user.can_reach(real, want)
    return user.allows(real, want)


def check(user: JobUser, view: View, reads: Iterable[Path | str]) -> None:
    """Raise :class:`JobUserError` (one line) unless ``user``'s children can be started with
    ``view`` and read ``reads``: the view is possible here, and each place's own modes let them in
    (a view shows a place; it never opens one)."""
    if view.needed:
        available()
    refused = [str(place) for place in reads if not reaches(user, place, R | X if os.path.isdir(place) else R)]
    if refused:
        raise JobUserError(
            f"the job user {user.name} may not read {', '.join(refused)} (their own modes refuse it): install the "
            "service where that user may read it, or set ASYNC_QUERY_LOCAL_JOB_PYTHON to a Python it may run"
        )


__all__ = ["Place", "View", "ViewUnavailableError", "available", "check", "plan_view", "reaches", "spawn", "veil_of"]
