"""What one GET costs the service: index reads and CPU time, per path, in one process.

The service runs in this process against a real OpenSearch node (another process), so
``time.process_time`` counts the service's CPU only, not the node's. A simulated session
runs one statement (``running``, heart-beating), and the same GET is made many times along each
path the service has:

* **event loop, session cached**: :meth:`AsyncQueryService.get_without_blocking` as the REST
  layer calls it, with the session read less than ``session_cache_ms`` ago: one real-time read.
* **event loop, session read too**: the same with the session cache off: two reads, concurrent.
* **worker thread**: :meth:`AsyncQueryService.get`, as the REST layer calls it for everything the
  event loop leaves (with the session cache on).
* **finished**: a finished statement's reply, from the reply cache: no read.

Index reads are counted at the store's two lean readers (every read of these paths goes through
one of them). HTTP parsing and routing (uvicorn, FastAPI) are not included: they cost the same
for every GET; the REST API section of ``bench.run`` measures them.

    python -m bench.get_cost [--gets N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from bench.index_node import index_node
from bench.report import Figure, Report
from bench.sim import SimulatedSessions
from query_core.config import OpenSearchConfig
from query_core.store import IndexClient, Store

SECTION = "GET cost"
DS = "local"


class _Counted:
    """Counts the calls of one reader's ``get``."""

    def __init__(self, reader: Any) -> None:
        self.calls = 0
        inner = reader.get

        if asyncio.iscoroutinefunction(inner):

            async def counted_async(*args: Any) -> Any:
                self.calls += 1
                return await inner(*args)

            reader.get = counted_async
        else:

            def counted(*args: Any) -> Any:
                self.calls += 1
                return inner(*args)

            reader.get = counted


def _service(store: Store, cfg: OpenSearchConfig, data_dir: Path, session_cache_ms: int) -> Plugin:
    settings = Settings(data_dir=data_dir, session_cache_ms=session_cache_ms)
    launcher = LocalLauncher(settings.data_dir, settings.cluster_name, "local[1]")
    return build_plugin(settings, store, DatasourceRegistry([local_datasource(DS)]), {"local": launcher}, cfg)


def _measure(gets: int, call: Callable[[int], Any], reads: Callable[[], int]) -> tuple[float, float]:
    """(CPU ms per GET, index reads per GET) over ``call(gets)``, after a warm-up."""
    call(min(200, gets))
    reads0, cpu0 = reads(), time.process_time()
    call(gets)
    return (time.process_time() - cpu0) / gets * 1000, (reads() - reads0) / gets


def run_get_cost(cfg: OpenSearchConfig, gets: int = 5_000) -> list[Figure]:
    """Every figure, on the index ``cfg`` reaches (with its credential)."""
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="aq-get-cost-") as tmp:
        client = IndexClient(cfg)
        store = Store(client)
        reader, async_reader = client.lean_readers
        assert reader is not None and async_reader is not None, "no lean reader for this cluster"
        blocking, on_loop = _Counted(reader), _Counted(async_reader)

        def reads() -> int:
            return blocking.calls + on_loop.calls

        data_dir = Path(tmp) / "service"
        with SimulatedSessions(store, DS, 1, jobs_dir=data_dir / "jobs") as sim:
            sim.create()
            statement_id = sim.sessions[0].statement_id
            loop = asyncio.new_event_loop()

            def on_the_loop(plugin: Plugin, query_id: str, status: bytes) -> Callable[[int], Any]:
                """``n`` GETs in one coroutine, as the REST layer's event loop makes them."""

                async def gets(n: int) -> None:
                    for _ in range(n):
                        # The local launcher's answer that the job runs is reused for a few
                        # seconds; once it is old, one GET asks again (in a worker thread).
                        body = await plugin.service.get_without_blocking(query_id) or plugin.service.get(query_id)
                        assert status in body, body

                return lambda n: loop.run_until_complete(gets(n))

            for label, cache_ms in (("session cached", 60_000), ("session read too", 0)):
                plugin = _service(store, cfg, data_dir, cache_ms)
                plugin.service.get(statement_id)  # as a POST would, this process learns the query's session
                cpu, per = _measure(gets, on_the_loop(plugin, statement_id, b"RUNNING"), reads)
                figures += _pair(f"event loop, {label}", cpu, per)

            plugin = _service(store, cfg, data_dir, 250)
            plugin.service.get(statement_id)
            cpu, per = _measure(gets, lambda n: [plugin.service.get(statement_id) for _ in range(n)], reads)
            figures += _pair("worker thread (session cache on)", cpu, per)

            finished = sim.sessions[0].statement_id
            _finish(store, finished)
            plugin.service.get(finished)
            cpu, per = _measure(gets, on_the_loop(plugin, finished, b"SUCCESS"), reads)
            figures += _pair("finished (reply cache)", cpu, per)
            loop.close()
        store.close()
    return figures


def _finish(store: Store, statement_id: str) -> None:
    from bench.api_latency import _finish_one

    _finish_one(store, DS, local_datasource(DS).results, statement_id)


def _pair(label: str, cpu_ms: float, reads: float) -> list[Figure]:
    return [
        Figure(SECTION, f"{label}: CPU per GET", cpu_ms, "ms", note="service process only"),
        Figure(SECTION, f"{label}: index reads per GET", reads, "reads"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gets", type=int, default=5_000, help="GETs per path (default 5,000)")
    args = parser.parse_args()
    with index_node() as index:
        report = Report()
        report.add(run_get_cost(index.config, args.gets))
        print(report.table())


if __name__ == "__main__":
    main()
