"""EmrServerlessLauncher against moto's EMR Serverless (boto3 in-process, ``moto.mock_aws``).

Request shapes are captured with botocore's ``provide-client-params`` event on the real client;
errors moto does not produce (throttling, 5xx) are injected with a ``before-call`` handler on the
same client, which answers the call with an error response for the first N calls.
"""

from __future__ import annotations

import copy
import json
import logging
import shlex
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto.core import DEFAULT_ACCOUNT_ID
from moto.emrserverless.models import emrserverless_backends

from async_query.datasources import Datasource
from async_query.launcher.base import JobRequest, JobRunState, job_conf
from async_query.launcher.emr import (
    PASSWORD_SECRET_ARN_KEY,
    EmrServerlessLauncher,
    conf_parameters,
    execution_role_of,
    launcher_from_settings,
    quote_value,
)
from async_query.settings import Settings, SparkEngineConfig
from query_core.config import OpenSearchConfig
from query_core.errors import LauncherError, LauncherThrottledError, LauncherValidationError
from query_core.states import SessionType

REGION = "us-east-1"
ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/async-query-job"
ENTRY = "s3://pkg-bucket/job/main.py"
PY_FILES = "s3://pkg-bucket/job/async_query_job.zip"
PASSWORD = 'p@ss w"rd\\x'
SESSION_ID = "c2Vzc2lvbjEyMzQ1bXlzMw=="


@pytest.fixture
def emr(aws: None) -> Any:
    return boto3.client("emr-serverless", region_name=REGION)


