"""``python -m bench.run [--quick] [--out bench/results/latest.json]``: every figure, one command.

Starts a real OpenSearch node (as the service starts its embedded index; ``OPENSEARCH_URL``
instead when set) and the service (as ``async-query serve`` in its own process, local Spark), runs
the sections in an order that keeps them from disturbing each other, prints a table with each
figure next to its target, and writes everything to a JSON file. Last, with Spark, serve's own cold
start: ``async-query serve`` on an empty data directory to its first answer, then restarted.
Targets are reported, not asserted. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api_latency import ApiPlan, run_api_latency
from bench.emr import EmrPlan, run_getjobrun
from bench.env import BenchEnv
from bench.first_answer import Layout, first_answer
from bench.index_node import IndexNode
from bench.report import Figure, Report, Target, close_report, new_report, run_summary
from bench.scale import ScalePlan, run_scale
from bench.spark import IdleWindow, SparkBench, SparkPlan
from query_core.store import Store

log = logging.getLogger("bench.run")

DATASOURCE = "local"
RESULT_INDEX = "query_execution_result_local"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results" / "latest.json"
#: The warm session must outlive the sections that do not use it (the default limit is 180 s).
#: This does not change any figure: the heartbeat intervals stay at their defaults.
SERVICE_ENV = {"ASYNC_QUERY_INACTIVITY_LIMIT_MS": "900000"}
INDEX_SECTION = "index node"
SERVE_SECTION = "serve (cold start)"
#: The issue's target: serve's first answer with the index's jars cached.
SERVE_TARGET_S = 30.0


class _Skip(Exception):  # noqa: N818 - an outcome, not a failure
    """A section that cannot run here (a missing optional piece)."""


def _section(report: Report, name: str, run: Callable[[], tuple[list[Figure], dict[str, Any]] | list[Figure]]) -> bool:
    """Run one section; a failure is recorded and the bench goes on with the others."""
    started = time.perf_counter()
    print(f"== {name} ...", file=sys.stderr, flush=True)
    try:
        out = run()
    except _Skip as skip:
        report.skipped[name] = str(skip)
        print(f"   {name}: skipped: {skip}", file=sys.stderr, flush=True)
        return False
    except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others' figures
        log.error("section %s failed: %s", name, exc)
        report.skipped[name] = f"failed: {type(exc).__name__}: {exc}"[:300]
        report.details.setdefault("errors", {})[name] = traceback.format_exc()
        return False
    figures, details = out if isinstance(out, tuple) else (out, None)
    report.add(figures)
    if details is not None:
        report.details[name] = details
    elapsed = time.perf_counter() - started
    report.meta.setdefault("section_seconds", {})[name] = round(elapsed, 1)
    print(f"   {name}: {elapsed:.1f} s", file=sys.stderr, flush=True)
    return True


def _scale_run(
    base_url: str, store: Store, plan: ScalePlan, jobs_dir: Path
) -> Callable[[], tuple[list[Figure], dict[str, Any]]]:
    return lambda: run_scale(base_url, store, DATASOURCE, plan, jobs_dir)


def index_figures(index: IndexNode) -> list[Figure]:
    """The node's start and its resident memory, now and at its peak (nothing for a cluster
    named by ``OPENSEARCH_URL``)."""
    memory = index.resident()
    if index.node is None or memory is None:
        return []
    heap = f"heap {index.node.options.heap_mb} MB"
    return [
        Figure(INDEX_SECTION, "node start to green (jars cached, empty data)", index.start_s, "s"),
        Figure(INDEX_SECTION, "node resident memory after the bench (VmRSS)", memory[0], "MB", note=heap),
        Figure(INDEX_SECTION, "node resident memory, peak (VmHWM)", memory[1], "MB", note=heap),
    ]


def serve_cold_start(restarts: int = 1) -> tuple[list[Figure], dict[str, Any]]:
    """``async-query serve`` (this interpreter's) on an empty data directory to its first answer,
    then restarted ``restarts`` times on it (bench.first_answer)."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        data = Path(tmp) / "data"
        layout = Layout("this tree", ROOT, data, command=[sys.executable, "-m", "async_query.cli", "serve"])
        log_path = Path(tmp) / "serve.log"
        try:
            first = first_answer(layout, log_path)
            warm = [first_answer(layout, log_path) for _ in range(restarts)]
        except Exception as exc:
            kept = Path(tempfile.mkdtemp(prefix="bench-serve-failed-"))
            with contextlib.suppress(OSError):  # shutil.Error is one: what could be copied is kept
                shutil.copytree(tmp, kept, dirs_exist_ok=True, symlinks=True)
            tail = log_path.read_text(errors="replace").splitlines()[-3:] if log_path.exists() else []
            raise RuntimeError(f"{exc}; serve's log (kept with its data in {kept}) ends: {tail}") from exc
    note = "jars cached; serve's start, its index node, the local metastore, the warm pool's job"
    figures = [
        Figure(
            SERVE_SECTION,
            "first answer, first start (empty data directory)",
            first.answer_s,
            "s",
            Target("<", SERVE_TARGET_S),
            note=note,
        ),
        Figure(
            SERVE_SECTION, "  query taken (201), first start", first.taken_s, "s", note="the index and the catalog up"
        ),
    ]
    for n, start in enumerate(warm, 1):
        figures.append(
            Figure(
                SERVE_SECTION,
                f"first answer, restart {n}",
                start.answer_s,
                "s",
                Target("<", SERVE_TARGET_S),
                note=f"query taken at {start.taken_s:.1f} s",
            )
        )
    memory = first.index_mb
    figures.append(
        Figure(SERVE_SECTION, "index resident memory at the first answer", memory, "MB", note="the node's JVM")
    )
    details = {"first": first.__dict__, "restarts": [start.__dict__ for start in warm]}
    return figures, details


def run(
    quick: bool,
    out: Path,
    skip_spark: bool = False,
    scale_sessions: list[int] | None = None,
) -> Report:
    started = time.perf_counter()
    report = new_report(quick=quick)
    api_plan = ApiPlan.quick() if quick else ApiPlan()
    spark_plan = SparkPlan.quick() if quick else SparkPlan()
    scale_plan = ScalePlan.quick() if quick else ScalePlan()
    emr_plan = EmrPlan.quick() if quick else EmrPlan()

    with BenchEnv(SERVICE_ENV) as env:
        store = env.require_store()
        assert env.index is not None
        index = env.index
        report.meta["index"] = "OPENSEARCH_URL " + index.url if index.node is None else "embedded OpenSearch node"
        report.meta["service"] = env.base_url
        # The service's local launcher describes the simulated sessions' jobs as running.
        jobs_dir = env.data_dir / "service" / "jobs"
        _section(
            report,
            "rest-api",
            lambda: run_api_latency(env.base_url, store, DATASOURCE, RESULT_INDEX, api_plan, jobs_dir),
        )

        idle: IdleWindow | None = None
        bench = SparkBench(env.base_url, store, DATASOURCE, RESULT_INDEX, spark_plan)
        try:
            if skip_spark:
                report.skipped["spark"] = "--skip-spark"
            elif _section(report, "spark-session", bench.open_session):
                for name, step in [
                    ("pickup", bench.pickup),
                    ("round-trip", bench.round_trips),
                    ("cancel", bench.cancels),
                    ("heartbeat-busy", bench.heartbeat_busy),
                ]:
                    _section(report, name, step)
                report.details["spark"] = bench.details
                try:
                    idle = bench.begin_idle()
                except Exception as exc:  # noqa: BLE001 - recorded; the other sections go on
                    report.skipped["heartbeat-idle"] = f"failed: {exc}"

            # The idle window of the warm session runs during the scale section (which does not
            # touch that session), then waits out the rest of its length.
            _section(report, "scale", lambda: run_scale(env.base_url, store, DATASOURCE, scale_plan, jobs_dir))
            if idle is not None:
                window = idle
                _section(report, "heartbeat-idle", lambda: bench.end_idle(window))
            # Opt-in larger runs, after the idle window so they cannot stretch it.
            for count in scale_sessions or []:
                _section(
                    report, f"scale-{count}", _scale_run(env.base_url, store, scale_plan.with_sessions(count), jobs_dir)
                )
        finally:
            bench.close()
            if env.proc is not None and env.proc.poll() is not None:
                report.meta["service_exit"] = env.proc.returncode
                report.meta["service_log_tail"] = env.service_log_tail()

        assert env.opensearch is not None
        data_dir = env.data_dir / "emr"

        def emr() -> tuple[list[Figure], dict[str, Any]]:
            try:
                return run_getjobrun(store, env.opensearch, data_dir, emr_plan)  # type: ignore[arg-type]
            except ImportError as exc:
                raise _Skip(f"the EMR Serverless launcher is not importable ({exc})") from exc

        try:
            _section(report, "emr-getjobrun", emr)
        finally:
            env.stop_service()
        _section(report, "index-node", lambda: index_figures(index))

    if skip_spark:
        report.skipped["serve-cold-start"] = "--skip-spark"
    else:
        _section(report, "serve-cold-start", serve_cold_start)
    close_report(report, started, out)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test, about 2 minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--skip-spark", action="store_true", help="leave out the sections that need Spark")
    parser.add_argument(
        "--scale-sessions",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also run the scale section with N live sessions (e.g. 10000), after the default one",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="run the same bench on commit REF and on this tree alternately, and print each figure's ratio "
        "(bench/README.md, 'Same-run comparison with an earlier commit')",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --baseline: runs of each tree (default 2)")
    parser.add_argument(
        "--baseline-args",
        default="",
        metavar="ARGS",
        help="with --baseline: more arguments for REF's runs only (e.g. '--journaled', which an older "
        "tree needs to run on its embedded default)",
    )
    args = parser.parse_args(argv)
    if args.baseline:
        from bench.baseline import DEFAULT_OUT as BASELINE_OUT
        from bench.baseline import run_baseline

        passed = _passed_on(argv if argv is not None else sys.argv[1:])
        out = args.out if args.out != DEFAULT_OUT else BASELINE_OUT
        return run_baseline(args.baseline, max(1, args.rounds), passed, out, shlex.split(args.baseline_args))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The in-process service (EMR section) logs the deaths it confirms and the conflicts it
    # resolves, on purpose; they are expected here and would bury the bench's own output.
    for noisy in ("async_query", "opensearch"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    report = run(args.quick, args.out, args.skip_spark, args.scale_sessions)
    print()
    print(report.table())
    print()
    print(run_summary(report, args.out))
    return 0


def _passed_on(argv: list[str]) -> list[str]:
    """The arguments each side of a ``--baseline`` run gets: all but ``--baseline``, ``--rounds``,
    ``--baseline-args`` and ``--out``."""
    passed: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--baseline", "--rounds", "--out", "--baseline-args"):
            skip = "=" not in arg
            continue
        passed.append(arg)
    return passed


if __name__ == "__main__":
    sys.exit(main())
