"""Streaming a result into documents, without Spark: a partition's encoding and its caps, and the
driver's packing of rows into bounded chunks up to the caps of the whole result."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql import types as t

from flint_repl_job.result_stream import (
    PIECE_ROWS,
    Piece,
    QueryCancelledError,
    ResultLimits,
    assemble,
    encode_partition,
    row_bytes,
    stream_rows,
)
from flint_repl_job.results import encode

SCHEMA = t.StructType([t.StructField("id", t.LongType()), t.StructField("s", t.StringType())])
BIG = 10**9


def rows(n: int, start: int = 0, text: str = "x") -> list[Row]:
    return [Row(id=i, s=text) for i in range(start, start + n)]


def limits(max_rows: int = BIG, max_bytes: int = BIG, chunk_rows: int = BIG, chunk_bytes: int = BIG) -> ResultLimits:
    return ResultLimits(max_rows, max_bytes, chunk_rows, chunk_bytes)


class Chunks:
    """Collects the chunk documents a result writes."""

    def __init__(self) -> None:
        self.written: list[tuple[int, str, int]] = []

    def __call__(self, chunk: int, datarows: str, count: int) -> None:
        assert json.loads(datarows).__len__() == count
        self.written.append((chunk, datarows, count))

    def rows(self) -> list[Any]:
        return [row for _, text, _ in self.written for row in json.loads(text)]


def partitions(*sizes: int) -> Iterator[Piece]:
    """The pieces of consecutive partitions of ``sizes`` rows, as their executors send them."""
    start = 0
    for size in sizes:
        yield from encode_partition(rows(size, start), SCHEMA, limits())
        start += size


# -- a partition ----------------------------------------------------------------------------------


def test_a_partition_sends_bounded_pieces_with_the_reference_encoding_of_its_first_rows() -> None:
    pieces = list(encode_partition(rows(2_500), SCHEMA, limits(chunk_rows=1_200)))
    assert [len(p[0]) for p in pieces] == [PIECE_ROWS, PIECE_ROWS, 500]
    assert [len(p[1]) for p in pieces] == [PIECE_ROWS, 200, 0]
    assert not any(p[3] for p in pieces)
    assert pieces[0][0][1] == '[1,"x"]' and pieces[0][1][1] == "{'id':1,'s':'x'}"
    assert sum(p[2] for p in pieces) == sum(row_bytes(text) for p in pieces for text in p[0])


@pytest.mark.parametrize(("cap", "expected_rows"), [({"max_rows": 7}, 7), ({"max_bytes": 40}, 5)])
def test_a_partition_stops_at_the_caps_and_says_it_has_more(cap: dict[str, int], expected_rows: int) -> None:
    # Each row is [i,"x"]: 7 bytes for i < 10.
    pieces = list(encode_partition(rows(10), SCHEMA, limits(**cap)))
    assert sum(len(p[0]) for p in pieces) == expected_rows
    assert pieces[-1][3] is True


def test_a_partition_that_ends_at_its_cap_has_no_more() -> None:
    pieces = list(encode_partition(rows(7), SCHEMA, limits(max_rows=7)))
    assert sum(len(p[0]) for p in pieces) == 7 and not pieces[-1][3]


def test_unicode_counts_its_utf8_bytes() -> None:
    assert row_bytes('[1,"é"]') == 8 and row_bytes('[1,"e"]') == 7


# -- the whole result -----------------------------------------------------------------------------


def test_a_small_result_is_one_document_in_both_encodings_as_before() -> None:
    chunks = Chunks()
    encoded = stream_rows(SCHEMA, rows(3), limits(chunk_rows=10), chunks)
    reference, schema, lossless = encode(SCHEMA, rows(3))
    assert (encoded.result, encoded.schema, encoded.lossless) == (reference, schema, lossless)
    assert encoded.chunks is None and chunks.written == []


def test_rows_go_into_chunks_of_at_most_chunk_rows_in_order() -> None:
    chunks = Chunks()
    assembled = assemble(partitions(3, 0, 20, 2), limits(chunk_rows=10), chunks, None)
    assert assembled.rows_in_first == 10 and len(assembled.reference) == 10
    assert [json.loads(r.replace("'", '"'))["id"] for r in assembled.reference] == list(range(10))
    assert [(n, count) for n, _, count in chunks.written] == [(1, 10), (2, 5)]
    assert [row[0] for row in json.loads(assembled.lossless) + chunks.rows()] == list(range(25))
    assert assembled.chunks is not None
    assert (assembled.chunks.rows, assembled.chunks.chunk_rows, assembled.chunks.truncated) == (25, [10, 5], False)


def test_a_chunk_is_cut_before_it_passes_chunk_bytes_and_a_larger_row_has_one_of_its_own() -> None:
    big = [Row(id=i, s="y" * 100) for i in range(3)]
    chunks = Chunks()
    pieces = encode_partition([*rows(4), *big, *rows(2, 7)], SCHEMA, limits())
    assembled = assemble(pieces, limits(chunk_bytes=30), chunks, None)
    # 7-byte rows: four fit in 30 bytes; each 108-byte row stands alone.
    assert assembled.rows_in_first == 4
    assert [count for _, _, count in chunks.written] == [1, 1, 1, 2]
    assert all(len(text) <= 30 or count == 1 for _, text, count in chunks.written)


@pytest.mark.parametrize(
    ("cap", "stored"),
    [({"max_rows": 12}, 12), ({"max_bytes": 12 * 7 + 6}, 12)],
)
def test_the_result_stops_at_its_caps_across_partitions_and_is_marked_truncated(
    cap: dict[str, int], stored: int
) -> None:
    chunks = Chunks()
    assembled = assemble(partitions(5, 5, 5), limits(chunk_rows=5, **cap), chunks, None)
    assert assembled.chunks is not None
    assert assembled.chunks.truncated is True and assembled.chunks.rows == stored
    assert [count for _, _, count in chunks.written] == [5, 2]


def test_a_result_that_ends_exactly_at_the_cap_is_not_truncated() -> None:
    assembled = assemble(partitions(6, 6), limits(max_rows=12, chunk_rows=100), Chunks(), None)
    assert assembled.chunks is None and assembled.rows_in_first == 12


def test_a_partition_cut_by_its_own_cap_truncates_the_result() -> None:
    pieces = encode_partition(rows(50), SCHEMA, limits(max_rows=20))
    assembled = assemble(pieces, limits(max_rows=20, chunk_rows=100), Chunks(), None)
    assert assembled.chunks is not None and assembled.chunks.truncated and assembled.chunks.rows == 20


def test_reading_stops_at_the_cap() -> None:
    """Pieces past the cap are never asked for: the partitions they would come from are never
    computed."""
    asked: list[int] = []

    def pieces() -> Iterator[Piece]:
        for n in range(100):
            asked.append(n)
            yield from encode_partition(rows(10, n * 10), SCHEMA, limits(max_rows=25))

    assembled = assemble(pieces(), limits(max_rows=25, chunk_rows=100), Chunks(), None)
    assert assembled.chunks is not None and assembled.chunks.truncated
    assert asked == [0, 1, 2]


def test_a_cancel_stops_the_writes() -> None:
    cancelled = threading.Event()
    chunks = Chunks()

    def write(chunk: int, datarows: str, count: int) -> None:
        chunks(chunk, datarows, count)
        cancelled.set()

    with pytest.raises(QueryCancelledError):
        assemble(partitions(100), limits(chunk_rows=10), write, cancelled)
    assert len(chunks.written) == 1


def test_flint_rows_are_capped_the_same_way() -> None:
    chunks = Chunks()
    encoded = stream_rows(SCHEMA, iter(rows(30)), limits(max_rows=20, chunk_rows=8), chunks)
    assert encoded.lossless.total == 8 and encoded.chunks is not None
    assert (encoded.chunks.rows, encoded.chunks.chunk_rows, encoded.chunks.truncated) == (20, [8, 4], True)