@pytest.fixture
def app_id(emr: Any) -> str:
    return str(emr.create_application(name="async-query", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"])


class Calls:
    """The parameters of every call of one operation, as the client was given them."""

    def __init__(self, client: Any, operation: str) -> None:
        self.params: list[dict[str, Any]] = []
        client.meta.events.register(f"provide-client-params.emr-serverless.{operation}", self._record)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.params.append(copy.deepcopy(params))


def fail_first(client: Any, operation: str, errors: list[tuple[int, str, str]]) -> None:
    """Answer the first ``len(errors)`` calls of ``operation`` with these (status, code, message)."""
    pending = list(errors)

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not pending:
            return None
        status, code, message = pending.pop(0)
        http = AWSResponse(f"https://emr-serverless.{REGION}.amazonaws.com/", status, {}, None)
        return http, {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}

    client.meta.events.register(f"before-call.emr-serverless.{operation}", answer)


def datasource(**spark_conf: str) -> Datasource:
    return Datasource(name="mys3", connector="emr-serverless", spark_conf=spark_conf)


def request(
    session_type: SessionType = SessionType.INTERACTIVE, ds: Datasource | None = None, suffix: str = ""
) -> JobRequest:
    ds = ds or datasource()
    opensearch = OpenSearchConfig(
        url="https://search.example.com:443", auth="basic", username="admin", password=PASSWORD
    )
    conf, secret = job_conf(Settings(), ds, opensearch, SESSION_ID, session_type)
    return JobRequest(SESSION_ID, ds, session_type, conf, secret, name_suffix=suffix)


def launcher(app_id: str, client: Any, **kw: Any) -> EmrServerlessLauncher:
    kw.setdefault("retry_initial_seconds", 0.01)
    kw.setdefault("retry_seconds", 10.0)
    return EmrServerlessLauncher(
        app_id, ROLE, REGION, ENTRY, cluster_name="prod", py_files=PY_FILES, client=client, **kw
    )


def parse_submit(params: str) -> tuple[list[str], dict[str, str]]:
    """The words before the first ``--conf``, and every ``--conf`` as a dict (last one wins)."""
    words = shlex.split(params)
    first = words.index("--conf")
    conf: dict[str, str] = {}
    for flag, pair in zip(words[first::2], words[first + 1 :: 2], strict=True):
        assert flag == "--conf"
        key, _, value = pair.partition("=")
        conf[key] = value
    return words[:first], conf


# -- StartJobRun ------------------------------------------------------------------------------


def test_start_sends_the_reference_shape(emr: Any, app_id: str) -> None:
    ds = datasource(**{"spark.sql.catalog.glue.warehouse": 's3://wh/a b "q" $HOME'})
    req = request(ds=ds)
    calls = Calls(emr, "StartJobRun")
    extra = "--conf spark.archives=s3://pkg-bucket/job/deps.tar.gz#deps --conf spark.flint.job.type=batch"
    job_id = launcher(app_id, emr, spark_submit_parameters=extra).start(req)

    assert len(calls.params) == 1
    sent = calls.params[0]
    assert sent["applicationId"] == app_id
    assert sent["executionRoleArn"] == ROLE
    assert sent["name"] == f"prod:interactive:{SESSION_ID}"
    assert sent["tags"] == {"datasource": "mys3", "type": "interactive", "sid": SESSION_ID}
    assert sent["executionTimeoutMinutes"] == 0
    assert 1 <= len(sent["clientToken"]) <= 64
    submit = sent["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == ENTRY
    assert submit["entryPointArguments"] == ["query_execution_result_mys3"]
    head, conf = parse_submit(submit["sparkSubmitParameters"])
    assert head == ["--py-files", PY_FILES]
    # Every job key arrives exactly; the job's own keys win over extra parameters. The password is
    # not among them: the job reads it from the Secrets Manager secret they name.
    arn = conf.pop(PASSWORD_SECRET_ARN_KEY)
    assert conf == {"spark.archives": "s3://pkg-bucket/job/deps.tar.gz#deps", **req.conf}
    assert conf["spark.flint.job.type"] == "interactive"
    assert "spark.datasource.flint.auth.password" not in conf
    assert PASSWORD not in submit["sparkSubmitParameters"]
    secret = boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=arn)
    assert (secret["Name"], secret["SecretString"]) == ("async-query/prod/mys3", PASSWORD)
    assert conf["spark.sql.catalog.glue.warehouse"] == 's3://wh/a b "q" $HOME'
    assert conf["spark.flint.job.sessionId"] == SESSION_ID

    stored = emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]
    assert stored["name"] == sent["name"]
    assert stored["tags"] == sent["tags"]


@pytest.mark.parametrize(
    ("session_type", "suffix", "name", "timeout"),
    [
        (SessionType.BATCH, "", "prod:batch", 120),
        (
            SessionType.STREAMING,
            "flint_mys3_default_http_logs_skipping_index",
            "prod:streaming:flint_mys3_default_http_logs_skipping_index",
            0,
        ),
    ],
)
def test_batch_and_streaming_names_and_timeouts(
    emr: Any, app_id: str, session_type: SessionType, suffix: str, name: str, timeout: int
) -> None:
    calls = Calls(emr, "StartJobRun")
    launcher(app_id, emr).start(request(session_type, suffix=suffix))
    sent = calls.params[0]
    assert sent["name"] == name
    assert sent["executionTimeoutMinutes"] == timeout
    assert sent["tags"]["type"] == session_type.value
    _, conf = parse_submit(sent["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"])
    assert conf["spark.flint.job.type"] == session_type.value


def test_each_start_has_its_own_client_token(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "StartJobRun")
    aq = launcher(app_id, emr)
    first, second = aq.start(request()), aq.start(request())
    assert first != second
    assert calls.params[0]["clientToken"] != calls.params[1]["clientToken"]


def test_long_names_are_cut_to_the_reference_length(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "StartJobRun")
    launcher(app_id, emr).start(request(SessionType.STREAMING, suffix="x" * 400))
    assert len(calls.params[0]["name"]) == 255


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "ThrottlingException"),
        (429, "TooManyRequestsException"),
        (429, "SomethingNew"),
        (500, "InternalServerException"),
        (503, "ServiceUnavailable"),
    ],
)
def test_throttling_and_5xx_are_retried_with_one_client_token(emr: Any, app_id: str, status: int, code: str) -> None:
    calls = Calls(emr, "StartJobRun")
    fail_first(emr, "StartJobRun", [(status, code, "slow down"), (status, code, "slow down")])
    job_id = launcher(app_id, emr).start(request())
    assert len(calls.params) == 3
    assert len({p["clientToken"] for p in calls.params}) == 1
    assert emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]["jobRunId"] == job_id


def test_retries_are_bounded_by_attempts(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "StartJobRun")
    fail_first(emr, "StartJobRun", [(400, "ThrottlingException", "Rate exceeded")] * 10)
    with pytest.raises(LauncherError) as caught:
        launcher(app_id, emr, retry_attempts=3).start(request())
    assert not isinstance(caught.value, LauncherValidationError)
    # Throttling that outlasts the retries tells the client to come back later: a 429.
    assert isinstance(caught.value, LauncherThrottledError)
    assert caught.value.http_status == 429
    assert "ThrottlingException" in caught.value.message
    assert len(calls.params) == 3
    assert emrserverless_backends[DEFAULT_ACCOUNT_ID][REGION].job_runs.get(app_id, []) == []


