"""The client commands (submit, get, cancel, sessions) against a real HTTP service.

No Spark: the test plays the job by moving documents through the ``store`` fixture, waiting on what
the service has answered (recorded GET replies) rather than on time.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from async_query.cli import main
from async_query.datasources import Datasource
from async_query.runtime import Plugin
from async_query.security.principal import ANONYMOUS, Principal
from async_query.service import Submitted
from async_query_cli.client import AsyncQueryClient, Reply, ServiceUnreachableError
from async_query_cli.commands import (
    EXIT_API_ERROR,
    EXIT_OK,
    EXIT_QUERY_FAILED,
    EXIT_UNREACHABLE,
    EXIT_WAIT_TIMEOUT,
    ProgressReporter,
    format_value,
    render_progress,
    render_sessions,
    render_table,
)
from async_query_cli.state import FILE_NAME, STATE_DIR_ENV, RememberedSessions
from query_core.ids import new_id
from query_core.models import (
    ColumnSchema,
    LosslessResult,
    ResultDoc,
    RunningStatement,
    SessionDoc,
    StatementDoc,
    StatementProgress,
    Versioned,
)
from query_core.states import SessionState, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, free_port, serve_http, wait_for


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test remembers its sessions in its own directory, never in the user's."""
    path = tmp_path / "cli-state"
    monkeypatch.setenv(STATE_DIR_ENV, str(path))
    return path


@dataclass
class Api:
    url: str
    plugin: Plugin
    #: Every GET reply status the service sent, in order (lets a test wait on what a client saw).
    seen: list[str] = field(default_factory=list)


@pytest.fixture
def api(make_plugin: PluginFactory) -> Iterator[Api]:
    plugin = make_plugin()
    holder = Api("", plugin)
    original = plugin.service.get

    def recording_get(query_id: str, principal: Principal = ANONYMOUS) -> bytes:
        reply = original(query_id, principal)
        holder.seen.append(json.loads(reply).get("status", ""))
        return reply

    original_on_loop = plugin.service.get_without_blocking

    async def recording_get_on_loop(query_id: str, principal: Principal = ANONYMOUS) -> bytes | None:
        reply = await original_on_loop(query_id, principal)
        if reply is not None:
            holder.seen.append(json.loads(reply).get("status", ""))
        return reply

    plugin.service.get = recording_get  # type: ignore[method-assign]
    plugin.service.get_without_blocking = recording_get_on_loop  # type: ignore[method-assign]
    with serve_http(create_app(plugin)) as url:
        holder.url = url
        yield holder


class FakeJob:
    """Moves one session's documents the way the job would."""

    def __init__(self, store: Store, datasource: Datasource) -> None:
        self.store = store
        self.ds = datasource

    def statement_id(self, api: Api) -> str:
        """The id of the one statement submitted so far (waits for the POST to land)."""
        found = wait_for(lambda: _statement_ids(api.plugin), what="a submitted statement")
        return found[0]

    def run(self, query_id: str, progress: StatementProgress | None = None) -> None:
        statement = wait_for(lambda: self.store.statements.get(self.ds.name, query_id), what="the statement")
        self.store.statements.start(statement)
        session = self.store.sessions.get(self.ds.name, statement.doc.session_id)
        assert session is not None
        running = [RunningStatement(query_id=query_id, start_time=statement.doc.submit_time, progress=progress)]
        self.store.sessions.claim(session, session.doc.job_id, running_statements=running)

    def succeed(self, query_id: str, schema: list[tuple[str, str]], rows: list[list[Any]]) -> None:
        lossless = LosslessResult(
            schema=[ColumnSchema(name=n, type=t) for n, t in schema],
            datarows=json.dumps(rows, ensure_ascii=False),
            total=len(rows),
        )
        result = ResultDoc(query_id=query_id, status="SUCCESS", lossless=lossless)
        self.store.statements.settle(self._statement(query_id), StatementState.SUCCESS, result=(self.ds.results, result))

    def fail(self, query_id: str, error: str) -> None:
        self.store.statements.fail(self._statement(query_id), error)

    def _statement(self, query_id: str) -> Versioned[StatementDoc]:
        current = self.store.statements.get(self.ds.name, query_id)
        assert current is not None
        return current


