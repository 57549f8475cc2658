"""The web console in a real headless Chromium (Debian's ``chromium``, driven by Playwright)
against the real service: real spark-submit jobs, a real index server, ``basic`` authentication
through the login form (docs/console.md).

One service, one browser and one page per user for the whole module: the tests run in order and
build on each other (alice's session, her table, her history). With
``ASYNC_QUERY_CONSOLE_SCREENSHOTS=<dir>`` set, each page is photographed into that directory (the
pictures of docs/console.md are taken so: ``ASYNC_QUERY_CONSOLE_SCREENSHOTS=docs/console``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.console.downloads import csv_cell
from async_query.datasources import Datasource
from async_query.embedded.metastore import Metastore
from async_query.launcher.local import catalog_settings
from async_query.runtime import Plugin
from async_query.security.users import UsersFile
from query_core.flint.ast import IndexKind
from query_core.flint.index_meta import IndexMeta
from query_core.flint.naming import latest_id
from query_core.models import FlintIndexStateDoc
from query_core.states import FlintIndexState
from tests.browser import CHROMIUM_ARGS, chromium
from tests.conftest import REAL_CLUSTER
from tests.e2e.conftest import TERMINAL, e2e_service
from tests.node import CLIENT_SSL
from tests.support import FAST_HASHER, seed, serve_http, wait_for

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')")

pytestmark = pytest.mark.e2e

PASSWORDS = {"alice": "alice-Pa55word-1", "bob": "bob-Pa55word-22", "root": "root-Pa55word-333"}
#: Runs for hours (a count over a cross join of two ranges), until cancelled.
LONG_QUERY = "SELECT count(*) AS n FROM range(10000000) a, range(10000000) b"
BIG_QUERY = "SELECT id, concat('row ', id, ' ü') AS name FROM range(100000)"
SHOTS = os.environ.get("ASYNC_QUERY_CONSOLE_SCREENSHOTS", "")
WAIT_MS = 180_000


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


# -- one service, one browser ----------------------------------------------------------------------


class Console:
    """The running service, its plugin and the browser every test of the module shares."""

    def __init__(self, url: str, plugin: Plugin, browser: Any) -> None:
        self.url = url
        self.plugin = plugin
        self.browser = browser
        self.pages: dict[str, Any] = {}

    def page_of(self, user: str) -> Any:
        """``user``'s page, logged in through the form the first time."""
        if user not in self.pages:
            context = self.browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(self.url + "/console")
            page.wait_for_selector("#login")
            if user == "alice":
                shot(page, "login")
            page.fill("#login-user", user)
            page.fill("#login-password", PASSWORDS[user])
            page.click("#login-submit")
            page.wait_for_selector("body[data-ready=true]")
            self.pages[user] = page
        return self.pages[user]

    def api(self, user: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=httpx.BasicAuth(user, PASSWORDS[user]), timeout=60, verify=CLIENT_SSL)


@pytest.fixture(scope="module")
def console(
    module_index_url: str, metastore: Metastore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    found = chromium()
    if found is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("console")
    users = tmp / "users.json"
    directory = UsersFile(users, FAST_HASHER)
    directory.add("alice", PASSWORDS["alice"], ["analysts"])
    directory.add("bob", PASSWORDS["bob"], ["analysts"])
    directory.add("root", PASSWORDS["root"], ["all_access"])
    ds_name = "cons" if REAL_CLUSTER else "local"
    plugin = e2e_service(
        module_index_url,
        tmp,
        ds_name,
        catalog_settings(metastore.home / "warehouse", metastore.uri),
        allowed_roles=["analysts"],
        more_datasources=[Datasource(name="audit_lake", connector="local", allowed_roles=["auditors"])],
        auth="basic",
        users_file=users,
    )
    try:
        with serve_http(create_app(plugin)) as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=found, args=CHROMIUM_ARGS)
            try:
                yield Console(url, plugin, browser)
            finally:
                browser.close()
    finally:
        plugin.close()


# -- what a user does --------------------------------------------------------------------------------


