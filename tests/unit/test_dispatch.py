"""The classifier: every statement form of docs/flint.md lands in its query kind, first match wins."""

from __future__ import annotations

import typing

import pytest

from async_query.dispatch import DISPATCH, Classified, QueryKind, classify, kind_of, kind_of_session
from query_core.flint import FlintSyntaxError, Statement, parse
from query_core.ppl import PplSyntaxError
from query_core.states import SessionType

INTER, BATCH, STREAM, DML = QueryKind.INTERACTIVE, QueryKind.BATCH, QueryKind.STREAMING, QueryKind.INDEX_DML

#: (query, kind) for every statement form of docs/flint.md, with and without the options that
#: change its kind.
FLINT_FORMS: list[tuple[str, QueryKind]] = [
    # skipping index
    ("CREATE SKIPPING INDEX ON t (a PARTITION, b VALUE_SET, c MIN_MAX, d BLOOM_FILTER)", BATCH),
    ("CREATE SKIPPING INDEX IF NOT EXISTS ON glue.db.t (a VALUE_SET(10))", BATCH),
    ("CREATE SKIPPING INDEX ON t (a PARTITION) WITH (auto_refresh = false)", BATCH),
    ("CREATE SKIPPING INDEX ON t (a PARTITION) WITH (auto_refresh = true)", STREAM),
    ("create skipping index on t (a partition) with (auto_refresh = TRUE, refresh_interval = '1 minute')", STREAM),
    ("CREATE SKIPPING INDEX ON t (a BLOOM_FILTER(false, 10000, 0.03)) WITH (auto_refresh = 'true')", STREAM),
    ("REFRESH SKIPPING INDEX ON t", BATCH),
    ("DESC SKIPPING INDEX ON t", INTER),
    ("DESCRIBE SKIPPING INDEX ON glue.db.t", INTER),
    ("DROP SKIPPING INDEX ON t", DML),
    ("VACUUM SKIPPING INDEX ON t", BATCH),
    ("ANALYZE SKIPPING INDEX ON t", INTER),
    ("ALTER SKIPPING INDEX ON t WITH (auto_refresh = false)", DML),
    ("ALTER SKIPPING INDEX ON t WITH (auto_refresh = true)", STREAM),
    # covering index
    ("CREATE INDEX idx ON t (a, b)", BATCH),
    ("CREATE INDEX IF NOT EXISTS idx ON glue.db.t (a) WHERE a > 1 WITH (auto_refresh = false)", BATCH),
    ("CREATE INDEX idx ON t (a) WITH (auto_refresh = true, checkpoint_location = 's3://b/c')", STREAM),
    ("REFRESH INDEX idx ON t", BATCH),
    ("DESC INDEX idx ON t", INTER),
    ("DESCRIBE INDEX idx ON t", INTER),
    ("DROP INDEX idx ON t", DML),
    ("VACUUM INDEX idx ON t", BATCH),
    ("ALTER INDEX idx ON t WITH (auto_refresh = false)", DML),
    ("ALTER INDEX idx ON t WITH (auto_refresh = true, refresh_interval = '5 minutes')", STREAM),
    ("SHOW INDEX ON t", INTER),
    ("SHOW INDEXES ON glue.db.t", INTER),
    # materialized view
    ("CREATE MATERIALIZED VIEW mv AS SELECT a, count(*) FROM t GROUP BY a", BATCH),
    ("CREATE MATERIALIZED VIEW IF NOT EXISTS glue.db.mv AS SELECT 1 WITH (auto_refresh = false)", BATCH),
    ("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t WITH (auto_refresh = true, watermark_delay = '1 Minute')", STREAM),
    ("REFRESH MATERIALIZED VIEW mv", BATCH),
    ("DESC MATERIALIZED VIEW mv", INTER),
    ("DESCRIBE MATERIALIZED VIEW glue.db.mv", INTER),
    ("DROP MATERIALIZED VIEW mv", DML),
    ("VACUUM MATERIALIZED VIEW mv", BATCH),
    ("ALTER MATERIALIZED VIEW mv WITH (auto_refresh = false)", DML),
    ("ALTER MATERIALIZED VIEW mv WITH (auto_refresh = true)", STREAM),
    ("SHOW MATERIALIZED VIEW IN glue", INTER),
    ("SHOW MATERIALIZED VIEWS IN glue.db", INTER),
    # Flint indexes of a catalog, and a stream restarted
    ("SHOW FLINT INDEX IN glue", INTER),
    ("SHOW FLINT INDEXES IN glue.db", INTER),
    ("SHOW FLINT INDEXES EXTENDED IN glue.db", INTER),
    ("RECOVER INDEX JOB flint_glue_db_t_skipping_index", STREAM),
]

