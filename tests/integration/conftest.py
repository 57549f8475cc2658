"""Fixtures of the integration tier shared by several modules."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from moto import mock_aws

from async_query.api import create_app
from async_query.service import AsyncQueryService
from tests.support import RecordingLauncher, serve_http

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


# The two below serve the modules that define a ``service`` fixture built with a RecordingLauncher.


@pytest.fixture
def launcher(service: AsyncQueryService) -> RecordingLauncher:
    """The recording launcher of the module's ``service``."""
    found = service.launchers["local"]
    assert isinstance(found, RecordingLauncher)
    return found


@pytest.fixture
def client(service: AsyncQueryService) -> Iterator[httpx.Client]:
    """An HTTP client of the module's ``service``, served on a free loopback port."""
    with serve_http(create_app(service)) as url, httpx.Client(base_url=url, timeout=30) as c:
        yield c