def run(page: Any, query: str, lang: str = "sql", until: str = "SUCCESS") -> str:
    """Type ``query`` into the editor, run it, and wait for ``until``: the query's id."""
    page.click("#tab-query")
    page.select_option("#lang", lang)
    page.fill("#editor", query)
    page.click("#run")
    # The wanted status, or any end (a terminal status; a submission the page shows refused): a
    # query that ended otherwise fails here with what the page shows, not after the timeout.
    page.wait_for_function(
        """([wanted, ends]) => {
            const root = document.querySelector('#page-query');
            const status = root.dataset.status || '';
            return status === wanted || ends.includes(status) || (!status && !document.querySelector('#error').hidden);
        }""",
        arg=[until, sorted(TERMINAL)],
    )
    assert page.get_attribute("#page-query", "data-status") == until, shown(page)
    return str(page.get_attribute("#page-query", "data-query-id"))


def shown(page: Any) -> str:
    """What the query page shows: its status, query, elapsed time and error."""
    error = page.query_selector("#error:not([hidden])")
    return (
        f"status {page.get_attribute('#page-query', 'data-status')!r} of query "
        f"{page.get_attribute('#page-query', 'data-query-id')!r} after {page.inner_text('#elapsed')}; "
        f"error: {error.get_attribute('title') if error else None!r}"
    )


def table_rows(page: Any, selector: str = "#result-table") -> list[list[str]]:
    return [[cell.inner_text() for cell in row.query_selector_all("td")] for row in page.query_selector_all(f"{selector} tbody tr")]


def api_rows(client: httpx.Client, query_id: str) -> list[list[Any]]:
    """Every row of a result as the API pages it (docs/api.md)."""
    rows: list[list[Any]] = []
    while True:
        page = json.loads(client.get(f"/_plugins/_async_query/{query_id}", params={"offset": len(rows)}).text, parse_float=Decimal)
        rows += page["datarows"]
        if page["size"] == 0 or len(rows) >= page["resultRows"]:
            return rows


# -- the tests, in order ------------------------------------------------------------------------------


def test_log_in_and_run_a_sql_and_a_ppl_query(console: Console) -> None:
    page = console.page_of("alice")
    assert page.inner_text("#user-name") == "alice"
    run(page, "SELECT 1 AS one, 'héllo, wörld' AS greeting")
    assert table_rows(page) == [["1", "héllo, wörld"]]
    session = page.inner_text("#session-id")
    run(page, "CREATE TABLE console_people (id INT, name STRING) USING parquet")
    run(page, "INSERT INTO console_people VALUES (1, 'ann'), (2, 'bo'), (3, 'cé')")
    run(page, "source = local.default.console_people | where id > 1 | sort id | fields id, name", lang="ppl")
    assert table_rows(page) == [["2", "bo"], ["3", "cé"]]
    assert page.inner_text("#session-id") == session  # the session is kept between queries
    shot(page, "query")


def test_a_long_query_runs_with_progress_and_is_cancelled(console: Console) -> None:
    page = console.page_of("alice")
    query_id = run(page, LONG_QUERY, until="RUNNING")
    page.wait_for_selector("#progress:not([hidden])")
    text = page.inner_text("#progress-text")
    assert text.startswith("stages ") and " · tasks " in text, text
    shot(page, "running")
    page.click("#cancel")
    page.wait_for_selector("#page-query[data-status=CANCELLED]")
    with console.api("alice") as api:
        assert api.get(f"/_plugins/_async_query/{query_id}").json()["status"] == "CANCELLED"


def test_a_100000_row_result_is_paged_and_downloaded_as_the_api_holds_it(console: Console) -> None:
    page = console.page_of("alice")
    query_id = run(page, BIG_QUERY)
    assert page.inner_text("#page-info") == "rows 1\u2013100 of 100000"
    assert len(table_rows(page)) == 100
    page.click("#last-page")
    page.wait_for_selector("#results[data-offset='99900']")
    assert page.inner_text("#page-info") == "rows 99901\u2013100000 of 100000"
    assert table_rows(page)[-1] == ["99999", "row 99999 ü"]
    page.click("#prev-page")
    page.wait_for_selector("#results[data-offset='99800']")
    assert table_rows(page)[0] == ["99800", "row 99800 ü"]
    shot(page, "results")
    with page.expect_download() as downloading:
        page.click("#download-csv")
    saved = Path(downloading.value.path())
    lines = list(csv.reader(io.StringIO(saved.read_text(encoding="utf-8"))))
    with console.api("alice") as api:
        expected = api_rows(api, query_id)
    assert lines[0] == ["id", "name"]
    assert len(lines) == 100_001
    assert lines[1:] == [[csv_cell(v) for v in row] for row in expected]


