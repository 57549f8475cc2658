"""Enter a private view, become the job user, then run the child (docs/security.md, "A private view").

Run as root by :func:`async_query.security.views.spawn`, as a script by its path with ``python -I -S``
(standard library only: it must start in milliseconds and import nothing of the installation it is
about to show), with the view's plan as its first argument (JSON: no secret is in it) and the
child's command after ``--``. In a mount namespace of its own it

1. opens every place to show, while they are still reachable;
2. covers each *veil* (a directory the job user cannot pass through) with an empty ``tmpfs`` of
   root's, and makes there the directories down to each place (passable, not listable: 0711);
3. mounts each place again at its own path (read-only unless it is one the child writes);
4. leaves root for good (no supplementary group, the job user's group and user, a umask of 077),
   asks to be stopped with its parent where told, enters its working directory, and runs the
   child in its own stead (same pid: the launcher's signals and process group stay right).

What goes wrong is one line on standard error and the exit code 125, before anything runs.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import warnings  # noqa: F401  (os.execvp imports it, once this interpreter's library may be out of reach)

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
PR_SET_PDEATHSIG = 1
#: The mode of a veil and of the directories made on it: passed through, never listed.
PASSABLE = 0o711
#: The exit code of a view that could not be entered (the child never ran).
FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored, and so kept across exec (a JVM leaves an ignored shutdown signal
    ignored): a terminal's Ctrl-C, or a stop sent to the service's whole process group, is the
    service's to handle, and it stops such a child itself once nothing needs it any more."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")


def enter(plan: dict[str, object]) -> None:
    """Set up the view of ``plan`` in a new mount namespace (this process's own)."""
    veils = [str(v) for v in plan.get("veils", [])]  # type: ignore[attr-defined]
    binds = [(str(p), bool(w)) for p, w in plan.get("binds", [])]  # type: ignore[attr-defined]
    os.umask(0)  # the way down to each place is passable (never listable) whatever the service's umask
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the machine's mounts
    sources = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path, _ in binds}
    for veil in veils:
        _mount("tmpfs", veil, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={PASSABLE:o},size=1m,nr_inodes=4096")
    for path, writable in sorted(binds, key=lambda bind: bind[0].count("/")):
        _mount_point(path, os.path.isdir(f"/proc/self/fd/{sources[path]}"))
        _mount(f"/proc/self/fd/{sources[path]}", path, None, MS_BIND)
        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY)
        _mount(None, path, None, flags)
    for fd in sources.values():
        os.close(fd)


def _mount_point(path: str, directory: bool) -> None:
    """The directory (or empty file) ``path`` is mounted on, made on its veil where it is not
    there, with the directories down to it: passable, not listable, like the data directory."""
    if os.path.lexists(path):
        return
    _mount_point(os.path.dirname(path), True)
    if directory:
        os.mkdir(path, PASSABLE)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))


def become(plan: dict[str, object]) -> None:
    """Leave root for the job user for good, then enter the child's working directory."""
    uid, gid = int(plan["uid"]), int(plan["gid"])  # type: ignore[call-overload]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    os.umask(int(plan.get("umask", 0o077)))  # type: ignore[call-overload]
    death = int(plan.get("pdeathsig", 0))  # type: ignore[call-overload]
    if death:  # after the switch of users, which clears it
        _check(_libc.prctl(PR_SET_PDEATHSIG, death), "prctl")
    if plan.get("ignore_stop_signals"):
        ignore_stop_signals()
    os.chdir(str(plan.get("cwd") or "/"))


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: view_entry.py PLAN -- COMMAND...\n")
        sys.exit(FAILED)
    try:
        plan = json.loads(argv[1])
        enter(plan)
        become(plan)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"cannot enter the job's private view: {exc}\n")
        sys.exit(FAILED)
    command = argv[3:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]}: {exc}\n")
        sys.exit(FAILED)


if __name__ == "__main__":
    main(sys.argv)
