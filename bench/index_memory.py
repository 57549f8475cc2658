"""What statement text costs the embedded index's memory: the growth of the resident memory of the
process tree that serves the embedded index (an OpenSearch node; before, ``osmem-server`` behind a
journaling keeper), per byte of statement text written.

``python -m bench.index_memory [--quick] [--rounds N] [--out PATH]``

The workload is the attack that found the problem: three ``SELECT length('...')`` of about 900,000
characters, and a 100 KB statement of 12,500 distinct words (which Spark refuses: its error text
quotes the statement, cut at 2,000 characters). Each statement is written as a query's run writes
it, through the product's store: the statement document (POST), its result document with
``queryText`` (the job), the statement settled with its error, and the submitter's usage charged.

Two index servers are started in turn, each measured alone:

* **as created now**: the request and result indexes created by the product (``index_mappings/``:
  statement text and errors stored, not indexed);
* **created before** (for comparison, same run; one round of the workload, which alone grows it
  by gigabytes): the same indexes created first with the previous mapping (``query``,
  ``queryText`` and ``error`` full-text indexed), as an index made by an older version stays: the
  product writes into it unchanged.

The resident memory (``VmRSS``) of the index server's process and all its descendants is read
before the workload and after it (each the largest of a few samples once the writes are
refreshed), and the growth divided by the characters of statement text written.
"""

from __future__ import annotations

import argparse
import os
import random
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import index_mappings
from bench.report import Figure, Target, close_report, new_report, print_report
from query_core.ids import new_id, request_index
from query_core.models import LosslessResult, ResultDoc, StatementDoc, now_millis
from query_core.states import StatementState
from query_core.store import Store
from query_core.store.usage import result_bytes, statement_bytes

SECTION = "index memory"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "index_memory.json"
DATASOURCE = "benchmem"
RESULT_INDEX = f"query_execution_result_{DATASOURCE}"
#: The fields the previous mapping indexed as full text.
TEXT_FIELDS = {"request_index": ("query", "error"), "result_index": ("queryText", "error")}
MAX_ERROR_CHARS = 2_000


