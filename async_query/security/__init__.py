"""Who may call the service and what they may do: authentication (``none``, ``basic``,
``cluster``), authorization checks, the audit log, and private files. See docs/security.md."""

from async_query.security.authz import check_datasource_access, check_owner, require_admin
from async_query.security.errors import AuthUnavailableError, ForbiddenError, UnauthorizedError
from async_query.security.middleware import SecurityMiddleware, audit_note, current_principal
from async_query.security.principal import ANONYMOUS, Principal
from async_query.security.setup import Security, build_security

__all__ = [
    "ANONYMOUS",
    "AuthUnavailableError",
    "ForbiddenError",
    "Principal",
    "Security",
    "SecurityMiddleware",
    "UnauthorizedError",
    "audit_note",
    "build_security",
    "check_datasource_access",
    "check_owner",
    "current_principal",
    "require_admin",
]
