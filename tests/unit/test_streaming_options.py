"""The pure parts of auto refresh: option checks, checkpoint choice, view query rewrites."""

from __future__ import annotations

import pytest

from flint_repl_job.indexes.builders import tumble_to_window
from flint_repl_job.indexes.streaming import (
    CHECKPOINT_MANDATORY_KEY,
    CHECKPOINT_REQUIRED,
    CHECKPOINT_ROOT_KEY,
    COMPLETE_NEEDS_ID,
    INCREMENTAL_NEEDS_CHECKPOINT,
    INCREMENTAL_WITH_AUTO,
    WATERMARK_REQUIRED,
    WINDOW_REQUIRED,
    StreamOptionError,
    StreamSettings,
    auto_refresh_options,
    check_stream_options,
    checkpoint_location,
    extra_sink_options,
    extra_source_options,
    file_log_offset,
    has_window,
    is_aggregating,
    merged_sink_options,
    newest_file_time,
    output_mode,
    streaming_query,
    window_column,
)
from flint_repl_job.runners.streaming import is_streaming_statement
from query_core.flint import IndexKind
from query_core.flint.index_meta import IndexMeta

INDEX = "flint_lake_default_t_cov_index"
ROOT = StreamSettings(checkpoint_root="/cp/", checkpoint_mandatory=True)
NO_ROOT = StreamSettings(checkpoint_root="", checkpoint_mandatory=True)
WINDOWED = "SELECT window.start AS s, COUNT(*) AS n FROM lake.db.t GROUP BY TUMBLE(at, '1 Minute')"


def meta(kind: IndexKind = IndexKind.COVERING, source: str = "lake.db.t", **options: str) -> IndexMeta:
    return IndexMeta(INDEX, kind, "cov", source, (), {"auto_refresh": "true", **options})


# -- checkpoints and settings ----------------------------------------------------------------------


def test_the_checkpoint_is_the_option_else_under_the_root_else_none() -> None:
    assert checkpoint_location({"checkpoint_location": "s3://b/cp"}, INDEX, ROOT) == "s3://b/cp"
    assert checkpoint_location({}, INDEX, ROOT) == f"/cp/{INDEX}"
    assert checkpoint_location({}, INDEX, NO_ROOT) is None


