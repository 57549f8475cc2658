"""Conformance with the reference's PPL pages, without Spark: every documented query (the
examples with outputs and the pages' lists of examples) parses and translates, or is refused as
the reference refuses it; every command and function of the reference's grammar is translated or
refused with its reason. The examples' outputs are checked on Spark by
``tests/integration/test_ppl_docs_spark.py``."""

from __future__ import annotations

import re

import pytest

from query_core.ppl import PplSemanticError, PplSyntaxError, parse_ppl, to_spark_sql
from query_core.ppl import functions as f
from tests.ppl_docs import EXAMPLES, effective, example_id
from tests.ppl_docs.queries import NOT_QUERIES, QUERIES, REFUSED
from tests.ppl_docs.tables import BY_PAGE, COMMON, tables_for

_ALL_TABLES = {name: t for tables in [COMMON, *BY_PAGE.values()] for name, t in tables.items()}


def _columns_of(schema: str) -> list[str]:
    """The column names of a Spark DDL list (top-level commas only)."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(schema + ","):
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            names.append(schema[start:i].strip().split(" ")[0].strip("`"))
            start = i + 1
    return names


#: The columns of the pages' generic `table` (a, b, c, ...) and of their other unnamed samples.
GENERIC = "a b c d e f g name age country year month state id uid ts s arr".split()


def fake_columns(page: str):  # type: ignore[no-untyped-def]
    """A ``columns`` callback from the sample tables' schemas: a table's columns for the table,
    all the page's columns for anything else (enough to translate; Spark checks the rest)."""
    tables = {name: _columns_of(t.schema) for name, t in tables_for(page).items()}
    every = list(dict.fromkeys([*(c for cols in tables.values() for c in cols), *GENERIC]))

    def columns(sql: str) -> list[str]:
        match = re.fullmatch(r"SELECT \* FROM `?(\w+)`?", sql)
        if match is not None and match.group(1) in tables:
            return tables[match.group(1)]
        if re.match(r"SELECT \S+\.\* FROM", sql):  # flatten asking for a struct's fields
            return ["x", "y", "z"]
        return every

    return columns


IDS = [example_id(i) for i in range(len(EXAMPLES))]


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=IDS)
def test_documented_example_translates_or_is_refused(index: int) -> None:
    example = EXAMPLES[index]
    query, _, _, note = effective(example, IDS[index])
    if note is not None and note.refused:
        with pytest.raises(PplSemanticError, match=note.refused):
            to_spark_sql(query, fake_columns(example.page))
        return
    sql = to_spark_sql(query, fake_columns(example.page))
    assert sql.startswith(("SELECT", "DESCRIBE", "EXPLAIN")), sql


@pytest.mark.parametrize(("page", "query"), QUERIES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(QUERIES)])
def test_listed_query_translates(page: str, query: str) -> None:
    text = query.rstrip(";").strip()  # a page ends some queries with the shell's `;`
    if query in NOT_QUERIES:
        with pytest.raises(PplSyntaxError):
            parse_ppl(text)
        return
    if query in REFUSED:
        with pytest.raises(PplSemanticError, match=REFUSED[query]):
            to_spark_sql(text, fake_columns(page))
        return
    assert to_spark_sql(text, fake_columns(page)).startswith("SELECT")


# -- the grammar's commands and functions --------------------------------------------------------

#: One query per command of the reference's grammar (``commands`` and the first command).
COMMANDS = {
    "search": "search source = t a = 1",
    "search filter first": "search a = 1 source = t",
    "source subsearch": "source = [ source = t | where a > 1 ] as s | fields a",
    "index": "index = t, u",
    "describe": "describe t",
    "explain": "explain extended | source = t",
    "where": "source = t | where a > 1",
    "correlate": "source = t, u | correlate exact fields(a) scope(ts, 1D) mapping(t.a = u.a)",
    "join": "source = t | left join left = l, right = r hint.left.x = y ON l.a = r.a u",
    "fields": "source = t | fields - a",
    "stats": "source = t | stats partitions = 1 allnum = false delim = ',' count() by b dedup_splitvalues = false",
    "eventstats": "source = t | eventstats avg(a) by b",
    "dedup": "source = t | dedup 2 a keepempty = true",
    "sort": "source = t | sort - auto(a), str(b), ip(c), num(d)",
    "head": "source = t | head 5 from 2",
    "top": "source = t | top_approx 3 a by b",
    "rare": "source = t | rare_approx a",
    "eval": "source = t | eval x = a + 1, y = x * 2",
    "grok": "source = t | grok c '%{WORD:w}'",
    "parse": "source = t | parse c '(?<w>\\w+)'",
    "patterns": "source = t | patterns new_field = 'p' pattern = '[0-9]' c",
    "lookup": "source = t | lookup u a as b append c as d",
    "rename": "source = t | rename a as x, b* as y*",
    "fillnull": "source = t | fillnull with 0 in a, b",
    "fieldsummary": "source = t | fieldsummary includefields = a, b nulls = true",
    "flatten": "source = t | flatten s as (x, y)",
    "expand": "source = t | expand arr as e",
    "trendline": "source = t | trendline sort a sma(2, b) as s wma(3, b)",
    "appendcol": "source = t | appendcol override = true [ stats count() as a ]",
}