def test_a_failing_query_shows_its_reason_and_the_page_stays_usable(console: Console) -> None:
    page = console.page_of("alice")
    run(page, "SELECT no_such_column FROM range(1)", until="FAILED")
    assert page.is_visible("#error")
    assert page.get_attribute("#error", "data-text").startswith("Fail to analyze query. Cause:")
    shot(page, "error")
    run(page, "SELECT 'still here' AS ok")
    assert page.is_hidden("#error")
    assert table_rows(page) == [["still here"]]


def test_a_busy_service_is_asked_again_and_the_query_still_shows(console: Console) -> None:
    page = console.page_of("alice")
    refused: list[str] = []

    def busy(route: Any) -> None:
        # The first two status reads meet a service past its request limit (docs/console.md).
        if len(refused) < 2:
            refused.append(route.request.url)
            route.fulfill(status=503, content_type="application/json", body=json.dumps(
                {"error": {"type": "ServiceUnavailableException", "reason": "Service Unavailable",
                           "details": "more than 64 requests at once; try again later"}, "status": 503}))
        else:
            route.continue_()

    page.route("**/console/api/queries/*", busy)
    try:
        run(page, "SELECT 'after a busy moment' AS ok")
    finally:
        page.unroute("**/console/api/queries/*")
    assert len(refused) == 2
    assert table_rows(page) == [["after a busy moment"]]
    assert page.is_hidden("#error")


def test_browse_a_table_and_an_index(console: Console) -> None:
    plugin = console.plugin
    ds = plugin.datasources.all()[0].name
    index_name = f"flint_{ds}_default_console_people_skipping_index"
    meta = IndexMeta(
        index_name=index_name,
        kind=IndexKind.SKIPPING,
        name="console_people",
        source=f"{ds}.default.console_people",
        indexed_columns=({"kind": "MIN_MAX", "parameters": {}, "columnName": "id", "columnType": "int"},),
        options={"auto_refresh": "false", "incremental_refresh": "false"},
    )
    plugin.store.admin.create_index(index_name, {"mappings": {"_meta": meta.to_meta(), "properties": {"file_path": {"type": "keyword"}}}})
    seed(
        plugin.store,
        FlintIndexStateDoc(
            latest_id=latest_id(index_name),
            state=FlintIndexState.ACTIVE,
            data_source_name=ds,
            last_refresh_complete_time=1_767_000_000_000,
            index_name=index_name,
        ),
    )
    page = console.page_of("alice")
    page.click("#tab-browse")
    page.click("#catalog-tree li[data-schema=default] > .node")
    table = "#catalog-tree li[data-table=console_people]"
    page.click(f"{table} > .node")
    page.wait_for_selector(f"{table} .column")
    assert [c.inner_text() for c in page.query_selector_all(f"{table} .column")] == ["id int", "name string"]
    page.wait_for_selector("#index-table")
    index_row = [c.inner_text() for c in page.query_selector_all("#index-table tbody tr td")]
    assert index_row[:5] == [index_name, "skipping", "default.console_people", "active", "manual"]
    assert index_row[6]  # the last refresh's time
    shot(page, "browse")
    page.click(f"{table} > .node", button="right")
    page.click("#table-menu .menu-select")
    assert page.input_value("#editor") == f"SELECT * FROM {ds}.default.console_people LIMIT 10"
    page.click("#tab-browse")
    page.click(f"{table} > .more")
    page.click("#table-menu .menu-skipping")
    written = page.input_value("#editor")
    assert written.startswith(f"CREATE SKIPPING INDEX ON {ds}.default.console_people (") and "id MIN_MAX" in written


