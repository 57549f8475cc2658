"""localstack/init: the setup script's AWS calls, against a moto server (Docker is not available here).

The script only talks to ``AWS_ENDPOINT_URL``, so a moto server on a loopback port stands in for
LocalStack. The ready hook is run the way LocalStack runs ``ready.d/*.py`` (``exec`` with empty
globals). The last test follows the README: package the job into the bucket the script made and
start a job run with the datasource file it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from async_query.cli import main as cli_main
from async_query.datasources import DatasourceRegistry
from async_query.launcher.base import JobRequest, job_conf
from async_query.launcher.emr import launcher_from_settings
from async_query.settings import Settings, SparkEngineConfig
from query_core.config import OpenSearchConfig
from query_core.states import SessionType
from tests.node import CLIENT_SSL

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "localstack" / "init" / "setup.py"
HOOK = REPO / "localstack" / "init" / "ready.d" / "10-async-query.py"
REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """One moto server for the module (stopping one waits out its half-second poll)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The module's moto server, emptied of everything earlier tests made."""
    httpx.post(f"{moto_server}/moto-api/reset", timeout=30, verify=CLIENT_SSL).raise_for_status()
    return moto_server


@pytest.fixture
def aws_env(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """This process's boto3 pointed at the moto server, as the README sets it up for LocalStack."""
    for var in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_EMR_SERVERLESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return endpoint


def aws(plugin: str, endpoint: str) -> Any:
    return boto3.client(
        plugin, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test"
    )


def run_setup(endpoint: str, out_dir: Path, **env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    clean.update(AWS_ENDPOINT_URL=endpoint, AWS_DEFAULT_REGION=REGION, SETUP_OUTPUT_DIR=str(out_dir), **env)
    done = subprocess.run(
        [sys.executable, str(SETUP)], env=clean, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_setup_creates_bucket_role_application_and_domain(endpoint: str, tmp_path: Path) -> None:
    result = run_setup(endpoint, tmp_path / "out")

    assert result["bucket"] == "async-query"
    aws("s3", endpoint).head_bucket(Bucket="async-query")
    role = aws("iam", endpoint).get_role(RoleName="async-query-job-role")["Role"]
    assert result["executionRoleARN"] == role["Arn"]
    app = aws("emr-serverless", endpoint).get_application(applicationId=result["applicationId"])["application"]
    assert (app["name"], app["type"].upper(), app["releaseLabel"]) == ("async-query", "SPARK", "emr-7.1.0")
    domain = aws("opensearch", endpoint).describe_domain(DomainName="async-query")["DomainStatus"]
    assert domain["EngineVersion"] == "OpenSearch_2.11"
    assert result["opensearchEndpoint"] == domain["Endpoint"]
    assert result["opensearchUrl"] == f"http://{domain['Endpoint']}"

    written = json.loads((tmp_path / "out" / "setup.json").read_text())
    assert written == result
    registry = DatasourceRegistry.from_file(tmp_path / "out" / "datasources.json")
    ds = registry.get("mys3")
    assert (ds.connector, ds.engine) == ("S3GLUE", "emr-serverless")
    engine = json.loads((tmp_path / "out" / "engine.json").read_text())
    assert engine == {
        "applicationId": result["applicationId"],
        "executionRoleARN": role["Arn"],
        "region": REGION,
        "packageS3Uri": "s3://async-query/job",
    }


def test_setup_run_twice_changes_nothing(endpoint: str, tmp_path: Path) -> None:
    first = run_setup(endpoint, tmp_path / "one")
    second = run_setup(endpoint, tmp_path / "two")
    assert second == first
    apps = aws("emr-serverless", endpoint).list_applications()["applications"]
    assert [a["id"] for a in apps] == [first["applicationId"]]
    assert [b["Name"] for b in aws("s3", endpoint).list_buckets()["Buckets"]] == ["async-query"]


def test_setup_takes_names_from_the_environment(endpoint: str, tmp_path: Path) -> None:
    result = run_setup(
        endpoint,
        tmp_path / "out",
        ASYNC_QUERY_BUCKET="other-bucket",
        ASYNC_QUERY_PACKAGE_PREFIX="/rel/v2/",
        EMR_APPLICATION_NAME="other-app",
        OPENSEARCH_DOMAIN="other-domain",
        DATASOURCE_NAME="lake",
    )
    assert result["packageS3Uri"] == "s3://other-bucket/rel/v2"
    assert result["datasources"][0]["name"] == "lake"
    aws("s3", endpoint).head_bucket(Bucket="other-bucket")
    app = aws("emr-serverless", endpoint).get_application(applicationId=result["applicationId"])["application"]
    assert app["name"] == "other-app"
    aws("opensearch", endpoint).describe_domain(DomainName="other-domain")


def test_ready_hook_runs_setup_the_way_localstack_does(
    endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("ASYNC_QUERY_SETUP_SCRIPT", str(SETUP))
    monkeypatch.setenv("SETUP_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("EMR_APPLICATION_NAME", "from-hook")
    exec(HOOK.read_bytes(), {})  # LocalStack's PythonScriptRunner does exactly this
    result = json.loads(capsys.readouterr().out)
    app = aws("emr-serverless", endpoint).get_application(applicationId=result["applicationId"])["application"]
    assert app["name"] == "from-hook"
    assert (tmp_path / "out" / "datasources.json").exists()


def test_readme_path_package_then_start_a_job(aws_env: str, tmp_path: Path) -> None:
    """Setup, ``package-job`` into its bucket, then the datasource it wrote starts a job run."""
    result = run_setup(aws_env, tmp_path / "out")
    assert cli_main(["package-job", "--s3", result["packageS3Uri"]]) == 0
    objects = aws("s3", aws_env).list_objects_v2(Bucket=result["bucket"], Prefix="job/")["Contents"]
    assert {o["Key"] for o in objects} == {"job/main.py", "job/async_query_job.zip"}

    ds = DatasourceRegistry.from_file(tmp_path / "out" / "datasources.json").get("mys3")
    engine = (tmp_path / "out" / "engine.json").read_text()
    settings = Settings(spark_execution_engine_config=SparkEngineConfig.model_validate_json(engine))
    launcher = launcher_from_settings(settings)  # its client follows AWS_ENDPOINT_URL
    opensearch = OpenSearchConfig(url=result["opensearchUrl"] or "http://localhost:4566")
    conf, secret = job_conf(Settings(), ds, opensearch, "sid-readme", SessionType.INTERACTIVE)
    job_id = launcher.start(JobRequest("sid-readme", ds, SessionType.INTERACTIVE, conf, secret))
    run = aws("emr-serverless", aws_env).get_job_run(applicationId=result["applicationId"], jobRunId=job_id)
    submit = run["jobRun"]["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://async-query/job/main.py"
    assert "--py-files s3://async-query/job/async_query_job.zip" in submit["sparkSubmitParameters"]
    launcher.close()
