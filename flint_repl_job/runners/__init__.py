"""One runner per job type (``spark.flint.job.type``), and the job's ``main()`` that picks it.

Every runner is a :class:`~flint_repl_job.runners.base.SessionRunner`: built as
``Runner(cfg, store, executor, stop_event)``, run with ``run()`` (the session's end state, or
None when the session was never this job's). They share the heartbeat
(:mod:`flint_repl_job.heartbeat`) and the statement runner (:mod:`flint_repl_job.statement`).
A warm pool job (``spark.flint.job.poolSlot`` set) runs :class:`~.pool.PoolJob` first, which
waits for a session to claim it and then runs that session as an interactive job.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from flint_repl_job.config import JobConfig
from flint_repl_job.executor import ResultTarget, SparkExecutor
from flint_repl_job.indexes.engine import FlintContext, FlintEngine
from flint_repl_job.jvm import prepare as prepare_jvm
from flint_repl_job.jvm import session as jvm_session
from flint_repl_job.runners.base import SessionRunner
from flint_repl_job.runners.batch import BatchJob
from flint_repl_job.runners.interactive import InteractiveJob
from flint_repl_job.runners.pool import PoolJob
from flint_repl_job.runners.streaming import StreamingJob
from query_core.jobconf import KEYS, Getter, is_claim_key
from query_core.models import PoolClaim
from query_core.states import SessionState, SessionType
from query_core.store import Store, quiet_driver_logs
from query_core.validation import ALLOW_ALL

__all__ = [
    "RUNNERS",
    "BatchJob",
    "InteractiveJob",
    "PoolJob",
    "SessionRunner",
    "StreamingJob",
    "main",
    "runner_for",
]

log = logging.getLogger(__name__)

#: The runner of each job type; a type absent here (``local``: the plugin's own) has no job.
RUNNERS: dict[SessionType, type[SessionRunner]] = {
    SessionType.INTERACTIVE: InteractiveJob,
    SessionType.BATCH: BatchJob,
    SessionType.STREAMING: StreamingJob,
}

#: main()'s exit code for a job type without a runner.
EXIT_UNKNOWN_TYPE = 2


def runner_for(job_type: SessionType | str) -> type[SessionRunner] | None:
    """The runner class of ``job_type``, or None when no runner runs that type."""
    try:
        return RUNNERS.get(SessionType(job_type))
    except ValueError:
        return None


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_driver_logs()
    # Python's datetime conversion of Spark timestamps uses the process time zone: make it UTC,
    # like the Spark session's, so timestamps come back as written.
    os.environ["TZ"] = "UTC"
    time.tzset()
    # Python data sources take a query's filters only with pushdown on: the covering indexes
    # queries read (docs/acceleration.md).
    spark = jvm_session({"spark.sql.session.timeZone": "UTC", "spark.sql.python.filterPushdown.enabled": "true"})
    try:
        prepare_jvm(spark)
        conf = spark.sparkContext.getConf()
        get: Getter = lambda key: conf.get(key, None)  # noqa: E731
        cfg = JobConfig.load(get, argv)
        runner = runner_for(cfg.job_type)
        if runner is None:
            log.error(
                "no runner for job type %r (spark.flint.job.type); this job runs %s",
                cfg.job_type.value,
                ", ".join(t.value for t in RUNNERS),
            )
            return EXIT_UNKNOWN_TYPE
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        if cfg.pool_slot:
            run_pool_job(spark, cfg, get, stop)
        else:
            run_session(spark, runner, cfg, stop)
    finally:
        spark.stop()
    return 0


def run_session(spark: Any, runner: type[SessionRunner], cfg: JobConfig, stop: threading.Event) -> SessionState | None:
    """Run the session ``cfg`` names with ``runner``, on ``spark``."""
    store = Store.connect(cfg.opensearch, cfg.request_index)
    results = ResultTarget(cfg.result_limits, store.results, cfg.result_index)
    executor = SparkExecutor(
        spark,
        cfg.datasource,
        flint_engine(spark, store, cfg),
        cfg.validation,
        results,
        limits=cfg.statement_limits,
        prepare_timeout_s=cfg.statement_prepare_timeout_s,
        report_catalog=cfg.report_catalog_changes,
    )
    try:
        return runner(cfg, store, executor, stop).run()
    finally:
        executor.close()


def run_pool_job(spark: Any, cfg: JobConfig, get: Getter, stop: threading.Event) -> SessionState | None:
    """Run a warm pool job (:mod:`.pool`): warm up, wait for a claim, then run its session."""
    store = Store.connect(cfg.opensearch)

    def become(claim: PoolClaim) -> SessionState | None:
        session = JobConfig.claimed(get, claim)
        apply_runtime_conf(spark, claim.conf)
        return run_session(spark, InteractiveJob, session, stop)

    try:
        return PoolJob(cfg, store, become, stop, warm_up=lambda: warm_up(spark)).run()
    finally:
        store.close()


def apply_runtime_conf(spark: Any, claim_conf: dict[str, str]) -> None:
    """Set the claimed session's runtime Spark settings (the claim's keys that are not the
    contract's). Any other key is refused: a claim never changes what is fixed at start-up."""
    for key, value in claim_conf.items():
        if key in KEYS:
            continue
        if not is_claim_key(key):
            raise ValueError(f"a claim cannot set {key!r}: it is fixed when the job starts")
        spark.conf.set(key, value)


#: What a pool job runs before it is ready: the statement path of a session's first query (the
#: statement check, catalog naming, planning, code generation, result encoding) and the catalog.
WARM_UP_STATEMENTS = ("SELECT 'warm' AS warm, 1 AS one", "SELECT id % 3 AS k, count(*) AS n FROM range(100) GROUP BY 1")


def warm_up(spark: Any) -> None:
    """Load what a session's first statements load, leaving nothing behind (no view, no setting,
    no cached table): the catalog (``SHOW DATABASES``) and a statement run as a session runs one."""
    spark.sql("SHOW DATABASES").collect()
    executor = SparkExecutor(spark, "warm", None, ALLOW_ALL)
    try:
        for n, sql in enumerate(WARM_UP_STATEMENTS):
            executor.start(f"pool-warm-up-{n}", sql).future.result(timeout=300)
    finally:
        executor.close()


def flint_engine(spark: Any, store: Store, cfg: JobConfig) -> FlintEngine:
    """The engine of the job's Flint statements, writing as this job (its ids on the index states)."""
    context = FlintContext(
        spark=spark,
        store=store,
        opensearch=cfg.opensearch,
        datasource=cfg.datasource,
        application_id=cfg.application_id,
        job_id=cfg.job_id,
        validation=cfg.validation,
        scheduler=cfg.scheduler,
    )
    return FlintEngine(context)
