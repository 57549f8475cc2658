"""Documents of the request index and the result index, with the reference's field names.

Models are snake_case in Python and camelCase in the index (pydantic aliases). Unknown fields in a
stored document are kept (``extra="allow"``) because writes are partial updates anyway, and a
document written by the reference may carry fields this product does not know.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from query_core.states import FlintIndexState, PoolJobState, ScheduleState, SessionState, SessionType, StatementState


def now_millis() -> int:
    return int(time.time() * 1000)


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_source(self) -> dict[str, Any]:
        """The document as stored: camelCase names, ``None`` fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatementProgress(_Doc):
    """Spark's progress for one running statement, as the job's heartbeat reports it."""

    stages_completed: int = 0
    stages_total: int = 0
    tasks_completed: int = 0
    tasks_total: int = 0


class StreamProgress(_Doc):
    """A streaming session's stream, as its heartbeat reports it (the latest micro-batch's figures,
    from Spark's ``StreamingQueryProgress``): one report per beat, however many batches ran."""

    #: Spark's id of the streaming query (stable across restarts from the same checkpoint).
    stream_id: str = ""
    #: The index the stream refreshes.
    index_name: str = ""
    #: The latest micro-batch: its id (-1 before the first), its rows, and when it ran (epoch ms).
    batch_id: int = -1
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_time: int = 0
    #: When the newest data the stream has read arrived (epoch ms of the latest offset's files,
    #: 0 when the source does not tell).
    latest_offset_time: int = 0
    #: Micro-batches run since the stream (re)started in this job.
    batches: int = 0
    #: The stream's last error ("" while it is healthy).
    last_error: str = ""


#: Upper bounds (seconds) of the histograms a job reports (``docs/metrics.md``): how long a statement
#: waited for its job (submitted -> running), and how long it ran. One more bucket counts the rest.
PICKUP_BUCKETS_S = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RUN_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0)


class Histogram(_Doc):
    """Observations counted per bucket (not cumulated; one count more than there are bounds, the
    last for everything above them), and their sum in seconds."""

    counts: list[int] = Field(default_factory=list)
    sum: float = 0.0


class JobFigures(_Doc):
    """What a job has done since it started, carried by its heartbeat (``docs/job.md``). Every
    figure is cumulative for the job (the plugin differences them per session), but for the
    stream's lag, which is the latest micro-batch's."""

    #: Statements this job moved to a terminal state, by that state (``success``, ``failed``...).
    statements: dict[str, int] = Field(default_factory=dict)
    pickup: Histogram = Field(default_factory=Histogram)
    run: Histogram = Field(default_factory=Histogram)
    #: Spark's input and output metrics of the statements' stages.
    rows_read: int = 0
    bytes_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    #: The job's calls to the index cluster, by outcome (``2xx``, ``4xx``, ``5xx``, ``unreachable``...).
    opensearch_calls: dict[str, int] = Field(default_factory=dict)
    #: A streaming job's micro-batches that ran, and how old the newest data the latest one read
    #: was when it started (0: unknown).
    micro_batches: int = 0
    stream_lag_millis: int = 0
    #: Queries that read a Flint index, by the kind of index used (``skipping``: files were
    #: skipped; ``covering``: the index was read instead of the table), and the files skipped.
    accelerated_queries: dict[str, int] = Field(default_factory=dict)
    files_skipped: int = 0


class RunningStatement(_Doc):
    query_id: str
    start_time: int
    progress: StatementProgress | None = None


class StatementDoc(_Doc):
    type: Literal["statement"] = "statement"
    version: str = "1.0"
    state: StatementState = StatementState.WAITING
    statement_id: str
    query_id: str
    session_id: str
    lang: str = "sql"
    query: str
    data_source_name: str
    application_id: str = ""
    job_id: str = ""
    submit_time: int = Field(default_factory=now_millis)
    error: str = ""
    #: Addition of this product: the user who submitted the statement (None when written before
    #: users were recorded, or by the reference plugin: then only admins may read or cancel it;
    #: docs/security.md).
    submitted_by: str | None = None


