"""Where the CPU of a run goes, by kind of process (bench/README.md, "The test suite").

``python -m bench.cpu_sampler OUT.json`` samples every process's CPU from ``/proc`` twice a
second until it gets SIGTERM or SIGINT, then writes the seconds each kind used (Spark jobs' JVMs,
their Python drivers, the tests' Spark sessions, metastores, index nodes, pytest workers, ...).
``time`` cannot say this: it counts only processes reaped by those it waited for, and a job or
metastore whose parent was killed is reaped by init. A process that lives less than half a second
is missed, and each process's last half second too.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType

TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.5

#: (the kind, words its command line holds), first match wins.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("job JVM", ("SparkSubmit", "flint_repl_job/main.py")),
    ("job warm-up JVM", ("SparkSubmit", "warmup.py")),
    ("test Spark JVM", ("SparkSubmit", "pyspark-shell")),
    ("other Spark JVM", ("SparkSubmit",)),
    ("job Python", ("flint_repl_job/main.py",)),
    ("metastore", ("HiveMetaStore",)),
    ("index node", ("asyncquery.jvm.IndexNode",)),
    ("Spark task Python workers", ("pyspark.daemon",)),
    ("Spark task Python workers", ("pyspark/daemon",)),
    ("Spark task Python workers", ("flint_repl_job.worker_daemon",)),
    ("pytest workers", ("exec(eval(sys.stdin.readline()))",)),
    ("pytest", ("pytest",)),
    ("service processes", ("async_query",)),
    ("service processes", ("async-query",)),
    ("other JVM", ("java",)),
    ("other Python", ("python",)),
)


def kind_of(command: str) -> str:
    return next((kind for kind, words in KINDS if all(w in command for w in words)), "other")


class Sampler:
    def __init__(self) -> None:
        #: pid -> (CPU seconds seen last, kind)
        self.seen: dict[str, tuple[float, str]] = {}
        self.total: defaultdict[str, float] = defaultdict(float)

    def sample(self) -> None:
        alive = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                cpu = (int(fields[11]) + int(fields[12])) / TICKS
                kind = self.seen[pid][1] if pid in self.seen else self._kind(pid)
            except (OSError, IndexError, ValueError):
                continue
            if kind is None:
                continue
            before = self.seen.get(pid, (0.0, kind))[0]
            self.total[kind] += max(0.0, cpu - before)
            self.seen[pid] = (cpu, kind)
            alive.add(pid)
        for pid in set(self.seen) - alive:
            del self.seen[pid]

    @staticmethod
    def _kind(pid: str) -> str | None:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return kind_of(command) if command else None

    def report(self) -> dict[str, float]:
        found = {kind: round(seconds, 1) for kind, seconds in sorted(self.total.items(), key=lambda kv: -kv[1])}
        found["all"] = round(sum(self.total.values()), 1)
        return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.cpu_sampler OUT.json", file=sys.stderr)
        return 2
    out = Path(args[0])
    sampler = Sampler()
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        sampler.sample()
        time.sleep(INTERVAL_S)
    out.write_text(json.dumps(sampler.report(), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
