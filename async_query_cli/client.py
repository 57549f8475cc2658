"""A small HTTP client of the async query REST API (``/_plugins/_async_query``).

It speaks only the public wire contract, so it works against any deployment of this service (and,
for submit/get/cancel, against the reference OpenSearch SQL plugin). Every failure leaves as one of
two exceptions, :class:`ApiError` (the service answered with an error) or :class:`ServiceUnreachableError`
(no answer), each with a message fit to show a person.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

log = logging.getLogger(__name__)

BASE = "/_plugins/_async_query"
DEFAULT_URL = "http://127.0.0.1:9000"
URL_ENV = "ASYNC_QUERY_URL"
#: The user to authenticate as (``--user`` wins) and its password (else it is asked for).
USER_ENV = "ASYNC_QUERY_USER"
PASSWORD_ENV = "ASYNC_QUERY_PASSWORD"
#: Statuses after which a query never changes.
TERMINAL = frozenset({"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"})


def default_url() -> str:
    """The service URL: ``$ASYNC_QUERY_URL`` or the local default."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


@dataclass(frozen=True)
class Reply:
    """A GET reply: parsed (decimals kept exact as :class:`~decimal.Decimal`) and as sent."""

    body: dict[str, Any]
    text: str

    @property
    def status(self) -> str:
        return str(self.body.get("status", "")).upper()

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


class ClientError(Exception):
    """Base of the client's errors; ``str()`` is the message for a person."""


class ApiError(ClientError):
    """The service answered with an error status (the API's error shape, or anything else)."""

    def __init__(self, status: int, reason: str, error_type: str, details: str) -> None:
        self.status = status
        self.reason = reason
        self.error_type = error_type
        self.details = details
        super().__init__(self._message())

    def _message(self) -> str:
        head = f"{self.status} {self.reason}".strip()
        if self.error_type:
            head += f" ({self.error_type})"
        return f"{head}: {self.details}" if self.details else head

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """Read ``{"status", "error": {"type", "reason", "details"}}``; tolerate any other body."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = body["error"]
            return cls(
                response.status_code,
                str(err.get("reason") or response.reason_phrase),
                str(err.get("type") or ""),
                str(err.get("details") or ""),
            )
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            return cls(response.status_code, response.reason_phrase, "", body["error"])
        text = " ".join(response.text.split())[:300]
        return cls(response.status_code, response.reason_phrase, "", text)


class ServiceUnreachableError(ClientError):
    """No HTTP answer: connection refused, DNS failure, timeout."""


class WaitTimeoutError(ClientError):
    """``wait`` gave up before the query finished (the query itself goes on)."""

    def __init__(self, query_id: str, seconds: float, last: dict[str, Any]) -> None:
        self.query_id = query_id
        self.last = last
        super().__init__(
            f"query {query_id} still {last.get('status', 'unknown')} after {seconds:g} s; it keeps running "
            f"(check it with: async-query get {query_id})"
        )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context of every client this process makes: building one reads the CA
    bundle (tens of milliseconds), and a process that runs commands in turn (a notebook, a test
    suite) would pay that for each, even for a plain-HTTP URL."""
    return httpx.create_ssl_context()


class AsyncQueryClient:
    """Synchronous client; one keep-alive connection pool per instance.

    ``auth`` (user, password) is sent with every request as HTTP Basic. Credentials written into
    the URL are refused: a URL is shown in messages and kept in the remembered-sessions file.
    """

    def __init__(
        self,
        url: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        auth: tuple[str, str] | None = None,
    ):
        self.url = (url or default_url()).rstrip("/")
        if has_credentials(self.url):
            raise ClientError(
                f"the service URL must not hold credentials: pass --user (or set {USER_ENV}) and put the password "
                f"in {PASSWORD_ENV} or type it when asked"
            )
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport, auth=auth, verify=tls_context())

    def __enter__(self) -> AsyncQueryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise ServiceUnreachableError(
                f"cannot connect to the async query service at {self.url} ({_cause(exc)}); is it running? "
                f"Set --url or {URL_ENV}"
            ) from None
        except httpx.TimeoutException:
            raise ServiceUnreachableError(f"the async query service at {self.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ServiceUnreachableError(f"request to {self.url} failed: {_cause(exc)}") from None
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise ApiError(response.status_code, "Unreadable reply", "", response.text[:300]) from None
        if not isinstance(body, dict):
            raise ApiError(response.status_code, "Unreadable reply", "", "the reply is not a JSON object")
        return body

    # -- the API ----------------------------------------------------------------------------

    def submit(
        self, query: str, datasource: str = "local", lang: str = "sql", session_id: str | None = None
    ) -> dict[str, Any]:
        """POST a query; returns ``{"queryId", "sessionId"?}``."""
        body: dict[str, Any] = {"datasource": datasource, "lang": lang, "query": query}
        if session_id:
            body["sessionId"] = session_id
        return self._json(self._request("POST", BASE, json=body))

    def get(self, query_id: str) -> dict[str, Any]:
        """GET a query's status (and result once ``SUCCESS``)."""
        return self.fetch(query_id).body

    def fetch(self, query_id: str) -> Reply:
        """GET, keeping the reply's text: numbers in it are exact, a float would not be."""
        response = self._request("GET", f"{BASE}/{_path_part(query_id)}")
        try:
            body = json.loads(response.text, parse_float=Decimal)
        except ValueError:
            raise ApiError(response.status_code, "Unreadable reply", "", response.text[:300]) from None
        if not isinstance(body, dict):
            raise ApiError(response.status_code, "Unreadable reply", "", "the reply is not a JSON object")
        return Reply(body, response.text)

    def cancel(self, query_id: str) -> None:
        self._request("DELETE", f"{BASE}/{_path_part(query_id)}")

    def sessions(
        self, datasource: str | None = None, state: str | None = None, size: int = 100
    ) -> list[dict[str, Any]]:
        """This product's session listing (most recently active first)."""
        params: dict[str, Any] = {"size": size}
        if datasource:
            params["datasource"] = datasource
        if state:
            params["state"] = state
        found = self._json(self._request("GET", f"{BASE}/_sessions", params=params)).get("sessions", [])
        return list(found) if isinstance(found, list) else []

    def wait(
        self,
        query_id: str,
        on_update: Callable[[Reply, float], None] | None = None,
        timeout: float | None = None,
        first_interval: float = 0.05,
        max_interval: float = 1.0,
        fast_s: float = 2.0,
    ) -> Reply:
        """Poll GET until the query is terminal; ``on_update(reply, elapsed)`` after every poll.

        Polls every ``first_interval`` for the first ``fast_s`` seconds (a warm statement takes a
        few hundred ms, and a GET costs the service about a millisecond), then back off to
        ``max_interval``. Raises :class:`WaitTimeoutError` after ``timeout`` seconds.
        """
        started = time.monotonic()
        interval = first_interval
        while True:
            reply = self.fetch(query_id)
            elapsed = time.monotonic() - started
            if on_update is not None:
                on_update(reply, elapsed)
            if reply.finished:
                return reply
            if timeout is not None and elapsed + interval > timeout:
                raise WaitTimeoutError(query_id, timeout, reply.body)
            time.sleep(interval)
            if elapsed >= fast_s:
                interval = min(max_interval, interval * 1.5)


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user or password (``http://user:pass@host``)."""
    return "@" in urlsplit(url.strip()).netloc


def _path_part(query_id: str) -> str:
    """The id as one path segment: ids are URL-safe, and anything else must not change the path."""
    return quote(query_id, safe="")


def _cause(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text
