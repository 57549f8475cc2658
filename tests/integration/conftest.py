"""Fixtures of the integration tier shared by several modules."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from async_query.launcher.job_process import STARTUP_DIR
from async_query.launcher.local import DAEMON_MODULE_KEY, WORKER_DAEMON

AWS_REGION = "us-east-1"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-process AWS, with fake credentials and no endpoint or profile from the machine."""
    for var in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_EMR_SERVERLESS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", AWS_REGION)
    with mock_aws():
        yield


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session in this process for the tests marked ``spark`` (it takes seconds
    to start), with the ``opensearch`` data source registered and a throwaway warehouse."""
    from pyspark.sql import SparkSession

    from flint_repl_job.opensearch_source import register

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import this project's modules
    os.environ["TZ"] = "UTC"  # Python's conversion of Spark timestamps uses the process time zone
    # Python processes Spark starts with its own daemon import the compiled PySpark, as a job's do.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(STARTUP_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    time.tzset()
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("integration-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config(DAEMON_MODULE_KEY, WORKER_DAEMON)  # workers import the compiled PySpark, as a job's do
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _spark_is_active(request: pytest.FixtureRequest) -> None:
    """A test of the shared session finds it active on its thread: Spark looks Python data
    sources (``opensearch``) up in the thread's active session, and what ran before the test in
    this process may have left that thread without one."""
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
