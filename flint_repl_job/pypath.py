"""A local job's Python imports PySpark from its installed package, not from Spark's source zips
(docs/job.md, "PySpark from its installed package").

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and its py4j zip first on the path of a job's
driver and of every Python worker it starts. Python keeps no bytecode of what it imports from a
zip, so each such process compiled PySpark's sources again: about half a CPU-second each. When
``SPARK_HOME`` is a pip-installed pyspark (the local jobs' case), the zips hold the very sources of
that package, which pip compiled at install, and of the py4j release it required. Those zips then
go to the end of the path: the installed copies are imported, and a zip is still there for a
module they lack. Anything else (a cluster's Spark, another py4j) keeps its place.

Imports nothing of PySpark: it runs before PySpark is imported.
"""

from __future__ import annotations

import os
import re

#: The py4j zip Spark ships (``py4j-<version>-src.zip``), its version captured.
PY4J_ZIP = re.compile(r"py4j-(?P<version>[0-9][0-9A-Za-z.]*)-src\.zip")


def _zip_of_installed(entry: str, directories: list[str]) -> bool:
    """Whether ``entry`` is a zip of a package installed, compiled, in one of ``directories``."""
    folder, name = os.path.split(entry)
    lib = os.path.join("pyspark", "python", "lib")
    if not folder.endswith(os.sep + lib):
        return False
    home = folder[: -len(lib)].rstrip(os.sep)  # the directory holding the installed pyspark
    if home not in directories or not os.path.isfile(os.path.join(home, "pyspark", "__init__.py")):
        return False
    if name == "pyspark.zip":
        return True
    found = PY4J_ZIP.fullmatch(name)
    return found is not None and os.path.isdir(os.path.join(home, f"py4j-{found['version']}.dist-info"))


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` (``sys.path``) with the zips of an installed pyspark moved to its end."""
    directories = [os.path.normpath(entry) for entry in path if entry and not entry.endswith(".zip")]
    moved = [
        entry for entry in path if entry.endswith(".zip") and _zip_of_installed(os.path.normpath(entry), directories)
    ]
    return [entry for entry in path if entry not in moved] + moved
