"""POST refuses what a datasource's validation policy denies: a 400 in the reference's error shape
and words, before anything is written to the index or any job is started."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from async_query.api import BASE, create_app
from async_query.datasources import Datasource
from async_query.runtime import Plugin
from query_core.ids import request_index
from query_core.store import Query, Store
from tests.conftest import PluginFactory
from tests.node import CLIENT_SSL
from tests.support import RecordingLauncher, serve_http

WAREHOUSE = "file:/srv/var/warehouse"
CHECKPOINTS = "/srv/var/checkpoints"

#: The statements the issue names, each with the words it is refused in.
REFUSED = [
    ("sql", "SELECT * FROM text.`/etc/hostname`", "File is not allowed."),
    (
        "sql",
        "SELECT reflect('java.lang.System', 'getProperty', 'user.name')",
        "Misc functions (reflect) is not allowed.",
    ),
    ("sql", "SELECT java_method('java.lang.System', 'getenv', 'HOME')", "Misc functions (java_method) is not allowed."),
    ("sql", "SELECT TRANSFORM(id) USING 'cat' AS (x) FROM range(3)", "TRANSFORM is not allowed."),
    ("sql", "ADD JAR /tmp/evil.jar", "Resource management statements is not allowed."),
    ("sql", "ADD FILE /tmp/evil.py", "Resource management statements is not allowed."),
    ("sql", "ADD ARCHIVE /tmp/evil.zip", "Resource management statements is not allowed."),
    ("sql", "CREATE FUNCTION evil AS 'com.example.Evil' USING JAR '/tmp/e.jar'", "CREATE FUNCTION is not allowed."),
    (
        "sql",
        "CREATE TABLE t (a INT) USING parquet LOCATION '/etc'",
        "LOCATION outside the warehouse (/etc) is not allowed.",
    ),
    ("sql", "INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT 1", "INSERT OVERWRITE DIRECTORY is not allowed."),
    ("sql", "INSERT OVERWRITE LOCAL DIRECTORY '/tmp/out' SELECT 1", "INSERT OVERWRITE DIRECTORY is not allowed."),
    (
        "sql",
        "SET spark.sql.catalog.evil=com.example.Evil",
        "SET/RESET of a protected key (spark.sql.catalog.evil) is not allowed.",
    ),
    (
        "sql",
        "CREATE INDEX ix ON t (a) WITH (auto_refresh = true, checkpoint_location = '/home')",
        "checkpoint_location outside the checkpoint root (/home) is not allowed.",
    ),
    (
        "sql",
        "CREATE MATERIALIZED VIEW mv AS SELECT reflect('java.lang.Thread', 'sleep', 1) FROM t",
        "Misc functions (reflect) is not allowed.",
    ),
    ("ppl", "source = text.`/etc/hostname`", "File is not allowed."),
    # The allow lists of the local profile.
    (
        "sql",
        "CREATE TEMPORARY VIEW v USING jdbc OPTIONS (url 'jdbc:derby:memory:x;create=true', dbtable 't')",
        "Data source provider (jdbc) is not allowed.",
    ),
    (
        "sql",
        "CREATE TABLE t USING org.apache.spark.sql.execution.datasources.jdbc.DefaultSource OPTIONS (url 'x')",
        "Data source provider (org.apache.spark.sql.execution.datasources.jdbc.DefaultSource) is not allowed.",
    ),
    (
        "sql",
        "CREATE TEMPORARY VIEW v USING text OPTIONS (PATH '/etc/' 'hostname')",
        "LOCATION outside the warehouse (/etc/hostname) is not allowed.",
    ),
    (
        "sql",
        "CREATE TABLE t (a INT) USING parquet LOCATION '/srv/var/warehouse/x?/../../../outside'",
        "LOCATION outside the warehouse (/srv/var/warehouse/x?/../../../outside) is not allowed.",
    ),
    (
        "sql",
        'CREATE SKIPPING INDEX ON t (a VALUE_SET) WITH (extra_options = \'{"sink": {"host": "x"}}\')',
        "Flint index option (extra_options sink: host) is not allowed.",
    ),
    (
        "sql",
        "SET spark.datasource.flint.host",
        "SET/RESET of a protected key (spark.datasource.flint.host) is not allowed.",
    ),
    # Found by an attack: a NUL in a location was a 500 (``embedded null byte``), and a Flint
    # index of 900 shards filled the index cluster's shards for everyone.
    (
        "sql",
        "CREATE TABLE t (id INT) USING parquet LOCATION 'file:///srv/var/warehouse/t\\u0000x'",
        "LOCATION outside the warehouse (file:///srv/var/warehouse/t\\u0000x, which holds a control character)"
        " is not allowed.",
    ),
    (
        "sql",
        "CREATE INDEX c ON t (id) WITH (auto_refresh = true, checkpoint_location = '/srv/var/checkpoints/x\\u0000')",
        "checkpoint_location outside the checkpoint root (/srv/var/checkpoints/x\\u0000, which holds a control"
        " character) is not allowed.",
    ),
    (
        "sql",
        'CREATE INDEX ci1 ON t (id) WITH (index_settings = \'{"number_of_shards": 900}\')',
        "Flint index option (index_settings: number_of_shards 900, not 1 to 5) is not allowed.",
    ),
    (
        "sql",
        'CREATE INDEX ci1 ON t (id) WITH (index_settings = \'{"refresh_interval": "1ms"}\')',
        'Flint index option (index_settings: refresh_interval "1ms", not -1 or at least 1s) is not allowed.',
    ),
]


@pytest.fixture
def recording() -> RecordingLauncher:
    launcher = RecordingLauncher()
    launcher.warehouse_root = WAREHOUSE
    launcher.checkpoint_root = CHECKPOINTS
    return launcher


@pytest.fixture
def plugin(make_plugin: PluginFactory, recording: RecordingLauncher) -> Plugin:
    return make_plugin(launcher=recording)


@pytest.fixture
def client(plugin: Plugin) -> Iterator[httpx.Client]:
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        yield c


def documents(store: Store, ds: str) -> list[str]:
    """Every document id of the datasource's request index (after a refresh)."""
    store.index.refresh(request_index(ds))
    return [found.doc_id for found in store.index.search(request_index(ds), Query(size=100))]


