"""Statement validation by parsing: the reference's grammar elements and deny lists.

Each datasource has a :class:`ValidationPolicy` (a deny list of :class:`GrammarElement`, how
functions are typed, where data and checkpoints may live). The plugin checks every POST against
it before anything is written (:func:`validate_query`); the job checks every statement again on
Spark's own parse before it runs it. See docs/validation.md.
"""

from __future__ import annotations

from query_core.flint import Statement
from query_core.ppl import parse_ppl
from query_core.validation.checks import Checks
from query_core.validation.elements import FunctionTable, GrammarElement, element_named
from query_core.validation.flint import check_flint
from query_core.validation.policy import (
    ALLOW_ALL,
    ALLOW_PROPERTY,
    LOCAL_DENY_LIST,
    PROFILE_PROPERTY,
    S3GLUE_DENY_LIST,
    SECURITY_LAKE_DENY_LIST,
    PolicyError,
    Profile,
    ValidationPolicy,
    check_properties,
    is_under,
    policy_for,
)
from query_core.validation.ppl import check_ppl
from query_core.validation.refusal import QueryRefusedError
from query_core.validation.sql import check_sql

__all__ = [
    "ALLOW_ALL",
    "ALLOW_PROPERTY",
    "LOCAL_DENY_LIST",
    "PROFILE_PROPERTY",
    "S3GLUE_DENY_LIST",
    "SECURITY_LAKE_DENY_LIST",
    "Checks",
    "FunctionTable",
    "GrammarElement",
    "PolicyError",
    "Profile",
    "QueryRefusedError",
    "ValidationPolicy",
    "check_flint",
    "check_ppl",
    "check_properties",
    "check_sql",
    "element_named",
    "is_under",
    "policy_for",
    "validate_query",
]


def validate_query(policy: ValidationPolicy, lang: str, query: str, statement: Statement | None = None) -> None:
    """Refuse (:class:`QueryRefusedError`, a 400) a query holding an element ``policy`` denies.

    ``statement`` is the query's Flint statement when it is one. PPL that does not parse raises
    the PPL parser's syntax error."""
    if not policy.denied:
        return
    checks = Checks(policy)
    if lang.lower() == "ppl":
        check_ppl(parse_ppl(query), checks)
    elif statement is not None:
        check_flint(statement, checks, lambda sql: check_sql(sql, checks), lambda e: check_sql(f"SELECT {e}", checks))
    else:
        check_sql(query, checks)
