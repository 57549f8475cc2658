"""The shared catalog's costs: metastore start-up, a session's cold start with the metastore and
without it (Spark's in-memory catalog), and the warm round trip with the metastore.

``python -m bench.catalog [--rounds N]``: one run of the service in this process (embedded index
and local Spark), the two catalogs alternating round by round so that the machine's noise falls on
both alike. A cold start is a POST that opens a new session until its GET answers SUCCESS; its
statement reads the same small parquet table, by its name in the metastore (so the job really
connects to it) or by its path without a catalog. Prints every figure, and the ratio of the cold starts.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from async_query.embedded.metastore import Metastore
from async_query.runtime import Runtime, build_runtime
from async_query.service import SubmitRequest
from async_query.settings import Settings
from bench.stats import percentile
from query_core.store import quiet_driver_logs

log = logging.getLogger(__name__)
TERMINAL = ("SUCCESS", "FAILED", "CANCELLED", "TIMEOUT")


def run_query(runtime: Runtime, query: str, session_id: str | None = None, timeout: float = 180) -> tuple[float, str]:
    """Seconds from POST to a terminal GET, and the session id."""
    began = time.monotonic()
    submitted = runtime.plugin.service.submit(SubmitRequest("local", "sql", query, session_id))
    while True:
        reply = json.loads(runtime.plugin.service.get(submitted.query_id))
        if reply["status"] in TERMINAL:
            break
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"{query!r} did not finish within {timeout} s")
        time.sleep(0.005)
    if reply["status"] != "SUCCESS":
        raise RuntimeError(f"{query!r} ended {reply}")
    return time.monotonic() - began, str(submitted.session_id)


def metastore_start(home: Path) -> tuple[float, float]:
    """Start-up of a new metastore (creates its schema), then of the same one again."""
    files = home.with_name(home.name + "-files")  # its log and pid file: ours, apart from its own directory
    first = Metastore.start(home, home / "warehouse", files=files)
    first.close()
    again = Metastore.start(home, home / "warehouse", files=files)
    again.close()
    return first.started_s, again.started_s


def _seconds(samples: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.catalog", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="cold starts per catalog (default: 3)")
    parser.add_argument("--warm", type=int, default=30, help="warm round trips (default: 30)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
        Path(tmp).chmod(0o711)  # run as root, jobs and metastores run as the job user, who passes through
        new_s, again_s = metastore_start(Path(tmp) / "probe")
        print(f"metastore start-up: {new_s:.2f} s new (schema created), {again_s:.2f} s on restart")
        runtimes = {
            catalog: build_runtime(
                Settings(data_dir=Path(tmp) / catalog, local_catalog=catalog, spark_master="local[2]", warm_pool_size=0)  # type: ignore[arg-type]
            )
            for catalog in ("metastore", "in-memory")
        }
        try:
            cold: dict[str, list[float]] = {name: [] for name in runtimes}
            # The same table both ways: by name through the metastore, by path without a catalog.
            queries = {
                "metastore": "SELECT count(*) FROM t",
                "in-memory": f"SELECT count(*) FROM parquet.`{(Path(tmp) / 'in-memory' / 'warehouse' / 't').as_uri()}`",
            }
            for runtime in runtimes.values():
                run_query(runtime, "CREATE TABLE IF NOT EXISTS t USING parquet AS SELECT id FROM range(10)")
            session = ""
            for _ in range(args.rounds):
                for name, runtime in runtimes.items():
                    seconds, session_id = run_query(runtime, queries[name])
                    cold[name].append(seconds)
                    if name == "metastore":
                        session = session_id
            warm = [run_query(runtimes["metastore"], "SELECT count(*) FROM t", session)[0] for _ in range(args.warm)]
        finally:
            for runtime in runtimes.values():
                runtime.close()
    with_ms, without = sorted(cold["metastore"]), sorted(cold["in-memory"])
    print(f"cold start with the metastore:    median {percentile(with_ms, 50):.2f} s  {_seconds(with_ms)}")
    print(f"cold start with in-memory catalog: median {percentile(without, 50):.2f} s  {_seconds(without)}")
    print(f"ratio (metastore / in-memory):     {percentile(with_ms, 50) / percentile(without, 50):.2f}")
    print(
        f"warm round trip (metastore, SELECT count(*) FROM t): p50 {percentile(warm, 50) * 1000:.0f} ms, "
        f"p99 {percentile(warm, 99) * 1000:.0f} ms over {len(warm)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
