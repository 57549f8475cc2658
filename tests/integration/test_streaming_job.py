"""The streaming job end to end in this process: a real Spark session (shared), a real index server,
the statement and session documents written as the plugin writes them.

Each job runs ``StreamingJob.run()`` in a thread; tables are parquet tables of the session catalog,
and rows are appended as new files while the stream runs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import SparkExecutor
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from flint_repl_job.indexes.streaming import (
    CHECKPOINT_REQUIRED,
    CHECKPOINT_ROOT_KEY,
    INCREMENTAL_WITH_AUTO,
    POLLING_DELAY_KEY,
    WATERMARK_REQUIRED,
)
from flint_repl_job.runners.streaming import StreamingJob
from query_core.config import OpenSearchConfig
from query_core.flint import parse
from query_core.flint.metas import flint_metas
from query_core.flint.naming import latest_id
from query_core.ids import default_result_index, new_id, request_index
from query_core.models import FlintIndexStateDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import INDEX_OPERATIONS, FlintIndexState, SessionState, SessionType, StatementState
from query_core.store import Store
from tests.support import driver, wait_for

pytestmark = pytest.mark.spark

TIMEOUT = 90.0  # seconds; the machine may be busy
HEARTBEAT_MS = 2_000
F = FlintIndexState


class Lake:
    """Parquet tables of the shared Spark session, dropped at the end of the test."""

    def __init__(self, spark: Any, ds: str) -> None:
        self.spark = spark
        self.ds = ds
        self.tables: list[str] = []

    def table(self, name: str, columns: str) -> str:
        self.spark.sql(f"DROP TABLE IF EXISTS default.{name}")
        self.spark.sql(f"CREATE TABLE default.{name} ({columns}) USING parquet")
        self.tables.append(name)
        return f"{self.ds}.default.{name}"

    def append(self, name: str, rows: list[tuple[Any, ...]]) -> None:
        """New rows in a new file of the table."""
        schema = self.spark.table(f"default.{name}").schema
        self.spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").insertInto(f"default.{name}")

    def location(self, name: str) -> Path:
        rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED default.{name}").collect()
        found = next(r.data_type for r in rows if r.col_name == "Location")
        return Path(found.removeprefix("file:"))

    def drop_all(self) -> None:
        for name in self.tables:
            self.spark.sql(f"DROP TABLE IF EXISTS default.{name}")


@pytest.fixture
def lake(spark: Any, ds_name: str) -> Iterator[Lake]:
    found = Lake(spark, ds_name)
    yield found
    found.drop_all()


class Jobs:
    """Streaming jobs of one test, each ``run()`` in a thread; stopped when the test ends."""

    def __init__(self, spark: Any, store: Store, opensearch: OpenSearchConfig, ds: str, root: Path) -> None:
        self.spark, self.store, self.opensearch, self.ds, self.root = spark, store, opensearch, ds, root
        self.running: list[tuple[StreamingJob, threading.Thread, dict[str, Any]]] = []

    def start(self, query: str, job_id: str = "job-1", **fields: Any) -> tuple[StreamingJob, SessionDoc, StatementDoc]:
        """Write the documents as the plugin does, then start the job."""
        index = request_index(self.ds)
        session_id, query_id = new_id(self.ds), new_id(self.ds)
        statement = StatementDoc(
            statement_id=query_id, query_id=query_id, session_id=session_id, query=query, data_source_name=self.ds
        )
        session = SessionDoc(
            session_id=session_id, data_source_name=self.ds, job_id=job_id, session_type=SessionType.STREAMING
        )
        self.store.index.create(index, query_id, statement.to_source())
        self.store.index.create(index, session_id, session.to_source())
        settings: dict[str, Any] = {
            "checkpoint_root": str(self.root),
            "checkpoint_mandatory": True,
            "heartbeat_streaming_ms": HEARTBEAT_MS,
            "stream_check_ms": 100,
            **fields,
        }
        cfg = JobConfig(
            session_id=session_id,
            datasource=self.ds,
            result_index=default_result_index(self.ds),
            request_index=index,
            job_type=SessionType.STREAMING,
            query_id=query_id,
            job_id=job_id,
            application_id="app-1",
            loop_frequency_ms=20,
            heartbeat_running_ms=200,
            heartbeat_idle_ms=1_000,
            session_wait_ms=5_000,
            **settings,
        )
        context = FlintContext(self.spark, self.store, self.opensearch, self.ds, application_id="app-1", job_id=job_id)
        executor = SparkExecutor(self.spark, self.ds, FlintEngine(context))
        job = StreamingJob(cfg, self.store, executor)
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: outcome.update(value=job.run()), name=f"job-{job_id}", daemon=True)
        thread.start()
        self.running.append((job, thread, outcome))
        return job, session, statement

    def join(self, job: StreamingJob, timeout: float = TIMEOUT) -> SessionState | None:
        for candidate, thread, outcome in self.running:
            if candidate is job:
                thread.join(timeout)
                assert not thread.is_alive(), "the streaming job did not end"
                value: SessionState | None = outcome.get("value")
                return value
        raise AssertionError("not a job of this test")

    def stop_all(self) -> None:
        for job, thread, _ in self.running:
            job.stop_event.set()
            thread.join(TIMEOUT)
            if isinstance(job.executor, SparkExecutor):
                job.executor.close()


@pytest.fixture
def jobs(spark: Any, store: Store, opensearch_config: OpenSearchConfig, ds_name: str, tmp_path: Path) -> Any:
    found = Jobs(spark, store, opensearch_config, ds_name, tmp_path / "checkpoints")
    yield found
    found.stop_all()


# -- reading documents ------------------------------------------------------------------------------


def doc(store: Store, ds: str, doc_id: str) -> dict[str, Any]:
    found = store.index.get(request_index(ds), doc_id)
    assert found is not None, f"{doc_id} is missing"
    return found.source


def index_state(store: Store, ds: str, index_name: str) -> Versioned[FlintIndexStateDoc] | None:
    return store.index_states.get(ds, latest_id(index_name))


def statement_ended(store: Store, ds: str, statement: StatementDoc) -> dict[str, Any] | None:
    found = doc(store, ds, statement.statement_id)
    return found if found["state"] not in (StatementState.WAITING.value, StatementState.RUNNING.value) else None


def documents(store: Store, index: str) -> list[dict[str, Any]]:
    if not store.admin.index_exists(index):
        return []
    driver(store).indices.refresh(index=index)
    return [source for _, source in store.admin.scan(index)]


def ids_indexed(store: Store, index: str) -> list[int]:
    return sorted(int(d["id"]) for d in documents(store, index))


def wait_ids(store: Store, index: str, expected: list[int]) -> None:
    wait_for(lambda: ids_indexed(store, index) == expected, timeout=TIMEOUT, interval=0.2, what=f"ids {expected}")


def rows(ids: range) -> list[tuple[Any, ...]]:
    return [(i, f"name-{i}", i % 3) for i in ids]


# -- tests ------------------------------------------------------------------------------------------


def test_covering_index_stays_fresh_stops_when_altered_and_resumes_without_gaps_or_duplicates(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    ds = ds_name
    table = lake.table("events", "id BIGINT, name STRING, grp INT")
    lake.append("events", rows(range(0, 3)))
    index = f"flint_{ds}_default_events_cov_index"
    create = f"CREATE INDEX cov ON {table} (id, name) WITH (auto_refresh = true, refresh_interval = '1 second')"
    job, session, statement = jobs.start(create, stream_idle_poll_ms=333)

    ended = wait_for(lambda: statement_ended(store, ds, statement), timeout=TIMEOUT, what="the CREATE to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    # Its streams look at their source again a third of a second after a look that found nothing
    # (Spark's own delay: 10 ms, about a fifth of a core per idle stream).
    assert lake.spark.conf.get(POLLING_DELAY_KEY) == "333ms"
    result = store.results.get(default_result_index(ds), statement.query_id)
    assert result is not None and result.status == "SUCCESS" and result.result == []
    state = index_state(store, ds, index)
    assert state is not None and state.doc.state is F.REFRESHING and state.doc.job_id == "job-1"
    assert state.doc.job_start_time > 0
    meta = flint_metas(store.admin, index)[index]
    assert meta["options"]["auto_refresh"] == "true"
    wait_ids(store, index, list(range(3)))

    # New files while it runs: they reach the index, batch after batch; the heartbeat does not
    # follow the batches: one write per streaming interval, carrying the latest batch.
    beats_before, since = job.heartbeat.writes, time.monotonic()
    first_batch = wait_for(
        lambda: (p := doc(store, ds, session.session_id).get("streamProgress")) and p["batchId"] >= 0 and p,
        timeout=TIMEOUT,
        what="a beat reporting the first batch",
    )
    for start in (3, 6, 9):
        lake.append("events", rows(range(start, start + 3)))
        wait_ids(store, index, list(range(start + 3)))
    beat = wait_for(
        lambda: (
            (p := doc(store, ds, session.session_id))["streamProgress"]["batchId"] >= first_batch["batchId"] + 3 and p
        ),
        timeout=TIMEOUT,
        what="a beat reporting three more batches",
    )
    progress = beat["streamProgress"]
    assert progress["indexName"] == index and progress["streamId"] and progress["batchTime"] > 0
    assert progress["batches"] >= 4
    newest_file = max(f.stat().st_mtime for f in lake.location("events").glob("*.parquet"))
    assert abs(progress["latestOffsetTime"] - newest_file * 1000) < 5_000
    assert beat["heartbeatIntervalMillis"] == HEARTBEAT_MS and beat["state"] == SessionState.RUNNING.value
    elapsed = time.monotonic() - since
    assert job.heartbeat.writes - beats_before <= elapsed / (HEARTBEAT_MS / 1000) + 2

    # ALTER to manual refresh, as the plugin does it: the index moves to updating; the job stops
    # its stream between batches and ends its session dead, leaving the state document alone.
    current = index_state(store, ds, index)
    assert current is not None
    updating = store.index_states.begin(current, INDEX_OPERATIONS["alter to manual refresh"])
    assert jobs.join(job) == SessionState.DEAD
    done = doc(store, ds, session.session_id)
    assert done["state"] == SessionState.DEAD.value and done["error"] == ""
    after = index_state(store, ds, index)
    assert after is not None and (after.seq_no, after.doc.state) == (updating.seq_no, F.UPDATING)
    # ... and the plugin commits its ALTER: active, auto_refresh false.
    store.index_states.commit(after, INDEX_OPERATIONS["alter to manual refresh"])
    store.admin.put_mapping_meta(index, {**meta, "options": {**meta["options"], "auto_refresh": "false"}})

    # Rows arriving meanwhile, then ALTER back to auto refresh: a new job resumes from the
    # checkpoint: every row once, none missing.
    lake.append("events", rows(range(12, 15)))
    alter = f"ALTER INDEX cov ON {table} WITH (auto_refresh = true)"
    second, session2, statement2 = jobs.start(alter, job_id="job-2")
    ended = wait_for(lambda: statement_ended(store, ds, statement2), timeout=TIMEOUT, what="the ALTER to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    state = index_state(store, ds, index)
    assert state is not None and state.doc.state is F.REFRESHING and state.doc.job_id == "job-2"
    assert flint_metas(store.admin, index)[index]["options"]["auto_refresh"] == "true"
    wait_ids(store, index, list(range(15)))
    lake.append("events", rows(range(15, 17)))
    wait_ids(store, index, list(range(17)))

    # The launcher's cancel (SIGTERM): the stream stops, the index state is left for the plugin.
    second.stop_event.set()
    assert jobs.join(second) == SessionState.DEAD
    assert doc(store, ds, session2.session_id)["state"] == SessionState.DEAD.value
    left = index_state(store, ds, index)
    assert left is not None and left.doc.state is F.REFRESHING
    assert ids_indexed(store, index) == list(range(17))


def test_windowed_materialized_view_emits_each_window_once_after_the_watermark(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    ds = ds_name
    table = lake.table("clicks", "id BIGINT, at TIMESTAMP")
    at = dt.datetime(2024, 5, 1, 10, 0, 5, tzinfo=dt.UTC)
    lake.append("clicks", [(i, at + dt.timedelta(seconds=10 * i)) for i in range(3)])  # 10:00:05 .. 10:00:25
    mv = f"{ds}.default.clicks_per_minute"
    create = (
        f"CREATE MATERIALIZED VIEW {mv} AS SELECT window.start AS start, COUNT(*) AS clicks FROM {table} "
        "GROUP BY TUMBLE(at, '1 Minute') "
        "WITH (auto_refresh = true, refresh_interval = '1 second', watermark_delay = '1 Second')"
    )
    job, _, statement = jobs.start(create)
    ended = wait_for(lambda: statement_ended(store, ds, statement), timeout=TIMEOUT, what="the CREATE to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    index = f"flint_{ds}_default_clicks_per_minute"

    # 10:01:30 passes the watermark of the 10:00 window; 10:05 that of the 10:01 one.
    lake.append("clicks", [(10, at + dt.timedelta(minutes=1, seconds=25)), (11, at + dt.timedelta(minutes=1))])
    lake.append("clicks", [(12, at + dt.timedelta(minutes=5))])

    def windows() -> dict[str, int]:
        return {d["start"]: d["clicks"] for d in documents(store, index)}

    expected = {"2024-05-01T10:00:00Z": 3, "2024-05-01T10:01:00Z": 2}
    wait_for(lambda: windows() == expected, timeout=TIMEOUT, interval=0.2, what=f"windows {expected}")
    assert len(documents(store, index)) == 2  # one document per window, emitted once
    job.stop_event.set()
    assert jobs.join(job) == SessionState.DEAD


def test_a_stream_that_dies_fails_the_index_and_the_session_with_its_cause(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    ds = ds_name
    table = lake.table("broken", "id BIGINT, name STRING, grp INT")
    lake.append("broken", rows(range(0, 2)))
    index = f"flint_{ds}_default_broken_cov_index"
    create = f"CREATE INDEX cov ON {table} (id, name) WITH (auto_refresh = true, refresh_interval = '1 second')"
    job, session, statement = jobs.start(create)
    ended = wait_for(lambda: statement_ended(store, ds, statement), timeout=TIMEOUT, what="the CREATE to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    wait_ids(store, index, [0, 1])

    # A file whose id column is a string: the next micro-batch cannot read it.
    pq.write_table(pa.table({"id": ["x"], "name": ["bad"], "grp": [1]}), lake.location("broken") / "bad.parquet")
    assert jobs.join(job) == SessionState.FAIL
    failed = index_state(store, ds, index)
    assert failed is not None and failed.doc.state is F.FAILED
    assert failed.doc.error.startswith(f"Streaming refresh of {index} failed: ")
    assert "\n" not in failed.doc.error and len(failed.doc.error) < 700
    done = doc(store, ds, session.session_id)
    assert done["state"] == SessionState.FAIL.value and done["error"] == failed.doc.error

    # The file is fixed; RECOVER INDEX JOB starts a new stream from the checkpoint, which runs the
    # failed micro-batch again.
    pq.write_table(
        pa.table({"id": pa.array([2], pa.int64()), "name": ["fixed"], "grp": pa.array([2], pa.int32())}),
        lake.location("broken") / "bad.parquet",
    )
    recover, session2, statement2 = jobs.start(f"RECOVER INDEX JOB {index}", job_id="job-2")
    ended = wait_for(lambda: statement_ended(store, ds, statement2), timeout=TIMEOUT, what="the RECOVER to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    state = index_state(store, ds, index)
    assert state is not None and state.doc.state is F.REFRESHING and state.doc.job_id == "job-2"
    assert state.doc.error == ""
    wait_ids(store, index, [0, 1, 2])

    # DROP, as the plugin does it: the stream stops; then VACUUM (a batch job) removes the index
    # and its default checkpoint (<root>/<index>: the index names no checkpoint_location).
    deleting = store.index_states.begin(state, INDEX_OPERATIONS["drop"])
    assert jobs.join(recover) == SessionState.DEAD
    assert doc(store, ds, session2.session_id)["error"] == ""
    store.index_states.commit(deleting, INDEX_OPERATIONS["drop"])
    checkpoint = jobs.root / index
    assert checkpoint.is_dir()
    lake.spark.conf.set(CHECKPOINT_ROOT_KEY, str(jobs.root))
    try:
        context = FlintContext(lake.spark, store, jobs.opensearch, ds, job_id="job-3")
        vacuum = parse(f"VACUUM INDEX cov ON {table}")
        assert vacuum is not None
        FlintEngine(context).run(vacuum)
    finally:
        lake.spark.conf.unset(CHECKPOINT_ROOT_KEY)
    assert not checkpoint.exists() and not store.admin.index_exists(index)
    assert index_state(store, ds, index) is None


def test_a_dropped_source_table_fails_the_stream(lake: Lake, jobs: Jobs, store: Store, ds_name: str) -> None:
    ds = ds_name
    table = lake.table("gone", "id BIGINT, name STRING, grp INT")
    lake.append("gone", rows(range(0, 2)))
    index = f"flint_{ds}_default_gone_skipping_index"
    create = (
        f"CREATE SKIPPING INDEX ON {table} (grp VALUE_SET) WITH (auto_refresh = true, refresh_interval = '1 second')"
    )
    job, session, statement = jobs.start(create)
    job.table_check_s = 0.5
    ended = wait_for(lambda: statement_ended(store, ds, statement), timeout=TIMEOUT, what="the CREATE to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    # The skipping index: one document per file, through foreachBatch.
    wait_for(lambda: len(documents(store, index)) == 1, timeout=TIMEOUT, interval=0.2, what="the first file")
    lake.append("gone", rows(range(2, 4)))
    wait_for(lambda: len(documents(store, index)) == 2, timeout=TIMEOUT, interval=0.2, what="the second file")
    assert sorted(v for d in documents(store, index) for v in d["grp"]) == [0, 0, 1, 2]

    lake.spark.sql("DROP TABLE default.gone")
    assert jobs.join(job) == SessionState.FAIL
    failed = index_state(store, ds, index)
    assert failed is not None and failed.doc.state is F.FAILED
    assert f"source table {table} no longer exists" in failed.doc.error
    assert doc(store, ds, session.session_id)["error"] == failed.doc.error


@pytest.mark.parametrize(
    ("with_", "fields", "message"),
    [
        ("auto_refresh = true", {"checkpoint_root": ""}, CHECKPOINT_REQUIRED),
        ("auto_refresh = true, incremental_refresh = true", {}, INCREMENTAL_WITH_AUTO),
    ],
)
def test_refused_covering_options(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str, with_: str, fields: dict[str, Any], message: str
) -> None:
    table = lake.table("refused", "id BIGINT, name STRING, grp INT")
    job, session, statement = jobs.start(f"CREATE INDEX cov ON {table} (id) WITH ({with_})", **fields)
    assert jobs.join(job) == SessionState.FAIL
    failed = doc(store, ds_name, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value and message in failed["error"]
    assert doc(store, ds_name, session.session_id)["state"] == SessionState.FAIL.value
    index = f"flint_{ds_name}_default_refused_cov_index"
    assert not store.admin.index_exists(index) and index_state(store, ds_name, index) is None


def test_an_aggregating_view_without_watermark_delay_is_refused(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    table = lake.table("agg", "id BIGINT, at TIMESTAMP")
    create = (
        f"CREATE MATERIALIZED VIEW {ds_name}.default.agg_mv AS SELECT window.start AS start, COUNT(*) AS n "
        f"FROM {table} GROUP BY TUMBLE(at, '1 Minute') WITH (auto_refresh = true)"
    )
    job, _, statement = jobs.start(create)
    assert jobs.join(job) == SessionState.FAIL
    failed = doc(store, ds_name, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value and WATERMARK_REQUIRED in failed["error"]
    assert not store.admin.index_exists(f"flint_{ds_name}_default_agg_mv")


def test_a_stream_that_cannot_start_leaves_the_index_active_with_the_error(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    table = lake.table("unstarted", "id BIGINT, name STRING, grp INT")
    create = f"CREATE INDEX cov ON {table} (id) WITH (auto_refresh = true, refresh_interval = 'now and then')"
    job, session, statement = jobs.start(create)
    assert jobs.join(job) == SessionState.FAIL
    failed = doc(store, ds_name, statement.statement_id)
    assert failed["state"] == StatementState.FAILED.value
    index = f"flint_{ds_name}_default_unstarted_cov_index"
    state = index_state(store, ds_name, index)
    assert state is not None and state.doc.state is F.ACTIVE
    assert state.doc.error.startswith("auto refresh did not start: ")
    assert doc(store, ds_name, session.session_id)["error"] == failed["error"]


def test_a_manual_incremental_refresh_of_a_covering_index_adds_only_new_rows(
    lake: Lake, store: Store, opensearch_config: OpenSearchConfig, ds_name: str, tmp_path: Path
) -> None:
    table = lake.table("increments", "id BIGINT, name STRING, grp INT")
    lake.append("increments", rows(range(0, 4)))
    engine = FlintEngine(FlintContext(lake.spark, store, opensearch_config, ds_name, job_id="job-1"))
    index = f"flint_{ds_name}_default_increments_cov_index"

    def run(sql: str) -> None:
        statement = parse(sql)
        assert statement is not None
        engine.run(statement)

    checkpoint = tmp_path / "increments"
    run(
        f"CREATE INDEX cov ON {table} (id, name) "
        f"WITH (incremental_refresh = true, checkpoint_location = '{checkpoint}')"
    )
    run(f"REFRESH INDEX cov ON {table}")
    assert ids_indexed(store, index) == list(range(4))
    lake.append("increments", rows(range(4, 6)))
    run(f"REFRESH INDEX cov ON {table}")
    assert ids_indexed(store, index) == list(range(6))  # the first rows were not written again
    state = index_state(store, ds_name, index)
    assert state is not None and state.doc.state is F.ACTIVE


def test_an_aggregating_view_in_complete_mode_keeps_one_document_per_key(
    lake: Lake, jobs: Jobs, store: Store, ds_name: str
) -> None:
    table = lake.table("per_group", "id BIGINT, name STRING, grp INT")
    lake.append("per_group", rows(range(0, 4)))  # groups 0, 1, 2, 0
    create = (
        f"CREATE MATERIALIZED VIEW {ds_name}.default.group_counts AS SELECT grp, COUNT(*) AS n FROM {table} "
        "GROUP BY grp WITH (auto_refresh = true, refresh_interval = '1 second', output_mode = 'complete', "
        "id_expression = 'grp')"
    )
    job, _, statement = jobs.start(create)
    ended = wait_for(lambda: statement_ended(store, ds_name, statement), timeout=TIMEOUT, what="the CREATE to end")
    assert ended["state"] == StatementState.SUCCESS.value, ended
    index = f"flint_{ds_name}_default_group_counts"

    def counts() -> dict[int, int]:
        return {d["grp"]: d["n"] for d in documents(store, index)}

    wait_for(lambda: counts() == {0: 2, 1: 1, 2: 1}, timeout=TIMEOUT, interval=0.2, what="the first counts")
    lake.append("per_group", rows(range(4, 6)))  # groups 1, 2
    wait_for(lambda: counts() == {0: 2, 1: 2, 2: 2}, timeout=TIMEOUT, interval=0.2, what="the new counts")
    assert sorted(doc_id for doc_id, _ in store.admin.scan(index)) == ["0", "1", "2"]
    job.stop_event.set()
    assert jobs.join(job) == SessionState.DEAD


def test_recover_of_an_index_of_another_catalog_is_refused_by_the_job(
    lake: Lake, store: Store, opensearch_config: OpenSearchConfig, ds_name: str, tmp_path: Path
) -> None:
    # Datasource <ds>_default's index names begin as <ds>'s of database "default" do: the name
    # passes, the index's metadata (its table in catalog <ds>) does not.
    table = lake.table("foreign", "id BIGINT, name STRING, grp INT")
    lake.append("foreign", rows(range(0, 2)))
    statement = parse(f"CREATE INDEX cov ON {table} (id)")
    assert statement is not None
    FlintEngine(FlintContext(lake.spark, store, opensearch_config, ds_name, job_id="job-1")).run(statement)
    index = f"flint_{ds_name}_default_foreign_cov_index"
    before = index_state(store, ds_name, index)
    assert before is not None and before.doc.state is F.ACTIVE

    other = Jobs(lake.spark, store, opensearch_config, f"{ds_name}_default", tmp_path / "checkpoints")
    try:
        _, _, recover = other.start(f"RECOVER INDEX JOB {index}")
        ended = wait_for(
            lambda: statement_ended(store, other.ds, recover), timeout=TIMEOUT, what="the RECOVER to end"
        )
        assert ended["state"] == StatementState.FAILED.value, ended
        assert f"is of catalog '{ds_name}', not this query's datasource '{ds_name}_default'" in ended["error"]
    finally:
        other.stop_all()
    after = index_state(store, ds_name, index)
    assert after is not None and after.doc == before.doc  # nothing moved
    assert index_state(store, other.ds, index) is None
