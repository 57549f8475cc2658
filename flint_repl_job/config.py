"""The job's configuration, read from Spark conf keys as the reference job reads them."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from query_core.config import OpenSearchConfig
from query_core.ids import request_index
from query_core.states import SessionType

PREFIX_JOB = "spark.flint.job."
PREFIX_OS = "spark.datasource.flint."
#: Environment variable the local launcher uses for the basic-auth password, so that it is not
#: visible on a command line. A Spark conf key of the same meaning wins when present.
PASSWORD_ENV = "FLINT_AUTH_PASSWORD"

Getter = Callable[[str], str | None]


@dataclass(frozen=True)
class JobConfig:
    session_id: str
    datasource: str
    result_index: str
    request_index: str
    job_type: SessionType = SessionType.INTERACTIVE
    query: str = ""
    query_id: str = ""
    application_id: str = ""
    job_id: str = ""
    exclude_jobs: tuple[str, ...] = ()
    opensearch: OpenSearchConfig = field(default_factory=OpenSearchConfig)
    inactivity_limit_ms: int = 180_000
    query_execution_timeout_s: int = 1_800
    query_wait_timeout_ms: int = 600_000
    loop_frequency_ms: int = 100
    #: Heartbeat while statements run (carries their progress) and while idle.
    heartbeat_running_ms: int = 2_000
    heartbeat_idle_ms: int = 30_000
    #: How often the refresh-delayed search for waiting statements runs (the fallback path).
    search_interval_ms: int = 1_000
    #: How long to wait for the session document to appear after start-up.
    session_wait_ms: int = 60_000

    @classmethod
    def load(cls, get: Getter, argv: list[str], environ: Mapping[str, str] | None = None) -> JobConfig:
        env = os.environ if environ is None else environ
        if not argv:
            raise ValueError("the result index is the job's one argument")

        def job(key: str, default: str = "") -> str:
            return get(PREFIX_JOB + key) or default

        def num(key: str, default: int) -> int:
            return int(job(key, str(default)))

        datasource = get("spark.flint.datasource.name") or ""
        session_id = job("sessionId")
        if not datasource or not session_id:
            raise ValueError("spark.flint.datasource.name and spark.flint.job.sessionId are required")
        return cls(
            session_id=session_id,
            datasource=datasource,
            result_index=argv[0],
            request_index=job("requestIndex", request_index(datasource)),
            job_type=SessionType(job("type", SessionType.INTERACTIVE.value)),
            query=job("query"),
            query_id=job("queryId"),
            application_id=env.get("SERVERLESS_EMR_VIRTUAL_CLUSTER_ID", "unknown"),
            job_id=env.get("SERVERLESS_EMR_JOB_ID", "unknown"),
            exclude_jobs=tuple(j for j in (get("spark.flint.deployment.excludeJobs") or "").split(",") if j),
            opensearch=_opensearch(get, env),
            inactivity_limit_ms=num("inactivityLimitMillis", 180_000),
            query_execution_timeout_s=num("queryExecutionTimeoutSec", 1_800),
            query_wait_timeout_ms=num("queryWaitTimeoutMillis", 600_000),
            loop_frequency_ms=num("queryLoopExecutionFrequency", 100),
            heartbeat_running_ms=num("heartbeatIntervalMillis", 2_000),
            heartbeat_idle_ms=num("heartbeatIdleIntervalMillis", 30_000),
            search_interval_ms=num("searchIntervalMillis", 1_000),
            session_wait_ms=num("sessionWaitMillis", 60_000),
        )


def _opensearch(get: Getter, env: Mapping[str, str]) -> OpenSearchConfig:
    def os_key(key: str, default: str = "") -> str:
        return get(PREFIX_OS + key) or default

    scheme = os_key("scheme", "http")
    host = os_key("host", "127.0.0.1")
    port = os_key("port", "443" if scheme == "https" else "9200")
    auth = os_key("auth", "noauth")
    return OpenSearchConfig(
        url=f"{scheme}://{host}:{port}",
        auth=auth if auth in ("noauth", "basic", "sigv4") else "noauth",  # type: ignore[arg-type]
        username=os_key("auth.username"),
        password=os_key("auth.password") or env.get(PASSWORD_ENV, ""),
        region=os_key("region", "us-east-1"),
        verify_certs=os_key("verifyCerts", "true").lower() != "false",
        # The job outlives short index outages: it keeps retrying its writes for longer.
        retry_attempts=int(get(PREFIX_JOB + "indexRetryAttempts") or 60),
        retry_seconds=float(get(PREFIX_JOB + "indexRetrySeconds") or 300),
    )
