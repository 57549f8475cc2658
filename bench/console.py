"""The web console's speed (docs/console.md): how soon its editor is ready, and what it adds to a
warm query's answer over the API's own.

``python -m bench.console [--quick] [--out PATH]`` (quick: 5 rounds of each instead of 20). The
service runs in this process (its REST API on a uvicorn thread, loopback) on a real OpenSearch node (or
``OPENSEARCH_URL``) with ``basic`` authentication and local ``spark-submit`` jobs; Debian's
Chromium (headless, driven by Playwright as the browser tests drive it) is the browser. Run it
under the Spark lock.

1. **Open to interactive editor**: a logged-in browser opens ``/console`` in a new page, and the
   time is from the navigation's start to the editor being ready (``body[data-ready]``: the page
   and its modules loaded, ``/me`` and ``/datasources`` answered, the pages built, the editor
   focused). The first visit (nothing cached) is reported alone; the others revalidate the
   assets by their ETag, as any later visit does. Playwright's own round trips are inside the
   figure (it is an upper bound).
2. **Warm SELECT, first rows**: in one warm session, rounds alternate between the console (type
   the query, click Run, until the first row of the results table is on the page) and the API
   (POST with the same session, GET polled every 2 ms until ``SUCCESS``), so the machine's load
   falls on both alike. The figure is the difference of the medians.

Targets: open to editor under 1 s (p50); the console's first rows at most 0.5 s above the API's.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from async_query.api import create_app
from async_query.datasources import DatasourceRegistry, local_datasource
from async_query.launcher.local import LocalLauncher
from async_query.runtime import build_plugin
from async_query.security.users import UsersFile
from async_query.settings import Settings
from bench.emr import serve_app
from bench.index_node import index_node
from bench.report import Figure, Target, run_standalone
from bench.stats import percentile, summary
from bench.streaming import _kill_leftover_jobs
from query_core.store import Store, quiet_driver_logs
from tests.browser import CHROMIUM_ARGS, chromium

log = logging.getLogger(__name__)

SECTION = "web console"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "console.json"
BASE = "/_plugins/_async_query"
DS = "local"
USER, PASSWORD = "bench", "bench-Pa55word-1"
ROUNDS = 20
WAIT_MS = 240_000
POLL_S = 0.002


class BenchError(RuntimeError):
    """The bench cannot go on: says why."""


@contextmanager
def system(work: Path) -> Iterator[str]:
    """The index and the service (``basic``, one user) on real HTTP; everything stopped after."""
    work.chmod(0o711)  # local jobs run as the job user, who must pass through to the data directory
    with ExitStack() as stack:
        index = stack.enter_context(index_node(work / "index"))
        users = work / "users.json"
        UsersFile(users).add(USER, PASSWORD, ["all_access"])
        settings = Settings(data_dir=work / "service", auth="basic", users_file=users, inactivity_limit_ms=900_000)
        opensearch = index.config
        launcher = LocalLauncher(settings.data_dir, settings.cluster_name, settings.spark_master)
        store = Store.connect(opensearch)
        plugin = build_plugin(
            settings, store, DatasourceRegistry([local_datasource(DS)], store), {"local": launcher}, opensearch
        )
        stack.callback(_kill_leftover_jobs, Path(settings.data_dir))
        stack.callback(plugin.close)
        yield stack.enter_context(serve_app(create_app(plugin)))


def open_to_editor(context: Any, base_url: str) -> float:
    """Seconds from opening ``/console`` in a new page to its editor being ready."""
    page = context.new_page()
    try:
        began = time.perf_counter()
        page.goto(base_url + "/console", wait_until="commit")
        page.wait_for_selector("body[data-ready=true]", timeout=WAIT_MS)
        return time.perf_counter() - began
    finally:
        page.close()


def console_select(page: Any, query: str) -> float:
    """Seconds from Run to the first row of ``query``'s result on the page."""
    page.fill("#editor", query)
    began = time.perf_counter()
    page.click("#run")
    page.wait_for_selector("#page-query[data-status=SUCCESS] #result-table tbody td, #error:not([hidden])", timeout=WAIT_MS)
    took = time.perf_counter() - began
    if page.is_visible("#error"):
        raise BenchError(f"{query!r} failed in the console: {page.get_attribute('#error', 'data-text')}")
    return took


