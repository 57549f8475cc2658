"""PPL through the REST API on the embedded default, as OpenSearch Dashboards sends it: each
command's answer equals its hand-written SQL equivalent's, on tables in the datasource's shared
catalog; the 22 TPC-H queries in PPL answer as the standard queries in SQL, in the same session;
a syntax error is a 400 at POST; an unknown field is a FAILED analysis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from async_query.embedded.metastore import Metastore
from bench import tpch
from tests.e2e.conftest import BASE, Api, shared_catalog_service

pytestmark = pytest.mark.e2e
DS = "local"
WEB = "local.default.ppl_web"
OWNERS = "local.default.ppl_owners"


@pytest.fixture(scope="module")
def api(metastore: Metastore, module_index_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The datasource may make tables over files outside its warehouse (the TPC-H data): an
    admin's loosening of its statement validation (docs/validation.md)."""
    tmp = tmp_path_factory.mktemp("ppl")
    loosened = {"validation.allow": "LOCATION"}
    with shared_catalog_service(metastore, module_index_url, tmp, DS, loosened) as (api, _):
        yield api


def ok(api: Api, query: str, session_id: str | None, lang: str = "sql") -> dict[str, Any]:
    _, reply = api.run(query, session_id, lang=lang)
    assert reply["status"] == "SUCCESS", (lang, query, reply)
    return reply


@pytest.fixture(scope="module")
def session(api: Api) -> str:
    """The tables, made in one session whose id the tests share (as Dashboards keeps one)."""
    submitted, reply = api.run(
        f"CREATE TABLE {WEB} (id INT, host STRING, status INT, bytes BIGINT, msg STRING) USING parquet"
    )
    assert reply["status"] == "SUCCESS", reply
    sid = str(submitted["sessionId"])
    rows = [
        (1, "a", 200, 512, "GET /index.html"),
        (2, "b", 404, 128, "GET /missing"),
        (3, "a", 200, 2048, "POST /upload"),
        (4, "c", 500, None, "GET /crash"),
        (5, "b", 200, 1024, "GET /index.html"),
        (6, "a", 301, 64, "GET /old"),
        (7, "c", 200, 4096, "PUT /file"),
        (8, "b", 404, 256, "GET /gone"),
        (9, "a", 200, 768, "GET /about"),
        (10, "d", 503, None, "POST /busy"),
        (11, "a", 200, 300, "GET /index.html"),
        (12, "b", 200, 900, "DELETE /item"),
    ]
    values = ", ".join(f"({i}, '{h}', {s}, {'NULL' if b is None else b}, '{m}')" for i, h, s, b, m in rows)
    ok(api, f"INSERT INTO {WEB} VALUES {values}", sid)
    ok(api, f"CREATE TABLE {OWNERS} (host STRING, owner STRING) USING parquet", sid)
    ok(api, f"INSERT INTO {OWNERS} VALUES ('a', 'ann'), ('b', 'bob'), ('c', 'cy')", sid)
    return sid


