"""What each statement changed in the catalog, as Spark's own catalog reports it: the job's side
of the catalog read model's invalidation (docs/catalog.md, docs/job.md).

Spark's external catalog calls its listeners synchronously, in the thread that changes it, for
every database, table and partition it creates, drops, renames or alters, whatever statement did
it (DDL, CTAS, an INSERT or MSCK that adds partitions, a PPL query, a Flint statement). A listener
registered here through Py4J's callback server collects those changes while a statement runs; the
statement runner records them in the datasource's catalog change log before it marks the statement
``success`` (:meth:`query_core.store.CatalogChangeRepository.record`).

The job also notes once that its Spark session holds temporary views: SHOW TABLES then lists them,
which the catalog does not know.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from query_core.store.catalog_changes import CatalogChange

log = logging.getLogger(__name__)

LISTENER_INTERFACE = "org.apache.spark.sql.catalyst.catalog.ExternalCatalogEventListener"


class CatalogChangeListener:
    """Collects the catalog changes of the statement running (one at a time per job)."""

    def __init__(self) -> None:
        self._changes: list[CatalogChange] = []
        self._lock = threading.Lock()

    # Py4J calls this from the JVM, in the thread that changed the catalog.
    def onEvent(self, event: Any) -> None:  # noqa: N802 - the Java interface's method name
        try:
            change = changes_of(event)
        except Exception:
            log.exception("catalog event not understood")
            return
        with self._lock:
            self._changes += change

    def take(self) -> list[CatalogChange]:
        """The changes collected since the last take, each once, in order."""
        with self._lock:
            taken, self._changes = self._changes, []
        unique: list[CatalogChange] = []
        for change in taken:
            if change not in unique:
                unique.append(change)
        return unique

    class Java:
        implements = [LISTENER_INTERFACE]


def changes_of(event: Any) -> list[CatalogChange]:
    """The databases and tables a Spark ``ExternalCatalogEvent`` names (none for its ``Pre``
    events, which come before the change, and for functions)."""
    kind = str(event.getClass().getSimpleName())
    if kind.endswith("PreEvent") or "Function" in kind:
        return []
    database = str(event.database())
    if "Database" in kind:
        return [CatalogChange(database=database)]
    changes = [CatalogChange(database=database, table=str(event.name()))]
    if kind == "RenameTableEvent":
        changes.append(CatalogChange(database=database, table=str(event.newName())))
    return changes


def listen(spark: Any) -> CatalogChangeListener | None:
    """Register a listener on ``spark``'s external catalog; None when it cannot be (the read model
    then relies on its staleness bound)."""
    try:
        from pyspark.java_gateway import ensure_callback_server_started

        gateway = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)
        listener = CatalogChangeListener()
        spark._jsparkSession.sharedState().externalCatalog().addListener(listener)
        return listener
    except Exception as exc:  # noqa: BLE001 - an optional report
        log.warning("catalog changes will not be reported: %s: %s", type(exc).__name__, exc)
        return None


def has_temporary_views(spark: Any) -> bool:
    """Whether the Spark session holds temporary views (of its own; global ones are shared)."""
    try:
        return not spark._jsparkSession.sessionState().catalog().listLocalTempViews("*").isEmpty()
    except Exception:  # noqa: BLE001 - unknown: say so, and the plugin leaves SHOW TABLES to Spark
        return True
