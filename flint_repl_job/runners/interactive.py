"""The interactive runner: claim the session, heartbeat, find waiting statements, run them.

The loop is explicit and testable: :meth:`InteractiveJob.run_once` handles at most one statement,
:meth:`InteractiveJob.run` loops until the inactivity limit, a stop request, or the loss of the
session (another job owns it, or the plugin ended it). Every wait is on the stop event, so a stop
is noticed at once.
"""

from __future__ import annotations

import logging
import threading
import time

from flint_repl_job.config import JobConfig
from flint_repl_job.runners.base import SessionRunner
from flint_repl_job.statement import Executor
from query_core.errors import AsyncQueryError, IndexUnavailableError, SessionLostError
from query_core.models import StatementDoc, Versioned, now_millis
from query_core.states import SessionState, StatementState, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)


class InteractiveJob(SessionRunner):
    """An interactive session: statements one after another until it is idle too long."""

    def __init__(
        self, cfg: JobConfig, store: Store, executor: Executor, stop_event: threading.Event | None = None
    ) -> None:
        super().__init__(cfg, store, executor, stop_event)
        self._finished_ids: set[str] = set()
        self._next_search = 0.0
        #: When the session's last statement was taken (or the loop began): how quiet it is.
        self.idle_since = time.monotonic()

    def work(self) -> tuple[SessionState, str]:
        self.loop()
        return SessionState.DEAD, ""

    def loop(self) -> None:
        self.idle_since = time.monotonic()
        limit = self.cfg.inactivity_limit_ms / 1000
        while not self.stop_event.is_set():
            if self.run_once():
                self.idle_since = time.monotonic()
                continue
            if time.monotonic() - self.idle_since >= limit:
                log.info("no statement for %.0f s: ending the session", limit)
                return
            self.stop_event.wait(self.cfg.loop_pause_s(time.monotonic() - self.idle_since))

    def run_once(self) -> bool:
        """Take the oldest waiting statement, if any, and run it to a terminal state."""
        statement = self.next_statement()
        if statement is None:
            return False
        try:
            self.process(statement)
        except (SessionLostError, IndexUnavailableError):
            raise
        except AsyncQueryError as exc:
            log.exception("statement %s could not be processed", statement.doc.statement_id)
            self.give_up(statement, exc)
        return True

    def give_up(self, statement: Versioned[StatementDoc], exc: AsyncQueryError) -> None:
        """One statement's bookkeeping failed: fail it, and the session goes on. A statement must
        not stay ``running`` in a live session that no longer runs it, so should even that write
        fail, the error propagates and the session ends (the plugin then fails the statement)."""
        current = self.read_statement(statement.doc.statement_id)
        if current is not None and not is_terminal(current.doc.state):
            self.store.statements.fail(current, f"Fail to run query. Cause: {exc.message}")

    # -- finding work -----------------------------------------------------------------------

    def next_statement(self) -> Versioned[StatementDoc] | None:
        """The oldest waiting statement: first from the session's real-time list of submitted ids,
        then, at most once per search interval (stretched while the session is quiet: docs/job.md,
        "The loop"), from the refresh-delayed search the reference plugin's statements are found by."""
        session = self.read_session()
        if session is None:
            raise SessionLostError(f"session {self.cfg.session_id} disappeared")
        self.check_owner(session.doc)
        waiting = [s for s in map(self._get_if_waiting, session.doc.pending_statement_ids) if s is not None]
        if not waiting and time.monotonic() >= self._next_search:
            now = time.monotonic()
            self._next_search = now + self.cfg.search_pause_s(now - self.idle_since)
            try:
                found = self.store.statements.find_waiting(self.cfg.datasource, self.cfg.session_id)
            except AsyncQueryError as exc:
                log.warning("search for waiting statements failed: %s", exc)
                found = []
            waiting = [s for s in found if s.doc.statement_id not in self._finished_ids]
        return min(waiting, key=lambda s: s.doc.submit_time) if waiting else None

    def _get_if_waiting(self, statement_id: str) -> Versioned[StatementDoc] | None:
        if statement_id in self._finished_ids:
            return None
        statement = self.read_statement(statement_id)
        if statement is None or statement.doc.state != StatementState.WAITING:
            self._finished_ids.add(statement_id)
            return None
        return statement

    # -- running one statement --------------------------------------------------------------

    def process(self, statement: Versioned[StatementDoc]) -> None:
        doc = statement.doc
        self._finished_ids.add(doc.statement_id)
        waited = now_millis() - doc.submit_time
        if waited > self.cfg.query_wait_timeout_ms:
            error = (
                f"Statement wait timeout: waited {waited} ms, more than the {self.cfg.query_wait_timeout_ms} ms allowed"
            )
            self.statements.fail(statement, error)
            return
        self.statements.run(statement)