def test_retries_are_bounded_by_time(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "StartJobRun")
    fail_first(emr, "StartJobRun", [(503, "ServiceUnavailable", "down")] * 50)
    with pytest.raises(LauncherError):
        launcher(app_id, emr, retry_attempts=50, retry_seconds=0.3, retry_initial_seconds=0.1).start(request())
    assert 2 <= len(calls.params) < 50


def test_validation_exception_is_a_400_with_the_aws_message(emr: Any, app_id: str) -> None:
    emr.stop_application(applicationId=app_id)
    emr.delete_application(applicationId=app_id)
    calls = Calls(emr, "StartJobRun")
    with pytest.raises(LauncherValidationError) as caught:
        launcher(app_id, emr).start(request())
    assert caught.value.http_status == 400
    assert f"Application {app_id} is terminated" in caught.value.message
    assert len(calls.params) == 1  # not retried


def test_error_messages_never_carry_the_password(emr: Any, app_id: str) -> None:
    fail_first(emr, "StartJobRun", [(400, "ValidationException", f"bad parameter near {PASSWORD} end")])
    with pytest.raises(LauncherValidationError) as caught:
        launcher(app_id, emr).start(request())
    assert PASSWORD not in caught.value.message
    assert "bad parameter near **** end" in caught.value.message


def test_other_errors_are_500(emr: Any, app_id: str) -> None:
    other_account_role = "arn:aws:iam::999999999999:role/elsewhere"
    aq = EmrServerlessLauncher(app_id, other_account_role, REGION, ENTRY, client=emr, retry_initial_seconds=0.01)
    with pytest.raises(LauncherError) as caught:
        aq.start(request())
    assert not isinstance(caught.value, LauncherValidationError)
    assert caught.value.http_status == 500
    assert "AccessDeniedException" in caught.value.message


def test_local_sessions_are_not_started(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "StartJobRun")
    with pytest.raises(LauncherError):
        launcher(app_id, emr).start(request(SessionType.LOCAL))
    assert calls.params == []


# -- GetJobRun ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("SUBMITTED", JobRunState.PENDING),
        ("PENDING", JobRunState.PENDING),
        ("SCHEDULED", JobRunState.PENDING),
        ("QUEUED", JobRunState.PENDING),
        ("RUNNING", JobRunState.RUNNING),
        ("SUCCESS", JobRunState.SUCCESS),
        ("FAILED", JobRunState.FAILED),
        ("CANCELLING", JobRunState.CANCELLED),
        ("CANCELLED", JobRunState.CANCELLED),
    ],
)
def test_describe_maps_job_run_states(emr: Any, app_id: str, raw: str, expected: JobRunState) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    run = emrserverless_backends[DEFAULT_ACCOUNT_ID][REGION].get_job_run(app_id, job_id)
    run.state = raw
    run.state_details = f"details of {raw}"
    calls = Calls(emr, "GetJobRun")
    described = aq.describe(job_id)
    assert described.job_id == job_id
    assert described.state == expected
    assert described.details == f"details of {raw}"
    assert calls.params == [{"applicationId": app_id, "jobRunId": job_id}]


def test_describe_of_an_unknown_job_is_unknown(emr: Any, app_id: str) -> None:
    launcher(app_id, emr).start(request())
    described = launcher(app_id, emr).describe("00notajobrun")
    assert described.state == JobRunState.UNKNOWN
    assert "ResourceNotFoundException" in described.details


def test_describe_retries_throttling(emr: Any, app_id: str) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    calls = Calls(emr, "GetJobRun")
    fail_first(emr, "GetJobRun", [(429, "TooManyRequestsException", "slow down")])
    assert aq.describe(job_id).state == JobRunState.SUCCESS  # moto's job runs finish at once
    assert len(calls.params) == 2


# -- CancelJobRun ------------------------------------------------------------------------------


def test_cancel_cancels_the_job_run(emr: Any, app_id: str) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    calls = Calls(emr, "CancelJobRun")
    aq.cancel(job_id)
    assert calls.params == [{"applicationId": app_id, "jobRunId": job_id}]
    assert emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]["state"] == "CANCELLED"
    assert aq.describe(job_id).state == JobRunState.CANCELLED