def api_select(http: httpx.Client, query: str, session_id: str) -> float:
    """Seconds from the POST to a GET answering ``SUCCESS``, in ``session_id``."""
    began = time.perf_counter()
    reply = http.post(BASE, json={"datasource": DS, "lang": "sql", "query": query, "sessionId": session_id})
    if reply.status_code != 201 or reply.json().get("sessionId") != session_id:
        raise BenchError(f"POST answered {reply.status_code} {reply.text[:300]} (not in the warm session)")
    query_id = reply.json()["queryId"]
    deadline = began + WAIT_MS / 1000
    while True:
        body = http.get(f"{BASE}/{query_id}").json()
        if body["status"] == "SUCCESS":
            return time.perf_counter() - began
        if body["status"] in ("FAILED", "CANCELLED", "TIMEOUT") or time.perf_counter() > deadline:
            raise BenchError(f"{query!r} ended {body['status']}: {body.get('error', '')[:300]}")
        time.sleep(POLL_S)


def run(quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    found = chromium()
    if found is None:
        raise BenchError("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    quiet_driver_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rounds = 5 if quick else ROUNDS
    with system(work) as base_url, sync_playwright() as pw, httpx.Client(base_url=base_url, auth=(USER, PASSWORD), timeout=60) as http:
        browser = pw.chromium.launch(executable_path=found, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            began = time.perf_counter()
            page.goto(base_url + "/console")
            page.fill("#login-user", USER)
            page.fill("#login-password", PASSWORD)
            page.click("#login-submit")
            page.wait_for_selector("body[data-ready=true]", timeout=WAIT_MS)
            first_visit = time.perf_counter() - began  # the login form's page, cold, then the console
            opens = [open_to_editor(context, base_url) for _ in range(rounds)]
            cold_start = console_select(page, "SELECT 0 AS warm")
            session_id = page.inner_text("#session-id")
            in_console, in_api = [], []
            for i in range(rounds):
                query = f"SELECT {i + 1} AS n, 'round {i + 1}' AS s"
                if i % 2 == 0:
                    in_console.append(console_select(page, query))
                    in_api.append(api_select(http, query, session_id))
                else:
                    in_api.append(api_select(http, query, session_id))
                    in_console.append(console_select(page, query))
        finally:
            browser.close()
    ms = [1000 * v for v in opens]
    console_ms, api_ms = [1000 * v for v in in_console], [1000 * v for v in in_api]
    added = percentile(console_ms, 50) - percentile(api_ms, 50)
    figures = [
        Figure(SECTION, "open to interactive editor p50", percentile(ms, 50), "ms", Target("<", 1000)),
        Figure(SECTION, "open to interactive editor p90", percentile(ms, 90), "ms"),
        Figure(SECTION, "first visit: login page, sign in, editor ready", 1000 * first_visit, "ms"),
        Figure(SECTION, "warm SELECT first rows, console p50", percentile(console_ms, 50), "ms"),
        Figure(SECTION, "warm SELECT answer, API p50", percentile(api_ms, 50), "ms"),
        Figure(SECTION, "console above the API (p50s)", added, "ms", Target("<", 500)),
    ]
    details = {
        "rounds": rounds,
        "cold_start_s": round(cold_start, 1),
        "open_ms": summary(ms),
        "console_select_ms": summary(console_ms),
        "api_select_ms": summary(api_ms),
    }
    return figures, details


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        argv, prog="python -m bench.console", doc=__doc__, default_out=DEFAULT_OUT, section=SECTION, run=run
    )


if __name__ == "__main__":
    sys.exit(main())
