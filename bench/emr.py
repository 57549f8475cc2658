"""EMR Serverless ``GetJobRun`` calls per 1,000 GETs: this product's policy vs the reference's.

Both run in one process against moto, on one botocore client whose calls are counted by an event
hook (``before-call.emr-serverless.GetJobRun``), over real HTTP (the service's app in a uvicorn
thread). Sessions are started by the service (``StartJobRun`` on moto) and then kept alive by
simulated jobs that heart-beat through the index, as a real job on EMR Serverless would.

* product: the service as it is. Healthy (fresh heartbeat) sessions should cost 0 calls.
* reference-style: the same service, plus one ``describe`` (GetJobRun) before every GET, which is
  what the reference plugin does for every GET of a batch or streaming query.
* stale (informational): the heartbeats stop and are back-dated; the product should confirm each
  suspected death with one call per session, whatever the number of GETs.

Then the same for batch queries (``REFRESH SKIPPING INDEX``, docs/flint.md): each POST is
classified ``batch`` and launches a job of its own (``StartJobRun`` on moto) with a ``batch``
session; simulated jobs claim those sessions and heart-beat their running statement, as above.

* running batch queries, product vs reference policy. The reference calls ``GetJobRun`` on every
  GET of a batch query until its result exists; emulated as above (one ``describe`` before every
  GET of a query that is not finished).
* finished batch queries (informational): the jobs write each result, move the statement to
  ``success`` and end their session ``dead``; GETs then cost 0 calls under both policies.

Then streaming queries (``CREATE INDEX ... WITH (auto_refresh = true)``, docs/flint.md): each POST
is classified ``streaming`` and launches a job of its own named ``<cluster>:streaming:<index>``
(checked on moto) with a ``streaming`` session. Simulated streaming jobs play the whole life of
such a query, and the GETs are spread over it, under both policies in each phase:

* waiting: the job has not started (the session ``not_started``, the statement ``waiting``);
* running: the job claimed its session and runs the statement (its stream is starting);
* streaming: the stream runs: the statement is ``success`` with its result document, and the
  session stays ``running``, heart-beating ``streamProgress`` with ``heartbeat_interval_millis`` =
  the streaming interval (``heartbeat_streaming_ms``), as the streaming job's heartbeat does.

The reference calls ``GetJobRun`` on every GET of a streaming query until its result exists (the
waiting and running phases); the product reads documents only while the heartbeat is fresh.

``python -m bench.emr [--quick]`` runs this section alone (a real OpenSearch node, no Spark and
no service process); ``python -m bench.run`` runs it with the others.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import Launcher
from async_query.reads import QueryReads
from async_query.runtime import Plugin, build_plugin
from async_query.security.principal import ANONYMOUS, Principal
from async_query.service import SubmitRequest
from async_query.settings import Settings
from bench.env import free_port
from bench.index_node import index_node
from bench.report import Figure, Report, Target
from query_core.config import OpenSearchConfig
from query_core.models import (
    LosslessResult,
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementProgress,
    StreamProgress,
    Versioned,
    now_millis,
)
from query_core.states import SessionState, SessionType, StatementState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

SECTION = "EMR Serverless calls"
BASE = "/_plugins/_async_query"
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/bench-emr"
HEARTBEAT_MS = 2_000


@dataclass(frozen=True)
class EmrPlan:
    gets: int = 1_000
    sessions: int = 10
    #: Batch queries (each a job and a ``batch`` session of its own) the batch GETs are spread over.
    batch_queries: int = 20
    #: Streaming queries (each a job and a ``streaming`` session of its own), likewise.
    streaming_queries: int = 10
    #: How often the simulated streaming jobs beat (and the interval they advertise); None: the
    #: service's ``heartbeat_streaming_ms``, as a real streaming job would.
    streaming_heartbeat_ms: int | None = None

    @classmethod
    def quick(cls) -> EmrPlan:
        return cls(gets=200, sessions=4, batch_queries=6, streaming_queries=4)


class CallCounter:
    """Counts API calls made through one botocore client, by operation name."""

    def __init__(self, client: Any) -> None:
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        client.meta.events.register("before-call.emr-serverless.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.calls[model.name] = self.calls.get(model.name, 0) + 1

    def get(self, operation: str) -> int:
        with self._lock:
            return self.calls.get(operation, 0)


def _load_launcher() -> type[Launcher]:
    from async_query.launcher.emr import EmrServerlessLauncher

    return EmrServerlessLauncher


class ReferencePolicyReads(QueryReads):
    """GET as the service answers it, plus what the reference does: ask EMR Serverless about the
    job first, until the query is finished (the reference stops asking once the query's result
    exists)."""

    def __init__(self, plugin: Plugin) -> None:
        super().__init__(plugin.settings, plugin.store, plugin.datasources, plugin.handlers)
        self.launchers = plugin.launchers

    async def get_without_blocking(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes | None:
        return None  # every GET may ask EMR Serverless: always the worker-thread path

    def get(self, query_id: str, principal: Principal = ANONYMOUS) -> bytes:
        statement = self._statement(query_id)
        if is_terminal(statement.doc.state):
            return super().get(query_id, principal)
        session = self.store.sessions.get(statement.doc.data_source_name, statement.doc.session_id)
        if session is not None:
            datasource = self.datasources.get(statement.doc.data_source_name)
            self.launchers.for_datasource(datasource).describe(session.doc.job_id)
        return super().get(query_id, principal)


def reference_policy(plugin: Plugin) -> Plugin:
    """``plugin`` answering GET with the reference's policy (:class:`ReferencePolicyReads`)."""
    plugin.reads = plugin.service.reads = ReferencePolicyReads(plugin)
    return plugin


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app from a uvicorn thread on a free loopback port; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="bench-emr-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _Jobs:
    """Simulated jobs of the sessions the service started: claim, run one statement, heart-beat."""

    #: What the jobs' results say they are (``jobType``).
    job_type = SessionType.BATCH

    def __init__(
        self, store: Store, datasource: str, pairs: list[tuple[str, str]], interval_ms: int = HEARTBEAT_MS
    ) -> None:
        self.store = store
        self.datasource = datasource
        self.pairs = pairs  # (session id, statement id)
        self.interval_ms = interval_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        """Each job takes its session (under the job run the plugin launched) and runs its statement."""
        for session_id, statement_id in self.pairs:
            statement = self.store.statements.get(self.datasource, statement_id)
            if statement is None:
                raise RuntimeError(f"statement {statement_id} is missing")
            self.store.statements.start(statement)
            session = self._session(session_id)
            self.store.sessions.claim(
                session,
                session.doc.job_id,
                heartbeat_interval_millis=self.interval_ms,
                **self.beat_fields(session_id, statement_id),
            )

    def beat(self, session_id: str, statement_id: str) -> None:
        fields = self.beat_fields(session_id, statement_id)
        self.store.sessions.beat(self._session(session_id), heartbeat_interval_millis=self.interval_ms, **fields)

    def beat_fields(self, session_id: str, statement_id: str) -> dict[str, Any]:
        """What one heartbeat writes besides its time and interval: the running statement."""
        running = RunningStatement(
            query_id=statement_id,
            start_time=now_millis(),
            progress=StatementProgress(stages_total=1, tasks_total=100, tasks_completed=10),
        )
        return {"running_statements": [running]}

    def start(self) -> None:
        def run() -> None:
            while not self._stop.wait(self.interval_ms / 1000):
                for session_id, statement_id in self.pairs:
                    self.beat(session_id, statement_id)

        self._thread = threading.Thread(target=run, name="bench-emr-heartbeats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def back_date(self, minutes: int = 10) -> None:
        """Make every session look like its job stopped ``minutes`` ago."""
        for session_id, _ in self.pairs:
            self.store.sessions.beat(self._session(session_id), at=now_millis() - minutes * 60_000)

    def finish(self, result_index: str) -> None:
        """What a batch job does at the end: write the result, the statement ``success``, the
        session ``dead`` (call :meth:`stop` first: an ended job no longer heart-beats)."""
        self.succeed(result_index)
        self.end()

    def succeed(self, result_index: str) -> None:
        """Each job's statement done: its result document first, then the statement ``success``."""
        for session_id, statement_id in self.pairs:
            statement = self.store.statements.get(self.datasource, statement_id)
            if statement is None:
                raise RuntimeError(f"statement {statement_id} is missing")
            self.store.statements.settle(
                statement,
                StatementState.SUCCESS,
                result=(
                    result_index,
                    ResultDoc(
                        query_id=statement_id,
                        query_text=statement.doc.query,
                        session_id=session_id,
                        status="SUCCESS",
                        job_run_id=statement.doc.job_id,
                        application_id=statement.doc.application_id,
                        data_source_name=self.datasource,
                        job_type=self.job_type.value,
                        lossless=LosslessResult(schema=[], datarows="[]", total=0),
                    ),
                ),
            )

    def end(self) -> None:
        """Each job ends its session ``dead`` (nothing left running)."""
        for session_id, _ in self.pairs:
            self.store.sessions.end(self._session(session_id), SessionState.DEAD)

    def _session(self, session_id: str) -> Versioned[SessionDoc]:
        session = self.store.sessions.get(self.datasource, session_id)
        if session is None:
            raise RuntimeError(f"session {session_id} is missing")
        return session


class _StreamingJobs(_Jobs):
    """Simulated streaming jobs: claim the session, run the statement (its stream starting), then
    report it ``success`` once the stream runs and keep heart-beating the session with the
    stream's progress (one write per interval, however many micro-batches ran)."""

    job_type = SessionType.STREAMING

    def __init__(
        self,
        store: Store,
        datasource: str,
        pairs: list[tuple[str, str]],
        index_names: dict[str, str],
        interval_ms: int,
    ) -> None:
        super().__init__(store, datasource, pairs, interval_ms)
        self.index_names = index_names  # session id -> the index its stream refreshes
        self.streaming = False
        self._streaming_beats: dict[str, int] = {}

    def beat_fields(self, session_id: str, statement_id: str) -> dict[str, Any]:
        if not self.streaming:
            fields = super().beat_fields(session_id, statement_id)
            batches = 0
        else:
            fields = {"running_statements": []}
            beats = self._streaming_beats[session_id] = self._streaming_beats.get(session_id, 0) + 1
            batches = beats * 10  # ten micro-batches per interval: still one write
        fields["stream_progress"] = StreamProgress(
            stream_id=f"bench-stream-{session_id}",
            index_name=self.index_names[session_id],
            batch_id=batches - 1,
            num_input_rows=100 if batches else 0,
            input_rows_per_second=100_000 / self.interval_ms if batches else 0.0,
            processed_rows_per_second=1_000.0 if batches else 0.0,
            batch_time=now_millis() if batches else 0,
            batches=batches,
        )
        return fields

    def stream(self, result_index: str) -> None:
        """The streams run: each statement ``success`` (result first), and a beat that reports the
        stream (the session stays ``running``)."""
        self.succeed(result_index)
        self.streaming = True
        for session_id, statement_id in self.pairs:
            self.beat(session_id, statement_id)


def run_getjobrun(
    store: Store, opensearch: OpenSearchConfig, data_dir: Path, plan: EmrPlan
) -> tuple[list[Figure], dict[str, Any]]:
    """Raises ImportError when the EMR Serverless launcher is not available."""
    launcher_class = _load_launcher()
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("emr-serverless", region_name=REGION)
        counter = CallCounter(client)
        app_id = client.create_application(name="bench", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
        # The session limits are not what is measured here (and the bench's other sessions share the index).
        settings = Settings(data_dir=data_dir, max_sessions=10_000, max_refreshing_jobs=10_000)
        launcher = launcher_class(
            app_id,  # type: ignore[call-arg]
            ROLE,
            REGION,
            "s3://bench/main.py",
            client=client,
            cluster_name=settings.cluster_name,
        )
        datasource = Datasource(name="benchemr", connector="emr-serverless")
        registry = DatasourceRegistry([datasource])

        def build() -> Plugin:
            return build_plugin(settings, store, registry, {"emr-serverless": launcher}, opensearch)

        product = build()
        reference = reference_policy(build())
        pairs = []
        for _ in range(plan.sessions):
            submitted = product.service.submit(SubmitRequest(datasource.name, "sql", "SELECT 1"))
            pairs.append((submitted.session_id, submitted.query_id))
        started = counter.get("StartJobRun")
        jobs = _Jobs(store, datasource.name, pairs)
        jobs.claim()
        jobs.start()
        try:
            healthy = _count_gets(product, counter, pairs, plan.gets)
            ref = _count_gets(reference, counter, pairs, plan.gets)
        finally:
            jobs.stop()
        jobs.back_date()
        stale = _count_gets(product, counter, pairs, plan.gets)
        ended = sum(
            1
            for _, statement_id in pairs
            if (s := store.statements.get(datasource.name, statement_id)) is not None and is_terminal(s.doc.state)
        )
        batch = _run_batch(product, reference, counter, store, datasource, plan)
        interval_ms = plan.streaming_heartbeat_ms or settings.heartbeat_streaming_ms
        inspector = boto3.client("emr-serverless", region_name=REGION)  # not counted
        streaming = _run_streaming(
            product, reference, counter, inspector, store, datasource, plan, settings.cluster_name, interval_ms
        )
        for plugin in (product, reference):
            plugin.close()

    per_k = 1000 / plan.gets
    details = {
        "plan": plan.__dict__,
        "start_job_run_calls": started,
        "product_healthy": healthy,
        "reference_style": ref,
        "product_stale": {**stale, "statements_failed_after": ended},
        "batch": batch,
        "streaming": streaming,
        "all_calls": counter.calls,
    }
    stale_note = (
        f"{stale['get_job_run']} calls for {plan.sessions} stale sessions; {ended}/{plan.sessions} statements failed"
        if stale["get_job_run"]
        else "0 calls: the service did not confirm the stale sessions"
    )
    figures = [
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, product, healthy sessions",
            healthy["get_job_run"] * per_k,
            "calls",
            Target("==", 0),
            note=f"{plan.gets} GETs over {plan.sessions} sessions (moto)",
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, reference-style (every GET)",
            ref["get_job_run"] * per_k,
            "calls",
            note="same run, same client",
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, product, stale heartbeats",
            stale["get_job_run"] * per_k,
            "calls",
            note=stale_note,
        ),
        *_batch_figures(batch, plan),
        *_streaming_figures(streaming, plan),
    ]
    return figures, details


def _run_batch(
    product: Plugin,
    reference: Plugin,
    counter: CallCounter,
    store: Store,
    datasource: Datasource,
    plan: EmrPlan,
) -> dict[str, Any]:
    """Batch queries: submitted through the service, kept running by heart-beating jobs, GET under
    both policies; then finished by their jobs, and GET again under both."""
    started_before = counter.get("StartJobRun")
    pairs = []
    for i in range(plan.batch_queries):
        query = f"REFRESH SKIPPING INDEX ON {datasource.name}.default.bench_emr_{i}"
        submitted = product.service.submit(SubmitRequest(datasource.name, "sql", query))
        session = store.sessions.get(datasource.name, submitted.session_id)
        if session is None or session.doc.session_type != SessionType.BATCH:
            found = "no session" if session is None else f"a {session.doc.session_type.value} session"
            raise RuntimeError(f"{query!r} was not run as a batch query: {found}")
        pairs.append((submitted.session_id, submitted.query_id))
    started = counter.get("StartJobRun") - started_before
    jobs = _Jobs(store, datasource.name, pairs)
    jobs.claim()
    jobs.start()
    try:
        running_product = _count_gets(product, counter, pairs, plan.gets)
        running_reference = _count_gets(reference, counter, pairs, plan.gets)
    finally:
        jobs.stop()
    jobs.finish(datasource.results)
    finished_product = _count_gets(product, counter, pairs, plan.gets)
    finished_reference = _count_gets(reference, counter, pairs, plan.gets)
    return {
        "queries": plan.batch_queries,
        "start_job_run_calls": started,
        "running_product": running_product,
        "running_reference": running_reference,
        "finished_product": finished_product,
        "finished_reference": finished_reference,
    }


def _batch_figures(batch: dict[str, Any], plan: EmrPlan) -> list[Figure]:
    per_k = 1000 / plan.gets
    spread = f"{plan.gets} GETs over {plan.batch_queries} batch queries"
    return [
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, product, running batch queries",
            batch["running_product"]["get_job_run"] * per_k,
            "calls",
            Target("==", 0),
            note=f"{spread} ({batch['start_job_run_calls']} StartJobRun, moto)",
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, reference policy, running batch queries",
            batch["running_reference"]["get_job_run"] * per_k,
            "calls",
            note="every GET until the result exists; same run, same client",
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, product, finished batch queries",
            batch["finished_product"]["get_job_run"] * per_k,
            "calls",
            Target("==", 0),
            note=f"result written, statement success, session dead; {spread}",
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, reference policy, finished batch queries",
            batch["finished_reference"]["get_job_run"] * per_k,
            "calls",
            note="the result exists: no call",
        ),
    ]


