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

Then the same for batch queries (``REFRESH SKIPPING INDEX``, SPEC section 7): each POST is
classified ``batch`` and launches a job of its own (``StartJobRun`` on moto) with a ``batch``
session; simulated jobs claim those sessions and heart-beat their running statement, as above.

* running batch queries, product vs reference policy. The reference calls ``GetJobRun`` on every
  GET of a batch query until its result exists; emulated as above (one ``describe`` before every
  GET of a query that is not finished).
* finished batch queries (informational): the jobs write each result, move the statement to
  ``success`` and end their session ``dead``; GETs then cost 0 calls under both policies.

``python -m bench.emr [--quick]`` runs this section alone (an embedded index server, no Spark and
no service process); ``python -m bench.run`` runs it with the others.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import Launcher
from async_query.service import AsyncQueryService, SubmitRequest
from async_query.settings import Settings
from bench.env import free_port
from bench.report import Figure, Report, Target
from query_core.config import OpenSearchConfig
from query_core.models import (
    LosslessResult,
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementProgress,
    Versioned,
    now_millis,
)
from query_core.states import SessionState, SessionType, StatementState, is_terminal
from query_core.store import IndexStore

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

    @classmethod
    def quick(cls) -> EmrPlan:
        return cls(gets=200, sessions=4, batch_queries=6)


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


class ReferencePolicyService(AsyncQueryService):
    """The service, plus what the reference does on GET: ask EMR Serverless about the job first,
    until the query is finished (the reference stops asking once the query's result exists)."""

    async def get_without_blocking(self, query_id: str) -> bytes | None:
        return None  # every GET may ask EMR Serverless: always the worker-thread path

    def get(self, query_id: str) -> bytes:
        statement = self._statement(query_id)
        if is_terminal(statement.doc.state):
            return super().get(query_id)
        session = self.store.get_session(statement.doc.data_source_name, statement.doc.session_id)
        if session is not None:
            datasource = self.datasources.get(statement.doc.data_source_name)
            self.launcher_for(datasource).describe(session.doc.job_id)
        return super().get(query_id)


@contextmanager
def _serve(app: Any) -> Iterator[str]:
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

    def __init__(self, store: IndexStore, datasource: str, pairs: list[tuple[str, str]]) -> None:
        self.store = store
        self.datasource = datasource
        self.pairs = pairs  # (session id, statement id)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        for session_id, statement_id in self.pairs:
            statement = self.store.get_statement(self.datasource, statement_id)
            if statement is None:
                raise RuntimeError(f"statement {statement_id} is missing")
            self.store.move_statement(statement, StatementState.RUNNING)
            self.beat(session_id, statement_id, claim=True)

    def beat(self, session_id: str, statement_id: str, claim: bool = False) -> None:
        running = RunningStatement(
            query_id=statement_id,
            start_time=now_millis(),
            progress=StatementProgress(stages_total=1, tasks_total=100, tasks_completed=10),
        )

        def change(current: Any) -> Any:
            return self.store.update_session(
                current,
                SessionState.RUNNING if claim else None,
                last_update_time=now_millis(),
                running_statements=[running],
                heartbeat_interval_millis=HEARTBEAT_MS,
            )

        self.store.update_with_retry(lambda: self.store.get_session(self.datasource, session_id), change)

    def start(self) -> None:
        def run() -> None:
            while not self._stop.wait(HEARTBEAT_MS / 1000):
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

        def change(current: Any) -> Any:
            return self.store.update_session(current, last_update_time=now_millis() - minutes * 60_000)

        for session_id, _ in self.pairs:
            self.store.update_with_retry(self._reader(session_id), change)

    def finish(self, result_index: str) -> None:
        """What a batch job does at the end: write the result, the statement ``success``, the
        session ``dead`` (call :meth:`stop` first: an ended job no longer heart-beats)."""

        def end(current: Any) -> Any:
            return self.store.update_session(current, SessionState.DEAD, running_statements=[])

        for session_id, statement_id in self.pairs:
            statement = self.store.get_statement(self.datasource, statement_id)
            if statement is None:
                raise RuntimeError(f"statement {statement_id} is missing")
            self.store.put_result(
                result_index,
                ResultDoc(
                    query_id=statement_id,
                    query_text=statement.doc.query,
                    session_id=session_id,
                    status="SUCCESS",
                    job_run_id=statement.doc.job_id,
                    application_id=statement.doc.application_id,
                    data_source_name=self.datasource,
                    job_type=SessionType.BATCH.value,
                    lossless=LosslessResult(schema=[], datarows="[]", total=0),
                ),
            )
            self.store.move_statement(statement, StatementState.SUCCESS)
            self.store.update_with_retry(self._reader(session_id), end)

    def _reader(self, session_id: str) -> Callable[[], Versioned[SessionDoc] | None]:
        return lambda: self.store.get_session(self.datasource, session_id)


