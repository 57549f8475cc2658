"""The catalog read model: each datasource's catalog, fetched at the granularity the browse
statements ask for, kept in a cache bounded in bytes, and kept true by invalidation
(``docs/catalog.md``).

What is cached, per datasource: its database names, each database's table names, and each table
(the metastore's object). SHOW TABLE EXTENDED over a database fetches the tables it does not hold
in batched calls (at once, where the reader can); DESC fetches one table.

How it stays true:

- **Changes made through the service** are in the datasource's catalog change log (an index
  document the jobs append to before a changing statement says ``success``,
  :mod:`query_core.store.catalog_changes`). Every answer reads that log first (one real-time read
  by id) and drops exactly what the new entries name: a table and its database's table list; a
  database, its table list and every table of it, and the database list. A reader that missed
  entries (the log keeps the last few hundred) drops the datasource's whole catalog.
- **Changes made behind the service's back** (another Spark or Hive client on the same catalog):
  where the catalog keeps a log of its own (a Hive Metastore with ``DbNotificationListener``), it
  is followed the same way before every answer; otherwise an entry is served at most
  ``catalog_staleness_s`` after it was fetched, then fetched again.

A catalog that cannot be reached, a database or table that does not exist (Spark's error is the
answer), or a table the rules cannot print exactly: the read model answers None and the statement
goes to Spark as before.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from async_query.caches import Cache
from async_query.catalog.locate import CatalogLocation, catalog_of
from async_query.catalog.readers import (
    CONNECTIONS,
    CatalogReader,
    CatalogUnavailableError,
    Change,
    GlueReader,
    HiveMetastoreReader,
    glue_client,
)
from async_query.catalog.statements import Browse, Describe, ShowFlintIndex, ShowSchemas, ShowTables
from async_query.catalog.tables import RawTable, UnrepresentableError, describe_rows, information
from async_query.datasources import Datasource
from query_core.errors import AsyncQueryError
from query_core.flint import listing
from query_core.flint.index_meta import IndexMeta
from query_core.flint.naming import latest_id
from query_core.models import FlintIndexStateDoc
from query_core.store import Store

log = logging.getLogger(__name__)

Columns = list[tuple[str, str]]


@dataclass(frozen=True)
class Answer:
    """A browse statement's result: its columns (name, Spark type name) and rows."""

    columns: Columns
    rows: list[tuple[Any, ...]]


_NAMESPACES: Columns = [("namespace", "string")]
_TABLES: Columns = [("namespace", "string"), ("tableName", "string"), ("isTemporary", "boolean")]
_EXTENDED: Columns = [*_TABLES, ("information", "string")]
_DESCRIBE: Columns = [("col_name", "string"), ("data_type", "string"), ("comment", "string")]
#: Spark's global temporary views live in this database; it is not the metastore's.
GLOBAL_TEMP = "global_temp"


def default_reader(location: CatalogLocation, timeout_s: float, connections: int = CONNECTIONS) -> CatalogReader:
    if location.kind == "hive":
        return HiveMetastoreReader(location.address, timeout_s, connections, bulk=location.bulk, owner=location.owner)
    return GlueReader(glue_client(location.address, location.role_arn))


@dataclass
class _Catalog:
    """The read model's state of one datasource's catalog."""

    location: CatalogLocation
    reader: CatalogReader
    #: Bumped to forget everything (keys carry it), per datasource and per database.
    generation: int = 0
    databases: dict[str, int] = field(default_factory=dict)
    #: The last entry of the service's change log applied, and the catalog's own log position.
    log_version: int | None = None
    position: int | None = None
    #: Bumped by every invalidation: a background refresh whose fetch overlapped one is dropped.
    epoch: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Asked:
    """A database listing (SHOW TABLE(S) [EXTENDED]) someone asked for, kept warm for a while."""

    datasource: Datasource
    database: str
    #: When it was last asked for (the read model's clock).
    at: float
    #: How long its last background refresh took (seconds; 0: none yet).
    refresh_s: float = 0.0
    #: After a failed refresh (the catalog out of reach), no other before this time.
    not_before: float = 0.0