#: The phases of a streaming query's life the GETs are spread over, in order.
STREAMING_PHASES = ("waiting", "running", "streaming")


def _run_streaming(
    product: Plugin,
    reference: Plugin,
    counter: CallCounter,
    inspector: Any,
    store: Store,
    datasource: Datasource,
    plan: EmrPlan,
    cluster_name: str,
    interval_ms: int,
) -> dict[str, Any]:
    """Streaming queries: submitted through the service (a ``streaming`` job and session each,
    checked), their GETs spread over the three phases of their life, under both policies."""
    started_before = counter.get("StartJobRun")
    pairs: list[tuple[str, str]] = []
    index_names: dict[str, str] = {}
    for i in range(plan.streaming_queries):
        table = f"{datasource.name}.default.bench_stream_{i}"
        query = (
            f"CREATE INDEX pages ON {table} (page, n) WITH (auto_refresh = true, refresh_interval = '1 second', "
            f"checkpoint_location = 's3://bench/checkpoints/stream_{i}')"
        )
        submitted = product.service.submit(SubmitRequest(datasource.name, "sql", query))
        session = store.sessions.get(datasource.name, submitted.session_id)
        if session is None or session.doc.session_type != SessionType.STREAMING:
            found = "no session" if session is None else f"a {session.doc.session_type.value} session"
            raise RuntimeError(f"{query!r} was not run as a streaming query: {found}")
        pairs.append((submitted.session_id, submitted.query_id))
        index_names[submitted.session_id] = f"flint_{datasource.name}_default_bench_stream_{i}_pages_index"
    started = counter.get("StartJobRun") - started_before
    if started != plan.streaming_queries:
        raise RuntimeError(f"{plan.streaming_queries} streaming queries made {started} StartJobRun calls")
    names = _job_names(inspector, product, datasource, pairs)
    expected = {f"{cluster_name}:streaming:{index_names[sid]}" for sid, _ in pairs}
    if set(names.values()) != expected:
        raise RuntimeError(f"streaming jobs were not named <cluster>:streaming:<index>: {sorted(names.values())}")

    share = plan.gets // len(STREAMING_PHASES)
    gets = {"waiting": share, "running": share, "streaming": plan.gets - 2 * share}
    phases: dict[str, dict[str, Any]] = {}
    jobs = _StreamingJobs(store, datasource.name, pairs, index_names, interval_ms)
    try:
        for phase in STREAMING_PHASES:
            if phase == "running":
                jobs.claim()
                jobs.start()
            elif phase == "streaming":
                jobs.stream(datasource.results)
            phases[phase] = {
                "product": _count_gets(product, counter, pairs, gets[phase]),
                "reference": _count_gets(reference, counter, pairs, gets[phase]),
            }
    finally:
        jobs.stop()
    progress = [
        s.doc.stream_progress.batches
        for sid, _ in pairs
        if (s := store.sessions.get(datasource.name, sid)) is not None and s.doc.stream_progress is not None
    ]
    jobs.end()  # the streams stop (as after ALTER ... auto_refresh = false): their slots free
    return {
        "queries": plan.streaming_queries,
        "start_job_run_calls": started,
        "job_names": sorted(set(names.values())),
        "session_ids": [sid for sid, _ in pairs],
        "heartbeat_interval_ms": interval_ms,
        "phases": phases,
        "reported_batches": progress,
        "product": _sum_phases(phases, "product"),
        "reference": _sum_phases(phases, "reference"),
    }


