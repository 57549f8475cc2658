"""How an auto-refresh index is refreshed: by its own streaming job (``scheduler_mode =
'internal'``) or by the service's scheduler (``'external'``), and every decision about that
which the plugin (to dispatch a statement) and the job (to run it) must make alike
(``docs/flint.md``, "Scheduled refresh").

Pure Python. :func:`with_schedule` is the reference's choice of mode (opensearch-spark's
``updateOptionsWithDefaults``): with the external scheduler on, an auto-refresh index whose
``refresh_interval`` is missing, or at least the lower bound, is scheduled (a missing one gets
the default interval); one with a shorter interval keeps its stream, unless it asked for
``'external'``, which is refused. Intervals are written in Spark's units, as the stream's
trigger reads them (``'5 minutes'``, ``'1 hour'``, ``'90 seconds'``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from query_core.errors import InvalidRequestError
from query_core.flint.ast import IndexKind, OptionName, QualifiedName
from query_core.flint.index_meta import IndexMeta

_AUTO = OptionName.AUTO_REFRESH.value
_MODE = OptionName.SCHEDULER_MODE.value
_INTERVAL = OptionName.REFRESH_INTERVAL.value
_INCREMENTAL = OptionName.INCREMENTAL_REFRESH.value


class SchedulerMode(StrEnum):
    INTERNAL = "internal"
    EXTERNAL = "external"


# -- intervals --------------------------------------------------------------------------------------

_UNIT_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_PAIR = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")


class IntervalError(InvalidRequestError):
    """A ``refresh_interval`` that is not a duration Spark reads."""


def interval_ms(text: str) -> int:
    """Milliseconds of an interval in Spark's words (``[interval] <n> <unit> [<n> <unit> ...]``,
    units from microseconds to weeks, singular or plural, any case), as the stream's
    processing-time trigger reads it. Months and years are refused, as Spark refuses them there."""
    words = text.strip().lower()
    if words.startswith("interval "):
        words = words[len("interval ") :].strip()
    total, position = 0.0, 0
    for match in _PAIR.finditer(words):
        unit = match.group(2)
        unit = unit[:-1] if unit.endswith("s") and unit[:-1] in _UNIT_MS else unit
        if words[position : match.start()].strip() or unit not in _UNIT_MS:
            raise _not_an_interval(text)
        total += float(match.group(1)) * _UNIT_MS[unit]
        position = match.end()
    if not position or words[position:].strip() or total < 1:
        raise _not_an_interval(text)
    return int(total)


def _not_an_interval(text: str) -> IntervalError:
    return IntervalError(
        f"refresh_interval {text!r} is not an interval: write a positive number and a unit, "
        "for instance '5 minutes', '1 hour' or '90 seconds'"
    )


#: The shortest interval a deployment's scheduler may be set to run (a run starts a Spark job),
#: but in tests.
MIN_SCHEDULED_INTERVAL_MS = 60_000


# -- the choice of mode -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerPolicy:
    """The deployment's external scheduler: whether it is on, the interval an index that names
    none gets, and the shortest interval it runs (shorter ones keep their stream)."""

    enabled: bool = True
    default_interval: str = "5 minutes"
    min_interval: str = "1 minute"

    @property
    def min_interval_ms(self) -> int:
        return interval_ms(self.min_interval)


def is_auto(options: Mapping[str, str]) -> bool:
    return str(options.get(_AUTO, "false")).lower() == "true"


def mode_of(options: Mapping[str, str]) -> SchedulerMode | None:
    """How an index with these (stored) options is refreshed automatically; None: it is not.
    An auto-refresh index that names no mode (made before there was a scheduler) streams."""
    if not is_auto(options):
        return None
    if str(options.get(_MODE, "")).lower() == SchedulerMode.EXTERNAL:
        return SchedulerMode.EXTERNAL
    return SchedulerMode.INTERNAL


def is_scheduled(options: Mapping[str, str]) -> bool:
    """The index is refreshed by the service's scheduler."""
    return mode_of(options) is SchedulerMode.EXTERNAL


