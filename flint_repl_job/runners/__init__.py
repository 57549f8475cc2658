"""One runner per job type (``spark.flint.job.type``), and the job's ``main()`` that picks it.

Every runner is a :class:`~flint_repl_job.runners.base.SessionRunner`: built as
``Runner(cfg, store, executor, stop_event)``, run with ``run()`` (the session's end state, or
None when the session was never this job's). They share the heartbeat
(:mod:`flint_repl_job.heartbeat`) and the statement runner (:mod:`flint_repl_job.statement`).
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
from flint_repl_job.runners.base import SessionRunner
from flint_repl_job.runners.batch import BatchJob
from flint_repl_job.runners.interactive import InteractiveJob
from flint_repl_job.runners.streaming import StreamingJob
from query_core.states import SessionType
from query_core.store import Store, quiet_driver_logs

__all__ = ["RUNNERS", "BatchJob", "InteractiveJob", "SessionRunner", "StreamingJob", "main", "runner_for"]

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
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    try:
        conf = spark.sparkContext.getConf()
        cfg = JobConfig.load(lambda key: conf.get(key, None), argv)
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
        )
        try:
            runner(cfg, store, executor, stop).run()
        finally:
            executor.close()
    finally:
        spark.stop()
    return 0


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
    )
    return FlintEngine(context)
