"""Statement validation by parsing: the reference's grammar elements and deny lists, and the
``LOCAL`` profile's allow lists.

Each datasource has a :class:`ValidationPolicy` (a deny list of :class:`GrammarElement`, how
functions are typed, where data and checkpoints may live). The plugin checks every POST against
it before anything is written (:func:`validate_query`), after the statement's size and depth
(:func:`check_limits`); the job checks every statement again on Spark's own parse before it runs
it, and that check decides. See docs/validation.md.
"""

from __future__ import annotations

from enum import Enum

from query_core.flint import Statement
from query_core.ppl import parse_ppl
from query_core.validation.checks import Checks
from query_core.validation.elements import FunctionTable, GrammarElement, element_named
from query_core.validation.flint import check_flint
from query_core.validation.limits import StatementLimitError, StatementLimits, check_limits
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
from query_core.validation.tokens import Tok

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
    "StatementLimitError",
    "StatementLimits",
    "ValidationPolicy",
    "Verdict",
    "check_flint",
    "check_limits",
    "check_ppl",
    "check_properties",
    "check_sql",
    "element_named",
    "is_under",
    "policy_for",
    "validate_query",
]


class Verdict(Enum):
    """What the plugin's check concluded of a statement it did not refuse."""

    #: Every part of it was read, and nothing it holds is denied.
    ALLOWED = "allowed"
    #: A part of it could not be read here: the job's check on Spark's own parse decides.
    LEFT_TO_JOB = "left to the job"


def validate_query(
    policy: ValidationPolicy,
    lang: str,
    query: str,
    statement: Statement | None = None,
    limits: StatementLimits | None = None,
    tokens: list[Tok] | None = None,
) -> Verdict:
    """Refuse (:class:`QueryRefusedError`, a 400) a query holding an element ``policy`` denies,
    and (:class:`StatementLimitError`, a 400) one past ``limits`` when they are given.

    ``statement`` is the query's Flint statement when it is one. PPL that does not parse raises
    the PPL parser's syntax error. A query not refused is :attr:`Verdict.ALLOWED`, or
    :attr:`Verdict.LEFT_TO_JOB` when a part of it could not be read here. ``tokens`` are the
    query's when :func:`check_limits` scanned it already."""
    if limits is not None:
        tokens = check_limits(query, lang, limits)
    if not policy.denied:
        return Verdict.ALLOWED
    checks = Checks(policy)
    try:
        if lang.lower() == "ppl":
            check_ppl(parse_ppl(query), checks)
        elif statement is not None:
            check_flint(
                statement, checks, lambda sql: check_sql(sql, checks), lambda e: check_sql(f"SELECT {e}", checks)
            )
        else:
            check_sql(query, checks, tokens if lang.lower() == "sql" else None)
    except RecursionError:
        raise StatementLimitError("The statement is nested too deeply to be read.") from None
    return Verdict.LEFT_TO_JOB if checks.undecided else Verdict.ALLOWED
