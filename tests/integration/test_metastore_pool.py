"""The Hive Metastore reader's pool of connections (docs/catalog.md), over real Thrift sockets to a
stand-in of the one metastore call a listing makes: a listing's batches are fetched at once, on at
most ``connections`` connections, and come back in the listing's order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from async_query.catalog import readers
from async_query.catalog.readers import CatalogUnavailableError, HiveMetastoreReader
from bench.browse import spark_like_table
from tests.integration.test_metastore_log import serve


class StandInTables:
    """``get_table_objects_by_name`` as the metastore answers it; the first ``together`` calls
    each wait until that many are in progress at once (else they fail), and the most calls in
    progress at once is noted."""

    def __init__(self, together: int) -> None:
        self.meet = threading.Barrier(together, timeout=10) if together > 1 else None
        self.lock = threading.Lock()
        self.calls = self.in_progress = self.most = 0

    def get_table_objects_by_name(self, database: str, names: list[str]) -> list[Any]:
        with self.lock:
            self.calls += 1
            first = self.calls <= (self.meet.parties if self.meet else 0)
            self.in_progress += 1
            self.most = max(self.most, self.in_progress)
        try:
            if first and self.meet is not None:
                self.meet.wait()
            return [spark_like_table(database, n, f"file:/w/{n}", False) for n in names if n != "gone"]
        finally:
            with self.lock:
                self.in_progress -= 1


@pytest.mark.parametrize("connections", [1, 3])
def test_a_listings_batches_go_at_once_on_a_bounded_pool_in_order(connections: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "BATCH", 10)
    handler = StandInTables(together=connections)
    names = [f"t{i:03d}" for i in range(95)] + ["gone"]
    for uri in serve(handler):  # type: ignore[arg-type]
        reader = HiveMetastoreReader(uri, timeout_s=10, connections=connections)
        try:
            tables = reader.tables("db", names)
            assert [t.name for t in tables] == names[:-1]
            assert [t.name for t in reader.tables("db", ["t007"])] == ["t007"]
        finally:
            reader.close()
    assert handler.calls == 11
    assert handler.most == connections


def test_a_closed_reader_answers_unavailable() -> None:
    for uri in serve(StandInTables(together=1)):  # type: ignore[arg-type]
        reader = HiveMetastoreReader(uri, connections=2)
        reader.close()
        with pytest.raises(CatalogUnavailableError):
            reader.tables("db", ["a", "b"])
