"""From settings to the security of a running service, and the checks ``serve`` makes first."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field

import httpx

from async_query.security import views
from async_query.security.audit import AuditLog
from async_query.security.authn import (
    AUTHINFO,
    Authenticator,
    BasicAuthentication,
    ClusterAuthentication,
    CredentialCache,
    NoAuthentication,
)
from async_query.security.job_user import JobUser, JobUserError, installation_places, job_python
from async_query.security.throttle import FailedLogins
from async_query.security.users import UserDirectory, UsersFileError, read_users
from async_query.settings import Settings
from query_core.hosts import is_loopback_bind

log = logging.getLogger(__name__)

#: The realm of the ``WWW-Authenticate`` challenge.
REALM = "async-query"
CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'
ADD_USER_HINT = "async-query user add NAME --role all_access"


@dataclass
class Security:
    """What the REST layer needs to authenticate and audit every request."""

    authenticator: Authenticator
    audit: AuditLog
    #: ``none``: only requests whose Host is a loopback name are served (DNS rebinding).
    loopback_only: bool

    @property
    def mode(self) -> str:
        return self.authenticator.mode

    async def aclose(self) -> None:
        await self.authenticator.aclose()
        self.audit.close()


def cluster_tls(settings: Settings) -> bool | ssl.SSLContext:
    """TLS verification of calls to the index cluster, as the service's own connection does it."""
    if not settings.opensearch_verify_certs:
        return False
    if settings.opensearch_ca_certs:
        return ssl.create_default_context(cafile=settings.opensearch_ca_certs)
    return True


def build_security(settings: Settings, insecure_no_auth: bool = False) -> Security:
    """The authenticator of ``settings.auth`` and the audit log under the data directory.

    ``insecure_no_auth`` (``serve --insecure-no-auth``) also lifts the Host check of ``none``:
    whoever reaches the port is let in anyway."""
    cache = CredentialCache(settings.auth_cache_s, settings.auth_cache_entries)
    failed_logins = FailedLogins(settings.auth_failures_allowed, settings.auth_failures_window_s, settings.auth_block_s)
    authenticator: Authenticator
    if settings.auth == "basic":
        authenticator = BasicAuthentication(
            UserDirectory(settings.users_path, recheck_s=settings.users_recheck_s),
            cache,
            settings.admin_roles,
            failed_logins,
        )
    elif settings.auth == "cluster":
        if not settings.opensearch_url:
            raise ValueError("ASYNC_QUERY_AUTH=cluster needs OPENSEARCH_URL")
        authenticator = ClusterAuthentication(
            settings.opensearch_url,
            cache,
            settings.admin_roles,
            verify=cluster_tls(settings),
            timeout_s=settings.auth_cluster_timeout_s,
            failed_logins=failed_logins,
        )
    else:
        authenticator = NoAuthentication()
    audit = AuditLog(settings.data_dir / "audit", settings.audit_max_bytes, settings.audit_backups)
    return Security(authenticator, audit, loopback_only=settings.auth == "none" and not insecure_no_auth)


@dataclass
class ServeChecks:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def serve_checks(
    settings: Settings, host: str, insecure_no_auth: bool = False, tls: bool = False, tls_key: str = ""
) -> ServeChecks:
    """What ``serve`` must refuse (``errors``) or say out loud (``warnings``) before it starts."""
    checks = ServeChecks()
    job_user = _check_job_user(settings, checks)
    local = is_loopback_bind(host)
    if settings.auth == "none":
        if not local and not insecure_no_auth:
            checks.errors.append(
                f"refusing to listen on {host} without authentication: anyone who reaches the port could run "
                "any Spark SQL as this user. Set ASYNC_QUERY_AUTH=basic (users in ASYNC_QUERY_USERS_FILE, added "
                f"with `{ADD_USER_HINT}`) or ASYNC_QUERY_AUTH=cluster (the index cluster's security plugin "
                "checks the callers), or pass --insecure-no-auth to accept the risk."
            )
        elif not local:
            checks.warnings.append(
                f"WARNING: --insecure-no-auth: listening on {host} WITHOUT AUTHENTICATION. Anyone who reaches "
                "this port can run any Spark SQL as this user, read every query's results and change datasources."
            )
    elif insecure_no_auth:
        checks.warnings.append(f"note: --insecure-no-auth has no effect with ASYNC_QUERY_AUTH={settings.auth}")
    if settings.auth == "basic":
        _check_users_file(settings, checks, job_user)
    if job_user is not None and tls_key and job_user.switches and job_user.can_reach(tls_key):
        checks.errors.append(f"the TLS key {tls_key} can be read by the job user {job_user.name}: chmod 600 {tls_key}")
    if settings.auth == "cluster" and not settings.opensearch_url:
        checks.errors.append(
            "ASYNC_QUERY_AUTH=cluster needs OPENSEARCH_URL: the callers are checked by that cluster's security "
            "plugin (the embedded index server has none)"
        )
    if settings.auth != "none" and not local and not tls:
        checks.warnings.append(
            f"WARNING: listening on {host} over plain HTTP: passwords and tokens cross the network in clear. "
            "Pass --tls-cert and --tls-key, or put a TLS proxy in front."
        )
    if settings.auth != "none" and not settings.admin_roles:
        checks.warnings.append("note: ASYNC_QUERY_ADMIN_ROLES is empty: nobody can change datasources")
    return checks


