"""The whole path with a real job: POST -> documents -> spark-submit job -> result -> GET."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from async_query.embedded.metastore import Metastore
from async_query.launcher.local import LocalLauncher, catalog_settings
from async_query.runtime import Plugin
from query_core.states import SessionState
from tests.e2e.conftest import BASE, Api, e2e_service
from tests.support import serve_http, wait_for

pytestmark = pytest.mark.e2e

EVERY_TYPE = """
SELECT
  true AS b, CAST(-7 AS TINYINT) AS i8, CAST(-300 AS SMALLINT) AS i16, 2147483647 AS i32,
  9223372036854775807 AS i64, CAST(1.1 AS FLOAT) AS f32, 0.1D AS f64,
  CAST('12345678901234567890.123456789' AS DECIMAL(38, 9)) AS dec,
  'it''s "quoted" \\\\ back\\\\slash, ünïcødé 🚀' AS s, CAST(NULL AS STRING) AS nul,
  DATE'2024-02-29' AS d, TIMESTAMP'2024-01-02 03:04:05.123456' AS ts,
  array(1, NULL, 3) AS arr, map('k1', 1, 'k2', NULL) AS m,
  named_struct('x', 1, 'y', named_struct('z', 'deep', 'w', array('a'))) AS st,
  X'00FF10' AS bin
"""

EXPECTED_ROW = [
    True,
    -7,
    -300,
    2147483647,
    9223372036854775807,
    Decimal("1.1"),
    Decimal("0.1"),
    Decimal("12345678901234567890.123456789"),
    'it\'s "quoted" \\ back\\slash, ünïcødé 🚀',
    None,
    "2024-02-29",
    "2024-01-02 03:04:05.123456",
    [1, None, 3],
    {"k1": 1, "k2": None},
    {"x": 1, "y": {"z": "deep", "w": ["a"]}},
    "AP8Q",
]
EXPECTED_TYPES = [
    "boolean", "byte", "short", "integer", "long", "float", "double", "decimal", "string", "string",
    "date", "timestamp", "array", "map", "struct", "binary",
]  # fmt: skip


@pytest.fixture(scope="module")
def session(e2e: tuple[Api, Plugin]) -> str:
    """One interactive session (one job) for the tests of this module that need no session of
    their own: each job start costs seconds of CPU, and the suite is bound by CPU."""
    api, _ = e2e
    submitted, reply = api.run("SELECT 1")
    assert reply["status"] == "SUCCESS", reply
    return str(submitted["sessionId"])


def test_every_type_round_trips_exactly(e2e: tuple[Api, Plugin], session: str) -> None:
    api, _ = e2e
    submitted, reply = api.run(EVERY_TYPE, session)
    assert reply["status"] == "SUCCESS", reply
    exact = json.loads(api.raw(submitted["queryId"]).text, parse_float=Decimal)
    assert [c["type"] for c in exact["schema"]] == EXPECTED_TYPES
    assert [c["name"] for c in exact["schema"]][:3] == ["b", "i8", "i16"]
    assert exact["datarows"] == [EXPECTED_ROW]
    assert exact["total"] == exact["size"] == 1


def test_second_query_runs_in_the_same_session_and_job(e2e: tuple[Api, Plugin], session: str) -> None:
    api, plugin = e2e
    first, reply1 = api.run("SELECT 1 AS one", session)
    second, reply2 = api.run("SELECT 2 AS two", first["sessionId"])
    assert reply1["datarows"] == [[1]] and reply2["datarows"] == [[2]]
    assert second["sessionId"] == first["sessionId"]
    statements = [plugin.store.statements.get(api.datasource, s["queryId"]) for s in (first, second)]
    assert all(s is not None for s in statements)
    assert statements[0].doc.job_id == statements[1].doc.job_id != ""  # type: ignore[union-attr]


def test_the_class_archive_jobs_start_from_was_recorded_without_unused_session_extensions(
    e2e: tuple[Api, Plugin], session: str
) -> None:
    """The warm-up that records it makes its session as a job does (docs/job.md, "Start-up of
    local jobs"): no class of MLlib's session extension, nor of the Scala reflection it would have
    started, was loaded there; the session's own classes were."""
    _, plugin = e2e
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, LocalLauncher)
    if not launcher.class_archive.path.exists():
        pytest.skip("the run recorded no class archive here (its warning says why)")
    recorded = launcher.class_archive.path.read_bytes()
    assert b"org/apache/spark/sql/classic/SparkSession" in recorded
    assert b"org/apache/spark/sql/ml/InternalFunctionRegistration" not in recorded
    assert b"scala/reflect/runtime/JavaUniverse" not in recorded