class SessionDoc(_Doc):
    type: Literal["session"] = "session"
    version: str = "1.0"
    session_type: SessionType = SessionType.INTERACTIVE
    session_id: str
    state: SessionState = SessionState.NOT_STARTED
    data_source_name: str
    application_id: str = ""
    job_id: str = ""
    last_update_time: int = Field(default_factory=now_millis)
    job_start_time: int = 0
    exclude_job_ids: list[str] = Field(default_factory=list)
    error: str = ""
    #: Additions of this product. The plugin appends the ids of statements it submits (a real-time
    #: signal the job reads by id); the job's heartbeat lists what is running, its interval and
    #: how late its beats have been.
    pending_statement_ids: list[str] = Field(default_factory=list)
    running_statements: list[RunningStatement] = Field(default_factory=list)
    heartbeat_interval_millis: int = 0
    #: How late the job's recent heartbeats landed against their schedule (its own figure).
    heartbeat_lag_millis: int = 0
    #: Set by the job once its Spark session holds temporary views: SHOW TABLES in this session
    #: then lists them, so the plugin's catalog read model leaves such statements to the job.
    temporary_views: bool = False
    #: A streaming session's stream, reported by its heartbeat (None for other sessions).
    stream_progress: StreamProgress | None = None
    #: The user who started the session: only theirs take further statements, and the session
    #: listing shows a user only theirs (None: written before users were recorded; docs/security.md).
    submitted_by: str | None = None
    #: The job's figures, reported by its heartbeat and its end (None before its first beat).
    metrics: JobFigures | None = None
    #: The warm pool slot whose job the session claimed (``docs/documents.md``); None for a job
    #: started for the session, "" once a claimed job that never started the session was replaced.
    pool_slot: str | None = None


class FlintIndexStateDoc(_Doc):
    """A Flint index's state (doc id = ``latest_id``, base64 of the index name), in the request
    index, as the reference writes it; every move passes the table in ``states.py``."""

    type: Literal["flintindexstate"] = "flintindexstate"
    version: str = "1.0"
    latest_id: str
    state: FlintIndexState = FlintIndexState.EMPTY
    data_source_name: str
    application_id: str = ""
    job_id: str = ""
    last_update_time: int = Field(default_factory=now_millis)
    job_start_time: int = 0
    last_refresh_start_time: int = 0
    last_refresh_complete_time: int = 0
    error: str = ""
    #: Addition of this product: the OpenSearch index the state is of (the reference derives it).
    index_name: str = ""


class PoolClaim(_Doc):
    """What a pool job learns when a session claims it: its session, datasource and result index,
    and its Spark conf of the session (the contract's keys and the runtime Spark settings;
    ``query_core/jobconf.py``, ``docs/job.md``). Never a secret."""

    session_id: str
    data_source_name: str
    result_index: str
    conf: dict[str, str] = Field(default_factory=dict)


class PoolJobDoc(_Doc):
    """A warm pool job, in its pool slot document (doc id = ``slot_id``, the deployment index):
    started with no session, idle until a new session claims it. A slot holds one job at a time;
    once its job has ended (``served``, ``dead``) it takes the next one (``docs/documents.md``)."""

    type: Literal["pooljob"] = "pooljob"
    version: str = "1.0"
    slot_id: str
    #: The pool: which datasources may claim its jobs (their engine and start-up Spark settings).
    pool_key: str
    slot: int
    state: PoolJobState = PoolJobState.STARTING
    #: What runs it (the launcher's kind: ``local``, ``emr-serverless``) and its application.
    engine: str = ""
    application_id: str = ""
    #: The job run; "" while the slot is taken and its job being launched.
    job_id: str = ""
    #: When the job was launched, and its heartbeat (epoch ms) with the interval until the next.
    job_start_time: int = Field(default_factory=now_millis)
    last_update_time: int = Field(default_factory=now_millis)
    heartbeat_interval_millis: int = 0
    #: The claim, once a session took the job (``dataSourceName`` and ``sessionId`` repeat it, for
    #: searches and listings).
    data_source_name: str = ""
    session_id: str = ""
    claim: PoolClaim | None = None
    claim_time: int = 0
    error: str = ""


class RunOutcome(StrEnum):
    """How a scheduled run's turn ended (``lastOutcome`` of a schedule; the metrics' ``outcome``)."""

    #: The refresh job finished its statement ``success``.
    SUCCESS = "success"
    #: The refresh failed, was killed, or could not be submitted (the owner may not, say).
    FAILED = "failed"
    #: The previous run still ran at the tick: this one was not launched.
    SKIPPED = "skipped"
    #: The source tables had not changed since the last successful run: nothing to refresh.
    UNCHANGED = "unchanged"
    #: No refresh share (the user's or the deployment's) was free: it waits for the next tick.
    WAITING = "waiting"


