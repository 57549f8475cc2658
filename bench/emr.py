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
"""

from __future__ import annotations

import logging
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
from bench.report import Figure, Target
from query_core.config import OpenSearchConfig
from query_core.models import RunningStatement, SessionDoc, StatementProgress, Versioned, now_millis
from query_core.states import SessionState, StatementState, is_terminal
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

    @classmethod
    def quick(cls) -> EmrPlan:
        return cls(gets=200, sessions=4)


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
    """The service, plus what the reference does on GET: ask EMR Serverless about the job first."""

    def get(self, query_id: str) -> bytes:
        statement = self._statement(query_id)
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
        # The session limit is not what is measured here (and the bench's other sessions share the index).
        settings = Settings(data_dir=data_dir, max_sessions=10_000)
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
        for service in (product, reference):
            service.close()

    per_k = 1000 / plan.gets
    details = {
        "plan": plan.__dict__,
        "start_job_run_calls": started,
        "product_healthy": healthy,
        "reference_style": ref,
        "product_stale": {**stale, "statements_failed_after": ended},
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
    ]
    return figures, details


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
