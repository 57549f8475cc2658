"""Lexer-level limits (docs/validation.md, "Limits"): nesting counted in comments, strings and
brackets alike, and a budget on what reading a statement costs, both before any parser runs.

Spark's lexer spends more on a comment the deeper it nests (2,000 levels held a job's core for
minutes, although the statement passed the depth limit in milliseconds), and Spark analyzes what
strings hold (a statement for ``EXECUTE IMMEDIATE``, a schema): so the scan counts both, in one
linear pass, and stops once a statement costs more than its budget.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from query_core.flint.lexer import bracketed_comment, tokenize
from query_core.validation import (
    Profile,
    QueryRefusedError,
    StatementLimitError,
    StatementLimits,
    check_limits,
    policy_for,
    validate_query,
)
from query_core.validation.limits import string_depth
from query_core.validation.tokens import scan, scan_counted

LIMITS = StatementLimits()
LOCAL = policy_for({}, Profile.LOCAL, "/srv/var/warehouse", "/srv/var/checkpoints")


def nested(depth: int, inside: str = " x ") -> str:
    return "/*" * depth + inside + "*/" * depth


# -- nested comments ---------------------------------------------------------------------------------


def test_the_comment_nested_two_thousand_deep_is_refused_before_any_parser() -> None:
    """The attack: 8 KB that passed the depth limit and held the job's core for its whole prepare
    limit. Refused at POST and in the job (both call check_limits), by what it costs to read."""
    attack = "SELECT 1 " + nested(2000)
    assert len(attack) < 10_000
    with pytest.raises(StatementLimitError, match="costs too much to read"):
        check_limits(attack, "sql", LIMITS)


def test_comment_nesting_counts_as_depth_as_brackets_do() -> None:
    with pytest.raises(StatementLimitError, match="nested too deeply: about 201 levels"):
        check_limits("SELECT 1 " + nested(200), "sql", LIMITS)
    check_limits("SELECT 1 " + nested(100), "sql", LIMITS)  # 101 levels
    # Where it stands counts: 60 parentheses, and a comment nesting 70 inside them.
    with pytest.raises(StatementLimitError, match="nested too deeply: about 131 levels"):
        check_limits("SELECT " + "(" * 60 + "1 " + nested(70) + ")" * 60, "sql", LIMITS)
    # After the last token too.
    with pytest.raises(StatementLimitError, match="nested too deeply"):
        check_limits("SELECT 1 " + nested(150), "sql", LIMITS)


def test_an_unclosed_comment_counts_what_opens_before_the_end() -> None:
    with pytest.raises(StatementLimitError, match="nested too deeply: about 201 levels"):
        check_limits("SELECT 1 " + "/*" * 200, "sql", LIMITS)
    with pytest.raises(StatementLimitError, match="costs too much"):
        check_limits("SELECT 1 " + "/*" * 1000, "sql", LIMITS)


def test_many_nested_comments_cost_as_deep_as_each_opens() -> None:
    """A megabyte of comments nested two deep takes Spark's lexer seconds: each opened inside
    another counts as deep as it opens (2), each comment one, so the budget bounds them."""
    many = "SELECT 1 " + "/*/**/*/ " * 100_000
    scanned = scan_counted(many, LIMITS.max_tokens)
    assert scanned.over_budget
    with pytest.raises(StatementLimitError, match="costs too much"):
        check_limits(many, "sql", LIMITS)
    few = "SELECT 1 " + "/*/**/*/ " * 1_000
    assert scan_counted(few).cost == 2 + 1_000 * (1 + 2)
    check_limits(few, "sql", LIMITS)


def test_scanning_nested_comments_is_linear() -> None:
    """Each nested comment used to restart the scan of the whole rest of the text (176 KB of
    them took 97 s of the service's CPU at POST): the rest is now matched lazily. The result is
    checked here; ``python -m bench.validation`` times the megabyte cases."""
    text = "SELECT 1 " + "/*/**/*/ 1 " * 40_000
    tokens = scan(text)
    assert len(tokens) == 2 + 40_000
    assert {t.text for t in tokens[2:]} == {"1"}


def test_a_hint_start_inside_a_comment_opens_nothing_as_in_spark() -> None:
    """Spark's rule for a nested comment refuses a hint's start: in ``/* /*+ */`` the comment ends
    at the first ``*/``. Read as a nested comment, what follows would be hidden from the plugin's
    check while Spark runs it."""
    assert [t.text for t in scan("SELECT 1 AS a /* c /*+ d */, 2 AS b")] == [
        "SELECT",
        "1",
        "AS",
        "a",
        ",",
        "2",
        "AS",
        "b",
    ]
    hidden = "SELECT 1 /* /*+ */ , * FROM text.`/etc/passwd` -- */"
    assert "text" in [t.text for t in scan(hidden)]
    assert "text" in [t.text for t in tokenize(hidden)]  # the Flint lexer reads it alike
    with pytest.raises(QueryRefusedError, match="File is not allowed"):
        validate_query(LOCAL, "sql", hidden)


def _spark_comment_end(sql: str, start: int) -> int:
    """The end of the comment opening at ``start``, read a character at a time as Spark's lexer
    rule reads it (``'/*' {!isHint()}? ( BRACKETED_COMMENT | . )*? '*/'``); -1 when unclosed."""
    depth, pos = 0, start
    while pos < len(sql):
        if sql.startswith("/*", pos) and (depth == 0 or not sql.startswith("/*+", pos)):
            depth += 1
            pos += 2
        elif sql.startswith("*/", pos):
            depth -= 1
            pos += 2
            if depth == 0:
                return pos
        else:
            pos += 1
    return -1


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["/*", "*/", "/*+", "/", "*", "+", "x", "'", "--", "\n", "*/*", "/*/"]), max_size=30))
def test_the_comment_scan_ends_where_spark_s_lexer_does(pieces: list[str]) -> None:
    text = "/*" + "".join(pieces)
    assert bracketed_comment(text, 0).end == _spark_comment_end(text, 0)


# -- strings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT '" + "(" * 200 + "'",
        "SELECT from_json('[]', '" + "array<" * 200 + "int" + ">" * 200 + "')",
        "SELECT from_json(a, '" + '{"a":' * 200 + "1" + "}" * 200 + "')",
        "EXECUTE IMMEDIATE 'SELECT " + "(" * 200 + "1" + ")" * 200 + "'",
    ],
)
def test_brackets_nesting_in_a_string_count_as_depth(query: str) -> None:
    with pytest.raises(StatementLimitError, match="nested too deeply"):
        check_limits(query, "sql", LIMITS)


def test_string_depth() -> None:
    assert string_depth("'plain text'") == 0
    assert string_depth("'<a><b>1</b></a>'") == 1  # each tag closes what it opens
    assert string_depth("'array<struct<a:int>>'") == 2
    assert string_depth("')))((('") == 3  # closes with nothing open are skipped
    assert string_depth("'x < 5 and y < 6'") == 2


def test_separators_inside_strings_count_against_the_budget() -> None:
    """A string may hold a statement (``EXECUTE IMMEDIATE``) or a schema Spark reads: its
    separators count. A long string of text costs one token."""
    inner = "SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * 60_000) + ")"
    with pytest.raises(StatementLimitError, match="costs too much"):
        check_limits(f"EXECUTE IMMEDIATE '{inner}'", "sql", LIMITS)
    assert scan_counted("SELECT length('" + "a" * 900_000 + "')").cost == 5
    check_limits("SELECT length('" + "a" * 900_000 + "')", "sql", LIMITS)


# -- the budget --------------------------------------------------------------------------------------


def test_a_statement_past_its_token_budget_is_refused_and_one_within_it_is_not() -> None:
    in_list = "SELECT * FROM t WHERE a IN (" + ",".join(["1"] * 440_000) + ")"  # 880 KB, 880,000 tokens
    with pytest.raises(StatementLimitError, match="more than the 25000 tokens allowed"):
        check_limits(in_list, "sql", LIMITS)
    within = "SELECT * FROM t WHERE a IN (" + ",".join(["1"] * 12_000) + ")"
    check_limits(within, "sql", LIMITS)
    with pytest.raises(StatementLimitError, match="more than the 1000 tokens allowed"):
        check_limits(within, "sql", StatementLimits(max_tokens=1_000))


def test_the_scan_stops_at_the_budget() -> None:
    """Refusing a megabyte costs what scanning the budget's tokens costs, not the megabyte's."""
    scanned = scan_counted("SELECT " + "1," * 500_000, 1_000)
    assert scanned.over_budget
    assert len(scanned.tokens) <= 1_001
    assert not scan_counted("SELECT 1", 1_000).over_budget


def test_comments_count_one_each() -> None:
    assert scan_counted("SELECT 1 -- a\n/* b */ /*+ HINT */").cost == 2 + 2 + 3


def test_a_dereference_chain_nests_as_an_operator_chain_does() -> None:
    with pytest.raises(StatementLimitError, match="nested too deeply"):
        check_limits("SELECT a" + ".a" * 200 + " FROM t", "sql", LIMITS)
    check_limits("SELECT catalog.db.t.a, b.c FROM catalog.db.t", "sql", LIMITS)
