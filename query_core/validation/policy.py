"""What a datasource's statements may contain: its deny list, and where data may live.

The reference's profiles are deny lists of grammar elements. The ``LOCAL`` profile denies this
product's own elements too, each of which refuses what its allow list does not name
(:mod:`query_core.validation.allowlists`): providers, options, properties, ``SET`` keys, Flint
options, and locations outside their root (:mod:`query_core.validation.paths`).

A :class:`ValidationPolicy` is built once per datasource (from its kind and its ``validation.*``
properties) by the plugin, which checks each POST against it and sends it to the job as Spark conf
keys, so the job checks each statement against the very same policy. See docs/validation.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from query_core.validation.allowlists import is_settable
from query_core.validation.elements import FunctionTable, element_named
from query_core.validation.elements import GrammarElement as E
from query_core.validation.paths import Resolver, is_below

#: The reference's deny list of S3GLUE (AWS Glue) datasources, exactly.
S3GLUE_DENY_LIST: frozenset[E] = frozenset(
    {
        E.ALTER_VIEW, E.CREATE_FUNCTION, E.CREATE_VIEW, E.DROP_FUNCTION, E.DROP_VIEW, E.INSERT, E.LOAD,
        E.CLUSTER_BY, E.DISTRIBUTE_BY, E.HINTS, E.INLINE_TABLE, E.FILE, E.CROSS_JOIN, E.LEFT_SEMI_JOIN,
        E.RIGHT_OUTER_JOIN, E.FULL_OUTER_JOIN, E.LEFT_ANTI_JOIN, E.TABLESAMPLE, E.TABLE_VALUED_FUNCTION,
        E.TRANSFORM, E.MANAGE_RESOURCE, E.DESCRIBE_FUNCTION, E.REFRESH_RESOURCE, E.REFRESH_FUNCTION, E.RESET,
        E.SET, E.SHOW_FUNCTIONS, E.SHOW_VIEWS, E.BITWISE_FUNCTIONS, E.MISC_FUNCTIONS, E.UDF,
    }
)  # fmt: skip

#: The reference's deny list of SECURITY_LAKE datasources, exactly.
SECURITY_LAKE_DENY_LIST: frozenset[E] = frozenset(
    {
        E.ALTER_NAMESPACE, E.ALTER_VIEW, E.CREATE_NAMESPACE, E.CREATE_FUNCTION, E.CREATE_VIEW, E.DROP_FUNCTION,
        E.DROP_NAMESPACE, E.DROP_VIEW, E.REPAIR_TABLE, E.TRUNCATE_TABLE, E.INSERT, E.LOAD, E.CLUSTER_BY,
        E.DISTRIBUTE_BY, E.HINTS, E.INLINE_TABLE, E.FILE, E.CROSS_JOIN, E.LEFT_SEMI_JOIN, E.RIGHT_OUTER_JOIN,
        E.FULL_OUTER_JOIN, E.LEFT_ANTI_JOIN, E.TABLESAMPLE, E.TABLE_VALUED_FUNCTION, E.TRANSFORM,
        E.MANAGE_RESOURCE, E.ANALYZE_TABLE, E.CACHE_TABLE, E.CLEAR_CACHE, E.DESCRIBE_NAMESPACE,
        E.DESCRIBE_FUNCTION, E.DESCRIBE_QUERY, E.DESCRIBE_TABLE, E.REFRESH_RESOURCE, E.REFRESH_TABLE,
        E.REFRESH_FUNCTION, E.RESET, E.SET, E.SHOW_COLUMNS, E.SHOW_CREATE_TABLE, E.SHOW_NAMESPACES,
        E.SHOW_FUNCTIONS, E.SHOW_PARTITIONS, E.SHOW_TABLE_EXTENDED, E.SHOW_TABLES, E.SHOW_TBLPROPERTIES,
        E.SHOW_VIEWS, E.UNCACHE_TABLE, E.CSV_FUNCTIONS, E.MISC_FUNCTIONS, E.UDF,
    }
)  # fmt: skip

#: This product's safe default for its local datasources: catalog DDL, INSERT and Flint statements
#: stay allowed; what runs code, reads or writes arbitrary paths, or moves data elsewhere does not.
LOCAL_DENY_LIST: frozenset[E] = frozenset(
    {
        E.TRANSFORM, E.MISC_FUNCTIONS, E.UDF, E.MANAGE_RESOURCE, E.CREATE_FUNCTION, E.FILE, E.LOAD,
        E.LOCATION, E.CHECKPOINT_LOCATION, E.INSERT_OVERWRITE_DIRECTORY, E.PROTECTED_CONFIG, E.DYNAMIC_SQL,
        E.DATA_SOURCE, E.DATA_SOURCE_OPTION, E.TABLE_PROPERTY, E.FLINT_OPTION,
    }
)  # fmt: skip


class Profile(Enum):
    """The deny list a datasource starts from (the reference's datasource types, and ``LOCAL``)."""

    S3GLUE = "S3GLUE"
    SECURITY_LAKE = "SECURITY_LAKE"
    LOCAL = "LOCAL"

    @property
    def deny_list(self) -> frozenset[E]:
        return _DENY_LISTS[self]

    @property
    def function_table(self) -> FunctionTable:
        """The reference's profiles type functions by the reference's table, exactly."""
        return FunctionTable.SPARK if self is Profile.LOCAL else FunctionTable.REFERENCE


_DENY_LISTS = {
    Profile.S3GLUE: S3GLUE_DENY_LIST,
    Profile.SECURITY_LAKE: SECURITY_LAKE_DENY_LIST,
    Profile.LOCAL: LOCAL_DENY_LIST,
}

#: Datasource properties: the profile (default by connector) and the elements an admin allows.
PROFILE_PROPERTY = "validation.profile"
ALLOW_PROPERTY = "validation.allow"


# -- configuration keys and locations -----------------------------------------------------------


def is_protected_key(key: str) -> bool:
    """Whether SET/RESET (or a read) of ``key`` is refused when PROTECTED_CONFIG is denied: every
    key but the settable ones (:data:`query_core.validation.allowlists.SETTABLE_KEYS`)."""
    return not is_settable(key)


def is_under(location: str, root: str, resolve: Resolver | None = None) -> bool:
    """Whether ``location`` lies strictly below ``root`` as Hadoop resolves both
    (:func:`query_core.validation.paths.is_below`)."""
    return is_below(location, root, resolve)


# -- the policy ---------------------------------------------------------------------------------


class PolicyError(ValueError):
    """A ``validation.*`` datasource property that cannot be read."""


@dataclass(frozen=True)
class ValidationPolicy:
    """The elements refused, how functions are typed, and where data and checkpoints may live."""

    denied: frozenset[E] = field(default_factory=frozenset)
    function_table: FunctionTable = FunctionTable.SPARK
    #: Tables and databases may be located below this root (LOCATION), when LOCATION is denied.
    warehouse_root: str = ""
    #: Flint checkpoints may be located below this root, when CHECKPOINT_LOCATION is denied.
    checkpoint_root: str = ""

    def denies(self, element: E) -> bool:
        return element in self.denied

    def allowing(self, elements: Iterable[E]) -> ValidationPolicy:
        """This policy with ``elements`` no longer denied."""
        return replace(self, denied=self.denied - frozenset(elements))

    @classmethod
    def of_profile(cls, profile: Profile, warehouse_root: str = "", checkpoint_root: str = "") -> ValidationPolicy:
        return cls(profile.deny_list, profile.function_table, warehouse_root, checkpoint_root)


#: The policy that refuses nothing (a job started without validation settings).
ALLOW_ALL = ValidationPolicy()


def parse_profile(text: str) -> Profile:
    try:
        return Profile[text.strip().upper().replace("-", "_")]
    except KeyError:
        names = ", ".join(p.name for p in Profile)
        raise PolicyError(f"{PROFILE_PROPERTY} {text.strip()!r} is not one of {names}") from None


def parse_allowed(text: str) -> frozenset[E]:
    """The elements of a ``validation.allow`` value: element names separated by commas."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return frozenset(element_named(name) for name in names)
    except ValueError as exc:
        raise PolicyError(f"{ALLOW_PROPERTY}: {exc}") from None


def check_properties(properties: Mapping[str, str]) -> None:
    """Refuse ``validation.*`` properties that cannot be read (:class:`PolicyError`)."""
    known = {PROFILE_PROPERTY, ALLOW_PROPERTY}
    for key in properties:
        if key.startswith("validation.") and key not in known:
            raise PolicyError(f"unknown property {key!r}: use {PROFILE_PROPERTY} or {ALLOW_PROPERTY}")
    if PROFILE_PROPERTY in properties:
        parse_profile(properties[PROFILE_PROPERTY])
    if ALLOW_PROPERTY in properties:
        parse_allowed(properties[ALLOW_PROPERTY])


def policy_for(
    properties: Mapping[str, str], default_profile: Profile, warehouse_root: str = "", checkpoint_root: str = ""
) -> ValidationPolicy:
    """A datasource's policy: its profile's deny list, less the elements it allows."""
    check_properties(properties)
    profile = parse_profile(properties[PROFILE_PROPERTY]) if PROFILE_PROPERTY in properties else default_profile
    policy = ValidationPolicy.of_profile(profile, warehouse_root, checkpoint_root)
    return policy.allowing(parse_allowed(properties.get(ALLOW_PROPERTY, "")))
