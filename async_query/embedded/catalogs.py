"""Each local datasource's catalog is its own: its metastore, warehouse and checkpoints.

A datasource's ``allowedRoles`` protects its tables only if no other datasource reaches them. So a
local datasource's jobs get a catalog no other datasource's jobs see: its own Hive Metastore (its
own Derby database, hence its own namespace of databases), started the first time one of its jobs
is launched, and its own warehouse and checkpoint directories, which are also the roots its
statements may name locations under (docs/validation.md). A statement of ``local`` can neither
name ``lake``'s tables (another catalog) nor read their files (outside its roots).

Why one metastore process per datasource: Hive 2.3, the metastore PySpark ships, has no catalogs
within one metastore (they came with Hive 3), and prefixing database names per datasource would
mean rewriting every database name in every statement and listing, which the job cannot do
soundly (unqualified names, ``USE``, ``SHOW DATABASES``). A process per datasource keeps the
catalogs apart by construction, costs a JVM (its heap bounded by ``metastore_heap_mb``) per
datasource that has run a query since the service started, and is started in the background:
the job launched meanwhile waits for it when it first reads its catalog (the Hive client's
connection retries), so a POST never waits for a metastore.

Where each catalog is (under the data directory):

- the datasource ``local``: ``metastore/`` (Derby), ``warehouse/``, ``checkpoints/``, where the
  catalog every local datasource shared before was: nothing moves for it;
- any other local datasource ``<ds>``: ``catalogs/<ds>/metastore``, ``catalogs/<ds>/warehouse``,
  ``catalogs/<ds>/checkpoints``;
- each metastore's log and pid file: ``metastores/<ds>.log`` and ``metastores/<ds>.pid`` (the
  service's; the places above are the job user's, :mod:`async_query.security.job_user`).

A datasource whose ``sparkConf`` names its own metastore (``spark.hadoop.hive.metastore.uris``, a
Glue client factory) or ``spark.sql.catalogImplementation=in-memory`` starts none; one naming its
own ``spark.sql.warehouse.dir`` gets a metastore whose warehouse is there. With the setting
``local_catalog=in-memory`` no metastore runs: each job has its own catalog, forgotten when it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from async_query import datasource_dialect as dialect
from async_query.catalog.bulk import TablesEndpoint
from async_query.datasources import Datasource
from async_query.embedded.metastore import Metastore, MetastoreError
from async_query.security.files import private_dir
from async_query.security.job_user import JobUser, seal_data_dir

log = logging.getLogger(__name__)

#: The datasource whose catalog stays where the catalog shared by every local datasource was.
LEGACY = "local"
#: How long a job's Hive client keeps trying to reach its metastore (still starting, say): tries
#: one second apart.
CONNECT_RETRIES = 120
WAREHOUSE_KEY = "spark.sql.warehouse.dir"
CATALOG_KEY = "spark.sql.catalogImplementation"
#: Keys by which a datasource's Spark conf names a metastore of its own.
OWN_METASTORE_KEYS = ("spark.hadoop.hive.metastore.uris", "spark.hadoop.hive.metastore.client.factory.class")
#: Top-level entries of the data directory that the job user enters: the catalogs' places, the
#: jobs' temporary directories and (by default) their class archive.
JOB_PLACES = frozenset({"metastore", "warehouse", "checkpoints", "catalogs", "tmp", "jvm"})


@dataclass(frozen=True)
class CatalogPlace:
    """Where one local datasource's catalog lives."""

    datasource: str
    #: The metastore's Derby home (its database is ``metastore_db`` in it).
    metastore: Path
    warehouse: Path
    checkpoints: Path


def catalog_settings(warehouse: Path | str, metastore_uri: str = "") -> dict[str, str]:
    """Spark conf of a catalog: the metastore at ``metastore_uri``, or without one Spark's
    in-memory catalog (each job its own, forgotten when it ends)."""
    location = warehouse.resolve().as_uri() if isinstance(warehouse, Path) else warehouse
    conf = {WAREHOUSE_KEY: location}
    if metastore_uri:
        conf.update(
            {
                CATALOG_KEY: "hive",
                "spark.hadoop.hive.metastore.uris": metastore_uri,
                "spark.hadoop.hive.metastore.connect.retries": str(CONNECT_RETRIES),
                "spark.hadoop.hive.metastore.client.connect.retry.delay": "1s",
            }
        )
    else:
        conf[CATALOG_KEY] = "in-memory"
    return conf


