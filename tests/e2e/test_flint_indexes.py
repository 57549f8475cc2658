"""Flint indexes through the REST API alone, with real spark-submit jobs and the shared catalog:
each kind is created and refreshed by batch jobs, described and listed in an interactive session,
dropped by the plugin and vacuumed by a batch job; a REFRESH is cancelled mid-run, and a batch job
is killed with ``kill -9`` mid-refresh."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from async_query.embedded.metastore import Metastore
from async_query.runtime import Plugin
from query_core.flint.naming import latest_id
from query_core.states import FlintIndexState
from tests.e2e.conftest import TERMINAL, Api, shared_catalog_service
from tests.faults.procs import group_members, job_pid
from tests.support import wait_for

pytestmark = pytest.mark.e2e
DS = "local"
SKIPPING = "flint_local_default_visits_skipping_index"
COVERING = "flint_local_default_visits_by_page_index"
MV = "flint_local_default_per_page"
SLOW_MV = "flint_local_default_slow_view"


@pytest.fixture(scope="module")
def plugin(
    metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, Plugin]]:
    tmp = tmp_path_factory.mktemp("flint")
    # The skipping index is checked against input_file_name(), a misc function: this datasource allows it.
    allow = {"validation.allow": "MISC_FUNCTIONS"}
    with shared_catalog_service(metastore, module_index_url, tmp, DS, properties=allow) as served:
        yield served


@pytest.fixture(scope="module")
def api(plugin: tuple[Api, Plugin]) -> Api:
    return plugin[0]


def ok(api: Api, query: str, session_id: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    submitted, reply = api.run(query, session_id, timeout=180)
    assert reply["status"] == "SUCCESS", (query, reply)
    return submitted, reply


VISITS = [("/home", "eu", 3), ("/home", "us", 5), ("/cart", "eu", 1), ("/pay", "us", 2), ("/cart", "us", 4)]


@pytest.fixture(scope="module")
def session(api: Api) -> str:
    """An interactive session that made the source tables (two files in ``visits``)."""
    submitted, _ = ok(api, "CREATE TABLE visits (page STRING, region STRING, n BIGINT) USING parquet")
    sid = str(submitted["sessionId"])
    values = [f"('{p}', '{r}', {n})" for p, r, n in VISITS]
    ok(api, f"INSERT INTO visits VALUES {', '.join(values[:3])}", sid)
    ok(api, f"INSERT INTO visits VALUES {', '.join(values[3:])}", sid)
    ok(api, "CREATE TABLE numbers USING parquet AS SELECT id FROM range(40)", sid)
    return sid


def batch(api: Api, *queries: str) -> list[dict[str, Any]]:
    """Run batch queries, all at once (each its own job): their replies carry no session id;
    returns their final GETs."""
    submitted = [api.submit(query) for query in queries]
    assert all(set(s) == {"queryId"} for s in submitted), submitted
    replies = [api.wait_status(s["queryId"], TERMINAL, timeout=180) for s in submitted]
    for query, reply in zip(queries, replies, strict=True):
        assert reply["status"] == "SUCCESS", (query, reply)
    return replies


def docs(plugin: Plugin, index: str) -> list[dict[str, Any]]:
    return [source for _, source in plugin.store.admin.scan(index)]


def index_state(plugin: Plugin, index: str) -> FlintIndexState | None:
    found = plugin.store.index_states.get(DS, latest_id(index))
    return found.doc.state if found is not None else None


def listed(api: Api, session: str) -> dict[str, list[Any]]:
    _, reply = ok(api, f"SHOW FLINT INDEXES EXTENDED IN {DS}", session)
    return {row[0]: row for row in reply["datarows"]}


def test_each_index_kind_lives_its_whole_life_through_the_api(
    api: Api, plugin: tuple[Api, Plugin], session: str
) -> None:
    svc = plugin[1]
    batch(
        api,
        f"CREATE SKIPPING INDEX ON {DS}.default.visits (page VALUE_SET, n MIN_MAX)",
        "CREATE INDEX by_page ON visits (page, n) WITH (id_expression = \"concat(page, '/', n)\")",
        "CREATE MATERIALIZED VIEW per_page AS SELECT page, sum(n) AS total FROM visits GROUP BY page",
    )
    for index in (SKIPPING, COVERING, MV):
        assert index_state(svc, index) is FlintIndexState.ACTIVE
        assert docs(svc, index) == []

    batch(
        api,
        f"REFRESH SKIPPING INDEX ON {DS}.default.visits",
        "REFRESH INDEX by_page ON visits",
        "REFRESH MATERIALIZED VIEW per_page",
    )

    # One document per source file, checked against the files as Spark reads them.
    _, files = ok(
        api,
        "SELECT input_file_name() AS f, sort_array(collect_set(page)), min(n), max(n) FROM visits GROUP BY 1",
        session,
    )
    expected = {f: (pages, low, high) for f, pages, low, high in files["datarows"]}
    skipping = dict(svc.store.admin.scan(SKIPPING))
    assert len(skipping) == len(expected) >= 2
    for doc_id, doc in skipping.items():
        assert doc_id == hashlib.sha1(doc["file_path"].encode()).hexdigest()
        assert (sorted(doc["page"]), doc["MinMax_n_0"], doc["MinMax_n_1"]) == expected[doc["file_path"]]
    assert sorted((d["page"], d["n"]) for d in docs(svc, COVERING)) == sorted((p, n) for p, _, n in VISITS)
    assert {doc_id for doc_id, _ in svc.store.admin.scan(COVERING)} == {f"{p}/{n}" for p, _, n in VISITS}
    assert sorted((d["page"], d["total"]) for d in docs(svc, MV)) == [("/cart", 5), ("/home", 8), ("/pay", 2)]

    # Queries use them (docs/acceleration.md): the covering index answers what it covers, the
    # skipping index keeps the one file whose range holds n = 5; SET turns both off.
    _, covered = ok(api, "SELECT page, n FROM visits WHERE n > 3 ORDER BY n", session)
    assert covered["datarows"] == [["/cart", 4], ["/home", 5]]
    _, explained = ok(api, "EXPLAIN SELECT page, n FROM visits WHERE n > 3", session)
    assert f"{COVERING}: covering index read instead of {DS}.default.visits" in explained["datarows"][0][0]
    _, pruned = ok(api, "SELECT * FROM visits WHERE n = 5", session)
    assert pruned["datarows"] == [["/home", "us", 5]]
    _, explained = ok(api, "EXPLAIN SELECT * FROM visits WHERE n = 5", session)
    assert f"{SKIPPING}: skipping index, kept 1 of {len(expected)} files" in explained["datarows"][0][0]
    ok(api, "SET spark.flint.optimizer.enabled = false", session)
    _, explained = ok(api, "EXPLAIN SELECT * FROM visits WHERE n = 5", session)
    assert "Flint" not in explained["datarows"][0][0]
    ok(api, "SET spark.flint.optimizer.enabled = true", session)

    _, described = ok(api, f"DESC SKIPPING INDEX ON {DS}.default.visits", session)
    assert described["datarows"] == [["page", "string", "VALUE_SET"], ["n", "bigint", "MIN_MAX"]]
    _, described = ok(api, "DESCRIBE MATERIALIZED VIEW per_page", session)
    assert described["datarows"] == [["page", "string"], ["total", "bigint"]]
    _, shown = ok(api, f"SHOW INDEXES ON {DS}.default.visits", session)
    assert shown["datarows"] == [["by_page"]]
    _, shown = ok(api, f"SHOW MATERIALIZED VIEWS IN {DS}.default", session)
    assert shown["datarows"] == [["per_page"]]
    rows = listed(api, session)
    assert rows[SKIPPING] == [SKIPPING, "skipping", "default", "visits", None, False, "active", *[None] * 6]
    assert rows[COVERING][:7] == [COVERING, "covering", "default", "visits", "by_page", False, "active"]
    assert rows[MV][:7] == [MV, "mv", "default", None, "per_page", False, "active"]

    for drop in (
        f"DROP SKIPPING INDEX ON {DS}.default.visits",
        "DROP INDEX by_page ON visits",
        "DROP MATERIALIZED VIEW per_page",
    ):
        submitted = api.submit(drop)
        assert set(submitted) == {"queryId"}
        dml = api.wait_status(submitted["queryId"], TERMINAL, timeout=60)
        assert dml["status"] == "SUCCESS", dml
        assert api.cancel(submitted["queryId"]).status_code == 400  # index DML cannot be cancelled
    assert {listed(api, session)[i][6] for i in (SKIPPING, COVERING, MV)} == {"deleted"}

    batch(
        api,
        f"VACUUM SKIPPING INDEX ON {DS}.default.visits",
        "VACUUM INDEX by_page ON visits",
        "VACUUM MATERIALIZED VIEW per_page",
    )
    for index in (SKIPPING, COVERING, MV):
        assert not svc.store.admin.index_exists(index)
        assert index_state(svc, index) is None
    assert not set(listed(api, session)) & {SKIPPING, COVERING, MV}


def test_reference_errors_end_the_batch_query_failed(api: Api, session: str) -> None:
    submitted = api.submit("REFRESH INDEX nope ON visits")
    reply = api.wait_status(submitted["queryId"], TERMINAL, timeout=180)
    assert reply["status"] == "FAILED"
    assert "Index flint_local_default_visits_nope_index doesn't exist" in reply["error"]


def slow_refresh(api: Api, plugin: Plugin) -> str:
    """A materialized view whose refresh takes a long while (each row counts a cross join with a
    large range); returns the REFRESH's query id once its statement is running."""
    if index_state(plugin, SLOW_MV) is None:
        batch(
            api,
            "CREATE MATERIALIZED VIEW slow_view AS "
            "SELECT n.id, count(*) AS z FROM numbers n, range(1000000000) r GROUP BY n.id",
        )
    submitted = api.submit("REFRESH MATERIALIZED VIEW slow_view")
    query_id = str(submitted["queryId"])
    api.wait_status(query_id, {"RUNNING"}, timeout=180)
    wait_for(
        lambda: index_state(plugin, SLOW_MV) is FlintIndexState.REFRESHING,
        timeout=60,
        what="the view to be refreshing",
    )
    return query_id


