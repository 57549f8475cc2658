"""The reference's ``GET /_plugins/_sql/stats`` (and ``/_plugins/_ppl/stats``): one flat JSON object
of counters under the reference's names (``docs/metrics.md``).

As in the reference, some are rolling: the count of the last whole interval (a minute by default),
kept for a window (an hour); the others count since the process started. Those of the async query
API are read from the Prometheus metrics this process keeps anyway (:mod:`async_query.metrics`);
the rolling ones are counted here, when their event happens. Names of endpoints this service does
not have (the synchronous SQL and PPL query APIs) are there, always 0, so that clients of the
reference find every key they read. The figures are this process's, as the reference's are one
node's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from async_query import metrics

#: The async query API's counters: (route, method, failures' status class or None for all).
_ASYNC_API: dict[str, tuple[str, str, int | None]] = {
    "async_query_create_api_request_count": (metrics.ROUTES["submit"], "POST", None),
    "async_query_get_api_request_count": (metrics.ROUTES["query"], "GET", None),
    "async_query_cancel_api_request_count": (metrics.ROUTES["query"], "DELETE", None),
    "async_query_create_api_failed_request_count_cuserr": (metrics.ROUTES["submit"], "POST", 4),
    "async_query_create_api_failed_request_count_syserr": (metrics.ROUTES["submit"], "POST", 5),
    "async_query_get_api_failed_request_count_cuserr": (metrics.ROUTES["query"], "GET", 4),
    "async_query_get_api_failed_request_count_syserr": (metrics.ROUTES["query"], "GET", 5),
    "async_query_cancel_api_failed_request_count_cuserr": (metrics.ROUTES["query"], "DELETE", 4),
    "async_query_cancel_api_failed_request_count_syserr": (metrics.ROUTES["query"], "DELETE", 5),
}
#: The datasource API's rolling counters of requests, by method.
_DATASOURCE_REQUESTS = {
    "POST": "datasource_create_request_count",
    "GET": "datasource_get_request_count",
    "PUT": "datasource_put_request_count",
    "PATCH": "datasource_patch_request_count",
    "DELETE": "datasource_delete_request_count",
}
#: Failed EMR Serverless calls, by launcher call.
_EMR_FAILURES = {
    "start": "emr_start_job_request_failure_count",
    "describe": "emr_get_job_request_failure_count",
    "cancel": "emr_cancel_job_request_failure_count",
}
#: Jobs started, by session type (every launcher's: EMR Serverless is the reference's only one).
_JOBS_CREATED = {
    "interactive": "emr_interactive_jobs_creation_count",
    "batch": "emr_batch_jobs_creation_count",
    "streaming": "emr_streaming_jobs_creation_count",
}
#: The reference's rolling counters (its ``RollingCounter`` metrics).
ROLLING = (
    *_DATASOURCE_REQUESTS.values(),
    "datasource_failed_request_count_syserr",
    "datasource_failed_request_count_cuserr",
    *_EMR_FAILURES.values(),
    *_JOBS_CREATED.values(),
    # The synchronous query APIs', which this service does not have: always 0.
    "request_count",
    "failed_request_count_syserr",
    "failed_request_count_cuserr",
    "failed_request_count_cb",
    "default_cursor_request_count",
    "ppl_request_count",
    "ppl_failed_request_count_syserr",
    "ppl_failed_request_count_cuserr",
)
#: Counted since the process started, and always 0 here (no synchronous query API, no breaker).
_NEVER = ("request_total", "default_cursor_request_total", "ppl_request_total", "circuit_breaker")
#: Every name of the stats, as the reference has them.
NAMES = (*_ASYNC_API, *ROLLING, "streaming_job_housekeeper_task_failure_count", *_NEVER)


class RollingCounter:
    """Counts per interval of ``interval_s`` seconds, keeping ``window_s`` seconds of them; its
    value is the count of the last whole interval (the reference's rolling counter)."""

    def __init__(self, window_s: int, interval_s: int, clock: Callable[[], float] = time.time) -> None:
        self.window_s = max(window_s, 2)
        self.interval_s = max(interval_s, 1)
        self.clock = clock
        self._counts: dict[int, int] = {}
        self._lock = threading.Lock()

    def _key(self) -> int:
        return int(self.clock()) // self.interval_s

    def add(self, n: int = 1) -> None:
        key = self._key()
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n
            oldest = key - self.window_s // self.interval_s
            for old in [k for k in self._counts if k < oldest]:
                del self._counts[old]

    def value(self) -> int:
        key = self._key() - 1
        with self._lock:
            return self._counts.get(key, 0)


class Stats:
    """The stats of one process: the async query API's from the Prometheus metrics, the rolling
    ones counted as their events happen."""

    def __init__(self, window_s: int = 3600, interval_s: int = 60, clock: Callable[[], float] = time.time) -> None:
        self.rolling = {name: RollingCounter(window_s, interval_s, clock) for name in ROLLING}

    # -- events ---------------------------------------------------------------------------

    def counts_request(self, route: str) -> bool:
        """Whether requests to ``route`` feed a rolling counter (the datasource API's do)."""
        return route in (metrics.ROUTES["datasources"], metrics.ROUTES["datasource"])

    def request(self, route: str, method: str, status: int) -> None:
        """A request to the datasource API answered with ``status``."""
        name = _DATASOURCE_REQUESTS.get(method)
        if name is not None:
            self.rolling[name].add()
        if status >= 500:
            self.rolling["datasource_failed_request_count_syserr"].add()
        elif status >= 400:
            self.rolling["datasource_failed_request_count_cuserr"].add()

    def launcher_failed(self, launcher: str, call: str) -> None:
        name = _EMR_FAILURES.get(call)
        if launcher == "emr-serverless" and name is not None:
            self.rolling[name].add()

    def job_started(self, session_type: str) -> None:
        name = _JOBS_CREATED.get(session_type)
        if name is not None:
            self.rolling[name].add()

    # -- the reply ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, int]:
        """Every name of :data:`NAMES` with its value now."""
        metrics.flush()
        values = dict.fromkeys(NAMES, 0)
        values.update({name: counter.value() for name, counter in self.rolling.items()})
        counts: dict[tuple[str, str, str], float] = {}
        for labels, value in metrics.samples(metrics.HTTP_REQUESTS, "_count"):
            key = (labels["route"], labels["method"], labels["status"])
            counts[key] = counts.get(key, 0) + value
        for name, (route, method, failed) in _ASYNC_API.items():
            values[name] = int(
                sum(v for (r, m, s), v in counts.items() if r == route and m == method and (failed is None or s == f"{failed}xx"))
            )
        values["streaming_job_housekeeper_task_failure_count"] = int(
            sum(v for _, v in metrics.samples(metrics.STREAMING_HOUSEKEEPER_FAILURES, "_total"))
        )
        return values
