"""Whose a scheduled run is: the user whose statement turned the schedule on, never more.

A schedule records its owner's name and the roles they held then (``ScheduleDoc.owner``,
``owner_roles``). Each run is submitted as that user, through the same authorization as their own
POST would be (the datasource's ``allowedRoles``, their refresh share): with ``basic``
authentication their *current* roles are read from the users file (a user removed, or whose roles
changed, cannot run more than they now may); ``cluster`` authentication can only ask the cluster
about a caller's credentials, so the roles recorded when the schedule was turned on stand; under
``none`` every caller is the anonymous admin, and so is every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from async_query.security.errors import ForbiddenError
from async_query.security.principal import ANONYMOUS, Principal
from async_query.security.users import UsersFileError, read_users
from async_query.settings import Settings
from query_core.models import ScheduleDoc


class Owners:
    """The principal of a schedule's runs (:meth:`principal`), and what a schedule records of
    the caller who turns it on (:func:`owner_of`)."""

    def __init__(self, auth: str, users_path: Path, admin_roles: Sequence[str]) -> None:
        self.auth = auth
        self.users_path = users_path
        self.admin_roles = tuple(admin_roles)

    @classmethod
    def from_settings(cls, settings: Settings) -> Owners:
        return cls(settings.auth, settings.users_path, settings.admin_roles)

    def principal(self, schedule: ScheduleDoc) -> Principal:
        """The caller a run of ``schedule`` is submitted as. Raises :class:`ForbiddenError` when
        its owner cannot be vouched for any more (removed, or the schedule was turned on by the
        anonymous caller of ``none`` and authentication has been turned on since)."""
        if self.auth == "none":
            return ANONYMOUS
        if not schedule.owner:
            raise ForbiddenError(
                f"the schedule of {schedule.index_name} was turned on without authentication: "
                "ALTER the index to auto refresh again as a user to own its runs"
            )
        roles: Sequence[str] = schedule.owner_roles
        if self.auth == "basic":
            try:
                user = read_users(self.users_path).get(schedule.owner)
            except UsersFileError as exc:
                raise ForbiddenError(f"the owner of {schedule.index_name}'s runs cannot be checked: {exc}") from None
            if user is None:
                raise ForbiddenError(f"{schedule.owner}, the owner of {schedule.index_name}'s runs, is no longer a user")
            roles = user.roles
        return Principal.of(schedule.owner, roles, self.admin_roles)


def owner_of(principal: Principal) -> tuple[str, tuple[str, ...]]:
    """What a schedule records of the caller who turns it on: their name ("" for the anonymous
    caller of ``none``) and their roles."""
    if principal.anonymous:
        return "", ()
    return principal.name, tuple(sorted(principal.roles))
