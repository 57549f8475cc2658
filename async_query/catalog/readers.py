"""Readers of the catalogs a datasource's jobs use, at the granularity the browse statements ask:
the database names, one database's table names, some tables of one database. Each returns the
tables in the metastore's own shape (:class:`~async_query.catalog.tables.RawTable`).

- :class:`HiveMetastoreReader`: a Hive Metastore over its Thrift API (the embedded default's, or
  any a datasource names), with the generated bindings ``pymetastore`` ships, on Thrift's C
  accelerated binary protocol; a small bounded pool of connections per reader (the batches of one
  listing fetched concurrently, each connection used by one thread at a time), each call bounded
  in time.
  Where the metastore's notification log is kept (its ``DbNotificationListener`` is configured),
  :meth:`HiveMetastoreReader.changes_since` follows it.
- :class:`GlueReader`: the AWS Glue Data Catalog through boto3, with the datasource's role
  (``glue.auth.role_arn``) assumed as its jobs assume it, and the tables turned into the Hive shape
  as the Glue Data Catalog's Hive client turns them (so that one set of rules prints both).

Every failure to reach or read a catalog is a :class:`CatalogUnavailableError`: the statement then goes
to Spark, which would report the problem its own way.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from async_query.catalog.bulk import BulkReadError, TablesEndpoint, read_tables
from async_query.catalog.tables import Column, RawTable, UnrepresentableError
from query_core.peer import check_peer

log = logging.getLogger(__name__)

#: The Hive table types Spark reads (anything else is left to Spark).
_HIVE_TYPES = ("MANAGED_TABLE", "EXTERNAL_TABLE", "VIRTUAL_VIEW")
#: How many tables one metastore call fetches.
BATCH = 100
#: How many connections (and fetching threads) a metastore reader uses at most. One: the embedded
#: Derby-backed metastore answers concurrent batches slower in all than one after another
#: (bench/README.md); a metastore on a server of its own may gain from more.
CONNECTIONS = 1
_LISTENER = "DbNotificationListener"
#: A bulk read's time limit: it answers a whole database at once (2,000 tables in a fraction of a second).
BULK_TIMEOUT_S = 10.0


class CatalogUnavailableError(Exception):
    """The catalog could not be reached or read."""


@dataclass(frozen=True)
class Change:
    """A change the catalog's own log reports: a database, or one table of it."""

    database: str
    table: str | None = None


class CatalogReader(Protocol):
    """What the read model asks of a catalog."""

    def databases(self) -> list[str]: ...

    def table_names(self, database: str) -> list[str] | None:
        """The database's table names, sorted; None when there is no such database."""
        ...

    def tables(self, database: str, names: Sequence[str]) -> list[RawTable]:
        """The named tables that exist (in no particular order)."""
        ...

    def follows_changes(self) -> bool:
        """Whether :meth:`changes_since` reports every change (else the read model bounds staleness)."""
        ...

    def changes_since(self, position: int | None) -> tuple[list[Change], int]:
        """Changes after ``position`` (None: only the current position), and the new position."""
        ...

    def close(self) -> None: ...


# -- the Hive Metastore ---------------------------------------------------------------------------


