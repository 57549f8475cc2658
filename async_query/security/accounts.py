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

from async_query.security.job_user import JobUser, JobUserError, lookup_user, make_system_user

log = logging.getLogger(__name__)

DEFAULT_INDEX_USER = "async-query-index"
def index_user(configured: str, job_user: JobUser) -> JobUser:
    """The user the embedded node runs as (see the module's documentation). Raises
    :class:`JobUserError` for root, the job user, or a name that names nobody and cannot be made."""
    if os.geteuid() != 0:
        return JobUser.resolve(str(os.geteuid()))
    name = configured.strip() or DEFAULT_INDEX_USER
    entry = lookup_user(name)
    if entry is None and not configured.strip():
        make_system_user(name, "the embedded index", "ASYNC_QUERY_LOCAL_INDEX_USER (or OPENSEARCH_URL to a cluster)")
        entry = lookup_user(name)
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