def run_getjobrun(
    store: IndexStore, opensearch: OpenSearchConfig, data_dir: Path, plan: EmrPlan
) -> tuple[list[Figure], dict[str, Any]]:
    """Raises ImportError when the EMR Serverless launcher is not available."""
    launcher_class = _load_launcher()
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("emr-serverless", region_name=REGION)
        counter = CallCounter(client)
        app_id = client.create_application(name="bench", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
        launcher = launcher_class(app_id, ROLE, REGION, "s3://bench/main.py", client=client)  # type: ignore[call-arg]
        datasource = Datasource(
            name="benchemr",
            connector="emr-serverless",
            properties={"applicationId": app_id, "executionRoleARN": ROLE, "region": REGION},
        )
        # The session limits are not what is measured here (and the bench's other sessions share the index).
        settings = Settings(data_dir=data_dir, max_sessions=10_000, max_refreshing_jobs=10_000)
        registry = DatasourceRegistry([datasource])

        def build(kind: type[AsyncQueryService]) -> AsyncQueryService:
            return kind(settings, store, registry, {"emr-serverless": launcher}, opensearch)

        product = build(AsyncQueryService)
        reference = build(ReferencePolicyService)
        pairs = []
        for _ in range(plan.sessions):
            submitted = product.submit(SubmitRequest(datasource.name, "sql", "SELECT 1"))
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
            if (s := store.get_statement(datasource.name, statement_id)) is not None and is_terminal(s.doc.state)
        )
        batch = _run_batch(product, reference, counter, store, datasource, plan)
        for service in (product, reference):
            service.close()

    per_k = 1000 / plan.gets
    details = {
        "plan": plan.__dict__,
        "start_job_run_calls": started,
        "product_healthy": healthy,
        "reference_style": ref,
        "product_stale": {**stale, "statements_failed_after": ended},
        "batch": batch,
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
    ]
    return figures, details


def _run_batch(
    product: AsyncQueryService,
    reference: AsyncQueryService,
    counter: CallCounter,
    store: IndexStore,
    datasource: Datasource,
    plan: EmrPlan,
) -> dict[str, Any]:
    """Batch queries: submitted through the service, kept running by heart-beating jobs, GET under
    both policies; then finished by their jobs, and GET again under both."""
    started_before = counter.get("StartJobRun")
    pairs = []
    for i in range(plan.batch_queries):
        query = f"REFRESH SKIPPING INDEX ON {datasource.name}.default.bench_emr_{i}"
        submitted = product.submit(SubmitRequest(datasource.name, "sql", query))
        session = store.get_session(datasource.name, submitted.session_id)
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


def _count_gets(
    service: AsyncQueryService, counter: CallCounter, pairs: list[tuple[str, str]], gets: int
) -> dict[str, Any]:
    from async_query.api import create_app

    before = counter.get("GetJobRun")
    statuses: dict[str, int] = {}
    with _serve(create_app(service)) as url, httpx.Client(base_url=url, timeout=30) as http:
        for i in range(gets):
            reply = http.get(f"{BASE}/{pairs[i % len(pairs)][1]}")
            status = str(reply.json().get("status", reply.status_code))
            statuses[status] = statuses.get(status, 0) + 1
    return {"gets": gets, "get_job_run": counter.get("GetJobRun") - before, "statuses": statuses}


def main(argv: list[str] | None = None) -> int:
    """This section alone, on an embedded index server (or ``OPENSEARCH_URL``): no Spark, no service process."""
    parser = argparse.ArgumentParser(prog="python -m bench.emr", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The in-process service logs the deaths it confirms, on purpose; expected here.
    for noisy in ("async_query", "opensearch"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    plan = EmrPlan.quick() if args.quick else EmrPlan()
    settings = Settings()
    embedded: Any = None
    url = settings.opensearch_url
    if not url:
        from osmem_server import OsmemServer

        embedded = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        url = embedded.url
    opensearch = settings.opensearch(url)
    store = IndexStore(opensearch)
    report = Report(meta={"quick": args.quick, "plan": plan.__dict__})
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="aq-bench-emr-") as tmp:
            figures, details = run_getjobrun(store, opensearch, Path(tmp), plan)
    finally:
        store.close()
        if embedded is not None:
            embedded.close()
    report.add(figures)
    print(report.table())
    print()
    batch = details["batch"]
    print(
        f"batch GET replies: running {batch['running_product']['statuses']} (product), "
        f"{batch['running_reference']['statuses']} (reference); finished {batch['finished_product']['statuses']} "
        f"(product), {batch['finished_reference']['statuses']} (reference)"
    )
    print(f"duration {time.perf_counter() - started:.1f} s; calls by operation: {details['all_calls']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
