"""Runs each session's job on EMR Serverless (boto3 ``emr-serverless``).

The request has the reference plugin's shape (``EmrServerlessClientImpl.startJobRun``): the job
name ``<cluster>:<type>[:<session id | index>]``, the result index as the one entry-point argument,
and every setting of the job as a ``--conf`` key in ``sparkSubmitParameters``. On EMR Serverless
there is no other channel into the job, so the basic-auth password travels there too (it is kept
out of log lines and error messages).

``sparkSubmitParameters`` is one string that EMR Serverless splits like a shell command line; values
that are not plain words are wrapped in double quotes with ``\\`` and ``"`` escaped (as the reference
does for the batch query text), so ``shlex.split`` gives back every value exactly.

Throttling (``ThrottlingException``, ``TooManyRequestsException``, HTTP 429), 5xx answers and
connection failures are retried with tenacity (exponential back-off with jitter, bounded by
attempts and seconds). ``StartJobRun`` carries one ``clientToken`` for all attempts of one start, so
a retry after a lost answer cannot start a second job. botocore errors are translated here and
nowhere else: ``ValidationException`` becomes :class:`LauncherValidationError` (400) with AWS's
message, anything else :class:`LauncherError` (500).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from tenacity import RetryCallState

from async_query.datasources import Datasource
from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.settings import Settings
from query_core.errors import LauncherError, LauncherThrottledError, LauncherValidationError
from query_core.jobconf import CODE_ARCHIVE_NAME, ENTRY_FILE_NAME
from query_core.retry import bounded_retrying
from query_core.states import SessionType

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The reference truncates job names to this length (the API allows 256).
MAX_JOB_NAME = 255
#: ``executionTimeoutMinutes`` by session type. 0 means no limit: an interactive job ends itself
#: after its inactivity limit and a streaming job runs until it is stopped. A batch job (a one-off
#: ``CREATE``/``REFRESH``) gets the reference's bound of 120 minutes.
BATCH_TIMEOUT_MINUTES = 120
#: A cancel is a last resort called on request paths: its retries are bounded more tightly.
CANCEL_RETRY_ATTEMPTS = 3
CANCEL_RETRY_SECONDS = 5.0

THROTTLING_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded", "SlowDown"}
)
_STATES = {
    "SUBMITTED": JobRunState.PENDING,
    "PENDING": JobRunState.PENDING,
    "SCHEDULED": JobRunState.PENDING,
    "QUEUED": JobRunState.PENDING,
    "RUNNING": JobRunState.RUNNING,
    "SUCCESS": JobRunState.SUCCESS,
    "FAILED": JobRunState.FAILED,
    "CANCELLING": JobRunState.CANCELLED,
    "CANCELLED": JobRunState.CANCELLED,
}
#: A value that needs no quoting in ``sparkSubmitParameters``.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./#-]+")


def quote_value(value: str) -> str:
    """``value`` as one word of a shell-like command line (what ``shlex.split`` reads back)."""
    if _PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def conf_parameters(conf: dict[str, str]) -> list[str]:
    """``--conf key=value`` words, values quoted where needed."""
    words: list[str] = []
    for key, value in conf.items():
        words += ["--conf", f"{key}={quote_value(value)}"]
    return words


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_throttling(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and (_error_code(exc) in THROTTLING_CODES or _http_status(exc) == 429)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: throttling, a 5xx answer, or no answer at all."""
    if isinstance(exc, ClientError):
        return is_throttling(exc) or _http_status(exc) >= 500 or _error_code(exc) == "InternalServerException"
    return isinstance(exc, BotoConnectionError | HTTPClientError)


def _redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "****")
    return text