class LocalCatalogs:
    """The catalogs of the local datasources of one service (see the module's documentation)."""

    def __init__(
        self,
        data_dir: Path,
        user: JobUser,
        *,
        metastores: bool = True,
        heap_mb: int = 512,
        warmup_tables: int = 0,
        class_archive: Path | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.user = user
        # The job user passes through the data directory to its places, and reaches nothing else.
        seal_data_dir(self.data_dir, user, set(JOB_PLACES))
        #: Whether datasources get a metastore (``local_catalog=metastore``) or in-memory catalogs.
        self.metastores = metastores
        self.heap_mb = heap_mb
        #: Table reads each metastore makes once it listens, to warm its JVM (0: none).
        self.warmup_tables = warmup_tables
        #: Where the metastores' class archive is kept (:mod:`async_query.embedded.archive`).
        self.class_archive = class_archive
        self._running: dict[str, Metastore] = {}
        self._prepared: set[str] = set()
        self._lock = threading.Lock()
        # Metastores are started from one long-lived thread: the kernel stops each when the thread
        # that started it ends (PR_SET_PDEATHSIG), and request threads come and go.
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="metastores")
        self._closed = False

    # -- places ---------------------------------------------------------------------------

    def place(self, datasource: str) -> CatalogPlace:
        if datasource == LEGACY:
            base = self.data_dir
        else:
            base = self.data_dir / "catalogs" / datasource
        return CatalogPlace(datasource, base / "metastore", base / "warehouse", base / "checkpoints")

    def prepared(self, datasource: str) -> CatalogPlace:
        """The datasource's place, its directories made (once per process) and the job user's."""
        place = self.place(datasource)
        with self._lock:
            if datasource not in self._prepared:
                if datasource != LEGACY:
                    self.user.pass_through(self.data_dir / "catalogs")
                    self.user.pass_through(place.warehouse.parent)
                for directory in (place.warehouse, place.checkpoints):
                    self.user.own(directory)
                self._prepared.add(datasource)
        return place

    def warehouse_of(self, datasource: Datasource) -> str:
        """Where the datasource's tables live unless its Spark conf says otherwise (a URI)."""
        return self.place(datasource.name).warehouse.resolve().as_uri()

    def checkpoints_of(self, datasource: Datasource) -> str:
        return str(self.place(datasource.name).checkpoints.resolve())

    # -- the jobs' conf ---------------------------------------------------------------------

    def conf(self, datasource: Datasource) -> dict[str, str]:
        """The Spark conf of the datasource's catalog, for one of its jobs about to be launched;
        its metastore is started (in the background) if it does not run."""
        place = self.prepared(datasource.name)
        own = dialect.allowed_spark_conf(datasource.spark_conf)
        warehouse = own.get(WAREHOUSE_KEY) or place.warehouse.resolve().as_uri()
        if _names_own_metastore(own):
            return {CATALOG_KEY: "hive", WAREHOUSE_KEY: warehouse}
        if not self.metastores or own.get(CATALOG_KEY) == "in-memory":
            return catalog_settings(warehouse)
        return catalog_settings(warehouse, self.metastore(place, warehouse).uri)

    def metastore(self, place: CatalogPlace, warehouse: str | None = None) -> Metastore:
        """The running metastore of ``place``'s datasource, launched (not waited for) if none runs,
        or if the one that ran has exited."""
        with self._lock:
            if self._closed:
                raise MetastoreError("the service is stopping")
            running = self._running.get(place.datasource)
            if running is not None and running.proc.poll() is None:
                return running
            if running is not None:
                log.warning(
                    "the metastore of datasource %s exited with code %s; starting it again",
                    place.datasource,
                    running.proc.poll(),
                )
            location = warehouse or place.warehouse.resolve().as_uri()
            started = self._starter.submit(self._launch, place, location).result()
            self._running[place.datasource] = started
        threading.Thread(target=self._watch, args=(started,), name=f"metastore-{place.datasource}", daemon=True).start()
        return started

    def start(self, datasource: str) -> Metastore:
        """Launch the metastore of ``datasource`` now, without waiting (:meth:`wait_ready`)."""
        return self.metastore(self.prepared(datasource))

    def wait_ready(self, datasource: str) -> None:
        """Return once the datasource's metastore accepts connections (raises if it cannot)."""
        with self._lock:
            running = self._running.get(datasource)
        if running is None:
            raise MetastoreError(f"no metastore was started for datasource {datasource}")
        running.wait_ready()

    def _launch(self, place: CatalogPlace, warehouse: str) -> Metastore:
        return Metastore.launch(
            place.metastore,
            warehouse,
            self.heap_mb,
            user=self.user,
            files=self._files(place.datasource),
            class_archive=self.class_archive,
        )

    def _files(self, datasource: str) -> Path:
        """The service's directory of the metastores' logs and pid files (one of each per
        datasource): a metastore's own directory is the job user's."""
        private_dir(self.data_dir / "metastores")
        return private_dir(self.data_dir / "metastores" / datasource)

    def _watch(self, metastore: Metastore) -> None:
        try:
            metastore.wait_ready()
        except MetastoreError as exc:
            log.error("%s", exc)
            return
        if self.warmup_tables > 0:
            began = time.monotonic()
            fetched = metastore.warm_up(self.warmup_tables)
            log.info(
                "metastore at %s warmed up: %d table reads in %.1f s", metastore.uri, fetched, time.monotonic() - began
            )

    # -- health and shutdown ----------------------------------------------------------------

    def problem(self) -> str | None:
        """The health check: what is wrong with a metastore that was started, if anything."""
        with self._lock:
            running = dict(self._running)
        for datasource, metastore in sorted(running.items()):
            problem = metastore.problem()
            if problem and metastore.proc.poll() is not None:
                return f"datasource {datasource}: {problem}"
            if problem and metastore.started_s:
                return f"datasource {datasource}: {problem}"
        return None

    def tables_endpoint(self, uri: str) -> TablesEndpoint | None:
        """Where the running metastore at ``uri`` answers bulk reads of tables (None: no such
        metastore here, or it does not)."""
        with self._lock:
            running = list(self._running.values())
        return next((m.tables for m in running if m.uri == uri and m.proc.poll() is None), None)

    def owner_of(self, uri: str) -> int | None:
        """The uid the running metastore at ``uri`` listens as (None: no such metastore here)."""
        with self._lock:
            running = list(self._running.values())
        return next((m.owner for m in running if m.uri == uri and m.proc.poll() is None), None)

    def running(self) -> Mapping[str, Metastore]:
        with self._lock:
            return dict(self._running)

    def close(self) -> None:
        """Stop every metastore (idempotent)."""
        with self._lock:
            self._closed = True
            running = list(self._running.values())
            self._running.clear()
        for metastore in running:
            if metastore.proc.poll() is None:
                metastore.proc.terminate()
        for metastore in running:
            metastore.close()
        self._starter.shutdown(wait=False)


def _names_own_metastore(conf: Mapping[str, str]) -> bool:
    return any(conf.get(key) for key in OWN_METASTORE_KEYS)
