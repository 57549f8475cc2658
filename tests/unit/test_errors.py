"""Error mapping: product exceptions -> HTTP, driver exceptions -> product, job errors -> texts."""

from __future__ import annotations

import json

import pytest
from opensearchpy import exceptions as os_exc

from async_query.http_errors import INTERNAL, error_response
from flint_repl_job.errors import MAX_ERROR_CHARS, classify, clean
from query_core import errors as qe
from query_core.store import translate

# -- product exceptions -> HTTP status and error type ---------------------------------------------

ERROR_TABLE = [
    (qe.AsyncQueryError, 500, "AsyncQueryError"),
    (qe.InvalidRequestError, 400, "IllegalArgumentException"),
    (qe.MalformedIdError, 400, "IllegalArgumentException"),
    (qe.QuerySyntaxError, 400, "SyntaxCheckException"),
    (qe.UnknownDatasourceError, 400, "IllegalArgumentException"),
    (qe.DataSourceNotFoundError, 404, "DataSourceNotFoundException"),
    (qe.QueryNotFoundError, 400, "AsyncQueryNotFoundException"),
    (qe.InvalidTransitionError, 400, "IllegalStateException"),
    (qe.TooManyRequestsError, 429, "ConcurrencyLimitExceededException"),
    (qe.IndexOperationError, 500, "IndexOperationException"),
    (qe.IndexUnavailableError, 503, "IndexUnavailableException"),
    (qe.ConflictError, 409, "VersionConflictEngineException"),
    (qe.DocumentExistsError, 409, "VersionConflictEngineException"),
    (qe.VersionConflictError, 409, "VersionConflictEngineException"),
    (qe.LauncherError, 500, "LauncherException"),
    (qe.LauncherValidationError, 400, "ValidationException"),
    (qe.LauncherThrottledError, 429, "ThrottlingException"),
]


