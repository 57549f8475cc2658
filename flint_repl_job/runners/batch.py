"""The batch runner (``docs/job.md``): the job's one statement.

The plugin writes the session and the statement documents before it launches the job. The job
claims the session, reads the statement named by ``spark.flint.job.queryId`` from the request
index, runs it (heart-beating meanwhile), writes its result, and ends the session ``dead`` when
the statement succeeded (or was cancelled), ``fail`` with the statement's error otherwise.

Without a statement document (the reference's batch job is started with the query alone), the
query of ``spark.flint.job.query`` runs under that query id and only its result is written.
"""

from __future__ import annotations

import logging

from flint_repl_job.runners.base import SessionRunner
from flint_repl_job.statement import Outcome
from query_core.ids import new_id
from query_core.models import StatementDoc
from query_core.states import SessionState, StatementState, is_terminal

log = logging.getLogger(__name__)


class BatchJob(SessionRunner):
    """A batch session: one statement, then the session ends."""

    def work(self) -> tuple[SessionState, str]:
        outcome = self.run_statement()
        if outcome.state in (StatementState.SUCCESS, StatementState.CANCELLED):
            return SessionState.DEAD, ""
        return SessionState.FAIL, outcome.error or f"Statement ended {outcome.state.value}"

    #: How the job calls itself in messages.
    job_kind = "Batch"

    def refusal(self, query: str) -> str | None:
        """Why this job does not run ``query`` (None: it does). A batch job runs any query."""
        return None

    def run_statement(self) -> Outcome:
        """Run the job's one statement (or, without its document, ``spark.flint.job.query``):
        result first, then the terminal state; a statement :meth:`refusal` names is failed unrun."""
        cfg = self.cfg
        query_id = cfg.query_id
        statement = self.read_statement(query_id) if query_id else None
        if statement is None:
            if not cfg.query:
                what = f"statement {query_id} was not found" if query_id else "no spark.flint.job.queryId was given"
                return Outcome(
                    StatementState.FAILED,
                    f"{self.job_kind} job has nothing to run: {what} and spark.flint.job.query is empty",
                )
            query_id = query_id or new_id(cfg.datasource)
            log.info("no statement document for %s: running spark.flint.job.query, writing its result only", query_id)
            doc = StatementDoc(
                statement_id=query_id,
                query_id=query_id,
                session_id=cfg.session_id,
                query=cfg.query,
                data_source_name=cfg.datasource,
            )
            refused = self.refusal(doc.query)
            return Outcome(StatementState.FAILED, refused) if refused else self.statements.run_untracked(doc)
        if is_terminal(statement.doc.state):
            log.info("statement %s is already %s: nothing to run", query_id, statement.doc.state.value)
            return Outcome(statement.doc.state, statement.doc.error)
        refused = self.refusal(statement.doc.query)
        if refused:
            log.error("session %s: %s", cfg.session_id, refused)
            return self.statements.fail(statement, refused)
        outcome = self.statements.run(statement)
        if outcome is None:  # moved before it could start: cancelled, most likely
            current = self.read_statement(query_id)
            state = current.doc.state if current is not None else StatementState.CANCELLED
            return Outcome(state, current.doc.error if current is not None else "")
        return outcome
