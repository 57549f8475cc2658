"""The Flint statement parser: every statement form of docs/flint.md, and plain Spark SQL left alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from query_core.errors import InvalidRequestError
from query_core.flint import (
    AlterIndex,
    AnalyzeIndex,
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    DescribeIndex,
    DropIndex,
    FlintOptions,
    FlintSyntaxError,
    IndexKind,
    IndexRef,
    QualifiedName,
    RecoverIndexJob,
    RefreshIndex,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    SkippingColumn,
    SkippingKind,
    Statement,
    VacuumIndex,
    is_flint_statement,
    parse,
)
from query_core.flint.lexer import string_value
from query_core.flint.parser import _grammar


def flint(sql: str) -> Statement:
    statement = parse(sql)
    assert statement is not None, f"not taken as a Flint statement: {sql!r}"
    return statement


def syntax_error(sql: str) -> FlintSyntaxError:
    with pytest.raises(FlintSyntaxError) as caught:
        parse(sql)
    return caught.value


def name(*parts: str) -> QualifiedName:
    return QualifiedName(parts)


T = name("t")
ALB = name("glue", "default", "alb_logs")


# -- skipping index -----------------------------------------------------------------------------


def test_create_skipping_index_with_every_kind_and_default_parameters() -> None:
    statement = flint(
        "CREATE SKIPPING INDEX ON glue.default.alb_logs "
        "(year PARTITION, client_ip VALUE_SET, elb_status_code MIN_MAX, request_url BLOOM_FILTER)"
    )
    assert statement == CreateSkippingIndex(
        table=ALB,
        columns=(
            SkippingColumn("year", SkippingKind.PARTITION, {}),
            SkippingColumn("client_ip", SkippingKind.VALUE_SET, {"max_size": "100"}),
            SkippingColumn("elb_status_code", SkippingKind.MIN_MAX, {}),
            SkippingColumn(
                "request_url", SkippingKind.BLOOM_FILTER, {"adaptive": "true", "num_candidates": "10", "fpp": "0.03"}
            ),
        ),
        if_not_exists=False,
        options=FlintOptions(),
    )


def test_create_skipping_index_if_not_exists_with_options() -> None:
    statement = flint(
        "CREATE SKIPPING INDEX IF NOT EXISTS ON alb_logs (client_ip VALUE_SET) "
        "WITH (auto_refresh = true, refresh_interval = '5 minutes', checkpoint_location = 's3://b/cp')"
    )
    assert isinstance(statement, CreateSkippingIndex)
    assert statement.if_not_exists
    assert statement.table == name("alb_logs")
    assert statement.index == IndexRef(IndexKind.SKIPPING, name("alb_logs"))
    assert statement.options.raw == {
        "auto_refresh": "true",
        "refresh_interval": "5 minutes",
        "checkpoint_location": "s3://b/cp",
    }
    assert statement.options.auto_refresh
    assert statement.options.refresh_interval == "5 minutes"


@pytest.mark.parametrize(
    ("column", "params"),
    [
        ("c VALUE_SET", {"max_size": "100"}),
        ("c VALUE_SET(20)", {"max_size": "20"}),
        ("c VALUE_SET('7')", {"max_size": "7"}),
        ("c BLOOM_FILTER", {"adaptive": "true", "num_candidates": "10", "fpp": "0.03"}),
        ("c BLOOM_FILTER(5)", {"adaptive": "true", "num_candidates": "5", "fpp": "0.03"}),
        ("c BLOOM_FILTER(5, 0.01)", {"adaptive": "true", "num_candidates": "5", "fpp": "0.01"}),
        ("c BLOOM_FILTER(false)", {"adaptive": "false", "num_items": "10000", "fpp": "0.03"}),
        ("c BLOOM_FILTER(FALSE, 100)", {"adaptive": "false", "num_items": "100", "fpp": "0.03"}),
        ("c BLOOM_FILTER(false, 100, 0.5)", {"adaptive": "false", "num_items": "100", "fpp": "0.5"}),
        # Stored as Java's Double.toString writes it, as the reference's _meta has it.
        ("c BLOOM_FILTER(false, 100, 0.0001)", {"adaptive": "false", "num_items": "100", "fpp": "1.0E-4"}),
        ("c bloom_filter(10, .25)", {"adaptive": "true", "num_candidates": "10", "fpp": "0.25"}),
    ],
)
def test_skipping_parameters_and_their_defaults(column: str, params: dict[str, str]) -> None:
    statement = flint(f"CREATE SKIPPING INDEX ON t ({column})")
    assert isinstance(statement, CreateSkippingIndex)
    (parsed,) = statement.columns
    assert parsed.name == "c"
    assert dict(parsed.params) == params


@pytest.mark.parametrize(
    ("column", "message", "at"),
    [
        ("c PARTITION(1)", "PARTITION takes no parameters", "1)"),
        ("c MIN_MAX(1, 2)", "MIN_MAX takes no parameters", "1,"),
        ("c VALUE_SET(1, 2)", "VALUE_SET takes one parameter, the limit", "2)"),
        ("c VALUE_SET(0.5)", "VALUE_SET limit must be a non-negative integer, not '0.5'", "0.5"),
        ("c VALUE_SET(true)", "VALUE_SET limit must be a non-negative integer, not 'true'", "true"),
        ("c BLOOM_FILTER(0)", "BLOOM_FILTER num_candidates must be a positive integer, not '0'", "0)"),
        ("c BLOOM_FILTER(true)", "BLOOM_FILTER takes (num_candidates, fpp) or (false, num_items, fpp)", "true"),
        ("c BLOOM_FILTER(10, 0.01, 3)", "BLOOM_FILTER takes (num_candidates, fpp)", "3)"),
        ("c BLOOM_FILTER(false, 1, 0.1, 4)", "BLOOM_FILTER takes (num_candidates, fpp)", "4)"),
        ("c BLOOM_FILTER(false, 10, 1.5)", "BLOOM_FILTER fpp must be a number between 0 and 1, not '1.5'", "1.5"),
        ("c BLOOM_FILTER(10, 'x')", "BLOOM_FILTER fpp must be a number between 0 and 1, not 'x'", "'x'"),
    ],
)
def test_unusable_skipping_parameters_are_refused_where_they_stand(column: str, message: str, at: str) -> None:
    sql = f"CREATE SKIPPING INDEX ON t ({column})"
    error = syntax_error(sql)
    assert message in error.reason
    assert (error.line, error.column) == (1, sql.index(at) + 1)


def test_a_where_clause_on_a_skipping_index_is_refused_with_the_reference_message() -> None:
    error = syntax_error(
        "CREATE SKIPPING INDEX ON alb_logs\n(client_ip VALUE_SET)\nWHERE status != 200\nWITH (auto_refresh = true)"
    )
    assert error.reason == "Filtering condition is not supported: WHERE status != 200"
    assert (error.line, error.column) == (3, 1)
    assert "line 3, column 1" in error.message


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("REFRESH SKIPPING INDEX ON glue.default.alb_logs", RefreshIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        ("DESC SKIPPING INDEX ON glue.default.alb_logs", DescribeIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        ("DESCRIBE SKIPPING INDEX ON glue.default.alb_logs", DescribeIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        ("DROP SKIPPING INDEX ON glue.default.alb_logs", DropIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        ("VACUUM SKIPPING INDEX ON glue.default.alb_logs", VacuumIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        ("ANALYZE SKIPPING INDEX ON glue.default.alb_logs", AnalyzeIndex(IndexRef(IndexKind.SKIPPING, ALB))),
        (
            "ALTER SKIPPING INDEX ON glue.default.alb_logs WITH (auto_refresh = false)",
            AlterIndex(IndexRef(IndexKind.SKIPPING, ALB), FlintOptions({"auto_refresh": "false"})),
        ),
    ],
)
def test_skipping_index_statements(sql: str, expected: Statement) -> None:
    assert flint(sql) == expected


# -- covering index -----------------------------------------------------------------------------


def test_create_covering_index() -> None:
    statement = flint("CREATE INDEX elb_and_requestUri ON glue.default.alb_logs (elb, requestUri)")
    assert statement == CreateCoveringIndex(
        name="elb_and_requestUri",
        table=ALB,
        columns=("elb", "requestUri"),
        where=None,
        if_not_exists=False,
        options=FlintOptions(),
    )
    assert isinstance(statement, CreateCoveringIndex)
    assert statement.index == IndexRef(IndexKind.COVERING, ALB, "elb_and_requestUri")


def test_create_covering_index_if_not_exists_with_where_and_options() -> None:
    statement = flint(
        "CREATE INDEX IF NOT EXISTS idx ON t (a, b.c) WHERE status != 404 AND url LIKE '%WITH (x)%' "
        "WITH (auto_refresh = true, id_expression = 'sha1(a)')"
    )
    assert isinstance(statement, CreateCoveringIndex)
    assert statement.if_not_exists
    assert statement.columns == ("a", "b.c")
    assert statement.where == "status != 404 AND url LIKE '%WITH (x)%'"
    assert statement.options.raw == {"auto_refresh": "true", "id_expression": "sha1(a)"}
    assert statement.options.id_expression == "sha1(a)"


@pytest.mark.parametrize(
    "condition",
    [
        "a = 1",
        "a IN (1, 2, (3))",
        "s = 'it''s' OR s = \"x;y\" OR s = 'WITH (auto_refresh = true)'",
        "a > 1 -- WITH (auto_refresh = true)\n  AND b < 2",
        "a /* with ( */ > 1",
        "dt >= date_sub(current_date(), 7)\n    AND `weird col` IS NOT NULL",
        "x WITH (y",  # not a WITH clause: the condition runs on, as in the reference
    ],
)
def test_the_covering_index_filter_is_kept_exactly_as_written(condition: str) -> None:
    statement = flint(f"CREATE INDEX idx ON t (a) WHERE {condition}\n WITH (auto_refresh = false);")
    assert isinstance(statement, CreateCoveringIndex)
    assert statement.where == condition
    assert statement.options.raw == {"auto_refresh": "false"}


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("REFRESH INDEX idx ON glue.default.alb_logs", RefreshIndex(IndexRef(IndexKind.COVERING, ALB, "idx"))),
        ("DESC INDEX idx ON glue.default.alb_logs", DescribeIndex(IndexRef(IndexKind.COVERING, ALB, "idx"))),
        ("DESCRIBE INDEX idx ON glue.default.alb_logs", DescribeIndex(IndexRef(IndexKind.COVERING, ALB, "idx"))),
        ("DROP INDEX idx ON glue.default.alb_logs", DropIndex(IndexRef(IndexKind.COVERING, ALB, "idx"))),
        ("VACUUM INDEX idx ON glue.default.alb_logs", VacuumIndex(IndexRef(IndexKind.COVERING, ALB, "idx"))),
        (
            "ALTER INDEX idx ON glue.default.alb_logs WITH (auto_refresh = true, watermark_delay = '1 minute')",
            AlterIndex(
                IndexRef(IndexKind.COVERING, ALB, "idx"),
                FlintOptions({"auto_refresh": "true", "watermark_delay": "1 minute"}),
            ),
        ),
        ("SHOW INDEX ON glue.default.alb_logs", ShowCoveringIndexes(ALB)),
        ("SHOW INDEXES ON alb_logs", ShowCoveringIndexes(name("alb_logs"))),
    ],
)
def test_covering_index_statements(sql: str, expected: Statement) -> None:
    assert flint(sql) == expected


# -- materialized view --------------------------------------------------------------------------


def test_create_materialized_view() -> None:
    statement = flint("CREATE MATERIALIZED VIEW glue.default.mv AS SELECT a, count(*) AS n FROM t GROUP BY a")
    assert statement == CreateMaterializedView(
        name=name("glue", "default", "mv"),
        query="SELECT a, count(*) AS n FROM t GROUP BY a",
        if_not_exists=False,
        options=FlintOptions(),
    )
    assert isinstance(statement, CreateMaterializedView)
    assert statement.index == IndexRef(IndexKind.MV, name("glue", "default", "mv"))


def test_create_materialized_view_if_not_exists_with_options() -> None:
    statement = flint(
        "create materialized view if not exists mv as select * from t "
        "with (auto_refresh = true, watermark_delay = '10 seconds', output_mode = 'append')"
    )
    assert isinstance(statement, CreateMaterializedView)
    assert statement.if_not_exists
    assert statement.query == "select * from t"
    assert statement.options.watermark_delay == "10 seconds"
    assert statement.options.output_mode == "append"


_QUERIES = [
    "SELECT 1",
    "SELECT * FROM t WHERE s = 'WITH (auto_refresh = true)'",
    "SELECT \"a;b\", 'c''d', r'\\n' FROM t",
    "WITH totals AS (SELECT a, sum(b) AS s FROM t GROUP BY a)\nSELECT * FROM totals",
    "SELECT a FROM (SELECT a FROM (SELECT 1 AS a) x) y WHERE a IN (SELECT 1)",
    "SELECT a -- WITH (auto_refresh = true)\nFROM t",
    "SELECT /*+ BROADCAST(u) */ * FROM t JOIN u ON t.id = u.id",
    "SELECT a /* nested /* comment */ WITH ( */ FROM t",
    "SELECT window.start, COUNT(*) FROM t GROUP BY TUMBLE(ts, '1 Minute')",
    "SELECT 1; SELECT 2",
    "SELECT `with`, `(` FROM t",
    "  SELECT\n\t1\n",
]


@pytest.mark.parametrize("query", _QUERIES)
@pytest.mark.parametrize(
    "tail", ["", " WITH (auto_refresh = true)", "\nWITH (auto_refresh = true) ;", " ;", "-- done\n"]
)
def test_the_materialized_view_query_is_kept_exactly_as_written(query: str, tail: str) -> None:
    statement = flint(f"CREATE MATERIALIZED VIEW mv AS {query}{tail}")
    assert isinstance(statement, CreateMaterializedView)
    assert statement.query == query.strip()
    assert statement.options.auto_refresh == ("auto_refresh" in tail)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "REFRESH MATERIALIZED VIEW glue.default.mv",
            RefreshIndex(IndexRef(IndexKind.MV, name("glue", "default", "mv"))),
        ),
        ("DESC MATERIALIZED VIEW mv", DescribeIndex(IndexRef(IndexKind.MV, name("mv")))),
        ("DESCRIBE MATERIALIZED VIEW db.mv", DescribeIndex(IndexRef(IndexKind.MV, name("db", "mv")))),
        ("DROP MATERIALIZED VIEW mv", DropIndex(IndexRef(IndexKind.MV, name("mv")))),
        ("VACUUM MATERIALIZED VIEW mv", VacuumIndex(IndexRef(IndexKind.MV, name("mv")))),
        (
            "ALTER MATERIALIZED VIEW mv WITH (auto_refresh = false)",
            AlterIndex(IndexRef(IndexKind.MV, name("mv")), FlintOptions({"auto_refresh": "false"})),
        ),
        ("SHOW MATERIALIZED VIEW IN glue", ShowMaterializedViews("glue", None)),
        ("SHOW MATERIALIZED VIEWS IN glue.default", ShowMaterializedViews("glue", "default")),
    ],
)
def test_materialized_view_statements(sql: str, expected: Statement) -> None:
    assert flint(sql) == expected


# -- index management ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SHOW FLINT INDEX IN glue", ShowFlintIndexes("glue", None, extended=False)),
        ("SHOW FLINT INDEXES IN glue", ShowFlintIndexes("glue", None, extended=False)),
        ("SHOW FLINT INDEX IN glue.default", ShowFlintIndexes("glue", "default", extended=False)),
        ("SHOW FLINT INDEX EXTENDED IN glue", ShowFlintIndexes("glue", None, extended=True)),
        ("show flint indexes extended in `glue`.`my db`;", ShowFlintIndexes("glue", "my db", extended=True)),
        (
            "RECOVER INDEX JOB `flint_glue_default_t_skipping_index`",
            RecoverIndexJob("flint_glue_default_t_skipping_index"),
        ),
    ],
)
def test_index_management_statements(sql: str, expected: Statement) -> None:
    assert flint(sql) == expected


def test_index_statements_expose_their_kind() -> None:
    statement = flint("DROP INDEX idx ON t")
    assert isinstance(statement, DropIndex)
    assert statement.index_kind is IndexKind.COVERING


# -- lexical matters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "create skipping index on t (a value_set) with (auto_refresh = TRUE)",
        "CrEaTe SkIpPiNg InDeX On t (a VaLuE_SeT) WiTh (auto_refresh = True)",
        "CREATE SKIPPING INDEX ON t (a VALUE_SET) WITH (auto_refresh = true)",
    ],
)
def test_keywords_are_case_insensitive(sql: str) -> None:
    assert flint(sql) == CreateSkippingIndex(
        T,
        (SkippingColumn("a", SkippingKind.VALUE_SET, {"max_size": "100"}),),
        False,
        FlintOptions({"auto_refresh": "true"}),
    )


def test_names_keep_their_case() -> None:
    statement = flint("DROP INDEX MyIdx ON Glue.Default.MyTable")
    assert statement == DropIndex(IndexRef(IndexKind.COVERING, name("Glue", "Default", "MyTable"), "MyIdx"))


@pytest.mark.parametrize(
    "sql",
    [
        "-- a comment\nDROP SKIPPING INDEX ON t",
        "/* a comment */ DROP SKIPPING INDEX ON t",
        "DROP /* in */ SKIPPING -- between\n INDEX ON /* a /* nested */ comment */ t -- trailing",
        "\n\t DROP SKIPPING INDEX ON t \n",
        "DROP SKIPPING INDEX ON t;",
        "DROP SKIPPING INDEX ON t ; ;;",
        "DROP SKIPPING INDEX ON t; -- done",
    ],
)
def test_comments_whitespace_and_semicolons(sql: str) -> None:
    assert flint(sql) == DropIndex(IndexRef(IndexKind.SKIPPING, T))


def test_an_unclosed_comment_is_refused() -> None:
    error = syntax_error("DROP SKIPPING INDEX ON t /* never closed")
    assert error.reason == "Unclosed bracketed comment"
    assert (error.line, error.column) == (1, 26)


@pytest.mark.parametrize(
    ("written", "parts"),
    [
        ("`my table`", ("my table",)),
        ("`db`.`t`", ("db", "t")),
        ("`glue`.`default`.`a.b`", ("glue", "default", "a.b")),
        ("`back``quote`", ("back`quote",)),
        ("glue.`default`.t_1", ("glue", "default", "t_1")),
        ("view", ("view",)),  # keywords are names too
        ("index.partition.on", ("index", "partition", "on")),
        ("123abc", ("123abc",)),
    ],
)
def test_quoted_and_unquoted_names(written: str, parts: tuple[str, ...]) -> None:
    statement = flint(f"REFRESH SKIPPING INDEX ON {written}")
    assert statement == RefreshIndex(IndexRef(IndexKind.SKIPPING, QualifiedName(parts)))


@pytest.mark.parametrize("keyword", sorted(_grammar().keywords))
def test_every_keyword_is_also_a_name(keyword: str) -> None:
    statement = flint(f"CREATE INDEX {keyword} ON {keyword.lower()}.{keyword} ({keyword})")
    assert statement == CreateCoveringIndex(keyword, name(keyword.lower(), keyword), (keyword,))


def test_keywords_as_column_names_in_a_skipping_index() -> None:
    statement = flint("CREATE SKIPPING INDEX ON t (partition PARTITION, value_set VALUE_SET(5), `with` MIN_MAX)")
    assert isinstance(statement, CreateSkippingIndex)
    assert [(c.name, c.kind) for c in statement.columns] == [
        ("partition", SkippingKind.PARTITION),
        ("value_set", SkippingKind.VALUE_SET),
        ("with", SkippingKind.MIN_MAX),
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE SKIPPING INDEX ON a.b.c.d (x PARTITION)",
        "DROP MATERIALIZED VIEW a.b.c.d",
        "SHOW FLINT INDEX IN a.b.c",
        "SHOW MATERIALIZED VIEWS IN a.b.c",
    ],
)
def test_names_with_too_many_parts_are_refused(sql: str) -> None:
    assert "Too many name parts" in syntax_error(sql).reason


def test_an_empty_quoted_name_is_refused() -> None:
    assert syntax_error("DROP INDEX `` ON t").reason == "A name cannot be empty"


# -- options ------------------------------------------------------------------------------------


def test_option_values_end_as_strings_typed_as_the_reference_types_them() -> None:
    statement = flint(
        "CREATE INDEX i ON t (a) WITH ("
        "auto_refresh = TRUE, incremental_refresh false, 'refresh_interval' == '1 hour', "
        'checkpoint_location = "s3://b/it\'s", watermark_delay = 10, output_mode = 1.50, '
        "index_settings = '{\"number_of_shards\": 3}', "
        'extra_options = \'{"glue.default.t": {"maxFilesPerTrigger": "10"}, "sink": {"a": "b"}}\')'
    )
    assert isinstance(statement, CreateCoveringIndex)
    options = statement.options
    assert options.raw == {
        "auto_refresh": "true",
        "incremental_refresh": "false",
        "refresh_interval": "1 hour",
        "checkpoint_location": "s3://b/it's",
        "watermark_delay": "10",
        "output_mode": "1.50",
        "index_settings": '{"number_of_shards": 3}',
        "extra_options": '{"glue.default.t": {"maxFilesPerTrigger": "10"}, "sink": {"a": "b"}}',
    }
    assert options.auto_refresh is True
    assert options.incremental_refresh is False
    assert options.index_settings == '{"number_of_shards": 3}'
    assert options.extra_options == '{"glue.default.t": {"maxFilesPerTrigger": "10"}, "sink": {"a": "b"}}'


def test_options_defaults() -> None:
    options = FlintOptions()
    assert options.auto_refresh is False
    assert options.incremental_refresh is False
    assert options.refresh_interval is None
    assert options.scheduler_mode is None
    assert options.extra_options is None
    assert options.with_defaults() == {"auto_refresh": "false", "incremental_refresh": "false"}
    assert FlintOptions({"auto_refresh": "TRUE", "scheduler_mode": "External"}).with_defaults() == {
        "auto_refresh": "TRUE",
        "incremental_refresh": "false",
        "scheduler_mode": "External",
    }
    assert FlintOptions({"scheduler_mode": "External"}).scheduler_mode == "external"


def test_a_repeated_option_keeps_the_last_value_as_in_the_reference() -> None:
    statement = flint("CREATE INDEX i ON t (a) WITH (auto_refresh = true, auto_refresh = false)")
    assert isinstance(statement, CreateCoveringIndex)
    assert statement.options.raw == {"auto_refresh": "false"}


def test_string_escapes_in_option_values() -> None:
    statement = flint(r"CREATE INDEX i ON t (a) WITH (id_expression = 'a\tb\\c\'d\u0041\%')")
    assert isinstance(statement, CreateCoveringIndex)
    assert statement.options.id_expression == "a\tb\\c'dA\\%"


@pytest.mark.parametrize(
    ("options", "message", "at"),
    [
        ("indexSetting = 'x'", "option name indexSetting is invalid", "indexSetting"),
        ("AUTO_REFRESH = true", "option name AUTO_REFRESH is invalid", "AUTO"),  # names are case-sensitive
        ("auto_refresh = true, `auto.refresh` = 1", "option name auto.refresh is invalid", "`auto.refresh`"),
        ("auto_refresh = 'yes'", "option auto_refresh must be true or false, not 'yes'", "'yes'"),
        ("incremental_refresh = 1", "option incremental_refresh must be true or false, not '1'", "1"),
        ("scheduler_mode = 'sometimes'", "Scheduler mode sometimes is invalid. Must be 'internal' or 'external'.", "'"),
        ("index_settings = '{not json'", "option index_settings must be a JSON object", "'"),
        ("index_mappings = '[1]'", "option index_mappings must be a JSON object", "'"),
        ("extra_options = '{\"t\": 1}'", "option extra_options must map each source", "'"),
    ],
)
def test_invalid_options_are_refused(options: str, message: str, at: str) -> None:
    sql = f"CREATE INDEX i ON t (a) WITH ({options})"
    error = syntax_error(sql)
    assert error.reason.startswith(message)
    assert (error.line, error.column) == (1, sql.index(at, len("CREATE INDEX i ON t (a) WITH (")) + 1)


def test_flint_options_validate_when_built_directly() -> None:
    with pytest.raises(ValueError, match="option name nope is invalid"):
        FlintOptions({"nope": "1"})


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER SKIPPING INDEX ON t WITH (refresh_interval = '1 minute')",
        "ALTER INDEX i ON t WITH (checkpoint_location = 's3://b')",
        "ALTER MATERIALIZED VIEW mv WITH (scheduler_mode = 'internal')",
    ],
)
def test_alter_must_change_auto_refresh(sql: str) -> None:
    error = syntax_error(sql)
    assert error.reason.startswith("ALTER must change auto_refresh")
    assert error.line == 1
    assert error.column == sql.index("WITH") + 1


def test_alter_needs_options() -> None:
    assert "expected" in syntax_error("ALTER INDEX i ON t").reason


# -- syntax errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "near", "expected", "line", "column"),
    [
        ("CREATE INDEX", "end of input", "IF, a name", 1, 13),
        ("CREATE SKIPPING INDEX ON t", "end of input", "'(', '.'", 1, 27),
        ("CREATE SKIPPING INDEX ON t (a FOO)", "'FOO'", "BLOOM_FILTER, MIN_MAX, PARTITION, VALUE_SET", 1, 31),
        ("CREATE MATERIALIZED VIEW mv AS", "end of input", "a query", 1, 31),
        ("CREATE INDEX i ON t (a) WHERE", "end of input", "a condition", 1, 30),
        ("DROP SKIPPING INDEX t", "'t'", "ON", 1, 21),
        ("ANALYZE INDEX i ON t", "'INDEX'", "SKIPPING", 1, 9),
        ("SHOW FLINT INDEX glue", "'glue'", "EXTENDED, IN", 1, 18),
        ("DROP INDEX i ON t DROP TABLE x", "'DROP'", "'.', ';', end of input", 1, 19),
        (
            "CREATE INDEX i ON t (a)\nWITH (auto_refresh = true,\n  refresh_interval = 1 minute)",
            "'minute'",
            "')', ','",
            3,
            24,
        ),
        ("CREATE INDEX i ON t (a) WITH (auto_refresh ~ true)", "'~'", "'=', '=='", 1, 44),
        ("CREATE INDEX i ON t (a) WITH (auto_refresh = 'x", '"\'"', "FALSE, TRUE, a number, a string", 1, 46),
        ("DROP INDEX IF EXISTS i ON t", "'EXISTS'", "ON", 1, 15),
    ],
)
def test_syntax_errors_say_where_and_what_was_expected(
    sql: str, near: str, expected: str, line: int, column: int
) -> None:
    error = syntax_error(sql)
    assert error.reason.startswith(f"Syntax error at or near {near}: expected ")
    assert expected in error.reason
    assert (error.line, error.column) == (line, column)
    assert error.message.endswith(f"(line {line}, column {column})")


def test_a_flint_syntax_error_is_a_client_error() -> None:
    error = syntax_error("CREATE INDEX")
    assert isinstance(error, InvalidRequestError)
    assert error.http_status == 400


# -- plain Spark SQL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "",
        "   ",
        "-- only a comment",
        "/* unclosed",
        "SELECT 1",
        "select * from glue.default.alb_logs where s = 'CREATE INDEX i ON t (a)'",
        "SELECT 'CREATE SKIPPING INDEX ON t (a PARTITION)'",
        "CREATE TABLE t (a INT) USING parquet",
        "CREATE TABLE IF NOT EXISTS local.default.t AS SELECT 1",
        "CREATE DATABASE db",
        "CREATE OR REPLACE VIEW v AS SELECT 1",
        "CREATE TEMPORARY VIEW v AS SELECT 1",
        "DROP TABLE t",
        "DROP TABLE IF EXISTS local.default.t",
        "DROP VIEW v",
        "SHOW TABLES IN x",
        "SHOW TABLES",
        "SHOW SCHEMAS IN local",
        "SHOW DATABASES",
        "SHOW TABLE EXTENDED IN local.default LIKE '*'",
        "SHOW VIEWS IN db",
        "SHOW PARTITIONS t",
        "DESC x.y.z",
        "DESC t",
        "DESCRIBE TABLE EXTENDED local.default.t",
        "DESC FORMATTED t",
        # Spark reads these as describing the table `index`, `skipping` or `materialized`.
        "DESC index",
        "DESC INDEX some_column",
        "DESC SKIPPING INDEX",
        "DESCRIBE materialized view",
        "DESC materialized view.field",
        "DESC INDEX a.b",
        "INSERT INTO t VALUES (1, 'CREATE INDEX')",
        "INSERT OVERWRITE TABLE t SELECT * FROM u",
        "ALTER TABLE t ADD COLUMNS (b INT)",
        "ALTER VIEW v AS SELECT 2",
        "REFRESH TABLE t",
        "REFRESH FUNCTION f",
        "REFRESH 's3://bucket/path'",
        "ANALYZE TABLE t COMPUTE STATISTICS",
        "EXPLAIN CREATE SKIPPING INDEX ON t (a PARTITION)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "USE local.db",
        "SET spark.sql.shuffle.partitions = 4",
        "CACHE TABLE t",
        "MSCK REPAIR TABLE t",
        "`CREATE` INDEX i ON t (a)",
        "CREATE `INDEX` i ON t (a)",
        "source = glue.default.t | where a > 1",
    ],
)
def test_plain_spark_sql_is_not_a_flint_statement(sql: str) -> None:
    assert not is_flint_statement(sql)
    assert parse(sql) is None


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE INDEX",
        "drop index x",
        "DESC INDEX `i` ON",
        "describe materialized view `mv` extra",
        "SHOW FLINT",
        "vacuum skipping",
    ],
)
def test_malformed_flint_statements_are_still_flint_statements(sql: str) -> None:
    assert is_flint_statement(sql)
    with pytest.raises(FlintSyntaxError):
        parse(sql)


# -- robustness ---------------------------------------------------------------------------------

_LEADS = [
    "CREATE SKIPPING INDEX",
    "CREATE INDEX",
    "CREATE MATERIALIZED VIEW",
    "REFRESH INDEX",
    "ALTER MATERIALIZED VIEW",
    "DROP SKIPPING INDEX",
    "VACUUM INDEX",
    "ANALYZE SKIPPING INDEX",
    "DESC INDEX i ON",
    "DESCRIBE MATERIALIZED VIEW mv",
    "SHOW FLINT INDEX",
    "SHOW INDEXES",
    "SHOW MATERIALIZED VIEWS",
    "RECOVER INDEX JOB",
]
_WORDS = [
    *(keyword.lower() for keyword in _grammar().keywords),
    "t", "a", "auto_refresh", "index_settings", "extra_options", "scheduler_mode", "SELECT",
    "(", ")", ",", ".", ";", "=", "==", "'x'", "'{}'", "\"true\"", "`q`", "``", "1", "0.5", ".5", "1.5x",
    "--", "\n", "/*", "*/", "/*+", "'", "`", "r'", "\\", "é", "\x00",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_arbitrary_text_is_none_or_a_statement_or_a_syntax_error(sql: str) -> None:
    try:
        parse(sql)
    except FlintSyntaxError:
        pass


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_LEADS), st.lists(st.sampled_from(_WORDS), max_size=20), st.text(max_size=10))
def test_flint_like_text_is_a_statement_or_a_syntax_error(lead: str, words: list[str], noise: str) -> None:
    sql = " ".join([lead, *words, noise])
    try:
        statement = parse(sql)
    except FlintSyntaxError as error:
        assert error.line is not None and error.column is not None
        assert error.line >= 1 and error.column >= 1
    else:
        assert statement is not None


_QUERY_PARTS = ["a", "'WITH (auto_refresh = true)'", "(SELECT 1)", "/* ; */", "-- c\n", "`b`", "1.5", ",", ";", "WITH"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_QUERY_PARTS), max_size=12))
def test_any_materialized_view_query_comes_back_unchanged(parts: list[str]) -> None:
    query = " ".join(["SELECT", *parts, "FROM t"])
    statement = flint(f"CREATE MATERIALIZED VIEW mv AS {query} WITH (auto_refresh = true);")
    assert isinstance(statement, CreateMaterializedView)
    assert statement.query == query
    assert statement.options.auto_refresh


# -- the lexer ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'plain'", "plain"),
        ('"double"', "double"),
        (r"'a\'b'", "a'b"),
        (r"'a\nb\tc'", "a\nb\tc"),
        (r"'\u00e9\U0001F600'", "\u00e9\U0001f600"),
        (r"'\101'", "A"),
        (r"'\%\_'", "\\%\\_"),
        (r"'\q'", "q"),
        (r"r'\n'", "\\n"),
        (r'R"\d+"', "\\d+"),
    ],
)
def test_string_literals_unescape_as_spark_does(literal: str, value: str) -> None:
    assert string_value(literal) == value


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "qualified"),
    [
        (("t",), ("local", "default", "t")),
        (("db", "t"), ("local", "db", "t")),
        (("glue", "db", "t"), ("glue", "db", "t")),
    ],
)
def test_a_missing_catalog_is_the_datasource_and_a_missing_database_is_default(
    parts: tuple[str, ...], qualified: tuple[str, ...]
) -> None:
    assert QualifiedName(parts).qualify("local") == QualifiedName(qualified)
    assert QualifiedName(parts).qualify("local").is_qualified


def test_qualified_names_render_for_spark() -> None:
    table = QualifiedName(("glue", "my db", "odd`name"))
    assert str(table) == "glue.my db.odd`name"
    assert table.sql() == "`glue`.`my db`.`odd``name`"
    assert table.name == "odd`name"


def test_index_refs_qualify_their_table() -> None:
    ref = IndexRef(IndexKind.COVERING, name("t"), "idx").qualify("local")
    assert ref == IndexRef(IndexKind.COVERING, name("local", "default", "t"), "idx")
    with pytest.raises(ValueError):
        IndexRef(IndexKind.SKIPPING, T, "idx")
    with pytest.raises(ValueError):
        IndexRef(IndexKind.COVERING, T)