class EmrServerlessLauncher(Launcher):
    """Starts, cancels and describes EMR Serverless job runs of one application."""

    kind = "emr-serverless"
    call_names: ClassVar[dict[str, str]] = {"start": "StartJobRun", "describe": "GetJobRun", "cancel": "CancelJobRun"}

    def __init__(
        self,
        application_id: str,
        execution_role_arn: str,
        region: str,
        entry_point: str,
        cluster_name: str = "async-query",
        spark_submit_parameters: str = "",
        py_files: str = "",
        client: Any | None = None,
        retry_attempts: int = 6,
        retry_seconds: float = 30.0,
        *,
        retry_initial_seconds: float = 0.5,
        batch_timeout_minutes: int = BATCH_TIMEOUT_MINUTES,
    ) -> None:
        if not application_id or not execution_role_arn or not entry_point:
            raise LauncherError("EMR Serverless needs an application id, an execution role ARN and an entry point")
        self.application_id = application_id
        self.execution_role_arn = execution_role_arn
        self.region = region
        self.entry_point = entry_point
        self.cluster_name = cluster_name
        self.spark_submit_parameters = spark_submit_parameters.strip()
        self.py_files = py_files
        self.retry_attempts = retry_attempts
        self.retry_seconds = retry_seconds
        self.retry_initial_seconds = retry_initial_seconds
        self.batch_timeout_minutes = batch_timeout_minutes
        self._owns_client = client is None
        self.client = client if client is not None else build_client(region)

    # -- the request --------------------------------------------------------------------------

    def execution_timeout(self, session_type: SessionType) -> int:
        if session_type in (SessionType.INTERACTIVE, SessionType.STREAMING):
            return 0
        return self.batch_timeout_minutes

    def submit_parameters(self, request: JobRequest) -> str:
        """``--py-files``, then the datasource's extra parameters, then the job's ``--conf`` keys.

        spark-submit keeps the last value of a repeated ``--conf`` key, so the job's own keys win
        over extra parameters that name the same key.
        """
        words: list[str] = []
        if self.py_files:
            words += ["--py-files", quote_value(self.py_files)]
        if self.spark_submit_parameters:
            words.append(self.spark_submit_parameters)
        words += conf_parameters({**request.conf, **request.secret_conf})
        return " ".join(words)

    def start_job_run_params(self, request: JobRequest, client_token: str) -> dict[str, Any]:
        """The ``StartJobRun`` arguments for ``request`` (the reference's shape)."""
        if request.session_type == SessionType.LOCAL:
            raise LauncherError("local sessions are run by the plugin itself, not by a job")
        return {
            "applicationId": self.application_id,
            "clientToken": client_token,
            "executionRoleArn": self.execution_role_arn,
            "name": request.job_name(self.cluster_name)[:MAX_JOB_NAME],
            "tags": {
                "datasource": request.datasource.name,
                "type": request.session_type.value,
                "sid": request.session_id,
            },
            "executionTimeoutMinutes": self.execution_timeout(request.session_type),
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": self.entry_point,
                    "entryPointArguments": [request.result_index],
                    "sparkSubmitParameters": self.submit_parameters(request),
                }
            },
        }

    # -- Launcher -----------------------------------------------------------------------------

    def start(self, request: JobRequest) -> str:
        # One token for every attempt of this start: EMR Serverless answers a repeated token with
        # the job run it already started. A later start (even for the same session) gets its own.
        params = self.start_job_run_params(request, client_token=uuid.uuid4().hex)
        secrets = list(request.secret_conf.values())
        reply = self._call("StartJobRun", lambda: self.client.start_job_run(**params), secrets)
        job_id = str(reply["jobRunId"])
        log.info("started EMR Serverless job run %s (%s) for session %s", job_id, params["name"], request.session_id)
        return job_id

    def cancel(self, job_id: str) -> None:
        """``CancelJobRun``; a job that is gone or already finished is not an error."""
        try:
            self._call(
                "CancelJobRun",
                lambda: self.client.cancel_job_run(applicationId=self.application_id, jobRunId=job_id),
                attempts=CANCEL_RETRY_ATTEMPTS,
                seconds=min(self.retry_seconds, CANCEL_RETRY_SECONDS),
                # EMR Serverless refuses to cancel a finished run as invalid: nothing left to do.
                gone=("ResourceNotFoundException", "ValidationException"),
            )
        except _Gone as gone:
            log.info("job run %s needs no cancel: %s", job_id, gone)
            return
        log.info("asked EMR Serverless to cancel job run %s", job_id)

    def describe(self, job_id: str) -> JobDescription:
        try:
            reply = self._call(
                "GetJobRun",
                lambda: self.client.get_job_run(applicationId=self.application_id, jobRunId=job_id),
                gone=("ResourceNotFoundException",),
            )
        except _Gone as gone:
            return JobDescription(job_id, JobRunState.UNKNOWN, str(gone))
        run = reply.get("jobRun", {})
        raw = str(run.get("state", ""))
        details = str(run.get("stateDetails") or "")
        state = _STATES.get(raw)
        if state is None:
            # A state this code does not know yet: not finished, as far as anyone can tell.
            log.warning("job run %s has an unknown state %r; taken as pending", job_id, raw)
            return JobDescription(job_id, JobRunState.PENDING, details or f"EMR Serverless state {raw}")
        return JobDescription(job_id, state, details)

    def check(self) -> str | None:
        """One ``GetApplication`` (no retries): the application must exist and not be terminated."""
        try:
            reply = self.client.get_application(applicationId=self.application_id)
        except ClientError as exc:
            return f"EMR Serverless GetApplication failed ({_error_code(exc) or _http_status(exc)})"
        except BotoCoreError as exc:
            return f"EMR Serverless GetApplication failed: {type(exc).__name__}"
        state = str(reply.get("application", {}).get("state", ""))
        return f"EMR Serverless application {self.application_id} is {state}" if state == "TERMINATED" else None

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _call(
        self,
        what: str,
        fn: Callable[[], T],
        secrets: Iterable[str] = (),
        *,
        attempts: int | None = None,
        seconds: float | None = None,
        gone: tuple[str, ...] = (),
    ) -> T:
        """One API call with bounded retries of transient failures; botocore errors translated."""
        secrets = list(secrets)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            code = _error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            log.warning("EMR Serverless %s failed (%s), retry %d", what, code, state.attempt_number)

        # Back-off from ``retry_initial_seconds``, with a jitter of the same size, capped at a
        # quarter of the time allowed.
        retrying = bounded_retrying(
            is_transient,
            attempts=attempts or self.retry_attempts,
            seconds=self.retry_seconds if seconds is None else seconds,
            first_wait=self.retry_initial_seconds,
            max_wait=max(self.retry_seconds / 4, 0.1),
            before_sleep=before_sleep,
        )
        try:
            return retrying(fn)
        except ClientError as exc:
            code = _error_code(exc)
            message = _redact(str(exc.response.get("Error", {}).get("Message", "") or exc), secrets)
            if code in gone:
                raise _Gone(f"{code}: {message}") from None
            if code == "ValidationException":
                raise LauncherValidationError(f"EMR Serverless refused {what}: {message}") from None
            if is_throttling(exc):
                raise LauncherThrottledError(
                    f"EMR Serverless {what} is throttled; try again later ({code or _http_status(exc)}): {message}"
                ) from None
            if is_transient(exc):
                raise LauncherError(
                    f"EMR Serverless {what} kept failing ({code or _http_status(exc)}) after retries: {message}"
                ) from None
            raise LauncherError(f"EMR Serverless {what} failed ({code}): {message}") from None
        except BotoCoreError as exc:
            raise LauncherError(f"EMR Serverless {what} failed: {_redact(str(exc), secrets)}") from None


