"""The plugin<->job contract (``query_core.jobconf``): one table of conf keys and defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from async_query.datasources import Datasource
from async_query.launcher.base import job_conf
from async_query.settings import Settings
from flint_repl_job.config import PASSWORD_ENV, JobConfig
from query_core import jobconf
from query_core.config import OpenSearchConfig
from query_core.jobconf import DEFAULTS, KEYS, SETTINGS, JobConf, JobConfError, read_conf, render_conf
from query_core.states import SessionType
from query_core.validation import StatementLimits

#: The keys docs/job.md names (the reference's).
REFERENCE_KEYS = {
    "spark.flint.job.sessionId",
    "spark.flint.job.requestIndex",
    "spark.flint.datasource.name",
    "spark.flint.job.type",
    "spark.flint.job.query",
    "spark.flint.job.queryId",
    "spark.datasource.flint.host",
    "spark.datasource.flint.port",
    "spark.datasource.flint.scheme",
    "spark.datasource.flint.auth",
    "spark.datasource.flint.auth.username",
    "spark.datasource.flint.auth.password",
    "spark.datasource.flint.region",
    "spark.flint.deployment.excludeJobs",
    "spark.flint.job.inactivityLimitMillis",
    "spark.flint.job.queryExecutionTimeoutSec",
    "spark.flint.job.queryWaitTimeoutMillis",
    "spark.flint.job.queryLoopExecutionFrequency",
    "spark.flint.index.checkpointLocation.rootDir",
    "spark.flint.index.checkpoint.mandatory",
    "spark.flint.job.externalScheduler.enabled",
    "spark.flint.job.externalScheduler.interval",
}
#: This product's additions.
PRODUCT_KEYS = {
    "spark.flint.job.quietLoopAfterMillis",
    "spark.flint.job.quietLoopExecutionFrequency",
    "spark.datasource.flint.verifyCerts",
    "spark.datasource.flint.peerUid",
    "spark.datasource.flint.auth.passwordSecretArn",
    "spark.flint.job.heartbeatIntervalMillis",
    "spark.flint.job.heartbeatIdleIntervalMillis",
    "spark.flint.job.heartbeatStreamingIntervalMillis",
    "spark.flint.job.streamCheckIntervalMillis",
    "spark.flint.job.streamIdlePollMillis",
    "spark.flint.job.searchIntervalMillis",
    "spark.flint.job.sessionWaitMillis",
    "spark.flint.job.indexRetryAttempts",
    "spark.flint.job.indexRetrySeconds",
    "spark.flint.job.indexRequestTimeoutSeconds",
    "spark.flint.validation.deniedElements",
    "spark.flint.validation.functionTable",
    "spark.flint.validation.warehouseRoot",
    "spark.flint.validation.checkpointRoot",
    "spark.flint.job.maxResultRows",
    "spark.flint.job.maxResultBytes",
    "spark.flint.job.resultChunkRows",
    "spark.flint.job.resultChunkBytes",
    "spark.flint.job.maxStatementChars",
    "spark.flint.job.maxStatementDepth",
    "spark.flint.job.maxPplChars",
    "spark.flint.job.maxStatementTokens",
    "spark.flint.job.statementPrepareTimeoutSec",
    "spark.flint.job.reportCatalogChanges",
    "spark.flint.job.poolSlot",
    "spark.flint.job.poolIdleLimitMillis",
    "spark.flint.job.externalScheduler.minInterval",
}
DOCUMENTED = REFERENCE_KEYS | PRODUCT_KEYS

REQUIRED = JobConf(session_id="c2Vzc2lvbmxvY2Fs", datasource="mys3")

#: Every setting away from its default.
EVERYTHING = JobConf(
    session_id="c2Vzc2lvbmxvY2Fs",
    datasource="mys3",
    request_index=".query_execution_request_custom",
    job_type=SessionType.STREAMING,
    query="CREATE INDEX i ON t (c) WITH (auto_refresh = true)",
    query_id="cXVlcnlpZG15czM=",
    exclude_jobs=("run-0", "run-00"),
    pool_slot="pool-0123456789abcdef-1",
    pool_idle_limit_ms=90_000,
    host="search.example.com",
    port=9443,
    scheme="https",
    auth="basic",
    username="admin",
    password="s3cret, with = signs",
    password_secret_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:aq-AbCdEf",
    region="eu-west-1",
    verify_certs=False,
    peer_uid=997,
    inactivity_limit_ms=5_000,
    query_execution_timeout_s=60,
    query_wait_timeout_ms=7_000,
    loop_frequency_ms=25,
    quiet_loop_after_ms=4_000,
    quiet_loop_frequency_ms=200,
    heartbeat_running_ms=500,
    heartbeat_idle_ms=9_000,
    heartbeat_streaming_ms=3_000,
    stream_check_ms=400,
    stream_idle_poll_ms=120,
    checkpoint_root="s3://bucket/checkpoints",
    checkpoint_mandatory=False,
    search_interval_ms=250,
    session_wait_ms=12_000,
    index_retry_attempts=7,
    index_retry_seconds=12.5,
    index_request_timeout_seconds=2.5,
    validation_denied=("FILE", "MISC_FUNCTIONS"),
    validation_functions="reference",
    validation_warehouse_root="file:/data/warehouse",
    validation_checkpoint_root="/data/checkpoints",
    max_statement_chars=5_000,
    max_statement_depth=40,
    max_ppl_chars=3_000,
    max_statement_tokens=900,
    statement_prepare_timeout_s=9,
    max_result_rows=500,
    max_result_bytes=65_536,
    result_chunk_rows=100,
    result_chunk_bytes=4_096,
    report_catalog_changes=False,
    external_scheduler_enabled=True,
    external_scheduler_interval="15 minutes",
    external_scheduler_min_interval="2 minutes",
)


def test_every_field_of_the_round_trip_config_is_away_from_its_default() -> None:
    # Guards the round trip below: a new setting must be added to EVERYTHING.
    same = [f.name for f in dataclasses.fields(JobConf) if getattr(EVERYTHING, f.name) == getattr(DEFAULTS, f.name)]
    assert same == []


def test_round_trip() -> None:
    rendered = render_conf(EVERYTHING)
    assert all(isinstance(v, str) for v in rendered.values())
    assert read_conf(rendered.get) == EVERYTHING


def test_defaults_round_trip() -> None:
    rendered = render_conf(REQUIRED)
    assert read_conf(rendered.get) == REQUIRED
    # ... and the job reads the same from no optional key at all
    assert read_conf({"spark.flint.job.sessionId": "c2Vzc2lvbmxvY2Fs", "spark.flint.datasource.name": "mys3"}.get) == (
        REQUIRED
    )


def test_the_reference_defaults() -> None:
    assert DEFAULTS.job_type is SessionType.INTERACTIVE
    assert DEFAULTS.inactivity_limit_ms == 180_000
    assert DEFAULTS.query_execution_timeout_s == 30 * 60
    assert DEFAULTS.query_wait_timeout_ms == 10 * 60 * 1000
    assert DEFAULTS.loop_frequency_ms == 100
    assert DEFAULTS.scheme == "http" and DEFAULTS.auth == "noauth"
    assert REQUIRED.effective_port == 9200
    assert dataclasses.replace(REQUIRED, scheme="https").effective_port == 443
    assert REQUIRED.effective_request_index == ".query_execution_request_mys3"


def test_every_key_appears_once() -> None:
    keys = [row.key for row in SETTINGS]
    assert len(keys) == len(set(keys)) == len(KEYS)
    assert [row.field for row in SETTINGS] == [f.name for f in dataclasses.fields(JobConf)]
    for row in SETTINGS:
        assert jobconf.setting(row.key) == row
        assert jobconf.key_of(row.field) == row.key


def test_the_keys_are_exactly_the_documented_set() -> None:
    assert set(KEYS) == DOCUMENTED
    assert set(render_conf(EVERYTHING)) == DOCUMENTED
    assert jobconf.REQUIRED_KEYS == {"spark.flint.job.sessionId", "spark.flint.datasource.name"}
    assert jobconf.SECRET_KEYS == {"spark.datasource.flint.auth.password"} == {jobconf.PASSWORD_KEY}


def test_empty_optional_settings_are_not_rendered() -> None:
    rendered = render_conf(REQUIRED)
    assert set(DOCUMENTED) - set(rendered) == {
        "spark.flint.job.requestIndex",
        "spark.flint.job.query",
        "spark.flint.job.queryId",
        "spark.flint.deployment.excludeJobs",
        "spark.datasource.flint.port",
        "spark.datasource.flint.auth.username",
        "spark.datasource.flint.auth.password",
        "spark.datasource.flint.auth.passwordSecretArn",
        "spark.flint.index.checkpointLocation.rootDir",
        "spark.flint.validation.deniedElements",
        "spark.flint.validation.warehouseRoot",
        "spark.flint.validation.checkpointRoot",
        "spark.flint.job.poolSlot",
        "spark.flint.job.poolIdleLimitMillis",
        "spark.datasource.flint.peerUid",
    }
    assert rendered["spark.flint.job.queryLoopExecutionFrequency"] == "100"
    assert rendered["spark.datasource.flint.verifyCerts"] == "true"


def test_the_password_stays_out_of_repr() -> None:
    assert "s3cret" not in repr(EVERYTHING)


@pytest.mark.parametrize("missing", sorted(jobconf.REQUIRED_KEYS))
@pytest.mark.parametrize("value", [None, ""])
def test_missing_required_key(missing: str, value: str | None) -> None:
    conf: dict[str, str | None] = {**render_conf(REQUIRED), missing: value}
    with pytest.raises(JobConfError, match=f"required.*{missing}"):
        read_conf(conf.get)


def test_every_missing_required_key_is_named() -> None:
    empty: dict[str, str] = {}
    with pytest.raises(JobConfError) as raised:
        read_conf(empty.get)
    assert "spark.flint.job.sessionId" in str(raised.value)
    assert "spark.flint.datasource.name" in str(raised.value)


@pytest.mark.parametrize("name", ["session_id", "datasource"])
def test_a_required_setting_is_not_rendered_empty(name: str) -> None:
    blank: dict[str, Any] = {name: ""}
    with pytest.raises(JobConfError, match=jobconf.key_of(name)):
        render_conf(dataclasses.replace(REQUIRED, **blank))


def test_an_unknown_key_is_a_clear_error() -> None:
    with pytest.raises(JobConfError, match=r"unknown job conf key 'spark.flint.job.inactivityLimitMilis'"):
        jobconf.setting("spark.flint.job.inactivityLimitMilis")
    with pytest.raises(JobConfError, match="unknown job conf setting 'inactivity_ms'"):
        jobconf.key_of("inactivity_ms")
    bad: dict[str, Any] = {"inactivity_ms": 5}
    with pytest.raises(TypeError):
        JobConf(**bad)


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("spark.flint.job.inactivityLimitMillis", "soon", "an integer"),
        ("spark.datasource.flint.port", "https", "an integer"),
        ("spark.flint.job.indexRetrySeconds", "long", "a number"),
        ("spark.datasource.flint.verifyCerts", "maybe", "true or false"),
        ("spark.flint.job.type", "nonsense", "one of interactive, batch, streaming"),
    ],
)
def test_a_bad_value_names_its_key(key: str, value: str, kind: str) -> None:
    conf = {**render_conf(REQUIRED), key: value}
    with pytest.raises(JobConfError) as raised:
        read_conf(conf.get)
    assert str(raised.value).startswith(f"{key}={value!r} is not {kind}")
    assert isinstance(raised.value, ValueError)


def test_the_exclude_list_ignores_blanks() -> None:
    conf = {**render_conf(REQUIRED), "spark.flint.deployment.excludeJobs": "run-0, ,run-00,"}
    assert read_conf(conf.get).exclude_jobs == ("run-0", "run-00")


def test_the_job_config_defaults_are_the_contract_defaults() -> None:
    defaulted = [f for f in dataclasses.fields(JobConfig) if f.default is not dataclasses.MISSING]
    shared = [f for f in defaulted if f.name in {row.field for row in SETTINGS}]
    assert len(shared) == 31
    for f in shared:
        assert f.default == getattr(DEFAULTS, f.name), f.name


def test_the_plugin_settings_differ_from_the_job_defaults_only_deliberately() -> None:
    """Where the plugin's default differs from the job's, the plugin sends its own (see below)."""
    plugin = {
        "inactivity_limit_ms": "inactivity_limit_ms",
        "query_execution_timeout_s": "query_execution_timeout_s",
        "query_wait_timeout_ms": "query_wait_timeout_ms",
        "loop_frequency_ms": "loop_frequency_ms",
        "quiet_loop_after_ms": "quiet_loop_after_ms",
        "quiet_loop_frequency_ms": "quiet_loop_frequency_ms",
        "heartbeat_running_ms": "heartbeat_running_ms",
        "heartbeat_idle_ms": "heartbeat_idle_ms",
        "stream_idle_poll_ms": "stream_idle_poll_ms",
        "job_index_retry_seconds": "index_retry_seconds",
        "job_index_request_timeout_s": "index_request_timeout_seconds",
        "max_result_rows": "max_result_rows",
        "max_result_bytes": "max_result_bytes",
        "result_chunk_rows": "result_chunk_rows",
        "result_chunk_bytes": "result_chunk_bytes",
        "max_ppl_chars": "max_ppl_chars",
    }
    differing = {
        name for name, setting in plugin.items() if Settings.model_fields[name].default != getattr(DEFAULTS, setting)
    }
    assert differing == {"loop_frequency_ms"}


def plugin_settings() -> Settings:
    return Settings(
        inactivity_limit_ms=5_000,
        query_execution_timeout_s=60,
        query_wait_timeout_ms=7_000,
        loop_frequency_ms=50,
        quiet_loop_after_ms=3_000,
        quiet_loop_frequency_ms=300,
        heartbeat_running_ms=500,
        heartbeat_idle_ms=9_000,
        job_index_retry_seconds=12.5,
        job_index_request_timeout_s=2.5,
        max_result_rows=500,
        max_result_bytes=65_536,
        result_chunk_rows=100,
        result_chunk_bytes=4_096,
        max_query_chars=5_000,
        max_statement_depth=40,
        max_statement_tokens=900,
        statement_prepare_timeout_s=9,
        external_scheduler_enabled=True,
        external_scheduler_interval="10 minutes",
        external_scheduler_min_interval="2 minutes",
    )


def test_what_the_plugin_sends_is_what_the_job_reads() -> None:
    settings = plugin_settings()
    opensearch = OpenSearchConfig(
        url="https://search.example.com:9443",
        auth="basic",
        username="admin",
        password="pw",
        region="eu-west-1",
        verify_certs=False,
    )
    ds = Datasource(name="mys3", spark_conf={"spark.sql.catalog.glue.warehouse": "s3://wh"})
    conf, secret = job_conf(settings, ds, opensearch, "c2Vzc2lvbmxvY2Fs", SessionType.INTERACTIVE)
    assert secret == {"spark.datasource.flint.auth.password": "pw"}
    assert "spark.datasource.flint.auth.password" not in conf
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.catalog.glue.warehouse"] == "s3://wh"
    assert {k for k in conf if k in KEYS} == DOCUMENTED - {
        "spark.flint.job.query",
        "spark.flint.job.queryId",
        "spark.flint.deployment.excludeJobs",
        "spark.datasource.flint.auth.password",
        "spark.datasource.flint.auth.passwordSecretArn",
        "spark.flint.index.checkpointLocation.rootDir",
        "spark.flint.validation.warehouseRoot",
        "spark.flint.validation.checkpointRoot",
        "spark.flint.job.poolSlot",
        "spark.flint.job.poolIdleLimitMillis",
        "spark.datasource.flint.peerUid",  # a remote cluster's: none
    }
    # the local launcher passes the password in the environment, EMR Serverless as a conf key
    for plain, env in (({**conf, **secret}, {}), (conf, {PASSWORD_ENV: "pw"})):
        cfg = JobConfig.load(plain.get, ["query_execution_result_mys3"], env)
        assert cfg.session_id == "c2Vzc2lvbmxvY2Fs"
        assert cfg.datasource == "mys3"
        assert cfg.request_index == ".query_execution_request_mys3"
        assert cfg.job_type is SessionType.INTERACTIVE
        assert cfg.opensearch.url == "https://search.example.com:9443"
        assert (cfg.opensearch.auth, cfg.opensearch.username, cfg.opensearch.password) == ("basic", "admin", "pw")
        assert cfg.opensearch.region == "eu-west-1"
        assert cfg.opensearch.verify_certs is False
        assert cfg.opensearch.retry_seconds == 12.5
        assert cfg.opensearch.request_timeout == 2.5
        assert cfg.inactivity_limit_ms == 5_000
        assert cfg.query_execution_timeout_s == 60
        assert cfg.query_wait_timeout_ms == 7_000
        assert cfg.loop_frequency_ms == 50
        assert (cfg.quiet_loop_after_ms, cfg.quiet_loop_frequency_ms) == (3_000, 300)
        assert cfg.statement_limits == StatementLimits(5_000, 40, max_tokens=900)
        assert cfg.statement_prepare_timeout_s == 9
        assert cfg.heartbeat_running_ms == 500
        assert cfg.heartbeat_idle_ms == 9_000
        assert (cfg.max_result_rows, cfg.max_result_bytes) == (500, 65_536)
        assert (cfg.result_chunk_rows, cfg.result_chunk_bytes) == (100, 4_096)
        assert cfg.scheduler == settings.scheduler_policy


def test_a_datasource_s_spark_conf_cannot_lift_the_caps_of_results() -> None:
    """The caps keep a result within what the driver and the index can hold: a datasource's Spark
    conf (which its owner writes) does not change them, the plugin's settings do."""
    lifted = {
        "spark.flint.job.maxResultRows": "999999999",
        "spark.flint.job.maxResultBytes": "999999999999",
        "spark.flint.job.resultChunkRows": "999999999",
        "spark.flint.job.resultChunkBytes": "999999999999",
    }
    ds = Datasource(name="mys3", spark_conf={**lifted, "spark.executor.memory": "2g"})
    conf, _ = job_conf(plugin_settings(), ds, OpenSearchConfig(), "sid", SessionType.INTERACTIVE)
    assert conf["spark.executor.memory"] == "2g"
    assert {key: conf[key] for key in lifted} == {
        "spark.flint.job.maxResultRows": "500",
        "spark.flint.job.maxResultBytes": "65536",
        "spark.flint.job.resultChunkRows": "100",
        "spark.flint.job.resultChunkBytes": "4096",
    }


