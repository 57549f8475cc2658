"""The one exception hierarchy of the product.

Driver errors (opensearch-py, botocore) are translated into these at the boundary that calls the
driver, so callers above never see a driver exception. Each class carries the HTTP status and error
type the REST layer reports for it.
"""

from __future__ import annotations


class AsyncQueryError(Exception):
    """Base of every error the product raises on purpose."""

    http_status = 500
    error_type = "AsyncQueryError"
    #: The reply's ``reason`` ("": the one the REST layer gives this status).
    reason_phrase = ""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- client errors ------------------------------------------------------------------------------


class InvalidRequestError(AsyncQueryError):
    """The request cannot be served as sent (bad body, unknown datasource, malformed id)."""

    http_status = 400
    error_type = "IllegalArgumentException"


class QuerySyntaxError(InvalidRequestError):
    """Query text a grammar of this product does not accept (a Flint statement, PPL).

    ``reason`` is the bare explanation; ``line`` and ``column`` (1-based) say where, when known, and
    are part of the message.
    """

    error_type = "SyntaxCheckException"

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        where = f" (line {line}, column {column})" if line is not None and column is not None else ""
        super().__init__(reason + where)
        self.reason = reason
        self.line = line
        self.column = column


class MalformedIdError(InvalidRequestError):
    """An id that this product did not issue: it does not decode to a datasource."""


class UnknownDatasourceError(InvalidRequestError):
    """The named datasource is not configured."""


class DataSourceNotFoundError(AsyncQueryError):
    """The datasource API names a datasource that does not exist: the reference's 404, worded as
    its ``ErrorMessage`` words every status but 400 and 429."""

    http_status = 404
    error_type = "DataSourceNotFoundException"
    reason_phrase = "There was internal problem at backend"


class QueryNotFoundError(InvalidRequestError):
    """A well-formed query id with no statement behind it.

    The reference answers 400 here (its client-error family); so does this product.
    """

    error_type = "AsyncQueryNotFoundException"


class InvalidTransitionError(InvalidRequestError):
    """A state move that the transition table refuses (for instance cancelling a finished query)."""

    error_type = "IllegalStateException"


class TooManyRequestsError(AsyncQueryError):
    """A limit was reached (for instance the number of live interactive sessions)."""

    http_status = 429
    error_type = "ConcurrencyLimitExceededException"


# -- index errors -------------------------------------------------------------------------------


class IndexOperationError(AsyncQueryError):
    """An index call failed in a way that is not the caller's fault and was not transient."""

    error_type = "IndexOperationException"


class IndexUnavailableError(IndexOperationError):
    """The index server could not be reached, or kept answering 429/5xx, until the retries ran out."""

    http_status = 503
    error_type = "IndexUnavailableException"


class ConflictError(IndexOperationError):
    """Someone else wrote the document first. Callers re-read and decide; they never overwrite."""

    http_status = 409
    error_type = "VersionConflictEngineException"


class DocumentExistsError(ConflictError):
    """A create-only write found the document already there."""


class VersionConflictError(ConflictError):
    """A conditional write's ``_seq_no``/``_primary_term`` no longer match the document."""


# -- session ownership --------------------------------------------------------------------------


class SessionLostError(Exception):
    """The session is no longer this job's: another job run owns it, the job is excluded from it,
    or it has ended (the ownership rules of ``docs/documents.md``).

    Not an :class:`AsyncQueryError`: no client sees it; a job that meets it stops without touching
    the session again.
    """


# -- programming errors -------------------------------------------------------------------------


class UnknownFieldError(ValueError):
    """A write named a field its document does not have (a misspelt keyword, say).

    A bug in the caller, not something a client can fix or a retry can cure: deliberately not an
    :class:`AsyncQueryError`, so that no handler reports it as a client error or swallows it as a
    failed index call.
    """


# -- launcher errors ----------------------------------------------------------------------------


class LauncherError(AsyncQueryError):
    """Starting, describing or cancelling a Spark job failed."""

    error_type = "LauncherException"


class LauncherValidationError(LauncherError, InvalidRequestError):
    """The launcher refused the request as invalid (EMR Serverless ``ValidationException``)."""

    http_status = 400
    error_type = "ValidationException"


class LauncherThrottledError(LauncherError, TooManyRequestsError):
    """The launcher kept throttling after the retries ran out: the client may try again later."""

    http_status = 429
    error_type = "ThrottlingException"
