"""The contract pages in ``docs/`` say what the code does: the tables there are checked against the
tables in the code, and the code's pointers to docs name pages that exist."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from query_core.jobconf import JobConf
from query_core.states import (
    INDEX_OPERATIONS,
    POOL_JOB_TRANSITIONS,
    SCHEDULE_TRANSITIONS,
    SESSION_TRANSITIONS,
    STATEMENT_TRANSITIONS,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PRODUCT = ("async_query", "flint_repl_job", "query_core", "index_mappings")


def tables(page: str, first_header: str) -> list[list[list[str]]]:
    """The rows of each table of ``page`` whose header starts with ``first_header``, in order."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    found = []
    for start in (i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |")):
        table = []
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            table.append([cell.strip() for cell in line.strip("|").split("|")])
        found.append(table)
    assert found, f"no table headed {first_header!r} in {page}"
    return found


def rows(page: str, first_header: str) -> list[list[str]]:
    [table] = tables(page, first_header)
    return table


def states_in(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", cell))


def test_every_conf_key_is_documented() -> None:
    documented = {re.sub(r"`", "", row[0]) for row in rows("job.md", "key")}
    keys = {f.metadata["conf_key"].key for f in dataclasses.fields(JobConf) if "conf_key" in f.metadata}
    assert keys == documented


def test_the_statement_session_pool_job_and_schedule_tables_are_the_code_s() -> None:
    statements, sessions, pool_jobs, schedules = tables("documents.md", "from")
    for documented, table in (
        (statements, STATEMENT_TRANSITIONS),
        (sessions, SESSION_TRANSITIONS),
        (pool_jobs, POOL_JOB_TRANSITIONS),
        (schedules, SCHEDULE_TRANSITIONS),
    ):
        found = {next(iter(states_in(row[0]))): states_in(row[1]) for row in documented}
        assert found == {s.value: {t.value for t in targets} for s, targets in table.items()}


def test_the_operations_table_is_the_code_s() -> None:
    documented = {
        row[0]: (states_in(row[1]), states_in(row[2]), states_in(row[3])) for row in rows("documents.md", "operation")
    }
    expected = {
        op.name: (
            {s.value for s in op.start},
            {op.via.value} if op.via else set(),
            {op.end.value} if op.end else set(),
        )
        for op in INDEX_OPERATIONS.values()
    }
    assert documented == expected


def test_the_code_points_to_pages_that_exist_and_to_nothing_outside_the_repository() -> None:
    pointed: set[str] = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"\bSPEC\b", text), f"{path} points to a document outside the repository"
            pointed |= set(re.findall(r"docs/([a-z_-]+\.md)", text))
    assert pointed, "the code points to its contracts"
    missing = sorted(page for page in pointed if not (DOCS / page).exists())
    assert not missing


def test_every_metric_and_stat_is_documented() -> None:
    from prometheus_client import Counter, Gauge, Histogram

    from async_query import metrics
    from async_query.stats import NAMES

    documented = {re.sub(r"`", "", row[0]) for row in rows("metrics.md", "metric")}
    defined = set()
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            defined.add(value._name + ("_total" if isinstance(value, Counter) else ""))
    assert documented == defined
    stats = {name for row in rows("metrics.md", "name") for name in re.findall(r"`([a-z_]+)`", row[0])}
    assert stats == set(NAMES)


# -- docs/validation.md: the profiles and the allow lists ----------------------------------------


def codes(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def escaped_rows(page: str, first_header: str) -> list[list[str]]:
    """Like :func:`rows`, for tables whose cells hold escaped pipes (``\\|``)."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    found = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        found.append([cell.strip().replace("\\|", "|") for cell in cells])
    return found


def test_the_element_table_is_the_code_s() -> None:
    from query_core.validation import LOCAL_DENY_LIST, S3GLUE_DENY_LIST, SECURITY_LAKE_DENY_LIST, GrammarElement

    documented = {
        row[0].strip("`"): (row[2], row[3] == "denied", row[4] == "denied", row[5] == "denied")
        for row in escaped_rows("validation.md", "element")
    }
    expected = {
        e.name: (e.description, e in S3GLUE_DENY_LIST, e in SECURITY_LAKE_DENY_LIST, e in LOCAL_DENY_LIST)
        for e in GrammarElement
    }
    assert documented == expected


def test_the_provider_table_is_the_allow_list() -> None:
    from query_core.validation.allowlists import FILE_OPTIONS, PROVIDERS

    documented = {next(iter(codes(row[0]))): row[1] for row in rows("validation.md", "provider")}
    assert set(documented) == {p.name for p in PROVIDERS}
    for provider in PROVIDERS:
        cell = documented[provider.name]
        listed = codes(cell) | (set(FILE_OPTIONS) if cell.startswith("file options") else set())
        assert listed == set(provider.options), provider.name
    text = (DOCS / "validation.md").read_text(encoding="utf-8")
    assert all(f"`{option}`" in text for option in FILE_OPTIONS)


def test_the_other_allow_lists_are_documented_as_they_are() -> None:
    from query_core.validation import allowlists

    for header, listed in (
        ("storage class", allowlists.STORAGE_CLASSES),
        ("property key", allowlists.PROPERTY_KEYS),
        ("settable key", allowlists.SETTABLE_KEYS),
        ("Flint option", allowlists.FLINT_OPTIONS),
    ):
        assert {next(iter(codes(row[0]))) for row in rows("validation.md", header)} == set(listed), header
    text = (DOCS / "validation.md").read_text(encoding="utf-8")
    for names in (allowlists.STORED_AS, allowlists.EXTRA_SOURCE_OPTIONS, allowlists.EXTRA_SINK_OPTIONS):
        assert all(f"`{name}`" in text for name in names)
