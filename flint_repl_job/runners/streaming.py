"""The streaming runner: a placeholder until streaming sessions are implemented.

It claims its session and ends it ``fail`` with a clear error, and fails the statement it was
given (``spark.flint.job.queryId``), result document first, so that nothing waits on it. It never
exits silently.
"""

from __future__ import annotations

import logging

from flint_repl_job.runners.base import SessionRunner
from query_core.states import SessionState, is_terminal

log = logging.getLogger(__name__)

NOT_SUPPORTED = "streaming sessions are not supported yet"


class StreamingJob(SessionRunner):
    """A streaming session: not supported yet; ends ``fail``."""

    def work(self) -> tuple[SessionState, str]:
        error = f"Session failed: {NOT_SUPPORTED}"
        log.error("session %s: %s", self.cfg.session_id, NOT_SUPPORTED)
        statement = self.read_statement(self.cfg.query_id) if self.cfg.query_id else None
        if statement is not None and not is_terminal(statement.doc.state):
            self.statements.fail(statement, error)
        return SessionState.FAIL, error
