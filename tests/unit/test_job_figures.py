"""A job's figures ride on its heartbeat and its session's end (no write of their own), without
Spark: the interactive job's loop runs against the in-memory twin with a stand-in executor that
also reports Spark's input and output, as ``SparkExecutor.io`` does."""

from __future__ import annotations

from typing import Any

from flint_repl_job.figures import JobCounters, SparkIo
from flint_repl_job.runners.interactive import InteractiveJob
from query_core.ids import new_id, request_index
from query_core.models import PICKUP_BUCKETS_S, StatementDoc, StreamProgress
from query_core.states import SessionState, StatementState
from query_core.store import Store
from tests.support import wait_for
from tests.unit.test_job_loop import RunningJob, StubExecutor, job_config, seed, source


class StubWithIo(StubExecutor):
    def io(self, query_id: str) -> SparkIo:
        return SparkIo(rows_read=10, bytes_read=400, rows_written=2, bytes_written=64)


def test_the_heartbeat_carries_the_job_s_figures_and_the_end_its_last(store: Store, ds_name: str) -> None:
    session, statement = seed(store, ds_name)
    index = request_index(ds_name)
    job = InteractiveJob(job_config(ds_name, session.session_id), store, StubWithIo())
    running = RunningJob(job)
    try:
        wait_for(
            lambda: source(store, index, statement.statement_id)["state"] == StatementState.SUCCESS.value,
            timeout=10,
            what="the statement to succeed",
        )
        beats = job.heartbeat.writes
        wait_for(lambda: job.heartbeat.writes >= beats + 1, timeout=10, what="a heartbeat after it")
        beat: dict[str, Any] = source(store, index, session.session_id)["metrics"]
    finally:
        running.stop()
    assert beat["statements"] == {"success": 1}
    assert sum(beat["pickup"]["counts"]) == 1 and len(beat["pickup"]["counts"]) == len(PICKUP_BUCKETS_S) + 1
    assert sum(beat["run"]["counts"]) == 1
    assert (beat["rowsRead"], beat["bytesRead"], beat["rowsWritten"], beat["bytesWritten"]) == (10, 400, 2, 64)
    assert beat["opensearchCalls"]["2xx"] > 0
    assert running.outcome == {"value": SessionState.DEAD}
    ended = source(store, index, session.session_id)
    assert ended["state"] == SessionState.DEAD.value
    # the end writes the last figures: every call the job made until then
    assert ended["metrics"]["opensearchCalls"]["2xx"] >= beat["opensearchCalls"]["2xx"]
    assert ended["metrics"]["statements"] == {"success": 1}


def test_counters_count_what_they_are_fed() -> None:
    counters = JobCounters()
    doc = StatementDoc(statement_id="q", query_id="q", session_id="s", query="SELECT 1", data_source_name="d")
    counters.statement_ended(doc.model_copy(update={"state": StatementState.FAILED}))
    counters.statement_ended(doc.model_copy(update={"state": StatementState.FAILED}))
    counters.statement_ended(doc.model_copy(update={"state": StatementState.SUCCESS}))
    counters.index_call("get", "2xx", 0)
    counters.index_call("update", "unreachable", 3)
    counters.statement_ran(pickup_ms=50, run_ms=1_000)  # 0.05 s: in the 0.05 bucket (le is inclusive)
    counters.statement_ran(pickup_ms=None, run_ms=10)
    counters.stream(StreamProgress(batches=7, batch_time=10_000, latest_offset_time=9_250))
    figures = counters.snapshot()
    assert figures.statements == {"failed": 2, "success": 1}
    assert figures.opensearch_calls == {"2xx": 1, "unreachable": 1}
    assert figures.pickup.counts[PICKUP_BUCKETS_S.index(0.05)] == 1 and sum(figures.pickup.counts) == 1
    assert sum(figures.run.counts) == 2 and figures.run.sum == 1.01
    assert (figures.micro_batches, figures.stream_lag_millis) == (7, 750)


def test_figures_of_an_older_job_are_read_back_as_none(store: Store, ds_name: str) -> None:
    """A session written by a job without figures (the reference's) reads with none."""
    session_id = new_id(ds_name)
    store.index.create(
        request_index(ds_name),
        session_id,
        {"type": "session", "sessionId": session_id, "dataSourceName": ds_name, "state": "running"},
    )
    found = store.sessions.get(ds_name, session_id)
    assert found is not None and found.doc.metrics is None
