"""One typed settings object. Every field can be set by an environment variable named
``ASYNC_QUERY_<FIELD>`` (upper case); the OpenSearch connection also reads the plain
``OPENSEARCH_URL``, ``OPENSEARCH_USERNAME``, ``OPENSEARCH_PASSWORD`` and ``OPENSEARCH_VERIFY_CERTS``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from query_core.config import OpenSearchConfig


def _env(name: str) -> AliasChoices:
    return AliasChoices(f"ASYNC_QUERY_{name.upper()}", name.upper())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASYNC_QUERY_", extra="forbid")

    # -- the index cluster (empty URL: start the embedded index server) -------------------------
    opensearch_url: str = Field(default="", validation_alias=_env("opensearch_url"))
    opensearch_username: str = Field(default="", validation_alias=_env("opensearch_username"))
    opensearch_password: str = Field(default="", repr=False, validation_alias=_env("opensearch_password"))
    opensearch_verify_certs: bool = Field(default=True, validation_alias=_env("opensearch_verify_certs"))
    opensearch_ca_certs: str = Field(default="", validation_alias=_env("opensearch_ca_certs"))
    opensearch_auth: str = "basic_if_user"
    opensearch_region: str = "us-east-1"
    opensearch_retry_seconds: float = 10.0

    # -- where local state lives (warehouse, metastore, job logs, embedded index) --------------
    data_dir: Path = Path("var")
    #: The embedded index's documents are written to ``<data_dir>/index`` this often (and at a
    #: graceful stop), so a crash loses at most this many seconds of writes.
    index_snapshot_interval_s: float = 2.0
    #: A JSON file of datasources; without it the one ``local`` datasource is served.
    datasources_file: Path | None = None
    #: Name of this deployment, the first part of job names (``<cluster>:interactive:<sid>``).
    cluster_name: str = "async-query"

    # -- local Spark ----------------------------------------------------------------------------
    #: The master of local datasources that name none in ``properties.master``.
    spark_master: str = "local[*]"
    #: The catalog of local datasources: ``metastore`` starts a Hive Metastore shared by all their
    #: jobs (tables survive sessions and restarts); ``in-memory`` gives each job its own catalog.
    local_catalog: Literal["metastore", "in-memory"] = "metastore"
    metastore_heap_mb: int = 512
    #: ``spark-submit`` to run; empty means the one installed with pyspark beside this Python.
    spark_submit: str = ""

    # -- sessions and jobs (passed to each job as spark.flint.job.* keys) ----------------------
    inactivity_limit_ms: int = 180_000
    query_execution_timeout_s: int = 1_800
    query_wait_timeout_ms: int = 600_000
    loop_frequency_ms: int = 50
    heartbeat_running_ms: int = 2_000
    heartbeat_idle_ms: int = 30_000
    #: A streaming session beats this often, however many micro-batches run (carries progress).
    heartbeat_streaming_ms: int = 10_000
    #: How often a streaming job reads its index's state document (where a stop is asked).
    stream_check_ms: int = 1_000
    #: How long a job keeps retrying an index call before it gives up (survives index outages).
    job_index_retry_seconds: float = 300.0
    #: A running session is stale (suspected dead) after this many missed heartbeats.
    stale_heartbeats: float = 3.0
    #: A session that has not started running within this many seconds is suspected dead.
    session_start_timeout_s: float = 300.0
    #: How many submitted statement ids a session document keeps for its job's real-time pickup.
    pending_ids_kept: int = 32
    #: A result stops at this many rows, or bytes of row text, and ends SUCCESS marked ``truncated``
    #: (``docs/results.md``); it is stored in documents of at most ``result_chunk_rows`` rows and
    #: ``result_chunk_bytes`` bytes, the first of which is what a GET without paging returns.
    max_result_rows: int = Field(default=1_000_000, gt=0)
    max_result_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    result_chunk_rows: int = Field(default=10_000, gt=0)
    result_chunk_bytes: int = Field(default=4 * 1024 * 1024, gt=0)

    # -- EMR Serverless calls (throttling and 5xx are retried within both bounds) -------------
    emr_retry_attempts: int = 6
    emr_retry_seconds: float = 30.0

    # -- liveness, cancellation, limits, housekeeping -----------------------------------------
    #: How long one launcher answer about a suspect session is reused (seconds).
    liveness_cache_s: float = 5.0
    #: A cancelled statement still running after this many seconds gets its session's job cancelled.
    cancel_deadline_s: float = 15.0
    #: Live interactive sessions allowed per deployment; a new one beyond it is a 429.
    max_sessions: int = 10
    #: Live batch and streaming jobs (index refreshes) allowed per deployment; a new one beyond it
    #: is a 429 (``docs/api.md``).
    max_refreshing_jobs: int = 5
    #: How long a request waits for the launcher to accept a stop (DELETE of a batch query, DROP
    #: and ALTER stopping a refresh job); past it the request goes on and the stop is retried by
    #: the cancel supervisor or reported.
    stop_job_timeout_s: float = 10.0
    #: How long ALTER to manual refresh and DROP wait for a streaming job to stop its stream when
    #: asked; past it the job is cancelled through its launcher and its session ended.
    stream_stop_timeout_s: float = 60.0
    #: The streaming housekeeper's period: it confirms silent streaming jobs dead (their indexes
    #: then fail), and stops streams whose index or datasource is gone or disabled.
    streaming_housekeeping_interval_s: float = 900.0
    #: Index DML (DROP, ALTER to manual refresh) runs on this many threads of each plugin process.
    index_dml_workers: int = 2
    #: An index DML query not finished this long after it was submitted is failed by the
    #: housekeeping sweep (the plugin process running it stopped).
    index_dml_timeout_s: float = 300.0
    #: An index left mid-operation (``refreshing``, ``deleting``...) with no session of its owner
    #: job to ask is repaired by the housekeeping sweep once unchanged this long (and, when it
    #: names a job, once the launcher says that job ended).
    index_op_stall_s: float = 300.0
    housekeeping_interval_s: float = 300.0
    request_retention_days: float = 30.0
    result_retention_days: float = 60.0

    # -- who may call (docs/security.md) --------------------------------------------------------
    #: ``none`` (anyone, allowed only on loopback), ``basic`` (users in ``users_file``) or
    #: ``cluster`` (the caller's Authorization header checked by the index cluster's security plugin).
    auth: Literal["none", "basic", "cluster"] = "none"
    #: The users of ``basic`` (empty: ``<data_dir>/users.json``), managed by ``async-query user``.
    users_file: Path | None = None
    #: Holders of any of these roles are admins (comma separated in the environment).
    admin_roles: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["all_access"])
    #: How long a verified Authorization header is trusted without checking it again (seconds).
    auth_cache_s: float = 60.0
    #: At most this many verified Authorization headers are remembered (least recently used go).
    auth_cache_entries: int = 10_000
    #: How long ``cluster`` waits for the security plugin's answer (seconds).
    auth_cluster_timeout_s: float = 5.0
    #: The audit log (``<data_dir>/audit/audit.log``) is rotated past this size, keeping this many.
    audit_max_bytes: int = 100_000_000
    audit_backups: int = 5

    # -- the REST layer -------------------------------------------------------------------------
    max_query_chars: int = 1_000_000
    max_body_bytes: int = 2_000_000
    #: Bytes of finished queries' replies kept in memory (they never change).
    reply_cache_bytes: int = 64 * 1024 * 1024
    #: Queries whose session and kind are remembered (ten times this many), for GET's routing.
    reply_cache_entries: int = 10_000
    #: How old a session document GET may use (milliseconds; 0 reads it with every GET). A
    #: session changes once per heartbeat; the statement itself is read by id on every GET.
    session_cache_ms: int = 250

    # -- gateway mode: every path but the service's own passes to the index cluster -------------
    #: Stand where OpenSearch Dashboards expects its cluster (``serve --gateway`` sets it too).
    gateway: bool = False
    #: Seconds to open a connection to the cluster for a passed-through request (past it: 504).
    gateway_connect_timeout_s: float = 5.0
    #: Seconds the cluster may stay silent mid-request or mid-reply (past it: 504, or the reply is
    #: cut short). Keep it above Dashboards' ``opensearch.requestTimeout`` (30 s by default).
    gateway_read_timeout_s: float = 120.0
    #: Keep-alive connections to the cluster held for passed-through requests.
    gateway_max_connections: int = 64

    @field_validator("admin_roles", mode="before")
    @classmethod
    def _split_roles(cls, value: object) -> object:
        if isinstance(value, str):
            return [r.strip() for r in value.split(",") if r.strip()]
        return value

    @property
    def users_path(self) -> Path:
        """The users file of ``basic`` authentication."""
        return self.users_file if self.users_file is not None else self.data_dir / "users.json"

    def opensearch(self, url: str | None = None) -> OpenSearchConfig:
        """The connection to the index cluster (``url`` overrides, for the embedded server)."""
        auth = self.opensearch_auth
        if auth == "basic_if_user":
            auth = "basic" if self.opensearch_username else "noauth"
        return OpenSearchConfig(
            url=url or self.opensearch_url,
            auth=auth,  # type: ignore[arg-type]
            username=self.opensearch_username,
            password=self.opensearch_password,
            region=self.opensearch_region,
            verify_certs=self.opensearch_verify_certs,
            ca_certs=self.opensearch_ca_certs,
            retry_seconds=self.opensearch_retry_seconds,
        )