def test_five_million_rows_succeed_capped_and_the_session_stays_warm(e2e: tuple[Api, Plugin], session: str) -> None:
    """Five million rows, with the job's default driver memory and the default caps: the rows are
    streamed (collecting them would take the driver gigabytes, and their one document would pass
    the index's request limit), the result stops at the cap marked truncated, a page past the first
    document reads the capped-off end, and the session goes on, warm."""
    api, plugin = e2e
    big, reply = api.run("SELECT id FROM range(5000000)", session, timeout=300)
    assert reply["status"] == "SUCCESS", reply
    cap, page_rows = plugin.settings.max_result_rows, plugin.settings.result_chunk_rows
    assert reply["datarows"][:3] == [[0], [1], [2]] and reply["size"] == page_rows
    assert (reply["resultRows"], reply["truncated"]) == (cap, True)

    tail = api.http.get(f"{BASE}/{big['queryId']}", params={"offset": cap - 5, "size": 100}).json()
    assert tail["datarows"] == [[i] for i in range(cap - 5, cap)]
    assert (tail["offset"], tail["size"], tail["resultRows"], tail["truncated"]) == (cap - 5, 5, cap, True)

    after, warm = api.run("SELECT 'warm' AS x", big["sessionId"], timeout=60)
    assert warm["status"] == "SUCCESS" and warm["datarows"] == [["warm"]]
    assert after["sessionId"] == big["sessionId"]
    jobs = {plugin.store.statements.get(api.datasource, q["queryId"]).doc.job_id for q in (big, after)}  # type: ignore[union-attr]
    assert len(jobs) == 1
    found = plugin.store.sessions.get(api.datasource, big["sessionId"])
    assert found is not None and found.doc.state == SessionState.RUNNING


def test_syntax_error_comes_back_failed(e2e: tuple[Api, Plugin], session: str) -> None:
    api, _ = e2e
    _, reply = api.run("SELEC 1 FROM", session)
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Syntax error"), reply["error"]
    assert "== SQL" not in reply["error"]


def test_analysis_error_is_classified(e2e: tuple[Api, Plugin], session: str) -> None:
    api, _ = e2e
    _, reply = api.run("SELECT no_such_column FROM range(1)", session)
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Fail to analyze query. Cause:"), reply["error"]


#: Runs for hours on any machine (a count over a cross join of two ranges), until cancelled.
SLEEP_10_MIN = "SELECT count(*) AS n FROM range(10000000) a, range(10000000) b"


def test_cancel_waiting_then_running_statement(e2e: tuple[Api, Plugin], session: str) -> None:
    api, plugin = e2e
    warm, _ = api.run("SELECT 1", session)
    assert warm["sessionId"] == session
    long = api.submit(SLEEP_10_MIN, session)
    api.wait_status(long["queryId"], {"RUNNING"})
    queued = api.submit("SELECT 'never runs'", session)
    assert api.get(queued["queryId"])["status"] == "WAITING"

    assert api.cancel(queued["queryId"]).status_code == 204
    assert api.get(queued["queryId"])["status"] == "CANCELLED"

    assert api.cancel(long["queryId"]).status_code == 204
    assert api.get(long["queryId"])["status"] == "CANCELLED"

    # The job runs one statement at a time: a new one completing in the same job proves the
    # cancelled statement's Spark work has stopped (it would otherwise sleep for ten minutes).
    after, reply = api.run("SELECT 'after' AS x", session, timeout=60)
    assert reply["status"] == "SUCCESS" and reply["datarows"] == [["after"]]
    assert after["sessionId"] == session
    ids = {plugin.store.statements.get(api.datasource, q["queryId"]).doc.job_id for q in (long, after)}  # type: ignore[union-attr]
    assert len(ids) == 1

    heartbeat_clear = lambda: not plugin.store.sessions.get(api.datasource, session).doc.running_statements  # type: ignore[union-attr]  # noqa: E731
    wait_for(heartbeat_clear, timeout=30, what="the heartbeat to show nothing running")
    for q in (queued, long):
        assert api.get(q["queryId"])["status"] == "CANCELLED"
        assert api.cancel(q["queryId"]).status_code == 400