@pytest.mark.parametrize(("lang", "query", "message"), REFUSED)
def test_a_denied_statement_is_a_400_and_nothing_is_written_or_started(
    client: httpx.Client, store: Store, recording: RecordingLauncher, ds_name: str, lang: str, query: str, message: str
) -> None:
    resp = client.post(BASE, json={"datasource": ds_name, "lang": lang, "query": query})
    assert resp.status_code == 400
    assert resp.json() == {
        "status": 400,
        "error": {"type": "IllegalArgumentException", "reason": "Invalid Request", "details": message},
    }
    assert recording.started == []
    assert documents(store, ds_name) == []


@pytest.mark.parametrize(
    ("lang", "query", "message"),
    [
        ("sql", "SELECT " + "(" * 2_000 + "1" + ")" * 2_000, "nested too deeply"),
        ("sql", "SELECT " + " + ".join(["1"] * 2_000), "nested too deeply"),
        ("sql", "SELECT 1 " + "/*" * 200 + " x " + "*/" * 200, "nested too deeply"),
        ("ppl", "source = t | eval a = " + " + ".join(["1"] * 1_000), "nested too deeply"),
        ("ppl", "source = t | where " + " or ".join(["a = 1"] * 500), "nested too deeply"),
        ("sql", "SELECT '" + "x" * 3_000 + "'", "longer than 2048 characters"),
        # Past the budget on reading it: the attack's nested comments, a 880 KB IN list.
        ("sql", "SELECT 1 " + "/*" * 2_000 + " x " + "*/" * 2_000, "costs too much to read"),
        ("sql", "SELECT * FROM t WHERE a IN (" + ",".join(["1"] * 440_000) + ")", "costs too much to read"),
        ("ppl", "source = t | where a in (" + ",".join(["1"] * 10_000) + ")", "tokens allowed for PPL"),
    ],
)
def test_a_statement_past_its_limits_is_a_400_before_any_parser_reads_it(
    make_plugin: PluginFactory, store: Store, ds_name: str, lang: str, query: str, message: str
) -> None:
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher=launcher, max_query_chars=2_048 if "longer" in message else 1_000_000)
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        resp = c.post(BASE, json={"datasource": ds_name, "lang": lang, "query": query})
    assert resp.status_code == 400
    body = resp.json()
    assert (body["status"], body["error"]["type"], body["error"]["reason"]) == (
        400,
        "IllegalArgumentException",
        "Invalid Request",
    )
    assert message in body["error"]["details"]
    assert launcher.started == []
    assert documents(store, ds_name) == []


def test_an_allowed_statement_is_accepted(
    client: httpx.Client, store: Store, recording: RecordingLauncher, ds_name: str
) -> None:
    resp = client.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT count(*) FROM range(10)"})
    assert resp.status_code == 201
    assert len(recording.started) == 1
    conf = recording.started[0].conf
    assert "MISC_FUNCTIONS" in conf["spark.flint.validation.deniedElements"].split(",")
    assert conf["spark.flint.validation.warehouseRoot"] == WAREHOUSE
    assert resp.json()["queryId"] in documents(store, ds_name)


def test_a_loosened_datasource_accepts_what_it_allows(make_plugin: PluginFactory, ds_name: str) -> None:
    loose = Datasource(name=ds_name, properties={"validation.allow": "MISC_FUNCTIONS"})
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher=launcher, datasources=[loose])
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=CLIENT_SSL) as c:
        ok = c.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "SELECT current_database()"})
        refused = c.post(BASE, json={"datasource": ds_name, "lang": "sql", "query": "ADD JAR /tmp/x.jar"})
    assert ok.status_code == 201
    assert refused.status_code == 400
    assert "MISC_FUNCTIONS" not in launcher.started[0].conf["spark.flint.validation.deniedElements"].split(",")


def test_an_unknown_element_in_the_property_is_a_400_at_creation(client: httpx.Client) -> None:
    resp = client.post(
        "/_plugins/_query/_datasources",
        json={"name": "strict", "connector": "local", "properties": {"validation.allow": "REFLECT"}},
    )
    assert resp.status_code == 400
    assert "unknown grammar element 'REFLECT'" in resp.json()["error"]["details"]
