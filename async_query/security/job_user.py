"""The operating-system user local jobs run as: the second wall behind statement validation.

A statement that got past validation runs code inside its job. Where the service runs as root, its
jobs therefore run as an unprivileged *job user* (``local_job_user``; default ``async-query-jobs``,
made at first start as a system user where the machine has none of that name: a job's environment
holds the index's credential, and ``nobody`` is shared by other daemons, who could read it), and the
service's own data is kept from that user: the users file, the sealing key, the embedded index,
the audit log, job logs and pid files stay the service's, 0600 in 0700 directories. What a job must
write belongs to the job user: the warehouse and stream checkpoints of each local datasource, the
metastore's database (the metastore runs as the job user: it creates and drops the table
directories the jobs fill), the jobs' own temporary directories and the class archive their JVM
maps. The data directory itself is then 0711: the job user may pass through it to those places,
never list it. Starting jobs as root is refused unless ``local_job_allow_root`` says so.

A service that does not run as root cannot switch users: its jobs run as itself (and could read
what it reads); ``serve`` says so. See ``docs/security.md`` ("The second wall").

Everything here is about paths and permission bits: :meth:`JobUser.can_reach` answers whether the
job user may reach a path by the modes of the path and of every directory above it (access control
lists are not read), so that a misconfiguration is reported before a job fails on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import site
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from query_core.errors import LauncherError
from query_core.jobconf import job_package_dir

log = logging.getLogger(__name__)

#: The job user when the service runs as root and the setting names none (made at first start).
DEFAULT_JOB_USER = "async-query-jobs"
#: How a system user is made, by the tools machines have (Debian and most: ``useradd``; BusyBox:
#: ``adduser``): no home, no login shell, no password.
MAKERS: tuple[tuple[str, list[str]], ...] = (
    ("useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group"]),
    ("adduser", ["-S", "-D", "-H", "-h", "/nonexistent", "-s", "/sbin/nologin"]),
)
#: What a job creates is its own alone (Spark's local files, Hadoop's are made so by conf too).
JOB_UMASK = 0o077
#: Directories of the service that the job user passes through to its own places (search, no read).
PASS_THROUGH = 0o711
JOB_DIR = 0o700
#: The project's root (where ``flint_repl_job`` and ``query_core`` are).
PROJECT_ROOT = job_package_dir().parent
#: The packages a job imports from this installation (the plugin's own is not among them).
JOB_PACKAGES = ("flint_repl_job", "query_core", "index_mappings")

R, W, X = 4, 2, 1


class JobUserError(LauncherError):
    """Local jobs cannot be started as configured (the job user, or what it must reach)."""


def lookup_user(name: str) -> pwd.struct_passwd | None:
    """The user ``name`` (a name or a uid) of this machine, or None."""
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        return None


def make_system_user(name: str, purpose: str, setting: str) -> None:
    """Make ``name`` a system user (no home, no shell, no password) for ``purpose``; raises
    :class:`JobUserError` naming ``setting`` when this machine cannot."""
    for tool, options in MAKERS:
        found = shutil.which(tool)
        if found is None:
            continue
        done = subprocess.run([found, *options, name], capture_output=True, text=True, check=False)
        if done.returncode == 0 or lookup_user(name) is not None:
            log.info("made the system user %s for %s", name, purpose)
            return
        raise JobUserError(
            f"cannot make the system user {name} for {purpose} ({tool}: {done.stderr.strip()[:200]}): "
            f"set {setting} to an existing unprivileged user"
        )
    raise JobUserError(
        f"cannot make the system user {name} for {purpose} (no useradd or adduser here): set {setting} "
        "to an existing unprivileged user"
    )


@dataclass(frozen=True)
class JobUser:
    """The user local jobs (and the metastores they share) run as."""

    name: str
    uid: int
    gid: int
    #: The groups whose permissions the job user has (its primary group only: supplementary groups
    #: are dropped when switching, so a job never gets the service's).
    groups: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def resolve(cls, configured: str = "", allow_root: bool = False) -> JobUser:
        """The job user for a service running as this process's user: ``configured`` (a name or a
        uid), else :data:`DEFAULT_JOB_USER` when the service runs as root (made if missing), else
        the service's own user. Raises :class:`JobUserError` for root without ``allow_root``, for
        another user when the service cannot switch (it is not root), and for a name that names
        nobody."""
        me = os.geteuid()
        wanted = configured.strip() or (DEFAULT_JOB_USER if me == 0 else str(me))
        entry = lookup_user(wanted)
        if entry is None and not configured.strip() and me == 0:
            make_system_user(wanted, "local jobs", "ASYNC_QUERY_LOCAL_JOB_USER")
            entry = lookup_user(wanted)
        if entry is None:
            raise JobUserError(f"local_job_user {wanted!r} is not a user of this machine")
        user = cls(entry.pw_name, entry.pw_uid, entry.pw_gid, frozenset({entry.pw_gid}))
        if user.uid == 0 and not allow_root:
            raise JobUserError(
                "refusing to run local jobs as root: a statement that got past validation would run with every "
                "privilege of this machine. Set ASYNC_QUERY_LOCAL_JOB_USER to an unprivileged user (default: async-query-jobs), "
                "or ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT=true to accept the risk."
            )
        if me != 0 and user.uid != me:
            raise JobUserError(
                f"local_job_user {user.name!r}: the service runs as uid {me}, not root, so its jobs can only run as "
                "itself; leave ASYNC_QUERY_LOCAL_JOB_USER unset, or run the service as root"
            )
        return user

    @property
    def switches(self) -> bool:
        """Whether jobs run as another user than the service (it runs as root)."""
        return self.uid != os.geteuid()

    def popen_options(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that start a process as the job user, with a umask that
        keeps what it creates to itself (and no supplementary group of the service's)."""
        options: dict[str, Any] = {"umask": JOB_UMASK}
        if self.switches:
            options.update(user=self.uid, group=self.gid, extra_groups=[])
        return options

    # -- what the job user may reach ---------------------------------------------------------

    def can_reach(self, path: Path | str, want: int = R) -> bool:
        """Whether the job user may pass through every directory down to ``path`` and has the
        ``want`` bits (``R``, ``W``, ``X``, or-ed) on it, by permission bits."""
        if self.uid == 0:
            return True
        try:
            target = Path(os.path.realpath(path))
            return all(self.passes(directory) for directory in target.parents) and self.allows(target, want)
        except OSError:
            return False

    def allows(self, path: Path | str, want: int = R) -> bool:
        """Whether ``path``'s own modes give the job user the ``want`` bits (False where it cannot be
        looked at); the directories above it are not looked at."""
        try:
            return self.uid == 0 or self._has(os.stat(path), want)
        except OSError:
            return False

    def passes(self, directory: Path | str) -> bool:
        """Whether the job user may pass through ``directory`` itself (its search bit), by its modes;
        raises OSError where it cannot be looked at."""
        return self.uid == 0 or self._has(os.stat(directory), X)

    def _has(self, st: os.stat_result, want: int) -> bool:
        if st.st_uid == self.uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid in self.groups:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        return bits & want == want

    # -- places of its own -------------------------------------------------------------------

    def own(self, path: Path) -> Path:
        """Make ``path`` a directory of the job user's, 0700 (created if missing). One that another
        user owned (made by an earlier version of the service, as root) is handed over whole: its
        contents first, the directory itself last, so a hand-over cut short is redone at the next
        start. Nothing is done when jobs do not switch users (the directory is the service's)."""
        path.mkdir(parents=True, exist_ok=True, mode=JOB_DIR)
        if not self.switches:
            return path
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise JobUserError(f"{path} must be a directory")
        if st.st_uid != self.uid or st.st_gid != self.gid:
            log.info("handing %s over to the job user %s", path, self.name)
            self._chown_tree(path)
        if stat.S_IMODE(path.lstat().st_mode) != JOB_DIR:
            path.chmod(JOB_DIR)
        return path

    def _chown_tree(self, top: Path) -> None:
        for root, dirs, files in os.walk(top, topdown=False):
            for name in [*files, *dirs]:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)
        os.chown(top, self.uid, self.gid, follow_symlinks=False)

    def pass_through(self, path: Path) -> Path:
        """Make ``path`` a directory of the service's that the job user may pass through (0711)
        when jobs switch users; 0700 otherwise."""
        path.mkdir(parents=True, exist_ok=True, mode=JOB_DIR)
        mode = PASS_THROUGH if self.switches else JOB_DIR
        if stat.S_IMODE(path.stat().st_mode) != mode and path.stat().st_uid == os.geteuid():
            path.chmod(mode)
        return path

    def remove(self, path: Path) -> None:
        """Delete a directory tree the job user may have written (symlinks inside are removed, never
        followed: ``shutil.rmtree`` works by descriptors here)."""
        shutil.rmtree(path, ignore_errors=True)


