"""Warm pool jobs on EMR Serverless, through boto3 against moto: started with ``StartJobRun``,
claimed by a new session (no ``StartJobRun`` of its own), cancelled with ``CancelJobRun`` when the
pool is made smaller."""

from __future__ import annotations

import shlex
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from async_query.datasources import Datasource, local_datasource
from async_query.launcher.emr import EmrServerlessLauncher
from async_query.runtime import Plugin
from async_query.service import SubmitRequest
from query_core.models import PoolJobDoc, Versioned
from query_core.states import PoolJobState, SessionState
from query_core.store import Store
from query_core.store.pool import slot_id
from tests.conftest import PluginFactory

REGION = "us-east-1"
ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/job"


class Calls:
    def __init__(self, client: Any, operation: str) -> None:
        self.params: list[dict[str, Any]] = []
        client.meta.events.register(f"provide-client-params.emr-serverless.{operation}", self._record)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.params.append(dict(params))


@pytest.fixture
def emr(aws: None) -> Any:
    return boto3.client("emr-serverless", region_name=REGION)


@pytest.fixture
def emr_pool(emr: Any, make_plugin: PluginFactory) -> tuple[Plugin, Any, str]:
    app = emr.create_application(name="aq", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
    launcher = EmrServerlessLauncher(app, ROLE, REGION, "s3://b/job/main.py", client=emr)
    # the deployment's default on EMR Serverless is no pool: the datasource asks for two jobs
    plugin = make_plugin(datasources=[local_datasource("local")], launchers={"emr-serverless": launcher})
    plugin.datasources.create(Datasource(name="lake", connector="emr-serverless", properties={"warmPoolSize": "2"}))
    return plugin, emr, app


def slots(plugin: Plugin) -> list[Versioned[PoolJobDoc]]:
    [pool] = [p for p in plugin.pools.all() if p.datasource.name == "lake"]
    found = [plugin.store.pool.slot(slot_id(pool.key, n)) for n in range(2)]
    assert all(s is not None for s in found)
    return [s for s in found if s is not None]


def test_pool_jobs_start_through_start_job_run_are_claimed_and_cancelled_on_scale_down(
    emr_pool: tuple[Plugin, Any, str], store: Store
) -> None:
    plugin, emr, app = emr_pool
    starts, cancels = Calls(emr, "StartJobRun"), Calls(emr, "CancelJobRun")
    plugin.pool_keeper.run_once()

    assert len(starts.params) == 2
    jobs = slots(plugin)
    for params, slot in zip(starts.params, jobs, strict=True):
        assert slot.doc.state == PoolJobState.STARTING and slot.doc.engine == "emr-serverless"
        assert slot.doc.application_id == app
        assert params["name"] == f"async-query:pool:{slot.doc.slot_id}"
        assert params["tags"]["type"] == "pool" and params["jobDriver"]["sparkSubmit"]["entryPointArguments"] == ["-"]
        words = shlex.split(params["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"])
        assert f"spark.flint.job.poolSlot={slot.doc.slot_id}" in words
        assert not [w for w in words if w.startswith(("spark.flint.job.sessionId", "spark.flint.datasource.name"))]
        run = emr.get_job_run(applicationId=app, jobRunId=slot.doc.job_id)["jobRun"]
        assert run["state"] not in ("CANCELLED", "FAILED")
    for slot in jobs:  # the jobs warm up and report ready
        assert plugin.store.pool.ready(slot, 30_000) is not None

    submitted = plugin.service.submit(SubmitRequest("lake", "sql", "SELECT 1"))
    session = store.sessions.get("lake", submitted.session_id)
    assert session is not None and session.doc.state == SessionState.NOT_STARTED
    assert session.doc.job_id in {s.doc.job_id for s in jobs} and session.doc.application_id == app
    assert len(starts.params) == 2  # claimed: no StartJobRun of its own
    claimed = [s for s in slots(plugin) if s.doc.state == PoolJobState.CLAIMED]
    assert [s.doc.session_id for s in claimed] == [submitted.session_id]
    idle = next(s for s in jobs if s.doc.job_id != session.doc.job_id)

    store.index.refresh("*")
    plugin.datasources.update(Datasource(name="lake", connector="emr-serverless", properties={"warmPoolSize": "0"}))
    plugin.pool_keeper.run_once()

    assert [c["jobRunId"] for c in cancels.params] == [idle.doc.job_id]
    assert emr.get_job_run(applicationId=app, jobRunId=idle.doc.job_id)["jobRun"]["state"] == "CANCELLED"
    assert emr.get_job_run(applicationId=app, jobRunId=session.doc.job_id)["jobRun"]["state"] != "CANCELLED"
    after = {s.doc.job_id: s.doc.state for s in slots(plugin)}
    assert after == {idle.doc.job_id: PoolJobState.DEAD, session.doc.job_id: PoolJobState.CLAIMED}
    assert len(starts.params) == 2  # and nothing refilled
