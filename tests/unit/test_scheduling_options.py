"""How an auto-refresh index is refreshed, decided alike by the plugin and the job
(``query_core/flint/scheduling.py``): intervals in Spark's units, the reference's choice of mode,
ALTERs of a refresh mode, and the REFRESH a scheduled run submits."""

from __future__ import annotations

import pytest

from query_core.errors import InvalidRequestError
from query_core.flint import RefreshIndex, parse
from query_core.flint.ast import IndexKind
from query_core.flint.index_meta import IndexMeta
from query_core.flint.scheduling import (
    IntervalError,
    SchedulerMode,
    SchedulerPolicy,
    altered_to_auto,
    interval_ms,
    mode_of,
    refresh_statement,
    source_tables,
    with_schedule,
)

ON = SchedulerPolicy(enabled=True, default_interval="5 minutes", min_interval="1 minute")
OFF = SchedulerPolicy(enabled=False)
AUTO = {"auto_refresh": "true"}


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("5 minutes", 300_000),
        ("1 Minute", 60_000),
        ("1 hour", 3_600_000),
        ("90 seconds", 90_000),
        ("interval 2 hours 30 minutes", 9_000_000),
        ("1.5 minutes", 90_000),
        ("500 milliseconds", 500),
        ("1 week", 604_800_000),
    ],
)
def test_intervals_read_as_the_stream_s_trigger_reads_them(text: str, ms: int) -> None:
    assert interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "5", "minutes", "now and then", "1 month", "0 seconds", "5 minutes and", "5 lightyears"])
def test_what_is_not_an_interval_is_refused(text: str) -> None:
    with pytest.raises(IntervalError, match="is not an interval"):
        interval_ms(text)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # no interval, no mode: scheduled, at the default interval (the reference's case)
        (AUTO, {**AUTO, "scheduler_mode": "external", "refresh_interval": "5 minutes"}),
        ({**AUTO, "scheduler_mode": "external"}, {**AUTO, "scheduler_mode": "external", "refresh_interval": "5 minutes"}),
        # an interval at least the lower bound is scheduled; a shorter one streams, unchanged
        ({**AUTO, "refresh_interval": "1 minute"}, {**AUTO, "refresh_interval": "1 minute", "scheduler_mode": "external"}),
        ({**AUTO, "refresh_interval": "1 second"}, {**AUTO, "refresh_interval": "1 second"}),
        # one the stream must report keeps streaming (as before there was a scheduler)
        ({**AUTO, "refresh_interval": "now and then"}, {**AUTO, "refresh_interval": "now and then"}),
        # asked for a stream
        ({**AUTO, "scheduler_mode": "internal"}, {**AUTO, "scheduler_mode": "internal"}),
        # manual indexes are left alone
        ({"auto_refresh": "false"}, {"auto_refresh": "false"}),
    ],
)
def test_the_choice_of_mode(options: dict[str, str], expected: dict[str, str]) -> None:
    assert with_schedule(options, ON) == expected


@pytest.mark.parametrize(
    ("options", "policy", "message"),
    [
        (
            {**AUTO, "scheduler_mode": "external", "refresh_interval": "10 seconds"},
            ON,
            "Input refresh_interval is 10 seconds, required above the interval threshold of external scheduler: 1 minute",
        ),
        ({**AUTO, "scheduler_mode": "external", "refresh_interval": "soon"}, ON, "is not an interval"),
        ({**AUTO, "scheduler_mode": "external"}, OFF, "external_scheduler_enabled is false but scheduler_mode is set to external"),
    ],
)
def test_refused_schedules(options: dict[str, str], policy: SchedulerPolicy, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message.replace("(", r"\(")):
        with_schedule(options, policy)


def test_with_the_scheduler_off_every_auto_refresh_streams() -> None:
    assert with_schedule(AUTO, OFF) == AUTO
    assert mode_of(with_schedule(AUTO, OFF)) is SchedulerMode.INTERNAL
    assert mode_of({"auto_refresh": "false", "scheduler_mode": "external"}) is None