def seal_data_dir(data_dir: Path, user: JobUser, job_places: set[str]) -> None:
    """Keep the service's data from the job user: the data directory becomes 0711 (passed through
    to the job's places, named by ``job_places``, never listed), and every other entry in it that
    the service owns is made 0700 (directories: nothing below is then reachable) or 0600 (files),
    whatever an older version or another umask left. Without a switch of users, 0700 as before."""
    user.pass_through(data_dir)
    if not user.switches:
        return
    me = os.geteuid()
    for entry in data_dir.iterdir():
        if entry.name in job_places:
            continue
        try:
            st = entry.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_uid != me:
            if st.st_uid == user.uid:
                log.warning("%s belongs to the job user %s: jobs can change it", entry, user.name)
            continue
        private = JOB_DIR if stat.S_ISDIR(st.st_mode) else 0o600
        if stat.S_IMODE(st.st_mode) & 0o077:
            entry.chmod(private)


# -- what a job runs: its Python and Java ----------------------------------------------------------


@dataclass(frozen=True)
class JobPython:
    """The interpreter local jobs run, and the ``PYTHONPATH`` it needs to find this installation
    (empty when it is this interpreter, which finds it by itself)."""

    executable: str
    path: tuple[str, ...] = ()


def installation_paths() -> tuple[str, ...]:
    """Where this installation's code is: the project's root and the environment's site-packages."""
    sites = [p for p in site.getsitepackages() if Path(p).is_dir()]
    return tuple(dict.fromkeys([str(PROJECT_ROOT), *sites]))


def job_python(configured: str = "") -> JobPython:
    """The Python local jobs run: ``configured`` (``local_job_python``), given this installation's
    code by ``PYTHONPATH`` unless it is this one; else this one. Where the job user cannot reach it,
    jobs see it through a private view (:mod:`async_query.security.views`)."""
    if configured:
        same = os.path.realpath(configured) == os.path.realpath(sys.executable)
        return JobPython(configured, () if same else installation_paths())
    return JobPython(sys.executable)


def find_java() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on the ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JobUserError("Java 17 is needed (set JAVA_HOME or put java on the PATH)")
    return found


def installation_places(python: JobPython) -> list[Path]:
    """What a local job reads of this machine's software: its Python (the environment and the
    interpreter it was made from), this installation's packages, and Java's home."""
    executable = Path(os.path.realpath(python.executable))
    places = [Path(sys.prefix), Path(sys.base_prefix), executable.parent.parent]
    places += [PROJECT_ROOT / package for package in JOB_PACKAGES]
    places += [Path(p) for p in python.path]
    with contextlib.suppress(JobUserError):
        places.append(Path(os.path.realpath(find_java())).parent.parent)
    return [place for place in dict.fromkeys(places) if place.exists()]
