"""One typed settings object. Every field can be set by an environment variable named
``ASYNC_QUERY_<FIELD>`` (upper case); the OpenSearch connection also reads the plain
``OPENSEARCH_URL``, ``OPENSEARCH_USERNAME``, ``OPENSEARCH_PASSWORD`` and ``OPENSEARCH_VERIFY_CERTS``."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from async_query.embedded.node_jars import DEFAULT_REPOSITORY
from query_core.config import OpenSearchConfig
from query_core.flint.scheduling import MIN_SCHEDULED_INTERVAL_MS, IntervalError, SchedulerPolicy, interval_ms


class SparkEngineConfig(BaseModel):
    """Where EMR Serverless jobs run: the reference's ``plugins.query.executionengine.spark.config``
    (``applicationId``, ``executionRoleARN``, ``region``, ``sparkSubmitParameters``; ``accountId``
    is read and unused), and where the job's package is (``packageS3Uri``, or ``entryPoint`` and
    ``pyFiles``; docs/datasources.md)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    application_id: str = Field(alias="applicationId", min_length=1)
    execution_role_arn: str = Field(alias="executionRoleARN", min_length=1)
    region: str = Field(min_length=1)
    spark_submit_parameters: str = Field(default="", alias="sparkSubmitParameters")
    account_id: str = Field(default="", alias="accountId")
    package_s3_uri: str = Field(default="", alias="packageS3Uri")
    entry_point: str = Field(default="", alias="entryPoint")
    py_files: str = Field(default="", alias="pyFiles")

    @model_validator(mode="after")
    def _names_the_job(self) -> SparkEngineConfig:
        if not (self.package_s3_uri or self.entry_point):
            raise ValueError(
                "name where the job is: packageS3Uri (where `async-query package-job` uploaded it) or entryPoint"
            )
        return self