def with_schedule(options: Mapping[str, str], policy: SchedulerPolicy) -> dict[str, str]:
    """``options`` (a CREATE's, or an ALTER's merged over the index's) with the scheduler's
    choice made: ``scheduler_mode = 'external'`` and a ``refresh_interval`` written in when the
    index is to be scheduled; unchanged when it streams (so an index refreshed by its stream
    keeps the options it had before there was a scheduler). Raises :class:`InvalidRequestError`,
    in the reference's words, for ``'external'`` asked of a scheduler that is off, or with an
    interval below the lower bound."""
    resolved = dict(options)
    if not is_auto(options):
        return resolved
    asked = str(options.get(_MODE, "")).lower() or None
    interval = str(options.get(_INTERVAL, "")).strip()
    if not policy.enabled:
        if asked == SchedulerMode.EXTERNAL:
            raise InvalidRequestError("external_scheduler_enabled is false but scheduler_mode is set to external")
        return resolved
    if asked == SchedulerMode.INTERNAL:
        return resolved
    if not interval:
        return {**resolved, _MODE: SchedulerMode.EXTERNAL.value, _INTERVAL: policy.default_interval}
    if asked is None:
        try:
            ms = interval_ms(interval)
        except IntervalError:
            return resolved  # the stream's trigger reports it, as before there was a scheduler
    else:
        ms = interval_ms(interval)
    if ms >= policy.min_interval_ms:
        return {**resolved, _MODE: SchedulerMode.EXTERNAL.value}
    if asked == SchedulerMode.EXTERNAL:
        raise InvalidRequestError(
            f"Input refresh_interval is {interval}, required above the interval threshold of external "
            f"scheduler: {policy.min_interval}"
        )
    return resolved


#: What an ALTER to auto refresh may change (the reference's ``validateUpdateAllowed``).
ALTER_TO_AUTO_OPTIONS = (
    _AUTO,
    _INCREMENTAL,
    _MODE,
    _INTERVAL,
    OptionName.CHECKPOINT_LOCATION.value,
    OptionName.WATERMARK_DELAY.value,
)
#: What an ALTER of an index refreshed automatically already may change: its schedule.
SCHEDULE_OPTIONS = (_MODE, _INTERVAL)


def altered_to_auto(existing: Mapping[str, str], provided: Mapping[str, str], policy: SchedulerPolicy) -> dict[str, str]:
    """The ``_meta.options`` of an index after ``ALTER ... WITH (auto_refresh = true, ...)``,
    ``provided`` merged over ``existing`` and the mode chosen (:func:`with_schedule`).

    A manual index may change what the reference allows (:data:`ALTER_TO_AUTO_OPTIONS`). An index
    refreshed automatically already may change only its schedule (mode and interval; the
    reference refuses every ALTER that keeps ``auto_refresh``): a new interval or mode of a
    scheduled index, or a streaming index moved to the scheduler or back; a stream cannot take a
    new interval while it runs. Refused with the reference's messages otherwise."""
    was = {str(k): str(v) for k, v in existing.items()}
    merged = {**was, **{str(k): str(v) for k, v in provided.items()}, _AUTO: "true"}
    if merged.get(_INCREMENTAL, "false").lower() == "true":
        raise InvalidRequestError("Altering index to auto refresh while incremental refresh remains true")
    changed = sorted(k for k, v in merged.items() if was.get(k) != v)
    before = mode_of(was)
    if before is None:
        invalid = [k for k in changed if k not in ALTER_TO_AUTO_OPTIONS]
        if invalid:
            raise InvalidRequestError(
                f"Altering index to auto refresh only allows changing: [{', '.join(ALTER_TO_AUTO_OPTIONS)}]. "
                f"Invalid options: [{', '.join(invalid)}]"
            )
        return with_schedule(merged, policy)
    resolved = with_schedule(merged, policy)
    after = mode_of(resolved)
    if not changed or any(k not in SCHEDULE_OPTIONS for k in changed) or before == after == SchedulerMode.INTERNAL:
        raise InvalidRequestError("auto_refresh option must be updated")
    return resolved


# -- the refresh a scheduled run makes --------------------------------------------------------------


def refresh_statement(meta: IndexMeta) -> str:
    """The ``REFRESH`` statement of an index (what a scheduled run submits, as the reference's
    ``RefreshQueryGenerator`` writes it), its names back-quoted."""
    if meta.kind is IndexKind.SKIPPING:
        return f"REFRESH SKIPPING INDEX ON {_name(meta.source)}"
    if meta.kind is IndexKind.COVERING:
        return f"REFRESH INDEX {QualifiedName((meta.name,)).sql()} ON {_name(meta.source)}"
    return f"REFRESH MATERIALIZED VIEW {_name(meta.name)}"


def source_tables(meta: IndexMeta) -> list[str]:
    """The qualified tables an index reads: its table, or a view's ``sourceTables``."""
    if meta.kind is not IndexKind.MV:
        return [meta.source]
    tables = meta.properties.get("sourceTables") or []
    return [str(t) for t in tables] if isinstance(tables, list) else []


def _name(qualified: str) -> str:
    return QualifiedName(tuple(qualified.split("."))).sql()
