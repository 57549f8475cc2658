"""The service's log lines: plain text, or JSON lines (``serve --log-format json``) in which every
line about a query carries its ``queryId`` and ``sessionId`` (``docs/metrics.md``).

What a line is about is a context variable, set where the ids become known (the REST endpoints,
a new statement or session, a session being ended) and inherited by the worker threads a request
runs in: the code logging a line need not pass them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar

_query_id: ContextVar[str | None] = ContextVar("query_id", default=None)
_session_id: ContextVar[str | None] = ContextVar("session_id", default=None)

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def note(*, query_id: str | None = None, session_id: str | None = None) -> None:
    """The lines logged from here on in this context (a request, say) are about this query or
    session (None leaves what was noted)."""
    if query_id is not None:
        _query_id.set(query_id)
    if session_id is not None:
        _session_id.set(session_id)


@contextlib.contextmanager
def about(*, query_id: str | None = None, session_id: str | None = None) -> Iterator[None]:
    """The lines logged within are about this query or session (a background round's item)."""
    tokens = [
        (var, var.set(value)) for var, value in ((_query_id, query_id), (_session_id, session_id)) if value is not None
    ]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current() -> dict[str, str]:
    """The ids the lines logged now are about."""
    found = {"queryId": _query_id.get(), "sessionId": _session_id.get()}
    return {key: value for key, value in found.items() if value}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC), ``level``, ``logger``, ``message``, the query
    and session the line is about when known, and ``exception`` (its traceback) if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "about", None) or current())
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _AboutFilter(logging.Filter):
    """Takes the ids when the line is made (a handler may write it later, elsewhere)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "about"):
            record.about = current()
        return True


def configure(level: str = "info", fmt: str = "text") -> None:
    """Log to standard error at ``level`` in ``fmt`` (``text`` or ``json``), every logger through
    the root's one handler (uvicorn's included, when it is told not to configure its own). Like
    ``logging.basicConfig``, nothing changes when the root logger has handlers already (a test
    runner's)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        handler.addFilter(_AboutFilter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
