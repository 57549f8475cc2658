"""The PPL function table: every name builds, arities are checked, unknown names are refused, and
MySQL-style date_format specifiers become Spark datetime patterns."""

from __future__ import annotations

import pytest

from query_core.ppl import functions as f
from query_core.ppl.errors import PplSemanticError


def _args(n: int) -> list[str]:
    return [f"a{i}" for i in range(n)]


# Functions whose first argument is a constant the builder reads (a unit, a relative time).
_UNIT_FIRST = {"timestampadd": "'DAY'", "timestampdiff": "'DAY'", "extract": "'DAY'"}
_RELATIVE_FIRST = {"relative_timestamp": "'-1d@d'", "earliest": "'-1d@d'", "latest": "'-1d@d'"}
_CONSTANT_FIRST = {**_UNIT_FIRST, **_RELATIVE_FIRST}


# Functions whose second argument is a constant the builder reads (a format, a mode).
_CONSTANT_SECOND = {"str_to_date": "'%Y-%m-%d'", "yearweek": "3"}


def _valid_args(name: str, n: int) -> list[str]:
    """Arguments that the builders accept (a constant where the function reads one)."""
    args = _args(n)
    if name in _CONSTANT_FIRST and args:
        args[0] = _CONSTANT_FIRST[name]
    if name in _CONSTANT_SECOND and len(args) > 1:
        args[1] = _CONSTANT_SECOND[name]
    return args


@pytest.mark.parametrize("name", f.scalar_names())
def test_every_scalar_builds_at_its_arities(name: str) -> None:
    spec = f.function_spec(name)
    assert spec is not None
    top = spec.max_args if spec.max_args is not None else spec.min_args + 3
    for n in range(spec.min_args, top + 1):
        sql = f.scalar_sql(name, _valid_args(name, n))
        assert isinstance(sql, str) and sql
        assert sql.count("(") == sql.count(")"), sql
        for arg in _valid_args(name, n)[1 if name in _CONSTANT_FIRST else 0 :]:
            if name not in _CONSTANT_SECOND or arg != _CONSTANT_SECOND[name]:
                assert arg in sql, (name, n, sql)


@pytest.mark.parametrize("name", f.scalar_names())
def test_every_scalar_refuses_wrong_arities(name: str) -> None:
    spec = f.function_spec(name)
    assert spec is not None
    bad = [spec.min_args - 1] if spec.min_args > 0 else []
    if spec.max_args is not None:
        bad.append(spec.max_args + 1)
    for n in bad:
        with pytest.raises(PplSemanticError, match=rf"^{name} expects .*, got {n}$"):
            f.scalar_sql(name, _args(n))


@pytest.mark.parametrize("name", f.aggregate_names())
def test_every_aggregate_builds(name: str) -> None:
    assert f.is_aggregate(name)
    spec = f.function_spec(name)
    assert spec is not None
    for n in range(max(spec.min_args, 1), (spec.max_args or 1) + 1):
        args = ["x", "90"][:n] if name.startswith("percentile") else ["x", "3"][:n]
        assert f.aggregate_sql(name, args).count("(") >= 1
    if spec.max_args is not None:
        with pytest.raises(PplSemanticError, match=rf"^{name} expects"):
            f.aggregate_sql(name, _args(spec.max_args + 1))


def test_arity_messages_say_what_is_expected() -> None:
    with pytest.raises(PplSemanticError, match=r"^abs expects 1 argument, got 2$"):
        f.scalar_sql("abs", ["1", "2"])
    with pytest.raises(PplSemanticError, match=r"^substring expects 2 or 3 arguments, got 1$"):
        f.scalar_sql("substring", ["x"])
    with pytest.raises(PplSemanticError, match=r"^concat_ws expects at least 2 arguments, got 1$"):
        f.scalar_sql("concat_ws", ["','"])
    with pytest.raises(PplSemanticError, match=r"^pi expects 0 arguments, got 1$"):
        f.scalar_sql("pi", ["1"])


