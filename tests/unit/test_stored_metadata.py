"""The checks of what the catalog holds (flint_repl_job/stored.py), on what the JVM helper reports
of a plan (its JSON items), without Spark: each kind of stored metadata is refused with the
element its allow list names and a detail saying what held it; what is inside the lists passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.stored import StoredMetadata
from query_core.validation import Checks, Profile, QueryRefusedError, policy_for
from query_core.validation.elements import GrammarElement as E

WH = "/srv/wh"


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Spark:
    """What the checks ask of a session: its settings."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.conf = _Conf(values or {})


def stored(texts: list[str] | None = None, settings: dict[str, str] | None = None) -> StoredMetadata:
    policy = policy_for({}, Profile.LOCAL, Path(WH).as_uri(), "/srv/cp")
    seen = texts if texts is not None else []
    return StoredMetadata(_Spark(settings), Checks(policy), seen.append, lambda _: [])


def table(**fields: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": "table",
        "node": "LogicalRelation",
        "name": "spark_catalog.default.t",
        "type": "EXTERNAL",
        "temporary": False,
        "provider": "parquet",
        "location": f"file:{WH}/t",
        "serde": None,
        "inputFormat": None,
        "outputFormat": None,
        "storage": {},
        "properties": {},
        "partitioned": False,
    }
    found.update(fields)
    return found


def hive(**fields: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "provider": "hive",
        "serde": "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
        "inputFormat": "org.apache.hadoop.mapred.TextInputFormat",
        "outputFormat": "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
        "storage": {"serialization.format": "1"},
        "properties": {"transient_lastDdlTime": "1", "EXTERNAL": "TRUE"},
    }
    return table(**{**defaults, **fields})