class ScheduleRun(_Doc):
    """The run a schedule has claimed (``claim_time`` 0: none): its tick, who claimed it, and
    the query it submitted once launched."""

    #: The tick (epoch ms) it is the run of, and when and by which plugin process it was claimed.
    due_time: int = 0
    claim_time: int = 0
    claimed_by: str = ""
    #: The ``REFRESH`` query, its batch session and job, once submitted.
    query_id: str = ""
    session_id: str = ""
    job_id: str = ""
    #: The source tables' fingerprint as the claim saw them ("": unknown).
    source_digest: str = ""


class ScheduleDoc(_Doc):
    """A Flint index's schedule (doc id = the index name), in the scheduler index
    ``.async-query-scheduler`` as the reference keeps its jobs there; every move passes the
    table in ``states.py`` (docs/documents.md)."""

    type: Literal["schedule"] = "schedule"
    version: str = "1.0"
    index_name: str
    data_source_name: str
    state: ScheduleState = ScheduleState.PENDING
    #: What a run submits, in the reference's fields (filled in when the schedule is enabled).
    scheduled_query: str = ""
    query_lang: str = "sql"
    #: The interval as written (``'5 minutes'``) and in milliseconds.
    interval: str = ""
    interval_millis: int = 0
    #: Whose runs they are: the user whose statement turned the schedule on ("": the anonymous
    #: caller of ``none``), and the roles they held then (what ``cluster`` authentication can
    #: still vouch for; ``basic`` reads the user's current roles at each run).
    owner: str = ""
    owner_roles: list[str] = Field(default_factory=list)
    enabled_time: int = 0
    #: When the next run is due, when the last was launched and when its turn ended (epoch ms).
    next_run_time: int = 0
    last_run_time: int = 0
    last_end_time: int = 0
    #: How the last turn ended, and why ("" when it succeeded).
    last_outcome: str = ""
    last_error: str = ""
    #: Failed runs in a row (the next waits longer past the first: docs/flint.md), runs launched,
    #: and turns skipped while the previous run still ran.
    failures: int = 0
    runs: int = 0
    skips: int = 0
    #: The source tables' fingerprint when the last successful run was claimed.
    refreshed_digest: str = ""
    run: ScheduleRun = Field(default_factory=ScheduleRun)
    last_update_time: int = Field(default_factory=now_millis)


class ColumnSchema(BaseModel):
    name: str
    type: str


class LosslessResult(BaseModel):
    """The exact result: ``datarows`` is JSON text, so no number passes through a float."""

    schema_: list[ColumnSchema] = Field(alias="schema")
    datarows: str
    total: int
    model_config = ConfigDict(populate_by_name=True)


class ResultChunks(_Doc):
    """A result stored in more than one document, or cut at the cap (``docs/results.md``).

    The first document (id = query id) holds the first rows; the rows that follow are in
    documents ``<queryId>-1``, ``<queryId>-2``, ... (:class:`ResultChunkDoc`), ``chunk_rows[i]``
    rows in document ``i + 1``."""

    #: Rows stored, over every document of the result.
    rows: int
    chunk_rows: list[int] = Field(default_factory=list)
    #: The query had more rows than the caps let through: the stored rows are its first ones.
    truncated: bool = False
    #: The UTF-8 bytes of the stored rows, over every document of the result (0: not recorded,
    #: as by older jobs): what the result holds in the index, for its submitter's usage.
    bytes: int = 0


class ResultChunkDoc(_Doc):
    """Rows of a result after its first document's (id ``<queryId>-<chunk>``). It names its query
    ``chunkOf``, never ``queryId`` or ``jobRunId``: the reference plugin finds a result by a search
    on those fields and must only ever find the first document."""

    type: Literal["resultChunk"] = "resultChunk"
    chunk_of: str
    chunk: int
    rows: int
    #: The rows as JSON text, in the lossless encoding.
    datarows: str
    update_time: int = Field(default_factory=now_millis)


class ResultDoc(_Doc):
    query_id: str
    query_text: str = ""
    session_id: str = ""
    status: Literal["SUCCESS", "FAILED", "TIMEOUT"]
    result: list[str] = Field(default_factory=list)
    schema_: list[str] = Field(default_factory=list, alias="schema")
    error: str = ""
    job_run_id: str = ""
    application_id: str = ""
    data_source_name: str = ""
    job_type: str = "interactive"
    update_time: int = Field(default_factory=now_millis)
    query_run_time: int = 0
    lossless: LosslessResult | None = None
    #: Addition: set when the result continues in further documents or was cut at the cap.
    chunks: ResultChunks | None = None


D = TypeVar("D", bound=_Doc)


@dataclass(frozen=True)
class Versioned(Generic[D]):
    """A document together with the version it was read at, for conditional writes."""

    doc: D
    seq_no: int
    primary_term: int
