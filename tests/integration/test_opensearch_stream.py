"""Structured Streaming into an index: the ``opensearch`` data source's stream writer, with Spark in
this process, reading parquet files as they arrive in a directory (``trigger(availableNow=True)``:
each run processes what is new since the checkpoint, then stops)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flint_repl_job.opensearch_source import source_options
from query_core.store import Store
from tests.node import index_config
from tests.support import client_of

pytestmark = pytest.mark.spark
INDEX = "flint_local_default_events_stream"
TIMEOUT = 180  # seconds; the machine may be busy
AT = dt.datetime(2024, 5, 1, 12, 30, 15, 250000, tzinfo=dt.UTC)
EVENTS = "id STRING, n BIGINT, x DOUBLE, day DATE, at TIMESTAMP, tags ARRAY<STRING>, inner STRUCT<name: STRING, k: INT>"
KEYED = "key STRING, v BIGINT"


def options(index_url: str, **extra: str) -> dict[str, str]:
    return {**source_options(index_config(index_url)), "index": INDEX, **extra}


def put_file(directory: Path, name: str, table: pa.Table) -> None:
    """Add a parquet file the way a producer should: written aside, then renamed into place (the
    file source skips names starting with a dot)."""
    directory.mkdir(parents=True, exist_ok=True)
    aside = directory / f".{name}.parquet"
    pq.write_table(table, aside)
    aside.rename(directory / f"{name}.parquet")


def events(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": [f"id-{i}" for i in ids],
            "n": pa.array(list(ids), pa.int64()),
            "x": [i * 1.5 for i in ids],
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in ids], pa.date32()),
            "at": pa.array([AT + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
            "tags": [[f"t{i}", "x"] for i in ids],
            "inner": pa.array(
                [{"name": f"n{i}", "k": i} for i in ids], pa.struct([("name", pa.string()), ("k", pa.int32())])
            ),
        }
    )


def keyed(keys: list[str]) -> pa.Table:
    return pa.table({"key": keys, "v": pa.array(range(len(keys)), pa.int64())})


def expected_event(i: int) -> dict[str, Any]:
    return {
        "id": f"id-{i}",
        "n": i,
        "x": i * 1.5,
        "day": (dt.date(2024, 1, 1) + dt.timedelta(days=i % 30)).isoformat(),
        "at": (AT + dt.timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
        "tags": [f"t{i}", "x"],
        "inner": {"name": f"n{i}", "k": i},
    }


def run(frame: Any, checkpoint: Path, index_url: str, mode: str = "append", **extra: str) -> Any:
    """Run ``frame`` into the index until it has processed what is there; returns the stopped query."""
    query = (
        frame.writeStream.format("opensearch")
        .options(**options(index_url, **extra))
        .option("checkpointLocation", str(checkpoint))
        .outputMode(mode)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(TIMEOUT), f"the streaming query did not finish in {TIMEOUT}s"
    finally:
        query.stop()
    assert query.exception() is None
    return query


def documents(store: Store) -> dict[str, dict[str, Any]]:
    return dict(store.admin.scan(INDEX))


def test_each_run_writes_the_new_files_once_and_a_replayed_batch_overwrites_itself(
    spark: Any, index_url: str, store: Store, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    put_file(source, "part-0", events(range(0, 30)))
    put_file(source, "part-1", events(range(30, 50)))
    meta = '{"kind": "mv", "name": "events_stream", "source": "local.default.events"}'
    stream = spark.readStream.schema(EVENTS).parquet(str(source))

    first = run(stream, checkpoint, index_url, id_column="id", meta=meta, batch_size="7")
    assert [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]] == [50]
    definition = client_of(store).admin.index_definition(INDEX)["mappings"]
    assert definition["_meta"] == {"kind": "mv", "name": "events_stream", "source": "local.default.events"}
    props = definition["properties"]
    assert props["id"] == {"type": "keyword"} and props["n"] == {"type": "long"} and props["x"] == {"type": "double"}
    assert props["day"]["type"] == "date" and props["at"]["type"] == "date"
    assert props["inner"]["properties"]["k"] == {"type": "integer"}
    found = documents(store)
    assert sorted(found) == sorted(f"id-{i}" for i in range(50))
    for i in (0, 14, 49):
        assert found[f"id-{i}"] == expected_event(i)
    assert all(doc == expected_event(int(doc_id[3:])) for doc_id, doc in found.items())

    # New files: the next run, from the same checkpoint, writes only those.
    put_file(source, "part-2", events(range(50, 65)))
    writes_before = client_of(store).admin.write_marks()[INDEX][0]
    second = run(stream, checkpoint, index_url, id_column="id", meta=meta, batch_size="7")
    assert [p["numInputRows"] for p in second.recentProgress if p["numInputRows"]] == [15]
    assert client_of(store).admin.write_marks()[INDEX] == (writes_before + 15, 65)
    found = documents(store)
    assert sorted(found) == sorted(f"id-{i}" for i in range(65))
    assert found["id-57"] == expected_event(57) and found["id-3"] == expected_event(3)

    # As if the last micro-batch had failed after its tasks wrote: without its commit, the next run
    # runs it again, and with ids its documents overwrite themselves.
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    replay = run(stream, checkpoint, index_url, id_column="id", meta=meta, batch_size="7")
    assert [(p["batchId"], p["numInputRows"]) for p in replay.recentProgress if p["numInputRows"]] == [(last, 15)]
    assert client_of(store).admin.write_marks()[INDEX] == (writes_before + 30, 65)
    assert documents(store) == found


def test_an_aggregation_in_complete_mode_keeps_one_document_per_key_with_its_latest_count(
    spark: Any, index_url: str, store: Store, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    put_file(source, "part-0", keyed(["a", "b", "a", "c", "a"]))
    counts = spark.readStream.schema(KEYED).parquet(str(source)).groupBy("key").count()

    run(counts, checkpoint, index_url, mode="complete", id_column="key")
    assert documents(store) == {
        "a": {"key": "a", "count": 3},
        "b": {"key": "b", "count": 1},
        "c": {"key": "c", "count": 1},
    }
    assert client_of(store).admin.index_definition(INDEX)["mappings"]["properties"]["count"] == {"type": "long"}

    put_file(source, "part-1", keyed(["b", "d", "a", "b"]))
    run(counts, checkpoint, index_url, mode="complete", id_column="key")
    assert documents(store) == {
        "a": {"key": "a", "count": 4},
        "b": {"key": "b", "count": 3},
        "c": {"key": "c", "count": 1},
        "d": {"key": "d", "count": 1},
    }
    assert client_of(store).admin.write_marks()[INDEX][1] == 4


def test_update_mode_and_complete_mode_without_ids_are_refused(
    spark: Any, index_url: str, store: Store, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    put_file(source, "part-0", keyed(["a", "b", "a"]))
    counts = spark.readStream.schema(KEYED).parquet(str(source)).groupBy("key").count()

    # Spark itself refuses the update mode for Python data sources (no SupportsStreamingUpdateAsAppend).
    with pytest.raises(Exception, match="does not support Update mode"):
        run(counts, tmp_path / "update", index_url, mode="update", id_column="key")
    # Without ids, every micro-batch of the complete mode would add the whole result again.
    with pytest.raises(Exception, match="needs the option id_column"):
        run(counts, tmp_path / "complete", index_url, mode="complete")
    assert not store.admin.index_exists(INDEX)
