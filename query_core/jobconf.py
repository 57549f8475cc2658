"""The plugin<->job contract: every Spark conf key the plugin passes to the job, and its default.

:class:`JobConf` is the one table: one field per setting, each naming its conf key in its
metadata (a :class:`ConfKey`). The plugin renders a ``JobConf`` with :func:`render_conf`
(``async_query.launcher.base.job_conf``); the job reads it back with :func:`read_conf`
(``flint_repl_job.config.JobConfig.load``). ``read_conf(render_conf(c).get) == c`` for every
valid ``c``.

The keys are the reference's (``docs/job.md``: ``spark.flint.job.*``, ``spark.flint.datasource.name``,
``spark.datasource.flint.*``, ``spark.flint.deployment.excludeJobs``) plus this product's
additions (heartbeat intervals, index retry bounds, search interval, session wait, verifyCerts).
Defaults are the reference's where it has one; a job started without a key (by the reference
plugin, say) gets that default. The plugin sends every non-empty setting explicitly, so its own
settings win where they deliberately differ (its loop frequency, for one).

Rendering omits the *optional* settings whose value is empty (``""``, ``()``, ``None``); every
other setting is always rendered. Reading treats an absent or empty key as unset: the default,
or an error for a *required* key.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from query_core.flint.scheduling import SchedulerPolicy
from query_core.ids import request_index
from query_core.states import SessionType
from query_core.validation.elements import FunctionTable, element_named
from query_core.validation.policy import ValidationPolicy

T = TypeVar("T")

#: Reads one Spark conf key: its value, or ``None`` when it is not set (``SparkConf.get(key, None)``).
Getter = Callable[[str], str | None]

PREFIX_JOB = "spark.flint.job."
PREFIX_OS = "spark.datasource.flint."

#: Environment variable the local launcher uses for the basic-auth password, so that it is not
#: visible on a command line. The Spark conf key of the same meaning wins when present.
PASSWORD_ENV = "FLINT_AUTH_PASSWORD"
#: Environment variables EMR Serverless sets (and the local launcher too): the application id
#: and the job-run id. The job reports ``unknown`` when they are absent.
APPLICATION_ID_ENV = "SERVERLESS_EMR_VIRTUAL_CLUSTER_ID"
JOB_ID_ENV = "SERVERLESS_EMR_JOB_ID"


#: The job's package layout, as ``async-query package-job`` writes it and EMR Serverless runs it:
#: the entry file (``entryPoint``) and the code archive (``--py-files``).
ENTRY_FILE_NAME = "main.py"
CODE_ARCHIVE_NAME = "async_query_job.zip"
#: The job's package, and the file that records a local job JVM's class archive (a short job).
JOB_PACKAGE = "flint_repl_job"
WARMUP_FILE_NAME = "warmup.py"
#: A warm pool job's one argument, in place of a result index: it learns its result index when a
#: session claims it (docs/job.md).
POOL_RESULT_INDEX = "-"


def job_package_dir() -> Path:
    """Where the job's package lies, found without importing it (the plugin runs the job's files
    with ``spark-submit``; it never imports the job's code)."""
    spec = importlib.util.find_spec(JOB_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise JobConfError(f"cannot find the job's package {JOB_PACKAGE!r}")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


class JobConfError(ValueError):
    """A job conf that cannot be rendered or read: a required key missing, a bad value, an unknown key."""


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How one kind of setting is written as a conf value and read back."""

    #: What a valid value is, for error messages (``an integer``).
    kind: str
    parse: Callable[[str], T]
    render: Callable[[T], str]


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(item for item in (part.strip() for part in text.split(",")) if item)


STRING: Codec[str] = Codec("a string", str, str)
INTEGER: Codec[int] = Codec("an integer", int, str)
OPTIONAL_INTEGER: Codec[int | None] = Codec("an integer", int, str)
NUMBER: Codec[float] = Codec("a number", float, str)
BOOLEAN: Codec[bool] = Codec("true or false", _parse_bool, lambda value: "true" if value else "false")
LIST: Codec[tuple[str, ...]] = Codec("a comma-separated list", _parse_list, ",".join)
JOB_TYPE: Codec[SessionType] = Codec(
    "one of " + ", ".join(t.value for t in SessionType), SessionType, lambda value: value.value
)


@dataclass(frozen=True)
class ConfKey:
    """One row of the contract: a :class:`JobConf` field and the conf key it travels as."""

    key: str
    codec: Codec[Any]
    doc: str
    #: The job refuses to start without it (absent or empty).
    required: bool = False
    #: Not rendered when empty (``""``, ``()``, ``None``): the job then applies its default.
    optional: bool = False
    #: Kept off command lines where the launcher can (see ``JobRequest.secret_conf``).
    secret: bool = False
    #: The :class:`JobConf` field (filled in when the table is built).
    field: str = ""


_META = "conf_key"


def _setting(
    key: str,
    default: T,
    codec: Codec[T],
    doc: str,
    *,
    required: bool = False,
    optional: bool = False,
    secret: bool = False,
) -> T:
    spec = ConfKey(key, codec, doc, required=required, optional=optional, secret=secret)
    return field(default=default, metadata={_META: spec}, repr=not secret)


@dataclass(frozen=True, kw_only=True)
class JobConf:
    """Everything the plugin tells the job through Spark conf keys; defaults are the job's.

    ``session_id`` and ``datasource`` are required: their empty defaults only make ``JobConf()``
    the table of defaults (:data:`DEFAULTS`); rendering or reading refuses them empty, but for a
    warm pool job (``pool_slot`` set), which learns them when a session claims it."""

    # -- which session, where its documents are, what kind of job --------------------------------
    session_id: str = _setting("spark.flint.job.sessionId", "", STRING, "the session's id", required=True)
    datasource: str = _setting("spark.flint.datasource.name", "", STRING, "the datasource's name", required=True)
    request_index: str = _setting(
        "spark.flint.job.requestIndex",
        "",
        STRING,
        "the request index; empty: the datasource's own (.query_execution_request_<datasource>)",
        optional=True,
    )
    job_type: SessionType = _setting(  # noqa: RUF009 - _setting returns a dataclasses.field
        "spark.flint.job.type", SessionType.INTERACTIVE, JOB_TYPE, "interactive (default), batch or streaming"
    )
    query: str = _setting("spark.flint.job.query", "", STRING, "the query of a batch or streaming job", optional=True)
    query_id: str = _setting(
        "spark.flint.job.queryId", "", STRING, "the query id of a batch or streaming job", optional=True
    )
    exclude_jobs: tuple[str, ...] = _setting(
        "spark.flint.deployment.excludeJobs", (), LIST, "job-run ids that must not own a session", optional=True
    )

    pool_slot: str = _setting(
        PREFIX_JOB + "poolSlot",
        "",
        STRING,
        "a warm pool job's slot document: the job waits for a session to claim it (docs/job.md)",
        optional=True,
    )
    pool_idle_limit_ms: int | None = _setting(
        PREFIX_JOB + "poolIdleLimitMillis",
        None,
        OPTIONAL_INTEGER,
        "a warm pool job left unclaimed this long ends itself (its pool starts another); unset: one hour",
        optional=True,
    )

    # -- the OpenSearch connection (the reference's spark.datasource.flint.* keys) ---------------
    host: str = _setting(PREFIX_OS + "host", "127.0.0.1", STRING, "the index cluster's host")
    port: int | None = _setting(
        PREFIX_OS + "port", None, OPTIONAL_INTEGER, "its port; unset: 443 for https, else 9200", optional=True
    )
    scheme: str = _setting(PREFIX_OS + "scheme", "http", STRING, "http or https")
    auth: str = _setting(
        PREFIX_OS + "auth", "noauth", STRING, "noauth, basic or sigv4 (the job reads others as noauth)"
    )
    username: str = _setting(PREFIX_OS + "auth.username", "", STRING, "basic-auth user name", optional=True)
    password: str = _setting(
        PREFIX_OS + "auth.password",
        "",
        STRING,
        f"basic-auth password (the job also reads it from ${PASSWORD_ENV})",
        optional=True,
        secret=True,
    )
    password_secret_arn: str = _setting(
        PREFIX_OS + "auth.passwordSecretArn",
        "",
        STRING,
        "the AWS Secrets Manager secret holding the basic-auth password (EMR Serverless jobs read it there)",
        optional=True,
    )
    region: str = _setting(PREFIX_OS + "region", "us-east-1", STRING, "the AWS region (SigV4)")
    verify_certs: bool = _setting(PREFIX_OS + "verifyCerts", True, BOOLEAN, "verify the cluster's TLS certificate")
    peer_uid: int | None = _setting(
        PREFIX_OS + "peerUid",
        None,
        OPTIONAL_INTEGER,
        "the uid the index's listener must belong to (the embedded index): the job checks each "
        "connection before it sends anything (docs/security.md)",
        optional=True,
    )

    # -- the reference's timeouts ------------------------------------------------------------------
    inactivity_limit_ms: int = _setting(
        PREFIX_JOB + "inactivityLimitMillis", 180_000, INTEGER, "an idle session ends (dead) after this long"
    )
    query_execution_timeout_s: int = _setting(
        PREFIX_JOB + "queryExecutionTimeoutSec", 1_800, INTEGER, "a statement running longer fails"
    )
    query_wait_timeout_ms: int = _setting(
        PREFIX_JOB + "queryWaitTimeoutMillis", 600_000, INTEGER, "a statement waiting longer fails"
    )
    loop_frequency_ms: int = _setting(PREFIX_JOB + "queryLoopExecutionFrequency", 100, INTEGER, "the job's loop period")

    # -- this product's additions ------------------------------------------------------------------
    quiet_loop_after_ms: int = _setting(
        PREFIX_JOB + "quietLoopAfterMillis",
        10_000,
        INTEGER,
        "after this long with nothing new (no statement, no claim, the statement still running) the loop slows",
    )
    quiet_loop_frequency_ms: int = _setting(
        PREFIX_JOB + "quietLoopExecutionFrequency", 250, INTEGER, "the job's loop period once it is quiet"
    )
    heartbeat_running_ms: int = _setting(
        PREFIX_JOB + "heartbeatIntervalMillis", 2_000, INTEGER, "heartbeat while statements run (carries progress)"
    )
    heartbeat_idle_ms: int = _setting(
        PREFIX_JOB + "heartbeatIdleIntervalMillis", 30_000, INTEGER, "heartbeat while idle"
    )
    heartbeat_streaming_ms: int = _setting(
        PREFIX_JOB + "heartbeatStreamingIntervalMillis",
        10_000,
        INTEGER,
        "heartbeat of a streaming session (carries the stream's progress, whatever the batch rate)",
    )
    stream_check_ms: int = _setting(
        PREFIX_JOB + "streamCheckIntervalMillis",
        1_000,
        INTEGER,
        "how often a streaming job reads its index's state document (a stop is asked there)",
    )
    stream_idle_poll_ms: int = _setting(
        PREFIX_JOB + "streamIdlePollMillis",
        250,
        INTEGER,
        "a stream whose last look at its source found nothing new looks again after this long",
    )
    checkpoint_root: str = _setting(
        "spark.flint.index.checkpointLocation.rootDir",
        "",
        STRING,
        "where streams without checkpoint_location keep their checkpoint (<root>/<index>)",
        optional=True,
    )
    checkpoint_mandatory: bool = _setting(
        "spark.flint.index.checkpoint.mandatory",
        True,
        BOOLEAN,
        "refuse auto refresh without a checkpoint_location option (the reference's default)",
    )
    validation_denied: tuple[str, ...] = _setting(
        "spark.flint.validation.deniedElements",
        (),
        LIST,
        "grammar elements the job refuses in statements (docs/validation.md); empty: none",
        optional=True,
    )
    validation_functions: str = _setting(
        "spark.flint.validation.functionTable",
        "spark",
        STRING,
        "how function names are typed: reference (the reference's table) or spark (also Spark's registry)",
    )
    validation_warehouse_root: str = _setting(
        "spark.flint.validation.warehouseRoot",
        "",
        STRING,
        "tables and databases may be located below it (when LOCATION is refused)",
        optional=True,
    )
    validation_checkpoint_root: str = _setting(
        "spark.flint.validation.checkpointRoot",
        "",
        STRING,
        "Flint checkpoints may be located (and deleted by VACUUM) below it (when CHECKPOINT_LOCATION is refused)",
        optional=True,
    )
    max_statement_chars: int = _setting(
        PREFIX_JOB + "maxStatementChars",
        1_000_000,
        INTEGER,
        "a longer statement is refused before it is parsed (docs/validation.md)",
    )
    max_ppl_chars: int = _setting(
        PREFIX_JOB + "maxPplChars",
        100_000,
        INTEGER,
        "a longer PPL statement is refused before it is parsed (docs/validation.md)",
    )
    max_statement_depth: int = _setting(
        PREFIX_JOB + "maxStatementDepth",
        128,
        INTEGER,
        "a statement nested more deeply is refused before it is parsed (docs/validation.md)",
    )
    max_statement_tokens: int = _setting(
        PREFIX_JOB + "maxStatementTokens",
        25_000,
        INTEGER,
        "a statement that costs more tokens to read is refused before it is parsed (docs/validation.md)",
    )
    statement_prepare_timeout_s: int = _setting(
        PREFIX_JOB + "statementPrepareTimeoutSec",
        120,
        INTEGER,
        "a statement parsed and analyzed longer, before any Spark work of its own, fails alone (0: no limit)",
    )
    search_interval_ms: int = _setting(
        PREFIX_JOB + "searchIntervalMillis", 1_000, INTEGER, "period of the search for waiting statements"
    )
    session_wait_ms: int = _setting(
        PREFIX_JOB + "sessionWaitMillis", 60_000, INTEGER, "how long to wait for the session document at start-up"
    )
    index_retry_attempts: int = _setting(
        PREFIX_JOB + "indexRetryAttempts", 60, INTEGER, "attempts of one index call before the job gives up"
    )
    index_retry_seconds: float = _setting(
        PREFIX_JOB + "indexRetrySeconds", 300.0, NUMBER, "seconds one index call is retried before the job gives up"
    )
    index_request_timeout_seconds: float = _setting(
        PREFIX_JOB + "indexRequestTimeoutSeconds", 10.0, NUMBER, "seconds one index request may take (past it: retried)"
    )
    max_result_rows: int = _setting(
        PREFIX_JOB + "maxResultRows", 1_000_000, INTEGER, "a result stops at this many rows (docs/results.md)"
    )
    max_result_bytes: int = _setting(
        PREFIX_JOB + "maxResultBytes", 64 * 1024 * 1024, INTEGER, "a result stops at this many bytes of row text"
    )
    result_chunk_rows: int = _setting(
        PREFIX_JOB + "resultChunkRows", 10_000, INTEGER, "rows of one result document (the first is the first page)"
    )
    result_chunk_bytes: int = _setting(
        PREFIX_JOB + "resultChunkBytes", 4 * 1024 * 1024, INTEGER, "bytes of row text of one result document"
    )
    report_catalog_changes: bool = _setting(
        PREFIX_JOB + "reportCatalogChanges",
        True,
        BOOLEAN,
        "record what each statement changes in the catalog in the datasource's catalog change log (docs/catalog.md)",
    )
    external_scheduler_enabled: bool = _setting(
        PREFIX_JOB + "externalScheduler.enabled",
        False,
        BOOLEAN,
        "auto-refresh indexes are refreshed by the service's scheduler unless they stream (docs/flint.md)",
    )
    external_scheduler_interval: str = _setting(
        PREFIX_JOB + "externalScheduler.interval",
        "5 minutes",
        STRING,
        "the interval of a scheduled index that names none",
    )
    external_scheduler_min_interval: str = _setting(
        PREFIX_JOB + "externalScheduler.minInterval",
        "5 minutes",
        STRING,
        "the shortest interval the scheduler runs (shorter ones stream; the reference's threshold is its interval)",
    )

    @property
    def validation_policy(self) -> ValidationPolicy:
        """The policy the plugin checked statements against, which the job checks them against again."""
        return ValidationPolicy(
            denied=frozenset(element_named(name) for name in self.validation_denied),
            function_table=FunctionTable(self.validation_functions),
            warehouse_root=self.validation_warehouse_root,
            checkpoint_root=self.validation_checkpoint_root,
        )

    @property
    def scheduler_policy(self) -> SchedulerPolicy:
        """The service's external scheduler, as it decides how an auto-refresh index is refreshed."""
        return SchedulerPolicy(
            self.external_scheduler_enabled, self.external_scheduler_interval, self.external_scheduler_min_interval
        )

    @property
    def effective_port(self) -> int:
        """The port, or the scheme's default when unset."""
        if self.port is not None:
            return self.port
        return 443 if self.scheme == "https" else 9200

    @property
    def effective_request_index(self) -> str:
        """The request index, or the datasource's own when unset."""
        return self.request_index or request_index(self.datasource)


def _table() -> tuple[ConfKey, ...]:
    rows: list[ConfKey] = []
    for f in fields(JobConf):
        spec: ConfKey = f.metadata[_META]
        rows.append(
            ConfKey(
                spec.key,
                spec.codec,
                spec.doc,
                required=spec.required,
                optional=spec.optional,
                secret=spec.secret,
                field=f.name,
            )
        )
    keys = [row.key for row in rows]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:  # pragma: no cover - a mistake in the table above
        raise AssertionError(f"job conf keys used twice: {duplicates}")
    return tuple(rows)


#: The contract, in :class:`JobConf` field order.
SETTINGS: tuple[ConfKey, ...] = _table()
_BY_KEY: dict[str, ConfKey] = {row.key: row for row in SETTINGS}
#: The keys of the validation policy: the job's own, so a datasource's Spark conf never changes them.
VALIDATION_KEYS: frozenset[str] = frozenset(row.key for row in SETTINGS if row.field.startswith("validation_"))
#: The caps and chunking of results: the job's own, so a datasource's Spark conf never changes them.
RESULT_KEYS: frozenset[str] = frozenset(
    row.key
    for row in SETTINGS
    if row.field in ("max_result_rows", "max_result_bytes", "result_chunk_rows", "result_chunk_bytes")
)
#: Every conf key of the contract.
KEYS: frozenset[str] = frozenset(_BY_KEY)
#: The keys to keep off command lines.
SECRET_KEYS: frozenset[str] = frozenset(row.key for row in SETTINGS if row.secret)
REQUIRED_KEYS: frozenset[str] = frozenset(row.key for row in SETTINGS if row.required)
#: Every setting's default (the required ones empty).
DEFAULTS = JobConf()


def setting(key: str) -> ConfKey:
    """The contract's row for ``key``; :class:`JobConfError` when the key is not part of it."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise JobConfError(f"unknown job conf key {key!r}: not one of {', '.join(sorted(KEYS))}") from None


def key_of(field_name: str) -> str:
    """The conf key of a :class:`JobConf` field."""
    for row in SETTINGS:
        if row.field == field_name:
            return row.key
    raise JobConfError(f"unknown job conf setting {field_name!r}: not one of {', '.join(r.field for r in SETTINGS)}")


PASSWORD_KEY = key_of("password")
POOL_SLOT_KEY = key_of("pool_slot")
#: How long a warm pool job waits for a claim when its conf does not say.
POOL_IDLE_LIMIT_MS = 3_600_000


def _empty(value: object) -> bool:
    return value is None or value == "" or value == ()


def render_conf(conf: JobConf) -> dict[str, str]:
    """The conf keys of ``conf``: every setting, but the optional ones that are empty.

    Secret keys are included: the caller moves them apart (``SECRET_KEYS``)."""
    out: dict[str, str] = {}
    pooled = bool(conf.pool_slot)
    for row in SETTINGS:
        value = getattr(conf, row.field)
        if _empty(value):
            if row.required and not pooled:
                raise JobConfError(f"{row.key} is required ({row.doc})")
            if row.optional or row.required:
                continue
        out[row.key] = row.codec.render(value)
    return out


def read_conf(get: Getter) -> JobConf:
    """The :class:`JobConf` the keys read by ``get`` describe; an absent or empty key is unset.

    Raises :class:`JobConfError` naming the keys that are required but unset, or the key whose
    value is not valid."""
    values: dict[str, Any] = {}
    missing: list[str] = []
    pooled = bool(get(POOL_SLOT_KEY))
    for row in SETTINGS:
        raw = get(row.key)
        if raw is None or raw == "":
            if row.required and not pooled:
                missing.append(row.key)
            continue
        try:
            values[row.field] = row.codec.parse(raw)
        except ValueError:
            shown = "****" if row.secret else repr(raw)
            raise JobConfError(f"{row.key}={shown} is not {row.codec.kind}") from None
    if missing:
        raise JobConfError(f"required Spark conf keys are missing or empty: {', '.join(missing)}")
    return JobConf(**values)


# -- what a warm pool job learns when a session claims it (docs/job.md) ---------------------------

#: The contract's keys a pool job is started with and keeps: where the index is, and its slot.
STARTUP_CONTRACT_KEYS: frozenset[str] = frozenset(
    row.key for row in SETTINGS if row.key.startswith(PREFIX_OS) or row.field in ("pool_slot", "pool_idle_limit_ms")
)
#: Spark settings a running Spark session takes at any time (SQL settings read by each query),
#: which a claimed pool job sets for its session. Every other Spark setting counts as fixed at
#: start-up (jars, catalog implementation and metastore, memory, master...): it decides which pool
#: a datasource's sessions may claim from, never something set at claim.
RUNTIME_SPARK_KEYS = frozenset(
    {
        "spark.sql.session.timeZone",
        "spark.sql.variable.substitute",
        "spark.sql.runSQLOnFiles",
        "spark.sql.shuffle.partitions",
    }
)
RUNTIME_SPARK_PREFIXES = ("spark.sql.adaptive.",)


def is_claim_key(key: str) -> bool:
    """Whether ``key`` of a job's conf is its session's, which a pool job learns from its claim (the
    contract's keys but the start-up ones, and the runtime Spark settings), rather than fixed when
    the job starts."""
    if key in KEYS:
        return key not in STARTUP_CONTRACT_KEYS
    return key in RUNTIME_SPARK_KEYS or key.startswith(RUNTIME_SPARK_PREFIXES)


def split_conf(conf: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A job's conf as the start-up part a pool job is started with, and the session's part its
    claim carries (:func:`is_claim_key`)."""
    startup = {k: v for k, v in conf.items() if not is_claim_key(k)}
    return startup, {k: v for k, v in conf.items() if is_claim_key(k)}


def read_claimed_conf(startup: Getter, claim: dict[str, str]) -> JobConf:
    """The conf of the session a pool job was claimed for: its claim's keys from the claim alone
    (absent: the default, never the start-up value), the start-up keys from the job's own conf."""
    return read_conf(lambda key: claim.get(key) if is_claim_key(key) else startup(key))
