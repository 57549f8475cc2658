"""How to reach the OpenSearch cluster; shared by the plugin's settings and the job's Spark conf."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field


class OpenSearchConfig(BaseModel):
    """Connection to the cluster holding the request and result indexes."""

    url: str = "http://127.0.0.1:9200"
    auth: Literal["noauth", "basic", "sigv4"] = "noauth"
    username: str = ""
    password: str = Field(default="", repr=False)
    region: str = "us-east-1"
    verify_certs: bool = True
    ca_certs: str = ""
    #: Seconds one HTTP request may take.
    request_timeout: float = 10.0
    #: Transient failures are retried until either bound is reached.
    retry_attempts: int = 8
    retry_seconds: float = 30.0
    pool_maxsize: int = 64
    #: The uid the index's listener must belong to (the embedded node's): each new loopback
    #: connection is checked before anything is sent on it (:mod:`query_core.peer`). None: no check.
    peer_uid: int | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 9200)

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme or "http"


def auth_kind(value: str) -> Literal["noauth", "basic", "sigv4"]:
    """The authentication a connection setting names; one not known is read as ``noauth``."""
    if value == "basic":
        return "basic"
    if value == "sigv4":
        return "sigv4"
    return "noauth"