class _Gone(Exception):  # noqa: N818 - an outcome, not a failure
    """The job run (or its application) no longer exists, or has already finished."""


def build_client(region: str) -> Any:
    """A boto3 ``emr-serverless`` client with botocore's own retries off (this module retries).

    The endpoint follows boto3's usual configuration, so ``AWS_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT_URL_EMR_SERVERLESS``) points it at LocalStack or a moto server.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=region or None,
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
    )
    return boto3.client("emr-serverless", config=config)


def launcher_for_datasource(ds: Datasource, settings: Settings, client: Any | None = None) -> EmrServerlessLauncher:
    """The launcher of an ``emr-serverless`` datasource, from its properties.

    Properties: ``applicationId``, ``executionRoleARN``, ``region`` (required); ``packageS3Uri``
    (where ``async-query package-job`` uploaded the job: gives ``entryPoint`` = ``<uri>/main.py``
    and ``pyFiles`` = ``<uri>/async_query_job.zip``); ``entryPoint`` and ``pyFiles`` override those;
    ``sparkSubmitParameters`` (extra parameters, e.g. the Python environment printed by
    ``package-job``).
    """
    props = ds.properties
    package = props.get("packageS3Uri", "").rstrip("/")
    entry_point = props.get("entryPoint") or (f"{package}/{ENTRY_FILE_NAME}" if package else "")
    py_files = props.get("pyFiles") or (f"{package}/{CODE_ARCHIVE_NAME}" if package else "")
    missing = [
        key
        for key, value in (
            ("applicationId", props.get("applicationId")),
            ("executionRoleARN", props.get("executionRoleARN")),
            ("region", props.get("region")),
            ("entryPoint or packageS3Uri", entry_point),
        )
        if not value
    ]
    if missing:
        raise LauncherError(f"datasource {ds.name!r} (emr-serverless) lacks the properties: {', '.join(missing)}")
    return EmrServerlessLauncher(
        application_id=props["applicationId"],
        execution_role_arn=props["executionRoleARN"],
        region=props["region"],
        entry_point=entry_point,
        cluster_name=settings.cluster_name,
        spark_submit_parameters=props.get("sparkSubmitParameters", ""),
        py_files=py_files,
        client=client,
        retry_attempts=settings.emr_retry_attempts,
        retry_seconds=settings.emr_retry_seconds,
    )