PLAIN_SQL = [
    "SELECT 1",
    "select * from glue.db.t where a = 'DROP SKIPPING INDEX ON t'",
    "SHOW SCHEMAS IN glue",
    "SHOW TABLE EXTENDED IN glue.db LIKE '*'",
    "DESC glue.db.t",
    "DESC index",  # Spark reads it as describing a table named index
    "DESCRIBE materialized view",  # table ``materialized``, column ``view``
    "SHOW TABLES",
    "CREATE TABLE t (a INT)",
    "DROP TABLE t",
    "ALTER TABLE t ADD COLUMNS (b INT)",
    "REFRESH TABLE t",
    "  -- a comment\nSELECT 2",
]


@pytest.mark.parametrize(("query", "kind"), FLINT_FORMS, ids=[q for q, _ in FLINT_FORMS])
def test_every_flint_form_has_its_kind(query: str, kind: QueryKind) -> None:
    classified = classify("sql", query)
    assert classified.kind is kind
    assert classified.statement == parse(query)
    assert classified.statement is not None


@pytest.mark.parametrize("query", PLAIN_SQL)
def test_plain_spark_sql_is_interactive(query: str) -> None:
    assert classify("sql", query) == Classified(QueryKind.INTERACTIVE, None, "plain Spark SQL")


@pytest.mark.parametrize("lang", ["ppl", "PPL"])
@pytest.mark.parametrize(
    "query", ["source = glue.db.t | where a > 1 | stats count() by b", "search source=t | head 10"]
)
def test_ppl_is_interactive(lang: str, query: str) -> None:
    assert classify(lang, query) == Classified(QueryKind.INTERACTIVE, None, "PPL")


@pytest.mark.parametrize("query", ["DROP SKIPPING INDEX ON t", "CREATE INDEX (", "source = t | sort by |"])
def test_ppl_that_does_not_parse_is_a_syntax_error_at_classification(query: str) -> None:
    with pytest.raises(PplSyntaxError) as caught:
        classify("ppl", query)
    assert caught.value.http_status == 400 and "line 1, column" in caught.value.message


@pytest.mark.parametrize(
    "query",
    [
        "CREATE SKIPPING INDEX ON",
        "DROP INDEX ON t",
        "ALTER INDEX idx ON t WITH (refresh_interval = '1 minute')",  # ALTER must change auto_refresh
        "CREATE INDEX idx ON t (a) WITH (no_such_option = 1)",
        "REFRESH MATERIALIZED VIEW",
    ],
)
def test_malformed_flint_text_is_the_parsers_syntax_error(query: str) -> None:
    with pytest.raises(FlintSyntaxError):
        classify("sql", query)


def test_messages_name_the_statement() -> None:
    assert classify("sql", "DROP SKIPPING INDEX ON t").what == "DROP SKIPPING INDEX"
    assert classify("sql", "REFRESH INDEX i ON t").what == "REFRESH INDEX"
    assert (
        classify("sql", "CREATE MATERIALIZED VIEW mv AS SELECT 1 WITH (auto_refresh = true)").what
        == "CREATE MATERIALIZED VIEW with auto_refresh = true"
    )
    assert classify("sql", "SHOW FLINT INDEX IN glue").what == "SHOW FLINT INDEXES"


def test_every_statement_type_has_a_rule_of_its_own() -> None:
    """No Flint statement falls through to the default: each is placed on purpose."""
    samples = [statement for q, _ in FLINT_FORMS if (statement := parse(q)) is not None]
    assert {type(s) for s in samples} == set(typing.get_args(Statement))
    for statement in samples:
        assert any(rule.matches(statement) for rule in DISPATCH), statement


def test_first_match_wins() -> None:
    """An ALTER to manual refresh also matches "other ALTER" (streaming): the earlier rule decides."""
    statement = parse("ALTER INDEX idx ON t WITH (auto_refresh = false)")
    assert statement is not None
    matching = [rule.kind for rule in DISPATCH if rule.matches(statement)]
    assert matching == [DML, STREAM]
    assert kind_of(statement) is DML


def test_plain_sql_statement_kind() -> None:
    assert kind_of(None) is QueryKind.INTERACTIVE


def test_kinds_and_session_types_map_one_to_one() -> None:
    assert {kind.session_type for kind in QueryKind} == set(SessionType)
    for kind in QueryKind:
        assert kind_of_session(kind.session_type) is kind
    assert QueryKind.INDEX_DML.session_type is SessionType.LOCAL
