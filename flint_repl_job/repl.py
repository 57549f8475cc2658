"""Compatibility module: the job's pieces by their former names.

The job now has one runner per type (:mod:`flint_repl_job.runners`) over a shared heartbeat
(:mod:`flint_repl_job.heartbeat`) and statement runner (:mod:`flint_repl_job.statement`). An
entry file of an older package imports ``main`` from here, so this module stays.
"""

from __future__ import annotations

from flint_repl_job.heartbeat import MAX_BEAT_FAILURES, Heartbeat, SessionLostError
from flint_repl_job.runners import main
from flint_repl_job.runners.interactive import InteractiveJob
from flint_repl_job.statement import CANCEL_GRACE_S, Executor

__all__ = ["CANCEL_GRACE_S", "MAX_BEAT_FAILURES", "Executor", "Heartbeat", "InteractiveJob", "SessionLostError", "main"]