def test_running_statement_reports_progress(e2e: tuple[Api, Plugin], session: str) -> None:
    api, plugin = e2e
    warm, _ = api.run("SELECT 1", session)
    long = api.submit(SLEEP_10_MIN, warm["sessionId"])

    def progress() -> dict[str, Any] | None:
        # A beat taken before the statement's first Spark job reports 0 of 0: wait for the job.
        reported: dict[str, Any] | None = api.get(long["queryId"]).get("progress")
        return reported if reported and reported["stagesTotal"] >= 1 else None

    seen = wait_for(progress, timeout=60, what="progress on GET")
    assert seen["tasksTotal"] >= 1 and seen["stagesTotal"] >= 1
    # the same beats carry the job's figures: the warm statement's outcome, pickup and run time
    found = plugin.store.sessions.get(api.datasource, warm["sessionId"])
    figures = found.doc.metrics if found is not None else None
    assert figures is not None and figures.statements.get("success", 0) >= 1, figures
    assert sum(figures.pickup.counts) >= 1 and sum(figures.run.counts) >= 1
    assert figures.opensearch_calls.get("2xx", 0) > 0
    assert api.cancel(long["queryId"]).status_code == 204


def test_inactive_session_ends_dead_and_a_post_gets_a_new_session_that_sees_its_tables(
    index_server: Any, tmp_path: Path, module_index_url: str, metastore: Metastore
) -> None:
    name = "local" if index_server is not None else "inact"
    catalog = catalog_settings(metastore.home / "warehouse", metastore.uri)
    plugin = e2e_service(module_index_url, tmp_path, name, catalog, inactivity_limit_ms=1_000)
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, plugin.datasources.all()[0].name)
            first, reply = api.run("CREATE TABLE kept USING parquet AS SELECT 42 AS answer")
            assert reply["status"] == "SUCCESS", reply
            sid = first["sessionId"]

            def dead() -> bool:
                session = plugin.store.sessions.get(api.datasource, sid)
                return session is not None and session.doc.state == SessionState.DEAD

            wait_for(dead, timeout=60, what="the idle session to end dead")
            # The new session is a new job: the table the old one made is in the shared catalog.
            again, reply = api.run("SELECT answer FROM kept", sid)
            assert again["sessionId"] != sid
            assert reply["status"] == "SUCCESS" and reply["datarows"] == [[42]], reply
    finally:
        plugin.close()


def _timed_out(reply: dict[str, Any]) -> bool:
    """Whether a statement was ended by its execution or wait timeout."""
    return reply["status"] == "TIMEOUT" or str(reply.get("error", "")).startswith("Statement wait timeout")


def test_execution_timeout_and_wait_timeout(index_server: Any, tmp_path: Path, module_index_url: str) -> None:
    name = "local" if index_server is not None else "tmo"
    plugin = e2e_service(module_index_url, tmp_path, name, query_execution_timeout_s=3, query_wait_timeout_ms=1_500)
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, name)
            warm, _ = api.run("SELECT 1")
            slow = api.submit(SLEEP_10_MIN, warm["sessionId"])
            api.wait_status(slow["queryId"], {"RUNNING"})
            queued = api.submit("SELECT 'late'", warm["sessionId"])  # waits behind the slow one
            timed_out = api.wait_status(slow["queryId"], {"TIMEOUT", "FAILED", "SUCCESS"}, timeout=60)
            assert timed_out["status"] == "TIMEOUT" and "timed out after 3 s" in timed_out["error"]
            late = api.wait_status(queued["queryId"], {"FAILED", "SUCCESS"}, timeout=60)
            assert late["status"] == "FAILED" and late["error"].startswith("Statement wait timeout"), late
            # The session goes on: the Spark work of the timed-out statement was stopped. Under
            # load, the job may still be stopping it when the next statement comes, or the next
            # statement may itself take longer than these short limits, which then end it too (as
            # they should): the session answers one of a few more.
            replies = []
            for _ in range(4):
                _, after = api.run("SELECT 'next'", warm["sessionId"], timeout=60)
                replies.append(after)
                if not _timed_out(after):
                    break
            assert replies[-1].get("datarows") == [["next"]], replies
    finally:
        plugin.close()
