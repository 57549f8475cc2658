"""The Flint indexes of a catalog as SHOW FLINT INDEX lists them (``docs/flint.md``): shared by
the job, which answers the statement in a session, and the plugin, which answers Dashboards'
browsing from its catalog read model (:mod:`async_query.catalog`), so that both give the same
rows.

An index is listed from its mapping's ``_meta`` (:class:`IndexMeta`) and its state document
(``status``; ``unavailable`` when it has none); EXTENDED adds the state's error and how the index
is refreshed: its mode and interval (``_meta.options``) and, for a scheduled index, its last and
next run from its schedule (times in ISO 8601, UTC).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_metas
from query_core.flint.naming import FLINT_INDEX_PREFIX, sanitize_index_name
from query_core.flint.scheduling import SchedulerMode, mode_of
from query_core.models import FlintIndexStateDoc, ScheduleDoc
from query_core.states import ScheduleState
from query_core.store.connector import IndexAdmin

#: SHOW FLINT INDEX's columns (EXTENDED adds :data:`EXTENDED_COLUMNS`); ``auto_refresh`` is a
#: boolean, the rest strings.
SHOW_FLINT_INDEX_COLUMNS = ("flint_index_name", "kind", "database", "table", "index_name", "auto_refresh", "status")
EXTENDED_COLUMNS = (
    "error",
    "scheduler_mode",
    "refresh_interval",
    "last_run_time",
    "last_run_outcome",
    "next_run_time",
)
BOOLEAN_COLUMNS = ("auto_refresh",)


def show_flint_index_columns(extended: bool) -> tuple[str, ...]:
    return (*SHOW_FLINT_INDEX_COLUMNS, *(EXTENDED_COLUMNS if extended else ()))


def metas(index: IndexAdmin, prefix_parts: list[str]) -> list[IndexMeta]:
    """Flint indexes whose names start with ``flint_<parts joined by _>_``, sorted by name."""
    pattern = sanitize_index_name(FLINT_INDEX_PREFIX + "_".join(prefix_parts) + "_") + "*"
    found = []
    for name, raw in sorted(flint_metas(index, pattern).items()):
        meta = IndexMeta.from_meta(name, raw)
        if meta is not None:
            found.append(meta)
    return found


def metas_in(index: IndexAdmin, catalog: str, database: str | None) -> list[IndexMeta]:
    """The Flint indexes whose table (or view) is in ``catalog`` (and ``database`` if given)."""
    parts = [catalog, *([database] if database else [])]
    return [meta for meta in metas(index, parts) if meta.belongs_to(catalog, database)]


def show_flint_index_rows(
    listed: list[IndexMeta],
    state_of: Callable[[IndexMeta], FlintIndexStateDoc | None],
    extended: bool,
    schedules: Mapping[str, ScheduleDoc] | None = None,
) -> list[tuple[Any, ...]]:
    """SHOW FLINT INDEX's rows for ``listed`` (in order), each index's state from ``state_of`` and,
    EXTENDED, its schedule from ``schedules`` (by index name)."""
    rows: list[tuple[Any, ...]] = []
    for meta in listed:
        state = state_of(meta)
        status = state.state.value if state is not None else "unavailable"
        database, table, index = meta.listed_names()
        row: tuple[Any, ...] = (meta.index_name, meta.kind.value, database, table, index, meta.auto_refresh, status)
        if extended:
            row += ((state.error or None) if state is not None else None,)
            row += refresh_columns(meta, (schedules or {}).get(meta.index_name))
        rows.append(row)
    return rows


def refresh_columns(meta: IndexMeta, schedule: ScheduleDoc | None) -> tuple[str | None, ...]:
    """``scheduler_mode, refresh_interval, last_run_time, last_run_outcome, next_run_time``: how
    the index is refreshed, and a scheduled index's runs (None where it has none)."""
    mode = mode_of(meta.options)
    interval = meta.options.get("refresh_interval") or None
    if mode is not SchedulerMode.EXTERNAL or schedule is None:
        return (mode.value if mode is not None else None, interval, None, None, None)
    enabled = schedule.state in (ScheduleState.ENABLED, ScheduleState.RUNNING)
    return (
        mode.value,
        schedule.interval or interval,
        _iso(schedule.last_run_time),
        schedule.last_outcome or None,
        _iso(schedule.next_run_time) if enabled else None,
    )


def _iso(epoch_ms: int) -> str | None:
    if epoch_ms <= 0:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