def _statement_ids(plugin: Plugin) -> list[str]:
    """Statement ids in the request index, found by the session documents' pending lists."""
    ids: list[str] = []
    plugin.signals.flush()  # the signals are written just after each POST's reply
    for datasource in plugin.datasources.all():
        for session in plugin.store.sessions.find(datasource.name, list(SessionState), fresh=True):
            ids.extend(session.doc.pending_statement_ids)
    return ids


@pytest.fixture
def job(store: Store, datasource: Datasource) -> FakeJob:
    return FakeJob(store, datasource)


def _in_background(fn: Any) -> threading.Thread:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)
            raise

    thread = threading.Thread(target=target, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def _joined(thread: threading.Thread) -> None:
    thread.join(timeout=30)
    assert not thread.is_alive(), "the simulated job did not finish"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]


# -- submit -----------------------------------------------------------------------------------


def test_submit_prints_query_and_session_ids(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    code = main(["submit", "SELECT 1", "--url", api.url, "--datasource", datasource.name])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    statement = api.plugin.store.statements.get(datasource.name, lines["queryId"])
    assert statement is not None
    assert statement.doc.session_id == lines["sessionId"]
    assert statement.doc.query == "SELECT 1"


def test_submit_json_format_is_the_reply(api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource) -> None:
    code = main(["submit", "SELECT 2", "--url", api.url, "--datasource", datasource.name, "--format", "json"])
    reply = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    assert set(reply) == {"queryId", "sessionId"}


def test_submit_wait_shows_progress_and_prints_the_table(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    def play() -> None:
        query_id = job.statement_id(api)
        job.run(query_id, StatementProgress(stages_completed=0, stages_total=1, tasks_completed=3, tasks_total=8))
        wait_for(lambda: "RUNNING" in api.seen, what="the CLI to see RUNNING")
        job.succeed(query_id, [("id", "integer"), ("name", "string")], [[1, "a'b\"c"], [22, None], [3, "日本"]])

    thread = _in_background(play)
    code = main(["submit", "SELECT x", "--url", api.url, "--datasource", datasource.name, "--wait", "--timeout", "30"])
    _joined(thread)
    captured = capsys.readouterr()
    assert code == EXIT_OK
    assert captured.out.splitlines() == [
        "id | name",
        "---+------",
        " 1 | a'b\"c",
        "22 | NULL",
        " 3 | 日本",
        "(3 rows)",
    ]
    # stderr is not a terminal here: plain status lines, one per status, no bar or escape codes.
    assert "queryId: " in captured.err
    assert "RUNNING after " in captured.err
    assert "SUCCESS after " in captured.err
    assert "\r" not in captured.err


def test_submit_wait_on_failure_prints_the_error_and_exits_non_zero(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    thread = _in_background(lambda: job.fail(job.statement_id(api), "Syntax error: no viable alternative at 'SELEC'"))
    code = main(["submit", "SELEC 1", "--url", api.url, "--datasource", datasource.name, "--wait", "--timeout", "30"])
    _joined(thread)
    captured = capsys.readouterr()
    assert code == EXIT_QUERY_FAILED
    assert captured.out.strip() == "FAILED"
    assert "FAILED: Syntax error: no viable alternative at 'SELEC'" in captured.err
    assert "Traceback" not in captured.err


def test_submit_wait_json_keeps_the_reply_exact(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    def play() -> None:
        query_id = job.statement_id(api)
        job.run(query_id)
        job.succeed(query_id, [("d", "double")], [[0.1], [1e300]])

    thread = _in_background(play)
    argv = ["submit", "SELECT d", "--url", api.url, "--datasource", datasource.name, "--wait", "--timeout", "30"]
    code = main([*argv, "--format", "json"])
    _joined(thread)
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert json.loads(out)["datarows"] == [[0.1], [1e300]]


def test_submit_wait_gives_up_after_timeout(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    code = main(["submit", "SELECT 1", "--url", api.url, "--datasource", datasource.name, "--wait", "--timeout", "0.3"])
    err = capsys.readouterr().err
    assert code == EXIT_WAIT_TIMEOUT
    assert "still WAITING after 0.3 s" in err
    assert "async-query get " in err


def test_unknown_datasource_error_is_readable(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["submit", "SELECT 1", "--url", api.url, "--datasource", "nosuch"])
    err = capsys.readouterr().err
    assert code == EXIT_API_ERROR
    assert err.strip() == (
        "error: 400 Invalid Request (IllegalArgumentException): no datasource named 'nosuch' is configured"
    )


def test_connection_refused_is_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code = main(["get", "whatever", "--url", url])
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE
    assert f"cannot connect to the async query service at {url} (connection refused)" in err
    assert "Traceback" not in err


def test_url_defaults_to_the_environment(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    monkeypatch.setenv("ASYNC_QUERY_URL", api.url)
    code = main(["submit", "SELECT 1", "--datasource", datasource.name])
    assert code == EXIT_OK
    assert capsys.readouterr().out.startswith("queryId: ")


# -- session reuse ----------------------------------------------------------------------------


def _submit(capsys: pytest.CaptureFixture[str], url: str, datasource: str, *extra: str) -> tuple[str, str, str]:
    """``submit`` without waiting: (queryId, sessionId) from stdout, and stderr."""
    code = main(["submit", "SELECT 1", "--url", url, "--datasource", datasource, *extra])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    lines = dict(line.split(": ", 1) for line in captured.out.strip().splitlines())
    assert set(lines) == {"queryId", "sessionId"}, captured.out
    return lines["queryId"], lines["sessionId"], captured.err


def _launcher(api: Api) -> RecordingLauncher:
    found = api.plugin.launchers.shared["local"]
    assert isinstance(found, RecordingLauncher)
    return found


def _end_session(store: Store, datasource: str, session_id: str) -> None:
    session = store.sessions.get(datasource, session_id)
    assert session is not None
    store.sessions.end(session, SessionState.DEAD, error="the job exited")


def test_second_submit_reuses_the_session(
    api: Api, store: Store, capsys: pytest.CaptureFixture[str], datasource: Datasource, state_dir: Path
) -> None:
    first_query, first, err = _submit(capsys, api.url, datasource.name)
    assert err.strip() == f"sessionId: {first} (new)"
    second_query, second, err = _submit(capsys, api.url, datasource.name)
    assert second == first
    assert err.strip() == f"sessionId: {first} (reused)"
    assert len(_launcher(api).started) == 1, "one job for both queries"
    for query_id in (first_query, second_query):
        statement = store.statements.get(datasource.name, query_id)
        assert statement is not None and statement.doc.session_id == first
    saved = json.loads((state_dir / FILE_NAME).read_text())
    assert [(e["url"], e["datasource"], e["sessionId"]) for e in saved["sessions"]] == [
        (api.url, datasource.name, first)
    ]


def test_submit_wait_reuses_the_session_and_keeps_stdout_for_the_result(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)

    def play() -> None:
        query_id = wait_for(lambda: [q for q in _statement_ids(api.plugin) if q != first_query], what="2nd query")[0]
        job.run(query_id)
        job.succeed(query_id, [("x", "integer")], [[1]])

    first_query = _statement_ids(api.plugin)[0]
    thread = _in_background(play)
    code = main(["submit", "SELECT x", "--url", api.url, "--datasource", datasource.name, "--wait", "--timeout", "30"])
    _joined(thread)
    captured = capsys.readouterr()
    assert code == EXIT_OK
    assert captured.out.splitlines() == ["x", "-", "1", "(1 row)"]
    assert f"  sessionId: {first} (reused)" in captured.err.splitlines()[0]


def test_a_reply_naming_another_session_switches_the_stored_one(
    api: Api, store: Store, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)
    _end_session(store, datasource.name, first)
    _, second, err = _submit(capsys, api.url, datasource.name)
    assert second != first
    assert err.strip() == f"sessionId: {second} (new; session {first} was unusable)"
    assert RememberedSessions().get(api.url, datasource.name) == second
    _, third, err = _submit(capsys, api.url, datasource.name)
    assert third == second
    assert "(reused)" in err
    assert len(_launcher(api).started) == 2


def test_new_session_starts_one_and_remembers_it(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)
    _, second, err = _submit(capsys, api.url, datasource.name, "--new-session")
    assert second != first
    assert err.strip() == f"sessionId: {second} (new)"
    _, third, _ = _submit(capsys, api.url, datasource.name)
    assert third == second
    assert len(_launcher(api).started) == 2


def test_given_session_wins_and_becomes_the_default(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)
    _, second, _ = _submit(capsys, api.url, datasource.name, "--new-session")
    _, given, err = _submit(capsys, api.url, datasource.name, "--session", first)
    assert given == first
    assert err.strip() == f"sessionId: {first} (as given)"
    _, after, _ = _submit(capsys, api.url, datasource.name)
    assert after == first != second


def test_session_and_new_session_conflict(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["submit", "SELECT 1", "--session", "abc", "--new-session"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"{not json", b"\xff\x00", b'{"sessions": [42, {"url": 1}]}'])
def test_a_corrupt_state_file_is_treated_as_empty(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource, state_dir: Path, content: bytes
) -> None:
    state_dir.mkdir()
    (state_dir / FILE_NAME).write_bytes(content)
    _, first, err = _submit(capsys, api.url, datasource.name)
    assert err.strip() == f"sessionId: {first} (new)"
    assert "Traceback" not in err
    assert json.loads((state_dir / FILE_NAME).read_text())["sessions"][0]["sessionId"] == first
    _, second, _ = _submit(capsys, api.url, datasource.name)
    assert second == first


def test_an_unwritable_state_dir_only_warns(
    api: Api,
    capsys: pytest.CaptureFixture[str],
    datasource: Datasource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(STATE_DIR_ENV, str(blocker / "state"))
    _, first, err = _submit(capsys, api.url, datasource.name)
    assert f"warning: cannot remember session {first} in {blocker / 'state' / FILE_NAME}" in err
    _, second, _ = _submit(capsys, api.url, datasource.name)
    assert second != first


def test_datasources_keep_separate_sessions(
    make_plugin: PluginFactory, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    other = datasource.model_copy(update={"name": f"{datasource.name}other"})
    plugin = make_plugin(datasources=[datasource, other])
    with serve_http(create_app(plugin)) as url:
        _, mine, _ = _submit(capsys, url, datasource.name)
        _, theirs, _ = _submit(capsys, url, other.name)
        assert theirs != mine
        assert _submit(capsys, url, datasource.name)[1] == mine
        assert _submit(capsys, url, other.name)[1] == theirs
        _, new_mine, _ = _submit(capsys, url, datasource.name, "--new-session")
        assert _submit(capsys, url, other.name)[1] == theirs, "--new-session changes only its datasource"
        assert _submit(capsys, url, datasource.name)[1] == new_mine


def test_urls_keep_separate_sessions(api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource) -> None:
    """The same service behind two URLs: each URL remembers its own session (keys are normalized URLs)."""
    with serve_http(create_app(api.plugin)) as second_url:
        _, first, _ = _submit(capsys, api.url, datasource.name)
        _, second, _ = _submit(capsys, second_url, datasource.name)
        assert second != first
        assert _submit(capsys, api.url + "/", datasource.name)[1] == first
        assert _submit(capsys, second_url.replace("http://", "HTTP://") + "/", datasource.name)[1] == second


def test_url_from_the_environment_shares_the_remembered_session(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)
    monkeypatch.setenv("ASYNC_QUERY_URL", api.url + "/")
    assert main(["submit", "SELECT 1", "--datasource", datasource.name]) == EXIT_OK
    assert capsys.readouterr().out.strip().endswith(f"sessionId: {first}")


def test_a_reply_without_session_leaves_the_stored_one_alone(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, first, _ = _submit(capsys, api.url, datasource.name)
    original = api.plugin.service.submit

    def without_session(request: Any) -> Submitted:  # as the reference answers a non-interactive query
        return Submitted(original(request).query_id, None)  # type: ignore[arg-type]

    monkeypatch.setattr(api.plugin.service, "submit", without_session)
    code = main(["submit", "SELECT 1", "--url", api.url, "--datasource", datasource.name, "--format", "json"])
    captured = capsys.readouterr()
    assert code == EXIT_OK
    assert json.loads(captured.out)["sessionId"] is None
    assert captured.err == ""
    assert RememberedSessions().get(api.url, datasource.name) == first


@pytest.mark.parametrize("lang", ["sql", "ppl"])
def test_lang_is_passed_through(
    api: Api, store: Store, capsys: pytest.CaptureFixture[str], datasource: Datasource, lang: str
) -> None:
    query = "SELECT 1" if lang == "sql" else "source = t | head 1"
    code = main(["submit", query, "--url", api.url, "--datasource", datasource.name, "--lang", lang])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    query_id = dict(line.split(": ", 1) for line in captured.out.strip().splitlines())["queryId"]
    statement = store.statements.get(datasource.name, query_id)
    assert statement is not None and statement.doc.lang == lang and statement.doc.query == query


def test_a_ppl_syntax_error_is_shown_with_its_position(
    api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    code = main(
        ["submit", "source = t | sort by |", "--url", api.url, "--datasource", datasource.name, "--lang", "ppl"]
    )
    captured = capsys.readouterr()
    assert code != EXIT_OK
    assert "SyntaxCheckException" in captured.err and "line 1, column" in captured.err, captured.err


# -- get / cancel / sessions ------------------------------------------------------------------


def test_get_running_shows_progress_then_the_result(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    with AsyncQueryClient(api.url) as client:
        query_id = client.submit("SELECT 1", datasource.name)["queryId"]
    job.run(query_id, StatementProgress(stages_completed=1, stages_total=2, tasks_completed=5, tasks_total=10))
    assert main(["get", query_id, "--url", api.url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "[############............] 5/10 tasks stage 1/2  50% RUNNING"
    job.succeed(query_id, [("1", "integer")], [[1]])
    assert main(["get", query_id, "--url", api.url]) == EXIT_OK
    assert capsys.readouterr().out.splitlines() == ["1", "-", "1", "(1 row)"]


def test_get_unknown_query_is_readable(api: Api, capsys: pytest.CaptureFixture[str], datasource: Datasource) -> None:
    code = main(["get", new_id(datasource.name), "--url", api.url])
    err = capsys.readouterr().err
    assert code == EXIT_API_ERROR
    assert err.startswith("error: 400 Invalid Request (AsyncQueryNotFoundException): no async query with id ")


def test_cancel_then_cancel_again(
    api: Api, store: Store, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    with AsyncQueryClient(api.url) as client:
        query_id = client.submit("SELECT 1", datasource.name)["queryId"]
    assert main(["cancel", query_id, "--url", api.url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"cancelled {query_id}"
    statement = store.statements.get(datasource.name, query_id)
    assert statement is not None and statement.doc.state == StatementState.CANCELLED

    assert main(["cancel", query_id, "--url", api.url]) == EXIT_API_ERROR
    err = capsys.readouterr().err
    assert "400 Invalid Request (IllegalStateException)" in err
    assert "already cancelled" in err
    assert main(["get", query_id, "--url", api.url]) == EXIT_QUERY_FAILED
    captured = capsys.readouterr()
    assert captured.out.strip() == "CANCELLED"
    assert captured.err.strip() == f"query {query_id} CANCELLED"


def test_sessions_lists_what_runs(
    api: Api, job: FakeJob, capsys: pytest.CaptureFixture[str], datasource: Datasource
) -> None:
    with AsyncQueryClient(api.url) as client:
        submitted = client.submit("SELECT 1", datasource.name)
        job.run(submitted["queryId"], StatementProgress(tasks_completed=1, tasks_total=4))
        wait_for(
            lambda: any(s.get("runningStatements") for s in client.sessions(datasource.name, "running")),
            what="the listing to show the running session",
        )
    assert main(["sessions", "--url", api.url, "--datasource", datasource.name, "--state", "running"]) == EXIT_OK
    out = capsys.readouterr().out
    assert [c.strip() for c in out.splitlines()[0].split("|")][:3] == ["sessionId", "type", "state"]
    assert submitted["sessionId"] in out
    assert f"{submitted['queryId']} (1/4 tasks)" in out
    assert out.rstrip().endswith("(1 session)")

    assert main(["sessions", "--url", api.url, "--format", "json", "--datasource", datasource.name]) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)["sessions"]
    assert [s["sessionId"] for s in listed] == [submitted["sessionId"]]


def test_sessions_bad_state_is_readable(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--url", api.url, "--state", "sleeping"]) == EXIT_API_ERROR
    assert "unknown session state in 'sleeping'" in capsys.readouterr().err


def test_entry_point_exit_code_and_no_traceback() -> None:
    """The installed ``async-query`` command, as a user runs it."""
    url = f"http://127.0.0.1:{free_port()}"
    script = Path(sys.executable).parent / "async-query"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "async_query.cli"]
    done = subprocess.run(
        [*command, "submit", "SELECT 1", "--wait", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_UNREACHABLE
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert "cannot connect" in done.stderr


def test_client_raises_unreachable_not_httpx_errors() -> None:
    with AsyncQueryClient(f"http://127.0.0.1:{free_port()}") as client, pytest.raises(ServiceUnreachableError):
        client.sessions()


# -- rendering, as units ----------------------------------------------------------------------


def test_render_progress_bar() -> None:
    progress = {"stagesCompleted": 0, "stagesTotal": 3, "tasksCompleted": 30, "tasksTotal": 40}
    assert render_progress("RUNNING", progress, 75.0, width=8) == "[######..] 30/40 tasks stage 0/3  75% RUNNING 1m15s"
    assert render_progress("WAITING", None, 0.25, width=4) == "[....] -/- tasks WAITING 0.2s"
    assert render_progress("SUCCESS", None, 1.0, width=4) == "[####] -/- tasks 100% SUCCESS 1.0s"
    overshoot = {"tasksCompleted": 9, "tasksTotal": 4}
    assert render_progress("RUNNING", overshoot, None, width=4).startswith("[####] 9/4 tasks 100%")


def test_progress_reporter_redraws_one_line_on_a_terminal() -> None:
    stream = io.StringIO()
    reporter = ProgressReporter(stream, tty=True)
    reporter.update(Reply({"status": "WAITING"}, ""), 0.1)
    reporter.update(Reply({"status": "RUNNING", "progress": {"tasksCompleted": 1, "tasksTotal": 2}}, ""), 0.5)
    reporter.finish()
    reporter.finish()
    text = stream.getvalue()
    # rich redraws one line in place: each frame after the first erases the line it draws on,
    # and there is one newline, at the end
    frames = [f for f in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).split("\r") if f.strip()]
    assert text.count("\r\x1b[2K") == len(frames) - 1 >= 1
    assert text.count("\n") == 1 and text.endswith("\n\x1b[?25h")  # and the cursor is shown again
    assert "-/- tasks" in frames[0] and frames[0].rstrip().endswith("WAITING 0.1s")
    assert frames[-1].split()[-5:] == ["1/2", "tasks", "50%", "RUNNING", "0.5s"]
    assert frames[-1].split()[0].startswith("━")  # the bar


def test_progress_reporter_prints_status_changes_only_elsewhere() -> None:
    stream = io.StringIO()
    reporter = ProgressReporter(stream, tty=False)
    for status, elapsed in [("WAITING", 0.0), ("WAITING", 0.1), ("RUNNING", 0.2), ("RUNNING", 0.3), ("SUCCESS", 1.5)]:
        reporter.update(Reply({"status": status}, ""), elapsed)
    reporter.finish()
    assert stream.getvalue().splitlines() == ["WAITING after 0.0s", "RUNNING after 0.2s", "SUCCESS after 1.5s"]


def test_render_table_values() -> None:
    schema = [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}, {"name": "m", "type": "struct"}]
    rows: list[list[Any]] = [[1, "line\nbreak", {"a": [1, None]}], [None, "wide 日本", True]]
    assert render_table(schema, rows).splitlines() == [
        "n    | s           | m",
        "-----+-------------+---------------",
        '   1 | line\\nbreak | {"a":[1,null]}',
        "NULL | wide 日本   | true",
        "(2 rows)",
    ]
    assert render_table([{"name": "x", "type": "int"}], []).splitlines() == ["x", "-", "(0 rows)"]


def test_format_value_cuts_long_cells() -> None:
    cell = format_value("x" * 1000)
    assert len(cell) == 200
    assert cell.endswith("…")


def test_render_sessions_age_and_running() -> None:
    session = SessionDoc(session_id="S1", data_source_name="local", job_id="j", last_update_time=1_000)
    view = session.model_dump(by_alias=True, mode="json")
    view["runningStatements"] = [{"queryId": "Q", "startTime": 0, "progress": {"tasksCompleted": 2, "tasksTotal": 3}}]
    lines = render_sessions([view], now_ms=66_000).splitlines()
    assert [c.strip() for c in lines[2].split(" | ")] == [
        "S1",
        "interactive",
        "not_started",
        "local",
        "j",
        "1m05s ago",
        "Q (2/3 tasks)",
    ]
    assert lines[-1] == "(1 session)"