def view(text: str, conf: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    return table(type="VIEW", provider=None, location=None, view=text, viewConf=conf or {}, **fields)


def refusal(items: list[dict[str, Any]], drop: bool = False, **kw: Any) -> QueryRefusedError:
    with pytest.raises(QueryRefusedError) as refused:
        stored(**kw)._check(items, drop)
    return refused.value


def test_what_lies_in_the_warehouse_with_allowed_storage_passes() -> None:
    texts: list[str] = []
    checks = stored(texts, {"spark.sql.runSQLOnFiles": "false"})
    checks._check(
        [
            table(storage={"header": "true", "serialization.format": "1"}, provider="csv"),
            hive(partitioned=True, partitions=[{"spec": {"k": "1"}, "location": f"file:{WH}/t/k=1", "storage": {}}]),
            view("SELECT * FROM t", {"spark.sql.runSQLOnFiles": "false", "spark.sql.ansi.enabled": "true"}),
            view("SELECT 1", temporary=True),
            table(
                location=None,
                defaultLocation=f"file:{WH}/new",
                type="MANAGED",
                node="CreateDataSourceTableAsSelectCommand",
            ),
            {
                "kind": "files",
                "node": "LogicalRelation",
                "table": None,
                "format": "x.ParquetFileFormat",
                "paths": [f"file:{WH}/v"],
            },
            {"kind": "path", "node": "InsertIntoHadoopFsRelationCommand", "path": f"file:{WH}/t"},
        ],
        drop=False,
    )
    assert texts == ["SELECT * FROM t"]  # a stored view's text is checked; a temporary view's is not


@pytest.mark.parametrize(
    ("item", "element", "detail"),
    [
        (
            table(location="file:/srv/lake/secrets"),
            E.LOCATION,
            "file:/srv/lake/secrets, of the stored table spark_catalog.default.t",
        ),
        (table(location=f"file:{WH}/x/../../etc"), E.LOCATION, f"file:{WH}/x/../../etc, of the stored table"),
        (table(location=None, defaultLocation="file:/etc/t"), E.LOCATION, "file:/etc/t, of the stored table"),
        (table(provider="jdbc"), E.DATA_SOURCE, "jdbc, of the stored table"),
        (table(provider="csv", storage={"url": "jdbc:x"}), E.DATA_SOURCE_OPTION, "csv: url, of the stored table"),
        (table(storage={"path": "/etc"}), E.LOCATION, "/etc, of the stored table"),
        (hive(serde="org.example.EvilSerDe"), E.DATA_SOURCE, "SERDE org.example.EvilSerDe, of the stored table"),
        (hive(inputFormat="org.example.In"), E.DATA_SOURCE, "INPUTFORMAT org.example.In"),
        (hive(properties={"avro.schema.url": "http://x/s"}), E.TABLE_PROPERTY, "avro.schema.url, of the stored table"),
        (hive(storage={"hive.exec.scratchdir": "/tmp"}), E.TABLE_PROPERTY, "hive.exec.scratchdir"),
        (
            table(
                partitioned=True, partitions=[{"spec": {"k": "9"}, "location": "file:/srv/lake/secrets", "storage": {}}]
            ),
            E.LOCATION,
            "file:/srv/lake/secrets, of the partition (k=9) of the stored table spark_catalog.default.t",
        ),
        (
            hive(
                partitioned=True,
                partitions=[
                    {"spec": {"k": "1"}, "location": f"file:{WH}/t/k=1", "serde": "org.example.S", "storage": {}}
                ],
            ),
            E.DATA_SOURCE,
            "SERDE org.example.S, of the partition (k=1)",
        ),
        (view("SELECT '${env:HOME}'"), E.DYNAMIC_SQL, "a variable substituted in a view's text, in the stored view"),
        (
            view("SELECT 1", {"spark.sql.ansi.doubleQuotedIdentifiers": "true"}),
            E.PROTECTED_CONFIG,
            "spark.sql.ansi.doubleQuotedIdentifiers captured",
        ),
        (view(None), E.DYNAMIC_SQL, "a view without its text"),  # type: ignore[arg-type]
        (
            {
                "kind": "files",
                "node": "LogicalRelation",
                "table": "spark_catalog.default.p",
                "format": "F",
                "paths": ["file:/srv/lake"],
            },
            E.LOCATION,
            "file:/srv/lake, read from a partition of the stored table spark_catalog.default.p",
        ),
        (
            {
                "kind": "files",
                "node": "LogicalRelation",
                "table": None,
                "format": "a.TextFileFormat",
                "paths": ["/etc"],
            },
            E.LOCATION,
            "/etc, read from TextFileFormat files",
        ),
        (
            {"kind": "path", "node": "InsertIntoHadoopFsRelationCommand", "path": "file:/etc"},
            E.LOCATION,
            "file:/etc, written to by the statement",
        ),
        (
            {
                "kind": "relation",
                "node": "LogicalRelation",
                "class": "org.apache.spark.sql.execution.datasources.jdbc.JDBCRelation",
            },
            E.DATA_SOURCE,
            "a relation of JDBCRelation",
        ),
        (
            {
                "kind": "v2",
                "node": "DataSourceV2Relation",
                "name": "t",
                "class": "x.PythonTable",
                "provider": None,
                "location": None,
            },
            E.DATA_SOURCE,
            "PythonTable, of the stored table t",
        ),
        (
            {
                "kind": "v2",
                "node": "DataSourceV2Relation",
                "name": "t",
                "class": "x.T",
                "provider": "parquet",
                "location": "/etc",
            },
            E.LOCATION,
            "/etc, of the stored table t",
        ),
    ],
)
def test_what_the_catalog_holds_outside_the_lists_is_refused(item: dict[str, Any], element: E, detail: str) -> None:
    refused = refusal([item], settings={"spark.sql.runSQLOnFiles": "false"})
    assert refused.element is element
    assert refused.detail.startswith(detail), refused.detail


def test_a_view_that_reads_its_text_as_written_passes() -> None:
    texts: list[str] = []
    stored(texts)._check([view("SELECT '${env:HOME}'", {"spark.sql.variable.substitute": "false"})], drop=False)
    assert texts == ["SELECT '${env:HOME}'"]


def test_a_drop_refuses_only_a_managed_table_outside() -> None:
    outside = "file:/srv/lake/secrets"
    checks = stored()
    checks._check([table(location=outside), view("SELECT reflect(1)"), hive(serde="org.example.S")], drop=True)
    assert refusal([table(type="MANAGED", location=outside)], drop=True).element is E.LOCATION
    managed_parted = table(
        type="MANAGED", partitioned=True, partitions=[{"spec": {"k": "1"}, "location": outside, "storage": {}}]
    )
    assert "of the partition (k=1)" in refusal([managed_parted], drop=True).detail


def test_without_the_product_s_elements_nothing_of_the_catalog_is_checked() -> None:
    """The reference's profiles (EMR Serverless's own isolation) check statements only."""
    policy = policy_for({}, Profile.S3GLUE, Path(WH).as_uri(), "/srv/cp")
    assert not StoredMetadata(_Spark(), Checks(policy), lambda _: None, lambda _: []).active
    assert stored().active
