"""The datasource API as OpenSearch Dashboards uses it, over real HTTP on a real index.

The bodies are the ones Dashboards sends: the observability plugin's "Connect to Amazon S3" page
(``configure_datasource.tsx``), its data-connection pages (``data_connection.tsx``,
``inactive_data_connection.tsx``, ``manage_data_connections_table.tsx``, the edit routes of
``data_connections_router.ts``), the acceleration flyout (``source_selector.tsx``), the catalog cache
loader (``cache_loader.tsx``) and the query workbench (``fetch_datasources.ts``, which offers only
``S3GLUE`` datasources). Replies are the reference's. An S3GLUE datasource's query starts an EMR
Serverless job (moto) with the Glue and index-store settings the reference would give it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from async_query.api import create_app
from async_query.runtime import Plugin
from async_query.settings import SparkEngineConfig
from query_core.ids import DATASOURCE_INDEX
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, serve_http

DS = "/_plugins/_query/_datasources"
Q = "/_plugins/_async_query"
REGION = "us-east-1"
GLUE_ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/glue-access"
JOB_ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/emr-job"
PASSWORD = 'flint-Pa55 "word"'

STORE_URI = "https://search-logs.us-east-1.es.amazonaws.com:443"
#: configure_datasource.tsx, S3GLUE with basic authentication, exactly as it is sent.
S3_CONNECTION: dict[str, Any] = {
    "name": "my_glue",
    "allowedRoles": ["analyst"],
    "connector": "s3glue",
    "properties": {
        "glue.auth.type": "iam_role",
        "glue.auth.role_arn": GLUE_ROLE,
        "glue.indexstore.opensearch.uri": STORE_URI,
        "glue.indexstore.opensearch.auth": "basicauth",
        "glue.indexstore.opensearch.auth.username": "flint_writer",
        "glue.indexstore.opensearch.auth.password": PASSWORD,
    },
}


@pytest.fixture
def dashboards(make_plugin: PluginFactory) -> Iterator[tuple[httpx.Client, Plugin]]:
    """What a Dashboards server talks to: this service with its ``local`` datasource."""
    plugin = make_plugin(launchers={"local": RecordingLauncher()})
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, verify=CLIENT_SSL) as client:
        yield client, plugin


def not_found(name: str, details: str) -> dict[str, Any]:
    return {
        "status": 404,
        "error": {"type": "DataSourceNotFoundException", "reason": "There was internal problem at backend", "details": details},
    }


def test_an_s3_connection_is_created_listed_edited_and_deleted(
    dashboards: tuple[httpx.Client, Plugin],
) -> None:
    client, plugin = dashboards
    local = plugin.datasources.all()[0].name

    created = client.post(DS, json=S3_CONNECTION)
    assert (created.status_code, created.json()) == (201, "Created DataSource with name my_glue")

    # The workbench offers S3GLUE datasources only: both this one and the embedded default.
    listed = client.get(DS).json()
    assert {d["name"] for d in listed if d["connector"] == "S3GLUE"} == {local, "my_glue"}
    # The acceleration flyout compares in upper case; the manage table reads status.
    assert {d["name"] for d in listed if d["connector"].upper() == "S3GLUE" and d["status"] == "ACTIVE"} >= {
        local,
        "my_glue",
    }
    assert PASSWORD not in client.get(DS).text

    # The data-connection page reads these fields of one datasource.
    got = client.get(f"{DS}/my_glue").json()
    assert got["name"] == "my_glue" and got["connector"] == "S3GLUE" and got["status"] == "ACTIVE"
    assert got["allowedRoles"] == ["analyst"] and got["description"] == ""
    assert got["resultIndex"] == "query_execution_result_my_glue"
    assert got["properties"]["glue.indexstore.opensearch.uri"] == STORE_URI
    assert "glue.indexstore.opensearch.auth.password" not in got["properties"]
    assert "glue.indexstore.opensearch.auth.username" not in got["properties"]  # as the reference leaves it out
    assert got["properties"]["engine"] == "local"  # what runs it here: no EMR Serverless configured

    # Credentials are not in the index in clear either.
    stored = plugin.store.index.get(DATASOURCE_INDEX, "my_glue")
    assert stored is not None and PASSWORD not in str(stored.source) and "flint_writer" not in str(stored.source)

    # The edit routes: roles, then disable and enable (inactive_data_connection.tsx sends 'active').
    roles = client.patch(DS, json={"name": "my_glue", "allowedRoles": ["analyst", "ops"]})
    assert (roles.status_code, roles.json()) == (200, "Updated DataSource with name my_glue")
    assert client.get(f"{DS}/my_glue").json()["allowedRoles"] == ["analyst", "ops"]
    assert client.patch(DS, json={"name": "my_glue", "status": "disabled"}).status_code == 200
    assert client.get(f"{DS}/my_glue").json()["status"] == "DISABLED"
    assert client.patch(DS, json={"name": "my_glue", "status": "active"}).status_code == 200
    assert client.get(f"{DS}/my_glue").json()["status"] == "ACTIVE"
    # The patches kept the credentials: the datasource still checks as basic auth.
    again = plugin.datasources.find("my_glue")
    assert again is not None and again.properties["glue.indexstore.opensearch.auth.password"] == PASSWORD

    assert client.delete(f"{DS}/my_glue").status_code == 204
    gone = client.get(f"{DS}/my_glue")
    assert (gone.status_code, gone.json()) == (404, not_found("my_glue", "DataSource with name my_glue doesn't exist."))


def test_dashboards_browses_the_embedded_default(dashboards: tuple[httpx.Client, Plugin]) -> None:
    client, plugin = dashboards
    local = plugin.datasources.all()[0].name
    got = client.get(f"{DS}/{local}").json()
    assert (got["connector"], got["status"], got["properties"]) == ("S3GLUE", "ACTIVE", {"engine": "local"})
    # cache_loader.tsx's first query when a datasource is opened.
    body = {"lang": "sql", "query": f"SHOW SCHEMAS IN `{local}`", "datasource": local}
    submitted = client.post(Q, json=body)
    assert submitted.status_code == 201, submitted.text
    assert set(submitted.json()) == {"queryId", "sessionId"}
    polled = client.get(f"{Q}/{submitted.json()['queryId']}")
    assert polled.status_code == 200 and polled.json()["status"] in ("WAITING", "RUNNING")


def test_an_s3_connection_runs_on_local_spark_without_emr_serverless(
    dashboards: tuple[httpx.Client, Plugin],
) -> None:
    client, plugin = dashboards
    assert client.post(DS, json=S3_CONNECTION).status_code == 201
    body = {"lang": "sql", "query": "SHOW SCHEMAS IN `my_glue`", "datasource": "my_glue"}
    assert client.post(Q, json=body).status_code == 201
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, RecordingLauncher)
    started = launcher.started[-1]
    # The local catalog and the service's own index: no Glue without AWS.
    assert started.conf["spark.datasource.flint.host"] == plugin.opensearch.host
    assert not any(key.startswith("spark.hive.") for key in started.conf)
    # The reference's S3GLUE deny list applies to the reference's kind of datasource.
    assert "CREATE_FUNCTION" in started.conf["spark.flint.validation.deniedElements"].split(",")


@pytest.mark.parametrize(
    ("method", "body", "details"),
    [
        ("GET", None, "DataSource with name ghost doesn't exist."),
        ("DELETE", None, "Datasource with name: ghost doesn't exist"),
        ("PATCH", {"name": "ghost", "status": "active"}, "DataSource with name ghost doesn't exist."),
        ("PUT", {"name": "ghost", "connector": "local"}, "Datasource with name: ghost doesn't exist"),
    ],
)
def test_an_unknown_name_is_the_reference_s_404(
    dashboards: tuple[httpx.Client, Plugin], method: str, body: object, details: str
) -> None:
    client, _ = dashboards
    path = DS if method in ("PATCH", "PUT") else f"{DS}/ghost"
    reply = client.request(method, path, json=body)
    assert (reply.status_code, reply.json()) == (404, not_found("ghost", details))


HOSTILE = {
    "jars": {"name": "evil", "connector": "local", "sparkConf": {"spark.jars": "https://evil.example.com/x.jar"}},
    "java options": {
        "name": "evil",
        "connector": "local",
        "sparkConf": {"spark.driver.extraJavaOptions": "-javaagent:/tmp/x.jar"},
    },
    "listeners": {"name": "evil", "connector": "local", "sparkConf": {"spark.extraListeners": "com.evil.Listener"}},
    "job's index": {"name": "evil", "connector": "local", "sparkConf": {"spark.datasource.flint.host": "evil"}},
    "job's settings": {"name": "evil", "connector": "local", "sparkConf": {"spark.flint.job.type": "batch"}},
    "entry point": {"name": "evil", "connector": "emr-serverless", "properties": {"entryPoint": "s3://evil/main.py"}},
    "application": {"name": "evil", "connector": "emr-serverless", "properties": {"applicationId": "00evil"}},
    "unlisted role": {"name": "evil", "connector": "local", "properties": {"executionRoleARN": "arn:aws:iam::1:role/x"}},
    "engine not here": {"name": "evil", "connector": "emr-serverless"},
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_datasource_is_a_400_and_nothing_is_written(
    dashboards: tuple[httpx.Client, Plugin], body: dict[str, Any]
) -> None:
    client, _ = dashboards
    reply = client.post(DS, json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "IllegalArgumentException"
    assert client.get(f"{DS}/evil").status_code == 404


def test_the_configured_datasources_cannot_be_changed_over_rest(
    dashboards: tuple[httpx.Client, Plugin],
) -> None:
    client, plugin = dashboards
    configured = plugin.datasources.all()[0].name
    assert client.post(DS, json={"name": configured, "connector": "local"}).status_code == 400
    assert client.patch(DS, json={"name": configured, "status": "disabled"}).status_code == 400
    assert client.delete(f"{DS}/{configured}").status_code == 400
    assert client.post(DS, json={**S3_CONNECTION, "name": "twice"}).status_code == 201
    twice = client.post(DS, json={**S3_CONNECTION, "name": "twice"})
    assert twice.json()["error"]["details"] == "A datasource already exists with name: twice"


def test_queries_never_share_sessions_across_datasources(dashboards: tuple[httpx.Client, Plugin]) -> None:
    client, plugin = dashboards
    assert client.post(DS, json={"name": "lake", "connector": "local"}).status_code == 201
    lake = client.post(Q, json={"datasource": "lake", "lang": "sql", "query": "SELECT 1"}).json()
    local = plugin.datasources.all()[0].name
    other = client.post(
        Q, json={"datasource": local, "lang": "sql", "query": "SELECT 1", "sessionId": lake["sessionId"]}
    )
    assert other.status_code == 201 and other.json()["sessionId"] != lake["sessionId"]


# -- an S3GLUE datasource on EMR Serverless (moto) -----------------------------------------------


def test_an_s3glue_datasource_s_query_starts_an_emr_serverless_job_with_its_glue_settings(
    aws: None, make_plugin: PluginFactory
) -> None:
    emr = boto3.client("emr-serverless", region_name=REGION)
    app = emr.create_application(name="aq", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
    engine = SparkEngineConfig.model_validate(
        {"applicationId": app, "executionRoleARN": JOB_ROLE, "region": REGION, "packageS3Uri": "s3://pkg/job"}
    )
    plugin = make_plugin(launchers={"local": RecordingLauncher()}, spark_execution_engine_config=engine)
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, verify=CLIENT_SSL) as client:
        assert client.post(DS, json=S3_CONNECTION).status_code == 201
        assert client.get(f"{DS}/my_glue").json()["properties"]["engine"] == "emr-serverless"
        submitted = client.post(Q, json={"datasource": "my_glue", "lang": "sql", "query": "SELECT 1"})
        assert submitted.status_code == 201, submitted.text

    session = plugin.store.sessions.get("my_glue", submitted.json()["sessionId"])
    assert session is not None and session.doc.application_id == app
    run = emr.get_job_run(applicationId=app, jobRunId=session.doc.job_id)["jobRun"]
    assert run["executionRole"] == JOB_ROLE
    submit = run["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://pkg/job/main.py"
    assert PASSWORD not in submit["sparkSubmitParameters"]
    words = shlex.split(submit["sparkSubmitParameters"])
    conf = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--conf")
    # The reference's S3GlueDataSourceSparkParameterComposer: the Glue catalog reached with the role ...
    assert conf["spark.emr-serverless.driverEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"] == GLUE_ROLE
    assert conf["spark.executorEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"] == GLUE_ROLE
    assert conf["spark.hive.metastore.glue.role.arn"] == GLUE_ROLE
    assert conf["spark.hadoop.hive.metastore.client.factory.class"] == (
        "com.amazonaws.glue.catalog.metastore.AWSGlueDataCatalogHiveClientFactory"
    )
    assert conf["spark.flint.datasource.name"] == "my_glue"
    # ... and the index store as the job's index connection, its password read from Secrets Manager.
    assert conf["spark.datasource.flint.host"] == "search-logs.us-east-1.es.amazonaws.com"
    assert (conf["spark.datasource.flint.port"], conf["spark.datasource.flint.scheme"]) == ("443", "https")
    assert (conf["spark.datasource.flint.auth"], conf["spark.datasource.flint.auth.username"]) == ("basic", "flint_writer")
    assert "spark.datasource.flint.auth.password" not in conf
    secret = boto3.client("secretsmanager", region_name=REGION).get_secret_value(
        SecretId=conf["spark.datasource.flint.auth.passwordSecretArn"]
    )
    assert secret["SecretString"] == PASSWORD
    # The reference's S3GLUE deny list applies to it.
    assert "CREATE_FUNCTION" in conf["spark.flint.validation.deniedElements"].split(",")
