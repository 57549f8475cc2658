"""PPL on Spark: every command's translation runs on a small table and gives the same rows and
column names as a hand-written Spark SQL equivalent."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from query_core.ppl import PplSemanticError, to_spark_sql
from query_core.ppl.translate import GROK_PATTERNS, grok_regex, named_groups, string_sql

pytestmark = pytest.mark.spark

DEPTS = ["eng"] * 10 + ["ops"] * 7 + ["sales"] * 5 + ["hr"] * 3 + [None] * 2
VERBS = ["GET", "POST", "PUT"]


def _person(i: int) -> tuple[Any, ...]:
    dept = DEPTS[i]
    age = None if i % 9 == 4 else 20 + (i * 7) % 40
    salary = None if i % 11 == 6 else 1000.0 + i * 250.5
    ts = dt.datetime(2024, 1 + i % 3, 1 + i % 5, i % 24, (i * 13) % 60, 0)
    msg = f"10.0.{i % 4}.{i} {VERBS[i % 3]} {200 + (i % 3) * 100} /path/{i}"
    email = None if i % 8 == 7 else f"user{i}@host{i % 3}.example.com"
    return (i, f"name{i:02d}", dept, age, salary, ts, msg, email)


PEOPLE = [_person(i) for i in range(len(DEPTS))]
PEOPLE_SCHEMA = "id INT, name STRING, dept STRING, age INT, salary DOUBLE, ts TIMESTAMP, msg STRING, email STRING"
DEPT_ROWS = [("eng", 3, "ann", None), ("ops", 1, None, "b1"), ("hr", 2, "hal", "b2"), ("legal", 4, "lee", "b3")]
DEPT_SCHEMA = "dept STRING, floor INT, manager STRING, building STRING"


@pytest.fixture(scope="module")
def tables(spark: Any) -> Iterator[Any]:
    """Temp views ``ppl_people`` (27 rows with nulls) and ``ppl_depts`` (the lookup/join side)."""
    spark.createDataFrame(PEOPLE, PEOPLE_SCHEMA).createOrReplaceTempView("ppl_people")
    spark.createDataFrame(DEPT_ROWS, DEPT_SCHEMA).createOrReplaceTempView("ppl_depts")
    yield spark
    spark.catalog.dropTempView("ppl_people")
    spark.catalog.dropTempView("ppl_depts")


def _run(spark: Any, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    frame = spark.sql(sql)
    return frame.columns, [tuple(row) for row in frame.collect()]


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, repr(value)) for value in row)


def check(spark: Any, ppl: str, sql: str, ordered: bool = False) -> list[tuple[Any, ...]]:
    """The PPL query and the SQL give the same column names and rows (in order when ``ordered``)."""
    translated = to_spark_sql(ppl, lambda text: list(spark.sql(text).columns))
    got_columns, got = _run(spark, translated)
    want_columns, want = _run(spark, sql)
    assert got_columns == want_columns, translated
    if not ordered:
        got, want = sorted(got, key=_key), sorted(want, key=_key)
    assert got == want, translated
    return got


def unresolved(spark: Any, ppl: str) -> None:
    """The query names a field its input does not have: an analysis error in Spark's words, found
    by the translation (when it knows the columns) or by Spark."""
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN") as caught:
        spark.sql(to_spark_sql(ppl, lambda text: list(spark.sql(text).columns))).schema  # noqa: B018
    assert type(caught.value).__name__ in ("PplSemanticError", "AnalysisException")


def test_search_with_inline_filters(tables: Any) -> None:
    check(tables, "source=ppl_people age > 30 dept = 'eng'", "SELECT * FROM ppl_people WHERE age > 30 AND dept = 'eng'")
    rows = check(tables, "search source = ppl_people id < 5", "SELECT * FROM ppl_people WHERE id < 5")
    assert len(rows) == 5


def test_where(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | where (age > 30 or dept = 'ops') and not id in (1, 2, 3) | where name != 'name05'",
        "SELECT * FROM ppl_people WHERE (age > 30 OR dept = 'ops') AND NOT id IN (1, 2, 3) AND name <> 'name05'",
    )
    check(
        tables,
        "source=ppl_people | where age >= 30 xor dept = 'eng' | where isnotnull(age)",
        "SELECT * FROM ppl_people WHERE (age >= 30) <> (dept = 'eng') AND age IS NOT NULL",
    )


def test_not_in_and_between(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people age between 30 and 40 | where dept not in ('eng', 'hr') | where not salary between 1 and 3000",
        "SELECT * FROM ppl_people WHERE age BETWEEN 30 AND 40 AND dept NOT IN ('eng', 'hr')"
        " AND NOT salary BETWEEN 1 AND 3000",
    )


def test_subsearches(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | where dept in [ source = ppl_depts | where floor > 1 | fields dept ] | fields id",
        "SELECT id FROM ppl_people WHERE dept IN (SELECT dept FROM ppl_depts WHERE floor > 1)",
    )
    check(
        tables,
        "source=ppl_people as p not exists [ source = ppl_depts as d | where d.dept = p.dept ] | fields id",
        "SELECT id FROM ppl_people p WHERE NOT EXISTS (SELECT * FROM ppl_depts d WHERE d.dept = p.dept)",
    )
    check(
        tables,
        "source=ppl_people | where age > [ source = ppl_people | stats avg(age) ] | fields id",
        "SELECT id FROM ppl_people WHERE age > (SELECT avg(age) FROM ppl_people)",
    )


def test_fields(tables: Any) -> None:
    check(tables, "source=ppl_people | fields id, name", "SELECT id, name FROM ppl_people")
    check(tables, "source=ppl_people | fields + id, age | fields - age", "SELECT id FROM ppl_people")
    check(tables, "source=ppl_people | fields - msg, email, TS", "SELECT id, name, dept, age, salary FROM ppl_people")
    unresolved(tables, "source=ppl_people | fields - nope")


def test_stats(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | stats count(), avg(age), sum(salary) as total, min(age), max(age), dc(dept) by dept",
        "SELECT count(*) AS `count()`, avg(age) AS `avg(age)`, sum(salary) AS total, min(age) AS `min(age)`,"
        " max(age) AS `max(age)`, count(DISTINCT dept) AS `dc(dept)`, dept FROM ppl_people GROUP BY dept",
    )
    check(
        tables,
        "source=ppl_people | stats stddev_samp(salary), stddev_pop(salary), var_samp(age), var_pop(age), count(age)",
        "SELECT stddev_samp(salary) AS `stddev_samp(salary)`, stddev_pop(salary) AS `stddev_pop(salary)`,"
        " var_samp(age) AS `var_samp(age)`, var_pop(age) AS `var_pop(age)`, count(age) AS `count(age)` FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | stats percentile(age, 50) as p50, distinct_count(dept) by dept",
        "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY age) AS p50, count(DISTINCT dept) AS `distinct_count(dept)`, dept"
        " FROM ppl_people GROUP BY dept",
    )


def test_stats_by_span(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | stats count() by span(age, 10)",
        "SELECT count(*) AS `count()`, floor(age / 10) * 10 AS `span(age,10)` FROM ppl_people GROUP BY 2",
    )
    check(
        tables,
        "source=ppl_people | stats avg(salary) as s by span(age, 5) as bucket, dept",
        "SELECT avg(salary) AS s, dept, floor(age / 5) * 5 AS bucket FROM ppl_people GROUP BY dept, 3",
    )
    check(
        tables,
        "source=ppl_people | stats count() as c by span(ts, 1h)",
        "SELECT count(*) AS c, date_trunc('HOUR', ts) AS `span(ts,1h)` FROM ppl_people GROUP BY 2",
    )
    check(
        tables,
        "source=ppl_people | stats count() as c by span(ts, 1d) as day",
        "SELECT count(*) AS c, date_trunc('DAY', ts) AS day FROM ppl_people GROUP BY 2",
    )
    check(
        tables,
        "source=ppl_people | stats count() as c by span(ts, 1M) as month",
        "SELECT count(*) AS c, date_trunc('MONTH', ts) AS month FROM ppl_people GROUP BY 2",
    )
    check(
        tables,
        "source=ppl_people | stats count() as c by span(ts, 15m) as q",
        "SELECT count(*) AS c, timestamp_seconds(floor(unix_seconds(ts) / 900) * 900) AS q FROM ppl_people GROUP BY 2",
    )


def test_eventstats(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | eventstats avg(salary) as avg_sal, count() by dept",
        "SELECT *, avg(salary) OVER (PARTITION BY dept) AS avg_sal, count(*) OVER (PARTITION BY dept) AS `count()`"
        " FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | eventstats max(age)",
        "SELECT *, max(age) OVER () AS `max(age)` FROM ppl_people",
    )


def test_sort_and_head(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | sort - age, id | fields id, age",
        "SELECT id, age FROM ppl_people ORDER BY age DESC NULLS LAST, id",
        ordered=True,
    )
    check(
        tables,
        "source=ppl_people | sort + dept, - id | fields dept, id",
        "SELECT dept, id FROM ppl_people ORDER BY dept ASC NULLS FIRST, id DESC",
        ordered=True,
    )
    rows = check(
        tables,
        "source=ppl_people | sort id | head 5 from 2 | fields id",
        "SELECT id FROM ppl_people ORDER BY id LIMIT 5 OFFSET 2",
        ordered=True,
    )
    assert rows == [(2,), (3,), (4,), (5,), (6,)]
    assert (
        len(check(tables, "source=ppl_people | sort id | head", "SELECT * FROM ppl_people ORDER BY id LIMIT 10", True))
        == 10
    )


def test_eval(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | eval x = age * 2, y = x + 1, age = age + 100 | fields id, age, x, y",
        "SELECT id, age + 100 AS age, age * 2 AS x, age * 2 + 1 AS y FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | eval label = case(age < 30, 'young', age < 50, 'mid' else 'old'), f = 1.5 | fields id, label, f",
        "SELECT id, CASE WHEN age < 30 THEN 'young' WHEN age < 50 THEN 'mid' ELSE 'old' END AS label,"
        " CAST(1.5 AS DOUBLE) AS f FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | eval salary = age | fields - msg, email, ts",
        "SELECT id, name, dept, age, age AS salary FROM ppl_people",
    )


def test_dedup(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | dedup dept | fields dept",
        "SELECT DISTINCT dept FROM ppl_people WHERE dept IS NOT NULL",
    )
    check(
        tables,
        "source=ppl_people | dedup 2 dept keepempty=true | stats count() as c by dept",
        "SELECT least(count(*), CASE WHEN dept IS NULL THEN 100 ELSE 2 END) AS c, dept FROM ppl_people GROUP BY dept",
    )
    check(
        tables,
        "source=ppl_people | dedup dept, age | fields dept, age",
        "SELECT DISTINCT dept, age FROM ppl_people WHERE dept IS NOT NULL AND age IS NOT NULL",
    )
    with pytest.raises(PplSemanticError, match="Consecutive"):
        to_spark_sql("source=ppl_people | dedup dept consecutive=true", lambda text: list(tables.sql(text).columns))


def test_rename(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | rename name as who, dept as team | fields id, who, team",
        "SELECT id, name AS who, dept AS team FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | rename msg as m | fields - m, email, ts",
        "SELECT id, name, dept, age, salary FROM ppl_people",
    )
    unresolved(tables, "source=ppl_people | rename nope as x")


def test_top_and_rare(tables: Any) -> None:
    rows = check(
        tables,
        "source=ppl_people | top dept",
        "SELECT count(*) AS count_dept, dept FROM ppl_people GROUP BY dept ORDER BY 1 DESC LIMIT 10",
        ordered=True,
    )
    assert rows[0] == (10, "eng")
    rows = check(
        tables,
        "source=ppl_people | rare 2 dept",
        "SELECT count(*) AS count_dept, dept FROM ppl_people GROUP BY dept ORDER BY 1 LIMIT 2",
        ordered=True,
    )
    assert rows == [(2, None), (3, "hr")]
    check(
        tables,
        "source=ppl_people | top 100 dept by age",
        "SELECT count(*) AS count_dept, dept, age FROM ppl_people GROUP BY dept, age",
    )


def test_parse(tables: Any) -> None:
    check(
        tables,
        r"source=ppl_people | parse email '(?<user>[a-z0-9]+)@(?<host_name>.+)' | fields id, user, host_name",
        r"SELECT id, regexp_extract(email, '([a-z0-9]+)@(.+)', 1) AS user,"
        r" regexp_extract(email, '([a-z0-9]+)@(.+)', 2) AS host_name FROM ppl_people",
    )
    check(
        tables,
        r"source=ppl_people | parse msg '\S+ (?<msg>\w+) .*' | fields id, msg",
        r"SELECT id, regexp_extract(msg, '\\S+ (\\w+) .*', 1) AS msg FROM ppl_people",
    )


def test_grok(tables: Any) -> None:
    rows = check(
        tables,
        "source=ppl_people | grok msg '%{IP:ip} %{WORD:verb} %{INT:code} %{GREEDYDATA:rest}' | fields id, ip, verb, code, rest",
        "SELECT id, split(msg, ' ')[0] AS ip, split(msg, ' ')[1] AS verb, split(msg, ' ')[2] AS code,"
        " split(msg, ' ')[3] AS rest FROM ppl_people",
    )
    assert rows[0][1] == "10.0.0.0"
    check(
        tables,
        "source=ppl_people | grok email '%{USERNAME:user}@%{HOSTNAME:host}' | fields id, user, host",
        "SELECT id, split(email, '@')[0] AS user, split(email, '@')[1] AS host FROM ppl_people",
    )


def test_every_grok_pattern_is_a_java_regex(tables: Any) -> None:
    line = '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326'
    items = [
        f"regexp_extract({string_sql(line)}, {string_sql(named_groups(grok_regex(f'%{{{name}}}')).regex)}, 0)"
        for name in sorted(GROK_PATTERNS)
    ]
    assert len(tables.sql("SELECT " + ", ".join(items)).collect()) == 1
    apache = check(
        tables,
        f"source=ppl_people | where id = 0 | eval line = {string_sql(line)}"
        " | grok line '%{COMMONAPACHELOG}' | fields clientip, timestamp, verb, response, bytes",
        "SELECT '127.0.0.1' AS clientip, '10/Oct/2000:13:55:36 -0700' AS timestamp, 'GET' AS verb,"
        " '200' AS response, '2326' AS bytes",
    )
    assert apache == [("127.0.0.1", "10/Oct/2000:13:55:36 -0700", "GET", "200", "2326")]


def test_function_calls(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | where like(name, 'name1%') and isnotnull(age)"
        " | eval u = upper(name), n = length(name) + abs(-2), c = coalesce(email, 'none') | fields id, u, n, c",
        "SELECT id, upper(name) AS u, length(name) + 2 AS n, coalesce(email, 'none') AS c FROM ppl_people"
        " WHERE name LIKE 'name1%' AND age IS NOT NULL",
    )


def test_fillnull(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | fields id, dept, email | fillnull with 'none' in dept, email",
        "SELECT id, coalesce(dept, 'none') AS dept, coalesce(email, 'none') AS email FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | fields id, age, salary, dept | fillnull using age = 0, dept = 'x'",
        "SELECT id, salary, coalesce(age, 0) AS age, coalesce(dept, 'x') AS dept FROM ppl_people",
    )
    check(
        tables,
        "source=ppl_people | fields id, age | fillnull with -1",
        "SELECT coalesce(id, -1) AS id, coalesce(age, -1) AS age FROM ppl_people",
    )


def test_trendline(tables: Any) -> None:
    window = "OVER (ORDER BY id ROWS BETWEEN {} PRECEDING AND CURRENT ROW)"
    check(
        tables,
        "source=ppl_people | fields id, age | trendline sort id sma(2, age) as a2 sma(3, age)",
        f"SELECT id, age, CASE WHEN count(*) {window.format(1)} = 2 THEN avg(age) {window.format(1)} END AS a2,"
        f" CASE WHEN count(*) {window.format(2)} = 3 THEN avg(age) {window.format(2)} END AS age_trendline"
        " FROM ppl_people ORDER BY id",
        ordered=True,
    )
    w = window.format(2)
    check(
        tables,
        "source=ppl_people | fields id, salary | trendline sort id wma(3, salary) as w3",
        f"SELECT id, salary, CASE WHEN count(*) {w} = 3 THEN (1 * lag(salary, 2) OVER (ORDER BY id)"
        " + 2 * lag(salary, 1) OVER (ORDER BY id) + 3 * salary) / 6 END AS w3 FROM ppl_people ORDER BY id",
        ordered=True,
    )
    check(
        tables,
        "source=ppl_people | where id < 3 | fields id | trendline sma(1, id) as same",
        "SELECT id, CAST(id AS DOUBLE) AS same FROM ppl_people WHERE id < 3",
    )


def test_lookup(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | fields id, dept | lookup ppl_depts dept replace floor, manager as boss",
        "SELECT p.id, p.dept, d.floor, d.manager AS boss FROM ppl_people p LEFT JOIN ppl_depts d ON p.dept = d.dept",
    )
    check(
        tables,
        "source=ppl_people | eval boss = if(id < 5, 'own', null) | fields id, dept, boss"
        " | lookup ppl_depts dept append manager as boss",
        "SELECT p.id, p.dept, coalesce(CASE WHEN p.id < 5 THEN 'own' END, d.manager) AS boss"
        " FROM ppl_people p LEFT JOIN ppl_depts d ON p.dept = d.dept",
    )
    check(
        tables,
        "source=ppl_people | fields id, dept | eval team = dept | lookup ppl_depts dept as team",
        "SELECT p.id, p.dept, p.dept AS team, d.floor, d.manager, d.building"
        " FROM ppl_people p LEFT JOIN ppl_depts d ON p.dept = d.dept",
    )


def test_join(tables: Any) -> None:
    check(
        tables,
        "source=ppl_people | fields id, dept | join left = p right = d ON p.dept = d.dept ppl_depts",
        "SELECT * FROM (SELECT id, dept FROM ppl_people) p INNER JOIN ppl_depts d ON p.dept = d.dept",
    )
    check(
        tables,
        "source=ppl_people | left join left = p right = d ON p.dept = d.dept [ source = ppl_depts | where floor > 1 ]"
        " | fields id, floor",
        "SELECT id, floor FROM ppl_people p LEFT JOIN (SELECT * FROM ppl_depts WHERE floor > 1) d ON p.dept = d.dept",
    )
    check(
        tables,
        "source=ppl_depts | semi join ON ppl_depts.dept = p.dept ppl_people as p",
        "SELECT * FROM ppl_depts LEFT SEMI JOIN ppl_people p ON ppl_depts.dept = p.dept",
    )
    check(
        tables,
        "source=ppl_depts | anti join left = l right = r ON l.dept = r.dept ppl_people as r",
        "SELECT * FROM ppl_depts l LEFT ANTI JOIN ppl_people r ON l.dept = r.dept",
    )
    check(
        tables,
        "source=ppl_depts | fields dept | cross join [ source = ppl_depts | fields floor ]",
        "SELECT * FROM (SELECT dept FROM ppl_depts) CROSS JOIN (SELECT floor FROM ppl_depts)",
    )
    check(
        tables,
        "source=ppl_depts | full outer join left = l right = r ON l.dept = r.dept [ source = ppl_people"
        " | stats min(id) as id by dept ] | fields l.dept, r.dept, id",
        "SELECT l.dept, r.dept, id FROM ppl_depts l FULL OUTER JOIN (SELECT dept, min(id) AS id FROM ppl_people"
        " GROUP BY dept) r ON l.dept = r.dept",
    )


def test_describe_and_explain(tables: Any) -> None:
    tables.sql("DROP TABLE IF EXISTS default.ppl_described")
    tables.sql("CREATE TABLE default.ppl_described (a INT, b STRING) USING parquet")
    try:
        check(tables, "describe default.ppl_described", "DESCRIBE TABLE default.ppl_described", ordered=True)
    finally:
        tables.sql("DROP TABLE IF EXISTS default.ppl_described")
    expected = {
        "simple": "Physical Plan",
        "extended": "Parsed Logical Plan",
        "cost": "Optimized Logical Plan",
        "codegen": "WholeStageCodegen",
        "formatted": "Physical Plan",
    }
    for mode, marker in expected.items():
        sql = to_spark_sql(f"explain {mode} | source=ppl_people | where age > 1 | fields id", lambda text: [])
        columns, rows = _run(tables, sql)
        assert columns == ["plan"]
        assert marker in rows[0][0], (mode, rows[0][0])


def test_correlate_joins_the_filtered_sources(tables: Any) -> None:
    filtered = "SELECT * FROM {} WHERE dept != 'hr'"
    people, depts = filtered.format("ppl_people"), filtered.format("ppl_depts")
    check(
        tables,
        "source = ppl_people, ppl_depts | where dept != 'hr'"
        " | correlate exact fields(dept) mapping(ppl_people.dept = ppl_depts.dept) | fields id, floor",
        f"SELECT id, floor FROM ({people}) p JOIN ({depts}) d ON p.dept = d.dept",
    )
    check(
        tables,
        "source = ppl_people, ppl_depts | where dept != 'hr'"
        " | correlate approximate fields(dept) scope(ts, 1d) mapping(ppl_people.dept = ppl_depts.dept)"
        " | fields id, floor",
        f"SELECT id, floor FROM ({people}) p FULL JOIN ({depts}) d ON p.dept = d.dept",
    )


def test_several_sources_are_one_relation_by_column_name(tables: Any) -> None:
    rows = check(
        tables,
        "source = ppl_people, ppl_depts | fields dept, floor",
        "SELECT dept, NULL AS floor FROM ppl_people UNION ALL SELECT dept, floor FROM ppl_depts",
    )
    assert len(rows) == len(PEOPLE) + len(DEPT_ROWS)


def test_expand_and_flatten(tables: Any) -> None:
    check(
        tables,
        "source = ppl_people | eval a = array(name, dept) | expand a as v | fields id, v",
        "SELECT id, v FROM ppl_people LATERAL VIEW explode(array(name, dept)) t AS v",
    )
    check(
        tables,
        "source = ppl_people | eval s = json_object('n', name, 'd', dept) | flatten s | fields id, n, d",
        "SELECT id, name AS n, dept AS d FROM ppl_people",
    )


def test_subsearch_source_and_a_join_alias_in_a_correlated_subsearch(tables: Any) -> None:
    check(
        tables,
        "source = [ source = ppl_people | where age > 30 | fields id, dept ] as p | stats count() as n by dept",
        "SELECT count(*) AS n, dept FROM ppl_people WHERE age > 30 GROUP BY dept",
    )
    check(
        tables,
        "source = ppl_depts | join ON ppl_depts.dept = p1.dept ppl_people as p1"
        " | where exists [ source = ppl_people as p2 | where p2.dept = p1.dept and p2.id != p1.id and p2.age > 50 ]"
        " | fields p1.id",
        "SELECT p1.id FROM ppl_depts JOIN ppl_people p1 ON ppl_depts.dept = p1.dept WHERE EXISTS"
        " (SELECT * FROM ppl_people p2 WHERE p2.dept = p1.dept AND p2.id != p1.id AND p2.age > 50)",
    )
