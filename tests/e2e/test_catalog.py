"""One catalog per datasource, shared by all its sessions: the embedded metastore, named by the
datasource (``<ds>.<db>.<table>``), browsed as OpenSearch Dashboards browses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from async_query.embedded.metastore import Metastore
from tests.e2e.conftest import Api, shared_catalog_api

pytestmark = pytest.mark.e2e
DS = "local"


@pytest.fixture(scope="module")
def api(metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with shared_catalog_api(metastore, module_index_url, tmp_path_factory.mktemp("catalog"), DS) as api:
        yield api


def ok(api: Api, query: str, session_id: str | None = None) -> tuple[str, dict[str, Any]]:
    submitted, reply = api.run(query, session_id)
    assert reply["status"] == "SUCCESS", (query, reply)
    return submitted["sessionId"], reply


@pytest.fixture(scope="module")
def tables(api: Api) -> str:
    """Tables of several formats, a partitioned one, a view and a second database, made in one
    session; returns that session's id."""
    session, _ = ok(
        api, "CREATE TABLE sales (id INT, amount DOUBLE, region STRING) USING parquet PARTITIONED BY (region)"
    )
    for query in [
        "INSERT INTO sales VALUES (1, 10.5, 'eu'), (2, 20.0, 'us'), (3, 7.25, 'eu')",
        "CREATE TABLE events_csv (id INT, name STRING) USING csv",
        "INSERT INTO events_csv VALUES (1, 'start'), (2, 'stop')",
        "CREATE VIEW eu_sales AS SELECT id, amount FROM sales WHERE region = 'eu'",
        "CREATE DATABASE IF NOT EXISTS local.lake",
        "CREATE TABLE local.lake.clicks (url STRING, n BIGINT) USING json",
        "INSERT INTO local.lake.clicks VALUES ('/a', 3)",
    ]:
        ok(api, query, session)
    return session


def test_another_session_sees_the_tables_by_their_datasource_name(api: Api, tables: str) -> None:
    other, reply = ok(api, "SELECT id, amount, region FROM local.default.sales ORDER BY id")
    assert other != tables
    assert reply["datarows"] == [[1, 10.5, "eu"], [2, 20.0, "us"], [3, 7.25, "eu"]]
    _, reply = ok(api, "SELECT * FROM events_csv ORDER BY id", other)  # unqualified: the datasource's default db
    assert reply["datarows"] == [[1, "start"], [2, "stop"]]
    _, reply = ok(api, "SELECT sum(amount) FROM local.default.eu_sales", other)
    assert reply["datarows"] == [[17.75]]
    _, reply = ok(api, "SELECT url, n FROM lake.clicks", other)
    assert reply["datarows"] == [["/a", 3]]
    _, reply = ok(api, "SHOW PARTITIONS local.default.sales", other)
    assert sorted(r[0] for r in reply["datarows"]) == ["region=eu", "region=us"]


def test_dashboards_browsing_statements(api: Api, tables: str) -> None:
    _, schemas = ok(api, "SHOW SCHEMAS IN local", tables)
    assert [c["name"] for c in schemas["schema"]] == ["namespace"]
    assert {"default", "lake"} <= {r[0] for r in schemas["datarows"]}

    _, listed = ok(api, "SHOW TABLE EXTENDED IN local.default LIKE '*'", tables)
    assert [c["name"] for c in listed["schema"]] == ["namespace", "tableName", "isTemporary", "information"]
    assert {"sales", "events_csv", "eu_sales"} <= {r[1] for r in listed["datarows"]}

    _, described = ok(api, "DESC local.default.sales", tables)
    assert [c["name"] for c in described["schema"]] == ["col_name", "data_type", "comment"]
    assert [r[:2] for r in described["datarows"][:3]] == [["id", "int"], ["amount", "double"], ["region", "string"]]

    _, flint = ok(api, "SHOW FLINT INDEX IN local", tables)
    assert [c["name"] for c in flint["schema"]] == [
        "flint_index_name",
        "kind",
        "database",
        "table",
        "index_name",
        "auto_refresh",
        "status",
    ]
    assert flint["datarows"] == []


def test_a_catalog_that_is_not_the_datasource_is_a_clear_error(api: Api, tables: str) -> None:
    _, reply = api.run("SELECT * FROM lake2.default.sales", tables)
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Fail to analyze query. Cause: catalog 'lake2'")
    assert "'local'" in reply["error"]