def test_history_lists_ones_queries_newest_first_and_reruns_one(console: Console) -> None:
    page = console.page_of("alice")
    page.click("#tab-history")

    def listed() -> list[str] | None:
        page.click("#history-refresh")
        page.wait_for_selector("#history-table, #history-empty")
        texts = [c.inner_text() for c in page.query_selector_all("#history-table tbody td.query-text")]
        return texts if "SELECT 'after a busy moment' AS ok" in texts else None

    texts = wait_for(listed, timeout=30, interval=0.5, what="the history to list the last query")
    assert texts[0] == "SELECT 'after a busy moment' AS ok"  # newest first
    assert texts.index("SELECT 'still here' AS ok") < texts.index(BIG_QUERY) < texts.index(LONG_QUERY)
    shot(page, "history")
    page.fill("#history-search", "héllo")
    page.wait_for_selector("#history-table tbody tr >> nth=0")
    wait_for(lambda: len(page.query_selector_all("#history-table tbody tr")) == 1, timeout=10, what="the search to narrow the list")
    page.click("#history-table tbody tr .rerun")
    page.wait_for_selector("#page-query[data-status=SUCCESS]")
    assert page.input_value("#editor") == "SELECT 1 AS one, 'héllo, wörld' AS greeting"
    assert table_rows(page) == [["1", "héllo, wörld"]]


def test_a_second_user_sees_none_of_it(console: Console) -> None:
    page = console.page_of("bob")
    assert [o.inner_text() for o in page.query_selector_all("#datasource option")] == [console.plugin.datasources.all()[0].name]
    assert page.query_selector("#tab-ops") is None
    run(page, "SELECT 'bob' AS who")
    page.click("#tab-history")

    def listed() -> list[str] | None:
        page.click("#history-refresh")
        page.wait_for_selector("#history-table, #history-empty")
        texts = [c.inner_text() for c in page.query_selector_all("#history-table tbody td.query-text")]
        return texts or None

    assert wait_for(listed, timeout=30, interval=0.5, what="bob's history") == ["SELECT 'bob' AS who"]
    alices = console.page_of("alice").get_attribute("#page-query", "data-query-id")
    assert page.request.get(f"{console.url}/console/api/queries/{alices}").status == 403
    assert page.request.get(f"{console.url}/console/api/ops").status == 403
    assert page.request.get(f"{console.url}/console/api/catalog/audit_lake/schemas").status == 403


def test_an_admin_sees_both_users_sessions(console: Console) -> None:
    page = console.page_of("root")
    assert {o.inner_text() for o in page.query_selector_all("#datasource option")} == {
        console.plugin.datasources.all()[0].name,
        "audit_lake",
    }
    page.click("#tab-ops")

    def owners() -> set[str] | None:
        page.click("#ops-refresh")
        page.wait_for_selector("#sessions-table")
        found = {c.inner_text() for c in page.query_selector_all("#sessions-table tbody td.owner")}
        return found if {"alice", "bob"} <= found else None

    assert {"alice", "bob"} <= wait_for(owners, timeout=30, interval=0.5, what="both users' sessions")
    page.wait_for_selector("#metrics-table")
    assert "async_query_queries_submitted_total" in page.inner_text("#metrics-table")
    shot(page, "operators")


def test_a_request_without_the_csrf_token_is_refused(console: Console) -> None:
    page = console.page_of("alice")
    body = {"datasource": "local", "lang": "sql", "query": "SELECT 'forged'"}
    refused = page.request.post(f"{console.url}/console/api/queries", data=body)  # the login cookie, no token
    assert refused.status == 403 and "CSRF" in refused.json()["error"]["details"]
    token = page.get_attribute("meta[name=aq-csrf]", "content")
    forged = page.request.post(
        f"{console.url}/console/api/queries", data=body, headers={"X-CSRF-Token": token.split(".")[0] + ".0"}
    )
    assert forged.status == 403
    logged_out = page.request.delete(f"{console.url}/console/api/session")
    assert logged_out.status == 403  # a logout is a state change too


def test_new_session_forgets_the_kept_one_and_sign_out_ends_the_login(console: Console) -> None:
    page = console.page_of("alice")
    page.click("#tab-query")
    assert page.inner_text("#session-id") != "(new)"
    page.click("#new-session")
    assert page.inner_text("#session-id") == "(new)"
    page.click("#logout")
    page.wait_for_selector("#login")
    assert page.request.get(f"{console.url}/console/api/me").status == 401
