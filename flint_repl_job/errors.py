"""Error texts classified by root cause, as the reference reports them.

Texts are cut before the parsed SQL, the plans and the JVM stack trace, and anything that looks
like a credential is masked, so errors never leak secrets or whole query plans.
"""

from __future__ import annotations

import re

from flint_repl_job.catalog import unknown_catalog_message
from flint_repl_job.result_stream import ResultWriteError
from query_core.errors import AsyncQueryError
from query_core.validation import QueryRefusedError, StatementLimitError

_CUT_MARKERS = ("\n== SQL", "\n== Physical Plan", "\n== Parsed Logical Plan", "\nJVM stacktrace", "\n\tat ")
_SECRETS = [
    (re.compile(r"(?i)((?:password|secret|token|access[_.-]?key|secret[_.-]?key)\s*[=:]\s*)[^\s,;'\"]+"), r"\1****"),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), "****"),
    (re.compile(r"(?i)(s3a?://)[^:/@\s]+:[^@/\s]+@"), r"\1****@"),
]
MAX_ERROR_CHARS = 2_000


def clean(text: str) -> str:
    for marker in _CUT_MARKERS:
        text = text.split(marker, 1)[0]
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text.strip()[:MAX_ERROR_CHARS]


def write_failure(exc: BaseException) -> str:
    """The error of a statement whose result the index would not take (too large, a mapping
    conflict): the reference's words for it, and the index's reason."""
    cause = exc.message if isinstance(exc, AsyncQueryError) else str(exc)
    return f"Fail to write result, cause: {clean(cause)}"


def classify(exc: BaseException, datasource: str = "") -> str:
    """The error text reported for a statement of ``datasource``'s session that raised ``exc``."""
    name = type(exc).__name__
    if isinstance(exc, QueryRefusedError | StatementLimitError):
        return exc.message  # the words the plugin refuses the statement with at POST
    if isinstance(exc, ResultWriteError):
        return write_failure(exc)
    message = clean(_message(exc))
    if name in ("ParseException", "FlintParseError", "PplSyntaxError"):
        return f"Syntax error: {message}"
    if name in ("AnalysisException", "PplSemanticError"):
        return f"Fail to analyze query. Cause: {unknown_catalog_message(message, datasource) or message}"
    if "S3" in message and ("AmazonS3Exception" in message or "s3://" in message or "S3Exception" in message):
        return f"Fail to read data from S3. Cause: {message}"
    if "SparkException" in message or name in ("SparkRuntimeException", "SparkUpgradeException"):
        return f"Spark exception. Cause: {message}"
    return f"Fail to run query. Cause: {message}"


def driver_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says this job's Python can no longer reach its Spark driver's JVM: py4j's
    connection to the JVM's gateway was refused (the JVM ended, or takes no connection any more).
    Every later statement would fail the same way, so the job ends its session (docs/job.md)."""
    seen: BaseException | None = exc
    for _ in range(5):  # py4j may wrap the socket's error once; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _message(exc: BaseException) -> str:
    get_message = getattr(exc, "getMessage", None)
    if callable(get_message):
        try:
            message = str(get_message())
        except Exception:  # noqa: BLE001 - fall back to str() if the JVM side is gone
            message = ""
        # PySpark's getMessage() is "" for a captured exception that is not a SparkThrowable
        # (java.lang.IllegalArgumentException, ...): its text is then only in str().
        if message:
            return message
    return str(exc)
