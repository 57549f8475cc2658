"""Where a datasource's catalog is: the one place the read model learns it, from what its jobs are
given (the launcher's catalog settings, the datasource's own Spark conf over them, as the job's
``--conf`` are merged; docs/datasources.md).

- a Hive Metastore: the jobs use Spark's Hive catalog with ``hive.metastore.uris`` (the embedded
  default's metastore, or one a datasource names);
- AWS Glue: a Glue-backed datasource whose launcher reaches Glue (``glue_region``), read with the
  datasource's role;
- anything else (Spark's in-memory catalog: each job its own; a catalog plugin; a Glue catalog
  the launcher does not reach) is not known to the read model: its statements go to Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from async_query import datasource_dialect as dialect
from async_query.catalog.bulk import TablesEndpoint
from async_query.datasources import Datasource
from async_query.launcher.base import Launcher
from async_query.launcher.glue import GLUE_HIVE_FACTORY, HIVE_CLIENT_FACTORY, SPARK_CATALOG


@dataclass(frozen=True)
class CatalogLocation:
    """A catalog the read model can read: ``kind`` ``hive`` (``address`` its Thrift URI, and
    ``bulk`` where an embedded metastore answers bulk reads of tables) or ``glue`` (``address``
    the region, ``role_arn`` the role to read it as)."""

    kind: str
    address: str
    role_arn: str = ""
    bulk: TablesEndpoint | None = None
    #: The uid an embedded metastore's socket must belong to (None: not checked).
    owner: int | None = None


def catalog_of(datasource: Datasource, launcher: Launcher) -> CatalogLocation | None:
    """The catalog ``datasource``'s jobs use, or None when the read model cannot know it."""
    if datasource.glue_backed:
        role = datasource.properties.get(dialect.GLUE_ROLE_ARN, "")
        if launcher.glue_region and role and not _iceberg(datasource):
            return CatalogLocation("glue", launcher.glue_region, role)
        return None
    conf = {**launcher.catalog_conf_for(datasource), **dialect.allowed_spark_conf(datasource.spark_conf)}
    if conf.get("spark.sql.catalogImplementation") != "hive" or conf.get(SPARK_CATALOG):
        return None
    factory = conf.get(HIVE_CLIENT_FACTORY) or conf.get(HIVE_CLIENT_FACTORY.removeprefix("spark.hadoop."))
    if factory == GLUE_HIVE_FACTORY:
        return None
    uris = conf.get("spark.hadoop.hive.metastore.uris") or conf.get("spark.hive.metastore.uris") or ""
    if not uris.startswith("thrift://"):
        return None
    return CatalogLocation("hive", uris, bulk=launcher.tables_endpoint(uris), owner=launcher.metastore_owner(uris))


def _iceberg(datasource: Datasource) -> bool:
    """An Iceberg catalog lists its tables its own way: left to Spark."""
    return (datasource.properties.get(dialect.GLUE_ICEBERG_ENABLED) or "").strip().lower() in ("true", "yes", "on")