def test_unknown_names_use_the_references_wording() -> None:
    with pytest.raises(PplSemanticError, match=r"^foo is not a builtin function of PPL$"):
        f.scalar_sql("foo", [])
    with pytest.raises(PplSemanticError, match=r"^GET_FORMAT is not a builtin function of PPL$"):
        f.scalar_sql("GET_FORMAT", ["1"])
    # what Spark cannot express is refused with the reason
    with pytest.raises(PplSemanticError, match=r"^json_delete is not supported on Spark: Spark SQL has no function"):
        f.scalar_sql("json_delete", ["'{}'", "array('a')"])
    with pytest.raises(PplSemanticError, match="Unsupported aggregation function: foo"):
        f.aggregate_sql("foo", ["x"])
    assert not f.is_aggregate("foo")
    assert not f.is_aggregate("abs")


def test_relevance_and_misplaced_functions_are_explained() -> None:
    with pytest.raises(PplSemanticError, match="Relevance function match is not supported"):
        f.scalar_sql("match", ["a", "'b'"])
    with pytest.raises(PplSemanticError, match="aggregation function; use it in stats"):
        f.scalar_sql("avg", ["x"])
    with pytest.raises(PplSemanticError, match="abs is not an aggregation function"):
        f.aggregate_sql("abs", ["x"])


def test_names_are_case_insensitive() -> None:
    assert f.scalar_sql("LeNgTh", ["name"]) == f.scalar_sql("length", ["name"]) == "length(name)"
    assert f.is_aggregate("COUNT") and f.is_aggregate("Dc")
    assert f.aggregate_sql("SUM", ["x"]) == "sum(x)"
    assert f.cast_sql("x", "INTEGER") == "CAST(x AS INT)"


def test_listings() -> None:
    scalars, aggregates = f.scalar_names(), f.aggregate_names()
    assert scalars == sorted(scalars) and aggregates == sorted(aggregates)
    assert not set(scalars) & set(aggregates)
    assert {"concat", "round", "date_format", "isblank", "json_extract", "cidrmatch"} <= set(scalars)
    assert {"count", "dc", "distinct_count", "percentile", "take", "stddev_samp", "var_pop"} <= set(aggregates)
    families = f.names_by_family()
    assert set(families) == {
        "string",
        "math",
        "datetime",
        "condition",
        "cryptographic",
        "json",
        "collection",
        "ip",
        "aggregation",
    }
    assert sum(len(v) for v in families.values()) == len(scalars) + len(aggregates)


def test_aggregations() -> None:
    assert f.aggregate_sql("count", []) == "count(*)"
    assert f.aggregate_sql("count", ["x"]) == "count(x)"
    assert f.aggregate_sql("count", ["x"], distinct=True) == "count(DISTINCT x)"
    assert f.aggregate_sql("dc", ["x"]) == "count(DISTINCT x)"
    assert f.aggregate_sql("distinct_count", ["x"]) == "count(DISTINCT x)"
    assert f.aggregate_sql("avg", ["x"], distinct=True) == "avg(DISTINCT x)"
    assert f.aggregate_sql("stddev", ["x"]) == "stddev_pop(x)"
    assert f.aggregate_sql("variance", ["x"]) == "var_pop(x)"
    # the value at the rank, as the reference's pages answer (not an interpolation)
    assert f.aggregate_sql("percentile", ["x", "90"]) == "percentile_disc(0.9) WITHIN GROUP (ORDER BY x)"
    assert f.aggregate_sql("percentile_approx", ["x", "50"]) == "percentile_approx(x, 0.5)"
    assert f.aggregate_sql("percentile_approx", ["x", "p"]) == "percentile_approx(x, ((p) / 100.0))"
    assert f.aggregate_sql("take", ["x"]) == "slice(collect_list(x), 1, 10)"
    assert f.aggregate_sql("take", ["x", "2"]) == "slice(collect_list(x), 1, 2)"
    with pytest.raises(PplSemanticError, match="'percent': 101"):
        f.aggregate_sql("percentile", ["x", "101"])