def test_the_plugin_sends_its_loop_frequency_explicitly() -> None:
    conf, _ = job_conf(
        Settings(loop_frequency_ms=50), Datasource(name="mys3"), OpenSearchConfig(), "sid", SessionType.INTERACTIVE
    )
    assert conf["spark.flint.job.queryLoopExecutionFrequency"] == "50"


@pytest.mark.parametrize(
    ("auth", "password", "secret"),
    [
        ("noauth", "", {}),
        ("sigv4", "ignored", {}),
        ("basic", "", {"spark.datasource.flint.auth.password": ""}),
        ("basic", "pw", {"spark.datasource.flint.auth.password": "pw"}),
    ],
)
def test_the_password_is_kept_apart(auth: Any, password: str, secret: dict[str, str]) -> None:
    opensearch = OpenSearchConfig(auth=auth, username="admin", password=password)
    conf, got = job_conf(Settings(), Datasource(name="mys3"), opensearch, "sid", SessionType.INTERACTIVE)
    assert got == secret
    assert "spark.datasource.flint.auth.password" not in conf
    assert ("spark.datasource.flint.auth.username" in conf) is (auth == "basic")


def test_the_index_request_timeouts_are_settings_of_plugin_and_job() -> None:
    assert Settings().opensearch("http://127.0.0.1:9200").request_timeout == 10.0
    settings = Settings(opensearch_request_timeout_s=2.0, job_index_request_timeout_s=4.0)
    assert settings.opensearch("http://127.0.0.1:9200").request_timeout == 2.0
    conf, _ = job_conf(
        settings, Datasource(name="ds"), settings.opensearch("http://127.0.0.1:9200"), "c2lk", SessionType.INTERACTIVE
    )
    assert conf["spark.flint.job.indexRequestTimeoutSeconds"] == "4.0"
