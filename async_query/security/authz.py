"""Authorization checks: pure functions of the caller and what it asks for.

Each returns None when the caller may go on and raises :class:`ForbiddenError` (a 403 in the REST
API's error shape) when not. Admins (a role in ``ASYNC_QUERY_ADMIN_ROLES``, ``all_access`` by
default; the anonymous caller of ``none``) pass every check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from async_query.security.errors import ForbiddenError
from async_query.security.principal import Principal


class HasAllowedRoles(Protocol):
    """A datasource as far as access goes (``async_query.datasources.Datasource`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def allowed_roles(self) -> Sequence[str]: ...


def require_admin(principal: Principal, action: str) -> None:
    """Only admins may ``action`` (for instance "change datasources")."""
    if not principal.is_admin:
        raise ForbiddenError(
            f"User {principal.name} is not authorized to {action}. User should be mapped to an admin role for access."
        )


def check_datasource_access(principal: Principal, datasource: HasAllowedRoles) -> None:
    """May the caller query ``datasource``? Yes for admins and for holders of any of its
    ``allowedRoles``; an empty list admits admins only. The message is the reference's
    (``DataSourceUserAuthorizationHelperImpl``), word for word."""
    if principal.is_admin or not principal.roles.isdisjoint(datasource.allowed_roles):
        return
    raise ForbiddenError(
        f"User is not authorized to access datasource {datasource.name}. "
        f"User should be mapped to any of the roles in {_java_list(datasource.allowed_roles)} for access."
    )


def check_owner(principal: Principal, submitted_by: str | None, query_id: str | None = None) -> None:
    """May the caller read or cancel a query submitted by ``submitted_by``? Its submitter and admins
    may; a query with no recorded submitter (written before authentication, or by the reference
    plugin) is for admins only. The message does not name the submitter."""
    if principal.is_admin or (submitted_by and submitted_by == principal.name):
        return
    what = f"async query {query_id}" if query_id else "this async query"
    raise ForbiddenError(f"User {principal.name} is not authorized to access {what}: it was submitted by another user.")


def may_use_session(principal: Principal, started_by: str | None) -> bool:
    """May the caller submit into a session started by ``started_by``? Only its starter may,
    admins included: the statements of a session share its Spark session (temporary views and
    functions, settings), so one user's statements could read or change another's. A session
    with no recorded starter takes admins' statements only. (Not a refusal: the caller gets a
    session of its own.)"""
    if not started_by:
        return principal.is_admin
    return started_by == principal.name


def _java_list(items: Sequence[str]) -> str:
    """A list as Java's ``List.toString`` writes it (``[a, b]``), as in the reference's message."""
    return "[" + ", ".join(items) + "]"
