"""kill -9 of the whole service on the embedded default (the service, its OpenSearch node, the
metastore and every Spark job) at a random moment of a POST storm: after the
restart, every query the service acknowledged with a 201 is readable and ends in a terminal state,
and every query a client saw ``SUCCESS`` still answers ``SUCCESS``.

Two kill points: one while warm sessions run the statements (results and successes being written),
one while new sessions are still starting. The seed is random unless ``ASYNC_QUERY_FAULT_SEED``
names one; it is printed, with the kill points and the figure ``acknowledged N, lost M``.
"""

from __future__ import annotations

import os
import random
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import BASE
from tests.conftest import REAL_CLUSTER
from tests.e2e.conftest import TERMINAL
from tests.faults.procs import PluginProcess, kill_all_jobs, plugin_env
from tests.node import CLIENT_SSL
from tests.support import free_port, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(REAL_CLUSTER), reason="kills the embedded index server, not a real cluster"),
]

DS = "local"
STORM = 300
THREADS = 4


@dataclass
class Acked:
    """Every query the service acknowledged, and those a client saw succeed."""

    query_ids: list[str] = field(default_factory=list)
    succeeded: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, query_id: str) -> None:
        with self.lock:
            self.query_ids.append(query_id)


class Service:
    """``async-query serve`` on the embedded default, the leader of its own process group."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data_dir = tmp / "var"
        self.env = plugin_env()
        self.env.update(
            ASYNC_QUERY_DATA_DIR=str(self.data_dir),
            ASYNC_QUERY_SPARK_MASTER="local[1]",
            # After the crash, sessions whose jobs died are found stale within seconds.
            ASYNC_QUERY_HEARTBEAT_RUNNING_MS="1000",
            ASYNC_QUERY_HEARTBEAT_IDLE_MS="1000",
            ASYNC_QUERY_LIVENESS_CACHE_S="1",
            SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        )
        self.plugins: list[PluginProcess] = []

    @property
    def url(self) -> str:
        return self.plugins[-1].url

    def serve(self) -> None:
        log = self.tmp / f"serve-{len(self.plugins) + 1}.log"
        plugin = PluginProcess(free_port(), self.env, log, own_group=True)
        self.plugins.append(plugin)
        plugin.wait_ready(timeout=180)

    def crash(self) -> None:
        """kill -9 of everything at once: the service's process group, then every job's."""
        self.plugins[-1].kill_group()
        kill_all_jobs(self.data_dir)

    def close(self) -> None:
        for plugin in self.plugins:
            if plugin.proc.poll() is None:
                plugin.kill_group()
        kill_all_jobs(self.data_dir)


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    try:
        yield running
    finally:
        running.close()


def post(http: httpx.Client, query: str, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"datasource": DS, "lang": "sql", "query": query}
    if session_id:
        body["sessionId"] = session_id
    reply = http.post(BASE, json=body)
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def status(http: httpx.Client, query_id: str) -> tuple[int, str]:
    reply = http.get(f"{BASE}/{query_id}")
    return reply.status_code, reply.json().get("status", "") if reply.status_code == 200 else ""


def storm(url: str, sessions: list[str], acked: Acked, rng: random.Random) -> list[threading.Thread]:
    """POSTs from several threads into the sessions (up to :data:`STORM`), and a poller noting
    which acknowledged queries it saw succeed; all stop once the service is gone."""
    counter = iter(range(STORM))
    lock = threading.Lock()
    stop = threading.Event()

    def poster(seed: int) -> None:
        pick = random.Random(seed)
        with httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http:
            while True:
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
                try:
                    acked.add(
                        post(http, f"SELECT {n} AS n, '{'x' * pick.randrange(50)}' AS pad", pick.choice(sessions))[
                            "queryId"
                        ]
                    )
                except (httpx.HTTPError, AssertionError):
                    stop.set()
                    return

    def poller() -> None:
        """Polls the oldest acknowledged queries not seen ending yet (a session runs them in order)."""
        ended: set[str] = set()
        with httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as http:
            while not stop.is_set():
                with acked.lock:
                    ids = [q for q in acked.query_ids if q not in ended][:20]
                try:
                    for query_id in ids:
                        now = status(http, query_id)[1]
                        if now == "SUCCESS":
                            acked.succeeded.add(query_id)
                        if now in TERMINAL:
                            ended.add(query_id)
                except httpx.HTTPError:
                    return

    threads = [threading.Thread(target=poster, args=(rng.random(),), daemon=True) for _ in range(THREADS)]
    threads.append(threading.Thread(target=poller, daemon=True))
    for thread in threads:
        thread.start()
    return threads


def crash_mid_storm(plugin: Service, sessions: list[str], acked: Acked, rng: random.Random, label: str) -> None:
    before = len(acked.query_ids)
    kill_after = before + rng.randrange(20, STORM - 20)
    print(f"{label}: kill -9 after {kill_after - before} acknowledged POSTs of {STORM}")
    threads = storm(plugin.url, sessions, acked, rng)
    wait_for(lambda: len(acked.query_ids) >= kill_after, timeout=120, what=f"{kill_after} acknowledged POSTs")
    plugin.crash()
    for thread in threads:
        thread.join(timeout=60)


def wait_ended(http: httpx.Client, query_id: str) -> str:
    def ended() -> str | None:
        now = status(http, query_id)[1]
        return now if now in TERMINAL else None

    return wait_for(ended, timeout=120, what=f"{query_id} to end")


def wait_succeeded(http: httpx.Client, query_id: str) -> None:
    wait_for(lambda: status(http, query_id)[1] == "SUCCESS", timeout=180, what="a warm session")


def lost_after_restart(plugin: Service, acked: Acked) -> int:
    """Every acknowledged query readable and terminal; every seen success still a success."""
    lost = 0
    with httpx.Client(base_url=plugin.url, timeout=30, verify=CLIENT_SSL) as http:
        for query_id in acked.query_ids:
            code, first = status(http, query_id)
            if code != 200:
                print(f"lost: {query_id} answers {code}")
                lost += 1
                continue
            final = first if first in TERMINAL else wait_ended(http, query_id)
            if query_id in acked.succeeded and final != "SUCCESS":
                print(f"lost: {query_id} was seen SUCCESS, now {final}")
                lost += 1
    return lost


def test_kill_9_of_everything_mid_storm_loses_no_acknowledged_query(plugin: Service) -> None:
    seed = int(os.environ.get("ASYNC_QUERY_FAULT_SEED", secrets.randbelow(1_000_000)))
    print(f"seed {seed} (set ASYNC_QUERY_FAULT_SEED to repeat)")
    rng = random.Random(seed)
    acked = Acked()
    plugin.serve()
    with httpx.Client(base_url=plugin.url, timeout=60, verify=CLIENT_SSL) as http:
        warm = [post(http, "SELECT 0")["sessionId"] for _ in range(2)]  # two sessions, jobs starting
        for session_id in warm:
            wait_succeeded(http, post(http, "SELECT 1", session_id)["queryId"])
    crash_mid_storm(plugin, warm, acked, rng, "kill point 1 (warm sessions)")

    plugin.serve()
    with httpx.Client(base_url=plugin.url, timeout=60, verify=CLIENT_SSL) as http:
        starting = [post(http, "SELECT 0")["sessionId"] for _ in range(2)]
    crash_mid_storm(plugin, starting, acked, rng, "kill point 2 (sessions starting)")

    plugin.serve()
    lost = lost_after_restart(plugin, acked)
    print(f"acknowledged {len(acked.query_ids)}, lost {lost} ({len(acked.succeeded)} seen SUCCESS before a crash)")
    assert acked.succeeded and lost == 0
