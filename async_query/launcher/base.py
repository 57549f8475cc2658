"""The launcher interface, and the Spark conf every launcher passes to the job."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from async_query import datasource_dialect as dialect
from async_query import metrics
from async_query.catalog.bulk import TablesEndpoint
from async_query.datasources import Datasource
from async_query.launcher.glue import glue_conf, index_store_connection
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError, LauncherError
from query_core.ids import request_index
from query_core.jobconf import PASSWORD_KEY, POOL_RESULT_INDEX, JobConf, render_conf
from query_core.states import SessionType
from query_core.validation import GrammarElement, Profile, ValidationPolicy, policy_for


class JobRunState(StrEnum):
    """A job run's state as the launcher sees it (EMR Serverless job run states, simplified)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    #: The launcher no longer knows the job (for instance a local job started before a restart).
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        return self in (JobRunState.SUCCESS, JobRunState.FAILED, JobRunState.CANCELLED, JobRunState.UNKNOWN)


@dataclass(frozen=True)
class JobDescription:
    job_id: str
    state: JobRunState
    details: str = ""


@dataclass(frozen=True)
class JobRequest:
    """What a launcher needs to start the job of one session."""

    session_id: str
    datasource: Datasource
    session_type: SessionType
    #: The ``--conf`` keys (see :func:`job_conf`).
    conf: dict[str, str]
    #: Secrets kept off command lines (basic-auth password); never in its repr.
    secret_conf: dict[str, str] = field(default_factory=dict, repr=False)
    #: The job name's suffix after the session type (the index of a streaming job).
    name_suffix: str = ""
    #: A warm pool job's slot ("": the job of session ``session_id``); it has no session yet,
    #: ``datasource`` is one whose jobs start alike (docs/job.md).
    pool_slot: str = ""

    @property
    def result_index(self) -> str:
        """The job's one argument: its datasource's result index (a pool job learns it when claimed)."""
        return POOL_RESULT_INDEX if self.pool_slot else self.datasource.results

    @property
    def kind(self) -> str:
        """What the job is, for names and tags: its session type, or ``pool``."""
        return "pool" if self.pool_slot else self.session_type.value

    def job_name(self, cluster: str) -> str:
        if self.pool_slot:
            return f"{cluster}:pool:{self.pool_slot}"
        name = f"{cluster}:{self.session_type.value}"
        if self.session_type == SessionType.INTERACTIVE:
            return f"{name}:{self.session_id}"
        return f"{name}:{self.name_suffix}" if self.name_suffix else name


