"""The PPL parser: every command into its syntax tree, comments, syntax errors with positions, and
nothing but PplSyntaxError for any text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from query_core.ppl import PplSyntaxError, parse_ppl
from query_core.ppl.ast import (
    Aggregation,
    Assignment,
    Between,
    Binary,
    Call,
    Cast,
    Command,
    Dedup,
    Describe,
    Eval,
    Expr,
    Field,
    Fields,
    FillNull,
    GroupField,
    Head,
    InList,
    Join,
    Literal,
    Lookup,
    Parse,
    Query,
    Rename,
    Search,
    Sort,
    SortKey,
    Span,
    Stats,
    Subquery,
    TableName,
    TopRare,
    TrendComputation,
    Trendline,
    Unary,
    Where,
)

T = TableName(("t",))


def f(name: str) -> Field:
    return Field(tuple(name.split(".")))


def i(value: int) -> Literal:
    return Literal(value, "int", str(value))


def s(value: str, quote: str = "'") -> Literal:
    return Literal(value, "string", f"{quote}{value}{quote}")


def command(text: str) -> Command:
    """The one command after ``source=t |``."""
    query = parse_ppl(f"source=t | {text}")
    assert len(query.commands) == 1
    return query.commands[0]


def expr(text: str) -> Expr:
    where = command(f"where {text}")
    assert isinstance(where, Where)
    return where.condition


def error(text: str) -> PplSyntaxError:
    with pytest.raises(PplSyntaxError) as caught:
        parse_ppl(text)
    return caught.value


# -- source and search --------------------------------------------------------------------------


def test_source_alone() -> None:
    assert parse_ppl("source=t") == Query(Search(T))
    assert parse_ppl("SOURCE = myglue.default.`http-logs`") == Query(
        Search(TableName(("myglue", "default", "http-logs")))
    )


def test_search_with_inline_filters_is_an_and() -> None:
    query = parse_ppl("search source=t a=1 b>2")
    assert query.source == Search(T, Binary("AND", Binary("=", f("a"), i(1)), Binary(">", f("b"), i(2))))


def test_pipeline_of_commands() -> None:
    query = parse_ppl("source=t | where a = 1 | head 5")
    assert query.commands == (Where(Binary("=", f("a"), i(1))), Head(5, 0))


# -- expressions --------------------------------------------------------------------------------


def test_precedence_or_xor_and_not() -> None:
    a, b, c, d = (Binary("=", f(n), i(1)) for n in "abcd")
    assert expr("a=1 or b=1 and not c=1 xor d=1") == Binary(
        "OR", a, Binary("XOR", Binary("AND", b, Unary("NOT", c)), d)
    )


def test_arithmetic_and_comparisons() -> None:
    assert expr("a + 2 * b >= -3") == Binary(
        ">=", Binary("+", f("a"), Binary("*", i(2), f("b"))), Literal(-3, "int", "-3")
    )
    assert expr("a - 1 != 2") == Binary("!=", Binary("-", f("a"), i(1)), i(2))
    assert expr("a == 1") == Binary("=", f("a"), i(1))
    assert expr("(a % 2) < 1.5") == Binary("<", Binary("%", f("a"), i(2)), Literal(1.5, "decimal", "1.5"))


def test_dashed_names_are_one_field_as_in_the_reference() -> None:
    assert expr("device-id > 1") == Binary(">", f("device-id"), i(1))


def test_literals() -> None:
    assert expr("a = 'x''y'") == Binary("=", f("a"), Literal("x'y", "string", "'x''y'"))
    assert expr('a = "q"') == Binary("=", f("a"), s("q", '"'))
    assert expr("a = true") == Binary("=", f("a"), Literal(True, "bool", "true"))
    assert expr("a = NULL") == Binary("=", f("a"), Literal(None, "null", "null"))
    assert expr(r"a = '\d+'") == Binary("=", f("a"), Literal(r"\d+", "string", r"'\d+'"))


def test_fields_dotted_and_backticked() -> None:
    assert expr("`a b`.c = @timestamp") == Binary("=", Field(("a b", "c")), f("@timestamp"))


def test_in_calls_case_and_cast() -> None:
    assert expr("a in (1, 'x')") == InList(f("a"), (i(1), s("x")))
    assert expr("isnull(a)") == Call("isnull", (f("a"),))
    assert expr("a not in (1)") == Unary("NOT", InList(f("a"), (i(1),)))
    assert expr("a between 1 and 2 and b not between 3 and 4") == Binary(
        "AND", Between(f("a"), i(1), i(2)), Unary("NOT", Between(f("b"), i(3), i(4)))
    )
    assert expr("case(a = 1, 'x' else 'y') = 'x'") == Binary(
        "=", Call("case", (Binary("=", f("a"), i(1)), s("x")), default=s("y")), s("x")
    )
    assert expr("cast(a as int) > 1") == Binary(">", Cast(f("a"), "int"), i(1))
    assert expr("like(a, 'x%') and b = 1") == Binary("AND", Call("like", (f("a"), s("x%"))), Binary("=", f("b"), i(1)))


def test_subsearches_in_expressions() -> None:
    inner = Query(Search(TableName(("u",))), (Fields((f("b"),)),))
    assert expr("a in [ source = u | fields b ]") == Subquery("in", inner, f("a"))
    assert expr("a not in [ source = u | fields b ]") == Unary("NOT", Subquery("in", inner, f("a")))
    assert expr("not exists [ source = u | fields b ]") == Unary("NOT", Subquery("exists", inner))
    assert expr("a = [ source = u | fields b ]") == Binary("=", f("a"), Subquery("scalar", inner))
    assert parse_ppl("source = t as t1 a = 1").source == Search(T, Binary("=", f("a"), i(1)), "t1")


def test_keywords_stay_usable_as_field_names_elsewhere() -> None:
    assert expr("count = 1 and source > 2") == Binary(
        "AND", Binary("=", f("count"), i(1)), Binary(">", f("source"), i(2))
    )


# -- commands -----------------------------------------------------------------------------------


def test_fields() -> None:
    assert command("fields a, b.c") == Fields((f("a"), f("b.c")))
    assert command("fields + a") == Fields((f("a"),))
    assert command("fields - a, b") == Fields((f("a"), f("b")), exclude=True)


def test_stats() -> None:
    assert command("stats count()") == Stats((Aggregation(Call("count", ())),))
    assert command("stats avg(x) as m, dc(y), count(distinct z) by a, b as bb") == Stats(
        (
            Aggregation(Call("avg", (f("x"),)), "m"),
            Aggregation(Call("dc", (f("y"),))),
            Aggregation(Call("count", (f("z"),), distinct=True)),
        ),
        (GroupField(f("a")), GroupField(f("b"), "bb")),
    )
    assert command("stats percentile(x, 90) by span(age, 10) as s, g") == Stats(
        (Aggregation(Call("percentile", (f("x"), i(90)))),),
        (GroupField(f("g")),),
        Span(f("age"), i(10), "s"),
    )
    assert command("stats count() by span(ts, 1h)") == Stats(
        (Aggregation(Call("count", ())),), (), Span(f("ts"), Literal("1h", "interval", "1h"))
    )


def test_span_units() -> None:
    for unit in ("ms", "s", "m", "h", "d", "w", "M", "q", "y", "minutes"):
        stats = command(f"stats count() by span(ts, 5{unit})")
        assert isinstance(stats, Stats) and stats.span is not None
        assert stats.span.interval == Literal(f"5{unit}", "interval", f"5{unit}")


def test_eventstats() -> None:
    assert command("eventstats sum(x) by a") == Stats(
        (Aggregation(Call("sum", (f("x"),))),), (GroupField(f("a")),), event=True
    )


def test_sort() -> None:
    assert command("sort a, - b, +c") == Sort((SortKey(f("a")), SortKey(f("b"), True), SortKey(f("c"))))


def test_head() -> None:
    assert command("head") == Head(10, 0)
    assert command("head 3") == Head(3, 0)
    assert command("head 3 from 7") == Head(3, 7)
    assert command("head from 7") == Head(10, 7)


def test_eval() -> None:
    assert command("eval x = a + 1, y = x * 2") == Eval(
        (Assignment(f("x"), Binary("+", f("a"), i(1))), Assignment(f("y"), Binary("*", f("x"), i(2))))
    )


def test_dedup() -> None:
    assert command("dedup a") == Dedup((f("a"),))
    assert command("dedup 2 a, b keepempty=true consecutive=false") == Dedup((f("a"), f("b")), 2, True, False)
    assert command("dedup a consecutive=true") == Dedup((f("a"),), consecutive=True)


def test_rename() -> None:
    assert command("rename a as b, c.d as e") == Rename(((f("a"), f("b")), (f("c.d"), f("e"))))


def test_top_and_rare() -> None:
    assert command("top a") == TopRare((f("a"),))
    assert command("top 3 a, b by c") == TopRare((f("a"), f("b")), 3, (f("c"),))
    assert command("rare a") == TopRare((f("a"),), rare=True)
    assert command("top_approx 2 a") == TopRare((f("a"),), 2, approx=True)
    assert command("rare_approx a by b") == TopRare((f("a"),), 10, (f("b"),), rare=True, approx=True)


def test_parse_and_grok() -> None:
    assert command(r"parse email '.+@(?<host>.+)'") == Parse(f("email"), ".+@(?<host>.+)")
    assert command("grok msg '%{IP:ip} %{GREEDYDATA}'") == Parse(f("msg"), "%{IP:ip} %{GREEDYDATA}", grok=True)


def test_fillnull() -> None:
    assert command("fillnull with 0 in a, b") == FillNull(i(0), (f("a"), f("b")))
    assert command("fillnull with 'x'") == FillNull(s("x"))
    assert command("fillnull using a = 1, b = concat(c, d)") == FillNull(
        assignments=(Assignment(f("a"), i(1)), Assignment(f("b"), Call("concat", (f("c"), f("d"))))),
    )


def test_trendline() -> None:
    assert command("trendline sma(2, x) as t sma(3, y)") == Trendline(
        (TrendComputation("sma", 2, f("x"), "t"), TrendComputation("sma", 3, f("y")))
    )
    assert command("trendline sort - device-id wma(2, x)") == Trendline(
        (TrendComputation("wma", 2, f("x")),), SortKey(f("device-id"), True)
    )


def test_lookup() -> None:
    assert command("lookup dim uid as id, name replace dept, mail as email") == Lookup(
        TableName(("dim",)),
        ((f("uid"), f("id")), (f("name"), f("name"))),
        "replace",
        ((f("dept"), f("dept")), (f("mail"), f("email"))),
    )
    assert command("LOOKUP a.dim id APPEND x") == Lookup(
        TableName(("a", "dim")), ((f("id"), f("id")),), "append", ((f("x"), f("x")),)
    )
    assert command("lookup dim id") == Lookup(TableName(("dim",)), ((f("id"), f("id")),))


def test_join() -> None:
    on = Binary("=", f("l.a"), f("r.b"))
    assert command("join left = l right = r ON l.a = r.b other") == Join("inner", TableName(("other",)), on, "l", "r")
    assert command("join ON a = b other as o") == Join(
        "inner", TableName(("other",)), Binary("=", f("a"), f("b")), right_alias="o"
    )
    sub = Query(Search(TableName(("u",))), (Where(Binary(">", f("x"), i(1))),))
    assert command("left outer join left=l right=r on l.a = r.b [ source = u | where x > 1 ]") == Join(
        "left", sub, on, "l", "r"
    )
    kinds = {
        "inner": "inner",
        "left": "left",
        "right outer": "right",
        "full": "full",
        "outer": "full",
        "cross": "cross",
        "left semi": "semi",
        "semi": "semi",
        "anti": "anti",
    }
    for words, kind in kinds.items():
        joined = command(f"{words} join ON a = b other")
        assert isinstance(joined, Join) and joined.kind == kind
    hinted = command("join hint.left.broadcast = true ON a = b other")
    assert isinstance(hinted, Join) and hinted.condition == Binary("=", f("a"), f("b"))
    assert command("join [ source = u ]") == Join("inner", Query(Search(TableName(("u",)))))


def test_describe_and_explain() -> None:
    assert parse_ppl("describe a.b.c") == Query(Describe(TableName(("a", "b", "c"))))
    assert parse_ppl("explain extended | source = t | head 1") == Query(Search(T), (Head(1, 0),), "extended")
    assert parse_ppl("explain | describe t").explain == "simple"
    for mode in ("simple", "extended", "codegen", "cost", "formatted"):
        assert parse_ppl(f"EXPLAIN {mode.upper()} | source=t").explain == mode


def test_comments_are_ignored() -> None:
    text = "/* head */ source=t // line\n| where a = 1 /* multi\nline */ | head 2 // end"
    assert parse_ppl(text) == Query(Search(T), (Where(Binary("=", f("a"), i(1))), Head(2, 0)))


# -- errors -------------------------------------------------------------------------------------


def test_unknown_command_says_where_and_what_was_expected() -> None:
    caught = error("source=t | frobnicate a")
    assert (caught.line, caught.column) == (1, 12)
    assert "frobnicate" in caught.reason and "'where'" in caught.reason


def test_error_position_on_a_later_line() -> None:
    caught = error("source=t\n| where a = = 1")
    assert (caught.line, caught.column) == (2, 13)
    assert "(line 2, column 13)" in str(caught)


def test_unexpected_end() -> None:
    caught = error("source=t | where")
    assert "end of query" in caught.reason
    assert (caught.line, caught.column) == (1, 17)


def test_unexpected_character() -> None:
    caught = error("source=t | where a = $")
    assert "'$'" in caught.reason and caught.column == 22


@pytest.mark.parametrize(
    "text",
    [
        "",
        "where a = 1",
        "source=",
        "source=t |",
        "source=t | head x",
        "source=t | stats avg(x) by span(a, b)",
        "source=t | trendline foo(2, a)",
        "source=t | trendline sma(0, a)",
        "source=t | dedup 0 a",
        "source=t | head 99999999999999999999",
        "source=t | where a = 'open",
        "source=t | fields",
        "source=t | rename a",
        "source=t /* never closed",
    ],
)
def test_syntax_errors(text: str) -> None:
    error(text)


# -- fuzz ---------------------------------------------------------------------------------------

VALID = [
    "source=t a=1 | where b > 2 and c in (1, 2) | fields a, b",
    "source=t | stats count() as c, avg(x) by span(ts, 1h) as h, g | sort - c | head 5 from 1",
    "source=t | eval x = case(a = 1, 'p' else 'q'), y = cast(b as int) | dedup 2 x keepempty=true",
    "source=t | left join left=l right=r ON l.a = r.a [ source = u | top 3 a by b ] | rename a as b",
    "source=t | fillnull using a = 0 | trendline sort ts sma(2, a) as s | lookup d id as a append n",
    "explain cost | source=t | grok m '%{IP:ip}' | parse m '(?<x>.*)' | fillnull with 0 in a, b",
    "source=t as x a not in [ source=u | fields b ] | where exists [ source=v | where c = x.a ] and d = [ source=w ]",
]
TOKENS = ["|", "source", "=", "(", ")", ",", "[", "]", "'", '"', "`", "by", "as", "-", "/*", "//", "1h", "1.5", "\n"]


def _parses_or_syntax_error(text: str) -> None:
    try:
        result = parse_ppl(text)
    except PplSyntaxError:
        return
    assert isinstance(result, Query)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_random_text(text: str) -> None:
    _parses_or_syntax_error(text)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(VALID),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=8),
    st.one_of(st.sampled_from(TOKENS), st.text(max_size=3)),
    st.booleans(),
)
def test_mutated_queries(base: str, at: int, length: int, insert: str, delete: bool) -> None:
    at = at % (len(base) + 1)
    text = base[:at] + base[at + length :] if delete else base[:at] + insert + base[at:]
    _parses_or_syntax_error(text)


def test_deep_nesting_is_a_syntax_error_or_parses() -> None:
    _parses_or_syntax_error("source=t | where " + "(" * 5000 + "a" + ")" * 5000)
    _parses_or_syntax_error("source=t | where " + "not " * 5000 + "a")


# -- the rest of the reference's grammar ----------------------------------------------------------


def test_sources_filter_first_several_tables_and_a_subsearch() -> None:
    assert parse_ppl("search a = 1 source = t").source == Search(T, Binary("=", f("a"), i(1)))
    assert parse_ppl("index = t, u as x").source == Search(T, None, "x", (TableName(("u",)),))
    inner = Query(Search(TableName(("u",))), (Head(5, 0),))
    assert parse_ppl("source = [ source = u | head 5 ] as s").source == Search(TableName(()), None, "s", (), inner)


def test_interval_datetime_and_decimal_literals() -> None:
    from query_core.ppl.ast import Interval

    assert expr("d < interval 3 months") == Binary("<", f("d"), Interval(i(3), "MONTH"))
    assert expr("d > DATE '2020-01-01'") == Binary(">", f("d"), Literal("2020-01-01", "date", "DATE '2020-01-01'"))
    assert expr("x > .06") == Binary(">", f("x"), Literal(0.06, "decimal", "0.06"))
    # the words stay field names where no literal follows them
    assert expr("date > interval") == Binary(">", f("date"), f("interval"))
    assert "Unknown interval unit eon" in str(error("source=t | where d < interval 1 eon"))


def test_lambdas_position_and_regexp() -> None:
    from query_core.ppl.ast import Lambda

    call = expr("forall(a, x -> x > 0)")
    assert call == Call("forall", (f("a"), Lambda(("x",), Binary(">", f("x"), i(0)))))
    reduce = expr("reduce(a, 0, (acc, x) -> acc + x) > 1")
    assert isinstance(reduce, Binary) and isinstance(reduce.left, Call)
    assert reduce.left.args[2] == Lambda(("acc", "x"), Binary("+", f("acc"), f("x")))
    assert expr("position('x' IN name) > 0") == Binary(">", Call("position", (s("x"), f("name"))), i(0))
    assert expr("a regexp 'x.*'") == Call("regexp", (f("a"), s("x.*")))
    assert expr("a contains 'x'") == Call("contains", (f("a"), s("x")))


def test_the_commands_added_to_the_grammar() -> None:
    from query_core.ppl.ast import AppendCol, Correlate, Expand, FieldSummary, Flatten, Patterns

    assert command("patterns new_field='p' pattern='[0-9]' msg") == Patterns(f("msg"), "p", "[0-9]")
    assert command("fieldsummary includefields = a, b nulls = true") == FieldSummary((f("a"), f("b")), True)
    assert command("flatten s as (x, y)") == Flatten(f("s"), ("x", "y"))
    assert command("expand arr as e") == Expand(f("arr"), "e")
    assert command("appendcol override = true [ stats count() ]") == AppendCol(
        (Stats((Aggregation(Call("count", ())),)),), True
    )
    assert command("correlate exact fields(a) scope(ts, 1d) mapping(t.a = u.b)") == Correlate(
        "exact", (f("a"),), ((f("t.a"), "=", f("u.b")),), (f("ts"), Literal("1d", "interval", "1d"), None)
    )
    assert command("sort - auto(a), num(b)") == Sort((SortKey(f("a"), True), SortKey(f("b"))))
    assert command("rename *_x as *_y") == Rename(((f("*_x"), f("*_y")),))


def test_a_stats_aggregation_keeps_its_text_for_its_name() -> None:
    stats = command("stats avg( x ) , MIN(y)")
    assert isinstance(stats, Stats)
    assert [a.call.text for a in stats.aggregations] == ["avg( x )", "MIN(y)"]