class HiveMetastoreReader:
    """A Hive Metastore at ``thrift://host:port`` (the first of a comma-separated list).

    Calls go over a small pool of Thrift connections (at most ``connections``, opened on demand,
    each used by one thread at a time, dropped on error); :meth:`tables` fetches its batches on
    that many threads at once (the metastore answers each connection on a thread of its own, and
    nearly all of a batch's time is the metastore's). Every call is bounded by ``timeout_s``, the wait for
    a free connection included."""

    def __init__(
        self,
        uri: str,
        timeout_s: float = 2.0,
        connections: int = CONNECTIONS,
        bulk: TablesEndpoint | None = None,
        owner: int | None = None,
    ) -> None:
        first = uri.split(",")[0].strip()
        parts = urlsplit(first)
        if parts.scheme != "thrift" or not parts.hostname:
            raise CatalogUnavailableError(f"not a metastore address: {first!r}")
        self.uri = first
        self.host = parts.hostname
        self.port = parts.port or 9083
        self.timeout_s = timeout_s
        self.connections = max(1, connections)
        self._lock = threading.Condition()
        #: Idle connections as (client, transport); ``_open`` counts those idle and in use.
        self._idle: list[tuple[Any, Any]] = []
        self._open = 0
        self._closed = False
        self._fetchers: ThreadPoolExecutor | None = None
        self._follows: bool | None = None
        #: Where an embedded metastore answers bulk reads of tables (:mod:`.bulk`; None: Thrift only).
        self.bulk = bulk
        #: The uid the metastore's socket must belong to, checked before anything is sent (an
        #: embedded metastore's user; None: not checked). docs/security.md, "What listens where".
        self.owner = owner if owner is not None else (bulk.owner if bulk is not None else None)

    def _connect(self) -> tuple[Any, Any]:
        from pymetastore.hive_metastore import ThriftHiveMetastore
        from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
        from thrift.transport import TSocket, TTransport

        socket = TSocket.TSocket(self.host, self.port)
        socket.setTimeout(int(self.timeout_s * 1000))
        transport = TTransport.TBufferedTransport(socket)
        transport.open()
        try:
            check_peer(socket.handle, self.owner)
        except OSError:
            transport.close()
            raise
        return ThriftHiveMetastore.Client(TBinaryProtocolAccelerated(transport)), transport

    def _take(self) -> tuple[Any, Any] | None:
        """An idle connection, or None when the caller may open one; waits for one to be given
        back while ``connections`` are in use, at most ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            while True:
                if self._closed:
                    raise CatalogUnavailableError(f"metastore {self.uri}: the reader is closed")
                if self._idle:
                    return self._idle.pop()
                if self._open < self.connections:
                    self._open += 1
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CatalogUnavailableError(f"metastore {self.uri}: no connection free within {self.timeout_s:g} s")
                self._lock.wait(left)

    def _give_back(self, connection: tuple[Any, Any] | None) -> None:
        """Return a connection to the pool (None: it was dropped, its place is free again)."""
        with self._lock:
            if connection is not None and not self._closed:
                self._idle.append(connection)
            else:
                self._open -= 1
                if connection is not None:
                    _close_transport(connection[1])
            self._lock.notify()

    def _call(self, name: str, *args: Any) -> Any:
        """One metastore call on a connection of the pool (opened on demand, dropped on error)."""
        from thrift.Thrift import TException

        connection = self._take()
        try:
            if connection is None:
                connection = self._connect()
            result = getattr(connection[0], name)(*args)
        except (TException, OSError, EOFError) as exc:
            if connection is not None:
                _close_transport(connection[1])
            self._give_back(None)
            if type(exc).__name__ in ("NoSuchObjectException", "UnknownDBException"):
                raise LookupError(str(exc)) from exc
            raise CatalogUnavailableError(f"metastore {self.uri}: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            if connection is not None:
                _close_transport(connection[1])
            self._give_back(None)
            raise
        self._give_back(connection)
        return result

    def databases(self) -> list[str]:
        return sorted(self._call("get_all_databases"))

    def table_names(self, database: str) -> list[str] | None:
        try:
            self._call("get_database", database)
        except LookupError:
            return None
        return sorted(self._call("get_all_tables", database))

    def tables(self, database: str, names: Sequence[str]) -> list[RawTable]:
        if self.bulk is not None:
            try:
                found = read_tables(self.bulk, database, names, max(self.timeout_s, BULK_TIMEOUT_S))
            except BulkReadError as exc:
                log.warning("metastore %s: bulk read of %s failed (%s); reading through Thrift", self.uri, database, exc)
            else:
                for table in found:
                    _read_as_spark(table)
                return found
        batches = [list(names[start : start + BATCH]) for start in range(0, len(names), BATCH)]
        if len(batches) <= 1 or self.connections == 1:
            return [t for batch in batches for t in self._batch(database, batch)]
        with self._lock:
            if self._closed:
                raise CatalogUnavailableError(f"metastore {self.uri}: the reader is closed")
            if self._fetchers is None:
                self._fetchers = ThreadPoolExecutor(self.connections, thread_name_prefix="metastore-fetch")
            fetchers = self._fetchers
        try:
            futures = [fetchers.submit(self._batch, database, batch) for batch in batches]
        except RuntimeError as exc:  # closed meanwhile
            raise CatalogUnavailableError(f"metastore {self.uri}: the reader is closed") from exc
        return [t for future in futures for t in future.result()]

    def _batch(self, database: str, names: list[str]) -> list[RawTable]:
        """One batched call; the database gone meanwhile reads as no tables."""
        try:
            batch = self._call("get_table_objects_by_name", database, names)
        except LookupError:
            return []
        found = [hive_table(t) for t in batch if t is not None]
        for table in found:
            _read_as_spark(table)
        return found

    def follows_changes(self) -> bool:
        """True when the metastore keeps its notification log (``DbNotificationListener``
        among its listeners); the jars PySpark ships do not have it, so the embedded default's
        metastore never does."""
        if self._follows is None:
            listeners = ""
            for key in ("hive.metastore.transactional.event.listeners", "hive.metastore.event.listeners"):
                try:
                    listeners += str(self._call("get_config_value", key, "") or "")
                except LookupError:
                    continue
            self._follows = _LISTENER in listeners
        return self._follows

    def changes_since(self, position: int | None) -> tuple[list[Change], int]:
        from pymetastore.hive_metastore.ttypes import NotificationEventRequest

        if position is None:
            return [], int(self._call("get_current_notificationEventId").eventId)
        changes: list[Change] = []
        while True:
            response = self._call("get_next_notification", NotificationEventRequest(lastEvent=position, maxEvents=1000))
            events = response.events or []
            for event in events:
                position = max(position, int(event.eventId))
                if event.dbName:
                    changes.append(Change(event.dbName.lower(), event.tableName.lower() if event.tableName else None))
            if len(events) < 1000:
                return changes, position

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            fetchers, self._fetchers = self._fetchers, None
            self._lock.notify_all()
        for _, transport in idle:
            _close_transport(transport)
        if fetchers is not None:
            fetchers.shutdown(wait=False, cancel_futures=True)


def _read_as_spark(table: RawTable) -> None:
    """Work out how Spark reads ``table`` while other batches are still on their way (what
    cannot be read is left for the read model to find)."""
    try:
        table.spark  # noqa: B018 - computed once and kept on the table
    except UnrepresentableError:
        pass


def _close_transport(transport: Any) -> None:
    try:
        transport.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass


def hive_table(table: Any) -> RawTable:
    """A Thrift ``Table`` in the read model's shape."""
    sd = table.sd
    serde = sd.serdeInfo if sd is not None else None
    return RawTable(
        database=table.dbName,
        name=table.tableName,
        table_type=table.tableType or "",
        owner=table.owner or "",
        create_time=int(table.createTime or 0),
        last_access_time=int(table.lastAccessTime or 0),
        parameters=dict(table.parameters or {}),
        columns=tuple(Column(c.name, c.type, c.comment) for c in ((sd.cols if sd else None) or [])),
        partition_keys=tuple(Column(c.name, c.type, c.comment) for c in (table.partitionKeys or [])),
        location=sd.location if sd else None,
        input_format=sd.inputFormat if sd else None,
        output_format=sd.outputFormat if sd else None,
        compressed=bool(sd.compressed) if sd else False,
        num_buckets=int(sd.numBuckets) if sd and sd.numBuckets is not None else -1,
        serde_library=serde.serializationLib if serde else None,
        serde_parameters=dict((serde.parameters if serde else None) or {}),
        view_original_text=table.viewOriginalText,
        view_expanded_text=table.viewExpandedText,
    )