def test_settings_come_from_the_reference_conf_keys() -> None:
    conf = {CHECKPOINT_ROOT_KEY: "/tmp/cp", CHECKPOINT_MANDATORY_KEY: "false"}
    assert StreamSettings.from_conf(lambda key: conf.get(key)) == StreamSettings("/tmp/cp", False)
    assert StreamSettings.from_conf(lambda key: None) == StreamSettings("", True)


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "settings", "message"),
    [
        (meta(incremental_refresh="true"), ROOT, INCREMENTAL_WITH_AUTO),
        (meta(), NO_ROOT, CHECKPOINT_REQUIRED),
        (meta(output_mode="complete"), ROOT, COMPLETE_NEEDS_ID),
        (meta(output_mode="update"), ROOT, "output_mode = update is not supported"),
        (meta(output_mode="sideways"), ROOT, "output_mode 'sideways' is invalid"),
        (meta(IndexKind.MV, WINDOWED), ROOT, WATERMARK_REQUIRED),
        (
            meta(IndexKind.MV, "SELECT g, COUNT(*) FROM lake.db.t GROUP BY g", watermark_delay="1 Minute"),
            ROOT,
            WINDOW_REQUIRED,
        ),
    ],
)
def test_refused_auto_refresh_options(index: IndexMeta, settings: StreamSettings, message: str) -> None:
    with pytest.raises(StreamOptionError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        check_stream_options(index, settings)


@pytest.mark.parametrize(
    ("index", "settings"),
    [
        (meta(), ROOT),
        (meta(), StreamSettings("", checkpoint_mandatory=False)),
        (meta(checkpoint_location="/x"), NO_ROOT),
        (meta(output_mode="complete", id_expression="g"), ROOT),
        (meta(IndexKind.MV, WINDOWED, watermark_delay="1 Minute"), ROOT),
        (meta(IndexKind.MV, WINDOWED, output_mode="complete", id_expression="s"), ROOT),
        (meta(IndexKind.MV, "SELECT a, b FROM lake.db.t WHERE a > 1"), ROOT),
    ],
)
def test_allowed_auto_refresh_options(index: IndexMeta, settings: StreamSettings) -> None:
    check_stream_options(index, settings)


def test_a_manual_incremental_refresh_needs_a_checkpoint_but_not_auto_refresh() -> None:
    incremental = meta(incremental_refresh="true", auto_refresh="false")
    check_stream_options(incremental, ROOT, incremental=True)
    with pytest.raises(StreamOptionError, match=INCREMENTAL_NEEDS_CHECKPOINT):
        check_stream_options(incremental, StreamSettings("", checkpoint_mandatory=False), incremental=True)


def test_output_mode_defaults_to_append() -> None:
    assert output_mode({}) == "append"
    assert output_mode({"output_mode": "Complete"}) == "complete"


def test_an_alter_to_auto_refresh_merges_the_options_it_may_change() -> None:
    existing = {"auto_refresh": "false", "incremental_refresh": "false", "index_settings": "{}"}
    merged = auto_refresh_options(existing, {"auto_refresh": "true", "refresh_interval": "1 minute"})
    assert merged == {**existing, "auto_refresh": "true", "refresh_interval": "1 minute"}
    # An option given with its current value is no change.
    assert auto_refresh_options(existing, {"auto_refresh": "true", "index_settings": "{}"})["auto_refresh"] == "true"


@pytest.mark.parametrize(
    ("existing", "provided", "message"),
    [
        ({"auto_refresh": "true"}, {"auto_refresh": "true"}, "auto_refresh option must be updated"),
        (
            {"auto_refresh": "false", "incremental_refresh": "true"},
            {"auto_refresh": "true"},
            "Altering index to auto refresh while incremental refresh remains true",
        ),
        (
            {"auto_refresh": "false"},
            {"auto_refresh": "true", "output_mode": "complete", "id_expression": "a"},
            "Invalid options: [id_expression, output_mode]",
        ),
    ],
)
def test_refused_alters_to_auto_refresh(existing: dict[str, str], provided: dict[str, str], message: str) -> None:
    with pytest.raises(StreamOptionError) as raised:
        auto_refresh_options(existing, provided)
    assert message in str(raised.value)


# -- extra options ---------------------------------------------------------------------------------


def test_extra_options_are_found_by_source_table_and_by_index_name() -> None:
    options = {
        "extra_options": '{"lake.db.t": {"maxFilesPerTrigger": 10}, "db.u": {"latestFirst": "true"}, '
        f'"{INDEX}": {{"batch_size": "50"}}, "sink": {{"BATCH_SIZE": "60"}}}}'
    }
    assert extra_source_options(options, "lake.db.t", "lake") == {"maxFilesPerTrigger": "10"}
    assert extra_source_options(options, "lake.db.u", "lake") == {"latestFirst": "true"}
    assert extra_source_options(options, "lake.db.v", "lake") == {}
    assert extra_sink_options(options, INDEX) == {"batch_size": "50", "BATCH_SIZE": "60"}
    assert extra_sink_options({}, INDEX) == {}


def test_extra_options_never_carry_a_connection_setting_or_a_file_action() -> None:
    """The index's options may have been written before the statement check existed (or by
    another plugin): only allowed names reach the stream's reader and the index's writer, and the
    job's own connection always wins, in any case."""
    options = {
        "extra_options": '{"sink": {"host": "evil", "PORT": "1", "auth.username": "x", "batch_size": "5"}, '
        '"lake.db.t": {"cleanSource": "delete", "sourceArchiveDir": "/tmp", "path": "/etc", "maxFileAge": "1h"}}'
    }
    extra = extra_sink_options(options, INDEX)
    assert extra == {"batch_size": "5"}
    assert extra_source_options(options, "lake.db.t", "lake") == {"maxFileAge": "1h"}
    own = {"host": "127.0.0.1", "port": "9200", "index": INDEX}
    assert merged_sink_options(own, {"HOST": "evil", "Index": "other", "batch_size": "5"}) == {
        **own,
        "batch_size": "5",
    }


# -- view queries ----------------------------------------------------------------------------------


def test_tumble_is_spelled_window_outside_strings_and_qualified_names() -> None:
    query = "SELECT tumble(at, '1 Minute') AS w, 'TUMBLE(x)' AS s, t.tumble(1) FROM t GROUP BY TUMBLE ( at, '1 Minute')"
    assert tumble_to_window(query) == (
        "SELECT window(at, '1 Minute') AS w, 'TUMBLE(x)' AS s, t.tumble(1) FROM t GROUP BY window ( at, '1 Minute')"
    )
    assert tumble_to_window("SELECT tumble FROM t") == "SELECT tumble FROM t"  # a column, not a call


def test_windows_aggregations_and_the_time_column_are_found_in_tokens() -> None:
    assert has_window(WINDOWED) and is_aggregating(WINDOWED)
    assert window_column(WINDOWED) == "at"
    assert window_column("SELECT 1 FROM t GROUP BY window(t.`event time`, '1 hour')") == "event time"
    assert window_column("SELECT 1 FROM t GROUP BY TUMBLE(cast(s AS timestamp), '1 hour')") is None
    assert not has_window("SELECT a FROM t WINDOW w AS (PARTITION BY a)")
    assert not is_aggregating("SELECT a, 'GROUP BY' FROM t -- GROUP BY a")
    assert is_aggregating("SELECT count(*) FROM t")


def test_source_tables_of_a_view_read_their_streams() -> None:
    query = (
        "SELECT a.x, b.y FROM lake.db.t a JOIN db.u AS b ON a.k = b.k "
        "JOIN lake.other.w c ON c.k = a.k WHERE a.s = 'FROM lake.db.t' GROUP BY TUMBLE(a.at, '1 Minute')"
    )
    views = {"lake.db.t": "__s1", "lake.db.u": "__s2"}
    assert streaming_query(query, "lake", views) == (
        "SELECT a.x, b.y FROM `__s1` a JOIN `__s2` AS b ON a.k = b.k "
        "JOIN spark_catalog.other.w c ON c.k = a.k WHERE a.s = 'FROM lake.db.t' GROUP BY window(a.at, '1 Minute')"
    )


# -- which statements a streaming job runs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("CREATE INDEX i ON t (a) WITH (auto_refresh = true)", True),
        ("CREATE SKIPPING INDEX ON t (a MIN_MAX) WITH (auto_refresh = true)", True),
        ("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t WITH (auto_refresh = true)", True),
        ("ALTER INDEX i ON t WITH (auto_refresh = true)", True),
        ("RECOVER INDEX JOB flint_lake_db_t_i_index", True),
        ("CREATE INDEX i ON t (a)", False),
        ("ALTER INDEX i ON t WITH (auto_refresh = false)", False),
        ("REFRESH INDEX i ON t", False),
        ("SELECT 1", False),
        ("CREATE INDEX i ON", False),
    ],
)
def test_streaming_statements(query: str, expected: bool) -> None:
    assert is_streaming_statement(query) is expected


