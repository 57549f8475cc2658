"""The class archives of the run's node and metastore JVMs, recorded before the first of them starts.

The service keeps one archive for its OpenSearch node and one for its metastores, each recorded by
a JVM that stops cleanly without one (:mod:`async_query.embedded.archive`). A run starts some thirty
nodes and a dozen metastores, each about 2 CPU-s cheaper from an archive; but the nodes of the test
processes live as long as the run, and would record theirs only at its end. So the run starts and
stops one of each first (some fifteen seconds, once per installation: later runs find them), in a
thread of the controlling process while the test processes start, holding
:data:`tests.node.ARCHIVE_LOCK`, which a node of the run waits for.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from async_query.embedded.index import EmbeddedIndex, node_archive
from async_query.embedded.java import pyspark_jars
from async_query.embedded.metastore import Metastore, metastore_archive
from async_query.embedded.node_jars import NodeJars
from async_query.runtime import embedded_class_archive_dir
from async_query.settings import Settings
from query_core.errors import AsyncQueryError
from tests.node import archive_lock, node_options


def class_archive_dir() -> Path:
    """Where the service keeps the archives (the same for every run of this installation)."""
    return embedded_class_archive_dir(Settings())


def _record_node() -> None:
    options, jars = node_options(), NodeJars.resolve()
    archive = node_archive(jars, options)
    if archive is None or archive.path.exists():
        return
    directory = Path(tempfile.mkdtemp(prefix="async-query-test-archive-"))
    try:
        directory.chmod(0o711)
        EmbeddedIndex.start(directory / "index", jars, options, watch=False).close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _record_metastore() -> None:
    if metastore_archive(class_archive_dir()).path.exists():
        return
    directory = Path(tempfile.mkdtemp(prefix="async-query-test-archive-"))
    try:
        directory.chmod(0o711)
        files = directory / "files"
        metastore = Metastore.start(
            directory / "ms", directory / "warehouse", files=files, class_archive=class_archive_dir()
        )
        metastore.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def record_missing() -> None:
    """(:data:`tests.node.ARCHIVE_LOCK` held) Each archive there is none of, recorded."""
    for record in (_record_node, _record_metastore):
        try:
            record()
        except (AsyncQueryError, OSError) as exc:  # only ever an optimisation: they start without it
            warnings.warn(f"no class archive recorded ({record.__name__}): {exc}", stacklevel=1)


def record_in_background() -> threading.Thread:
    """:func:`record_missing` in a thread of this process, which holds the lock when this returns."""
    # What the thread needs imported is imported here first: a package imported by two threads at
    # once can fail in one of them (importlib breaks the cycle between their module locks), and
    # the test collection goes on in this thread meanwhile.
    pyspark_jars()
    taken = threading.Event()

    def record() -> None:
        with archive_lock():
            taken.set()
            record_missing()

    thread = threading.Thread(target=record, name="jvm-archives", daemon=True)
    thread.start()
    taken.wait()
    return thread