# -- AWS Glue -------------------------------------------------------------------------------------


class GlueReader:
    """The Glue Data Catalog of ``region`` (and ``catalog_id``, an account), read with ``client``
    (a boto3 Glue client, made with the datasource's role by :func:`glue_client`)."""

    def __init__(self, client: Any, catalog_id: str = "") -> None:
        self.client = client
        self.catalog_id = catalog_id

    def _call(self, name: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        if self.catalog_id:
            kwargs["CatalogId"] = self.catalog_id
        try:
            return getattr(self.client, name)(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
                raise LookupError(str(exc)) from exc
            raise CatalogUnavailableError(f"glue {name}: {exc}") from exc
        except BotoCoreError as exc:
            raise CatalogUnavailableError(f"glue {name}: {exc}") from exc

    def _pages(self, name: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = self._call(name, **kwargs, **({"NextToken": token} if token else {}))
            items += page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return items

    def databases(self) -> list[str]:
        return sorted(d["Name"].lower() for d in self._pages("get_databases", "DatabaseList"))

    def table_names(self, database: str) -> list[str] | None:
        try:
            self._call("get_database", Name=database)
            return sorted(t["Name"].lower() for t in self._pages("get_tables", "TableList", DatabaseName=database))
        except LookupError:
            return None

    def tables(self, database: str, names: Sequence[str]) -> list[RawTable]:
        wanted = set(names)
        if len(wanted) > 1:
            try:
                listed = self._pages("get_tables", "TableList", DatabaseName=database)
            except LookupError:
                return []
            return [glue_table(t, database) for t in listed if t["Name"].lower() in wanted]
        found = []
        for name in wanted:
            try:
                found.append(glue_table(self._call("get_table", DatabaseName=database, Name=name)["Table"], database))
            except LookupError:
                continue
        return found

    def follows_changes(self) -> bool:
        return False

    def changes_since(self, position: int | None) -> tuple[list[Change], int]:
        return [], 0

    def close(self) -> None:
        """Nothing held: boto3 clients pool their own connections."""


def _seconds(value: Any) -> int:
    if isinstance(value, dt.datetime):
        return int(value.timestamp())
    return int(value or 0)


def _glue_columns(columns: list[dict[str, Any]] | None) -> tuple[Column, ...]:
    return tuple(Column(c["Name"], c.get("Type", ""), c.get("Comment")) for c in columns or [])


def glue_table(table: dict[str, Any], database: str) -> RawTable:
    """A Glue ``Table`` as the Glue Data Catalog's Hive client gives it to Spark."""
    sd = table.get("StorageDescriptor") or {}
    serde = sd.get("SerdeInfo") or {}
    return RawTable(
        database=database,
        name=table["Name"].lower(),
        table_type=table.get("TableType") or "",
        owner=table.get("Owner") or "",
        create_time=_seconds(table.get("CreateTime")),
        last_access_time=_seconds(table.get("LastAccessTime")),
        parameters=dict(table.get("Parameters") or {}),
        columns=_glue_columns(sd.get("Columns")),
        partition_keys=_glue_columns(table.get("PartitionKeys")),
        location=sd.get("Location"),
        input_format=sd.get("InputFormat"),
        output_format=sd.get("OutputFormat"),
        compressed=bool(sd.get("Compressed", False)),
        num_buckets=int(sd.get("NumberOfBuckets", -1)),
        serde_library=serde.get("SerializationLibrary"),
        serde_parameters=dict(serde.get("Parameters") or {}),
        view_original_text=table.get("ViewOriginalText"),
        view_expanded_text=table.get("ViewExpandedText"),
    )


def glue_client(region: str, role_arn: str, session_name: str = "async-query-catalog") -> Any:
    """A Glue client of ``region`` acting as ``role_arn`` (assumed through STS, refreshed as it
    expires), as the datasource's jobs read the catalog."""
    import boto3
    from botocore.credentials import RefreshableCredentials
    from botocore.session import get_session

    sts = boto3.client("sts", region_name=region)

    def fetch() -> dict[str, Any]:
        creds = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name)["Credentials"]
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": creds["Expiration"].isoformat(),
        }

    session = get_session()
    session._credentials = RefreshableCredentials.create_from_metadata(  # type: ignore[attr-defined]
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    return boto3.Session(botocore_session=session, region_name=region).client("glue")