#: (PPL, its SQL equivalent, whether row order is part of the answer).
EQUIVALENT: list[tuple[str, str, bool]] = [
    (f"source = {WEB} | sort id | head 10", f"SELECT * FROM {WEB} ORDER BY id LIMIT 10", True),
    (
        f"source = {WEB} status >= 400 | fields id, host, status",
        f"SELECT id, host, status FROM {WEB} WHERE status >= 400",
        False,
    ),
    (
        f"search source = {WEB} | where host = 'a' and bytes > 500 | fields - msg, status",
        f"SELECT id, host, bytes FROM {WEB} WHERE host = 'a' AND bytes > 500",
        False,
    ),
    (
        f"source = {WEB} | stats count() as n, avg(bytes), max(bytes) by host",
        f"SELECT count(*), avg(bytes), max(bytes), host FROM {WEB} GROUP BY host",
        False,
    ),
    (
        f"source = {WEB} | stats dc(host) as hosts, min(status) as lo",
        f"SELECT count(DISTINCT host), min(status) FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | stats count() by span(id, 5)",
        f"SELECT count(*), floor(id / 5) * 5 FROM {WEB} GROUP BY floor(id / 5) * 5",
        False,
    ),
    (
        f"source = {WEB} | eventstats max(bytes) as top by host | fields id, top",
        f"SELECT id, max(bytes) OVER (PARTITION BY host) FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | eventstats dc(status) as kinds, count() as n by host | fields id, kinds, n",
        f"SELECT w.id, k.kinds, k.n FROM {WEB} w JOIN"
        f" (SELECT host, count(DISTINCT status) AS kinds, count(*) AS n FROM {WEB} GROUP BY host) k ON w.host = k.host",
        False,
    ),
    (
        f"source = {WEB} | sort - bytes, id | head 3 from 1 | fields id, bytes",
        f"SELECT id, bytes FROM {WEB} ORDER BY bytes DESC NULLS LAST, id LIMIT 3 OFFSET 1",
        True,
    ),
    (
        f"source = {WEB} | eval kb = bytes / 1024, big = kb > 1 | fields id, kb, big",
        f"SELECT id, bytes / 1024, bytes / 1024 > 1 FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | dedup host | fields host",
        f"SELECT DISTINCT host FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | rename host as server | fields id, server",
        f"SELECT id, host FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | top 2 host",
        f"SELECT count(*), host FROM {WEB} GROUP BY host ORDER BY count(*) DESC LIMIT 2",
        True,
    ),
    (
        f"source = {WEB} | rare status",
        f"SELECT count(*), status FROM {WEB} GROUP BY status ORDER BY count(*) ASC",
        False,
    ),
    (
        f"source = {WEB} | parse msg '(?<verb>\\w+) (?<path>.+)' | fields id, verb, path",
        f"SELECT id, regexp_extract(msg, '(\\\\w+) (.+)', 1), regexp_extract(msg, '(\\\\w+) (.+)', 2) FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | fillnull with 0 in bytes | fields id, bytes",
        f"SELECT id, coalesce(bytes, 0) FROM {WEB}",
        False,
    ),
    (
        f"source = {WEB} | lookup {OWNERS} host replace owner | fields id, owner",
        f"SELECT w.id, o.owner FROM {WEB} w LEFT JOIN {OWNERS} o ON w.host = o.host",
        False,
    ),
    (
        f"source = {WEB} | join left = w right = o ON w.host = o.host {OWNERS} | fields w.id, o.owner",
        f"SELECT w.id, o.owner FROM {WEB} w JOIN {OWNERS} o ON w.host = o.host",
        False,
    ),
    (
        f"source = {WEB} | where isnull(bytes) | eval h = upper(host), n = length(msg) | fields id, h, n",
        f"SELECT id, upper(host), length(msg) FROM {WEB} WHERE bytes IS NULL",
        False,
    ),
]


def canonical(rows: list[list[Any]], ordered: bool) -> list[str]:
    texts = [repr(r) for r in rows]
    return texts if ordered else sorted(texts)


@pytest.mark.parametrize(
    ("ppl", "sql", "ordered"), EQUIVALENT, ids=[p.split("|", 1)[1].strip()[:40] for p, _, _ in EQUIVALENT]
)
def test_ppl_gives_the_rows_of_its_sql_equivalent(api: Api, session: str, ppl: str, sql: str, ordered: bool) -> None:
    expected = ok(api, sql, session)
    answered = ok(api, ppl, session, lang="ppl")
    assert answered["total"] == expected["total"] > 0
    assert canonical(answered["datarows"], ordered) == canonical(expected["datarows"], ordered)


def test_the_dashboards_sample_query_in_a_new_session(api: Api, session: str) -> None:
    submitted, reply = api.run(f"source = {WEB} | head 10", lang="ppl")
    assert reply["status"] == "SUCCESS", reply
    assert submitted["sessionId"] != session
    assert reply["total"] == 10
    assert [c["name"] for c in reply["schema"]] == ["id", "host", "status", "bytes", "msg"]