def test_a_refresh_cancelled_mid_run_returns_the_index_to_active(
    api: Api, plugin: tuple[Api, Plugin], session: str
) -> None:
    svc = plugin[1]
    query_id = slow_refresh(api, svc)
    assert api.cancel(query_id).status_code == 204
    assert api.wait_status(query_id, TERMINAL, timeout=30)["status"] == "CANCELLED"

    def back_to_active() -> bool:
        # The job rolls the index back as it stops; a job that cannot within the cancel's deadline
        # is stopped by the service, and the housekeeping sweep rolls back what it left.
        if index_state(svc, SLOW_MV) is FlintIndexState.ACTIVE:
            return True
        svc.housekeeper.run_once()
        return index_state(svc, SLOW_MV) is FlintIndexState.ACTIVE

    wait_for(back_to_active, timeout=120, interval=1, what="the view back to active")
    statement = svc.store.statements.get(DS, query_id)
    assert statement is not None
    session_doc = svc.store.sessions.get(DS, statement.doc.session_id)
    assert session_doc is not None
    pid = job_pid(svc.settings.data_dir, session_doc.doc.job_id)
    wait_for(lambda: not group_members(pid), timeout=60, what="the cancelled job to stop")


def test_a_batch_job_killed_mid_refresh_fails_its_query_and_the_index_recovers(
    api: Api, plugin: tuple[Api, Plugin], session: str
) -> None:
    svc = plugin[1]
    query_id = slow_refresh(api, svc)
    statement = svc.store.statements.get(DS, query_id)
    assert statement is not None
    session_doc = svc.store.sessions.get(DS, statement.doc.session_id)
    assert session_doc is not None
    pid = job_pid(svc.settings.data_dir, session_doc.doc.job_id)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not group_members(pid), timeout=15, what="the killed job's processes to go")

    reply = api.wait_status(query_id, TERMINAL, timeout=120)
    assert reply["status"] == "FAILED"

    def repaired() -> bool:
        svc.housekeeper.run_once()
        return index_state(svc, SLOW_MV) is FlintIndexState.ACTIVE

    wait_for(repaired, timeout=120, interval=1, what="the housekeeping sweep to repair the view")
    state = svc.store.index_states.get(DS, latest_id(SLOW_MV))
    assert state is not None and session_doc.doc.job_id in state.doc.error
