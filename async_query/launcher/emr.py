"""Runs each session's job on EMR Serverless (boto3 ``emr-serverless``).

The request has the reference plugin's shape (``EmrServerlessClientImpl.startJobRun``): the job
name ``<cluster>:<type>[:<session id | index>]``, the result index as the one entry-point argument,
and every setting of the job as a ``--conf`` key in ``sparkSubmitParameters``. The application, the
execution role (or one a datasource names among those the settings list), the region and the
job's package come from the service's settings (docs/datasources.md). A basic-auth password never
travels in the parameters: the launcher puts it in an AWS Secrets Manager secret of the datasource
(``<prefix>/<cluster>/<datasource>``) and the job reads it by ARN
(``spark.datasource.flint.auth.passwordSecretArn``); it is kept out of log lines and error messages.

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

import hashlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from tenacity import RetryCallState

from async_query import datasource_dialect as dialect
from async_query.datasources import Datasource
from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher
from async_query.settings import Settings
from query_core.errors import LauncherError, LauncherThrottledError, LauncherValidationError
from query_core.jobconf import CODE_ARCHIVE_NAME, ENTRY_FILE_NAME, PASSWORD_KEY, key_of
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
#: The conf key naming the secret that holds the basic-auth password.
PASSWORD_SECRET_ARN_KEY = key_of("password_secret_arn")
#: What a Secrets Manager secret name may hold.
_SECRET_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9/_+=.@-]")


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
        secrets_client: Any | None = None,
        secret_prefix: str = "async-query",
    ) -> None:
        if not application_id or not execution_role_arn or not entry_point:
            raise LauncherError("EMR Serverless needs an application id, an execution role ARN and an entry point")
        self.application_id = application_id
        self.execution_role_arn = execution_role_arn
        self.region = region
        self.glue_region = region
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
        self.secret_prefix = secret_prefix
        self._secrets_client = secrets_client
        #: The ARN of each secret this launcher wrote, with a digest of what it wrote there.
        self._secret_arns: dict[str, tuple[str, str]] = {}
        self._secrets_lock = threading.Lock()

    # -- the request --------------------------------------------------------------------------

    def execution_timeout(self, session_type: SessionType) -> int:
        if session_type in (SessionType.INTERACTIVE, SessionType.STREAMING):
            return 0
        return self.batch_timeout_minutes

    def submit_parameters(self, request: JobRequest, extra_conf: dict[str, str] | None = None) -> str:
        """``--py-files``, then the settings' extra parameters, then the job's ``--conf`` keys
        (with ``extra_conf``: the password's secret ARN). Never the secret conf itself.

        spark-submit keeps the last value of a repeated ``--conf`` key, so the job's own keys win
        over extra parameters that name the same key.
        """
        words: list[str] = []
        if self.py_files:
            words += ["--py-files", quote_value(self.py_files)]
        if self.spark_submit_parameters:
            words.append(self.spark_submit_parameters)
        words += conf_parameters({**request.conf, **(extra_conf or {})})
        return " ".join(words)

    def start_job_run_params(
        self, request: JobRequest, client_token: str, extra_conf: dict[str, str] | None = None
    ) -> dict[str, Any]:
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
                "type": request.kind,
                "sid": request.session_id,
            },
            "executionTimeoutMinutes": self.execution_timeout(request.session_type),
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": self.entry_point,
                    "entryPointArguments": [request.result_index],
                    "sparkSubmitParameters": self.submit_parameters(request, extra_conf),
                }
            },
        }

    # -- Launcher -----------------------------------------------------------------------------

    def start(self, request: JobRequest) -> str:
        secrets = [value for value in request.secret_conf.values() if value]
        extra = self._password_by_arn(request)
        # One token for every attempt of this start: EMR Serverless answers a repeated token with
        # the job run it already started. A later start (even for the same session) gets its own.
        params = self.start_job_run_params(request, client_token=uuid.uuid4().hex, extra_conf=extra)
        reply = self._call("StartJobRun", lambda: self.client.start_job_run(**params), secrets)
        job_id = str(reply["jobRunId"])
        log.info("started EMR Serverless job run %s (%s) for session %s", job_id, params["name"], request.session_id)
        return job_id

    # -- the password, by ARN -------------------------------------------------------------------

    def secret_name(self, datasource: str) -> str:
        """The Secrets Manager secret holding the password of ``datasource``'s jobs."""
        return _SECRET_NAME_UNSAFE.sub("-", f"{self.secret_prefix}/{self.cluster_name}/{datasource}")

    def _password_by_arn(self, request: JobRequest) -> dict[str, str]:
        """The conf naming the secret that holds the job's basic-auth password ({}: it has none)."""
        password = request.secret_conf.get(PASSWORD_KEY, "")
        if not password:
            return {}
        return {PASSWORD_SECRET_ARN_KEY: self.put_secret(self.secret_name(request.datasource.name), password)}

    def put_secret(self, name: str, value: str) -> str:
        """Store ``value`` in the secret ``name`` (made if missing); returns its ARN. A value this
        launcher already stored there is not written again."""
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
        with self._secrets_lock:
            known = self._secret_arns.get(name)
            if known is not None and known[1] == digest:
                return known[0]
            client = self._secrets()
            try:
                reply = self._call(
                    "PutSecretValue",
                    lambda: client.put_secret_value(SecretId=name, SecretString=value),
                    [value],
                    gone=("ResourceNotFoundException",),
                    service="Secrets Manager",
                )
            except _Gone:
                reply = self._call(
                    "CreateSecret",
                    lambda: client.create_secret(
                        Name=name, SecretString=value, Description="index password of async-query jobs"
                    ),
                    [value],
                    service="Secrets Manager",
                )
            arn = str(reply["ARN"])
            self._secret_arns[name] = (arn, digest)
            log.info("stored the index password of %s jobs in secret %s", name.rsplit("/", 1)[-1], arn)
            return arn

    def _secrets(self) -> Any:
        if self._secrets_client is None:
            self._secrets_client = build_client(self.region, "secretsmanager")
        return self._secrets_client

    def startup_settings(self, datasource: Datasource) -> dict[str, str]:
        """The execution role: a job runs with one role, so pools are per role."""
        return {"executionRoleArn": self.execution_role_arn}

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
        if self._secrets_client is not None:
            self._secrets_client.close()

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
        service: str = "EMR Serverless",
    ) -> T:
        """One API call with bounded retries of transient failures; botocore errors translated."""
        secrets = list(secrets)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            code = _error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            log.warning("%s %s failed (%s), retry %d", service, what, code, state.attempt_number)

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
                raise LauncherValidationError(f"{service} refused {what}: {message}") from None
            if is_throttling(exc):
                raise LauncherThrottledError(
                    f"{service} {what} is throttled; try again later ({code or _http_status(exc)}): {message}"
                ) from None
            if is_transient(exc):
                raise LauncherError(
                    f"{service} {what} kept failing ({code or _http_status(exc)}) after retries: {message}"
                ) from None
            raise LauncherError(f"{service} {what} failed ({code}): {message}") from None
        except BotoCoreError as exc:
            raise LauncherError(f"{service} {what} failed: {_redact(str(exc), secrets)}") from None