def _check_job_user(settings: Settings, checks: ServeChecks) -> JobUser | None:
    """Who local jobs will run as (docs/security.md, "The second wall"): refused as root, or when
    that user cannot run them; said out loud when jobs run as the service's own user."""
    try:
        user = JobUser.resolve(settings.local_job_user, settings.local_job_allow_root)
        software = installation_places(job_python(settings.local_job_python))
        views.check(user, views.plan_view(user, software, [settings.data_dir.resolve() / "tmp"]), software)
    except JobUserError as exc:
        checks.errors.append(exc.message)
        return None
    if user.uid == 0:
        checks.warnings.append(
            "WARNING: ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT: local jobs run as root: a statement that gets past "
            "validation can read and change everything on this machine"
        )
    elif not user.switches:
        checks.warnings.append(
            f"note: local jobs run as the service's own user ({user.name}), so they could read what it reads "
            "(the users file, the sealing key, the index); run the service as root to run them as "
            "ASYNC_QUERY_LOCAL_JOB_USER (default: async-query-jobs)"
        )
    return user


def _check_users_file(settings: Settings, checks: ServeChecks, job_user: JobUser | None = None) -> None:
    path = settings.users_path
    try:
        users = read_users(path)
    except UsersFileError as exc:
        checks.errors.append(
            f"ASYNC_QUERY_AUTH=basic needs a readable users file: {exc}. Add a user with `{ADD_USER_HINT}` "
            "(the file is ASYNC_QUERY_USERS_FILE, default <data dir>/users.json)."
        )
        return
    if not users:
        checks.errors.append(
            f"ASYNC_QUERY_AUTH=basic: the users file {path} has no users; add one with `{ADD_USER_HINT}`"
        )
    elif job_user is not None and job_user.switches and job_user.can_reach(path):
        checks.errors.append(
            f"the users file {path} can be read by the job user {job_user.name} (every password hash): chmod 600 {path}"
        )
    elif path.stat().st_mode & 0o077:
        checks.warnings.append(f"WARNING: the users file {path} can be read by other users: chmod 600 {path}")


def probe_cluster(settings: Settings) -> str | None:
    """For ``cluster``: ask ``authinfo`` without credentials. A security plugin refuses (401) or
    names its anonymous user (200); a 404 or 400 means there is none. A cluster that refuses
    strangers without a security plugin (one that wants the service's own credential, as this
    service's embedded index does) is asked again with that credential: a security plugin names
    the service's user, anything else answers 404 or 400. Returns the problem, if any."""
    try:
        with httpx.Client(
            base_url=settings.opensearch_url,
            verify=cluster_tls(settings),
            timeout=settings.auth_cluster_timeout_s,
            trust_env=False,
        ) as client:
            reply = client.get(AUTHINFO)
            if reply.status_code == 401 and settings.opensearch_username:
                reply = client.get(AUTHINFO, auth=(settings.opensearch_username, settings.opensearch_password))
    except httpx.HTTPError as exc:
        log.warning("cannot reach %s to check its security plugin: %s", settings.opensearch_url, type(exc).__name__)
        return None
    if reply.status_code in (400, 404):
        return (
            f"ASYNC_QUERY_AUTH=cluster: the cluster at OPENSEARCH_URL answered {reply.status_code} to {AUTHINFO}: "
            "it has no security plugin to check callers with. Use ASYNC_QUERY_AUTH=basic instead."
        )
    return None
