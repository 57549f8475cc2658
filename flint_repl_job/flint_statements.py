"""Flint's extension statements in a job: told apart from plain Spark SQL by the one Flint parser.

A Flint statement is run by the job's :class:`~flint_repl_job.indexes.engine.FlintEngine`; plain
Spark SQL passes through untouched; a malformed Flint statement reports the parser's syntax error.
"""

from __future__ import annotations

from query_core.flint import FlintSyntaxError, Statement, parse


class FlintStatementError(Exception):
    """A Flint statement this job cannot run (classified as ``Fail to run query``)."""


class FlintParseError(Exception):
    """A malformed Flint statement (classified as ``Syntax error``)."""


def flint_statement(sql: str) -> Statement | None:
    """The Flint statement ``sql`` is, or None for plain Spark SQL."""
    try:
        return parse(sql)
    except FlintSyntaxError as exc:
        raise FlintParseError(str(exc)) from None