class Launcher(ABC):
    """Starts one Spark job per session, and stops or describes it by job id."""

    #: The application id jobs report (EMR Serverless application, or ``local``).
    application_id: str = ""
    #: True when ``describe`` is a local check, not a remote call: then a session that has not
    #: started yet is checked on every look, so a job that dies at start-up is reported at once.
    describe_is_free: bool = False
    #: Where streams whose index names no ``checkpoint_location`` keep their checkpoint ("": the
    #: index must name one, or the stream has none), and whether naming one is required.
    checkpoint_root: str = ""
    checkpoint_mandatory: bool = True
    #: Where tables live unless a datasource's Spark conf says otherwise ("": not known here).
    warehouse_root: str = ""
    #: The region of the AWS Glue catalog its jobs reach ("": none; a Glue-backed datasource's jobs
    #: then use this launcher's catalog and the service's own index connection).
    glue_region: str = ""
    #: How metrics name the launcher and its calls (``docs/metrics.md``); "": the class's name.
    kind: str = ""
    call_names: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def start(self, request: JobRequest) -> str:
        """Start the job; return its job id. Raises ``LauncherError``."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Ask the job to stop. Returns without waiting for it to stop."""

    @abstractmethod
    def describe(self, job_id: str) -> JobDescription:
        """The job's state as the launcher knows it (a remote call for EMR Serverless)."""

    def warehouse_of(self, datasource: Datasource) -> str:
        """Where ``datasource``'s tables live unless its Spark conf says otherwise ("": not known
        here). Local datasources each have their own (:mod:`async_query.embedded.catalogs`)."""
        return self.warehouse_root

    def checkpoints_of(self, datasource: Datasource) -> str:
        """Where ``datasource``'s streams keep the checkpoints their index does not place."""
        return self.checkpoint_root

    def close(self) -> None:  # noqa: B027 - optional hook, most launchers hold nothing
        """Release what the launcher holds (local jobs are stopped)."""

    def prune(self, keep_s: float) -> int:
        """Forget finished jobs and delete their files older than ``keep_s`` seconds (housekeeping);
        returns how many were removed. Launchers that keep nothing per job have nothing to do."""
        return 0

    def check(self) -> str | None:
        """A cheap look at whether jobs can be started (the health check): None when they can,
        else what is wrong."""
        return None

    def catalog_conf_for(self, datasource: Datasource) -> dict[str, str]:
        """The Spark conf keys of the catalog ``datasource``'s jobs get from this launcher (the
        catalog read model finds the catalog there, :mod:`async_query.catalog.locate`); {}: none."""
        return {}

    def tables_endpoint(self, metastore_uri: str) -> TablesEndpoint | None:
        """Where a metastore this launcher runs at ``metastore_uri`` answers bulk reads of tables
        (the catalog read model's, :mod:`async_query.catalog.bulk`); None: it runs none there."""
        return None

    def metastore_owner(self, metastore_uri: str) -> int | None:
        """The uid whose socket a metastore this launcher runs at ``metastore_uri`` listens on, for
        its clients to check before they send anything (None: not one of this launcher's)."""
        return None

    def startup_settings(self, datasource: Datasource) -> dict[str, str]:
        """What this launcher fixes when a job of ``datasource`` starts, beyond the job's conf (a
        master, a catalog, an execution role): with the conf's start-up part, it decides which
        warm pool the datasource's sessions may claim from (docs/job.md)."""
        return {}


