"""Scheduled refresh, the job's side, in this process's shared Spark session (docs/flint.md,
"Scheduled refresh"): a batch job creates a scheduled index without a stream; each REFRESH (what a
scheduled run submits) adds only what is new since the index's checkpoint, as one available-now run
of the index's stream, and leaves no stream behind; DROP disables the schedule, VACUUM removes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.indexes.engine import FlintContext, FlintEngine, FlintIndexError
from query_core.config import OpenSearchConfig
from query_core.flint import parse
from query_core.flint.metas import flint_meta
from query_core.flint.scheduling import SchedulerPolicy
from query_core.states import FlintIndexState, ScheduleState
from query_core.store import ScheduleTerms, Store
from tests.integration.test_streaming_job import Lake, documents, ids_indexed, index_state, rows

pytestmark = pytest.mark.spark

POLICY = SchedulerPolicy(enabled=True, default_interval="5 minutes", min_interval="1 minute")


@pytest.fixture
def lake(spark: Any, ds_name: str) -> Iterator[Lake]:
    found = Lake(spark, ds_name)
    yield found
    found.drop_all()


def batch_engine(lake: Lake, store: Store, opensearch: OpenSearchConfig, job_id: str = "job-1") -> FlintEngine:
    """The engine of a batch job (no streams of its own) of a service whose scheduler is on."""
    return FlintEngine(FlintContext(lake.spark, store, opensearch, lake.ds, job_id=job_id, scheduler=POLICY))


def run(engine: FlintEngine, sql: str) -> None:
    statement = parse(sql)
    assert statement is not None
    engine.run(statement)


def test_a_scheduled_covering_index_is_created_without_a_stream_and_each_refresh_adds_what_is_new(
    lake: Lake, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path
) -> None:
    table = lake.table("scheduled_rows", "id BIGINT, name STRING, grp INT")
    lake.append("scheduled_rows", rows(range(0, 4)))
    index = f"flint_{lake.ds}_default_scheduled_rows_cov_index"
    checkpoint = tmp_path / "scheduled_rows"
    checkpoint.mkdir()
    (checkpoint / "left-by-a-dropped-index").write_text("stale")
    engine = batch_engine(lake, store, opensearch_config)
    run(engine, f"CREATE INDEX cov ON {table} (id, name) WITH (auto_refresh = true, checkpoint_location = '{checkpoint}')")
    options = (flint_meta(store.admin, index) or {})["options"]
    assert (options["auto_refresh"], options["scheduler_mode"], options["refresh_interval"]) == ("true", "external", "5 minutes")
    state = index_state(store, lake.ds, index)
    assert state is not None and state.doc.state is FlintIndexState.ACTIVE  # not refreshing: no stream runs
    assert lake.spark.streams.active == [] and ids_indexed(store, index) == []
    assert not (checkpoint / "left-by-a-dropped-index").exists()  # its runs start afresh

    run(batch_engine(lake, store, opensearch_config, "run-1"), f"REFRESH INDEX cov ON {table}")
    assert ids_indexed(store, index) == list(range(4))
    lake.append("scheduled_rows", rows(range(4, 6)))
    run(batch_engine(lake, store, opensearch_config, "run-2"), f"REFRESH INDEX cov ON {table}")
    assert ids_indexed(store, index) == list(range(6))  # the first rows were not written again
    run(batch_engine(lake, store, opensearch_config, "run-3"), f"REFRESH INDEX cov ON {table}")
    assert ids_indexed(store, index) == list(range(6))  # nothing new: nothing written
    assert lake.spark.streams.active == []
    after = index_state(store, lake.ds, index)
    assert after is not None and after.doc.state is FlintIndexState.ACTIVE and after.doc.job_id == "run-3"
    assert after.doc.last_refresh_complete_time >= after.doc.last_refresh_start_time > 0


def test_a_scheduled_skipping_index_indexes_each_new_file_once(
    lake: Lake, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path
) -> None:
    table = lake.table("scheduled_files", "id BIGINT, name STRING, grp INT")
    lake.append("scheduled_files", rows(range(0, 3)))
    index = f"flint_{lake.ds}_default_scheduled_files_skipping_index"
    engine = batch_engine(lake, store, opensearch_config)
    run(
        engine,
        f"CREATE SKIPPING INDEX ON {table} (grp VALUE_SET) "
        f"WITH (auto_refresh = true, refresh_interval = '2 minutes', checkpoint_location = '{tmp_path / 'cp'}')",
    )
    run(engine, f"REFRESH SKIPPING INDEX ON {table}")
    assert len(documents(store, index)) == 1
    lake.append("scheduled_files", rows(range(3, 5)))
    run(engine, f"REFRESH SKIPPING INDEX ON {table}")
    files = documents(store, index)
    assert len(files) == 2 and len({f["file_path"] for f in files}) == 2


def test_the_job_refuses_what_is_not_its_to_run_and_drop_then_vacuum_end_the_schedule(
    lake: Lake, store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path
) -> None:
    table = lake.table("scheduled_end", "id BIGINT, name STRING, grp INT")
    lake.append("scheduled_end", rows(range(0, 2)))
    index = f"flint_{lake.ds}_default_scheduled_end_cov_index"
    engine = batch_engine(lake, store, opensearch_config)
    with pytest.raises(FlintIndexError, match="required above the interval threshold"):
        run(engine, f"CREATE INDEX cov ON {table} (id) WITH (auto_refresh = true, scheduler_mode = 'external', refresh_interval = '5 seconds')")
    with pytest.raises(FlintIndexError, match="is created by a streaming job, not this one"):
        run(engine, f"CREATE INDEX cov ON {table} (id) WITH (auto_refresh = true, refresh_interval = '5 seconds')")
    run(engine, f"CREATE INDEX cov ON {table} (id) WITH (auto_refresh = true, checkpoint_location = '{tmp_path / 'cp'}')")
    store.schedules.enable(ScheduleTerms(lake.ds, index, "5 minutes", 300_000), next_run=0)
    run(engine, f"DROP INDEX cov ON {table}")
    found = store.schedules.of(index)
    assert found is not None and found.doc.state is ScheduleState.DISABLED
    run(engine, f"VACUUM INDEX cov ON {table}")
    assert store.schedules.of(index) is None and not store.admin.index_exists(index)
    assert not (tmp_path / "cp").exists()