def test_the_latest_offset_time_comes_from_the_file_source_log() -> None:
    assert file_log_offset('{"logOffset":4}') == 4 and file_log_offset({"logOffset": 0}) == 0
    assert file_log_offset('{"topic": {"0": 12}}') is None and file_log_offset("nonsense") is None
    log_text = (
        "v1\n"
        '{"path":"file:///t/a.parquet","timestamp":1700000000123,"batchId":3}\n'
        '{"path":"file:///t/b.parquet","timestamp":1700000005000,"batchId":3}'
    )
    assert newest_file_time(log_text) == 1700000005000
    assert newest_file_time("v1\n") == 0


def test_the_sinks_connection_keeps_the_jobs_retry_bounds() -> None:
    """A stream's writes retry a failing index as long as the job's own index calls do (an index
    server restarting under a stream must not fail it after the driver's default 30 s)."""
    from flint_repl_job.opensearch_source import connection, source_options
    from query_core.config import OpenSearchConfig

    job = OpenSearchConfig(url="https://search.example.com:9443", retry_attempts=60, retry_seconds=300.0)
    back = connection(source_options(job))
    assert (back.url, back.retry_attempts, back.retry_seconds) == (job.url, 60, 300.0)
    assert connection({"host": "h"}).retry_seconds == OpenSearchConfig().retry_seconds


def test_only_micro_batches_that_ran_are_counted() -> None:
    from flint_repl_job.indexes.streaming import batches_that_ran

    ran_0 = {"batchId": 0, "numInputRows": 2, "durationMs": {"addBatch": 40, "triggerExecution": 60}}
    ran_1 = {"batchId": 1, "numInputRows": 1, "durationMs": {"addBatch": 20, "triggerExecution": 30}}
    idle = {"batchId": 2, "numInputRows": 0, "durationMs": {"latestOffset": 1, "triggerExecution": 1}}
    assert batches_that_ran([ran_1, idle, ran_0]) == [ran_0, ran_1]
    assert batches_that_ran([idle]) == []
