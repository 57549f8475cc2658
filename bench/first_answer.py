"""``python -m bench.first_answer NAME=PROJECT:DATA_DIR [NAME=...] [--rounds N]``: README's first
command, timed from the command to the first answer.

Each layout is an installation (a clone with its ``.venv``, as README's first command leaves it)
and a data directory. A round starts ``<PROJECT>/.venv/bin/async-query serve`` on a free port with
that data directory, waits until it answers, submits ``SELECT 1`` and polls until it succeeds, then
stops the service (SIGTERM, as Ctrl-C would). The figure is the time from the launch of the command
to the reply that carries the rows: serve's start, its index and the ``local`` metastore, and the
first query's Spark job (the warm pool's, claimed). Also when serve first took the query (its
index and catalog up: the POST's 201), and the resident memory of its index's processes once it
answered (the OpenSearch node's JVM; for older trees the index server and ``osmem-server``). The
first start of a layout (an empty data directory: the index's, the metastore's and the class
archive's first runs; the index's jars are cached) is reported apart; the others are warm
restarts. Layouts alternate within each round, so a drift of the machine's load weighs on all.
Figures: bench/README.md ("Time to a first answer").
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

from bench.env import descendants, kill_leftover_jobs
from bench.index_node import status_kb

QUERY = {"datasource": "local", "lang": "sql", "query": "SELECT 1"}
TIMEOUT_S = 600.0
#: Words of the command lines of an index's processes: the OpenSearch node's JVM, or (older trees)
#: the index server and ``osmem-server``.
INDEX_PROCESSES = ("asyncquery.jvm.IndexNode", "async_query.embedded.keeper", "osmem")


@dataclass(frozen=True)
class Start:
    """One start of serve: seconds to the query taken and to its answer; the index's memory."""

    taken_s: float
    answer_s: float
    #: The resident memory (MB) of the index's processes once the answer came.
    index_mb: float | None


@dataclass
class Layout:
    name: str
    project: Path
    data_dir: Path
    #: The command that serves (default: the project's ``.venv/bin/async-query serve``).
    command: list[str] | None = None
    first: Start | None = None
    warm: list[Start] = field(default_factory=list)

    def serve(self) -> list[str]:
        return self.command or [str(self.project / ".venv" / "bin" / "async-query"), "serve"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_answer(layout: Layout, log: Path) -> Start:
    """One start of ``layout``'s service, to the first answer."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNC_QUERY_", "OPENSEARCH_", "VIRTUAL_ENV"))}
    env.update(ASYNC_QUERY_DATA_DIR=str(layout.data_dir), SPARK_LOCAL_IP="127.0.0.1")
    began = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*layout.serve(), "--port", str(port)],
            cwd=layout.project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            query_id = _submit(client, proc, began)
            taken = time.monotonic() - began
            while time.monotonic() - began < TIMEOUT_S:
                reply = client.get(f"/_plugins/_async_query/{query_id}").json()
                if reply["status"] == "SUCCESS":
                    return Start(taken, time.monotonic() - began, index_resident_mb(proc.pid))
                if reply["status"] in ("FAILED", "CANCELLED", "TIMEOUT"):
                    raise RuntimeError(f"{layout.name}: the first query ended {reply}")
                time.sleep(0.05)
        raise RuntimeError(f"{layout.name}: no answer within {TIMEOUT_S:.0f} s (log: {log})")
    finally:
        _stop(proc)
        # The query's session job outlives the service (as across any restart): killed, so that
        # the next start, of either layout, has the machine to itself.
        kill_leftover_jobs(layout.data_dir / "jobs")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to serve's process group, as Ctrl-C would; SIGKILL after 120 s (nothing to do if it
    has exited already)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    except ProcessLookupError:
        proc.wait()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def index_resident_mb(root: int) -> float | None:
    """The resident memory (MB) of the index's processes among ``root``'s descendants."""
    total, found = 0, False
    for pid in descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        memory = status_kb(pid, ("VmRSS",)) if any(word in command for word in INDEX_PROCESSES) else None
        if memory is not None:
            total, found = total + memory[0], True
    return total / 1024 if found else None


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
        print(f"{layout.name}: first start {_start(layout.first)}", file=sys.stderr, flush=True)
    for round_no in range(args.rounds):
        order = layouts if round_no % 2 == 0 else list(reversed(layouts))
        for layout in order:
            layout.warm.append(first_answer(layout, args.log_dir / f"first-answer-{layout.name}.log"))
            print(f"{layout.name}: round {round_no + 1}: {_start(layout.warm[-1])}", file=sys.stderr, flush=True)
    print(
        "| layout | first start (empty data directory): answer (query taken) | warm restarts, median (min-max)"
        " | index resident memory after the first answer |"
    )
    print("|---|---|---|---|")
    for layout in layouts:
        assert layout.first is not None
        answers = [start.answer_s for start in layout.warm]
        memory = [start.index_mb for start in [layout.first, *layout.warm] if start.index_mb is not None]
        warm = f"{statistics.median(answers):.1f} s ({min(answers):.1f}-{max(answers):.1f})" if answers else "-"
        mb = f"{statistics.median(memory):.0f} MB" if memory else "-"
        print(f"| {layout.name} | {layout.first.answer_s:.1f} s ({layout.first.taken_s:.1f} s) | {warm} | {mb} |")


def _start(start: Start) -> str:
    memory = "" if start.index_mb is None else f", index {start.index_mb:.0f} MB"
    return f"{start.answer_s:.1f} s (query taken at {start.taken_s:.1f} s{memory})"


if __name__ == "__main__":
    main()
