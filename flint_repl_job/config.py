"""The job's configuration, read from Spark conf keys as the reference job reads them.

The keys and their defaults are the plugin<->job contract in :mod:`query_core.jobconf`; this
module adds what does not travel as a conf key: the result index (the job's one argument), the
application and job-run ids (EMR Serverless environment variables), and the password from the
environment or from AWS Secrets Manager when the conf does not carry it."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from flint_repl_job.result_stream import ResultLimits
from query_core.config import OpenSearchConfig, auth_kind
from query_core.flint.scheduling import SchedulerPolicy
from query_core.jobconf import (
    APPLICATION_ID_ENV,
    DEFAULTS,
    JOB_ID_ENV,
    PASSWORD_ENV,
    PREFIX_JOB,
    PREFIX_OS,
    Getter,
    JobConf,
    read_claimed_conf,
    read_conf,
)
from query_core.models import PoolClaim
from query_core.states import SessionType
from query_core.validation import ALLOW_ALL, StatementLimits, ValidationPolicy

__all__ = ["PASSWORD_ENV", "PREFIX_JOB", "PREFIX_OS", "Getter", "JobConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobConfig:
    session_id: str
    datasource: str
    result_index: str
    request_index: str
    job_type: SessionType = DEFAULTS.job_type
    query: str = DEFAULTS.query
    query_id: str = DEFAULTS.query_id
    application_id: str = ""
    job_id: str = ""
    exclude_jobs: tuple[str, ...] = DEFAULTS.exclude_jobs
    opensearch: OpenSearchConfig = field(default_factory=OpenSearchConfig)
    inactivity_limit_ms: int = DEFAULTS.inactivity_limit_ms
    query_execution_timeout_s: int = DEFAULTS.query_execution_timeout_s
    query_wait_timeout_ms: int = DEFAULTS.query_wait_timeout_ms
    loop_frequency_ms: int = DEFAULTS.loop_frequency_ms
    #: After this long with nothing new the loop slows to ``quiet_loop_frequency_ms`` (see
    #: :meth:`loop_pause_s`).
    quiet_loop_after_ms: int = DEFAULTS.quiet_loop_after_ms
    quiet_loop_frequency_ms: int = DEFAULTS.quiet_loop_frequency_ms
    #: Heartbeat while statements run (carries their progress) and while idle.
    heartbeat_running_ms: int = DEFAULTS.heartbeat_running_ms
    heartbeat_idle_ms: int = DEFAULTS.heartbeat_idle_ms
    #: Heartbeat of a streaming session, and how often its job reads its index's state.
    heartbeat_streaming_ms: int = DEFAULTS.heartbeat_streaming_ms
    stream_check_ms: int = DEFAULTS.stream_check_ms
    #: A stream whose last look at its source found nothing new looks again after this long.
    stream_idle_poll_ms: int = DEFAULTS.stream_idle_poll_ms
    #: Checkpoints of streams without ``checkpoint_location`` go under this directory ("": none).
    checkpoint_root: str = DEFAULTS.checkpoint_root
    checkpoint_mandatory: bool = DEFAULTS.checkpoint_mandatory
    #: How often the refresh-delayed search for waiting statements runs (the fallback path).
    search_interval_ms: int = DEFAULTS.search_interval_ms
    #: How long to wait for the session document to appear after start-up.
    session_wait_ms: int = DEFAULTS.session_wait_ms
    #: What statements may hold (the plugin checked them against it already; see docs/validation.md).
    validation: ValidationPolicy = ALLOW_ALL
    #: Statements longer or more deeply nested are refused before they are parsed (docs/validation.md).
    max_statement_chars: int = DEFAULTS.max_statement_chars
    max_statement_depth: int = DEFAULTS.max_statement_depth
    max_ppl_chars: int = DEFAULTS.max_ppl_chars
    max_statement_tokens: int = DEFAULTS.max_statement_tokens
    #: A statement parsed and analyzed longer than this (seconds; 0: no limit) fails alone.
    statement_prepare_timeout_s: int = DEFAULTS.statement_prepare_timeout_s
    #: A warm pool job's slot ("": a job started for its session), and how long it waits for a claim.
    pool_slot: str = DEFAULTS.pool_slot
    pool_idle_limit_ms: int | None = DEFAULTS.pool_idle_limit_ms
    #: Record each statement's catalog changes in the datasource's change log (docs/catalog.md).
    report_catalog_changes: bool = True
    #: How auto-refresh indexes are refreshed: by the service's scheduler, or by a stream.
    scheduler: SchedulerPolicy = DEFAULTS.scheduler_policy
    #: Results stop at these caps and are written in documents of this size (docs/results.md).
    max_result_rows: int = DEFAULTS.max_result_rows
    max_result_bytes: int = DEFAULTS.max_result_bytes
    result_chunk_rows: int = DEFAULTS.result_chunk_rows
    result_chunk_bytes: int = DEFAULTS.result_chunk_bytes

    def loop_pause_s(self, quiet_s: float) -> float:
        """How long a loop waits before it looks again, when nothing new has come for ``quiet_s``
        seconds (no statement to an idle session, no claim to a pool job, no end of the running
        statement): the loop period, then the quiet period once ``quiet_loop_after_ms`` passed.

        Each look is a read of the index; an idle job that looked every loop period cost its node
        about 4 % of a core (docs/job.md, "The loop")."""
        if quiet_s * 1000 < self.quiet_loop_after_ms:
            return self.loop_frequency_ms / 1000
        return max(self.loop_frequency_ms, self.quiet_loop_frequency_ms) / 1000

    def search_pause_s(self, quiet_s: float) -> float:
        """The search interval, stretched as :meth:`loop_pause_s` stretches the loop period (a
        search costs the node several reads by id)."""
        return self.search_interval_ms * self.loop_pause_s(quiet_s) / max(self.loop_frequency_ms, 1)

    @property
    def statement_limits(self) -> StatementLimits:
        """How long, how costly to read and how deeply nested a statement may be."""
        return StatementLimits(
            self.max_statement_chars, self.max_statement_depth, self.max_ppl_chars, self.max_statement_tokens
        )

    @property
    def result_limits(self) -> ResultLimits:
        """The caps of each result, and the size of its documents."""
        return ResultLimits(
            self.max_result_rows, self.max_result_bytes, self.result_chunk_rows, self.result_chunk_bytes
        )

    @classmethod
    def load(cls, get: Getter, argv: list[str], environ: Mapping[str, str] | None = None) -> JobConfig:
        """Read the Spark conf keys through ``get``; ``argv`` holds the result index.

        Raises ``ValueError`` (``query_core.jobconf.JobConfError``) for a missing argument, a
        missing required key or a bad value."""
        env = os.environ if environ is None else environ
        if not argv:
            raise ValueError("the result index is the job's one argument")
        return cls.from_conf(read_conf(get), argv[0], env)

    @classmethod
    def claimed(cls, get: Getter, claim: PoolClaim, environ: Mapping[str, str] | None = None) -> JobConfig:
        """A pool job's configuration once a session claimed it: its start-up keys read through
        ``get``, the session's from the claim (``query_core.jobconf.read_claimed_conf``)."""
        env = os.environ if environ is None else environ
        return cls.from_conf(read_claimed_conf(get, claim.conf), claim.result_index, env)

    @classmethod
    def from_conf(cls, conf: JobConf, result_index: str, environ: Mapping[str, str]) -> JobConfig:
        """The job's configuration from the contract's settings, its argument and its environment."""
        return cls(
            session_id=conf.session_id,
            datasource=conf.datasource,
            result_index=result_index,
            request_index=conf.effective_request_index,
            job_type=conf.job_type,
            query=conf.query,
            query_id=conf.query_id,
            application_id=environ.get(APPLICATION_ID_ENV, "unknown"),
            job_id=environ.get(JOB_ID_ENV, "unknown"),
            exclude_jobs=conf.exclude_jobs,
            opensearch=_opensearch(conf, environ),
            inactivity_limit_ms=conf.inactivity_limit_ms,
            query_execution_timeout_s=conf.query_execution_timeout_s,
            query_wait_timeout_ms=conf.query_wait_timeout_ms,
            loop_frequency_ms=conf.loop_frequency_ms,
            quiet_loop_after_ms=conf.quiet_loop_after_ms,
            quiet_loop_frequency_ms=conf.quiet_loop_frequency_ms,
            heartbeat_running_ms=conf.heartbeat_running_ms,
            heartbeat_idle_ms=conf.heartbeat_idle_ms,
            heartbeat_streaming_ms=conf.heartbeat_streaming_ms,
            stream_check_ms=conf.stream_check_ms,
            stream_idle_poll_ms=conf.stream_idle_poll_ms,
            checkpoint_root=conf.checkpoint_root,
            checkpoint_mandatory=conf.checkpoint_mandatory,
            search_interval_ms=conf.search_interval_ms,
            session_wait_ms=conf.session_wait_ms,
            validation=conf.validation_policy,
            max_statement_chars=conf.max_statement_chars,
            max_statement_depth=conf.max_statement_depth,
            max_ppl_chars=conf.max_ppl_chars,
            max_statement_tokens=conf.max_statement_tokens,
            statement_prepare_timeout_s=conf.statement_prepare_timeout_s,
            pool_slot=conf.pool_slot,
            pool_idle_limit_ms=conf.pool_idle_limit_ms,
            report_catalog_changes=conf.report_catalog_changes,
            scheduler=conf.scheduler_policy,
            max_result_rows=conf.max_result_rows,
            max_result_bytes=conf.max_result_bytes,
            result_chunk_rows=conf.result_chunk_rows,
            result_chunk_bytes=conf.result_chunk_bytes,
        )


