"""``GET /_plugins/_async_query/_health``: is this service able to serve (``docs/metrics.md``)?

Each check is cheap and bounded: the index cluster answers a ping; the embedded metastore, when
there is one, runs and listens; each launcher answers its own cheap call (``spark-submit`` is
there; EMR Serverless ``GetApplication``); housekeeping runs (this process's loop is alive, and
no datasource's lease has gone unrenewed past its interval), with who holds each lease and when
this process's loop last ran. The checks run concurrently, each given ``timeout_s``; one report
is reused for ``cache_s`` seconds, however many ask.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from async_query import metrics
from query_core.models import now_millis

if TYPE_CHECKING:
    from async_query.datasources import Datasource
    from async_query.workers import Lease, Worker
    from query_core.store.connector import Found

#: A check: None when all is well, else what is wrong; it may add what it found to ``info``.
Check = Callable[[dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class HealthReport:
    #: Each check's result: ``ok``, ``details`` when it failed, and what it found.
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def serving(self) -> bool:
        return all(check["ok"] for check in self.checks.values())

    def problems(self) -> str:
        return "; ".join(f"{name}: {c['details']}" for name, c in self.checks.items() if not c["ok"])


@dataclass(frozen=True)
class WatchedLoop:
    """A housekeeping loop the health check watches: this process's loop, the lease that lets one
    process of the deployment run it, and the index each datasource's (None: the deployment's)
    lease document lives in."""

    what: str
    loop: Worker
    lease: Lease
    index_of: Callable[[str | None], str]
    per_datasource: bool


@dataclass(frozen=True)
class Watched:
    """What the health checks look at, as the few calls they make."""

    #: The index cluster answers.
    ping: Callable[[], bool]
    #: The datasources, as the index lists them; and as configured (before the first listing).
    datasources: Callable[[], list[Datasource]]
    configured: list[Datasource]
    #: A datasource's launcher: the check's name and the launcher's own cheap check.
    launcher_check: Callable[[Datasource], tuple[str, Callable[[], str | None]]]
    #: The housekeeping loops, and how to read a lease document by index and id.
    loops: list[WatchedLoop]
    read_lock: Callable[[str, str], Found | None]


def _stamp(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).isoformat(timespec="seconds") if millis else ""


class Health:
    """The service's health checks, and their last report."""

    def __init__(self, watched: Watched, timeout_s: float = 3.0, cache_s: float = 5.0) -> None:
        self.watched = watched
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        #: More checks by name (the runtime adds the embedded metastore's).
        self.extra: dict[str, Callable[[], str | None]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")
        self._lock = threading.Lock()
        self._last: tuple[float, HealthReport] | None = None
        #: The datasources as last listed (by the index check: the list is read from the index).
        self._datasources: list[Datasource] = watched.configured

    def report(self) -> HealthReport:
        """The checks' results, at most ``cache_s`` old."""
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.cache_s:
                return self._last[1]
            report = self._run(self._checks())
            self._last = (time.monotonic(), report)
        for name, check in report.checks.items():
            metrics.HEALTHY.labels(name).set(1 if check["ok"] else 0)
        return report

    def _run(self, checks: dict[str, Check]) -> HealthReport:
        infos: dict[str, dict[str, Any]] = {name: {} for name in checks}
        futures: dict[str, Future[str | None]] = {
            name: self._pool.submit(check, infos[name]) for name, check in checks.items()
        }
        deadline = time.monotonic() + self.timeout_s
        results: dict[str, dict[str, Any]] = {}
        for name, future in futures.items():
            try:
                problem = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                problem = f"no answer within {self.timeout_s:g} s"
            except Exception as exc:  # noqa: BLE001 - a failing check is a finding, not an error
                problem = f"{type(exc).__name__}: {exc}"
            results[name] = {"ok": problem is None, **({"details": problem} if problem else {}), **infos[name]}
        return HealthReport(results)

    def _checks(self) -> dict[str, Check]:
        checks: dict[str, Check] = {"index": self._index}
        for name, extra in self.extra.items():
            checks[name] = lambda info, extra=extra: extra()  # type: ignore[misc]
        checks.update(self._launcher_checks())
        checks["housekeeping"] = self._housekeeping
        return checks

    # -- the checks -------------------------------------------------------------------------

    def _index(self, info: dict[str, Any]) -> str | None:
        if not self.watched.ping():
            return "the index cluster does not answer"
        self._datasources = self.watched.datasources()  # the next report checks their launchers
        return None

    def _launcher_checks(self) -> dict[str, Check]:
        """One check per launcher of the active datasources: a shared one under its connector's
        name, an EMR Serverless one under its datasource's."""
        checks: dict[str, Check] = {}
        for datasource in self._datasources:
            if datasource.status != "ACTIVE":
                continue
            name, check = self.watched.launcher_check(datasource)
            if name not in checks:
                checks[name] = lambda info, check=check: check()  # type: ignore[misc]
        return checks

    def _housekeeping(self, info: dict[str, Any]) -> str | None:
        problems = []
        now = now_millis()
        for watched in self.watched.loops:
            loop, what = watched.loop, watched.what
            info[what] = {"lastRun": _stamp(loop.last_run_ms), "lastError": loop.last_error}
            if loop.stopped_unexpectedly:
                problems.append(f"this process's {what} loop has stopped")
            names: list[str | None] = [d.name for d in self._datasources] if watched.per_datasource else [None]
            leases = info[what]["leases"] = {}
            for name in names:
                found = self.watched.read_lock(watched.index_of(name), watched.lease.name)
                if found is None:
                    continue
                expires = int(found.source.get("expires", 0))
                leases[name or "deployment"] = {
                    "holder": found.source.get("owner", ""),
                    "thisProcess": found.source.get("owner") == watched.lease.owner,
                    "renewed": _stamp(int(found.source.get("lastUpdateTime", 0))),
                    "expires": _stamp(expires),
                }
                if now - expires > loop.interval_s * 1000:
                    problems.append(f"{what} of {name or 'the deployment'} has not run since {_stamp(expires)}")
        return "; ".join(problems) or None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
