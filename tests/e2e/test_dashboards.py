"""OpenSearch Dashboards in front of the service, tried as its server would: one endpoint (gateway
mode on the service's port) for the cluster's own calls, the datasource API in the reference's
dialect, browsing a datasource, an acceleration made and listed, and PPL for Discover, with the
bodies Dashboards sends (docs/gateway.md, docs/datasources.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.embedded.metastore import Metastore
from async_query.gateway import Gateway, GatewayLimits, service_credentials
from async_query.launcher.local import catalog_settings
from tests.conftest import REAL_CLUSTER
from tests.e2e.conftest import TERMINAL, e2e_service
from tests.integration.test_datasources import S3_CONNECTION
from tests.node import CLIENT_SSL, index_config
from tests.support import serve_http, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(REAL_CLUSTER), reason="writes a .kibana-style index")]
DS = "/_plugins/_query/_datasources"
Q = "/_plugins/_async_query"
TABLE = "`local`.`default`.`dash_logs`"
#: The acceleration flyout's shape of a skipping index: quoted names, one clause a line.
FLYOUT_SKIPPING_INDEX = f"""CREATE SKIPPING INDEX ON {TABLE}
(
   `status` VALUE_SET
  ) WITH (
auto_refresh = false
)"""


@pytest.fixture(scope="module")
def dashboards(
    metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """What Dashboards' server holds: one endpoint, the service in gateway mode over the index."""
    catalog = catalog_settings(metastore.home / "warehouse", metastore.uri)
    plugin = e2e_service(module_index_url, tmp_path_factory.mktemp("dashboards"), "local", catalog)
    cluster = index_config(module_index_url)
    gateway = Gateway.for_cluster(cluster, service_credentials(cluster), GatewayLimits())
    try:
        with serve_http(create_app(plugin, gateway=gateway)) as url, httpx.Client(base_url=url, timeout=60, verify=CLIENT_SSL) as client:
            yield client
    finally:
        plugin.close()


def run(client: httpx.Client, query: str, lang: str = "sql", session: str | None = None) -> tuple[str, dict[str, Any]]:
    """POST as the workbench does, then poll as it does until the query ends; (session, reply)."""
    body: dict[str, Any] = {"lang": lang, "query": query, "datasource": "local"}
    if session:
        body["sessionId"] = session
    submitted = client.post(Q, json=body)
    assert submitted.status_code == 201, submitted.text
    query_id = submitted.json()["queryId"]

    def ended() -> dict[str, Any] | None:
        reply: dict[str, Any] = client.get(f"{Q}/{query_id}").json()
        return reply if reply["status"] in TERMINAL else None

    reply = wait_for(ended, timeout=180, interval=0.2, what=f"{query[:40]!r} to end")
    assert reply["status"] == "SUCCESS", (query, reply)
    return str(submitted.json().get("sessionId", session or "")), reply


def test_dashboards_works_through_one_endpoint(dashboards: httpx.Client) -> None:
    client = dashboards
    # The cluster's own calls pass through.
    assert client.get("/").json()["version"]["distribution"] == "opensearch"
    assert client.get("/_cluster/health").json()["status"] in ("green", "yellow")
    saved = {"type": "config", "config": {"defaultIndex": "logs"}}
    assert client.put("/.kibana_e2e/_doc/config:1", json=saved).status_code in (200, 201)
    assert client.get("/.kibana_e2e/_doc/config:1").json()["_source"] == saved

    # "Connect to Amazon S3" creates a connection; both it and the embedded default are offered.
    assert client.post(DS, json=S3_CONNECTION).status_code == 201
    offered = {d["name"] for d in client.get(DS).json() if d["connector"] == "S3GLUE" and d["status"] == "ACTIVE"}
    assert {"local", S3_CONNECTION["name"]} <= offered

    # Browsing the datasource, in one session as the workbench keeps.
    session, schemas = run(client, "SHOW SCHEMAS IN `local`")
    assert "default" in {row[0] for row in schemas["datarows"]}
    run(client, f"CREATE TABLE {TABLE} (status INT, path STRING) USING parquet", session=session)
    run(client, f"INSERT INTO {TABLE} VALUES (200, '/'), (404, '/x'), (500, '/y'), (404, '/z')", session=session)

    # An acceleration as the flyout writes it, then listed as the acceleration page lists them.
    _, created = run(client, FLYOUT_SKIPPING_INDEX)
    assert created["datarows"] == []
    _, listed = run(client, "SHOW FLINT INDEX IN `local`", session=session)
    row = {r[0]: r for r in listed["datarows"]}["flint_local_default_dash_logs_skipping_index"]
    assert (row[1], row[3], row[6]) == ("skipping", "dash_logs", "active")

    # Discover's PPL.
    _, counted = run(
        client, "source = local.default.dash_logs | where status >= 400 | stats count() as n by status", "ppl", session
    )
    assert sorted(counted["datarows"]) == [[1, 500], [2, 404]]