def _opensearch(conf: JobConf, env: Mapping[str, str]) -> OpenSearchConfig:
    return OpenSearchConfig(
        url=f"{conf.scheme}://{conf.host}:{conf.effective_port}",
        auth=auth_kind(conf.auth),
        username=conf.username,
        password=conf.password or env.get(PASSWORD_ENV, "") or _secret(conf.password_secret_arn),
        region=conf.region,
        verify_certs=conf.verify_certs,
        peer_uid=conf.peer_uid,
        # The job outlives short index outages: it keeps retrying its writes for longer.
        retry_attempts=conf.index_retry_attempts,
        retry_seconds=conf.index_retry_seconds,
        request_timeout=conf.index_request_timeout_seconds,
    )


def _secret(arn: str) -> str:
    """The password held by the AWS Secrets Manager secret ``arn`` ("": none named). The job's
    role must be allowed ``secretsmanager:GetSecretValue`` on it (docs/datasources.md)."""
    if not arn:
        return ""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    region = arn.split(":")[3] if arn.count(":") >= 6 else None
    try:
        reply = boto3.client("secretsmanager", region_name=region or None).get_secret_value(SecretId=arn)
    except (BotoCoreError, ClientError) as exc:
        raise ValueError(f"cannot read the index password from secret {arn}: {type(exc).__name__}") from None
    log.info("read the index password from secret %s", arn)
    return str(reply.get("SecretString") or "")
