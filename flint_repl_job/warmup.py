"""A short Spark run whose JVM records the class archive local jobs start from.

Run by ``spark-submit`` with ``-XX:ArchiveClassesAtExit`` (see
``async_query/launcher/class_archive.py`` and ``docs/job.md``): it loads what a session's first
statements load (the session, the catalog, SQL parsing, planning, code generation, a shuffle) and
exits cleanly, which is when the JVM writes the archive.
"""

import os
import sys

# As in main.py: the modules beside this file are only ever imported as ``flint_repl_job.<name>``.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

from flint_repl_job.jvm import session


def main() -> None:
    spark = session({})  # as a job makes its session (flint_repl_job/runners)
    try:
        spark.sql("SHOW DATABASES").collect()
        spark.sql("SELECT id % 3 AS k, count(*) AS n FROM range(1000) GROUP BY id % 3 ORDER BY k").collect()
        spark.range(10).selectExpr("id", "cast(id AS string) AS s", "current_timestamp() AS t").toLocalIterator()
        spark.sql("SELECT 1").collect()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
