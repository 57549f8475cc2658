"""Following a Hive Metastore's notification log (docs/catalog.md). The embedded metastore cannot
keep one (PySpark's jars lack ``DbNotificationListener``), so a stand-in serves exactly the three
Thrift calls the reader makes, over real Thrift on a loopback port: its listener configuration,
the current event id, and the events after one."""

from __future__ import annotations

import logging
import socket as sockets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pymetastore.hive_metastore import ThriftHiveMetastore
from pymetastore.hive_metastore.ttypes import (
    CurrentNotificationEventId,
    NotificationEvent,
    NotificationEventResponse,
)
from thrift.protocol.TBinaryProtocol import TBinaryProtocolAcceleratedFactory
from thrift.server.TServer import TThreadedServer
from thrift.transport import TSocket, TTransport

from async_query.catalog.readers import Change, HiveMetastoreReader

LISTENER = "org.apache.hive.hcatalog.listener.DbNotificationListener"


class StandInLog:
    """The metastore calls of the notification log, answered from a list of events."""

    def __init__(self, listeners: str) -> None:
        self.listeners = listeners
        self.events: list[NotificationEvent] = []

    def get_config_value(self, name: str, default: str) -> str:
        return self.listeners if name == "hive.metastore.transactional.event.listeners" else default

    def get_current_notificationEventId(self) -> CurrentNotificationEventId:  # noqa: N802 - Thrift's name
        return CurrentNotificationEventId(eventId=len(self.events))

    def get_next_notification(self, request: Any) -> NotificationEventResponse:
        after = [e for e in self.events if e.eventId > request.lastEvent]
        return NotificationEventResponse(events=after[: request.maxEvents])

    def add(self, event_type: str, db: str, table: str | None = None) -> None:
        self.events.append(
            NotificationEvent(eventId=len(self.events) + 1, eventTime=0, eventType=event_type, dbName=db, tableName=table, message="{}")
        )


def serve(handler: StandInLog) -> Iterator[str]:
    socket = TSocket.TServerSocket(host="127.0.0.1", port=0)
    server = TThreadedServer(
        ThriftHiveMetastore.Processor(handler), socket, TTransport.TBufferedTransportFactory(), TBinaryProtocolAcceleratedFactory()
    )
    server.daemon = True
    socket.listen()  # bound now, on a free port: serve() must not open another
    socket.listen = lambda: None  # type: ignore[method-assign]
    port = socket.handle.getsockname()[1]

    def run() -> None:
        try:
            server.serve()
        except SystemExit:  # the stop (see _stop)
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield f"thrift://127.0.0.1:{port}"
    _stop(socket, thread)


def _stop(socket: TSocket.TServerSocket, thread: threading.Thread) -> None:
    """End the serving thread: its next accept raises SystemExit (the server's loop catches only
    Exception, and would otherwise go on accepting on a closed socket), and shutting the listening
    socket down wakes the accept it is blocked in."""

    def stopped() -> Any:
        raise SystemExit

    socket.accept = stopped  # type: ignore[method-assign]
    server_log = logging.getLogger("thrift.server.TServer")
    level = server_log.level
    server_log.setLevel(logging.CRITICAL)  # the woken accept's error is the stop, not news
    try:
        if socket.handle is not None:
            try:
                socket.handle.shutdown(sockets.SHUT_RDWR)
            except OSError:
                pass
        thread.join(timeout=5)
    finally:
        server_log.setLevel(level)
    socket.close()


@pytest.fixture
def kept() -> Iterator[tuple[StandInLog, str]]:
    handler = StandInLog(LISTENER)
    for uri in serve(handler):
        yield handler, uri


def test_the_log_is_followed_from_where_it_stood(kept: tuple[StandInLog, str]) -> None:
    handler, uri = kept
    handler.add("CREATE_TABLE", "lake", "old")
    reader = HiveMetastoreReader(uri)
    try:
        assert reader.follows_changes()
        changes, position = reader.changes_since(None)
        assert (changes, position) == ([], 1)  # what happened before is not news
        handler.add("CREATE_TABLE", "Lake", "Fresh")
        handler.add("ALTER_TABLE", "lake", "old")
        handler.add("CREATE_DATABASE", "sea")
        changes, position = reader.changes_since(position)
        assert changes == [Change("lake", "fresh"), Change("lake", "old"), Change("sea")]
        assert reader.changes_since(position) == ([], 4)
    finally:
        reader.close()


def test_without_the_listener_the_log_is_not_followed() -> None:
    handler = StandInLog("")
    for uri in serve(handler):
        reader = HiveMetastoreReader(uri)
        try:
            assert not reader.follows_changes()
        finally:
            reader.close()