def test_operands_are_parenthesised() -> None:
    assert f.scalar_sql("like", ["a || b", "'x%'"]) == "((a || b) LIKE ('x%'))"
    assert f.scalar_sql("isnull", ["a + 1"]) == "((a + 1) IS NULL)"
    assert f.scalar_sql("if", ["a > 1", "b", "c"]) == "(CASE WHEN (a > 1) THEN (b) ELSE (c) END)"
    assert f.scalar_sql("position", ["'w'", "s"]) == "position(('w') IN (s))"


def test_argument_conventions() -> None:
    assert f.scalar_sql("log", ["x"]) == "ln(x)"
    assert f.scalar_sql("log", ["2", "x"]) == "log(2, x)"  # base first
    assert f.scalar_sql("atan", ["y", "x"]) == "atan2(y, x)"
    assert f.scalar_sql("week", ["d"]) == "weekofyear(d)"
    assert f.scalar_sql("timestampadd", ["'day'", "17", "t"]) == "timestampadd(DAY, 17, t)"
    assert f.scalar_sql("timestampdiff", ["YEAR", "a", "b"]) == "timestampdiff(YEAR, a, b)"
    assert f.scalar_sql("extract", ["'year'", "d"]) == "extract(YEAR FROM d)"
    with pytest.raises(PplSemanticError, match="Unsupported interval unit: FORTNIGHT"):
        f.scalar_sql("timestampadd", ["'fortnight'", "1", "t"])


def test_date_add_with_days_or_an_interval() -> None:
    # a date stays a date and a timestamp keeps its time of day; a date as a string is Spark's date_add
    assert f.scalar_sql("adddate", ["d", "1"]) == "((d) + make_interval(0, 0, 0, (1), 0, 0, 0))"
    assert f.scalar_sql("subdate", ["d", "1"]) == "((d) - make_interval(0, 0, 0, (1), 0, 0, 0))"
    assert f.scalar_sql("adddate", ["'2020-01-01'", "1"]) == "date_add('2020-01-01', 1)"
    interval = f.interval_sql("2", "QUARTER")
    assert interval == "make_interval(0, (2) * 3, 0, 0, 0, 0, 0)"
    assert f.scalar_sql("date_add", ["d", interval]) == f"((d) + ({interval}))"
    assert f.scalar_sql("date_sub", ["d", "INTERVAL 2 DAY"]) == "((d) - (INTERVAL 2 DAY))"
    with pytest.raises(PplSemanticError, match="interval unit"):
        f.interval_sql("1", "'eon'")


def test_literal_strings() -> None:
    assert f.literal_string("'abc'") == "abc"
    assert f.literal_string('"a\\"b"') == 'a"b'
    assert f.literal_string("'it''s'") == "it's"
    assert f.literal_string("'a\\\\b'") == "a\\b"
    assert f.literal_string("'a' || 'b'") is None
    assert f.literal_string("col") is None
    for value in ("plain", "it's", "back\\slash", "%Y-%m"):
        assert f.literal_string(f.sql_string(value)) == value


@pytest.mark.parametrize(
    ("mysql", "spark"),
    [
        ("%Y-%m-%d", "yyyy-MM-dd"),
        ("%Y-%m-%d %H:%i:%s", "yyyy-MM-dd HH:mm:ss"),
        ("%y/%c/%e %k:%i:%S.%f", "yy/M/d H:mm:ss.SSSSSS"),
        ("%a %b %W %M", "EEE MMM EEEE MMMM"),
        ("%h:%i %p", "hh:mm a"),
        ("%I %l", "hh h"),
        ("%r", "hh:mm:ss a"),
        ("%T", "HH:mm:ss"),
        ("%j", "DDD"),
        ("100%%", "100%"),
        ("%Y at %H", "yyyy' at 'HH"),
        ("%z", "'z'"),
        ("it's %Y", "'it''s 'yyyy"),
        ("[%Y]", "'['yyyy']'"),
    ],
)
def test_mysql_specifiers_to_spark_patterns(mysql: str, spark: str) -> None:
    assert f.mysql_format_to_spark(mysql) == spark


