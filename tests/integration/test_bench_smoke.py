"""The bench's sections that need no Spark, with tiny counts, so that the bench code cannot rot.

They run against a real HTTP service (``make_plugin`` + ``serve_http``) on the test's index.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from async_query.datasources import Datasource
from async_query.embedded.index import EmbeddedIndex
from bench.api_latency import ApiPlan, run_api_latency
from bench.httpload import run_load
from bench.index_node import node_pids, node_resident
from bench.report import Figure, Report, Target
from bench.scale import ScalePlan, run_scale
from bench.sim import SimulatedSessions, StandInJobs, declared_dead, doc_version, index_writes
from bench.stats import percentile, summary
from query_core.config import OpenSearchConfig
from query_core.ids import request_index
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.node import index_env
from tests.support import RecordingLauncher, serve_http

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier


def _by_name(figures: list[Figure]) -> dict[str, Figure]:
    return {f.name: f for f in figures}


def test_api_latency_section(make_plugin: PluginFactory, store: Store, datasource: Datasource) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher=launcher)
    plan = ApiPlan(posts=6, get_seconds=0.3, warmup_seconds=0.05, concurrency=(1, 2), sessions=2)
    with serve_http(create_app(plugin)) as url:
        figures, details = run_api_latency(url, store, datasource.name, datasource.results, plan)
    named = _by_name(figures)
    assert named["POST p50 (1 client)"].value is not None and named["POST p50 (1 client)"].value > 0
    assert named["POST p50 (1 client)"].target == Target("<=", 10)
    assert named["GET running, 2 clients: throughput"].target == Target(">=", 1500)
    assert named["GET running, 1 client: p50"].target == Target("<=", 2)
    # The floor: the same statements read straight from the index by id, with its credential.
    for clients in ("1 client", "2 clients"):
        floor = named[f"bare GET by id on the index, {clients}: p50"].value
        assert floor is not None and floor > 0
        multiple = named[f"GET running, {clients}: p50 / bare GET by id p50"].value
        assert multiple is not None and multiple > 0
    assert details["bare_get_by_id_2_clients"]["statuses"] == {"200": details["bare_get_by_id_2_clients"]["latency_ms"]["n"]}
    assert details["post"]["latency_ms"]["n"] == 6
    assert details["get_running_2_clients"]["statuses"] == {"200": details["get_running_2_clients"]["latency_ms"]["n"]}
    assert details["get_finished_8_clients"]["latency_ms"]["n"] > 0
    # Every POST went into a simulated session: no job was launched.
    assert launcher.started == []
    # The simulated sessions were ended, and the search the session limit uses sees that.
    assert store.sessions.find(datasource.name, [SessionState.RUNNING]) == []


def test_scale_section(make_plugin: PluginFactory, store: Store, datasource: Datasource, tmp_path: Path) -> None:
    plugin = make_plugin()
    plan = ScalePlan(sessions=12, interval_ms=400, clients=2, seconds=0.8, writers=2)
    jobs = tmp_path / "jobs"
    with serve_http(create_app(plugin)) as url:
        figures, details = run_scale(url, store, datasource.name, plan, jobs_dir=jobs)
    named = _by_name(figures)
    assert named["GET p99 with 12 live sessions"].target == Target("<", 50)
    # No simulated session was declared dead, none of their statements failed: flagged if so.
    dead = named["simulated sessions declared dead (12)"]
    assert (dead.value, dead.target, dead.met) == (0, Target("==", 0), True)
    assert named["polled statements FAILED (12 sessions)"].met is True
    assert details["sessions_declared_dead"] == 0 and details["statements_failed"] == 0
    assert named["effective heartbeat interval per session"].value is not None
    # The stand-in jobs' pid files are gone with the section.
    assert list(jobs.glob("*.pid")) == []
    assert details["get_reply_statuses"] == {"RUNNING": details["get"]["latency_ms"]["n"]}
    floor = details["bare_get_by_id"]
    assert floor["statuses"] == {"200": floor["latency_ms"]["n"]} and floor["latency_ms"]["n"] > 0
    assert named["GET p99 / bare GET by id p99 with 12 live sessions"].value is not None
    # 12 sessions beating every 0.4 s: about 30 writes/s (the bench's writers must keep up).
    assert 10 < details["heartbeat_writes_per_s_writers"] < 45
    server = details["index_writes_per_s_server"]
    assert server is None or server >= details["heartbeat_writes_per_s_writers"] * 0.8


def test_getjobrun_section(store: Store, opensearch_config: OpenSearchConfig, tmp_path: Path) -> None:
    pytest.importorskip("moto")
    pytest.importorskip("async_query.launcher.emr")
    from bench.emr import EmrPlan, run_getjobrun

    plan = EmrPlan(gets=20, sessions=2, batch_queries=3, streaming_queries=2, streaming_heartbeat_ms=1_000)
    figures, details = run_getjobrun(store, opensearch_config, tmp_path, plan)
    assert details["start_job_run_calls"] == 2
    assert details["product_healthy"]["get_job_run"] == 0
    assert details["product_healthy"]["statuses"] == {"RUNNING": 20}
    assert details["reference_style"]["get_job_run"] == 20
    # Stale sessions: one coalesced call confirms each death, however many GETs ask.
    assert details["product_stale"]["get_job_run"] == 2
    assert details["product_stale"]["statements_failed_after"] == 2
    # Batch queries: a job each; GETs of running ones read documents only (the reference policy
    # asks on every GET until the result exists); GETs of finished ones cost nothing in either.
    batch = details["batch"]
    assert batch["start_job_run_calls"] == 3
    assert batch["running_product"] == {"gets": 20, "get_job_run": 0, "statuses": {"RUNNING": 20}}
    assert batch["running_reference"] == {"gets": 20, "get_job_run": 20, "statuses": {"RUNNING": 20}}
    assert batch["finished_product"] == {"gets": 20, "get_job_run": 0, "statuses": {"SUCCESS": 20}}
    assert batch["finished_reference"] == {"gets": 20, "get_job_run": 0, "statuses": {"SUCCESS": 20}}
    named = _by_name(figures)
    assert named["GetJobRun per 1,000 GETs, product, running batch queries"].value == 0
    assert named["GetJobRun per 1,000 GETs, product, running batch queries"].target == Target("==", 0)
    assert named["GetJobRun per 1,000 GETs, reference policy, running batch queries"].value == 1000
    assert named["GetJobRun per 1,000 GETs, reference policy, finished batch queries"].value == 0
    assert _by_name(figures)["GetJobRun per 1,000 GETs, product, healthy sessions"].met is True
    # Streaming queries: a job each, named after its index; GETs over their whole life read
    # documents only; the reference policy asks until the result exists (waiting and running).
    streaming = details["streaming"]
    assert streaming["start_job_run_calls"] == 2 and streaming["heartbeat_interval_ms"] == 1_000
    assert streaming["job_names"] == [
        f"async-query:streaming:flint_benchemr_default_bench_stream_{i}_pages_index" for i in range(2)
    ]
    phases = streaming["phases"]
    assert {phase: phases[phase]["product"] for phase in phases} == {
        "waiting": {"gets": 6, "get_job_run": 0, "statuses": {"WAITING": 6}},
        "running": {"gets": 6, "get_job_run": 0, "statuses": {"RUNNING": 6}},
        "streaming": {"gets": 8, "get_job_run": 0, "statuses": {"SUCCESS": 8}},
    }
    assert [phases[phase]["reference"]["get_job_run"] for phase in phases] == [6, 6, 0]
    assert streaming["reported_batches"] and all(batches > 0 for batches in streaming["reported_batches"])
    assert named["GetJobRun per 1,000 GETs, product, streaming queries"].met is True
    assert named["GetJobRun per 1,000 GETs, reference policy, streaming queries"].value == 600
    # The streams were stopped: no session of the section is left running.
    assert all(
        (session := store.sessions.get("benchemr", sid)) is not None and session.doc.state == SessionState.DEAD
        for sid in streaming["session_ids"]
    )


def test_the_nodes_resident_memory_is_read(index_server: EmbeddedIndex | None) -> None:
    """bench.run reports the node's memory from its JVM's ``/proc`` status (found by its
    directory, whoever it runs as)."""
    if index_server is None:
        pytest.skip("OPENSEARCH_URL names the cluster: no node of the tests' own")
    [pid] = node_pids(index_server.directory)
    memory = node_resident(index_server.directory)
    assert memory is not None and pid > 0
    rss, peak = memory
    assert 100 < rss <= peak  # MB: a JVM with a heap of hundreds of MB


def test_stand_in_jobs_are_running_to_the_local_launcher(tmp_path: Path) -> None:
    from async_query.launcher.base import JobRunState
    from async_query.launcher.local import LocalLauncher

    launcher = LocalLauncher(tmp_path / "service", "bench", spark_submit="/bin/false")
    jobs = [f"bench-scale-{i}" for i in range(3)]
    with StandInJobs(tmp_path / "service" / "jobs", jobs):
        assert [launcher.describe(j).state for j in jobs] == [JobRunState.RUNNING] * 3
        assert launcher.describe("bench-other").state == JobRunState.UNKNOWN
    assert [launcher.describe(j).state for j in jobs] == [JobRunState.UNKNOWN] * 3


def test_declared_dead_counts_ended_sessions(store: Store, datasource: Datasource) -> None:
    sim = SimulatedSessions(store, datasource.name, 2)
    sims = sim.create()
    assert declared_dead(store, datasource.name, sims) == (0, 0)
    sim.end()
    assert declared_dead(store, datasource.name, sims) == (2, 0)


def test_simulated_heartbeat_is_one_write(store: Store, datasource: Datasource) -> None:
    sim = SimulatedSessions(store, datasource.name, 1)
    [one] = sim.create()
    index = request_index(datasource.name)
    before = doc_version(store, index, one.session_id)
    writes_before = index_writes(store, index)
    sim.beat(one)
    assert doc_version(store, index, one.session_id) == (before or 0) + 1
    after = index_writes(store, index)
    if writes_before is not None and after is not None:
        assert after - writes_before == 1
    session = store.sessions.get(datasource.name, one.session_id)
    assert session is not None
    assert session.doc.running_statements[0].query_id == one.statement_id
    assert session.doc.heartbeat_interval_millis == 2_000


def test_load_generator_counts_and_hooks(make_plugin: PluginFactory) -> None:
    seen: list[int] = []
    with serve_http(create_app(make_plugin())) as url:
        result = run_load(
            url,
            lambda c, i: ("GET", "/_plugins/_async_query/nope", None),
            3,
            count=4,
            on_reply=lambda c, s, b: seen.append(s),
        )
    assert result.count == 12
    assert result.statuses == {400: 12}
    assert seen == [400] * 12
    assert json.loads(result.samples[400])["error"]["reason"] == "Invalid Request"


def test_percentile_is_nearest_rank() -> None:
    samples = [float(x) for x in range(1, 101)]
    assert percentile(samples, 50) == 50
    assert percentile(samples, 99) == 99
    assert percentile([3.0, 1.0, 2.0], 99) == 3
    assert math.isnan(percentile([], 50))
    assert summary([1.0, 2.0])["p50"] == 1.0


def test_report_table_and_json() -> None:
    report = Report(meta={"quick": True})
    report.add(
        [
            Figure("s", "fast", 4.2, "ms", Target("<", 5)),
            Figure("s", "slow", 612.0, "GET/s", Target(">=", 1500)),
            Figure("s", "info", math.nan, "ms"),
        ]
    )
    report.skipped["emr"] = "not importable"
    lines = report.table().splitlines()
    assert lines[2].split()[-4:] == ["<", "5", "ms", "yes"]
    assert "NO" in lines[3].split()
    assert "n/a" in lines[4]
    assert "(skipped)" in lines[5] and lines[5].endswith("not importable")
    data = json.loads(json.dumps(report.as_json()))
    assert [f["met"] for f in data["figures"]] == [True, False, None]
    assert data["figures"][2]["value"] is None


@pytest.mark.spark
def test_flint_refresh_bench_prints_its_figures(
    spark: Any, index_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refresh-throughput bench, tiny, on the session-scoped Spark session (from the command
    line it starts and stops a session of its own), against this test's index server."""
    from bench.flint_refresh import main

    table = "default.bench_refresh_events"
    for key, value in index_env(index_url).items():
        monkeypatch.setenv(key, value)
    assert main(["--rows", "1500", "--partitions", "2", "--table", table], spark=spark) == 0
    out = capsys.readouterr().out
    assert "covering index refresh: 1,500 documents" in out
    assert "bulk ceiling (one Python process, batches of 1000): 1,500 documents" in out
    ratio = float(out.split("refresh / ceiling: ")[1].split()[0])
    assert ratio > 0
    assert "skipping index refresh (VALUE_SET, MIN_MAX, BLOOM_FILTER over 2 files): " in out
    assert not spark.catalog.tableExists(table)  # the caller's session is left as it was


