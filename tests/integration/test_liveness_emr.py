"""GetJobRun calls, counted with botocore event hooks on a real boto3 client against moto."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from async_query.datasources import Datasource
from async_query.launcher.emr import EmrServerlessLauncher
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from query_core.models import RunningStatement, now_millis
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory

REGION = "us-east-1"


class Counter:
    def __init__(self, client: Any, operation: str) -> None:
        self.calls = 0
        client.meta.events.register(f"before-call.emr-serverless.{operation}", self._count)

    def _count(self, **_: Any) -> None:
        self.calls += 1


@pytest.fixture
def emr(aws: None) -> Any:
    return boto3.client("emr-serverless", region_name=REGION)


@pytest.fixture
def emr_service(emr: Any, make_plugin: PluginFactory) -> tuple[Plugin, Any]:
    app = emr.create_application(name="aq", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
    launcher = EmrServerlessLauncher(
        app, f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/job", REGION, "s3://b/job/main.py", client=emr
    )
    lake = Datasource(name="lake", connector="emr-serverless")
    return make_plugin(datasources=[lake], launchers={"emr-serverless": launcher}), emr


def submit(plugin: Plugin, session_id: str | None = None) -> tuple[str, str]:
    done = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1", session_id))
    return done.query_id, done.session_id


def beat(store: Store, session_id: str, age_ms: int, running: list[str]) -> None:
    current = store.sessions.get("lake", session_id)
    assert current is not None
    report = [RunningStatement(query_id=q, start_time=now_millis()) for q in running]
    claimed = store.sessions.claim(current, current.doc.job_id)  # the job runs, under the run launched
    assert claimed is not None
    store.sessions.beat(claimed, at=now_millis() - age_ms, running_statements=report, heartbeat_interval_millis=2_000)


def test_zero_get_job_run_calls_for_1000_gets_of_healthy_sessions(
    emr_service: tuple[Plugin, Any], store: Store
) -> None:
    plugin, emr = emr_service
    get_job_run = Counter(emr, "GetJobRun")
    start_job_run = Counter(emr, "StartJobRun")
    queries = []
    for _ in range(4):
        qid, sid = submit(plugin)
        beat(store, sid, 0, [qid])
        queries.append(qid)
    for i in range(1000):
        assert json.loads(plugin.service.get(queries[i % 4]))["status"] == "WAITING"
    assert get_job_run.calls == 0
    assert start_job_run.calls == 4  # one StartJobRun per session, none per statement


def test_one_get_job_run_confirms_a_dead_job_for_50_concurrent_pollers(
    emr_service: tuple[Plugin, Any], store: Store
) -> None:
    plugin, emr = emr_service
    qid, sid = submit(plugin)
    session = store.sessions.get("lake", sid)
    assert session is not None
    emr.cancel_job_run(applicationId=session.doc.application_id, jobRunId=session.doc.job_id)
    beat(store, sid, 60_000, [qid])  # the job stopped heart-beating a minute ago
    get_job_run = Counter(emr, "GetJobRun")
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(lambda _: json.loads(plugin.service.get(qid)), range(50)))
    assert get_job_run.calls == 1
    assert {r["status"] for r in replies} == {"FAILED"}
    assert "is cancelled" in replies[0]["error"]
    ended = store.sessions.get("lake", sid)
    assert ended is not None and ended.doc.state == SessionState.DEAD
    _, new_sid = submit(plugin, sid)
    assert new_sid != sid