def test_cancel_of_a_gone_job_is_logged_not_raised(emr: Any, app_id: str, caplog: pytest.LogCaptureFixture) -> None:
    aq = launcher(app_id, emr)
    aq.start(request())
    with caplog.at_level(logging.INFO, logger="async_query.launcher.emr"):
        aq.cancel("00notajobrun")
    assert "00notajobrun needs no cancel" in caplog.text


def test_cancel_of_a_finished_job_is_logged_not_raised(emr: Any, app_id: str, caplog: pytest.LogCaptureFixture) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    fail_first(emr, "CancelJobRun", [(400, "ValidationException", "Job run is in terminal state SUCCESS")])
    with caplog.at_level(logging.INFO, logger="async_query.launcher.emr"):
        aq.cancel(job_id)
    assert "terminal state" in caplog.text


def test_cancel_retries_throttling_briefly(emr: Any, app_id: str) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    calls = Calls(emr, "CancelJobRun")
    fail_first(emr, "CancelJobRun", [(400, "ThrottlingException", "Rate exceeded")])
    aq.cancel(job_id)
    assert len(calls.params) == 2
    assert emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]["state"] == "CANCELLED"


def test_cancel_raises_other_failures(emr: Any, app_id: str) -> None:
    aq = launcher(app_id, emr)
    job_id = aq.start(request())
    fail_first(emr, "CancelJobRun", [(403, "AccessDeniedException", "not allowed")])
    with pytest.raises(LauncherError, match="AccessDeniedException"):
        aq.cancel(job_id)


# -- quoting and the datasource factory -------------------------------------------------------


def test_conf_values_round_trip_through_shell_splitting() -> None:
    values = ["plain", "", "a b", 'q"uote', "back\\slash", "$HOME `x`", "tab\there", "ünï €", "k=v=w", "'single'"]
    conf = {f"spark.k{i}": v for i, v in enumerate(values)}
    words = shlex.split(" ".join(conf_parameters(conf)))
    assert words[0::2] == ["--conf"] * len(values)
    assert [w.partition("=")[2] for w in words[1::2]] == values
    assert quote_value("s3://b/p/deps.tar.gz#deps") == "s3://b/p/deps.tar.gz#deps"


ENGINE = {
    "applicationId": "00abc",
    "executionRoleARN": ROLE,
    "region": "eu-west-1",
    "packageS3Uri": "s3://pkg-bucket/releases/v1/",
    "sparkSubmitParameters": "--conf spark.executor.cores=2",
}


def test_the_launcher_comes_from_the_engine_setting(aws: None) -> None:
    settings = Settings(cluster_name="prod", spark_execution_engine_config=SparkEngineConfig.model_validate(ENGINE))
    aq = launcher_from_settings(settings)
    assert aq.application_id == "00abc"
    assert aq.execution_role_arn == ROLE
    assert aq.entry_point == "s3://pkg-bucket/releases/v1/main.py"
    assert aq.py_files == "s3://pkg-bucket/releases/v1/async_query_job.zip"
    assert aq.cluster_name == "prod"
    assert aq.client.meta.region_name == "eu-west-1"
    assert aq.glue_region == "eu-west-1"
    # botocore's own retries are off: this launcher retries, with one client token per start.
    assert aq.client.meta.config.retries["total_max_attempts"] == 1
    assert aq.submit_parameters(request()).startswith(
        "--py-files s3://pkg-bucket/releases/v1/async_query_job.zip --conf spark.executor.cores=2 --conf "
    )
    aq.close()


def test_the_engine_setting_may_name_the_entry_point(aws: None) -> None:
    engine = {**ENGINE, "entryPoint": "s3://b/x.py", "packageS3Uri": ""}
    aq = launcher_from_settings(Settings(spark_execution_engine_config=SparkEngineConfig.model_validate(engine)))
    assert aq.entry_point == "s3://b/x.py"
    assert aq.py_files == ""
    assert aq.submit_parameters(request()).startswith("--conf spark.executor.cores=2 --conf ")
    aq.close()


def test_the_engine_setting_is_the_reference_s_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG", json.dumps({**ENGINE, "accountId": "1"}))
    monkeypatch.setenv("ASYNC_QUERY_EMR_EXECUTION_ROLES", "arn:aws:iam::1:role/a, arn:aws:iam::1:role/b")
    settings = Settings()
    assert settings.spark_execution_engine_config is not None
    assert settings.spark_execution_engine_config.application_id == "00abc"
    assert settings.emr_execution_roles == ["arn:aws:iam::1:role/a", "arn:aws:iam::1:role/b"]
    without_package = {k: v for k, v in ENGINE.items() if k != "packageS3Uri"}
    monkeypatch.setenv("ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG", json.dumps(without_package))
    with pytest.raises(ValueError, match="packageS3Uri"):
        Settings()


