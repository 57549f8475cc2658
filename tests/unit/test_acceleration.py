"""Acceleration's pure parts, without Spark: Catalyst JSON read into column predicates, the
skipping strategies on index documents, file selection with and without hybrid scan, covering
applicability (columns, types, partial indexes, freshness), paths and snapshots, the switches, and
the figures a query's acceleration adds to the job's (``docs/acceleration.md``)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from decimal import Decimal
from typing import Any

import pytest

from flint_repl_job.acceleration.covering import NotNull, subsumes, unusable_reason
from flint_repl_job.acceleration.expressions import (
    ColumnPredicate,
    column_predicate,
    conjuncts,
    decode,
    expression_of,
    has_disjunction,
)
from flint_repl_job.acceleration.files import SNAPSHOT_PROPERTY, SourceSnapshot, normalize_path
from flint_repl_job.acceleration.listings import Listings
from flint_repl_job.acceleration.report import Acceleration, IndexUse
from flint_repl_job.acceleration.skipping import documents_by_path, file_tests, select_files
from flint_repl_job.acceleration.switches import Switches
from flint_repl_job.figures import JobCounters
from flint_repl_job.indexes.bloom import build_bloom_filter
from query_core.flint import IndexKind
from query_core.flint.index_meta import IndexMeta
from query_core.states import FlintIndexState

# -- Catalyst JSON ---------------------------------------------------------------------------------------

P = "org.apache.spark.sql.catalyst.expressions."


def attr(name: str, expr_id: int, data_type: str) -> dict[str, Any]:
    return {
        "class": P + "AttributeReference",
        "num-children": 0,
        "name": name,
        "dataType": data_type,
        "exprId": {"id": expr_id},
    }


def lit(value: str | None, data_type: str) -> dict[str, Any]:
    return {"class": P + "Literal", "num-children": 0, "value": value, "dataType": data_type}


def node(cls: str, children: int) -> dict[str, Any]:
    return {"class": P + cls, "num-children": children}


COLUMNS = {1: "id", 2: "name", 3: "price", 4: "ts"}


def test_a_conjunction_reads_as_its_column_predicates() -> None:
    # (id > 5 AND isnotnull(id)) AND ('a' = name) AND price IN (1.50, 2.00)
    nodes = [
        node("And", 2),
        node("And", 2),
        node("GreaterThan", 2),
        attr("id", 1, "long"),
        lit("5", "long"),
        node("IsNotNull", 1),
        attr("id", 1, "long"),
        node("And", 2),
        node("EqualTo", 2),
        lit("a", "string"),
        attr("name", 2, "string"),
        node("In", 3),
        attr("price", 3, "decimal(10,2)"),
        lit("1.50", "decimal(10,2)"),
        lit("2.00", "decimal(10,2)"),
    ]
    tree = expression_of(nodes)
    parts = conjuncts(tree)
    assert [p.cls for p in parts] == ["GreaterThan", "IsNotNull", "EqualTo", "In"]
    found = [column_predicate(p, COLUMNS) for p in parts]
    assert found[0] == ColumnPredicate("id", "long", ">", (5,))
    assert found[1] is None
    assert found[2] == ColumnPredicate("name", "string", "=", ("a",))  # the literal on the left
    assert found[3] == ColumnPredicate("price", "decimal(10,2)", "IN", (Decimal("1.50"), Decimal("2.00")))
    assert not has_disjunction(tree)


def test_shapes_that_are_no_column_predicate() -> None:
    two_columns = expression_of([node("EqualTo", 2), attr("id", 1, "long"), attr("price", 3, "long")])
    of_a_function = expression_of([node("EqualTo", 2), node("Upper", 1), attr("name", 2, "string"), lit("A", "string")])
    a_null = expression_of([node("EqualTo", 2), attr("id", 1, "long"), lit(None, "long")])
    other_table = expression_of([node("EqualTo", 2), attr("id", 99, "long"), lit("1", "long")])
    for expr in (two_columns, of_a_function, a_null, other_table):
        assert column_predicate(expr, COLUMNS) is None
    either = expression_of(
        [node("Or", 2), node("EqualTo", 2), attr("id", 1, "long"), lit("1", "long"), lit("true", "boolean")]
    )
    assert has_disjunction(either)


def test_timestamps_and_insets_are_read_from_the_jvm() -> None:
    ts = expression_of([node("LessThan", 2), attr("ts", 4, "timestamp"), lit("2024-01-01 00:00:00", "timestamp")])
    assert column_predicate(ts, COLUMNS) is None  # no reader: the text is in the session's time zone
    asked: list[tuple[int, ...]] = []

    def reader(path: tuple[int, ...]) -> list[str]:
        asked.append(path)
        return ["1704067200000000"] if path == (1,) else ["3", "1", "2"]

    assert column_predicate(ts, COLUMNS, reader) == ColumnPredicate("ts", "timestamp", "<", (1704067200000000,))
    inset = expression_of([{"class": P + "InSet", "num-children": 1, "hset": None}, attr("id", 1, "long")])
    assert column_predicate(inset, COLUMNS, reader) == ColumnPredicate("id", "long", "IN", (3, 1, 2))
    assert asked == [(1,), ()]


@pytest.mark.parametrize(
    ("text", "data_type", "value"),
    [
        ("7", "integer", 7),
        ("1.0E10", "double", 1e10),
        ("1.1", "float", 1.100000023841858),
        ("true", "boolean", True),
        ("2024-02-29", "date", dt.date(2024, 2, 29)),
        ("12.30", "decimal(4,2)", Decimal("12.30")),
    ],
)
def test_literal_texts_decode_by_type(text: str, data_type: str, value: Any) -> None:
    assert decode(text, data_type) == value


# -- skipping strategies -------------------------------------------------------------------------------

INDEX = (
    {"kind": "PARTITION", "columnName": "region", "columnType": "string", "parameters": {}},
    {"kind": "VALUE_SET", "columnName": "status", "columnType": "int", "parameters": {"max_size": "3"}},
    {"kind": "MIN_MAX", "columnName": "id", "columnType": "bigint", "parameters": {}},
    {"kind": "MIN_MAX", "columnName": "price", "columnType": "decimal(10,2)", "parameters": {}},
    {"kind": "MIN_MAX", "columnName": "score", "columnType": "double", "parameters": {}},
    {"kind": "MIN_MAX", "columnName": "ts", "columnType": "timestamp", "parameters": {}},
    {"kind": "BLOOM_FILTER", "columnName": "host", "columnType": "string", "parameters": {}},
)


def doc(**fields: Any) -> dict[str, Any]:
    return fields


def keeps(predicate: ColumnPredicate, document: dict[str, Any], hasher: Any = lambda p: None) -> bool:
    tests = file_tests(INDEX, [predicate], hasher)
    assert len(tests) == 1, predicate
    return tests[0].check(document)


def test_partition_and_value_set_answer_equality() -> None:
    assert keeps(ColumnPredicate("region", "string", "=", ("eu",)), doc(region="eu"))
    assert not keeps(ColumnPredicate("region", "string", "=", ("eu",)), doc(region="us"))
    assert not keeps(ColumnPredicate("region", "string", "=", ("eu",)), doc(region=None))  # a null partition
    status = ColumnPredicate("status", "integer", "=", (200,))
    assert keeps(status, doc(status=[200, 404]))
    assert not keeps(status, doc(status=[404, 500]))
    assert keeps(status, doc(status=None))  # the set overflowed its limit
    assert keeps(status, doc())  # no such field: unknown
    assert file_tests(INDEX, [ColumnPredicate("status", "integer", ">", (200,))], lambda p: None) == []


@pytest.mark.parametrize(
    ("op", "values", "low", "high", "kept"),
    [
        ("=", (5,), 1, 9, True),
        ("=", (10,), 1, 9, False),
        ("<", (1,), 1, 9, False),
        ("<", (2,), 1, 9, True),
        ("<=", (1,), 1, 9, True),
        (">", (9,), 1, 9, False),
        (">=", (9,), 1, 9, True),
        ("IN", (0, 20), 1, 9, True),  # by the range of the values, as the reference does
        ("IN", (10, 20), 1, 9, False),
        ("=", (5,), None, None, False),  # every value of the file is null
    ],
)
def test_min_max_answers_comparisons(op: str, values: tuple[int, ...], low: Any, high: Any, kept: bool) -> None:
    assert keeps(ColumnPredicate("id", "long", op, values), doc(MinMax_id_0=low, MinMax_id_1=high)) is kept


def test_min_max_is_conservative_where_values_are_not_exact() -> None:
    # decimals are indexed as doubles: < reads as <= (two decimals may become one double)
    assert keeps(
        ColumnPredicate("price", "decimal(10,2)", "<", (Decimal("0.10"),)), doc(MinMax_price_0=0.1, MinMax_price_1=3.0)
    )
    # a double bound that is no number, or a null one, keeps the file
    score = ColumnPredicate("score", "double", ">", (5.0,))
    assert keeps(score, doc(MinMax_score_0="NaN", MinMax_score_1="NaN"))
    assert keeps(score, doc(MinMax_score_0=None, MinMax_score_1=None))
    assert not keeps(score, doc(MinMax_score_0=1.0, MinMax_score_1=2.0))
    # a NaN literal orders above every number in Spark: no strategy takes it
    assert file_tests(INDEX, [ColumnPredicate("score", "double", ">", (float("nan"),))], lambda p: None) == []
    # timestamps: index documents hold ISO 8601, literals microseconds
    at = ColumnPredicate("ts", "timestamp", "=", (1704067200000000,))
    assert keeps(at, doc(MinMax_ts_0="2024-01-01T00:00:00Z", MinMax_ts_1="2024-01-02T00:00:00.5Z"))
    assert not keeps(at, doc(MinMax_ts_0="2024-01-01T00:00:00.000001Z", MinMax_ts_1="2024-01-02T00:00:00Z"))


def test_a_column_whose_type_changed_since_the_index_was_made_prunes_nothing() -> None:
    assert file_tests(INDEX, [ColumnPredicate("id", "integer", "=", (5,))], lambda p: None) == []


def test_a_bloom_filter_keeps_files_that_may_hold_the_hash() -> None:
    stored = base64.b64encode(build_bloom_filter([11, 22, 33], {})).decode()
    predicate = ColumnPredicate("host", "string", "=", ("x",))
    assert keeps(predicate, doc(host=stored), hasher=lambda p: 22)
    assert not keeps(predicate, doc(host=stored), hasher=lambda p: 44)
    assert keeps(predicate, doc(host=None), hasher=lambda p: 44)
    assert file_tests(INDEX, [predicate], lambda p: None) == []  # no hash: nothing to test


def test_the_first_indexed_column_that_accepts_a_conjunct_tests_it() -> None:
    index = (
        {"kind": "VALUE_SET", "columnName": "id", "columnType": "bigint", "parameters": {}},
        {"kind": "MIN_MAX", "columnName": "id", "columnType": "bigint", "parameters": {}},
    )
    equal = file_tests(index, [ColumnPredicate("id", "long", "=", (5,))], lambda p: None)
    below = file_tests(index, [ColumnPredicate("id", "long", "<", (5,))], lambda p: None)
    assert [t.kind.value for t in equal] == ["VALUE_SET"] and [t.kind.value for t in below] == ["MIN_MAX"]


def test_files_unknown_to_the_index_are_read_with_hybrid_scan_only() -> None:
    tests = file_tests(INDEX, [ColumnPredicate("id", "long", "<", (10,))], lambda p: None)
    documents = documents_by_path(
        [
            {"file_path": "file:///t/a.parquet", "MinMax_id_0": 0, "MinMax_id_1": 9},
            {"file_path": "file:///t/b.parquet", "MinMax_id_0": 10, "MinMax_id_1": 19},
            {"file_path": "file:///t/gone.parquet", "MinMax_id_0": 0, "MinMax_id_1": 9},
        ]
    )
    listed = ["file:/t/a.parquet", "file:/t/b.parquet", "file:/t/new.parquet"]
    hybrid = select_files(listed, documents, tests, hybrid=True)
    assert hybrid.kept == ("file:/t/a.parquet", "file:/t/new.parquet") and hybrid.skipped == ("file:/t/b.parquet",)
    assert hybrid.unindexed == 1 and hybrid.listed == 3
    index_only = select_files(listed, documents, tests, hybrid=False)
    assert index_only.kept == ("file:/t/a.parquet",)  # the reference's behaviour: unindexed files skipped
    # a file the index names but the table no longer has is never kept: only listed files are


def test_paths_are_spelled_as_the_scan_spells_them() -> None:
    assert normalize_path("file:///tmp/t/part-0.parquet") == "file:/tmp/t/part-0.parquet"
    assert normalize_path("file:/tmp/t/part-0.parquet") == "file:/tmp/t/part-0.parquet"
    assert normalize_path("s3://bucket/t/part-0.parquet") == "s3://bucket/t/part-0.parquet"


# -- covering ------------------------------------------------------------------------------------------


def covering(where: str | None = None, snapshot: SourceSnapshot | None = None) -> IndexMeta:
    properties: dict[str, Any] = {}
    if where:
        properties["filterCondition"] = where
    if snapshot is not None:
        properties[SNAPSHOT_PROPERTY] = snapshot.to_property()
    columns = ({"columnName": "id", "columnType": "bigint"}, {"columnName": "status", "columnType": "int"})
    return IndexMeta("flint_lake_default_t_c_index", IndexKind.COVERING, "c", "lake.default.t", columns, {}, properties)


FILES_NOW = SourceSnapshot.of(["file:///t/a.parquet", "file:/t/b.parquet"])


def reason(
    meta: IndexMeta, needed: dict[str, str], query: Any = None, index: Any = None, state: Any = FlintIndexState.ACTIVE
) -> str | None:
    return unusable_reason(meta, state, needed, query, index, lambda: FILES_NOW)


def test_a_fresh_full_index_covers_queries_on_its_columns_only() -> None:
    fresh = covering(snapshot=SourceSnapshot.of(["file:/t/b.parquet", "file:/t/a.parquet"]))
    assert reason(fresh, {"id": "long", "status": "integer"}) is None
    assert reason(fresh, {}) is None  # count(*)
    assert "does not hold column price" in str(reason(fresh, {"id": "long", "price": "double"}))
    assert "exactly" in str(reason(fresh, {"id": "integer"}))  # the table's type changed
    assert "not fresh" in str(reason(covering(snapshot=SourceSnapshot.of(["file:/t/a.parquet"])), {"id": "long"}))
    assert "not known fresh" in str(reason(covering(), {"id": "long"}))
    assert "refreshing" in str(reason(fresh, {"id": "long"}, state=FlintIndexState.REFRESHING))


def test_a_partial_index_serves_only_queries_whose_filter_implies_its_own() -> None:
    fresh = covering("status = 200", FILES_NOW)
    where = [NotNull("status"), ColumnPredicate("status", "integer", "=", (200,))]
    assert "partial" in str(reason(fresh, {"id": "long"}, None, where))
    assert reason(fresh, {"id": "long"}, [ColumnPredicate("status", "integer", "=", (200,)), None], where) is None
    assert reason(fresh, {"id": "long"}, [ColumnPredicate("status", "integer", "=", (404,))], where) is not None


@pytest.mark.parametrize(
    ("query", "index", "implied"),
    [
        (("<", 5), ("<", 10), True),
        (("<", 10), ("<", 10), True),
        (("<=", 10), ("<", 10), False),
        (("<=", 9), ("<", 10), True),
        ((">", 10), (">=", 10), True),
        ((">=", 10), (">", 10), False),
        (("=", 7), (">", 5), True),
        (("IN", 6, 7), ("<", 8), True),
        (("IN", 6, 9), ("<", 8), False),
        (("=", 7), ("IN", 6, 7), True),
        ((">", 5), ("<", 10), False),
    ],
)
def test_subsumption_of_comparisons(query: tuple[Any, ...], index: tuple[Any, ...], implied: bool) -> None:
    def predicate(spec: tuple[Any, ...]) -> ColumnPredicate:
        return ColumnPredicate("id", "long", spec[0], tuple(spec[1:]))

    assert subsumes([predicate(query)], [predicate(index)]) is implied
    assert subsumes([predicate(query)], [NotNull("id")])  # a comparison holds for non-null values only
    assert not subsumes([None], [predicate(index)])


def test_a_snapshot_is_the_set_of_files() -> None:
    a = SourceSnapshot.of(["file:///t/a", "file:/t/b", "file:/t/a"])
    assert a == SourceSnapshot.of(["file:/t/b", "file:/t/a"]) and a.files == 2
    assert a != SourceSnapshot.of(["file:/t/b", "file:/t/c"])
    assert SourceSnapshot.from_property(a.to_property()) == a
    assert SourceSnapshot.from_property({"files": "x"}) is None and SourceSnapshot.from_property(None) is None


# -- switches, report, figures ---------------------------------------------------------------------------


def test_switches_default_on_and_read_the_sessions_conf() -> None:
    assert Switches.read(lambda key, default: default) == Switches(True, True, True)
    conf = {"spark.flint.optimizer.covering.enabled": "FALSE", "spark.flint.index.hybridscan.enabled": "false"}
    assert Switches.read(lambda key, default: conf.get(key, default)) == Switches(True, False, False)


def test_a_reports_explain_section_and_the_figures_it_adds() -> None:
    report = Acceleration(
        used=(
            IndexUse("flint_lake_default_t_skipping_index", "skipping", "lake.default.t", kept=3, listed=120),
            IndexUse("flint_lake_default_u_c_index", "covering", "lake.default.u"),
        ),
        notes=("flint_lake_default_v_skipping_index: not used, the query's filter has an OR",),
    )
    text = report.explain()
    assert text.startswith("== Flint Acceleration ==\n")
    assert "flint_lake_default_t_skipping_index: skipping index, kept 3 of 120 files of lake.default.t" in text
    assert "flint_lake_default_u_c_index: covering index read instead of lake.default.u" in text
    assert "has an OR" in text
    counters = JobCounters()
    counters.accelerated(report)
    counters.accelerated(Acceleration(used=(IndexUse("i", "skipping", "t", kept=4, listed=4),)))  # skipped nothing
    figures = counters.snapshot()
    assert figures.accelerated_queries == {"skipping": 1, "covering": 1} and figures.files_skipped == 117


# -- the index lookup, on the in-memory twin -------------------------------------------------------------


def test_a_tables_indexes_are_found_by_their_source_and_documents_kept_while_they_describe_its_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flint_repl_job.acceleration.lookup import IndexLookup
    from query_core.flint.naming import latest_id
    from query_core.states import INDEX_OPERATIONS
    from query_core.store import Store

    store = Store.in_memory(refresh_interval_s=0)  # a scan sees every write
    columns = [{"kind": "MIN_MAX", "columnName": "id", "columnType": "bigint", "parameters": {}}]
    for name, source in (
        ("flint_lake_default_t_skipping_index", "lake.default.t"),
        ("flint_lake_default_t_2_skipping_index", "lake.default.t_2"),  # matches the pattern, another table
    ):
        meta = {"kind": "skipping", "name": name, "source": source, "indexedColumns": columns, "options": {}}
        store.admin.create_index(name, {"mappings": {"_meta": meta}})
        create = INDEX_OPERATIONS["create"]
        begun = store.index_states.begin(None, create, datasource="lake", latest_id=latest_id(name), index_name=name)
        store.index_states.commit(begun, create)
    index = "flint_lake_default_t_skipping_index"
    store.admin.bulk_index(index, [("a", {"file_path": "file:///t/a", "MinMax_id_0": 0, "MinMax_id_1": 9, "x": 1})])
    lookup = IndexLookup(store, "lake")
    found = lookup.indexes_of("lake.default.t")
    assert found.skipping is not None and found.skipping.meta.index_name == index and not found.covering
    assert found.skipping.state is FlintIndexState.ACTIVE

    scans: list[str] = []
    scan = store.admin.scan

    def counted(*args: Any, **kwargs: Any) -> Any:
        scans.append(args[0])
        return scan(*args, **kwargs)

    monkeypatch.setattr(store.admin, "scan", counted)
    fields = ["MinMax_id_0", "MinMax_id_1"]
    docs = lookup.skipping_documents(found.skipping.meta, fields, ["file:/t/a"])
    assert docs == {"file:/t/a": {"file_path": "file:///t/a", "MinMax_id_0": 0, "MinMax_id_1": 9}}
    assert lookup.skipping_documents(found.skipping.meta, fields, ["file:/t/a"]) == docs and len(scans) == 1
    store.admin.bulk_index(index, [("b", {"file_path": "file:///t/b", "MinMax_id_0": 10, "MinMax_id_1": 19})])
    docs = lookup.skipping_documents(found.skipping.meta, fields, ["file:/t/a", "file:/t/b"])  # b is new: read again
    assert set(docs) == {"file:/t/a", "file:/t/b"} and len(scans) == 2


# -- listings ------------------------------------------------------------------------------------------


class _FakeJvmPlans:
    """What :class:`Listings` asks of the JVM: a listing's hash, and its strings (counted)."""

    def __init__(self) -> None:
        self.transfers = 0

    def digest(self, strings: list[str]) -> bytes:
        return hashlib.sha256("\x01".join(strings).encode()).digest()

    def strings(self, strings: list[str]) -> list[str]:
        self.transfers += 1
        return list(strings)


