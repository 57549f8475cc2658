"""The datasource registry and its REST API (the reference's shape)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from async_query.api import create_app
from async_query.service import AsyncQueryService
from tests.conftest import ServiceFactory
from tests.support import RecordingLauncher, serve_http

DS = "/_plugins/_query/_datasources"
Q = "/_plugins/_async_query"


@pytest.fixture
def api(make_service: ServiceFactory) -> Iterator[tuple[httpx.Client, AsyncQueryService, RecordingLauncher]]:
    emr = RecordingLauncher(application_id="app-emr")
    service = make_service(launchers={"local": RecordingLauncher(), "emr-serverless": emr})
    with serve_http(create_app(service)) as url, httpx.Client(base_url=url) as client:
        yield client, service, emr


def emr_body(name: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "connector": "emr-serverless",
        "properties": {
            "applicationId": "app-emr",
            "executionRoleARN": "arn:aws:iam::123456789012:role/job",
            "region": "us-east-1",
        },
        **extra,
    }


def test_create_get_list_update_delete(api: tuple[httpx.Client, AsyncQueryService, RecordingLauncher]) -> None:
    client, _, _ = api
    created = client.post(DS, json=emr_body("lake", resultIndex="query_execution_result_lake_custom"))
    assert created.status_code == 201, created.text
    assert created.json() == "Created DataSource with name lake"
    got = client.get(f"{DS}/lake").json()
    assert got["connector"] == "emr-serverless" and got["resultIndex"] == "query_execution_result_lake_custom"
    assert got["properties"]["applicationId"] == "app-emr" and got["status"] == "ACTIVE"
    assert {d["name"] for d in client.get(DS).json()} >= {"lake"}
    updated = client.put(DS, json=emr_body("lake", description="the lake"))
    assert updated.status_code == 200 and client.get(f"{DS}/lake").json()["description"] == "the lake"
    patched = client.patch(DS, json={"name": "lake", "description": "patched"})
    assert patched.status_code == 200 and client.get(f"{DS}/lake").json()["description"] == "patched"
    assert client.delete(f"{DS}/lake").status_code == 204
    gone = client.get(f"{DS}/lake")
    assert gone.status_code == 400 and gone.json()["error"]["reason"] == "Invalid Request"


@pytest.mark.parametrize(
    "body",
    [
        {"name": "bad name!", "connector": "local"},
        {"name": "x", "connector": "prometheus"},
        {"name": "x", "connector": "local", "resultIndex": "my_results"},
        {"name": "x", "connector": "local", "unknown": 1},
        {"name": "x", "connector": "local", "properties": {"master": "local[2] --conf x=y"}},
        {"connector": "local"},
        [1, 2],
    ],
)
def test_invalid_datasources_are_400(
    api: tuple[httpx.Client, AsyncQueryService, RecordingLauncher], body: object
) -> None:
    client, _, _ = api
    reply = client.post(DS, json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "IllegalArgumentException"


def test_duplicate_and_configured_names_are_refused(
    api: tuple[httpx.Client, AsyncQueryService, RecordingLauncher],
) -> None:
    client, service, _ = api
    configured = service.datasources.all()[0].name
    assert client.post(DS, json={"name": configured, "connector": "local"}).status_code == 400
    assert client.delete(f"{DS}/{configured}").status_code == 400
    assert client.post(DS, json=emr_body("twice")).status_code == 201
    assert client.post(DS, json=emr_body("twice")).status_code == 400


def test_queries_on_a_rest_datasource_use_its_launcher_and_never_share_sessions(
    api: tuple[httpx.Client, AsyncQueryService, RecordingLauncher],
) -> None:
    client, service, emr = api
    assert client.post(DS, json=emr_body("lake")).status_code == 201
    lake = client.post(Q, json={"datasource": "lake", "lang": "sql", "query": "SELECT 1"}).json()
    assert len(emr.started) == 1 and emr.started[0].datasource.name == "lake"
    assert emr.started[0].result_index == "query_execution_result_lake"
    statement = service.store.statements.get("lake", lake["queryId"])
    assert statement is not None and statement.doc.application_id == "app-emr"
    local = service.datasources.all()[0].name
    other = client.post(
        Q, json={"datasource": local, "lang": "sql", "query": "SELECT 1", "sessionId": lake["sessionId"]}
    )
    assert other.status_code == 201 and other.json()["sessionId"] != lake["sessionId"]
