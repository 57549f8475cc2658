"""Figures, their targets, and the printed table / JSON file they end up in.

Targets are recorded and shown next to each figure; nothing here fails when one is missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import operator
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
}


@dataclass(frozen=True)
class Target:
    op: str
    value: float

    def met_by(self, measured: float | None) -> bool | None:
        if measured is None or (isinstance(measured, float) and math.isnan(measured)):
            return None
        return _OPS[self.op](measured, self.value)

    def __str__(self) -> str:
        return f"{self.op} {_num(self.value)}"


@dataclass
class Figure:
    section: str
    name: str
    value: float | None
    unit: str
    target: Target | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return self.target.met_by(self.value) if self.target else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["target"] = str(self.target) if self.target else None
        out["met"] = self.met
        if isinstance(self.value, float) and math.isnan(self.value):
            out["value"] = None
        return out


@dataclass
class Report:
    meta: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    #: Raw summaries per section (all percentiles, counts, settings used).
    details: dict[str, Any] = field(default_factory=dict)
    #: Sections that did not run, with why.
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, figures: list[Figure]) -> None:
        self.figures.extend(figures)

    def as_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "figures": [f.as_json() for f in self.figures],
            "details": self.details,
            "skipped": self.skipped,
        }

    def table(self) -> str:
        header = ["section", "measure", "value", "target", "met", "note"]
        rows = [header]
        for f in self.figures:
            met = {True: "yes", False: "NO", None: ""}[f.met]
            value = "n/a" if f.value is None else f"{_num(f.value)} {f.unit}".strip()
            target = f"{f.target} {f.unit}".strip() if f.target else ""
            rows.append([f.section, f.name, value, target, met, f.note])
        for section, why in self.skipped.items():
            rows.append([section, "(skipped)", "", "", "", why])
        widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
        lines = []
        for n, row in enumerate(rows):
            cells = [row[i].ljust(widths[i]) if i != 2 else row[i].rjust(widths[i]) for i in range(len(widths))]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths) + "  ----")
        return "\n".join(lines)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (empty where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def new_report(**meta: Any) -> Report:
    """A report whose meta says when and where the run started, and under what load, with ``meta``."""
    return Report(
        meta={
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "loadavg_before": load_average(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            **meta,
        }
    )


def close_report(report: Report, started: float, out: Path) -> None:
    """The run's end in the meta (load average, duration since ``started``, a ``perf_counter``
    reading), and the JSON written to ``out``."""
    report.meta["loadavg_after"] = load_average()
    report.meta["duration_s"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.as_json(), indent=2, default=str) + "\n")


def run_summary(report: Report, out: Path) -> str:
    """The line printed under the table: duration, load, CPUs and where the JSON went."""
    meta = report.meta
    return (
        f"duration {meta['duration_s']} s, load average before {meta['loadavg_before']}"
        f" after {meta['loadavg_after']} on {meta['cpus']} CPUs; JSON: {out}"
    )


def run_standalone(
    argv: list[str] | None,
    *,
    prog: str,
    doc: str | None,
    default_out: Path,
    section: str,
    run: Callable[[bool, Path], tuple[list[Figure], dict[str, Any]]],
) -> int:
    """The main of a bench that runs one section in a work directory of its own: ``--quick`` and
    ``--out``, ``run(quick, work_dir)`` for the figures and details, the JSON written, the table
    and the run's summary printed."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 short rounds)")
    parser.add_argument("--out", type=Path, default=default_out, help=f"JSON output (default: {default_out})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = new_report(quick=args.quick)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"bench-{prog.rpartition('.')[2]}-") as work:
        figures, details = run(args.quick, Path(work))
    report.add(figures)
    report.details[section] = details
    close_report(report, started, args.out)
    return print_report(report, args.out)


def print_report(report: Report, out: Path, failure: BaseException | None = None) -> int:
    """Print the table and the run's summary line, and the failure that cut the run short if one
    did; the exit code (1 after a failure)."""
    print(report.table())
    print()
    print(run_summary(report, out))
    if failure is not None:
        print(f"\nERROR: {failure}", file=sys.stderr)
        return 1
    return 0


def _num(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if float(value).is_integer() and abs(value) >= 10:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"
