"""Refusals of the security layer, in the product's error hierarchy (so the REST layer renders
them in the one error shape).

``type`` is ``OpenSearchSecurityException``, the class the reference throws when it refuses a
user; ``reason`` is the HTTP meaning (the security plugin itself answers 401 ``Unauthorized``).
"""

from __future__ import annotations

from query_core.errors import AsyncQueryError

SECURITY_ERROR_TYPE = "OpenSearchSecurityException"
UNAUTHORIZED_REASON = "Unauthorized"
FORBIDDEN_REASON = "Forbidden"


class UnauthorizedError(AsyncQueryError):
    """No credentials, or credentials that do not check out (never saying which part was wrong).

    ``claimed_user`` is the name the caller gave when it names a known user (for the audit log
    only: an unknown name may be a mistyped password, so it is never kept)."""

    http_status = 401
    error_type = SECURITY_ERROR_TYPE

    def __init__(
        self, message: str = "authentication required: send valid credentials", claimed_user: str = ""
    ) -> None:
        super().__init__(message)
        self.claimed_user = claimed_user


class ForbiddenError(AsyncQueryError):
    """An authenticated caller asked for something its roles do not allow."""

    http_status = 403
    error_type = SECURITY_ERROR_TYPE


class AuthUnavailableError(AsyncQueryError):
    """The credentials could not be checked (the cluster's security plugin did not answer)."""

    http_status = 503
    error_type = SECURITY_ERROR_TYPE


class TooManyFailedLoginsError(AsyncQueryError):
    """The caller's address failed to log in too often lately: refused, unchecked, for a while
    (:mod:`async_query.security.throttle`)."""

    http_status = 429
    error_type = SECURITY_ERROR_TYPE

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many failed logins from this address: try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s
