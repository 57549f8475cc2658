"""PPL to Spark SQL text, command by command, with a fake ``columns`` callback (the job asks Spark)."""

from __future__ import annotations

import re

import pytest

from query_core.ppl import PplSemanticError, PplSyntaxError, to_spark_sql
from query_core.ppl.translate import grok_regex, named_groups, quote_name, string_sql

T_COLUMNS = ["id", "name", "age", "ts", "msg"]


class Columns:
    """A fake ``columns``: ``t`` has :data:`T_COLUMNS`, ``dim`` has ``uid, dept, floor``; each call
    is recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, sql: str) -> list[str]:
        self.calls.append(sql)
        if sql == "SELECT * FROM dim":
            return ["uid", "dept", "floor"]
        return list(T_COLUMNS)


def sql(ppl: str, columns: Columns | None = None) -> str:
    return to_spark_sql(ppl, columns if columns is not None else Columns())


def no_columns(text: str) -> list[str]:
    raise AssertionError(f"columns() called for {text}")


def test_source_is_the_table_as_written() -> None:
    assert to_spark_sql("source=t", no_columns) == "SELECT * FROM t"
    assert to_spark_sql("source=myglue.default.http_logs", no_columns) == "SELECT * FROM myglue.default.http_logs"
    assert to_spark_sql("source=ds.`my db`.`logs-2024`", no_columns) == "SELECT * FROM ds.`my db`.`logs-2024`"


def test_inline_filters_and_where() -> None:
    assert to_spark_sql("source=t a=1 b>'x'", no_columns) == "SELECT * FROM t WHERE ((a = 1) AND (b > 'x'))"
    assert (
        to_spark_sql("source=t | where a != 1 or not b xor c in (1, 2)", no_columns)
        == "SELECT * FROM t WHERE ((a != 1) OR ((NOT b) <> (c IN (1, 2))))"
    )
    assert to_spark_sql("search a = 1 source = t | where b = 2", no_columns) == (
        "SELECT * FROM t WHERE (a = 1) AND (b = 2)"
    )


def test_not_in_and_between() -> None:
    text = to_spark_sql("source=t | where a not in (1, 2) and b between 1 and c + 1", no_columns)
    assert text.endswith("WHERE ((NOT (a IN (1, 2))) AND (b BETWEEN 1 AND (c + 1)))")
    assert "(NOT (b BETWEEN 'x' AND 'y'))" in to_spark_sql("source=t b not between 'x' and 'y'", no_columns)


def test_subsearches_in_expressions() -> None:
    assert to_spark_sql("source=t | where a not in [ source = u | fields b ]", no_columns) == (
        "SELECT * FROM t WHERE (NOT (a IN (SELECT b FROM u)))"
    )
    assert to_spark_sql("source=t as o exists [ source=u | where u.c = o.c ] | head 1", no_columns) == (
        "SELECT * FROM t AS o WHERE (EXISTS (SELECT * FROM u WHERE (u.c = o.c))) LIMIT 1"
    )
    scalar = to_spark_sql("source=t | where a > [ source = u | stats avg(x) ]", no_columns)
    assert scalar == "SELECT * FROM t WHERE (a > (SELECT avg(x) AS `avg(x)` FROM u))"
    assert to_spark_sql("source=t | where (a, b) in [ source = u | fields x, y ]", no_columns) == (
        "SELECT * FROM t WHERE ((a, b) IN (SELECT x, y FROM u))"
    )


def test_source_alias_qualifies_the_next_stage_and_a_join() -> None:
    assert to_spark_sql("source=t as x | where x.a = 1 | fields x.a", no_columns) == (
        "SELECT x.a FROM t AS x WHERE (x.a = 1)"
    )
    assert to_spark_sql("source=t as x | join ON x.a = y.a u as y", no_columns) == (
        "SELECT * FROM t AS x INNER JOIN u AS y ON (x.a = y.a)"
    )


def test_literals_and_names() -> None:
    text = to_spark_sql(
        'source=t | where `a b` = "it\'s" and c = 1.5 and d = true and e = null and @f = -2 and g > .06', no_columns
    )
    assert "(`a b` = 'it\\'s')" in text
    assert "(c = 1.5)" in text and "(d = TRUE)" in text and "(e = NULL)" in text and "(`@f` = -2)" in text
    assert "(g > 0.06)" in text  # an exact decimal, as in Spark SQL
    dates = to_spark_sql("source=t | where d > DATE '2020-01-01' and ts < timestamp '2020-01-01 10:00:00'", no_columns)
    assert "(d > DATE '2020-01-01')" in dates and "(ts < TIMESTAMP '2020-01-01 10:00:00')" in dates
    # date and interval stay field names where no literal follows
    assert to_spark_sql("source=t | where date > 1 and interval < 2", no_columns).endswith(
        "WHERE ((date > 1) AND (`interval` < 2))"
    )


def test_case_and_cast() -> None:
    text = to_spark_sql("source=t | eval x = case(a = 1, 'one', a = 2, 'two' else 'many')", Columns())
    assert "CASE WHEN (a = 1) THEN 'one' WHEN (a = 2) THEN 'two' ELSE 'many' END AS x" in text
    assert "CAST(a AS INT)" in sql("source=t | eval y = cast(a as int)")


def test_fields_include_and_exclude() -> None:
    assert to_spark_sql("source=t | fields id, name", no_columns) == "SELECT id, name FROM t"
    assert to_spark_sql("source=t | fields - age, TS", no_columns) == "SELECT * EXCEPT (age, TS) FROM t"
    # the columns are known after `fields`: no EXCEPT
    assert to_spark_sql("source=t | fields a, b | fields - a", no_columns) == "SELECT b FROM t"
    # a field that `fields` dropped is not there any more: the next command reads the result
    assert to_spark_sql("source=t | fields a | where b > 1", no_columns) == (
        "SELECT * FROM (SELECT a FROM t) AS _s1 WHERE (b > 1)"
    )


def test_fields_minus_unknown_is_spark_unresolved_column() -> None:
    with pytest.raises(PplSemanticError, match=r"\[UNRESOLVED_COLUMN\].*`nope` cannot be resolved"):
        to_spark_sql("source=t | fields a, b | fields - nope", no_columns)


def test_stats_names_and_order() -> None:
    text = to_spark_sql("source=t | stats count(), avg(age) as a, percentile(age, 90) by name", no_columns)
    assert text == (
        "SELECT count(*) AS `count()`, avg(age) AS a, percentile_disc(0.9) WITHIN GROUP (ORDER BY age)"
        " AS `percentile(age, 90)`, name"
        " FROM t GROUP BY name"
    )
    # an aggregation is named as written, spaces and case included
    assert "min(x) AS `MIN( x )`" in to_spark_sql("source=t | stats MIN( x )", no_columns)


def test_stats_span_is_the_last_group_and_named_as_the_reference() -> None:
    text = to_spark_sql("source=t | stats count() by span(age, 10), name", no_columns)
    assert text == (
        "SELECT count(*) AS `count()`, name, (floor(age / 10) * 10) AS `span(age,10)` FROM t"
        " GROUP BY name, (floor(age / 10) * 10)"
    )
    dotted = to_spark_sql("source=t | stats max(x) by s.f", no_columns)
    assert "s.f AS `s.f`" in dotted


@pytest.mark.parametrize(
    ("interval", "fragment"),
    [
        ("30s", "unix_seconds(CAST(ts AS TIMESTAMP)) / 30) * 30"),
        ("1h", "/ 3600) * 3600"),
        ("2d", "/ 172800) * 172800"),
        ("1w", "/ 604800) * 604800"),
        ("5m", "/ 300) * 300"),
        ("10minutes", "/ 600) * 600"),
        ("100ms", "timestamp_millis(floor(unix_millis(CAST(ts AS TIMESTAMP)) / 100) * 100)"),
        ("1M", "floor(((year(CAST(ts AS TIMESTAMP)) - 1970) * 12 + month(CAST(ts AS TIMESTAMP)) - 1) / 1) * 1"),
        ("1q", "/ 3) * 3 AS INT"),
        ("2y", "/ 24) * 24 AS INT"),
    ],
)
def test_time_spans(interval: str, fragment: str) -> None:
    text = to_spark_sql(f"source=t | stats count() by span(ts, {interval}) as b", no_columns)
    assert fragment in text


def test_span_interval_must_be_positive() -> None:
    with pytest.raises(PplSemanticError):
        to_spark_sql("source=t | stats count() by span(age, 0)", no_columns)


def test_interval_outside_span_is_an_error() -> None:
    with pytest.raises(PplSemanticError, match="span"):
        to_spark_sql("source=t | where a = 1h", no_columns)


def test_eventstats_is_a_window_and_keeps_rows() -> None:
    text = to_spark_sql("source=t | eventstats avg(age) as a, count() by name, span(age, 5)", no_columns)
    assert text == (
        "SELECT *, avg(age) OVER (PARTITION BY name, (floor(age / 5) * 5)) AS a,"
        " count(*) OVER (PARTITION BY name, (floor(age / 5) * 5)) AS `count()` FROM t"
    )
    assert "max(age) OVER () AS `max(age)`" in to_spark_sql("source=t | eventstats max(age)", no_columns)


def test_a_distinct_count_in_eventstats_is_the_size_of_the_window_set() -> None:
    # Spark has no DISTINCT aggregation over a window (DISTINCT_WINDOW_FUNCTION_UNSUPPORTED).
    text = to_spark_sql("source=t | eventstats dc(name) as n by city", no_columns)
    assert "size(collect_set(name) OVER (PARTITION BY city)) AS n" in text
    assert "DISTINCT" not in text


def test_sort() -> None:
    assert to_spark_sql("source=t | sort a, - b", no_columns).endswith(" ORDER BY a ASC NULLS FIRST, b DESC NULLS LAST")


def test_head() -> None:
    assert to_spark_sql("source=t | head", no_columns).endswith(" LIMIT 10")
    assert to_spark_sql("source=t | head 3 from 4", no_columns).endswith(" LIMIT 3 OFFSET 4")


def test_eval_new_and_replaced_fields_in_one_columns_call() -> None:
    columns = Columns()
    text = sql("source=t | eval x = age + 1, age = x * 2, y = x", columns)
    assert len(columns.calls) == 1
    # one block: a field defined earlier is replaced by its definition, the replaced age keeps its place
    assert text == "SELECT id, name, ((age + 1) * 2) AS age, ts, msg, (age + 1) AS x, (age + 1) AS y FROM t"
    assert to_spark_sql("source=t | fields a | eval b = a + 1 | where b > 2", no_columns) == (
        "SELECT a, (a + 1) AS b FROM t WHERE ((a + 1) > 2)"
    )


def test_a_wide_eval_keeps_every_column_in_order_and_a_replaced_one_in_its_place() -> None:
    """Thousands of assignments (each added without copying those before), then assignments that
    replace one of them and a column of the table: each keeps its place."""
    assignments = ", ".join(f"c{i} = age + {i}" for i in range(3_000))
    text = sql(f"source=t | eval {assignments} | eval c7 = 0, name = 'n', C9 = 1")
    select = text.removeprefix("SELECT ").split(" FROM ")[0].split(", ")
    assert select[:5] == ["id", "'n' AS name", "age", "ts", "msg"]
    assert select[5 + 7] == "0 AS c7"
    assert select[5 + 9] == "1 AS C9"
    assert select[5 + 2_999] == "(age + 2999) AS c2999"
    assert len(select) == 5 + 3_000


def test_dedup() -> None:
    text = to_spark_sql("source=t | dedup 2 name, age", no_columns)
    assert text == (
        "SELECT * EXCEPT (__ppl_dedup_rn) FROM (SELECT *, row_number() OVER (PARTITION BY name, age ORDER BY name, age)"
        " AS __ppl_dedup_rn FROM t) AS _s1 WHERE (__ppl_dedup_rn <= 2 AND name IS NOT NULL AND age IS NOT NULL)"
    )
    assert to_spark_sql("source=t | dedup name keepempty=true", no_columns).endswith(
        "WHERE (__ppl_dedup_rn <= 1 OR name IS NULL)"
    )
    with pytest.raises(PplSemanticError, match="Consecutive"):
        sql("source=t | dedup name consecutive=true")


def test_rename() -> None:
    # as in the reference, a renamed field comes last
    assert to_spark_sql("source=t | rename name as who, age as years", no_columns) == (
        "SELECT * EXCEPT (name, age), name AS who, age AS years FROM t"
    )
    assert to_spark_sql("source=t | fields a, b | rename a as c", no_columns) == "SELECT b, a AS c FROM t"
    assert sql("source=t | rename *e as *_x") == "SELECT * EXCEPT (name, age), name AS nam_x, age AS ag_x FROM t"
    with pytest.raises(PplSemanticError, match="UNRESOLVED_COLUMN"):
        to_spark_sql("source=t | fields a | rename nope as x", no_columns)


def test_top_and_rare() -> None:
    # N per group of the by fields; ties go by the values, so the answer is stable
    assert to_spark_sql("source=t | top 3 name by age", no_columns) == (
        "SELECT count_name, name, age FROM (SELECT count(*) AS count_name, name, age, row_number() OVER"
        " (PARTITION BY age ORDER BY count(*) DESC, name ASC) AS __ppl_rank FROM t GROUP BY name, age) AS _s1"
        " WHERE __ppl_rank <= 3 ORDER BY age ASC, count_name DESC, name ASC"
    )
    assert to_spark_sql("source=t | rare name", no_columns).endswith(
        "GROUP BY name ORDER BY count_name ASC, name ASC LIMIT 10"
    )
    # an earlier sort orders rows the grouping no longer has: dropped, as stats drops it
    for text in ("source=t | sort a, - b | rare 9 name by age", "source=t | sort a | top name"):
        assert "ORDER BY a ASC" not in to_spark_sql(text, no_columns)


def test_parse_adds_or_replaces_fields() -> None:
    text = sql(r"source=t | parse msg '(?<user_name>\w+)@(?<name>.+)'")
    assert text == (
        r"SELECT id, regexp_extract(msg, '(\\w+)@(.+)', 2) AS name, age, ts, msg,"
        r" regexp_extract(msg, '(\\w+)@(.+)', 1) AS user_name FROM t"
    )
    with pytest.raises(PplSemanticError, match="named group"):
        sql("source=t | parse msg '.*'")


def test_named_groups_are_numbered_as_java_does() -> None:
    found = named_groups(r"(a)(?:b)(?<x>c[(]\()(?=d)(?<y>e)(?<!f)")
    assert found.regex == r"(a)(?:b)(c[(]\()(?=d)(e)(?<!f)"
    assert found.groups == (("x", 2), ("y", 3))


def test_grok_patterns() -> None:
    regex = grok_regex("%{IP:ip} %{WORD} %{NUMBER:n:int}")
    assert regex.startswith("(?<ip>") and "(?<WORD>" in regex
    assert re.fullmatch(grok_regex("%{IP:ip}").replace("(?<ip>", "(?P<ip>"), "10.1.2.3")
    for name in ("INT", "NUMBER", "IP", "GREEDYDATA", "DATA", "EMAILADDRESS", "COMMONAPACHELOG", "WORD", "HOSTNAME"):
        assert grok_regex(f"%{{{name}}}")
    common = grok_regex("%{COMMONAPACHELOG}")
    assert all(f"(?<{n}>" in common for n in ("COMMONAPACHELOG", "clientip", "timestamp", "response", "bytes"))
    line = '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326'
    match = re.fullmatch(re.sub(r"\(\?<(\w+)>", r"(?P<\1>", common), line)
    assert match is not None and match.group("response") == "200" and match.group("verb") == "GET"
    with pytest.raises(PplSemanticError, match="Unknown grok pattern"):
        grok_regex("%{NOPE}")


def test_grok_translates_like_parse() -> None:
    text = sql("source=t | grok msg '%{WORD:w} %{INT:n}'")
    assert "regexp_extract(msg, '(\\\\b\\\\w+\\\\b) ([+-]?[0-9]+)', 1) AS w" in text
    assert "regexp_extract(msg, '(\\\\b\\\\w+\\\\b) ([+-]?[0-9]+)', 2) AS n" in text


def test_fillnull_moves_filled_fields_last() -> None:
    assert to_spark_sql("source=t | fillnull with 0 in age, id", no_columns) == (
        "SELECT * EXCEPT (age, id), coalesce(age, 0) AS age, coalesce(id, 0) AS id FROM t"
    )
    assert to_spark_sql("source=t | fillnull using msg = 'none', age = id * 2", no_columns) == (
        "SELECT * EXCEPT (msg, age), coalesce(msg, 'none') AS msg, coalesce(age, (id * 2)) AS age FROM t"
    )
    assert to_spark_sql("source=t | fields id, age | fillnull with 1", no_columns) == (
        "SELECT coalesce(id, 1) AS id, coalesce(age, 1) AS age FROM t"
    )
    columns = Columns()
    assert sql("source=t | fillnull with 0", columns).startswith("SELECT * EXCEPT (id, name, age, ts, msg), coalesce")
    assert columns.calls == ["SELECT * FROM t"]


def test_trendline() -> None:
    text = to_spark_sql("source=t | trendline sort - ts sma(2, age) as s", no_columns)
    window = "OVER (ORDER BY ts DESC NULLS LAST ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)"
    assert text == (
        f"SELECT *, CASE WHEN count(*) {window} >= 2 THEN avg(age) {window} END AS s FROM t ORDER BY ts DESC NULLS LAST"
    )
    wma = to_spark_sql("source=t | trendline sort ts wma(3, age)", no_columns)
    assert (
        "(1 * nth_value(age, 1) OVER" in wma
        and "+ 3 * nth_value(age, 3) OVER" in wma
        and ") / 6 END AS age_trendline" in wma
    )
    with pytest.raises(PplSemanticError, match="sort"):
        to_spark_sql("source=t | trendline wma(3, age)", no_columns)


def test_lookup_replace_append_and_all_fields() -> None:
    # REPLACE: the looked-up value (null where nothing matched); an input field is replaced and moves last
    replace = sql("source=t | lookup dim uid as id replace dept, floor as age")
    assert replace == (
        "SELECT _s1.* EXCEPT (_s1.age), _s2.dept, _s2.floor AS age FROM (SELECT * FROM t) AS _s1"
        " LEFT OUTER JOIN dim AS _s2 ON _s2.uid = _s1.id"
    )
    append = sql("source=t | lookup dim uid as id append floor as age, dept")
    assert "coalesce(_s1.age, _s2.floor) AS age, _s2.dept FROM" in append
    columns = Columns()
    every = sql("source=t | lookup dim uid as id", columns)
    assert columns.calls == ["SELECT * FROM t", "SELECT * FROM dim"]
    assert every.startswith("SELECT _s1.*, _s2.dept, _s2.floor FROM")


def test_join_keeps_aliases_for_the_next_stage() -> None:
    text = to_spark_sql(
        "source=t | where a > 1 | left join left = l right = r ON l.id = r.id [ source = u | head 5 ]"
        " | where r.x = 1 | fields l.id, r.x",
        no_columns,
    )
    assert text == (
        "SELECT l.id, r.x FROM (SELECT * FROM t WHERE (a > 1)) AS l LEFT OUTER JOIN"
        " (SELECT * FROM u LIMIT 5) AS r ON (l.id = r.id) WHERE (r.x = 1)"
    )
    # a chain of joins is one FROM, so a correlated subsearch sees every alias (TPC-H Q21)
    chain = to_spark_sql(
        "source = s | join ON s.k = l1.k l as l1 | join ON o.k = l1.o o"
        " | where exists [ source = l as l2 | where l2.o = l1.o ] | eval x = l1.v | stats count() by x",
        Columns(),
    )
    assert chain == (
        "SELECT count(*) AS `count()`, l1.v AS x FROM s INNER JOIN l AS l1 ON (s.k = l1.k) INNER JOIN o ON (o.k = l1.o)"
        " WHERE (EXISTS (SELECT * FROM l AS l2 WHERE (l2.o = l1.o))) GROUP BY l1.v"
    )


@pytest.mark.parametrize(
    ("kind", "keywords"),
    [
        ("", "INNER JOIN"),
        ("inner", "INNER JOIN"),
        ("left", "LEFT OUTER JOIN"),
        ("right outer", "RIGHT OUTER JOIN"),
        ("full", "FULL OUTER JOIN"),
        ("cross", "CROSS JOIN"),
        ("left semi", "LEFT SEMI JOIN"),
        ("anti", "LEFT ANTI JOIN"),
    ],
)
def test_join_kinds(kind: str, keywords: str) -> None:
    text = to_spark_sql(f"source=t | {kind} join ON t.a = o.b ds.db.other as o", no_columns)
    assert text == f"SELECT * FROM t {keywords} ds.db.other AS o ON (t.a = o.b)"


def test_describe_and_explain() -> None:
    assert to_spark_sql("describe ds.db.`my-table`", no_columns) == "DESCRIBE TABLE ds.db.`my-table`"
    assert to_spark_sql("explain simple | source=t", no_columns) == "EXPLAIN SELECT * FROM t"
    for mode in ("extended", "cost", "codegen", "formatted"):
        assert to_spark_sql(f"explain {mode} | source=t | head 1", no_columns).startswith(
            f"EXPLAIN {mode.upper()} SELECT"
        )


def test_function_calls_go_through_the_function_table() -> None:
    assert "abs(" in to_spark_sql("source=t | where abs(a) > 1", no_columns).lower()
    with pytest.raises(PplSemanticError):
        to_spark_sql("source=t | where no_such_function(a) > 1", no_columns)
    with pytest.raises(PplSemanticError):
        to_spark_sql("source=t | stats no_such_aggregation(a)", no_columns)


def test_syntax_errors_come_through() -> None:
    with pytest.raises(PplSyntaxError):
        to_spark_sql("source=t | nope", no_columns)


def test_deep_nesting_is_a_semantic_error_not_a_crash() -> None:
    deep = "source=t | where " + "not " * 20000 + "a"
    with pytest.raises(PplSemanticError, match="nested too deeply"):
        to_spark_sql(deep, no_columns)


def test_quoting_helpers() -> None:
    assert quote_name("abc_1") == "abc_1"
    assert quote_name("select") == "`select`"
    assert quote_name("a`b") == "`a``b`"
    assert string_sql("it's \\ here") == "'it\\'s \\\\ here'"
