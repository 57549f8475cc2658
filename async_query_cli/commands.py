"""Client commands of ``async-query`` (submit, get, cancel, sessions): they talk to the REST API.

They use only HTTP (:mod:`async_query_cli.client`), so they work against any deployment. Results go to
stdout, everything else (ids while waiting, progress, errors) to stderr, so that
``async-query submit --wait "..." > out.txt`` keeps just the result.

``submit`` reuses the session of the last query submitted for the same service URL and datasource
(:mod:`async_query_cli.state`), as OpenSearch Dashboards does; ``--session`` and
``--new-session`` override it.

``--user`` (or ``$ASYNC_QUERY_USER``) sends HTTP Basic credentials; the password comes from
``$ASYNC_QUERY_PASSWORD`` or a prompt, never from the command line, and is kept nowhere.

Exit codes: 0 success; 1 the query ended FAILED, TIMEOUT or CANCELLED; 2 the service refused the
request (its error is printed); 3 the service could not be reached; 4 ``--timeout`` ran out while
waiting (the query goes on); 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

from rich import box
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from async_query_cli.client import (
    PASSWORD_ENV,
    URL_ENV,
    USER_ENV,
    ApiError,
    AsyncQueryClient,
    ClientError,
    Reply,
    ServiceUnreachableError,
    WaitTimeoutError,
    default_url,
)
from async_query_cli.state import FILE_NAME, STATE_DIR_ENV, RememberedSessions
from query_core.hosts import is_loopback_bind

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_QUERY_FAILED = 1
EXIT_API_ERROR = 2
EXIT_UNREACHABLE = 3
EXIT_WAIT_TIMEOUT = 4
EXIT_INTERRUPTED = 130
#: Cells longer than this are cut in table output (``--format json`` keeps everything).
MAX_CELL = 200


def add_commands(sub: Any) -> None:  # argparse's _SubParsersAction
    """Register the client subcommands on the ``async-query`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=None, help=f"the service's base URL (default: ${URL_ENV} or http://127.0.0.1:9000)"
    )
    common.add_argument("--format", choices=["table", "json"], default="table", help="output format (default: table)")
    common.add_argument(
        "--user",
        default=None,
        metavar="NAME",
        help=f"authenticate as this user (default: ${USER_ENV}); the password comes from ${PASSWORD_ENV} or a prompt",
    )
    epilog = (
        "exit codes: 0 success, 1 query FAILED/TIMEOUT/CANCELLED, 2 request refused by the service, "
        "3 service unreachable, 4 --timeout reached while waiting, 130 interrupted"
    )

    submit = sub.add_parser(
        "submit",
        parents=[common],
        help="submit a query",
        description=(
            "Submit a query. Like OpenSearch Dashboards, it reuses the session of the last query submitted "
            "for the same service URL and datasource, so a series of queries runs warm in one Spark job; "
            "when the service answers with another session (the old one was unusable), that one is "
            f"remembered instead. They are kept in {FILE_NAME} under ${STATE_DIR_ENV}, else "
            "$XDG_STATE_HOME/async-query, else ~/.local/state/async-query. The session used is printed "
            "on stderr."
        ),
        epilog=epilog,
    )
    submit.add_argument("query", help="the query text")
    submit.add_argument("--datasource", default="local", help="datasource name (default: local)")
    chosen = submit.add_mutually_exclusive_group()
    chosen.add_argument(
        "--session",
        default=None,
        metavar="ID",
        help="run in this session instead of the remembered one (a new one is made if it is unusable); "
        "the session of the reply is remembered",
    )
    chosen.add_argument(
        "--new-session",
        action="store_true",
        help="start a new session (send no sessionId) and remember it for the next queries",
    )
    submit.add_argument("--lang", default="sql", choices=["sql", "ppl"], help="query language (default: sql)")
    submit.add_argument("--wait", action="store_true", help="wait for the result and print it")
    submit.add_argument("--timeout", type=float, default=None, help="with --wait: stop waiting after this many seconds")
    submit.set_defaults(func=_cmd_submit, log_level="warning")

    get = sub.add_parser("get", parents=[common], help="show a query's status or result", epilog=epilog)
    get.add_argument("query_id")
    get.set_defaults(func=_cmd_get, log_level="warning")

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a query", epilog=epilog)
    cancel.add_argument("query_id")
    cancel.set_defaults(func=_cmd_cancel, log_level="warning")

    sessions = sub.add_parser("sessions", parents=[common], help="list sessions", epilog=epilog)
    sessions.add_argument("--datasource", default=None, help="only this datasource's sessions")
    sessions.add_argument("--state", default=None, help="only these states (comma separated, e.g. running,not_started)")
    sessions.add_argument("--size", type=int, default=100, help="at most this many (default: 100)")
    sessions.set_defaults(func=_cmd_sessions, log_level="warning")


# -- commands ---------------------------------------------------------------------------------


def _guarded(run: Callable[[AsyncQueryClient], int], args: argparse.Namespace) -> int:
    """Run a command; turn every client error into a readable message and an exit code."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        url = args.url or default_url()
        with AsyncQueryClient(url, auth=resolve_credentials(args, url)) as client:
            return run(client)
    except ApiError as exc:
        _api_error(exc, args)
        return EXIT_API_ERROR
    except ServiceUnreachableError as exc:
        _err(f"error: {exc}")
        return EXIT_UNREACHABLE
    except WaitTimeoutError as exc:
        _err(f"error: {exc}")
        return EXIT_WAIT_TIMEOUT
    except ClientError as exc:
        _err(f"error: {exc}")
        return EXIT_API_ERROR


def resolve_credentials(args: argparse.Namespace, url: str) -> tuple[str, str] | None:
    """(user, password) from ``--user``/``$ASYNC_QUERY_USER`` and ``$ASYNC_QUERY_PASSWORD`` or a
    prompt; None without a user."""
    user = args.user or os.environ.get(USER_ENV)
    if not user:
        return None
    password = os.environ.get(PASSWORD_ENV)
    if not password:
        if not sys.stdin.isatty():
            raise ClientError(f"no password for {user}: set {PASSWORD_ENV} (there is no terminal to ask on)")
        try:
            password = getpass.getpass(f"Password for {user} at {url}: ")
        except (EOFError, KeyboardInterrupt):
            raise ClientError("no password given") from None
    if url.lower().startswith("http://") and not _loopback_url(url):
        _err(f"warning: sending the password of {user} over plain HTTP to {url}; use https")
    return user, password


def _loopback_url(url: str) -> bool:
    return is_loopback_bind(urlsplit(url).hostname or "")


def _api_error(exc: ApiError, args: argparse.Namespace) -> None:
    """Print a refusal; for a 401, what to do about it."""
    _err(f"error: {exc}")
    if exc.status == 401:
        if args.user or os.environ.get(USER_ENV):
            _err("note: the user name or password was not accepted")
        else:
            _err(
                f"note: the service asks for credentials: pass --user NAME (or set {USER_ENV}); "
                f"the password comes from {PASSWORD_ENV} or a prompt"
            )


def _cmd_submit(args: argparse.Namespace) -> int:
    def run(client: AsyncQueryClient) -> int:
        remembered = RememberedSessions()
        forced = args.session is not None or args.new_session
        stored = None if forced else remembered.get(client.url, args.datasource)
        sent = args.session or stored
        try:
            submitted = client.submit(args.query, args.datasource, args.lang, sent)
        except ApiError as exc:
            _api_error(exc, args)
            if stored:
                _err(
                    f"note: the query was sent with the remembered session {stored} (from {remembered.path}); "
                    "if the error is about that session, run with --new-session"
                )
            return EXIT_API_ERROR
        query_id = str(submitted.get("queryId", ""))
        raw_session = submitted.get("sessionId")
        session_id = str(raw_session) if raw_session else None
        note = ""
        if session_id:
            note = f" ({_session_note(sent, session_id, stored is not None)})"
            _remember(remembered, client.url, args.datasource, session_id)
        if not args.wait:
            if args.format == "json":
                _out(json.dumps(submitted, ensure_ascii=False))
            else:
                _out(f"queryId: {query_id}")
                if session_id:
                    _out(f"sessionId: {session_id}")
            if session_id:
                _err(f"sessionId: {session_id}{note}")
            return EXIT_OK
        _err(f"queryId: {query_id}" + (f"  sessionId: {session_id}{note}" if session_id else ""))
        reporter = ProgressReporter(sys.stderr)
        try:
            reply = client.wait(query_id, reporter.update, timeout=args.timeout)
        except KeyboardInterrupt:
            reporter.finish()
            _err(f"interrupted; query {query_id} keeps running (cancel it with: async-query cancel {query_id})")
            return EXIT_INTERRUPTED
        finally:
            reporter.finish()
        return _show_reply(query_id, reply, args.format)

    return _guarded(run, args)


def _session_note(sent: str | None, got: str, was_stored: bool) -> str:
    """How the reply's session came about, for the person reading stderr."""
    if sent is None:
        return "new"
    if sent == got:
        return "reused" if was_stored else "as given"
    return f"new; session {sent} was unusable"


def _remember(remembered: RememberedSessions, url: str, datasource: str, session_id: str) -> None:
    """Store the session for the next submit; a state file that cannot be written is only a warning."""
    try:
        remembered.put(url, datasource, session_id)  # also marks it recently used
    except OSError as exc:
        _err(f"warning: cannot remember session {session_id} in {remembered.path}: {exc}")


def _cmd_get(args: argparse.Namespace) -> int:
    def run(client: AsyncQueryClient) -> int:
        reply = client.fetch(args.query_id)
        if reply.finished or args.format == "json":
            return _show_reply(args.query_id, reply, args.format)
        _out(render_progress(reply.status, reply.body.get("progress"), None))
        if reply.body.get("error"):
            _err(f"note: {reply.body['error']}")
        return EXIT_OK

    return _guarded(run, args)


def _cmd_cancel(args: argparse.Namespace) -> int:
    def run(client: AsyncQueryClient) -> int:
        client.cancel(args.query_id)
        if args.format == "json":
            _out(json.dumps({"queryId": args.query_id, "cancelled": True}))
        else:
            _out(f"cancelled {args.query_id}")
        return EXIT_OK

    return _guarded(run, args)


def _cmd_sessions(args: argparse.Namespace) -> int:
    def run(client: AsyncQueryClient) -> int:
        found = client.sessions(args.datasource, args.state, args.size)
        if args.format == "json":
            _out(json.dumps({"sessions": found}, ensure_ascii=False, indent=2))
        else:
            _out(render_sessions(found))
        return EXIT_OK

    return _guarded(run, args)


def _show_reply(query_id: str, reply: Reply, fmt: str) -> int:
    """Print a reply (the result on stdout, a failure's error on stderr); its exit code."""
    if fmt == "json":
        _out(reply.text)
    elif reply.status == "SUCCESS":
        _out(render_table(reply.body.get("schema") or [], reply.body.get("datarows") or []))
        note = extent_note(reply.body)
        if note:
            _err(note)
    else:
        _out(reply.status)
    if reply.status == "SUCCESS" or not reply.finished:
        return EXIT_OK
    error = reply.body.get("error")
    _err(f"query {query_id} {reply.status}: {error}" if error else f"query {query_id} {reply.status}")
    return EXIT_QUERY_FAILED


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- progress ---------------------------------------------------------------------------------


def format_elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s"


def render_progress(status: str, progress: dict[str, Any] | None, elapsed: float | None, width: int = 24) -> str:
    """One line: a bar of Spark tasks done/total (from the GET reply's ``progress``), status, time.

    Without progress (waiting, or the job has not reported yet) the bar is empty and the counts
    are ``-/-``; a successful query shows a full bar.
    """
    done = total = stages_done = stages_total = 0
    if isinstance(progress, dict):
        done, total = _int(progress.get("tasksCompleted")), _int(progress.get("tasksTotal"))
        stages_done, stages_total = _int(progress.get("stagesCompleted")), _int(progress.get("stagesTotal"))
    if status == "SUCCESS":
        fraction: float | None = 1.0
    elif total > 0:
        fraction = min(1.0, max(0.0, done / total))
    else:
        fraction = None
    filled = round((fraction or 0.0) * width)
    bar = "[" + "#" * filled + "." * (width - filled) + "]"
    parts = [bar]
    if total > 0:
        parts.append(f"{done}/{total} tasks")
        if stages_total:
            parts.append(f"stage {stages_done}/{stages_total}")
    else:
        parts.append("-/- tasks")
    if fraction is not None:
        parts.append(f"{fraction:4.0%}")
    parts.append(status or "?")
    if elapsed is not None:
        parts.append(format_elapsed(elapsed))
    return " ".join(parts)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class ProgressReporter:
    """Shows a wait on ``stream``: on a terminal a live line drawn by rich (status, a bar of Spark
    tasks done, the counts, the stages, the time), else one line per status change."""

    def __init__(self, stream: TextIO, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._last_status = ""
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def update(self, reply: Reply, elapsed: float) -> None:
        status = reply.status
        if self.tty:
            self._draw(status, reply.body.get("progress"), elapsed)
        elif status != self._last_status:
            self.stream.write(f"{status} after {format_elapsed(elapsed)}\n")
            self.stream.flush()
        self._last_status = status

    def _draw(self, status: str, progress: Any, elapsed: float) -> None:
        done, total, stages = _counts(progress)
        if status == "SUCCESS" and total == 0:
            done = total = 1
        counts = f"{done}/{total} tasks" + (f" stage {stages}" if stages else "") if total else "-/- tasks"
        shown, spent = status or "?", format_elapsed(elapsed)
        if self._progress is None:
            console = Console(file=self.stream, force_terminal=True, highlight=False, markup=False, emoji=False)
            self._progress = Progress(
                BarColumn(bar_width=24),
                TextColumn("{task.fields[counts]}"),
                TaskProgressColumn(show_speed=False),
                TextColumn("{task.fields[status]} {task.fields[elapsed]}"),
                console=console,
                auto_refresh=False,
            )
            self._task = self._progress.add_task(
                "query", total=total or None, completed=done, counts=counts, status=shown, elapsed=spent
            )
            self._progress.start()  # draws the first frame
            return
        assert self._task is not None
        self._progress.update(self._task, total=total or None, completed=done, counts=counts, status=shown, elapsed=spent)
        self._progress.refresh()

    def finish(self) -> None:
        """End the live line (idempotent), so that what follows starts on a fresh line."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None


def _counts(progress: Any) -> tuple[int, int, str]:
    """(tasks done, tasks in all, "done/all" stages or "") of a GET reply's ``progress``."""
    if not isinstance(progress, dict):
        return 0, 0, ""
    stages_total = _int(progress.get("stagesTotal"))
    stages = f"{_int(progress.get('stagesCompleted'))}/{stages_total}" if stages_total else ""
    return _int(progress.get("tasksCompleted")), _int(progress.get("tasksTotal")), stages


# -- tables -----------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A cell as text: NULL for null, JSON for nested values, control characters escaped, cut at
    :data:`MAX_CELL` terminal columns (a wide character takes two)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    else:
        text = str(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if cell_len(text) > MAX_CELL:
        text = set_cell_size(text, MAX_CELL - 1).rstrip() + "…"
    return text


def extent_note(body: dict[str, Any]) -> str:
    """What a reply leaves out of a large result (``resultRows``, ``truncated``: docs/api.md)."""
    stored, shown = body.get("resultRows"), len(body.get("datarows") or [])
    if not isinstance(stored, int):
        return ""
    if body.get("truncated"):
        return f"(the first {shown:,} of {stored:,} rows stored; the query had more rows than the result cap)"
    if stored > shown:
        return f"(the first {shown:,} of {stored:,} rows; GET with ?offset= reads the others)"
    return ""


#: Columns joined by `` | `` under a ``-+-`` rule, no outer frame: the table shape of psql and of
#: the reference's own command-line client.
_BOX = box.Box("    \n  | \n -+ \n  | \n -+ \n -+ \n  | \n    \n", ascii=True)


def render_table(schema: Sequence[dict[str, Any]], rows: Sequence[Sequence[Any]]) -> str:
    """A result as an aligned text table (numbers right-aligned, wide and combining characters
    measured as a terminal shows them, by rich), with a row count."""
    names = [str(c.get("name", "")) for c in schema]
    if not names and rows:
        names = [f"col{i + 1}" for i in range(len(rows[0]))]
    table = Table(box=_BOX, show_edge=False, pad_edge=False, padding=(0, 1), show_header=True, header_style=None)
    for i, name in enumerate(names):
        justify: Literal["left", "right"] = "right" if _is_numeric_column(rows, i) else "left"
        table.add_column(Text(name, justify="left"), justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(format_value(row[i])) if i < len(row) else Text("") for i in range(len(names))))
    lines = [_trimmed(line) for line in _rendered(table).splitlines()]
    count = len(rows)
    lines.append(f"({count} row{'' if count == 1 else 's'})")
    return "\n".join(lines)


def _rendered(table: Table) -> str:
    """``table`` as plain text, as wide as it needs (never wrapped to a terminal's width)."""
    out = io.StringIO()
    console = Console(file=out, width=1_000_000, color_system=None, highlight=False, markup=False, emoji=False)
    console.print(table, crop=False)
    return out.getvalue()


def _trimmed(line: str) -> str:
    """A line without trailing blanks, nor the separators of empty last cells."""
    line = line.rstrip()
    while line.endswith(" |"):
        line = line[:-2].rstrip()
    return line


def _is_numeric_column(rows: Sequence[Sequence[Any]], index: int) -> bool:
    values = [r[index] for r in rows if index < len(r) and r[index] is not None]
    return bool(values) and all(isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in values)


def render_sessions(sessions: Sequence[dict[str, Any]], now_ms: int | None = None) -> str:
    """Sessions as a table: id, type, state, datasource, job, last heartbeat age, what runs."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    rows = []
    for s in sessions:
        last = _int(s.get("lastUpdateTime"))
        age = format_elapsed(max(0, now - last) / 1000) + " ago" if last else ""
        running = s.get("runningStatements") or []
        what = ""
        if running:
            first = running[0]
            prog = first.get("progress") or {}
            what = str(first.get("queryId", ""))
            if _int(prog.get("tasksTotal")):
                what += f" ({_int(prog.get('tasksCompleted'))}/{_int(prog.get('tasksTotal'))} tasks)"
            if len(running) > 1:
                what += f" +{len(running) - 1}"
        rows.append(
            [
                s.get("sessionId", ""),
                s.get("sessionType", ""),
                s.get("state", ""),
                s.get("dataSourceName", ""),
                s.get("jobId", ""),
                age,
                what,
                s.get("error") or "",
            ]
        )
    schema = [
        {"name": n} for n in ("sessionId", "type", "state", "datasource", "jobId", "lastHeartbeat", "running", "error")
    ]
    table = render_table(schema, rows)
    return table.rsplit("\n", 1)[0] + f"\n({len(rows)} session{'' if len(rows) == 1 else 's'})"