def _env(name: str) -> AliasChoices:
    return AliasChoices(f"ASYNC_QUERY_{name.upper()}", name.upper())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASYNC_QUERY_", extra="forbid")

    # -- the index cluster (empty URL: start the embedded index server) -------------------------
    #: The index cluster holding the request and result indexes (also ``OPENSEARCH_URL``); empty:
    #: the embedded index server under ``<data_dir>/index``.
    opensearch_url: str = Field(default="", validation_alias=_env("opensearch_url"))
    #: Basic-auth user of the index cluster (also ``OPENSEARCH_USERNAME``).
    opensearch_username: str = Field(default="", validation_alias=_env("opensearch_username"))
    #: Its password (also ``OPENSEARCH_PASSWORD``): local jobs get it through their environment,
    #: EMR Serverless jobs from a Secrets Manager secret, never on a command line.
    opensearch_password: str = Field(default="", repr=False, validation_alias=_env("opensearch_password"))
    #: Verify the index cluster's TLS certificate (also ``OPENSEARCH_VERIFY_CERTS``).
    opensearch_verify_certs: bool = Field(default=True, validation_alias=_env("opensearch_verify_certs"))
    #: A CA bundle to verify it with (also ``OPENSEARCH_CA_CERTS``).
    opensearch_ca_certs: str = Field(default="", validation_alias=_env("opensearch_ca_certs"))
    #: How the plugin authenticates to the index cluster: ``basic``, ``noauth``, ``sigv4`` (AWS), or
    #: ``basic_if_user`` (basic when a user name is set).
    opensearch_auth: str = "basic_if_user"
    #: The AWS region of ``sigv4`` authentication.
    opensearch_region: str = "us-east-1"
    #: How long a failing index call of the plugin is retried before the request is answered 503.
    opensearch_retry_seconds: float = 10.0
    #: Seconds one HTTP request of the plugin to the index cluster may take (past it: retried
    #: within ``opensearch_retry_seconds``, then a 503).
    opensearch_request_timeout_s: float = Field(default=10.0, gt=0)

    # -- where local state lives (warehouse, metastore, job logs, embedded index) --------------
    #: Where the service keeps its state: the embedded index (``index/``), the catalog of ``local``
    #: (``metastore/``, ``warehouse/``, ``checkpoints/``) and of other local datasources
    #: (``catalogs/<ds>/``), job logs (``logs/``), pid files (``jobs/``), jobs' temporary files
    #: (``tmp/<jobId>/``), the audit log and the users file; private to the service's user
    #: (docs/security.md).
    data_dir: Path = Path("var")
    #: The embedded index (no ``OPENSEARCH_URL``): an OpenSearch 2.19 node under
    #: ``<data_dir>/index``, its JVM's heap in MiB (docs/durability.md).
    index_heap_mb: int = Field(default=512, ge=256)
    #: The Maven repository the embedded index's jars are fetched from on first start (a mirror
    #: of Maven Central's).
    index_repository: str = DEFAULT_REPOSITORY
    #: Where fetched jars are kept for every later start and data directory; empty:
    #: ``$XDG_CACHE_HOME/async-query`` or ``~/.cache/async-query``.
    index_cache_dir: Path | None = None
    #: A directory that already holds the embedded index's jars (then nothing is fetched).
    index_jars_dir: Path | None = None
    #: The user the embedded index runs as when the service runs as root; empty: the system
    #: user ``async-query-index``, made at first start where there is none (docs/security.md).
    local_index_user: str = ""
    #: A JSON file of datasources; without it the one ``local`` datasource is served.
    datasources_file: Path | None = None
    #: Name of this deployment, the first part of job names (``<cluster>:interactive:<sid>``).
    cluster_name: str = "async-query"

    # -- local Spark ----------------------------------------------------------------------------
    #: The master of local datasources that name none in ``properties.master``.
    spark_master: str = "local[*]"
    #: The catalog of local datasources: ``metastore`` gives each its own Hive Metastore, shared by
    #: its jobs (tables survive sessions and restarts); ``in-memory`` gives each job its own catalog.
    local_catalog: Literal["metastore", "in-memory"] = "metastore"
    #: Heap of each embedded Hive Metastore's JVM, in MiB.
    metastore_heap_mb: int = 512
    #: Once an embedded Hive Metastore listens, it reads this many tables (batched, as a cold SHOW
    #: TABLE EXTENDED does, at most five times over a smaller catalog; nothing is kept) to warm its
    #: JVM, so that the first browse of a large database does not pay the JVM's warm-up (0: none;
    #: only with the catalog read model on).
    metastore_warmup_tables: int = 2000
    #: ``spark-submit`` to run; empty means the one installed with pyspark beside this Python.
    spark_submit: str = ""
    #: JVM options of every local job's driver (e.g. ``-XX:TieredStopAtLevel=1`` trades peak
    #: speed for a faster start; the tests use it).
    local_job_java_options: str = ""
    #: How long a cancelled local job gets to stop on SIGTERM before its process group is killed.
    local_job_stop_grace_s: float = Field(default=5.0, ge=0)
    #: Where local jobs keep the class-data sharing archive that halves their JVM's start-up
    #: (``docs/job.md``); empty: ``jvm`` in ``index_cache_dir`` (shared by every data directory), or
    #: ``<data_dir>/jvm`` where the job user cannot have that one.
    local_job_class_archive_dir: Path | None = None
    #: The user local jobs (and the metastores) run as when the service runs as root; empty:
    #: ``async-query-jobs``, a system user made at first start (not ``nobody``, whom other
    #: daemons share). A service that is not root runs them as itself (docs/security.md).
    local_job_user: str = ""
    #: Whether local jobs may run as root (``local_job_user=root``): refused unless this is set.
    local_job_allow_root: bool = False
    #: The Python local jobs run (given this installation's code by ``PYTHONPATH``); empty: this
    #: one, shown to the job user by a private view where it cannot reach it (docs/security.md).
    local_job_python: str = ""

    # -- sessions and jobs (passed to each job as spark.flint.job.* keys) ----------------------
    #: An idle interactive session's job ends after this long without a statement.
    inactivity_limit_ms: int = 180_000
    #: A statement running longer ends ``TIMEOUT``.
    query_execution_timeout_s: int = 1_800
    #: A statement waiting longer for its job ends ``FAILED``.
    query_wait_timeout_ms: int = 600_000
    #: How often an idle job reads its session document for new statements (and a running
    #: statement's document, for a cancel).
    loop_frequency_ms: int = 50
    #: After this long with nothing new (no statement to an idle session, no claim to a pool job, a
    #: statement still running), the job reads every ``quiet_loop_frequency_ms`` instead.
    quiet_loop_after_ms: int = 10_000
    quiet_loop_frequency_ms: int = 250
    #: A job's heartbeat while statements run, and when idle (milliseconds).
    heartbeat_running_ms: int = 2_000
    heartbeat_idle_ms: int = 30_000
    #: A streaming session beats this often, however many micro-batches run (carries progress).
    heartbeat_streaming_ms: int = 10_000
    #: How often a streaming job reads its index's state document (where a stop is asked).
    stream_check_ms: int = 1_000
    #: A stream whose last look at its source found nothing new looks again after this long
    #: (Spark's ``spark.sql.streaming.pollingDelay``, 10 ms by default: an idle stream without a
    #: refresh interval then costs about a fifth of a core; docs/flint.md).
    stream_idle_poll_ms: int = Field(default=250, ge=1)
    #: How long a job keeps retrying an index call before it gives up (survives index outages).
    job_index_retry_seconds: float = 300.0
    #: Seconds one HTTP request of a job to the index cluster may take (past it: retried).
    job_index_request_timeout_s: float = Field(default=10.0, gt=0)
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

    # -- the warm pool: started, idle jobs new sessions claim (docs/job.md) ----------------------
    #: Idle jobs kept started per pool (a datasource's ``warmPoolSize`` property overrides it).
    #: Unset: 1 for local Spark, 0 for EMR Serverless (an idle job there is billed).
    warm_pool_size: int | None = Field(default=None, ge=0, le=64)
    #: A pool job left unclaimed this long ends itself and the pool starts a fresh one (its
    #: credentials and catalog connections renewed).
    warm_pool_idle_s: float = Field(default=3600.0, gt=0)
    #: How often each plugin process looks after the pools (refill, silent jobs, scale-down); a
    #: claim wakes it at once.
    warm_pool_interval_s: float = Field(default=5.0, gt=0)

    # -- EMR Serverless (docs/datasources.md) ---------------------------------------------------
    #: The EMR Serverless application datasources run on (JSON, the reference's
    #: ``plugins.query.executionengine.spark.config``); unset: Spark on this machine only.
    spark_execution_engine_config: SparkEngineConfig | None = None
    #: Execution roles a datasource may name in ``executionRoleARN`` besides the configured one
    #: (comma separated in the environment).
    emr_execution_roles: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Basic-auth passwords of EMR Serverless jobs are put in AWS Secrets Manager secrets named
    #: ``<prefix>/<cluster name>/<datasource>`` (the job reads them by ARN, never from its parameters).
    emr_secret_prefix: str = "async-query"
    #: Throttling and 5xx answers of EMR Serverless calls are retried within both bounds
    #: (attempts, seconds).
    emr_retry_attempts: int = 6
    emr_retry_seconds: float = 30.0

    # -- liveness, cancellation, limits, housekeeping -----------------------------------------
    #: How long one launcher answer about a suspect session is reused (seconds).
    liveness_cache_s: float = 5.0
    #: A cancelled statement still running after this many seconds gets its session's job cancelled.
    cancel_deadline_s: float = 15.0
    #: Live interactive sessions allowed per deployment; a new one beyond it is a 429.
    max_sessions: int = 10
    #: Live interactive sessions one user may hold (their fair share; a new one beyond it is a
    #: 429); unset: half of ``max_sessions``, rounded up. The anonymous caller of ``none`` has none.
    max_sessions_per_user: int | None = Field(default=None, ge=1)
    #: Live batch and streaming jobs (index refreshes) allowed per deployment; a new one beyond it
    #: is a 429 (``docs/api.md``).
    max_refreshing_jobs: int = 5
    #: Live batch and streaming jobs one user may hold (default: half of ``max_refreshing_jobs``,
    #: rounded up): one analyst's refreshes cannot keep everyone else's out.
    max_refreshing_jobs_per_user: int | None = Field(default=None, ge=1)
    #: How long a request waits for the launcher to accept a stop (DELETE of a batch query, DROP
    #: and ALTER stopping a refresh job); past it the request goes on and the stop is retried by
    #: the cancel supervisor or reported.
    stop_job_timeout_s: float = 10.0
    #: How long ALTER to manual refresh and DROP wait for a streaming job to stop its stream when
    #: asked; past it the job is cancelled through its launcher and its session ended.
    stream_stop_timeout_s: float = 60.0
    #: The streaming housekeeper's period: it stops streams whose index or datasource is gone or
    #: disabled.
    streaming_housekeeping_interval_s: float = 900.0
    #: Live streaming sessions are searched for at least this often; each is looked at again when
    #: its own staleness limit passes, and a dead one's index fails then (``stream_watch``).
    stream_watch_interval_s: float = 10.0
    #: Index DML (DROP, ALTER to manual refresh) runs on this many threads of each plugin process.
    index_dml_workers: int = 2
    #: Index DML queries a plugin process holds at once (running or waiting for a thread); a POST
    #: beyond is a 429 with nothing written.
    index_dml_queue: int = 64
    #: An index DML query not finished this long after it was submitted is failed by the
    #: housekeeping sweep (the plugin process running it stopped).
    index_dml_timeout_s: float = 300.0
    #: An index left mid-operation (``refreshing``, ``deleting``...) with no session of its owner
    #: job to ask is repaired by the housekeeping sweep once unchanged this long (and, when it
    #: names a job, once the launcher says that job ended).
    index_op_stall_s: float = 300.0
    #: How often the housekeeping sweep runs (in one plugin process at a time, under a lease).
    housekeeping_interval_s: float = 300.0
    #: Housekeeping deletes finished requests, and results, older than these (days).
    request_retention_days: float = 30.0
    result_retention_days: float = 60.0
    #: Local job logs and pid files of jobs no longer running, not written for this many days, are
    #: deleted by housekeeping; the launcher forgets jobs that finished that long ago.
    job_files_retention_days: float = 7.0

    # -- scheduled refresh (docs/flint.md, "Scheduled refresh") ---------------------------------
    #: Auto-refresh indexes are refreshed by the service's scheduler, an incremental refresh as a
    #: batch job every ``refresh_interval`` (``scheduler_mode = 'external'``, the default), unless
    #: they ask for a stream of their own (``'internal'``) or for an interval below
    #: ``external_scheduler_min_interval``; off: every auto-refresh index streams.
    external_scheduler_enabled: bool = True
    #: The interval of a scheduled index that names none (Spark's units: ``5 minutes``, ``1 hour``).
    external_scheduler_interval: str = "5 minutes"
    #: The shortest interval the scheduler runs: an index asking for a shorter one streams, and
    #: ``scheduler_mode = 'external'`` with one is refused. At least a minute (a run starts a Spark
    #: job) unless ``external_scheduler_test_intervals`` is set.
    external_scheduler_min_interval: str = "1 minute"
    #: Let ``external_scheduler_min_interval`` go below a minute: for tests only.
    external_scheduler_test_intervals: bool = False
    #: Each plugin process looks for due and ended runs at least this often (seconds), and when the
    #: soonest run falls due.
    external_scheduler_tick_s: float = Field(default=5.0, gt=0)
    #: After repeated failures a run waits twice as long each time, up to this.
    external_scheduler_max_backoff: str = "1 hour"

    # -- the catalog read model (docs/catalog.md) -----------------------------------------------
    #: Answer OpenSearch Dashboards' browse statements from the catalog read model (false: all go to Spark).
    catalog_read_model: bool = True
    #: Without a catalog log to follow, what was fetched from a catalog is served at most this long
    #: (changes made behind the service's back show within it; changes made through it at once).
    catalog_staleness_s: float = 30.0
    #: A database listing asked for within this many seconds is fetched again in the background
    #: shortly before it would expire, so that browsing it again is answered from the cache (0: never).
    catalog_keep_warm_s: float = 300.0
    #: The read model's cache holds about this many bytes of catalog metadata in all.
    catalog_cache_bytes: int = 64 * 1024 * 1024
    #: How long one call to a catalog may take before the statement goes to Spark instead.
    catalog_timeout_s: float = 2.0
    #: At most this many connections to one Hive Metastore; a listing's batches are fetched on them at once.
    catalog_connections: int = 1
    #: Jobs record what their statements change in the catalog, for the read models of every plugin
    #: process sharing the index (whether or not this one has its read model on).
    catalog_report_changes: bool = True

    # -- datasources over REST (docs/datasources.md) --------------------------------------------
    #: At most this many datasources may be created over REST (the reference's default).
    datasources_limit: int = 20
    #: The key that seals datasource credentials in the index (any string; empty: a key kept in
    #: ``<data_dir>/datasources.key``). Plugin processes sharing an index must share it.
    datasources_master_key: str = Field(default="", repr=False)

    # -- who may call (docs/security.md) --------------------------------------------------------
    #: ``none`` (anyone, allowed only on loopback), ``basic`` (users in ``users_file``) or
    #: ``cluster`` (the caller's Authorization header checked by the index cluster's security plugin).
    auth: Literal["none", "basic", "cluster"] = "none"
    #: The users of ``basic`` (empty: ``<data_dir>/users.json``), managed by ``async-query user``.
    users_file: Path | None = None
    #: How often, at most, the service looks at the users file for a change (seconds).
    users_recheck_s: float = 1.0
    #: Holders of any of these roles are admins (comma separated in the environment).
    admin_roles: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["all_access"])
    #: How long a verified Authorization header is trusted without checking it again (seconds).
    auth_cache_s: float = 60.0
    #: At most this many verified Authorization headers are remembered (least recently used go).
    auth_cache_entries: int = 10_000
    #: Failed logins allowed from one client address within ``auth_failures_window_s`` seconds;
    #: the next request from it that needs a check is refused (429) for ``auth_block_s`` seconds,
    #: unchecked (0: no limit; docs/security.md, "Failed logins").
    auth_failures_allowed: int = Field(default=10, ge=0)
    auth_failures_window_s: float = Field(default=600.0, ge=0)
    auth_block_s: float = Field(default=300.0, ge=0)
    #: How long ``cluster`` waits for the security plugin's answer (seconds).
    auth_cluster_timeout_s: float = 5.0
    #: The proxies in front of the service whose ``X-Forwarded-For`` (and ``X-Forwarded-Proto``)
    #: are believed: addresses or networks, comma separated (``10.0.0.5, 10.1.0.0/16``). Empty:
    #: proxy headers are ignored, and a request's client is its connection's peer, for the
    #: failed-login limit and the audit log alike (docs/security.md, "Client addresses").
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: The audit log (``<data_dir>/audit/audit.log``) is rotated past this size, keeping this many.
    audit_max_bytes: int = 100_000_000
    audit_backups: int = 5

    # -- the REST layer -------------------------------------------------------------------------
    #: Open client connections per plugin process; one beyond is closed as soon as it is accepted.
    http_max_connections: int = 512
    #: Requests handled at once per plugin process; one beyond is a 503 in the error shape.
    http_max_concurrency: int = 256
    #: Seconds a request's head (request line and headers) may take to arrive, from the connection
    #: or the request's first byte; a slower connection is cut (408).
    http_header_timeout_s: float = 10.0
    #: Seconds a request's body may take to arrive after its head; a slower connection is cut.
    http_body_timeout_s: float = 60.0
    #: The largest request head accepted, in bytes (beyond: 431, and the connection is closed).
    http_max_header_bytes: int = 65_536
    #: Seconds an idle keep-alive connection is kept open.
    http_keep_alive_s: int = 5
    #: Seconds a stop waits for requests in progress before it closes their connections.
    http_shutdown_timeout_s: int = 30
    #: The longest query text a POST may carry, and the largest request body (bytes); beyond: 400.
    max_query_chars: int = 1_000_000
    max_body_bytes: int = 2_000_000
    #: How deeply a statement may nest (parentheses, operator chains, CASE, subqueries), checked on
    #: its tokens before any parser recurses: deeper is a 400 at POST, and the job refuses it too.
    max_statement_depth: int = 128
    #: The longest PPL query text: PPL is parsed in Python, about 10 ms of CPU a kilobyte.
    max_ppl_chars: int = 100_000
    #: What reading a statement may cost, in tokens (a separator inside a string, and a comment
    #: opened inside another as deep as it opens, count too; PPL gets a fifth): more is a 400 at
    #: POST, before any parser reads it, and the job refuses it too (docs/validation.md).
    max_statement_tokens: int = Field(default=25_000, gt=0)
    #: What one user's statements and results may hold in the index, in bytes, counted over the
    #: results' retention (``result_retention_days``): a POST past it is a 429 (0: no bound;
    #: docs/security.md, "What one user may store").
    max_user_index_bytes: int = Field(default=1 << 30, ge=0)
    #: Seconds a statement may spend being parsed and analyzed in the job before any Spark work of
    #: its own starts; past it, it fails alone and its session goes on (0: no limit).
    statement_prepare_timeout_s: int = 120
    #: Bytes of finished queries' replies kept in memory (they never change).
    reply_cache_bytes: int = 64 * 1024 * 1024
    #: Queries whose session and kind are remembered (ten times this many), for GET's routing.
    reply_cache_entries: int = 10_000
    #: How old a session document GET may use (milliseconds; 0 reads it with every GET). A
    #: session changes once per heartbeat; the statement itself is read by id on every GET.
    session_cache_ms: int = 250
    #: How long a POST into a session may take the session as this process last wrote it (the
    #: previous POST's pending-id signal) instead of reading it (milliseconds; 0 reads it with
    #: every POST). The signal's conditional write checks it again (async_query/pending_signals.py).
    session_reuse_ms: int = Field(default=1000, ge=0)

    # -- what operators watch (docs/metrics.md) ------------------------------------------------
    #: ``/metrics``, the stats endpoints and the request middleware; off: none of them.
    metrics_enabled: bool = True
    #: Besides admins, holders of any of these roles may read ``/metrics`` and the stats (a
    #: scraper's user need not be an admin; comma separated in the environment).
    metrics_roles: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: How often the metrics round runs (caches' counts, health gauges, the jobs' figures).
    metrics_interval_s: float = 15.0
    #: The stats' rolling counters: the count of the last whole interval, kept for a window
    #: (the reference's ``plugins.query.metrics.rolling_interval`` and ``rolling_window``).
    stats_rolling_interval_s: int = 60
    stats_rolling_window_s: int = 3600
    #: Each health check's time limit, and how long one health report is reused (seconds).
    health_timeout_s: float = 3.0
    health_cache_s: float = 5.0

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

    # -- the web console (docs/console.md) ------------------------------------------------------
    #: Serve the web console under ``/console`` (false: the path answers 404 like any unknown one).
    console_enabled: bool = True
    #: Seconds a console login lasts; the credential behind it is checked again on every request.
    console_session_s: int = Field(default=8 * 3600, gt=0)

    @field_validator("admin_roles", "emr_execution_roles", "metrics_roles", "trusted_proxies", mode="before")
    @classmethod
    def _split_roles(cls, value: object) -> object:
        if isinstance(value, str):
            return [r.strip() for r in value.split(",") if r.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=True)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an IP address or network (such as 10.0.0.5 or 10.1.0.0/16)"
                ) from None
        return value

    @model_validator(mode="after")
    def _scheduler_intervals(self) -> Settings:
        """The scheduler's intervals read as intervals; the lower bound at least a minute (but in tests)."""
        policy = self.scheduler_policy
        try:
            lowest, default = policy.min_interval_ms, interval_ms(policy.default_interval)
            interval_ms(self.external_scheduler_max_backoff)
        except IntervalError as exc:
            raise ValueError(exc.message) from None
        if lowest < MIN_SCHEDULED_INTERVAL_MS and not self.external_scheduler_test_intervals:
            raise ValueError(
                f"external_scheduler_min_interval {policy.min_interval!r} is below a minute: a scheduled run starts "
                "a Spark job (external_scheduler_test_intervals allows it, for tests)"
            )
        if default < lowest:
            raise ValueError("external_scheduler_interval is below external_scheduler_min_interval")
        return self

    @property
    def scheduler_policy(self) -> SchedulerPolicy:
        """The external scheduler, as statements are dispatched and jobs run them."""
        return SchedulerPolicy(
            self.external_scheduler_enabled, self.external_scheduler_interval, self.external_scheduler_min_interval
        )

    @property
    def sessions_per_user(self) -> int:
        """``max_sessions_per_user``, or half of ``max_sessions`` rounded up."""
        return _fair_share(self.max_sessions_per_user, self.max_sessions)

    @property
    def refreshing_jobs_per_user(self) -> int:
        """``max_refreshing_jobs_per_user``, or half of ``max_refreshing_jobs`` rounded up."""
        return _fair_share(self.max_refreshing_jobs_per_user, self.max_refreshing_jobs)

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
            request_timeout=self.opensearch_request_timeout_s,
        )


def _fair_share(per_user: int | None, deployment: int) -> int:
    """A user's limit: the one set, or half of the deployment's, rounded up (at least 1)."""
    return per_user if per_user is not None else max(1, -(-deployment // 2))
