"""The job's configuration from Spark conf keys (docs/job.md)."""

from __future__ import annotations

import pytest

from flint_repl_job.config import PASSWORD_ENV, JobConfig
from query_core.states import SessionType

REQUIRED = {"spark.flint.job.sessionId": "c2Vzc2lvbmxvY2Fs", "spark.flint.datasource.name": "mys3"}
EMR_ENV = {"SERVERLESS_EMR_VIRTUAL_CLUSTER_ID": "app-1", "SERVERLESS_EMR_JOB_ID": "run-1"}


def load(conf: dict[str, str], argv: list[str] | None = None, env: dict[str, str] | None = None) -> JobConfig:
    return JobConfig.load(
        conf.get, ["query_execution_result_mys3"] if argv is None else argv, {} if env is None else env
    )


def test_defaults() -> None:
    cfg = load(REQUIRED)
    assert cfg.session_id == "c2Vzc2lvbmxvY2Fs"
    assert cfg.datasource == "mys3"
    assert cfg.result_index == "query_execution_result_mys3"
    assert cfg.request_index == ".query_execution_request_mys3"
    assert cfg.job_type is SessionType.INTERACTIVE
    assert cfg.query == "" and cfg.query_id == ""
    assert cfg.exclude_jobs == ()
    # the reference's defaults
    assert cfg.inactivity_limit_ms == 180_000
    assert cfg.query_execution_timeout_s == 1_800
    assert cfg.query_wait_timeout_ms == 600_000
    assert cfg.loop_frequency_ms == 100
    # the connection
    assert cfg.opensearch.url == "http://127.0.0.1:9200"
    assert cfg.opensearch.auth == "noauth"
    assert cfg.opensearch.password == ""
    assert cfg.opensearch.region == "us-east-1"
    assert cfg.opensearch.verify_certs is True
    # ids unknown outside EMR Serverless and the local launcher
    assert cfg.application_id == "unknown" and cfg.job_id == "unknown"


def test_every_key() -> None:
    conf = {
        **REQUIRED,
        "spark.flint.job.requestIndex": ".query_execution_request_custom",
        "spark.flint.job.type": "batch",
        "spark.flint.job.query": "CREATE INDEX i ON t (c)",
        "spark.flint.job.queryId": "cXVlcnlpZG15czM=",
        "spark.datasource.flint.host": "search.example.com",
        "spark.datasource.flint.port": "9443",
        "spark.datasource.flint.scheme": "https",
        "spark.datasource.flint.auth": "basic",
        "spark.datasource.flint.auth.username": "admin",
        "spark.datasource.flint.auth.password": "from-conf",
        "spark.datasource.flint.region": "eu-west-1",
        "spark.flint.deployment.excludeJobs": "run-0,run-00",
        "spark.flint.job.inactivityLimitMillis": "5000",
        "spark.flint.job.queryExecutionTimeoutSec": "60",
        "spark.flint.job.queryWaitTimeoutMillis": "7000",
        "spark.flint.job.queryLoopExecutionFrequency": "25",
    }
    cfg = load(conf, argv=["query_execution_result_custom"], env={**EMR_ENV, PASSWORD_ENV: "from-env"})
    assert cfg.request_index == ".query_execution_request_custom"
    assert cfg.result_index == "query_execution_result_custom"
    assert cfg.job_type is SessionType.BATCH
    assert cfg.query == "CREATE INDEX i ON t (c)"
    assert cfg.query_id == "cXVlcnlpZG15czM="
    assert cfg.opensearch.url == "https://search.example.com:9443"
    assert (cfg.opensearch.host, cfg.opensearch.port, cfg.opensearch.scheme) == ("search.example.com", 9443, "https")
    assert cfg.opensearch.auth == "basic"
    assert cfg.opensearch.username == "admin"
    assert cfg.opensearch.password == "from-conf"  # the conf key wins over the environment
    assert cfg.opensearch.region == "eu-west-1"
    assert cfg.exclude_jobs == ("run-0", "run-00")
    assert cfg.inactivity_limit_ms == 5000
    assert cfg.query_execution_timeout_s == 60
    assert cfg.query_wait_timeout_ms == 7000
    assert cfg.loop_frequency_ms == 25
    assert cfg.application_id == "app-1" and cfg.job_id == "run-1"


@pytest.mark.parametrize("job_type", list(SessionType))
def test_job_types(job_type: SessionType) -> None:
    assert load({**REQUIRED, "spark.flint.job.type": job_type.value}).job_type is job_type


def test_unknown_job_type_is_refused() -> None:
    with pytest.raises(ValueError):
        load({**REQUIRED, "spark.flint.job.type": "nonsense"})


def test_password_from_the_environment() -> None:
    conf = {**REQUIRED, "spark.datasource.flint.auth": "basic", "spark.datasource.flint.auth.username": "admin"}
    cfg = load(conf, env={PASSWORD_ENV: "s3cret"})
    assert PASSWORD_ENV == "FLINT_AUTH_PASSWORD"
    assert cfg.opensearch.password == "s3cret"
    assert "s3cret" not in repr(cfg.opensearch)


def test_https_default_port_and_sigv4() -> None:
    conf = {
        **REQUIRED,
        "spark.datasource.flint.scheme": "https",
        "spark.datasource.flint.host": "vpc-x.es.amazonaws.com",
        "spark.datasource.flint.auth": "sigv4",
    }
    cfg = load(conf)
    assert cfg.opensearch.url == "https://vpc-x.es.amazonaws.com:443"
    assert cfg.opensearch.auth == "sigv4"


def test_unknown_auth_falls_back_to_noauth() -> None:
    assert load({**REQUIRED, "spark.datasource.flint.auth": "kerberos"}).opensearch.auth == "noauth"


def test_verify_certs_can_be_turned_off() -> None:
    assert load({**REQUIRED, "spark.datasource.flint.verifyCerts": "false"}).opensearch.verify_certs is False


def test_the_job_retries_index_writes_for_longer_than_the_plugin() -> None:
    cfg = load(REQUIRED)
    assert cfg.opensearch.retry_seconds == 300
    cfg = load({**REQUIRED, "spark.flint.job.indexRetrySeconds": "12"})
    assert cfg.opensearch.retry_seconds == 12


def test_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVERLESS_EMR_JOB_ID", "run-from-os")
    monkeypatch.setenv(PASSWORD_ENV, "pw-from-os")
    cfg = JobConfig.load(REQUIRED.get, ["query_execution_result_mys3"])
    assert cfg.job_id == "run-from-os"
    assert cfg.opensearch.password == "pw-from-os"


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_missing_required_key(missing: str) -> None:
    conf = {k: v for k, v in REQUIRED.items() if k != missing}
    with pytest.raises(ValueError, match="required"):
        load(conf)


def test_empty_required_key_counts_as_missing() -> None:
    with pytest.raises(ValueError):
        load({**REQUIRED, "spark.flint.job.sessionId": ""})


def test_the_result_index_argument_is_required() -> None:
    with pytest.raises(ValueError, match="result index"):
        load(REQUIRED, argv=[])


def test_bad_number_is_refused() -> None:
    with pytest.raises(ValueError):
        load({**REQUIRED, "spark.flint.job.inactivityLimitMillis": "soon"})
