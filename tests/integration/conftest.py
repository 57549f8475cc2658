"""Fixtures of the integration tier shared by several modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

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