class _Gone(Exception):  # noqa: N818 - an outcome, not a failure
    """The job run (or its application) no longer exists, or has already finished."""


def build_client(region: str, service: str = "emr-serverless") -> Any:
    """A boto3 client (``emr-serverless``, ``secretsmanager``) with botocore's own retries off
    (this module retries).

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
    return boto3.client(service, config=config)


def execution_role_of(datasource: Datasource, settings: Settings) -> str:
    """The execution role of ``datasource``'s jobs: the one it names in ``executionRoleARN`` if the
    settings list it, else the engine's. One they do not list is refused (a 400)."""
    engine = settings.spark_execution_engine_config
    if engine is None:
        raise LauncherError("EMR Serverless is not configured: set ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG")
    role = datasource.properties.get(dialect.EXECUTION_ROLE)
    if role is None or role == engine.execution_role_arn:
        return engine.execution_role_arn
    if role not in settings.emr_execution_roles:
        raise LauncherValidationError(
            f"datasource {datasource.name}: {dialect.EXECUTION_ROLE} is not one of the roles listed in "
            "ASYNC_QUERY_EMR_EXECUTION_ROLES"
        )
    return role


def launcher_from_settings(settings: Settings, role: str = "", client: Any | None = None) -> EmrServerlessLauncher:
    """The EMR Serverless launcher of the settings' application (``spark_execution_engine_config``):
    its ``applicationId``, ``region`` and ``sparkSubmitParameters``, its ``executionRoleARN``
    unless ``role`` names another, and the job's package: ``packageS3Uri`` (where ``async-query
    package-job`` uploaded the job: ``entryPoint`` = ``<uri>/main.py``, ``pyFiles`` =
    ``<uri>/async_query_job.zip``), or ``entryPoint`` and ``pyFiles`` themselves."""
    engine = settings.spark_execution_engine_config
    if engine is None:
        raise LauncherError("EMR Serverless is not configured: set ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG")
    package = engine.package_s3_uri.rstrip("/")
    return EmrServerlessLauncher(
        application_id=engine.application_id,
        execution_role_arn=role or engine.execution_role_arn,
        region=engine.region,
        entry_point=engine.entry_point or f"{package}/{ENTRY_FILE_NAME}",
        cluster_name=settings.cluster_name,
        spark_submit_parameters=engine.spark_submit_parameters,
        py_files=engine.py_files or (f"{package}/{CODE_ARCHIVE_NAME}" if package else ""),
        client=client,
        retry_attempts=settings.emr_retry_attempts,
        retry_seconds=settings.emr_retry_seconds,
        secret_prefix=settings.emr_secret_prefix,
    )
