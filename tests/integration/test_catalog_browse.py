"""Browse statements through the service with the catalog read model (docs/catalog.md), on a real
index server and a launcher that records what it starts: answered at once as documents like any
other, the session's job started in the background through the usual session start, authorized
as every statement, and left to Spark whenever the read model cannot answer."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from async_query.catalog.locate import CatalogLocation
from async_query.datasources import Datasource
from async_query.handlers import SubmitRequest
from async_query.launcher.base import JobRequest
from async_query.runtime import Plugin
from async_query.security.errors import ForbiddenError
from async_query.security.principal import Principal
from async_query.slots import INTERACTIVE_SESSIONS, USER_SESSIONS, Holder, Slots, user_scope
from query_core.errors import LauncherError
from query_core.states import StatementState
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher
from tests.unit.test_catalog_read_model import StandIn, table

THRIFT = "thrift://127.0.0.1:{port}"


@dataclass
class MetastoreLauncher(RecordingLauncher):
    """A recording launcher whose jobs would use the metastore at ``uri``."""

    uri: str = "thrift://127.0.0.1:9083"

    def catalog_conf_for(self, datasource: Datasource) -> dict[str, str]:
        return {"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": self.uri}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_stand_in(plugin: Plugin, catalog: StandIn) -> Plugin:
    assert plugin.catalog is not None
    plugin.catalog.reader_for = lambda *_: catalog
    return plugin


def statement_state(plugin: Plugin, query_id: str) -> StatementState:
    found = plugin.store.statements.get(plugin.datasources.all()[0].name, query_id)
    assert found is not None
    return found.doc.state


@pytest.fixture
def launcher() -> MetastoreLauncher:  # type: ignore[override]
    return MetastoreLauncher()


@pytest.fixture
def plugin(make_plugin: PluginFactory, launcher: MetastoreLauncher) -> Plugin:  # type: ignore[override]
    return with_stand_in(make_plugin(launcher), StandIn({"lake": {"a": table("lake", "a"), "b": table("lake", "b")}}))


def test_answered_at_once_and_the_sessions_job_starts_in_the_background(
    plugin: Plugin, launcher: MetastoreLauncher, datasource: Datasource
) -> None:
    submitted = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW TABLE EXTENDED IN {datasource.name}.lake LIKE '*'"))
    assert statement_state(plugin, submitted.query_id) == StatementState.SUCCESS
    reply = json.loads(plugin.service.get(submitted.query_id))
    assert reply["status"] == "SUCCESS"
    assert reply["schema"] == [
        {"name": "namespace", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "isTemporary", "type": "boolean"},
        {"name": "information", "type": "string"},
    ]
    assert [row[:3] for row in reply["datarows"]] == [["lake", "a", False], ["lake", "b", False]]
    # The session it returned is being started, through the interactive handler's own start.
    browse = plugin.handlers.interactive.browse
    assert browse is not None
    browse.wait_for_starts()
    assert [r.session_id for r in launcher.started] == [submitted.session_id]
    session = plugin.store.sessions.get(datasource.name, submitted.session_id)
    assert session is not None and session.doc.job_id == "job-1"
    # The next browse statement in that session is answered too, and starts nothing more.
    again = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW SCHEMAS IN {datasource.name}", submitted.session_id))
    assert again.session_id == submitted.session_id
    assert json.loads(plugin.service.get(again.query_id))["datarows"] == [["lake"]]
    browse.wait_for_starts()
    assert len(launcher.started) == 1


def test_the_background_start_holds_the_callers_share_and_a_slot_as_a_post_does(
    make_plugin: PluginFactory, launcher: MetastoreLauncher, datasource: Datasource
) -> None:
    open_to_analysts = datasource.model_copy(update={"allowed_roles": ["analyst"]})
    plugin = with_stand_in(
        make_plugin(launcher, datasources=[open_to_analysts], max_sessions=2, max_sessions_per_user=1), StandIn({"lake": {}})
    )
    browse = plugin.handlers.interactive.browse
    assert browse is not None
    ann = Principal.of("ann", ["analyst"])
    query = f"SHOW SCHEMAS IN {datasource.name}"
    first = plugin.service.submit(SubmitRequest(datasource.name, "sql", query, principal=ann))
    browse.wait_for_starts()
    holder = Holder(datasource.name, first.session_id)
    deployment = Slots(plugin.store, INTERACTIVE_SESSIONS, lambda: 2)
    anns = Slots(plugin.store, USER_SESSIONS, lambda: 1, scope=user_scope("ann"))
    assert sorted(deployment.holders(), key=str) == sorted([holder, None], key=str)
    assert anns.holders() == [holder]
    # Ann's share is full: her next browse is still answered, but no second session is started
    # for it and it holds nothing (the 429 a POST would get is logged).
    second = plugin.service.submit(SubmitRequest(datasource.name, "sql", query, principal=ann))
    assert json.loads(plugin.service.get(second.query_id, ann))["datarows"] == [["lake"]]
    browse.wait_for_starts()
    assert [r.session_id for r in launcher.started] == [first.session_id]
    assert plugin.store.sessions.get(datasource.name, second.session_id) is None
    assert Holder(datasource.name, second.session_id) not in deployment.holders()


@dataclass
class RefusingLauncher(MetastoreLauncher):
    def start(self, request: JobRequest) -> str:
        super().start(request)
        raise LauncherError("no capacity")


def test_a_background_start_that_fails_holds_nothing(make_plugin: PluginFactory, datasource: Datasource) -> None:
    launcher = RefusingLauncher()
    open_to_analysts = datasource.model_copy(update={"allowed_roles": ["analyst"]})
    plugin = with_stand_in(make_plugin(launcher, datasources=[open_to_analysts], max_sessions=1), StandIn({"lake": {}}))
    browse = plugin.handlers.interactive.browse
    assert browse is not None
    ann = Principal.of("ann", ["analyst"])
    submitted = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW SCHEMAS IN {datasource.name}", principal=ann))
    assert json.loads(plugin.service.get(submitted.query_id, ann))["status"] == "SUCCESS"
    browse.wait_for_starts()
    assert [r.session_id for r in launcher.started] == [submitted.session_id]
    assert plugin.store.sessions.get(datasource.name, submitted.session_id) is None
    assert Slots(plugin.store, INTERACTIVE_SESSIONS, lambda: 1).holders() == [None]
    assert Slots(plugin.store, USER_SESSIONS, lambda: 1, scope=user_scope("ann")).holders() == [None]


def test_a_caller_who_may_not_query_the_datasource_is_refused_and_nothing_is_listed(
    make_plugin: PluginFactory, launcher: MetastoreLauncher, datasource: Datasource
) -> None:
    guarded = datasource.model_copy(update={"allowed_roles": ["analyst"]})
    plugin = with_stand_in(make_plugin(launcher, datasources=[guarded]), StandIn({"lake": {}}))
    outsider = Principal.of("eve", ["visitor"])
    with pytest.raises(ForbiddenError):
        plugin.service.submit(SubmitRequest(guarded.name, "sql", f"SHOW SCHEMAS IN {guarded.name}", principal=outsider))
    assert plugin.store.catalog_changes.get(guarded.name) is None
    analyst = Principal.of("ann", ["analyst"])
    submitted = plugin.service.submit(SubmitRequest(guarded.name, "sql", f"SHOW SCHEMAS IN {guarded.name}", principal=analyst))
    assert json.loads(plugin.service.get(submitted.query_id, analyst))["datarows"] == [["lake"]]
    with pytest.raises(ForbiddenError):
        plugin.service.get(submitted.query_id, outsider)


def test_a_metastore_that_is_down_sends_the_statement_to_spark(
    make_plugin: PluginFactory, datasource: Datasource
) -> None:
    launcher = MetastoreLauncher(uri=THRIFT.format(port=closed_port()))
    plugin = make_plugin(launcher, catalog_timeout_s=0.5)
    submitted = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW SCHEMAS IN {datasource.name}"))
    assert statement_state(plugin, submitted.query_id) == StatementState.WAITING
    assert [r.session_id for r in launcher.started] == [submitted.session_id]  # started as any new session is
    plugin.signals.flush()
    session = plugin.store.sessions.get(datasource.name, submitted.session_id)
    assert session is not None and submitted.query_id in session.doc.pending_statement_ids


def test_a_session_with_temporary_views_keeps_show_tables_for_its_job(
    plugin: Plugin, launcher: MetastoreLauncher, datasource: Datasource
) -> None:
    first = plugin.service.submit(SubmitRequest(datasource.name, "sql", "SELECT 1"))
    plugin.store.sessions.note_temporary_views(datasource.name, first.session_id)
    listed = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW TABLES IN {datasource.name}.lake", first.session_id))
    assert listed.session_id == first.session_id
    assert statement_state(plugin, listed.query_id) == StatementState.WAITING


@pytest.mark.parametrize(
    ("settings", "query"),
    [
        ({"catalog_read_model": False}, "SHOW SCHEMAS IN {ds}"),
        ({}, "SHOW TABLE EXTENDED IN {ds}.lake LIKE 'a*'"),
        ({}, "SHOW TABLE EXTENDED IN {ds}.missing LIKE '*'"),
    ],
)
def test_what_the_read_model_does_not_answer_runs_on_spark(
    make_plugin: PluginFactory, launcher: MetastoreLauncher, datasource: Datasource, settings: dict[str, Any], query: str
) -> None:
    plugin = make_plugin(launcher, **settings)
    if plugin.catalog is not None:
        with_stand_in(plugin, StandIn({"lake": {}}))
    submitted = plugin.service.submit(SubmitRequest(datasource.name, "sql", query.format(ds=datasource.name)))
    assert statement_state(plugin, submitted.query_id) == StatementState.WAITING


def test_the_datasources_catalog_is_found_where_its_jobs_find_it(datasource: Datasource) -> None:
    from async_query.catalog.locate import catalog_of

    launcher = MetastoreLauncher(uri="thrift://127.0.0.1:9999")
    assert catalog_of(datasource, launcher) == CatalogLocation("hive", "thrift://127.0.0.1:9999")
    own = datasource.model_copy(update={"spark_conf": {"spark.hadoop.hive.metastore.uris": "thrift://10.0.0.1:9083"}})
    assert catalog_of(own, launcher) == CatalogLocation("hive", "thrift://10.0.0.1:9083")
    in_memory = datasource.model_copy(update={"spark_conf": {"spark.sql.catalogImplementation": "in-memory"}})
    assert catalog_of(in_memory, launcher) is None
    assert catalog_of(datasource, RecordingLauncher()) is None


@dataclass
class GlueLauncher(RecordingLauncher):
    glue_region: str = "us-east-1"


def test_a_glue_datasource_is_read_as_its_role_through_sts(aws: None) -> None:
    """A Glue-backed datasource's catalog is Glue, read with its role (assumed through STS, as its
    jobs assume it); its tables come back in the Hive shape the rules print."""
    import boto3

    from async_query.catalog.locate import catalog_of
    from async_query.catalog.readers import GlueReader, glue_client

    role = "arn:aws:iam::123456789012:role/glue-reader"
    glue_ds = Datasource(
        name="my_glue", connector="s3glue", properties={"glue.auth.type": "iam_role", "glue.auth.role_arn": role}
    )
    location = catalog_of(glue_ds, GlueLauncher())
    assert location == CatalogLocation("glue", "us-east-1", role)
    assert catalog_of(glue_ds, RecordingLauncher()) is None  # a launcher that does not reach Glue
    boto3.client("glue", region_name="us-east-1").create_database(DatabaseInput={"Name": "lake"})
    boto3.client("glue", region_name="us-east-1").create_table(
        DatabaseName="lake",
        TableInput={
            "Name": "events",
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {"EXTERNAL": "TRUE"},
            "PartitionKeys": [{"Name": "dt", "Type": "string"}],
            "StorageDescriptor": {
                "Columns": [{"Name": "id", "Type": "bigint", "Comment": "key"}],
                "Location": "s3://bucket/events",
                "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"},
            },
        },
    )
    reader = GlueReader(glue_client("us-east-1", role))
    assert reader.databases() == ["lake"]
    assert reader.table_names("lake") == ["events"]
    assert reader.table_names("missing") is None
    [events] = reader.tables("lake", ["events"])
    assert (events.name, events.location, events.partition_keys[0].name) == ("events", "s3://bucket/events", "dt")
    assert events.create_time > 0


@dataclass
class SlowLauncher(MetastoreLauncher):
    """Its starts wait until ``go`` is set (a launcher call under way)."""

    go: threading.Event = field(default_factory=threading.Event)

    def start(self, request: JobRequest) -> str:
        assert self.go.wait(30)
        return super().start(request)


def test_a_query_naming_a_session_being_started_goes_into_it(
    make_plugin: PluginFactory, datasource: Datasource
) -> None:
    launcher = SlowLauncher()
    plugin = with_stand_in(make_plugin(launcher), StandIn({"lake": {}}))
    browse = plugin.handlers.interactive.browse
    assert browse is not None
    waiting = threading.Event()
    wait_for_start = browse.wait_for_start

    def noted(session_id: str, timeout_s: float = 10.0) -> None:
        waiting.set()
        wait_for_start(session_id, timeout_s)

    browse.wait_for_start = noted  # type: ignore[method-assign]
    browsed = plugin.service.submit(SubmitRequest(datasource.name, "sql", f"SHOW SCHEMAS IN {datasource.name}"))
    with ThreadPoolExecutor(1) as pool:
        following = pool.submit(
            plugin.service.submit, SubmitRequest(datasource.name, "sql", "SELECT 1", browsed.session_id)
        )
        assert waiting.wait(30)  # the follower is at the session's door while its start is under way
        launcher.go.set()
        assert following.result(30).session_id == browsed.session_id
    assert [r.session_id for r in launcher.started] == [browsed.session_id]