class _Relation:
    def __init__(self, files: list[str]) -> None:
        self.files = files

    def relation(self) -> _Relation:
        return self

    def location(self) -> _Relation:
        return self

    def inputFiles(self) -> list[str]:  # noqa: N802 - the JVM's name
        return self.files


def test_a_listing_is_sent_from_the_jvm_once_and_read_again_when_its_files_change() -> None:
    jvm = _FakeJvmPlans()
    listings = Listings(jvm, max_paths=4)  # type: ignore[arg-type]
    table = _Relation(["file:///t/a.parquet", "file:///t/b.parquet"])
    assert listings.files(table) == ("file:/t/a.parquet", "file:/t/b.parquet")
    assert listings.files(table) == ("file:/t/a.parquet", "file:/t/b.parquet")
    assert (jvm.transfers, listings.reads) == (1, 1)
    table.files = [*table.files, "file:///t/c.parquet"]  # a file added
    assert listings.files(table)[-1] == "file:/t/c.parquet"
    table.files = table.files[1:]  # a file removed
    assert listings.files(table) == ("file:/t/b.parquet", "file:/t/c.parquet")
    assert jvm.transfers == 3
    big = _Relation([f"file:///t/{i}.parquet" for i in range(5)])  # more paths than are kept
    assert len(listings.files(big)) == len(listings.files(big)) == 5
    assert jvm.transfers == 5
    assert listings.files(_Relation(["file:///t/b.parquet", "file:///t/c.parquet"])) == (
        "file:/t/b.parquet",
        "file:/t/c.parquet",
    )
    assert jvm.transfers == 5  # the same listing, read before
