"""Flint index names and state-document ids, checked against values the reference produces."""

from __future__ import annotations

import base64

import pytest

from query_core.flint import (
    CreateMaterializedView,
    CreateSkippingIndex,
    DropIndex,
    IndexKind,
    IndexRef,
    IndexStatement,
    QualifiedName,
    RecoverIndexJob,
    flint_index_name,
    latest_id,
    parse,
)
from query_core.flint.index_meta import IndexMeta
from query_core.flint.naming import (
    covering_index_name,
    mv_index_name,
    sanitize_index_name,
    skipping_index_name,
)
from query_core.flint.scope import ForeignCatalogError, catalogs_named, check_catalog, check_index_catalog

HTTP_LOGS = QualifiedName(("mys3", "default", "http_logs"))


def test_index_names_of_each_kind() -> None:
    assert skipping_index_name(HTTP_LOGS) == "flint_mys3_default_http_logs_skipping_index"
    assert covering_index_name("covering", HTTP_LOGS) == "flint_mys3_default_http_logs_covering_index"
    assert (
        mv_index_name(QualifiedName(("mys3", "default", "http_logs_metrics"))) == "flint_mys3_default_http_logs_metrics"
    )


@pytest.mark.parametrize(
    ("index_name", "expected"),
    [
        # The reference plugin's own test fixtures.
        ("flint_mys3_default_http_logs_skipping_index", "ZmxpbnRfbXlzM19kZWZhdWx0X2h0dHBfbG9nc19za2lwcGluZ19pbmRleA=="),
        ("flint_mys3_default_http_logs_covering_index", "ZmxpbnRfbXlzM19kZWZhdWx0X2h0dHBfbG9nc19jb3ZlcmluZ19pbmRleA=="),
        ("flint_mys3_default_http_logs_metrics", "ZmxpbnRfbXlzM19kZWZhdWx0X2h0dHBfbG9nc19tZXRyaWNz"),
    ],
)
def test_latest_id_is_base64_of_the_index_name(index_name: str, expected: str) -> None:
    assert latest_id(index_name) == expected
    assert base64.b64decode(expected).decode() == index_name


def test_names_are_lower_cased() -> None:
    table = QualifiedName(("MyS3", "Default", "HTTP_Logs"))
    assert skipping_index_name(table) == "flint_mys3_default_http_logs_skipping_index"
    assert covering_index_name("ByStatus", table) == "flint_mys3_default_http_logs_bystatus_index"
    assert latest_id("FLINT_A_B_C") == latest_id("flint_a_b_c")


def test_characters_opensearch_refuses_are_percent_encoded() -> None:
    """The reference plugin's fixture: a table named with every character OpenSearch refuses."""
    statement = parse('DROP SKIPPING INDEX ON mys3.default.`test ,:"+/\\|?#><`')
    assert isinstance(statement, DropIndex)
    name = flint_index_name(statement.index)
    assert name == "flint_mys3_default_test%20%2c%3a%22%2b%2f%5c%7c%3f%23%3e%3c_skipping_index"
    assert latest_id(name) == (
        "ZmxpbnRfbXlzM19kZWZhdWx0X3Rlc3QlMjAlMmMlM2ElMjIlMmIlMmYlNWMlN2MlM2YlMjMlM2UlM2Nfc2tpcHBpbmdfaW5kZXg="
    )


def test_a_wildcard_in_a_name_is_encoded_as_opensearch_refuses_it() -> None:
    """An attack: a view named ``A*?`` was taken to exist already (its name, used as an index
    pattern, matched other indexes); ``*`` is encoded like the other characters OpenSearch refuses."""
    assert sanitize_index_name("flint_lake_default_A*?") == "flint_lake_default_a%2a%3f"


def test_sanitizing_is_idempotent() -> None:
    raw = 'flint_a_b_x y"Z'
    assert sanitize_index_name(sanitize_index_name(raw)) == sanitize_index_name(raw) == "flint_a_b_x%20y%22z"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("CREATE SKIPPING INDEX ON http_logs (a PARTITION)", "flint_local_default_http_logs_skipping_index"),
        ("DROP INDEX covering ON db.http_logs", "flint_local_db_http_logs_covering_index"),
        ("REFRESH MATERIALIZED VIEW glue.db.metrics", "flint_glue_db_metrics"),
        ("CREATE MATERIALIZED VIEW metrics AS SELECT 1", "flint_local_default_metrics"),
    ],
)
def test_a_statement_names_its_index_once_qualified_with_the_datasource(sql: str, expected: str) -> None:
    statement = parse(sql)
    assert isinstance(statement, CreateSkippingIndex | CreateMaterializedView | IndexStatement)
    assert flint_index_name(statement.index, "local") == expected