def test_date_format_specifiers_without_a_pattern() -> None:
    segments = f.mysql_format_segments("%M %D, %Y (%w)")
    assert [kind for kind, _ in segments] == ["pattern", "expr", "pattern", "expr", "pattern"]
    sql = f.scalar_sql("date_format", ["d", "'%D'"])
    assert sql.startswith("concat(CAST(dayofmonth((d)) AS STRING)")
    with pytest.raises(PplSemanticError, match="Unsupported date_format specifier: %U"):
        f.scalar_sql("date_format", ["d", "'%U'"])
    with pytest.raises(PplSemanticError, match="no Spark pattern"):
        f.mysql_format_to_spark("%D")


def test_date_format_passes_spark_patterns_through() -> None:
    assert f.scalar_sql("date_format", ["d", "'yyyy-MMM-dd'"]) == "date_format(d, 'yyyy-MMM-dd')"
    assert f.scalar_sql("date_format", ["d", "fmt"]) == "date_format(d, fmt)"
    assert f.scalar_sql("date_format", ["d", "'%Y'"]) == "date_format(d, 'yyyy')"
    assert f.scalar_sql("from_unixtime", ["n", "'HH:mm:ss'"]) == "from_unixtime(n, 'HH:mm:ss')"
    assert f.scalar_sql("from_unixtime", ["n", "'%H'"]) == "date_format(timestamp_seconds(n), 'HH')"


def test_cast() -> None:
    assert f.cast_sql("x", "string") == "CAST(x AS STRING)"
    assert f.cast_sql("x", "long") == "CAST(x AS BIGINT)"
    assert f.cast_sql("x", "Timestamp") == "CAST(x AS TIMESTAMP)"
    assert set(f.cast_type_names()) >= {"string", "int", "integer", "long", "float", "double", "boolean", "date"}
    assert f.cast_sql("x", "time") == "date_format(CAST(x AS TIMESTAMP), 'HH:mm:ss')"
    for bad in ("varchar", ""):
        with pytest.raises(PplSemanticError, match="Unsupported data type for cast"):
            f.cast_sql("x", bad)


def test_relative_timestamps() -> None:
    assert f.relative_timestamp_sql("now", "T") == "T"
    assert f.relative_timestamp_sql("NOW") == "current_timestamp()"
    assert f.relative_timestamp_sql("@d", "T") == "date_trunc('DAY', T)"
    assert f.relative_timestamp_sql("-1d@d", "T") == "date_trunc('DAY', (T + make_interval(0, 0, 0, (-1), 0, 0, 0)))"
    assert f.relative_timestamp_sql("+month", "T") == "(T + make_interval(0, (1), 0, 0, 0, 0, 0))"
    assert f.scalar_sql("relative_timestamp", ["'@y'"]) == "date_trunc('YEAR', current_timestamp())"
    assert f.scalar_sql("earliest", ["'now'", "ts"]) == "(current_timestamp() <= (ts))"
    assert f.scalar_sql("latest", ["'now'", "ts"]) == "(current_timestamp() >= (ts))"
    for bad, message in (
        ("yesterday", "relative date time 'yesterday' is not supported"),
        ("-1fortnight", "relative date time unit 'fortnight' is not supported"),
        ("@decade", "relative date time unit 'decade' is not supported"),
        ("", "relative date time '' is not supported"),
    ):
        with pytest.raises(PplSemanticError, match=message):
            f.relative_timestamp_sql(bad)
    # a field's relative time strings are read when the query runs
    dynamic = f.scalar_sql("relative_timestamp", ["relative_string"])
    assert "regexp_extract(lower(trim(relative_string))" in dynamic and "raise_error" in dynamic


def test_arguments_as_the_translator_renders_them() -> None:
    # A bare unit word arrives as a quoted field name; a decimal literal as a double (90.0D).
    assert f.scalar_sql("timestampadd", ["`DAY`", "1", "t"]) == "timestampadd(DAY, 1, t)"
    assert f.aggregate_sql("percentile", ["x", "90.0D"]) == "percentile_disc(0.9) WITHIN GROUP (ORDER BY x)"
    assert f.scalar_sql("date_format", ["d", "'it\\'s %Y'"]) == "date_format(d, '\\'it\\'\\'s \\'yyyy')"
