"""``python -m bench.first_answer NAME=PROJECT:DATA_DIR [NAME=...] [--rounds N]``: README's first
command, timed from the command to the first answer.

Each layout is an installation (a clone with its ``.venv``, as README's first command leaves it)
and a data directory. A round starts ``<PROJECT>/.venv/bin/async-query serve`` on a free port with
that data directory, waits until it answers, submits ``SELECT 1`` and polls until it succeeds, then
stops the service (SIGTERM, as Ctrl-C would). The figure is the time from the launch of the command
to the reply that carries the rows: serve's start, its index and the ``local`` metastore, and the
first query's Spark job (the warm pool's, claimed). The first start of a layout (an empty data
directory: the index's, the metastore's and the class archive's first runs) is reported apart;
the others are warm restarts. Layouts alternate within each round, so a drift of the machine's
load weighs on all. Figures: bench/README.md ("Time to a first answer").
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

QUERY = {"datasource": "local", "lang": "sql", "query": "SELECT 1"}
TIMEOUT_S = 600.0


@dataclass
class Layout:
    name: str
    project: Path
    data_dir: Path
    first: float = 0.0
    warm: list[float] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_answer(layout: Layout, log: Path) -> float:
    """One start of ``layout``'s service, to the first answer (seconds)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_", "VIRTUAL_ENV"))}
    env.update(ASYNC_QUERY_DATA_DIR=str(layout.data_dir), SPARK_LOCAL_IP="127.0.0.1")
    began = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(layout.project / ".venv" / "bin" / "async-query"), "serve", "--port", str(port)],
            cwd=layout.project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            query_id = _submit(client, proc, began)
            while time.monotonic() - began < TIMEOUT_S:
                reply = client.get(f"/_plugins/_async_query/{query_id}").json()
                if reply["status"] == "SUCCESS":
                    return time.monotonic() - began
                if reply["status"] in ("FAILED", "CANCELLED", "TIMEOUT"):
                    raise RuntimeError(f"{layout.name}: the first query ended {reply}")
                time.sleep(0.05)
        raise RuntimeError(f"{layout.name}: no answer within {TIMEOUT_S:.0f} s (log: {log})")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _submit(client: httpx.Client, proc: subprocess.Popen[bytes], began: float) -> str:
    while time.monotonic() - began < TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with code {proc.returncode}")
        try:
            reply = client.post("/_plugins/_async_query", json=QUERY)
        except httpx.HTTPError:
            time.sleep(0.05)
            continue
        if reply.status_code == 201:
            return str(reply.json()["queryId"])
        time.sleep(0.05)
    raise RuntimeError("serve did not take a query")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layouts", nargs="+", help="NAME=PROJECT:DATA_DIR")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = parser.parse_args(argv)
    layouts = []
    for spec in args.layouts:
        name, _, paths = spec.partition("=")
        project, _, data_dir = paths.partition(":")
        layouts.append(Layout(name, Path(project).resolve(), Path(data_dir)))
    for layout in layouts:
        layout.first = first_answer(layout, args.log_dir / f"first-answer-{layout.name}.log")
        print(f"{layout.name}: first start {layout.first:.1f} s", file=sys.stderr, flush=True)
    for round_no in range(args.rounds):
        order = layouts if round_no % 2 == 0 else list(reversed(layouts))
        for layout in order:
            layout.warm.append(first_answer(layout, args.log_dir / f"first-answer-{layout.name}.log"))
            print(f"{layout.name}: round {round_no + 1}: {layout.warm[-1]:.1f} s", file=sys.stderr, flush=True)
    print("| layout | first start (empty data directory) | warm restarts, median (min-max) |")
    print("|---|---|---|")
    for layout in layouts:
        median = statistics.median(layout.warm)
        print(f"| {layout.name} | {layout.first:.1f} s | {median:.1f} s ({min(layout.warm):.1f}-{max(layout.warm):.1f}) |")


if __name__ == "__main__":
    main()
