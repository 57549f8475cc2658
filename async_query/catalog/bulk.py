"""Bulk reads of a database's tables from an embedded metastore (docs/catalog.md, "The metastore's
bulk reads"): the client of ``async_query/embedded/MetastoreTables.java``.

Hive's Thrift call turns each table into its Thrift form one at a time, about 1 ms of metastore CPU
a table; the embedded metastore also answers on a loopback port of its own with a database's tables
read in five SQL queries. One request is one line of JSON (the token, the database, the names; no
names: all), one reply is one JSON document; the connection then closes. The token is sent only
once the socket at the other end is known to be the metastore's user's (another local user may
have bound the port first: docs/security.md, "What listens where").
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from async_query.catalog.tables import Column, RawTable
from query_core.peer import check_peer

#: The largest reply read (a database's tables, most of it their Spark schemas).
MAX_REPLY_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class TablesEndpoint:
    """Where a metastore answers bulk reads of a database's tables, the token it wants, and the
    uid its socket must belong to (None: not checked)."""

    port: int
    token: str = field(repr=False)
    host: str = "127.0.0.1"
    owner: int | None = None


class BulkReadError(Exception):
    """The bulk read failed (the caller reads through Thrift instead)."""


def read_tables(
    endpoint: TablesEndpoint, database: str, names: Sequence[str] | None, timeout_s: float
) -> list[RawTable]:
    """The tables ``names`` (None: all) of ``database``; none when the database does not exist."""
    request = {"token": endpoint.token, "database": database}
    if names is not None:
        request["names"] = list(names)  # type: ignore[assignment]
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            check_peer(conn, endpoint.owner)
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = _read_all(conn)
    except OSError as exc:
        raise BulkReadError(f"{type(exc).__name__}: {exc}") from exc
    try:
        document = json.loads(reply)
    except ValueError as exc:
        raise BulkReadError(f"not a reply: {exc}") from exc
    if "error" in document or not isinstance(document.get("tables"), list):
        raise BulkReadError(str(document.get("error", "no tables in the reply"))[:300])
    return [bulk_table(database, entry) for entry in document["tables"]]


def _read_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := conn.recv(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise BulkReadError(f"a reply over {MAX_REPLY_BYTES} bytes")
    return b"".join(chunks)


def _columns(entries: list[list[Any]]) -> tuple[Column, ...]:
    return tuple(Column(name, type_, comment) for name, type_, comment in entries)


def bulk_table(database: str, entry: dict[str, Any]) -> RawTable:
    """A table of the bulk reply in the read model's shape (as :func:`.readers.hive_table` reads
    the same table's Thrift form)."""
    return RawTable(
        database=database.strip().lower(),  # as Hive keeps it
        name=entry["name"],
        table_type=entry.get("type") or "",
        owner=entry.get("owner") or "",
        create_time=int(entry.get("createTime") or 0),
        last_access_time=int(entry.get("lastAccessTime") or 0),
        parameters=dict(entry.get("parameters") or {}),
        columns=_columns(entry.get("columns") or []),
        partition_keys=_columns(entry.get("partitionKeys") or []),
        location=entry.get("location"),
        input_format=entry.get("inputFormat"),
        output_format=entry.get("outputFormat"),
        compressed=bool(entry.get("compressed", False)),
        num_buckets=int(entry["numBuckets"]) if entry.get("numBuckets") is not None else -1,
        serde_library=entry.get("serdeLibrary"),
        serde_parameters=dict(entry.get("serdeParameters") or {}),
        view_original_text=entry.get("viewOriginalText"),
        view_expanded_text=entry.get("viewExpandedText"),
    )
