"""``python -m bench.run ... --baseline REF``: the same bench on an earlier commit and on this tree,
alternately in one run, and the ratio of every figure.

On a shared machine two runs made minutes apart do not compare: the load of everything else moves
the figures more than most changes do. Run alternately (REF, this tree, this tree, REF, ... over
``--rounds`` rounds, so that a drift of the machine's load weighs on both alike), each figure's
ratio (this tree's median over REF's) says what a change did.

REF's tree is exported (``git archive``) into a cache directory with a virtual environment of its
own (``pip install -e '.[test]'``), made once per commit and reused: ``$ASYNC_QUERY_BENCH_CACHE``
or ``~/.cache/async-query-bench``, then ``<commit>/tree``. Each side runs its own ``bench.run`` in
a process of its own, with the arguments given here (less ``--baseline``, ``--rounds``,
``--baseline-args`` and ``--out``; REF's runs get ``--baseline-args`` too, where an older tree
needs another argument for the same system), and writes its own JSON; figures are matched by
section and name. Figures only one side measured are listed after the others, without a ratio.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results" / "baseline.json"
#: Units judged against the tolerance: latencies (less is better) and request rates (more is).
LOWER_IS_BETTER = frozenset({"ms"})
HIGHER_IS_BETTER = frozenset({"GET/s"})
#: The tolerance a figure is judged by: within 5 % of REF's.
TOLERANCE = 0.05
#: What a child run's environment must not carry over from this one.
_CLEARED_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")


def cache_root() -> Path:
    configured = os.environ.get("ASYNC_QUERY_BENCH_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "async-query-bench"


def resolve(ref: str) -> str:
    """The full commit id of ``ref`` in this repository."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise SystemExit(f"--baseline: no such commit: {ref} ({found.stderr.strip()})")
    return found.stdout.strip()


def prepare_tree(commit: str) -> Path:
    """REF's tree with its own virtual environment, made once (a ``ready`` file marks it done)."""
    home = cache_root() / commit
    tree = home / "tree"
    if (home / "ready").exists():
        return tree
    print(f"== baseline: preparing {commit[:12]} in {home} (once per commit)", file=sys.stderr, flush=True)
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    with tempfile.TemporaryFile() as archive:
        subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, stdout=archive, check=True)
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(tree, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    subprocess.run([str(tree / ".venv" / "bin" / "pip"), "install", "-q", "-e", ".[test]"], cwd=tree, check=True)
    (home / "ready").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    return tree


@dataclass
class Side:
    label: str
    tree: Path
    python: Path
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: Arguments for this side's runs only.
    extra: list[str] = field(default_factory=list)

    def run(self, args: list[str], out: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _CLEARED_ENV}
        command = [str(self.python), "-m", "bench.run", *args, *self.extra, "--out", str(out)]
        print(f"== baseline: {self.label}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(command, cwd=self.tree, env=env, check=False)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"--baseline: the {self.label} run failed (exit code {done.returncode})")
        self.runs.append(json.loads(out.read_text()))


def figures_of(run: dict[str, Any]) -> dict[tuple[str, str], tuple[float | None, str]]:
    return {(f["section"], f["name"]): (f["value"], f["unit"]) for f in run.get("figures", [])}


@dataclass
class Row:
    section: str
    name: str
    unit: str
    ref: list[float]
    cur: list[float]

    @property
    def ratio(self) -> float | None:
        if not self.ref or not self.cur:
            return None
        ref = statistics.median(self.ref)
        return statistics.median(self.cur) / ref if ref else None

    @property
    def within(self) -> bool | None:
        """Whether this tree is within the tolerance of REF (or better)."""
        ratio = self.ratio
        if ratio is None or self.unit not in LOWER_IS_BETTER | HIGHER_IS_BETTER:
            return None
        return ratio <= 1 + TOLERANCE if self.unit in LOWER_IS_BETTER else ratio >= 1 - TOLERANCE


def compare(ref: Side, cur: Side) -> list[Row]:
    """Every figure, in the order this tree reports them: those both sides measured, then those
    only one did."""
    rows: dict[tuple[str, str], Row] = {}
    for side, runs in (("cur", cur.runs), ("ref", ref.runs)):
        for run in runs:
            for key, (value, unit) in figures_of(run).items():
                if value is None:
                    continue
                row = rows.setdefault(key, Row(key[0], key[1], unit, [], []))
                (row.cur if side == "cur" else row.ref).append(float(value))
    both = [row for row in rows.values() if row.ref and row.cur]
    return both + [row for row in rows.values() if not (row.ref and row.cur)]


def table(rows: list[Row], ref_label: str) -> str:
    def num(values: list[float]) -> str:
        return " / ".join(f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}" for v in values) or "-"

    header = ["section", "figure", "unit", ref_label, "this tree", "ratio", "within 5 %"]
    lines = [header]
    for row in rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}"
        within = {True: "yes", False: "NO", None: ""}[row.within]
        lines.append([row.section, row.name, row.unit, num(row.ref), num(row.cur), ratio, within])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(out)


def run_baseline(ref: str, rounds: int, args: list[str], out: Path, ref_args: list[str] | None = None) -> int:
    """Run ``bench.run args`` on REF (with ``ref_args`` too) and on this tree alternately for
    ``rounds`` rounds; print and write every figure's ratio (this tree over REF)."""
    commit = resolve(ref)
    tree = prepare_tree(commit)
    ref_side = Side(f"{ref} ({commit[:9]})", tree, tree / ".venv" / "bin" / "python", extra=list(ref_args or []))
    cur_side = Side("this tree", ROOT, Path(sys.executable))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as work:
        for n in range(rounds):
            # REF first in odd rounds, this tree first in even ones: a drift weighs on both.
            order = (ref_side, cur_side) if n % 2 == 0 else (cur_side, ref_side)
            for side in order:
                side.run(args, Path(work) / f"{'ref' if side is ref_side else 'cur'}-{n}.json")
    rows = compare(ref_side, cur_side)
    report = {
        "baseline": {"ref": ref, "commit": commit, "rounds": rounds, "args": args, "ref_args": ref_side.extra},
        "duration_s": round(time.perf_counter() - started, 1),
        "figures": [
            {
                "section": r.section,
                "name": r.name,
                "unit": r.unit,
                "baseline": r.ref,
                "this_tree": r.cur,
                "ratio": r.ratio,
                "within_tolerance": r.within,
            }
            for r in rows
        ],
        "runs": {"baseline": ref_side.runs, "this_tree": cur_side.runs},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print()
    print(table(rows, ref))
    print()
    print(
        f"{rounds} rounds, alternately, in {report['duration_s']} s; ratio = this tree's median / {ref}'s"
        f" (values per round: {ref} runs in the order they ran); JSON: {out}"
    )
    return 0