@pytest.mark.spark
def test_ppl_translation_bench_on_the_test_session(spark: Any) -> None:
    """The PPL translation bench, tiny, on the session-scoped Spark session (it brings its own
    temp views and drops them)."""
    from bench.ppl import PEOPLE, generate, run_bench

    figures, details = run_bench(spark, count=21, rows=40)
    # One query per command in turn: every command is in a corpus of 21, and every one translates.
    assert {command for command, _ in generate(21)} == set(details["per_command"])
    assert details["kept"] == 21 and details["untranslatable"] == [] and details["rejected_by_spark"] == []
    assert details["spark_sql_is_eager"] is True
    named = _by_name(figures)
    for name in ("translation, translator only p50", "Spark parse+analyze of the translated SQL p99"):
        value = named[name].value
        assert value is not None and value > 0
    needed = named["queries that needed the columns callback"].value
    assert needed is not None
    assert 0 < needed < 21
    assert details["callback_ms"]["n"] == needed
    assert named["translator-only p50 / Spark p50"].unit == "x"
    assert not spark.catalog.tableExists(PEOPLE)


@pytest.mark.spark
def test_ppl_tpch_bench_on_the_test_session(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The TPC-H part of the PPL bench, one round, on data generated once for the run."""
    from bench.ppl import TPCH_SECTION, run_tpch_bench

    figures, details = run_tpch_bench(spark, tmp_path_factory.getbasetemp() / "tpch-0.01", rounds=1)
    assert set(details["per_query"]) == {f"q{n}" for n in range(1, 23)}
    assert all(q["translator_ms"] > 0 and q["sql_analyze_ms"] > 0 for q in details["per_query"].values())
    named = _by_name(figures)
    ratio = named["translator-only p50 / standard SQL p50"]
    assert ratio.section == TPCH_SECTION and ratio.value is not None and ratio.value > 0
    assert not spark.catalog.tableExists("lineitem")


def test_get_cost_counts_the_reads_of_each_path(opensearch_config: OpenSearchConfig) -> None:
    from bench.get_cost import run_get_cost

    named = _by_name(run_get_cost(opensearch_config, gets=50))
    assert named["event loop, session cached: index reads per GET"].value == 1
    assert named["event loop, session read too: index reads per GET"].value == 2
    assert named["finished (reply cache): index reads per GET"].value == 0
    worker = named["worker thread (session cache on): index reads per GET"].value
    assert worker is not None and 1 <= worker <= 2
    for label in ("event loop, session cached", "finished (reply cache)"):
        cpu = named[f"{label}: CPU per GET"].value
        assert cpu is not None and cpu > 0


@pytest.mark.spark
def test_validation_bench_on_the_test_session(spark: Any) -> None:
    """The validation bench, tiny: every statement of its corpus is allowed by both checks (a
    refused one would time a refusal, not the check), and its tables are dropped afterwards."""
    from bench.validation import TABLES, catalog_bench, corpus, hostile_bench, job_bench, post_bench
    from flint_repl_job.guard import StatementGuard
    from query_core.validation import Profile, Verdict, policy_for, validate_query
    from tests import hostile

    statements = corpus(10)
    assert len(set(statements)) == 10 and all(900 <= len(s) <= 1_200 for s in statements)
    warehouse = spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")  # where its tables are
    policy = policy_for({}, Profile.LOCAL, warehouse, warehouse + "-checkpoints")
    filled = [s.replace("{wh}", warehouse) for s in statements]
    assert all(validate_query(policy, "sql", s) is Verdict.ALLOWED for s in filled)
    figures, details = post_bench(statements, warehouse)
    assert details["statements"] == 10 and all(f.value is not None and f.value > 0 for f in figures)
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS default.{TABLES[0]} (id INT, amount DOUBLE, ts TIMESTAMP, region STRING, item STRING) USING parquet"
    )
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.{TABLES[1]} (id INT, name STRING) USING parquet")
    guard = StatementGuard(spark, policy)
    for text in filled:
        guard.check_sql(text)
    figures, details = job_bench(spark, statements, warehouse)
    assert details["guard_ms"]["n"] == 10
    assert not spark.catalog.tableExists(f"default.{TABLES[0]}")
    # What the catalog holds: every statement of the corpus passes it (else a refusal is timed).
    figures, details = catalog_bench(spark, statements, warehouse, partitions=3)
    assert details["catalog_added_ms"]["n"] > 0 and details["partitions"] == 3
    assert all(f.value is not None for f in figures)
    assert not spark.catalog.tableExists(f"default.{TABLES[0]}")
    figures, details = hostile_bench(spark, warehouse, [*hostile.PLANTED[:3], *hostile.ALLOWED[:3]])
    assert details["hostile_prepare_ms"]["n"] == 6 and not spark.catalog.tableExists("default.planted_lake")


def test_the_validation_bench_s_worst_cases_are_what_they_are_named(tmp_path: Path) -> None:
    """The hostile worst cases POST is timed on: those at the budget are within it (allowed by the
    limits: what the budget lets through is what Spark then reads), the attack and the megabyte
    IN list are refused by their cost, and every case is timed for both profiles."""
    from bench.validation import post_worst_bench, worst_cases

    figures, details = post_worst_bench(str(tmp_path / "warehouse"), rounds=1)
    cases = details["post_worst_cases"]
    assert len(cases) == 2 * len(worst_cases())
    for name in worst_cases():
        outcome = cases[f"{name} [LOCAL]"]["outcome"]
        if "at the budget" in name:
            assert outcome == "allowed", (name, outcome)
        if name.startswith(("IN list, ", "comments nested 2,000")):
            assert "costs too much to read" in outcome, (name, outcome)
    assert [f.name for f in figures] == [
        "POST: hostile worst cases, slowest, LOCAL profile",
        "POST: hostile worst cases, slowest, S3GLUE profile",
    ]


def test_the_index_memory_bench_writes_as_a_run_and_reads_a_process_tree(store: Store) -> None:
    """``bench.index_memory``'s parts on the test's index: a run's documents (the statement with
    its text, the result with ``queryText``, the failure's error cut as the job cuts it, the
    usage), the previous mapping, and the resident memory of a process tree."""
    import os

    from bench.index_memory import (
        DATASOURCE,
        MAX_ERROR_CHARS,
        RESULT_INDEX,
        previous_mapping,
        process_tree,
        tree_rss,
        write_like_a_run,
    )

    text = "SELECT " + " ".join(f"w{i}" for i in range(2_000))
    write_like_a_run(store, text, fails=True)
    store.index.refresh(request_index(DATASOURCE))
    [found] = [f for f in store.statements.search(DATASOURCE, size=10) if f.doc.query == text]
    assert found.doc.state.value == "failed" and len(found.doc.error) == MAX_ERROR_CHARS
    result = store.results.get(RESULT_INDEX, found.doc.query_id)
    assert result is not None and result.query_text == text and result.error == found.doc.error
    assert store.usage.held("bench", 60) > 2 * len(text)
    assert previous_mapping("request_index")["mappings"]["properties"]["query"] == {"type": "text"}
    assert previous_mapping("result_index")["mappings"]["properties"]["queryText"] == {"type": "text"}
    assert os.getpid() in process_tree(os.getpid()) and tree_rss(os.getpid()) > 10_000_000
