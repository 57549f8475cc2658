"""The embedded index keeps its documents across restarts: all of them after a graceful stop, all
but the last snapshot interval's after a crash."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from async_query.embedded.index import EmbeddedIndex
from query_core.config import OpenSearchConfig
from query_core.store import IndexClient
from tests.support import wait_for

REQUESTS = ".query_execution_request_local"
RESULTS = "query_execution_result_local"


def client_of(embedded: EmbeddedIndex) -> IndexClient:
    return IndexClient(OpenSearchConfig(url=embedded.url, retry_seconds=2.0))


def fill(store: IndexClient) -> None:
    store.create(
        REQUESTS, "s1", {"type": "statement", "state": "waiting", "query": "SELECT 'it''s' -- é", "submitTime": 1}
    )
    store.create(REQUESTS, "s2", {"type": "statement", "state": "waiting", "query": "SELECT 2", "submitTime": 2})
    found = store.get(REQUESTS, "s1")
    assert found is not None
    store.update_if(REQUESTS, "s1", {"state": "success"}, found.version)
    store.put(RESULTS, "s1", {"status": "SUCCESS", "result": ["{'a':1}"], "schema": [], "extra": {"n": [1, None]}})
    store.create("scratch", "x", {"n": 1})
    store.driver.indices.delete(index="scratch")


def test_a_graceful_stop_keeps_every_document_and_mapping(tmp_path: Path) -> None:
    first = EmbeddedIndex.start(tmp_path / "index", interval_s=60)
    store = client_of(first)
    fill(store)
    mapping = store.index_definition(REQUESTS)["mappings"]
    store.close()
    first.close()  # the interval never came: the last snapshot at the stop holds everything

    again = EmbeddedIndex.start(tmp_path / "index", interval_s=60)
    try:
        store = client_of(again)
        s1, s2 = store.get(REQUESTS, "s1"), store.get(REQUESTS, "s2")
        assert s1 is not None and s1.source["state"] == "success" and s1.source["query"] == "SELECT 'it''s' -- é"
        assert s2 is not None and s2.source["state"] == "waiting"
        result = store.get(RESULTS, "s1")
        assert result is not None and result.source["extra"] == {"n": [1, None]}
        assert store.index_definition(REQUESTS)["mappings"] == mapping
        assert mapping["dynamic"] in (False, "false")
        assert "scratch" not in store.write_marks()  # a deleted index stays deleted
        store.close()
    finally:
        again.close()


def test_a_crash_loses_at_most_the_last_interval(tmp_path: Path) -> None:
    first = EmbeddedIndex.start(tmp_path / "index", interval_s=0.2)
    store = client_of(first)
    fill(store)
    snapshots = first.snapshotter.snapshots
    wait_for(lambda: first.snapshotter.snapshots > snapshots, timeout=10, what="a snapshot after the writes")
    os.kill(first.server.process.pid, signal.SIGKILL)  # the index server dies with everything in memory
    first._stop.set()  # and the service with it: no last snapshot
    store.close()

    again = EmbeddedIndex.start(tmp_path / "index", interval_s=60)
    try:
        store = client_of(again)
        s1 = store.get(REQUESTS, "s1")
        assert s1 is not None and s1.source["state"] == "success"
        assert store.get(RESULTS, "s1") is not None
        store.close()
    finally:
        again.close()


def test_an_unloadable_snapshot_is_set_aside_not_lost(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    directory.mkdir()
    (directory / f"{REQUESTS}.index.json").write_text('{"mappings": {"properties": {"n": {"type": "long"}}}}')
    (directory / f"{REQUESTS}.ndjson").write_text('{"index": {"_id": "a"}}\n{"n": "not a number"}\n')
    embedded = EmbeddedIndex.start(directory, interval_s=60)
    try:
        store = client_of(embedded)
        assert store.get(REQUESTS, "a") is None
        store.close()
        kept = [p for p in tmp_path.iterdir() if p.name.startswith("index.unloadable-")]
        assert len(kept) == 1 and (kept[0] / f"{REQUESTS}.ndjson").exists()
    finally:
        embedded.close()


def test_a_snapshot_never_holds_a_success_without_its_result(tmp_path: Path) -> None:
    """The job writes a result, then its statement's ``success``. Here both land while a snapshot
    is under way, after it read its marks and before it read the request index: the result index,
    read after, must be written too, although it had not changed when the pass began."""
    from async_query.embedded.index import Snapshotter

    embedded = EmbeddedIndex.start(tmp_path / "index", interval_s=3600)
    store = client_of(embedded)
    try:
        store.create(REQUESTS, "q", {"type": "statement", "state": "running"})
        store.put(RESULTS, "old", {"status": "SUCCESS"})
        embedded.snapshotter.snapshot()

        class JobWritesMidSnapshot(Snapshotter):
            def _write_index(self, name: str) -> None:
                if name == REQUESTS:
                    store.put(RESULTS, "q", {"status": "SUCCESS"})
                    found = store.get(REQUESTS, "q")
                    assert found is not None
                    store.update_if(REQUESTS, "q", {"state": "success"}, found.version)
                super()._write_index(name)

        racing = JobWritesMidSnapshot(embedded.store, tmp_path / "index")
        racing._marks = dict(embedded.snapshotter._marks)
        found = store.get(REQUESTS, "q")
        assert found is not None
        store.update_if(REQUESTS, "q", {"n": 1}, found.version)  # the request index changed

        assert racing.snapshot() == [REQUESTS, RESULTS]
        on_disk = (tmp_path / "index" / f"{RESULTS}.ndjson").read_text().splitlines()
        assert "q" in {json.loads(action)["index"]["_id"] for action in on_disk[::2]}
    finally:
        store.close()
        embedded.close()