def test_unqualified_names_must_be_qualified_first() -> None:
    with pytest.raises(ValueError, match="not qualified"):
        flint_index_name(IndexRef(IndexKind.MV, QualifiedName(("mv",))))


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("CREATE SKIPPING INDEX ON other.db.t (a VALUE_SET)", ["other"]),
        ("CREATE INDEX c ON other.db.t (a)", ["other"]),
        ("CREATE MATERIALIZED VIEW other.db.mv AS SELECT 1", ["other"]),
        ("DROP SKIPPING INDEX ON other.db.t", ["other"]),
        ("VACUUM INDEX c ON other.db.t", ["other"]),
        ("ALTER MATERIALIZED VIEW other.db.mv WITH (auto_refresh = false)", ["other"]),
        ("SHOW FLINT INDEXES IN other.db", ["other"]),
        ("SHOW MATERIALIZED VIEWS IN other", ["other"]),
        ("SHOW INDEXES ON other.db.t", ["other"]),
        ("DESC SKIPPING INDEX ON db.t", []),
        ("REFRESH MATERIALIZED VIEW mv", []),
    ],
)
def test_the_catalogs_a_flint_statement_names_and_another_is_refused(sql: str, named: list[str]) -> None:
    statement = parse(sql)
    assert statement is not None
    assert list(catalogs_named(statement)) == named
    check_catalog(statement, "OTHER")  # its own, in any case
    if named:
        with pytest.raises(ForeignCatalogError, match="catalog 'other' is not this query's datasource 'lake'"):
            check_catalog(statement, "lake")
    else:
        check_catalog(statement, "lake")


@pytest.mark.parametrize(
    ("index_name", "allowed"),
    [
        ("flint_lake_db_t_skipping_index", True),
        ("`flint_lake_db_t_c_index`", True),
        ("FLINT_LAKE_db_t_skipping_index", True),
        ("flint_other_db_t_skipping_index", False),
        ("flint_lakes_db_t_skipping_index", False),
        ("flint_lake", False),
        ("other_index", False),
    ],
)
def test_recover_reaches_only_an_index_named_after_its_own_datasource(index_name: str, allowed: bool) -> None:
    statement = parse(f"RECOVER INDEX JOB {index_name}")
    assert isinstance(statement, RecoverIndexJob)
    if allowed:
        check_catalog(statement, "lake")
    else:
        with pytest.raises(ForeignCatalogError, match="is not of this query's datasource 'lake'"):
            check_catalog(statement, "lake")


def _meta(kind: IndexKind, name: str, source: str) -> IndexMeta:
    return IndexMeta(
        index_name="flint_lake_b_db_t_skipping_index", kind=kind, name=name, source=source, indexed_columns=(), options={}
    )


@pytest.mark.parametrize(
    ("meta", "allowed"),
    [
        (_meta(IndexKind.SKIPPING, "flint_lake_db_t_skipping_index", "lake.db.t"), True),
        (_meta(IndexKind.COVERING, "c", "LAKE.db.t"), True),
        (_meta(IndexKind.MV, "lake.db.mv", "SELECT * FROM lake_b.db.t"), True),
        # a name beginning as this datasource's (flint_lake_...) of another catalog (lake_b)
        (_meta(IndexKind.SKIPPING, "flint_lake_b_db_t_skipping_index", "lake_b.db.t"), False),
        (_meta(IndexKind.MV, "lake_b.db.mv", "SELECT * FROM lake.db.t"), False),
    ],
)
def test_an_index_is_this_datasource_s_by_what_its_metadata_says(meta: IndexMeta, allowed: bool) -> None:
    if allowed:
        check_index_catalog(meta, "lake")
    else:
        with pytest.raises(ForeignCatalogError, match="not this query's datasource 'lake'"):
            check_index_catalog(meta, "lake")
