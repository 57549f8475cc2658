"""A short Spark run whose JVM records the class archive local jobs start from.

Run by ``spark-submit`` with ``-XX:ArchiveClassesAtExit`` (see
``async_query/launcher/class_archive.py`` and ``docs/job.md``): it loads what a session's first
statements load (the session, the catalog, SQL parsing, planning, code generation, a shuffle) and
exits cleanly, which is when the JVM writes the archive.
"""

from __future__ import annotations

from pyspark.sql import SparkSession


def main() -> None:
    spark = SparkSession.builder.getOrCreate()
    try:
        spark.sql("SHOW DATABASES").collect()
        spark.sql("SELECT id % 3 AS k, count(*) AS n FROM range(1000) GROUP BY id % 3 ORDER BY k").collect()
        spark.range(10).selectExpr("id", "cast(id AS string) AS s", "current_timestamp() AS t").toLocalIterator()
        spark.sql("SELECT 1").collect()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