@pytest.mark.parametrize(("cls", "status", "error_type"), ERROR_TABLE, ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_error_class_maps_to_status_and_type(cls: type[qe.AsyncQueryError], status: int, error_type: str) -> None:
    exc = cls("something went wrong")
    assert exc.http_status == status
    assert exc.error_type == error_type
    assert exc.message == "something went wrong" == str(exc)
    assert isinstance(exc, qe.AsyncQueryError)


def test_every_error_class_is_in_the_table() -> None:
    def subclasses(cls: type) -> set[type]:
        found: set[type] = set(cls.__subclasses__())
        return found | {s for c in found for s in subclasses(c)}

    product = {c for c in subclasses(qe.AsyncQueryError) if c.__module__ == qe.__name__} | {qe.AsyncQueryError}
    assert product == {row[0] for row in ERROR_TABLE}


@pytest.mark.parametrize(
    ("cls", "parent"),
    [
        (qe.MalformedIdError, qe.InvalidRequestError),
        (qe.QuerySyntaxError, qe.InvalidRequestError),
        (qe.UnknownDatasourceError, qe.InvalidRequestError),
        (qe.QueryNotFoundError, qe.InvalidRequestError),
        (qe.InvalidTransitionError, qe.InvalidRequestError),
        (qe.IndexUnavailableError, qe.IndexOperationError),
        (qe.ConflictError, qe.IndexOperationError),
        (qe.DocumentExistsError, qe.ConflictError),
        (qe.VersionConflictError, qe.ConflictError),
        (qe.LauncherValidationError, qe.LauncherError),
        (qe.LauncherValidationError, qe.InvalidRequestError),
        (qe.LauncherThrottledError, qe.LauncherError),
        (qe.LauncherThrottledError, qe.TooManyRequestsError),
    ],
)
def test_hierarchy(cls: type, parent: type) -> None:
    assert issubclass(cls, parent)


def test_conflicts_are_not_client_errors() -> None:
    assert not issubclass(qe.ConflictError, qe.InvalidRequestError)
    assert not issubclass(qe.IndexUnavailableError, qe.InvalidRequestError)


# -- opensearch-py exceptions -> product exceptions -----------------------------------------------


def _info(status: int, kind: str, reason: str) -> dict[str, object]:
    cause = {"type": kind, "reason": reason, "index": ".query_execution_request_local", "shard": "0"}
    return {"error": {**cause, "root_cause": [cause]}, "status": status}


EXISTS = _info(
    409, "version_conflict_engine_exception", "[q1]: version conflict, document already exists (current version [1])"
)
SEQ_CONFLICT = _info(
    409,
    "version_conflict_engine_exception",
    "[q1]: version conflict, required seqNo [7], primary term [1]. current document has seqNo [8] and primary term [1]",
)

TRANSLATIONS = {
    "create_conflict": (os_exc.ConflictError(409, "version_conflict_engine_exception", EXISTS), qe.DocumentExistsError),
    "seq_no_conflict": (
        os_exc.ConflictError(409, "version_conflict_engine_exception", SEQ_CONFLICT),
        qe.VersionConflictError,
    ),
    "conflict_without_info": (
        os_exc.ConflictError(409, "version_conflict_engine_exception", None),
        qe.VersionConflictError,
    ),
    "connection_refused": (
        os_exc.ConnectionError("N/A", "Connection refused", ConnectionRefusedError(111, "refused")),
        qe.IndexUnavailableError,
    ),
    "connection_timeout": (
        os_exc.ConnectionTimeout("TIMEOUT", "Read timed out", TimeoutError("timed out")),
        qe.IndexUnavailableError,
    ),
    "ssl_error": (os_exc.SSLError("N/A", "handshake failed", OSError("ssl")), qe.IndexUnavailableError),
    "429": (
        os_exc.TransportError(429, "circuit_breaking_exception", _info(429, "too_many", "slow down")),
        qe.IndexUnavailableError,
    ),
    "502": (os_exc.TransportError(502, "Bad Gateway", "Bad Gateway"), qe.IndexUnavailableError),
    "503": (
        os_exc.TransportError(503, "unavailable", _info(503, "cluster_block_exception", "blocked")),
        qe.IndexUnavailableError,
    ),
    "504": (os_exc.TransportError(504, "Gateway Timeout", None), qe.IndexUnavailableError),
    "400": (
        os_exc.RequestError(400, "parsing_exception", _info(400, "parsing_exception", "unknown query [bogus]")),
        qe.InvalidRequestError,
    ),
    "500": (
        os_exc.TransportError(500, "exception", _info(500, "null_pointer_exception", "boom")),
        qe.IndexOperationError,
    ),
    "401": (os_exc.AuthenticationException(401, "security_exception", None), qe.IndexOperationError),
    "403": (os_exc.AuthorizationException(403, "security_exception", None), qe.IndexOperationError),
    "404": (
        os_exc.NotFoundError(
            404, "index_not_found_exception", _info(404, "index_not_found_exception", "no such index")
        ),
        qe.IndexOperationError,
    ),
    "serialization": (os_exc.SerializationError("cannot serialize"), qe.IndexOperationError),
}


@pytest.mark.parametrize(("exc", "expected"), list(TRANSLATIONS.values()), ids=list(TRANSLATIONS))
def test_translate(exc: Exception, expected: type[qe.AsyncQueryError]) -> None:
    translated = translate(exc, "create .query_execution_request_local/q1")
    assert type(translated) is expected
    assert translated.message.startswith("create .query_execution_request_local/q1")


def test_translate_keeps_the_reason() -> None:
    assert "unknown query [bogus]" in translate(TRANSLATIONS["400"][0], "search").message
    assert "required seqNo [7]" in translate(TRANSLATIONS["seq_no_conflict"][0], "update").message
    assert "500" in translate(TRANSLATIONS["500"][0], "get").message


def test_translated_status_codes() -> None:
    assert translate(TRANSLATIONS["503"][0], "x").http_status == 503
    assert translate(TRANSLATIONS["create_conflict"][0], "x").http_status == 409
    assert translate(TRANSLATIONS["400"][0], "x").http_status == 400
    assert translate(TRANSLATIONS["500"][0], "x").http_status == 500


# -- the REST error shape ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (400, "Invalid Request"),
        (404, "Invalid Request"),
        (413, "Invalid Request"),
        (429, "Too Many Requests"),
        (500, "There was internal problem at backend"),
    ],
)
def test_error_response_shape(status: int, reason: str) -> None:
    resp = error_response(status, "SomeException", "what happened")
    assert resp.status_code == status
    assert resp.media_type == "application/json"
    assert json.loads(bytes(resp.body)) == {
        "status": status,
        "error": {"type": "SomeException", "reason": reason, "details": "what happened"},
    }


def test_unknown_5xx_uses_the_internal_reason() -> None:
    body = json.loads(bytes(error_response(501, "X", "y").body))
    assert body["error"]["reason"] == INTERNAL == "There was internal problem at backend"


# -- job error classification ------------------------------------------------------------------------