def _job_names(
    inspector: Any, plugin: Plugin, datasource: Datasource, pairs: list[tuple[str, str]]
) -> dict[str, str]:
    """Each session's job's name on EMR Serverless (moto), by job run id (ListJobRuns)."""
    app_id = plugin.launchers.for_datasource(datasource).application_id
    runs = {run["id"]: run.get("name", "") for run in inspector.list_job_runs(applicationId=app_id)["jobRuns"]}
    names = {}
    for session_id, _ in pairs:
        session = plugin.store.sessions.get(datasource.name, session_id)
        job_id = session.doc.job_id if session is not None else ""
        names[job_id] = runs.get(job_id, "")
    return names


def _sum_phases(phases: dict[str, dict[str, Any]], policy: str) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for phase in phases.values():
        for status, n in phase[policy]["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    return {
        "gets": sum(p[policy]["gets"] for p in phases.values()),
        "get_job_run": sum(p[policy]["get_job_run"] for p in phases.values()),
        "statuses": statuses,
    }


def _streaming_figures(streaming: dict[str, Any], plan: EmrPlan) -> list[Figure]:
    per_k = 1000 / plan.gets
    phases = streaming["phases"]
    split = ", ".join(f"{phases[p]['product']['gets']} {p}" for p in STREAMING_PHASES)
    before_result = phases["waiting"]["product"]["gets"] + phases["running"]["product"]["gets"]
    by_phase = ", ".join(f"{p} {phases[p]['reference']['get_job_run']}" for p in STREAMING_PHASES)
    return [
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, product, streaming queries",
            streaming["product"]["get_job_run"] * per_k,
            "calls",
            Target("==", 0),
            note=(
                f"{plan.gets} GETs over {plan.streaming_queries} streaming queries ({split}); "
                f"heartbeat {streaming['heartbeat_interval_ms']} ms ({streaming['start_job_run_calls']} StartJobRun, moto)"
            ),
        ),
        Figure(
            SECTION,
            "GetJobRun per 1,000 GETs, reference policy, streaming queries",
            streaming["reference"]["get_job_run"] * per_k,
            "calls",
            note=f"every GET until the result exists ({before_result} of {plan.gets} GETs); by phase: {by_phase}",
        ),
    ]