def test_a_ppl_syntax_error_is_refused_at_post_with_its_position(api: Api) -> None:
    reply = api.http.post(BASE, json={"datasource": DS, "lang": "ppl", "query": f"source = {WEB} | sort by |"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "SyntaxCheckException"
    assert "line 1, column" in error["details"]


def test_an_unknown_field_fails_the_statement_as_an_analysis_error(api: Api, session: str) -> None:
    _, reply = api.run(f"source = {WEB} | fields id, nope", session, lang="ppl")
    assert reply["status"] == "FAILED"
    assert reply["error"].startswith("Fail to analyze query. Cause: ")
    assert "nope" in reply["error"]
    _, renamed = api.run(f"source = {WEB} | rename nope as other", session, lang="ppl")
    assert renamed["status"] == "FAILED"
    assert renamed["error"].startswith("Fail to analyze query. Cause: [UNRESOLVED_COLUMN")
    assert "`nope`" in renamed["error"]


# -- TPC-H ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tpch_tables(api: Api, session: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """TPC-H at scale factor 0.01 (tpchgen-cli, generated once per run) as tables of the catalog,
    made in the shared session; returns its id."""
    paths = tpch.generate(tmp_path_factory.getbasetemp() / "tpch-0.01")
    for statement in tpch.create_tables_sql(paths):
        ok(api, statement, session)
    return session


def columns_of(reply: dict[str, Any], renamed: dict[str, str] | None = None) -> list[str]:
    return [(renamed or {}).get(c["name"], c["name"]) for c in reply["schema"]]


@pytest.mark.parametrize("number", range(1, 23), ids=[f"q{n}" for n in range(1, 23)])
def test_tpch_query_in_ppl_answers_as_the_standard_sql(api: Api, tpch_tables: str, number: int) -> None:
    expected = ok(api, tpch.SQL[number], tpch_tables)
    answered = ok(api, tpch.ppl_standard(number), tpch_tables, lang="ppl")
    want_columns = columns_of(expected)
    got_columns = columns_of(answered, tpch.PPL_COLUMN_NAMES.get(number))
    assert sorted(got_columns) == sorted(want_columns)
    at = [got_columns.index(c) for c in want_columns]
    got = [[row[i] for i in at] for row in answered["datarows"]]
    assert answered["total"] == expected["total"]
    assert canonical(got, number in tpch.ORDERED) == canonical(expected["datarows"], number in tpch.ORDERED)


@pytest.mark.parametrize("number", sorted(tpch.VERBATIM_SQL))
def test_tpch_reference_text_of_q2_and_q19_answers_as_it_reads(api: Api, tpch_tables: str, number: int) -> None:
    expected = ok(api, tpch.VERBATIM_SQL[number], tpch_tables)["datarows"][0][0]
    answered = ok(api, tpch.ppl(number), tpch_tables, lang="ppl")
    assert answered["total"] == min(expected, 100 if number == 2 else expected)


def test_an_unknown_or_refused_function_fails_the_statement_as_an_analysis_error(api: Api, session: str) -> None:
    _, unknown = api.run(f"source = {WEB} | eval x = nope(host)", session, lang="ppl")
    assert unknown["status"] == "FAILED"
    assert unknown["error"] == "Fail to analyze query. Cause: nope is not a builtin function of PPL"
    _, refused = api.run(f"source = {WEB} | eval j = json_delete(msg, array('a'))", session, lang="ppl")
    assert refused["status"] == "FAILED"
    assert refused["error"].startswith("Fail to analyze query. Cause: json_delete is not supported on Spark: ")
    _, consecutive = api.run(f"source = {WEB} | dedup host consecutive=true", session, lang="ppl")
    assert consecutive["error"] == "Fail to analyze query. Cause: Consecutive deduplication is not supported"
