"""The record of the table's files a covering index was built from (``docs/acceleration.md``):
written by a full refresh, removed before a rewrite and when a stream starts writing the index."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from flint_repl_job.acceleration.files import SNAPSHOT_PROPERTY, SourceSnapshot
from flint_repl_job.acceleration.plans import input_files
from flint_repl_job.indexes.builders import table_frame
from flint_repl_job.indexes.output import FlintIndexError
from query_core.flint.index_meta import IndexMeta
from query_core.flint.metas import flint_meta
from query_core.flint.naming import IndexKind
from query_core.store import IndexAdmin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def record_snapshot(admin: IndexAdmin, index_name: str, snapshot: SourceSnapshot | None) -> None:
    """Replace (None: remove) the index's record of the files it was built from."""
    raw = flint_meta(admin, index_name)
    if raw is None:
        raise FlintIndexError(f"Index {index_name} doesn't exist")
    properties = dict(raw.get("properties") or {})
    properties.pop(SNAPSHOT_PROPERTY, None)
    if snapshot is not None:
        properties[SNAPSHOT_PROPERTY] = snapshot.to_property()
    admin.put_mapping_meta(index_name, {**raw, "properties": properties})


def forget_snapshot(admin: IndexAdmin, meta: IndexMeta) -> None:
    """Before a stream writes a covering index: it adds rows the record does not account for, so
    the index is no longer known fresh."""
    if meta.kind is IndexKind.COVERING and admin.index_exists(meta.index_name):
        record_snapshot(admin, meta.index_name, None)


def refresh_covering(
    spark: SparkSession,
    admin: IndexAdmin,
    datasource: str,
    frame: DataFrame,
    meta: IndexMeta,
    write: Callable[[DataFrame, IndexMeta], None],
) -> None:
    """Rewrite a covering index with ``write``, and record the table's files it was built from
    (:class:`SourceSnapshot`): queries read the index instead of the table only while the table
    has exactly those files. The record is removed before the index is rewritten, so an index
    whose refresh did not finish is never taken as fresh."""
    # The table's whole listing (not the WHERE's partitions), as a query compares it: for a table
    # of files Spark lists once, the very listing the write reads.
    snapshot = SourceSnapshot.of(input_files(table_frame(spark, meta.source, datasource)))
    record_snapshot(admin, meta.index_name, None)
    write(frame, meta)
    record_snapshot(admin, meta.index_name, snapshot)
