"""A Flint index's metadata, as the reference keeps it in the index mapping's ``_meta``.

OpenSearch Dashboards and the reference read it, so its shape follows the reference
(``docs/flint.md``): ``version``, ``name``, ``kind``, ``source``, ``indexedColumns``, ``options`` (a string
map with ``auto_refresh`` and ``incremental_refresh`` filled in), ``latestId`` and ``properties``
(``env`` with the job's application and job-run ids, ``filterCondition`` of a covering index,
``sourceTables`` of a materialized view).

``name`` is what the reference puts there: the full Flint index name for a skipping index, the
index's own short name for a covering index, and the qualified view name for a materialized view.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from query_core.flint.ast import IndexKind
from query_core.flint.naming import latest_id

#: The metadata version this product writes (the reference's current one).
META_VERSION = "1.0.0"
#: ``properties.env`` keys naming the job that created the index (the reference's names).
ENV_APPLICATION_ID = "SERVERLESS_EMR_VIRTUAL_CLUSTER_ID"
ENV_JOB_ID = "SERVERLESS_EMR_JOB_ID"


@dataclass(frozen=True)
class IndexMeta:
    """What an index's ``_meta`` says, plus the OpenSearch index it belongs to."""

    index_name: str
    kind: IndexKind
    name: str
    source: str
    indexed_columns: tuple[dict[str, Any], ...]
    options: dict[str, str]
    properties: dict[str, Any] = field(default_factory=dict)
    version: str = META_VERSION

    @property
    def latest_id(self) -> str:
        return latest_id(self.index_name)

    @property
    def auto_refresh(self) -> bool:
        return self.options.get("auto_refresh", "false").lower() == "true"

    @property
    def incremental_refresh(self) -> bool:
        return self.options.get("incremental_refresh", "false").lower() == "true"

    @property
    def filter_condition(self) -> str | None:
        condition = self.properties.get("filterCondition")
        return str(condition) if condition else None

    def to_meta(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "kind": self.kind.value,
            "source": self.source,
            "indexedColumns": [dict(column) for column in self.indexed_columns],
            "options": dict(self.options),
            "latestId": self.latest_id,
            "properties": dict(self.properties),
        }

    @classmethod
    def from_meta(cls, index_name: str, meta: dict[str, Any]) -> IndexMeta | None:
        """The metadata of ``index_name``, or None when its ``_meta`` is not a Flint index's."""
        try:
            kind = IndexKind(str(meta.get("kind", "")))
        except ValueError:
            return None
        return cls(
            index_name=index_name,
            kind=kind,
            name=str(meta.get("name", "")),
            source=str(meta.get("source", "")),
            indexed_columns=tuple(dict(c) for c in meta.get("indexedColumns", []) if isinstance(c, dict)),
            options={str(k): str(v) for k, v in dict(meta.get("options", {})).items()},
            properties=dict(meta.get("properties", {})),
            version=str(meta.get("version", META_VERSION)),
        )

    # -- what SHOW FLINT INDEX lists ----------------------------------------------------------

    def listed_names(self) -> tuple[str, str | None, str | None]:
        """(database, table, index name) as SHOW FLINT INDEX shows them, from the qualified
        source table (skipping, covering) or view name (materialized view)."""
        parts = self._qualified_parts()
        database = parts[1] if len(parts) > 1 else ""
        rest = ".".join(parts[2:])
        if self.kind is IndexKind.SKIPPING:
            return database, rest, None
        if self.kind is IndexKind.COVERING:
            return database, rest, self.name
        return database, None, rest

    @property
    def catalog(self) -> str:
        """The catalog of the index's table (or view), as its qualified name says."""
        return self._qualified_parts()[0]

    def belongs_to(self, catalog: str, database: str | None) -> bool:
        """True when the index's table (or view) is in ``catalog`` (and ``database`` if given)."""
        parts = self._qualified_parts()
        if len(parts) < 3 or parts[0] != catalog:
            return False
        return database is None or parts[1] == database

    def _qualified_parts(self) -> list[str]:
        """The parts of the qualified source table, or of the view's own name for a view."""
        return (self.name if self.kind is IndexKind.MV else self.source).split(".")
