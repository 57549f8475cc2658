"""The index user: who the embedded OpenSearch node runs as (docs/security.md, "The embedded index").

The node holds every user's queries and results. Where the service runs as root it must not run
as root (OpenSearch refuses to, and a node is a large attack surface), nor as the job user: a job
that escaped validation would then own the node's files and could read its memory. So it runs as
a user of its own, ``local_index_user`` (default ``async-query-index``), made at first start as a
system user (no home, no shell, no password) where the machine has none of that name. A service
that does not run as root runs the node as itself, as it runs its jobs.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess

from async_query.security.job_user import JobUser, JobUserError

log = logging.getLogger(__name__)

DEFAULT_INDEX_USER = "async-query-index"
#: How a system user is made, by the tools machines have (Debian and most: ``useradd``; BusyBox:
#: ``adduser``): no home, no login shell, no password.
MAKERS = (
    ("useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group"]),
    ("adduser", ["-S", "-D", "-H", "-h", "/nonexistent", "-s", "/sbin/nologin"]),
)


def index_user(configured: str, job_user: JobUser) -> JobUser:
    """The user the embedded node runs as (see the module's documentation). Raises
    :class:`JobUserError` for root, the job user, or a name that names nobody and cannot be made."""
    if os.geteuid() != 0:
        return JobUser.resolve(str(os.geteuid()))
    name = configured.strip() or DEFAULT_INDEX_USER
    entry = _lookup(name)
    if entry is None and not configured.strip():
        _make(name)
        entry = _lookup(name)
    if entry is None:
        raise JobUserError(f"local_index_user {name!r} is not a user of this machine")
    user = JobUser(entry.pw_name, entry.pw_uid, entry.pw_gid, frozenset({entry.pw_gid}))
    if user.uid == 0:
        raise JobUserError("refusing to run the embedded index as root: set ASYNC_QUERY_LOCAL_INDEX_USER to another user")
    if user.uid == job_user.uid:
        raise JobUserError(
            f"the embedded index cannot run as the job user {job_user.name}: jobs would own its files; set "
            "ASYNC_QUERY_LOCAL_INDEX_USER to another user (default: async-query-index)"
        )
    return user


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        return None


def _make(name: str) -> None:
    for tool, options in MAKERS:
        found = shutil.which(tool)
        if found is None:
            continue
        done = subprocess.run([found, *options, name], capture_output=True, text=True, check=False)
        if done.returncode == 0 or _lookup(name) is not None:
            log.info("made the system user %s for the embedded index", name)
            return
        raise JobUserError(
            f"cannot make the system user {name} for the embedded index ({tool}: {done.stderr.strip()[:200]}): "
            "set ASYNC_QUERY_LOCAL_INDEX_USER to an existing unprivileged user, or OPENSEARCH_URL to a cluster"
        )
    raise JobUserError(
        f"cannot make the system user {name} for the embedded index (no useradd or adduser here): set "
        "ASYNC_QUERY_LOCAL_INDEX_USER to an existing unprivileged user, or OPENSEARCH_URL to a cluster"
    )