def _named(name: str, message: str) -> BaseException:
    """An exception whose class has the given name, as PySpark's captured exceptions do."""
    return type(name, (Exception,), {})(message)


class _JvmLikeError(Exception):
    """Mimics PySpark's captured exceptions: getMessage() is the JVM's message."""

    def __init__(self, text: str, jvm_message: str | None) -> None:
        super().__init__(text)
        self.jvm_message = jvm_message

    def getMessage(self) -> str:  # noqa: N802 - the JVM's name
        if self.jvm_message is None:
            raise RuntimeError("the JVM is gone")
        return self.jvm_message


PARSE_MESSAGE = (
    "\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'.(line 1, pos 0)\n\n== SQL ==\nSELEC 1\n^^^\n"
    "\n\nJVM stacktrace:\norg.apache.spark.sql.catalyst.parser.ParseException\n\tat org.apache.Foo.bar(Foo.scala:1)"
)


def test_parse_exception_is_a_syntax_error_cut_before_the_sql() -> None:
    text = classify(_named("ParseException", PARSE_MESSAGE))
    assert text == "Syntax error: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'.(line 1, pos 0)"


def test_analysis_exception() -> None:
    message = (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found.; line 1 pos 14;\n"
        "== Parsed Logical Plan ==\n'Project [*]\n+- 'UnresolvedRelation [nope]"
    )
    text = classify(_named("AnalysisException", message))
    assert text.startswith("Fail to analyze query. Cause: [TABLE_OR_VIEW_NOT_FOUND]")
    assert "Logical Plan" not in text and "UnresolvedRelation" not in text


def test_spark_exception() -> None:
    text = classify(_named("Py4JJavaError", "org.apache.spark.SparkException: Job aborted due to stage failure"))
    assert text == "Spark exception. Cause: org.apache.spark.SparkException: Job aborted due to stage failure"
    assert classify(_named("SparkRuntimeException", "[DIVIDE_BY_ZERO] Division by zero")).startswith(
        "Spark exception. Cause: [DIVIDE_BY_ZERO]"
    )


def test_s3_exception() -> None:
    message = "com.amazonaws.services.s3.model.AmazonS3Exception: Access Denied (Service: Amazon S3; Status Code: 403)"
    assert classify(_named("Py4JJavaError", message)) == f"Fail to read data from S3. Cause: {message}"


def test_anything_else() -> None:
    assert classify(ValueError("bad value")) == "Fail to run query. Cause: bad value"
    assert classify(_named("IllegalArgumentException", "nope")) == "Fail to run query. Cause: nope"


def test_classify_uses_the_jvm_message_and_falls_back_to_str() -> None:
    assert classify(_JvmLikeError("python text", "jvm text")) == "Fail to run query. Cause: jvm text"
    assert classify(_JvmLikeError("python text", None)) == "Fail to run query. Cause: python text"


def test_classify_falls_back_when_the_jvm_message_is_empty() -> None:
    """PySpark's getMessage() is "" for exceptions that are not SparkThrowable: keep str() then."""
    assert (
        classify(_JvmLikeError("requirement failed: bad input", ""))
        == "Fail to run query. Cause: requirement failed: bad input"
    )


@pytest.mark.parametrize(
    "marker",
    ["\n== SQL ==\n", "\n== Physical Plan ==\n", "\n== Parsed Logical Plan ==\n", "\nJVM stacktrace:\n", "\n\tat "],
)
def test_clean_cuts_at_markers(marker: str) -> None:
    assert clean(f"the reason{marker}SECRET PLAN") == "the reason"


def test_clean_masks_credentials() -> None:
    text = clean(
        "failed with password=hunter2, secret: s3cr3t; token=abc.def "
        "key AKIAABCDEFGHIJKLMNOP and ASIAABCDEFGHIJKLMNOP url s3a://AKID:SECRETKEY@bucket/path "
        "access_key=AK secret_key='zz'"
    )
    for secret in ("hunter2", "s3cr3t", "abc.def", "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP", "SECRETKEY", "=AK"):
        assert secret not in text, secret
    assert "password=****" in text
    assert "s3a://****@bucket/path" in text
    assert "failed with" in text


def test_classify_masks_credentials_too() -> None:
    text = classify(_named("AnalysisException", "cannot connect with password=hunter2 to the catalog"))
    assert "hunter2" not in text
    assert text.startswith("Fail to analyze query. Cause: ")


def test_clean_bounds_the_length() -> None:
    assert len(clean("x" * 100_000)) == MAX_ERROR_CHARS
