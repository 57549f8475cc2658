"""What every runner shares: its session (wait for it, claim it, check it is still its own, end
it), its heartbeat and its statement runner, and the shape of :meth:`SessionRunner.run`.

A runner is built as ``Runner(cfg, store, executor, stop_event)`` and run with ``run()``, which
returns the state the session ended in (``None`` when it was never this job's). Subclasses
implement :meth:`SessionRunner.work`: the session is claimed and heart-beating while it runs.
Every read and write of the session and its statements goes to the request index the job was
given (``cfg.request_index``), which need not be the datasource's own.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import RunningQuery
from flint_repl_job.figures import JobCounters
from flint_repl_job.heartbeat import Heartbeat
from flint_repl_job.statement import Executor, StatementRunner
from query_core.errors import SessionLostError
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState
from query_core.store import Store
from query_core.store.sessions import check_job_owns

log = logging.getLogger(__name__)

#: Longest error text kept on a session.
MAX_SESSION_ERROR = 2000


class SessionRunner(ABC):
    """One session's job, whatever its type."""

    def __init__(
        self, cfg: JobConfig, store: Store, executor: Executor, stop_event: threading.Event | None = None
    ) -> None:
        self.cfg = cfg
        # Every read and write of the session, its statements and index states goes to the
        # request index the job was given.
        self.store = store if store.request_index == cfg.request_index else store.bound_to(cfg.request_index)
        self.executor = executor
        self.stop_event = stop_event or threading.Event()
        #: Why the session must end ``fail`` although the work itself did not fail (see :meth:`fail`).
        self.failure = ""
        #: What the job counts about its work, carried by its heartbeat (``docs/job.md``).
        self.figures = JobCounters()
        self.store.index.call_listeners.append(self.figures.index_call)
        self.store.statements.end_listeners.append(self.figures.statement_ended)
        self.heartbeat = Heartbeat(self, figures=self.figures)
        self.statements = StatementRunner(
            cfg,
            self.store,
            executor,
            self.stop_event,
            on_change=self.heartbeat.retime,
            failure=lambda: self.failure,
            fail_session=self.fail,
            figures=self.figures,
        )

    # -- what the heartbeat reports ---------------------------------------------------------

    @property
    def running(self) -> RunningQuery | None:
        return self.statements.running

    @property
    def running_since(self) -> int:
        return self.statements.running_since

    # -- session ownership ------------------------------------------------------------------

    def read_session(self) -> Versioned[SessionDoc] | None:
        return self.store.sessions.get(self.cfg.datasource, self.cfg.session_id)

    def read_statement(self, statement_id: str) -> Versioned[StatementDoc] | None:
        return self.statements.read_statement(statement_id)

    def fail(self, reason: str) -> None:
        """End the session ``fail`` with ``reason``: called from another thread (the heartbeat);
        the work notices the stop at once and :meth:`run` records the reason."""
        if not self.failure:
            self.failure = reason[:MAX_SESSION_ERROR]
        self.stop_event.set()

    def check_owner(self, session: SessionDoc) -> None:
        """Raise :class:`SessionLostError` unless the session is still this job's."""
        check_job_owns(session, self.cfg.job_id, self.cfg.exclude_jobs)

    def wait_for_session(self) -> Versioned[SessionDoc]:
        """The session document, waiting for it to appear (the plugin writes it after launching)."""
        deadline = time.monotonic() + self.cfg.session_wait_ms / 1000
        while True:
            session = self.read_session()
            if session is not None:
                self.check_owner(session.doc)
                return session
            if time.monotonic() >= deadline or self.stop_event.wait(self.cfg.loop_frequency_ms / 1000):
                raise SessionLostError(f"session {self.cfg.session_id} never appeared")

    def claim(self) -> None:
        """Move the session to ``running`` under this job's id."""
        current = self.read_session()
        if current is not None:
            cfg = self.cfg
            self.store.sessions.claim(
                current,
                cfg.job_id,
                application_id=cfg.application_id,
                heartbeat_interval_millis=cfg.heartbeat_idle_ms,
                excluded=cfg.exclude_jobs,
            )

    def end_session(self, state: SessionState, error: str = "") -> None:
        """End the session, unless it has ended or another job has taken it over."""
        current = self.read_session()
        if current is not None:
            self.store.sessions.end(current, state, error, job_id=self.cfg.job_id, metrics=self.figures.snapshot())

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> SessionState | None:
        """Run the session until it ends; returns the state it ended in (None if never ours)."""
        try:
            self.wait_for_session()
            self.claim()
        except SessionLostError as exc:
            log.warning("not starting: %s", exc)
            return None
        log.info("%s session %s running as job %s", self.cfg.job_type.value, self.cfg.session_id, self.cfg.job_id)
        self.heartbeat.start()
        end_state, error = SessionState.DEAD, ""
        try:
            end_state, error = self.work()
        except SessionLostError as exc:
            log.warning("stopping: %s", exc)
            end_state = SessionState.DEAD
        except Exception as exc:
            log.exception("session failed")
            end_state, error = SessionState.FAIL, f"Session failed: {type(exc).__name__}: {exc}"
        finally:
            self.stop_event.set()
            self.heartbeat.stop()
        error = error[:MAX_SESSION_ERROR]
        if self.failure and not error:
            end_state, error = SessionState.FAIL, self.failure
        self.end_session(end_state, error)
        log.info("session %s ended %s", self.cfg.session_id, end_state.value)
        return end_state

    @abstractmethod
    def work(self) -> tuple[SessionState, str]:
        """The runner's work, with the session claimed and beating: the state to end the session
        in and its error. Raising :class:`SessionLostError` ends it ``dead``; any other exception
        ``fail``; a failure reported meanwhile (:meth:`fail`) wins over a ``dead`` without error."""