def _columns(sql: str) -> list[str]:
    return ["x", "y"] if re.match(r"SELECT \S+\.\* FROM", sql) else ["a", "b", "c", "d", "ts", "s", "arr"]


@pytest.mark.parametrize("query", COMMANDS.values(), ids=COMMANDS.keys())
def test_every_command_of_the_grammar_translates(query: str) -> None:
    assert to_spark_sql(query, _columns).startswith(("SELECT", "DESCRIBE", "EXPLAIN"))


def test_refused_on_purpose_as_the_reference_refuses() -> None:
    with pytest.raises(PplSemanticError, match=r"^Consecutive deduplication is not supported$"):
        to_spark_sql("source = t | dedup a consecutive = true", _columns)
    with pytest.raises(PplSemanticError, match="APPENDCOL should specify the output fields"):
        to_spark_sql("source = t | appendcol override = true [ where a > 1 ]", _columns)
    with pytest.raises(PplSemanticError, match="correlate self is not supported"):
        to_spark_sql("source = t | correlate self fields(a) mapping(t.a = t.b)", _columns)
    with pytest.raises(PplSemanticError, match="having different elements"):
        to_spark_sql("source = t, u | correlate exact fields(a, b) mapping(t.a = u.a)", _columns)


#: The function names of the reference's grammar (its function name rules).
GRAMMAR_FUNCTIONS = """
abs cbrt ceil ceiling conv crc32 e exp floor ln log log10 log2 mod pi pow power rand round sign signum sqrt
truncate acos asin atan atan2 cos cot degrees radians sin tan md5 sha1 sha2
adddate addtime convert_tz curdate current_date current_time current_timestamp current_timezone curtime date
datediff datetime date_add date_format date_sub day dayname dayofmonth dayofweek dayofyear day_of_month
day_of_week day_of_year from_days from_unixtime hour hour_of_day last_day localtime localtimestamp makedate
make_date maketime microsecond minute minute_of_day minute_of_hour month monthname month_of_year now
period_add period_diff quarter second second_of_minute sec_to_time str_to_date subdate subtime sysdate time
timediff timestamp time_format time_to_sec to_days to_seconds unix_timestamp utc_date utc_time utc_timestamp
week weekday week_of_year year yearweek relative_timestamp earliest latest
like if isnull isnotnull ifnull nullif ispresent json_valid isempty isblank typeof
substr substring trim ltrim rtrim lower upper concat concat_ws length strcmp right left ascii locate replace
reverse position coalesce json json_object json_array json_array_length to_json_string json_extract
json_delete json_append json_keys json_extend json_set array array_length forall exists filter transform reduce
cidrmatch timestampadd timestampdiff
""".split()

GRAMMAR_AGGREGATIONS = "avg count sum min max stddev_samp stddev_pop distinct_count dc distinct_count_approx percentile percentile_approx".split()


@pytest.mark.parametrize("name", GRAMMAR_FUNCTIONS)
def test_every_function_of_the_grammar_is_translated_or_refused_with_its_reason(name: str) -> None:
    spec = f.function_spec(name)
    if name in f.UNSUPPORTED:
        with pytest.raises(PplSemanticError, match=f"^{name} is not supported on Spark: .+"):
            f.scalar_sql(name, ["a", "b"])
        return
    assert spec is not None, f"{name} is neither translated nor refused"


@pytest.mark.parametrize("name", GRAMMAR_AGGREGATIONS)
def test_every_aggregation_of_the_grammar_is_translated(name: str) -> None:
    assert f.is_aggregate(name)


def test_the_fast_parse_of_the_compacted_text_is_the_parse_of_the_text_as_written() -> None:
    """The parse a query gets (its comments and blanks compacted, lark's lexer without line
    counting) is the one of the text as written, for every query of the pages."""
    from query_core.ppl.parser import _compact, _fast_parser, _parse, _parser

    texts = [e.query for e in EXAMPLES] + [q for _, q in QUERIES]
    for text in texts:
        try:
            written = _parse(text, _parser())
        except PplSyntaxError:
            with pytest.raises(PplSyntaxError):
                _parse(_compact(text), _fast_parser())
            continue
        assert _parse(_compact(text), _fast_parser()) == written, text
