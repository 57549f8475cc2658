"""The errors of the PPL front end.

A syntax error is the caller's fault and known at POST time (a 400, as the plugin knows the
grammar); a semantic error (an unknown field, a wrong argument count) is found where the data's
schema is known, in the job, and ends the statement ``FAILED``.
"""

from __future__ import annotations

from query_core.errors import AsyncQueryError, QuerySyntaxError


class PplSyntaxError(QuerySyntaxError):
    """PPL text the grammar does not accept."""


class PplSemanticError(AsyncQueryError):
    """A well-formed PPL query that cannot be translated against the data (unknown field,
    unknown function, wrong arguments). The job reports it as ``Fail to analyze query``."""

    http_status = 400
    error_type = "SemanticCheckException"
