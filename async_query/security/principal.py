"""Who is calling: the principal every authenticated request carries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: The name of the caller when authentication is ``none`` (reserved: no user may take it).
ANONYMOUS_NAME = "anonymous"
DEFAULT_ADMIN_ROLES = ("all_access",)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``roles`` are every role the caller holds: in ``basic`` those of its users-file entry; in
    ``cluster`` the security roles the plugin mapped it to (``roles`` of ``authinfo``) together
    with its backend roles (``backend_roles``). ``is_admin`` is fixed when the principal is made,
    from the deployment's admin role list.
    """

    name: str
    roles: frozenset[str]
    is_admin: bool
    anonymous: bool = False

    @classmethod
    def of(cls, name: str, roles: Iterable[str], admin_roles: Iterable[str] = DEFAULT_ADMIN_ROLES) -> Principal:
        held = frozenset(roles)
        return cls(name, held, is_admin=not held.isdisjoint(admin_roles))


#: The caller under ``none`` (loopback only): whoever can reach the port is the machine's user,
#: so it is an admin.
ANONYMOUS = Principal(ANONYMOUS_NAME, frozenset(), is_admin=True, anonymous=True)