def stop_job_within(launcher: Launcher, job_id: str, timeout_s: float) -> None:
    """``launcher.cancel(job_id)``, waiting at most ``timeout_s`` for the call to return.

    A launcher call that hangs (an unreachable EMR Serverless endpoint) must not hold a request or
    an index operation: past the bound this raises :class:`LauncherError` and the call finishes,
    or not, in the background. Any other failure is raised as a ``LauncherError`` too.
    """
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            metrics.launcher_call(launcher, "cancel", lambda: launcher.cancel(job_id))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome.append(exc)

    thread = threading.Thread(target=call, name=f"stop-{job_id}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise LauncherError(f"stopping job {job_id} did not complete within {timeout_s:g} s")
    error = outcome[0]
    if isinstance(error, AsyncQueryError):
        raise error
    if error is not None:
        raise LauncherError(f"stopping job {job_id} failed: {type(error).__name__}: {error}") from error


def default_profile(datasource: Datasource) -> Profile:
    """The deny list a datasource starts from (docs/validation.md): the reference's for its
    connector when it is the reference's kind (Glue-backed) or runs on EMR Serverless; this
    product's local default for one of its own run by local Spark."""
    if datasource.connector == dialect.SECURITY_LAKE:
        return Profile.SECURITY_LAKE
    if datasource.glue_backed or datasource.engine == dialect.EMR_SERVERLESS:
        return Profile.S3GLUE
    return Profile.LOCAL


def validation_policy(datasource: Datasource, warehouse_root: str = "", checkpoint_root: str = "") -> ValidationPolicy:
    """The statement validation policy of ``datasource`` (docs/validation.md): it starts from
    :func:`default_profile`; its ``validation.*`` properties change that. Data may be located under
    its warehouse (its Spark conf's when it names one, else the launcher's ``warehouse_root``) and
    checkpoints under the launcher's ``checkpoint_root``."""
    warehouse = dialect.allowed_spark_conf(datasource.spark_conf).get("spark.sql.warehouse.dir") or warehouse_root
    return policy_for(datasource.properties, default_profile(datasource), warehouse, checkpoint_root)


def launcher_policy(datasource: Datasource, launcher: Launcher) -> ValidationPolicy:
    """:func:`validation_policy` with the datasource's roots in the launcher that runs its jobs
    (each local datasource's own: a statement cannot locate data in another's)."""
    return validation_policy(datasource, launcher.warehouse_of(datasource), launcher.checkpoints_of(datasource))


#: Spark's JDBC connection providers (``JdbcConnectionProvider.name``): with all of them disabled,
#: no JDBC connection can be made, whatever statement or stored table asks for one.
JDBC_CONNECTION_PROVIDERS = ("basic", "db2", "mariadb", "mssql", "oracle", "postgres")


def _hardening(policy: ValidationPolicy) -> dict[str, str]:
    """Spark settings that close at Spark's level what the policy refuses: no ``${env:...}``
    substitution in statements (it would read the job's environment), no path-based tables when
    File is refused, and no JDBC connection at all when data source providers are refused (the
    second wall behind the provider allow list: a ``jdbc`` table stored in the catalog before, or
    by another datasource, cannot connect either)."""
    conf = {"spark.sql.variable.substitute": "false"}
    if policy.denies(GrammarElement.FILE):
        conf["spark.sql.runSQLOnFiles"] = "false"
    if policy.denies(GrammarElement.DATA_SOURCE):
        conf["spark.sql.sources.disabledJdbcConnProviderList"] = ",".join(JDBC_CONNECTION_PROVIDERS)
    return conf


#: Longest query passed as ``spark.flint.job.query``. The job reads its statement document by
#: ``spark.flint.job.queryId``; the query in the conf is the reference's fallback, and a longer one
#: would not fit a command line (Linux refuses an argument over 128 KiB) or EMR Serverless's
#: ``sparkSubmitParameters`` (at most 102,400 characters in all).
MAX_QUERY_IN_CONF = 32_768


def launch_conf(
    settings: Settings,
    datasource: Datasource,
    launcher: Launcher,
    opensearch: OpenSearchConfig,
    session_id: str,
    session_type: SessionType,
    **job: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """:func:`job_conf` of a job ``launcher`` starts: its checkpoint rules, validation roots and
    Glue region. ``job`` names a batch or streaming job's statement (``query_id``, ``query``), or a
    warm pool job's slot (``pool_slot``)."""
    return job_conf(
        settings,
        datasource,
        opensearch,
        session_id,
        session_type,
        checkpoint_root=launcher.checkpoint_root,
        checkpoint_mandatory=launcher.checkpoint_mandatory,
        policy=launcher_policy(datasource, launcher),
        glue_region=launcher.glue_region,
        **job,
    )


def job_conf(
    settings: Settings,
    datasource: Datasource,
    opensearch: OpenSearchConfig,
    session_id: str,
    session_type: SessionType,
    *,
    query_id: str = "",
    query: str = "",
    pool_slot: str = "",
    checkpoint_root: str = "",
    checkpoint_mandatory: bool = True,
    policy: ValidationPolicy | None = None,
    glue_region: str = "",
) -> tuple[dict[str, str], dict[str, str]]:
    """The job's Spark conf keys (``docs/job.md``, :mod:`query_core.jobconf`), and the secret ones apart.

    In order, each winning over the ones before (docs/datasources.md): the datasource's Spark conf
    (only the keys of its allow list), the Glue settings of a Glue-backed datasource when the
    launcher reaches Glue (``glue_region``; its index store is then the job's index connection,
    else ``opensearch`` is), every setting of the contract, and the statement validation policy
    ``policy`` (by default the datasource's, :func:`validation_policy`) with the Spark settings that
    enforce it. ``query_id`` and ``query`` name a batch or streaming job's statement (a query
    longer than :data:`MAX_QUERY_IN_CONF` is left out: the job reads it from the statement
    document). ``pool_slot`` makes it a warm pool job's conf, with no session yet.
    ``checkpoint_root`` and ``checkpoint_mandatory`` say where streams keep checkpoints that their
    index does not name, and whether it must name one (the launcher's choice)."""
    if policy is None:
        policy = validation_policy(datasource, checkpoint_root=checkpoint_root)
    conf = dialect.allowed_spark_conf(datasource.spark_conf)
    if glue_region and datasource.glue_backed:
        conf.update(glue_conf(datasource, glue_region))
        opensearch = index_store_connection(datasource, opensearch)
    basic = opensearch.auth == "basic"
    contract = JobConf(
        session_id=session_id,
        datasource="" if pool_slot else datasource.name,
        request_index="" if pool_slot else request_index(datasource.name),
        pool_slot=pool_slot,
        pool_idle_limit_ms=int(settings.warm_pool_idle_s * 1000) if pool_slot else None,
        job_type=session_type,
        query_id=query_id,
        query=query if len(query) <= MAX_QUERY_IN_CONF else "",
        host=opensearch.host,
        port=opensearch.port,
        scheme=opensearch.scheme,
        auth=opensearch.auth,
        username=opensearch.username if basic else "",
        password=opensearch.password if basic else "",
        region=opensearch.region,
        verify_certs=opensearch.verify_certs,
        peer_uid=opensearch.peer_uid,
        inactivity_limit_ms=settings.inactivity_limit_ms,
        query_execution_timeout_s=settings.query_execution_timeout_s,
        query_wait_timeout_ms=settings.query_wait_timeout_ms,
        loop_frequency_ms=settings.loop_frequency_ms,
        quiet_loop_after_ms=settings.quiet_loop_after_ms,
        quiet_loop_frequency_ms=settings.quiet_loop_frequency_ms,
        heartbeat_running_ms=settings.heartbeat_running_ms,
        heartbeat_idle_ms=settings.heartbeat_idle_ms,
        heartbeat_streaming_ms=settings.heartbeat_streaming_ms,
        stream_check_ms=settings.stream_check_ms,
        stream_idle_poll_ms=settings.stream_idle_poll_ms,
        checkpoint_root=checkpoint_root,
        checkpoint_mandatory=checkpoint_mandatory,
        index_retry_seconds=settings.job_index_retry_seconds,
        index_request_timeout_seconds=settings.job_index_request_timeout_s,
        max_statement_chars=settings.max_query_chars,
        max_statement_depth=settings.max_statement_depth,
        max_ppl_chars=settings.max_ppl_chars,
        max_statement_tokens=settings.max_statement_tokens,
        statement_prepare_timeout_s=settings.statement_prepare_timeout_s,
        max_result_rows=settings.max_result_rows,
        max_result_bytes=settings.max_result_bytes,
        result_chunk_rows=settings.result_chunk_rows,
        result_chunk_bytes=settings.result_chunk_bytes,
        validation_denied=tuple(sorted(element.name for element in policy.denied)),
        validation_functions=policy.function_table.value,
        validation_warehouse_root=policy.warehouse_root,
        validation_checkpoint_root=policy.checkpoint_root,
        report_catalog_changes=settings.catalog_report_changes,
        external_scheduler_enabled=settings.external_scheduler_enabled,
        external_scheduler_interval=settings.external_scheduler_interval,
        external_scheduler_min_interval=settings.external_scheduler_min_interval,
    )
    own = render_conf(contract)
    # The password goes apart, kept off command lines where the launcher can: with basic auth the
    # secret conf always holds it (even empty), and it never stays among the plain keys.
    password = own.pop(PASSWORD_KEY, "")
    secrets = {PASSWORD_KEY: password} if basic else {}
    conf.update(own)
    conf["spark.sql.session.timeZone"] = "UTC"
    conf.update(_hardening(policy))
    return conf, secrets