def test_a_datasource_may_name_only_a_listed_execution_role() -> None:
    other = "arn:aws:iam::123456789012:role/analysts"
    settings = Settings(
        spark_execution_engine_config=SparkEngineConfig.model_validate(ENGINE), emr_execution_roles=[other]
    )
    assert execution_role_of(datasource(), settings) == ROLE
    named = Datasource(name="mys3", connector="emr-serverless", properties={"executionRoleARN": other})
    assert execution_role_of(named, settings) == other
    hostile = Datasource(name="mys3", connector="emr-serverless", properties={"executionRoleARN": "arn:aws:iam::9:role/x"})
    with pytest.raises(LauncherValidationError, match="ASYNC_QUERY_EMR_EXECUTION_ROLES"):
        execution_role_of(hostile, settings)
    with pytest.raises(LauncherError, match="not configured"):
        execution_role_of(datasource(), Settings())


def test_a_password_is_stored_once_per_value(emr: Any, app_id: str) -> None:
    aq = launcher(app_id, emr)
    secrets = boto3.client("secretsmanager", region_name=REGION)
    first = aq.put_secret("async-query/prod/mys3", "one")
    assert aq.put_secret("async-query/prod/mys3", "one") == first
    assert len(secrets.list_secret_version_ids(SecretId=first)["Versions"]) == 1
    assert aq.put_secret("async-query/prod/mys3", "two") == first
    assert secrets.get_secret_value(SecretId=first)["SecretString"] == "two"
    assert aq.secret_name("a b:c") == "async-query/prod/a-b-c"


def test_a_job_without_a_password_names_no_secret(emr: Any, app_id: str) -> None:
    ds = datasource()
    conf, secret = job_conf(Settings(), ds, OpenSearchConfig(url="https://h:443"), SESSION_ID, SessionType.INTERACTIVE)
    calls = Calls(emr, "StartJobRun")
    launcher(app_id, emr).start(JobRequest(SESSION_ID, ds, SessionType.INTERACTIVE, conf, secret))
    _, sent = parse_submit(calls.params[0]["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"])
    assert PASSWORD_SECRET_ARN_KEY not in sent


def test_the_job_reads_the_password_from_the_secret(emr: Any, app_id: str) -> None:
    from flint_repl_job.config import JobConfig

    calls = Calls(emr, "StartJobRun")
    launcher(app_id, emr).start(request())
    _, conf = parse_submit(calls.params[0]["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"])
    cfg = JobConfig.load(conf.get, ["query_execution_result_mys3"], {})
    assert (cfg.opensearch.auth, cfg.opensearch.username, cfg.opensearch.password) == ("basic", "admin", PASSWORD)


# -- the health check, and the metrics of its calls --------------------------------------------------


def test_the_health_check_is_one_get_application(emr: Any, app_id: str) -> None:
    calls = Calls(emr, "GetApplication")
    assert launcher(app_id, emr).check() is None
    assert len(calls.params) == 1 and calls.params[0] == {"applicationId": app_id}
    problem = launcher("00fakeapplication", emr).check()
    assert problem is not None and problem.startswith("EMR Serverless GetApplication failed")
    assert PASSWORD not in problem


def test_failed_calls_are_counted_under_the_reference_s_names(emr: Any, app_id: str) -> None:
    from async_query import metrics
    from async_query.stats import Stats

    kept, stats = metrics.stats, Stats(interval_s=1)
    metrics.stats = stats
    try:
        fail_first(emr, "StartJobRun", [(400, "ValidationException", "bad")])
        with pytest.raises(LauncherValidationError):
            metrics.launcher_call(launcher(app_id, emr), "start", lambda: launcher(app_id, emr).start(request()))
        failed = stats.rolling["emr_start_job_request_failure_count"]
        assert sum(failed._counts.values()) == 1
        assert sum(stats.rolling["emr_get_job_request_failure_count"]._counts.values()) == 0
    finally:
        metrics.stats = kept
    refused = {
        labels["outcome"]: value
        for labels, value in metrics.samples(metrics.LAUNCHER_CALLS, "_count")
        if labels["operation"] == "StartJobRun"
    }
    assert refused.get("refused", 0) >= 1