def _count_gets(
    plugin: Plugin, counter: CallCounter, pairs: list[tuple[str, str]], gets: int
) -> dict[str, Any]:
    from async_query.api import create_app

    before = counter.get("GetJobRun")
    statuses: dict[str, int] = {}
    with serve_app(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30) as http:
        for i in range(gets):
            reply = http.get(f"{BASE}/{pairs[i % len(pairs)][1]}")
            status = str(reply.json().get("status", reply.status_code))
            statuses[status] = statuses.get(status, 0) + 1
    return {"gets": gets, "get_job_run": counter.get("GetJobRun") - before, "statuses": statuses}


def main(argv: list[str] | None = None) -> int:
    """This section alone, on a real OpenSearch node (or ``OPENSEARCH_URL``): no Spark, no service process."""
    parser = argparse.ArgumentParser(prog="python -m bench.emr", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The in-process service logs the deaths it confirms, on purpose; expected here.
    for noisy in ("async_query", "opensearch"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    plan = EmrPlan.quick() if args.quick else EmrPlan()
    report = Report(meta={"quick": args.quick, "plan": plan.__dict__})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aq-bench-emr-") as tmp, index_node(Path(tmp) / "index") as index:
        store = Store.connect(index.config)
        try:
            figures, details = run_getjobrun(store, index.config, Path(tmp), plan)
        finally:
            store.close()
    report.add(figures)
    print(report.table())
    print()
    batch = details["batch"]
    print(
        f"batch GET replies: running {batch['running_product']['statuses']} (product), "
        f"{batch['running_reference']['statuses']} (reference); finished {batch['finished_product']['statuses']} "
        f"(product), {batch['finished_reference']['statuses']} (reference)"
    )
    streaming = details["streaming"]
    print(
        "streaming GET replies by phase: "
        + "; ".join(
            f"{phase} {streaming['phases'][phase]['product']['statuses']} (product), "
            f"{streaming['phases'][phase]['reference']['statuses']} (reference)"
            for phase in STREAMING_PHASES
        )
    )
    print(f"duration {time.perf_counter() - started:.1f} s; calls by operation: {details['all_calls']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