def process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it (by parent pid, whatever their session)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_rss(root: int) -> int:
    """The resident bytes of ``root``'s process tree."""
    total = 0
    for pid in process_tree(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def settled_rss(root: int, samples: int = 5, interval_s: float = 0.4) -> int:
    """The largest of a few readings of ``root``'s tree, a moment after the last write."""
    time.sleep(1.0)
    readings = []
    for _ in range(samples):
        readings.append(tree_rss(root))
        time.sleep(interval_s)
    return max(readings)


def attack_statements(rng: random.Random) -> list[str]:
    """The statements of the attack, with text of their own each round."""
    letters = string.ascii_letters
    long_ones = ["SELECT length('" + "".join(rng.choices(letters, k=900_000)) + "')" for _ in range(3)]
    words = {"".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(13_000)}
    distinct = "SELECT " + " ".join(sorted(words)[:12_500])
    return [*long_ones, distinct]


def write_like_a_run(store: Store, text: str, fails: bool) -> None:
    """What a query's run writes: the statement (POST), its result (the job), its end."""
    query_id = new_id(DATASOURCE)
    store.usage.charge("bench", statement_bytes(text))
    versioned = store.statements.create(
        StatementDoc(
            statement_id=query_id,
            query_id=query_id,
            session_id="bench-session",
            query=text,
            lang="sql",
            data_source_name=DATASOURCE,
            submit_time=now_millis(),
            submitted_by="bench",
        )
    )
    running = store.statements.start(versioned)
    assert running is not None
    error = ("Syntax error: [PARSE_SYNTAX_ERROR] Syntax error at or near 'w'.\n== SQL ==\n" + text)[:MAX_ERROR_CHARS]
    result = ResultDoc(
        query_id=query_id,
        query_text=text,
        status="FAILED" if fails else "SUCCESS",
        error=error if fails else "",
        result=[] if fails else ["{'length':900000}"],
        schema=[] if fails else ["{'column_name':'length','data_type':'integer'}"],
        lossless=None if fails else LosslessResult(schema=[], datarows="[[900000]]", total=1),
        data_source_name=DATASOURCE,
    )
    store.results.put(RESULT_INDEX, result)
    store.usage.charge("bench", result_bytes(result))
    store.statements.settle(
        running, StatementState.FAILED if fails else StatementState.SUCCESS, error=error if fails else ""
    )


def previous_mapping(kind: index_mappings.IndexKind) -> dict[str, Any]:
    """The create-index body of ``kind`` as before: statement text and errors full-text indexed."""
    body = index_mappings.load(kind)
    for name in TEXT_FIELDS[kind]:
        body["mappings"]["properties"][name] = {"type": "text"}
    return body


@contextmanager
def embedded_index(directory: Path) -> Iterator[tuple[Any, Store]]:
    """The embedded default's index server (as ``serve`` starts it), and a store on it."""
    from async_query.embedded.index import EmbeddedIndex, NodeOptions
    from async_query.embedded.node_jars import NodeJars
    from async_query.security.accounts import index_user
    from async_query.security.job_user import JobUser

    directory.parent.mkdir(parents=True, exist_ok=True)
    directory.parent.chmod(0o711)  # the index user passes through to its own directory
    user = index_user("", JobUser.resolve()) if os.geteuid() == 0 else None
    embedded = EmbeddedIndex.start(directory, NodeJars.resolve(), NodeOptions(user=user), watch=False)
    store = Store.connect(embedded.config())
    try:
        yield embedded, store
    finally:
        store.index.close()
        embedded.close()


def measure(work: Path, previous: bool, rounds: int, seed: int) -> dict[str, Any]:
    """One index server, the workload ``rounds`` times: its tree's growth per byte of statement text."""
    rng = random.Random(seed)
    workload = [attack_statements(rng) for _ in range(rounds)]
    with embedded_index(work / ("previous" if previous else "now")) as (embedded, store):
        if previous:
            store.admin.create_index(request_index(DATASOURCE), previous_mapping("request_index"))
            store.admin.create_index(RESULT_INDEX, previous_mapping("result_index"))
        write_like_a_run(store, "SELECT 1", fails=False)  # the indexes and the usage document exist
        store.index.refresh(request_index(DATASOURCE))
        assert embedded.process is not None
        root = embedded.process.pid
        before = settled_rss(root)
        began = time.perf_counter()
        chars = 0
        for statements in workload:
            for i, text in enumerate(statements):
                write_like_a_run(store, text, fails=i == len(statements) - 1)
                chars += len(text)
        store.index.refresh(request_index(DATASOURCE))
        store.index.refresh(RESULT_INDEX)
        took = time.perf_counter() - began
        after = settled_rss(root)
        mapped = store.admin.mappings(request_index(DATASOURCE))[request_index(DATASOURCE)]["properties"]["query"]
        processes = len(process_tree(root))
    return {
        "statement_chars": chars,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "growth_bytes": after - before,
        "growth_per_char": round((after - before) / chars, 2),
        "write_s": round(took, 2),
        "processes": processes,
        "query_mapping": mapped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.index_memory", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round of the workload instead of two")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the workload (default 2; quick 1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    report = new_report(quick=args.quick, rounds=rounds)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-index-memory-") as work:
        now = measure(Path(work), previous=False, rounds=rounds, seed=20261129)
        # One round only: with statement text indexed, it alone grows the index by gigabytes.
        before = measure(Path(work), previous=True, rounds=1, seed=20261129)
    report.details[SECTION] = {"as created now": now, "created before": before}
    mb = now["statement_chars"] / 1e6
    report.add(
        [
            Figure(
                SECTION,
                "growth per byte of statement text, indexes as created now",
                now["growth_per_char"],
                "x",
                Target("<=", 10.0),
                f"{mb:.1f} MB of statements; +{now['growth_bytes'] / 1e6:.0f} MB resident, {now['processes']} processes",
            ),
            Figure(
                SECTION,
                "growth per byte of statement text, indexes created before (text indexed)",
                before["growth_per_char"],
                "x",
                note=f"same run, for comparison; +{before['growth_bytes'] / 1e6:.0f} MB resident",
            ),
        ]
    )
    close_report(report, started, args.out)
    return print_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