SCHEDULED = {**AUTO, "incremental_refresh": "false", "scheduler_mode": "external", "refresh_interval": "5 minutes"}
STREAM = {**AUTO, "incremental_refresh": "false", "refresh_interval": "1 second"}
MANUAL = {"auto_refresh": "false", "incremental_refresh": "false"}


@pytest.mark.parametrize(
    ("existing", "provided", "mode", "interval"),
    [
        (MANUAL, AUTO, SchedulerMode.EXTERNAL, "5 minutes"),
        (MANUAL, {**AUTO, "scheduler_mode": "internal"}, SchedulerMode.INTERNAL, None),
        (SCHEDULED, {**AUTO, "refresh_interval": "10 minutes"}, SchedulerMode.EXTERNAL, "10 minutes"),
        (SCHEDULED, {**AUTO, "scheduler_mode": "internal"}, SchedulerMode.INTERNAL, "5 minutes"),
        (STREAM, {**AUTO, "scheduler_mode": "external", "refresh_interval": "2 minutes"}, SchedulerMode.EXTERNAL, "2 minutes"),
    ],
)
def test_alters_of_the_refresh_mode(
    existing: dict[str, str], provided: dict[str, str], mode: SchedulerMode, interval: str | None
) -> None:
    altered = altered_to_auto(existing, provided, ON)
    assert mode_of(altered) is mode
    assert altered.get("refresh_interval") == interval


@pytest.mark.parametrize(
    ("existing", "provided", "message"),
    [
        (SCHEDULED, AUTO, "auto_refresh option must be updated"),  # nothing changes
        (STREAM, {**AUTO, "refresh_interval": "2 seconds"}, "auto_refresh option must be updated"),  # a running stream
        (SCHEDULED, {**AUTO, "checkpoint_location": "/x"}, "auto_refresh option must be updated"),  # not its schedule
        (STREAM, {**AUTO, "scheduler_mode": "external"}, "required above the interval threshold"),
        (MANUAL, {**AUTO, "id_expression": "a"}, "Invalid options: [id_expression]"),
        ({**MANUAL, "incremental_refresh": "true"}, AUTO, "while incremental refresh remains true"),
    ],
)
def test_refused_alters(existing: dict[str, str], provided: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        altered_to_auto(existing, provided, ON)
    assert message in raised.value.message


def _meta(kind: IndexKind, name: str, source: str, properties: dict[str, object] | None = None) -> IndexMeta:
    return IndexMeta("flint_x", kind, name, source, (), {}, dict(properties or {}))


def test_the_refresh_a_run_submits_names_its_index_back_quoted() -> None:
    skipping = _meta(IndexKind.SKIPPING, "flint_lake_db_t_skipping_index", "lake.db.t")
    covering = _meta(IndexKind.COVERING, "by`a", "lake.db.t")
    view = _meta(IndexKind.MV, "lake.db.per_day", "SELECT ...", {"sourceTables": ["lake.db.t", "lake.db.u"]})
    assert refresh_statement(skipping) == "REFRESH SKIPPING INDEX ON `lake`.`db`.`t`"
    assert refresh_statement(covering) == "REFRESH INDEX `by``a` ON `lake`.`db`.`t`"
    assert refresh_statement(view) == "REFRESH MATERIALIZED VIEW `lake`.`db`.`per_day`"
    for meta in (skipping, covering, view):  # what the job parses back names the same index
        parsed = parse(refresh_statement(meta))
        assert isinstance(parsed, RefreshIndex)
        assert parsed.index.kind is meta.kind
        assert ".".join(parsed.index.table.parts) == (meta.source if meta.kind is not IndexKind.MV else meta.name)
    assert parse(refresh_statement(covering)).index.name == "by`a"  # type: ignore[union-attr]
    assert source_tables(view) == ["lake.db.t", "lake.db.u"]
    assert source_tables(covering) == ["lake.db.t"]
