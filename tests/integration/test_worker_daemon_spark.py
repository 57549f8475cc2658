"""The Python workers of a session whose daemon is the project's (``flint_repl_job.worker_daemon``)
import the installed, compiled PySpark, not Spark's source zips (docs/job.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _origin(_: Iterator[Any]) -> Iterator[tuple[str, str]]:
    import pyspark

    yield pyspark.__file__ or "", type(pyspark.__spec__.loader).__name__


def test_a_python_worker_imports_pyspark_from_its_installed_package(spark: Any) -> None:
    import pyspark

    [(file, loader)] = spark.sparkContext.parallelize([0], 1).mapPartitions(_origin).collect()
    assert (file, loader) == (pyspark.__file__, "SourceFileLoader")