class CatalogReadModel:
    """Answers the browse statements of every datasource whose catalog it can read."""

    def __init__(
        self,
        store: Store,
        launcher_of: Callable[[Datasource], Any],
        *,
        staleness_s: float = 30.0,
        max_bytes: int = 64 * 1024 * 1024,
        timeout_s: float = 2.0,
        connections: int = CONNECTIONS,
        reader_for: Callable[[CatalogLocation, float], CatalogReader] | None = None,
        locate: Callable[[Datasource, Any], CatalogLocation | None] = catalog_of,
        clock: Callable[[], float] = time.monotonic,
        keep_warm_s: float = 0.0,
    ) -> None:
        self.store = store
        self.launcher_of = launcher_of
        self.locate = locate
        self.staleness_s = staleness_s
        self.timeout_s = timeout_s
        self.reader_for = reader_for or (lambda location, timeout_s: default_reader(location, timeout_s, connections))
        self.clock = clock
        #: (fetched at, value) by key; values weigh about their bytes.
        self.cache: Cache[tuple[Any, ...], tuple[float, Any]] = Cache(max_bytes, sizeof=_weight)
        self._catalogs: dict[str, _Catalog] = {}
        self._lock = threading.Lock()
        self._generations = itertools.count(1)
        #: Listings asked for within ``keep_warm_s`` are refreshed in the background before they
        #: expire (:meth:`due`, :meth:`refresh`; 0: never).
        self.keep_warm_s = keep_warm_s
        self._asked: dict[tuple[str, str], Asked] = {}

    # -- answers ----------------------------------------------------------------------------

    def answer(self, datasource: Datasource, browse: Browse) -> Answer | None:
        """The rows Spark would return for ``browse`` on ``datasource``'s catalog, or None when
        the read model cannot tell them (the statement then goes to Spark)."""
        try:
            if isinstance(browse, ShowFlintIndex):
                return self._flint_indexes(datasource, browse)
            catalog = self._catalog(datasource)
            if catalog is None:
                return None
            with catalog.lock:
                self._sync(datasource.name, catalog)
                answered = self._answer(datasource.name, catalog, browse)
            if answered is not None and isinstance(browse, ShowTables) and self.keep_warm_s > 0:
                self._note_asked(datasource, browse.database)
            return answered
        except (CatalogUnavailableError, AsyncQueryError) as exc:
            log.info("catalog of %s not read (%s); the statement goes to Spark", datasource.name, exc)
        except (UnrepresentableError, LookupError) as exc:
            log.debug("%s on %s left to Spark: %s", browse, datasource.name, exc)
        return None

    def table_location(self, datasource: Datasource, table: str) -> str | None:
        """Where a table's files are (its location URI, as Spark reads it), from the same cache
        as the browse answers; None when the model cannot tell (no such table, a view, a catalog
        it does not read). ``table`` is ``catalog.database.name`` (the catalog is the datasource)."""
        parts = table.split(".")
        if len(parts) != 3:
            return None
        try:
            catalog = self._catalog(datasource)
            if catalog is None:
                return None
            with catalog.lock:
                self._sync(datasource.name, catalog)
                found = self._tables(datasource.name, catalog, parts[1], [parts[2]])
            return found[0].spark.location if found else None
        except (CatalogUnavailableError, AsyncQueryError, UnrepresentableError, LookupError) as exc:
            log.info("location of %s not read: %s", table, exc)
            return None

    def _answer(self, ds: str, catalog: _Catalog, browse: Browse) -> Answer | None:
        if isinstance(browse, ShowSchemas):
            return Answer(_NAMESPACES, [(name,) for name in self._databases(ds, catalog)])
        assert isinstance(browse, ShowTables | Describe)
        if browse.database == GLOBAL_TEMP:
            return None
        if isinstance(browse, ShowTables):
            names = self._table_names(ds, catalog, browse.database)
            if names is None:
                return None
            if not browse.extended:
                return Answer(_TABLES, [(browse.database, name, False) for name in names])
            tables = self._tables(ds, catalog, browse.database, names)
            return Answer(_EXTENDED, [(browse.database, t.name, False, information(t.spark)) for t in tables])
        found = self._tables(ds, catalog, browse.database, [browse.table])
        if not found:
            return None
        return Answer(_DESCRIBE, list(describe_rows(found[0].spark)))

    # -- the catalogs -----------------------------------------------------------------------

    def _catalog(self, datasource: Datasource) -> _Catalog | None:
        location = self.locate(datasource, self.launcher_of(datasource))
        if location is None:
            return None
        with self._lock:
            catalog = self._catalogs.get(datasource.name)
            if catalog is None or catalog.location != location:
                if catalog is not None:
                    catalog.reader.close()
                catalog = _Catalog(location, self.reader_for(location, self.timeout_s), next(self._generations))
                self._catalogs[datasource.name] = catalog
            return catalog

    def _key(self, ds: str, catalog: _Catalog, *parts: str) -> tuple[Any, ...]:
        database = catalog.databases.get(parts[1], 0) if len(parts) > 1 else 0
        return (ds, catalog.generation, database, *parts)

    def _cached(self, key: tuple[Any, ...], fetch: Callable[[], Any], follows: bool) -> Any:
        item = self.cache.get(key)
        now = self.clock()
        if item is not None and (follows or now - item[0] <= self.staleness_s):
            return item[1]
        value = fetch()
        self.cache.put(key, (now, value))
        return value

    def _databases(self, ds: str, catalog: _Catalog) -> list[str]:
        key = self._key(ds, catalog, "databases")
        return list(self._cached(key, catalog.reader.databases, catalog.reader.follows_changes()))

    def _table_names(self, ds: str, catalog: _Catalog, database: str) -> list[str] | None:
        key = self._key(ds, catalog, "tables", database)
        names = self._cached(key, lambda: catalog.reader.table_names(database), catalog.reader.follows_changes())
        return list(names) if names is not None else None

    def _tables(self, ds: str, catalog: _Catalog, database: str, names: list[str]) -> list[RawTable]:
        """The named tables, in order, fetching the ones not held (or too old) in batched calls (the
        reader may make them at once); each entry counts its age from when its fetch began."""
        follows = catalog.reader.follows_changes()
        now = self.clock()
        held: dict[str, RawTable | None] = {}
        for name in names:
            item = self.cache.get(self._key(ds, catalog, "table", database, name))
            if item is not None and (follows or now - item[0] <= self.staleness_s):
                held[name] = item[1]
        missing = [name for name in names if name not in held]
        if missing:
            fetched = {t.name.lower(): t for t in catalog.reader.tables(database, missing)}
            for name in missing:
                held[name] = fetched.get(name)
                self.cache.put(self._key(ds, catalog, "table", database, name), (now, held[name]))
        return [t for t in (held[name] for name in names) if t is not None]

    # -- keeping asked listings warm ----------------------------------------------------------

    def _note_asked(self, datasource: Datasource, database: str) -> None:
        with self._lock:
            asked = self._asked.get((datasource.name, database))
            if asked is None:
                self._asked[(datasource.name, database)] = Asked(datasource, database, self.clock())
            else:
                asked.datasource, asked.at = datasource, self.clock()

    def due(self) -> list[Asked]:
        """The listings asked for within ``keep_warm_s`` whose oldest cached part expires soon:
        within twice the last refresh's time (at least 5 s, at most half the staleness bound).
        Listings not asked for that long are forgotten; a catalog whose own log is followed never
        expires, so none of its listings is ever due."""
        now = self.clock()
        with self._lock:
            for key in [key for key, asked in self._asked.items() if now - asked.at > self.keep_warm_s]:
                del self._asked[key]
            asked_now = list(self._asked.values())
        due = []
        for asked in asked_now:
            catalog = self._catalogs.get(asked.datasource.name)
            if catalog is None or now < asked.not_before or catalog.reader.follows_changes():
                continue
            lead = min(self.staleness_s / 2, max(5.0, 2 * asked.refresh_s))
            oldest = self._oldest(asked.datasource.name, catalog, asked.database)
            if oldest is None or now - oldest >= self.staleness_s - lead:
                due.append(asked)
        return due

    def _oldest(self, ds: str, catalog: _Catalog, database: str) -> float | None:
        """When the oldest cached part of a database's listing was fetched (None: not all held)."""
        names = self.cache.peek(self._key(ds, catalog, "tables", database))
        if names is None:
            return None
        oldest = names[0]
        for name in names[1] or []:
            item = self.cache.peek(self._key(ds, catalog, "table", database, name))
            if item is None:
                return None
            oldest = min(oldest, item[0])
        return oldest

    def refresh(self, asked: Asked) -> bool:
        """Fetch a listing again, off any request (its table names and every table, as a cold
        SHOW TABLE EXTENDED does), and cache it as fetched when the fetch began. Dropped (False)
        when an invalidation of the catalog came in meanwhile: what was fetched may predate it."""
        ds, database = asked.datasource.name, asked.database
        try:
            catalog = self._catalog(asked.datasource)
            if catalog is None:
                return False
            began = self.clock()
            with catalog.lock:
                self._sync(ds, catalog)
                epoch = catalog.epoch
            names = catalog.reader.table_names(database)
            fetched = {t.name.lower(): t for t in catalog.reader.tables(database, names)} if names else {}
            with catalog.lock:
                self._sync(ds, catalog)
                if catalog.epoch != epoch:
                    return False
                self.cache.put(self._key(ds, catalog, "tables", database), (began, names))
                for name in names or []:
                    self.cache.put(self._key(ds, catalog, "table", database, name), (began, fetched.get(name)))
        except (CatalogUnavailableError, AsyncQueryError, LookupError) as exc:
            log.info("listing %s.%s not refreshed (%s)", ds, database, exc)
            asked.not_before = self.clock() + self.staleness_s / 3
            return False
        asked.refresh_s = self.clock() - began
        return True

    # -- invalidation -----------------------------------------------------------------------

    def _sync(self, ds: str, catalog: _Catalog) -> None:
        """Apply the service's change log, then the catalog's own log where it keeps one."""
        found = self.store.catalog_changes.get(ds)
        version = found[0].version if found is not None else 0
        if catalog.log_version is None:
            catalog.log_version = version
        elif version != catalog.log_version:
            entries = found[0].since(catalog.log_version) if found is not None else None
            if entries is None:
                self.forget(ds)
            else:
                for entry in entries:
                    for recorded in entry.changes:
                        table = recorded.table.lower() if recorded.table else None
                        self.invalidate(ds, Change(recorded.database.lower(), table))
            catalog.log_version = version
        if catalog.reader.follows_changes():
            changes, catalog.position = catalog.reader.changes_since(catalog.position)
            for change in changes:
                self.invalidate(ds, change)

    def invalidate(self, ds: str, change: Change) -> None:
        """Forget what ``change`` touched: a table and its database's table list; a database, its
        tables and the database list."""
        catalog = self._catalogs.get(ds)
        if catalog is None:
            return
        catalog.epoch += 1
        if change.table is not None:
            self.cache.pop(self._key(ds, catalog, "table", change.database, change.table))
            self.cache.pop(self._key(ds, catalog, "tables", change.database))
            return
        catalog.databases[change.database] = catalog.databases.get(change.database, 0) + 1
        self.cache.pop(self._key(ds, catalog, "databases"))

    def forget(self, ds: str) -> None:
        """Forget all of a datasource's catalog."""
        with self._lock:
            catalog = self._catalogs.get(ds)
            if catalog is not None:
                catalog.epoch += 1
                catalog.generation = next(self._generations)
                catalog.databases.clear()

    # -- Flint indexes ----------------------------------------------------------------------

    def _flint_indexes(self, datasource: Datasource, browse: ShowFlintIndex) -> Answer | None:
        """SHOW FLINT INDEX from the index cluster itself (the Flint indexes' metadata and state
        documents are the truth, read live), when the datasource's jobs use this cluster."""
        if datasource.glue_backed and self.launcher_of(datasource).glue_region:
            return None  # its jobs keep their Flint indexes in the datasource's own index store
        columns = listing.show_flint_index_columns(browse.extended)
        types = [(c, "boolean" if c in listing.BOOLEAN_COLUMNS else "string") for c in columns]
        listed = listing.metas_in(self.store.admin, datasource.name, browse.database)

        def state_of(meta: IndexMeta) -> FlintIndexStateDoc | None:
            found = self.store.index_states.get(datasource.name, latest_id(meta.index_name))
            return found.doc if found is not None else None

        schedules = self.store.schedules.of_many([m.index_name for m in listed]) if browse.extended else {}
        return Answer(types, listing.show_flint_index_rows(listed, state_of, browse.extended, schedules))

    def flint_indexes(self, datasource: Datasource) -> list[dict[str, Any]] | None:
        """The datasource's Flint indexes with what the console shows of each (``docs/console.md``):
        kind, table, state, refresh mode and interval, last refresh, error, and whatever else the
        state document holds (a schedule, where there is one); None where SHOW FLINT INDEX is
        left to the job (:meth:`_flint_indexes`)."""
        if datasource.glue_backed and self.launcher_of(datasource).glue_region:
            return None
        found = []
        for meta in listing.metas_in(self.store.admin, datasource.name, None):
            read = self.store.index_states.get(datasource.name, latest_id(meta.index_name))
            found.append(_index_view(meta, read.doc if read is not None else None))
        return found

    def close(self) -> None:
        with self._lock:
            for catalog in self._catalogs.values():
                catalog.reader.close()
            self._catalogs.clear()


def _weight(item: tuple[float, Any]) -> int:
    value = item[1]
    if isinstance(value, RawTable):
        return value.weight()
    if isinstance(value, list):
        return 64 + sum(len(v) + 50 for v in value)
    return 64


def _index_view(meta: IndexMeta, state: FlintIndexStateDoc | None) -> dict[str, Any]:
    database, table, name = meta.listed_names()
    extra = state.model_extra if state is not None and state.model_extra else {}
    return {
        "indexName": meta.index_name,
        "kind": meta.kind.value,
        "database": database,
        "table": table,
        "name": name,
        "state": state.state.value if state is not None else "unavailable",
        "refreshMode": "auto" if meta.auto_refresh else "manual",
        "incremental": meta.incremental_refresh,
        "refreshInterval": meta.options.get("refresh_interval"),
        "schedulerMode": meta.options.get("scheduler_mode"),
        "lastRefreshStart": (state.last_refresh_start_time or None) if state is not None else None,
        "lastRefreshComplete": (state.last_refresh_complete_time or None) if state is not None else None,
        "error": (state.error or None) if state is not None else None,
        "more": {k: v for k, v in extra.items() if isinstance(v, str | int | float | bool)},
    }
