"""The daemon that forks a local job's Python workers (``spark.python.daemon.module``): PySpark's
own, started after the path prefers the installed PySpark (:mod:`flint_repl_job.pypath`), so
the daemon and every worker it forks import compiled modules rather than compiling Spark's zips.

Spark runs it as ``python -m flint_repl_job.worker_daemon <worker module>``; PySpark's daemon
reads the worker module from that argument as when it runs itself.
"""

from __future__ import annotations

import sys

from flint_repl_job.pypath import prefer_installed_pyspark

sys.path[:] = prefer_installed_pyspark(sys.path)

from pyspark import daemon  # noqa: E402 (after the path is set)

if __name__ == "__main__":
    daemon.manager()
