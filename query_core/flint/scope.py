"""Which catalog a Flint statement is about: a datasource's statements reach its own indexes only.

A Flint index's name carries the catalog of its table (``flint_<catalog>_<db>_<table>_...``), so a
statement naming another datasource as its catalog (``DROP SKIPPING INDEX ON local.default.t``,
sent to ``lake``) would read, create or change that datasource's indexes without its
``allowedRoles`` ever being asked. Such a statement is refused, at POST and in the job
(docs/flint.md, "Names").
"""

from __future__ import annotations

from collections.abc import Iterator

from query_core.errors import InvalidRequestError
from query_core.flint.ast import (
    CreateCoveringIndex,
    CreateMaterializedView,
    CreateSkippingIndex,
    IndexStatement,
    RecoverIndexJob,
    ShowCoveringIndexes,
    ShowFlintIndexes,
    ShowMaterializedViews,
    Statement,
)
from query_core.flint.index_meta import IndexMeta
from query_core.flint.naming import FLINT_INDEX_PREFIX, sanitize_index_name


class ForeignCatalogError(InvalidRequestError):
    """A Flint statement about another datasource's catalog."""


def catalogs_named(statement: Statement) -> Iterator[str]:
    """The catalogs a Flint statement names explicitly (a name of three parts, ``IN catalog``)."""
    if isinstance(statement, CreateSkippingIndex | CreateCoveringIndex | ShowCoveringIndexes):
        names = [statement.table]
    elif isinstance(statement, CreateMaterializedView):
        names = [statement.name]
    elif isinstance(statement, IndexStatement):
        names = [statement.index.table]
    elif isinstance(statement, ShowFlintIndexes | ShowMaterializedViews):
        yield statement.catalog
        return
    else:
        return
    for name in names:
        if name.is_qualified:
            yield name.parts[0]


def check_catalog(statement: Statement, datasource: str) -> None:
    """Refuse (a 400) a Flint statement that names a catalog other than ``datasource``, or
    (``RECOVER INDEX JOB``) an index whose name is not of ``datasource``'s catalog."""
    if isinstance(statement, RecoverIndexJob):
        name = sanitize_index_name(statement.index_name.strip("`"))
        if not name.startswith(sanitize_index_name(f"{FLINT_INDEX_PREFIX}{datasource}_")):
            raise ForeignCatalogError(
                f"index {name!r} is not of this query's datasource {datasource!r}: a Flint statement "
                "reaches its own datasource's indexes only"
            )
    for catalog in catalogs_named(statement):
        if catalog.lower() != datasource.lower():
            raise ForeignCatalogError(
                f"catalog {catalog!r} is not this query's datasource {datasource!r}: a Flint statement "
                "reaches its own datasource's indexes only"
            )


def check_index_catalog(meta: IndexMeta, datasource: str) -> None:
    """Refuse an index whose table (or materialized view) is in another catalog than
    ``datasource``: what its metadata says, where its name alone is ambiguous (``lake_b``'s
    index names begin with ``flint_lake_`` too). Compared in any case, as :func:`check_catalog`
    compares the catalog a statement names."""
    if meta.catalog.lower() != datasource.lower():
        raise ForeignCatalogError(
            f"index {meta.index_name!r} is of catalog {meta.catalog!r}, not this query's datasource "
            f"{datasource!r}: a Flint statement reaches its own datasource's indexes only"
        )
