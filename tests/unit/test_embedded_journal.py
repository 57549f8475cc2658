"""The embedded index's journal: request routing, effects, record framing, group commit."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from async_query.embedded.effects import (
    OP_DELETE,
    OP_INDEX,
    OP_UPDATE,
    BulkMismatchError,
    DocEffect,
    Kind,
    RawEffect,
    bulk_effect,
    bulk_scope,
    decode,
    document_effect,
    kept_changes,
    raw_effect,
    route,
)
from async_query.embedded.journal import MAGIC, Journal, frame, list_segments, read_segment, segment_path

REQ = ".query_execution_request_local"


@pytest.mark.parametrize(
    ("method", "path", "kind", "scope"),
    [
        ("GET", f"/{REQ}/_doc/abc", Kind.READ, {REQ}),
        ("HEAD", "/idx", Kind.READ, {"idx"}),
        ("POST", "/idx/_search", Kind.READ, {"idx"}),
        ("POST", "/.query_execution_request_*/_search", Kind.READ, None),
        ("POST", "/_search/scroll", Kind.READ, None),
        ("DELETE", "/_search/scroll", Kind.READ, None),
        ("POST", "/idx/_mget", Kind.READ, {"idx"}),
        ("POST", "/idx/_refresh", Kind.READ, {"idx"}),
        ("PUT", "/idx/_doc/1", Kind.INDEX, {"idx"}),
        ("POST", "/idx/_doc/1", Kind.INDEX, {"idx"}),
        ("PUT", "/idx/_create/1", Kind.INDEX, {"idx"}),
        ("POST", "/idx/_doc", Kind.INDEX, {"idx"}),
        ("POST", "/idx/_update/1", Kind.UPDATE, {"idx"}),
        ("DELETE", "/idx/_doc/1", Kind.DELETE, {"idx"}),
        ("POST", "/_bulk", Kind.BULK, None),
        ("PUT", "/idx/_bulk", Kind.BULK, {"idx"}),
        ("PUT", "/idx", Kind.RAW, None),
        ("DELETE", "/idx", Kind.RAW, None),
        ("PUT", "/idx/_mapping", Kind.RAW, None),
        ("POST", "/idx/_delete_by_query", Kind.RAW, None),
        ("PUT", "/_index_template/t", Kind.RAW, None),
        ("POST", "/_aliases", Kind.RAW, None),
        ("GET", "/_embedded/journal", Kind.CONTROL, None),
        ("POST", "/_embedded/compact", Kind.CONTROL, None),
        ("GET", "/q%C3%A9/_doc/a%2Fb", Kind.READ, {"qé"}),
    ],
)
def test_requests_are_routed_by_method_and_path(method: str, path: str, kind: Kind, scope: set[str] | None) -> None:
    found = route(method, path)
    assert found.kind is kind
    if kind is not Kind.RAW:
        assert found.scope == (frozenset(scope) if scope is not None else None)


def test_an_alias_or_a_pattern_is_no_single_index() -> None:
    assert route("GET", "/logs/_doc/1", frozenset({"logs"})).scope is None
    assert route("GET", "/a,b/_search").scope is None
    assert bulk_scope("", b'{"index":{"_index":"a"}}\n{}\n{"delete":{"_index":"b","_id":"1"}}\n', frozenset()) == {
        "a",
        "b",
    }
    assert bulk_scope("c", b'{"index":{}}\n{}\n', frozenset()) == {"c"}
    assert bulk_scope("", b'{"index":{"_index":"al"}}\n{}\n', frozenset({"al"})) is None


def test_a_document_write_is_recorded_by_its_effect() -> None:
    reply = {"_index": "idx", "_id": "1", "_seq_no": 7, "result": "created"}
    found = document_effect(Kind.INDEX, b'{"a": 1}', 201, reply)
    assert found is not None
    payload, indexes = found
    assert indexes == {"idx"}
    assert decode(payload) == [DocEffect(OP_INDEX, "idx", "1", 7, b'{"a": 1}')]

    updated = document_effect(Kind.UPDATE, b'{"doc":{"b":2}}', 200, {**reply, "result": "updated", "_seq_no": 8})
    assert updated is not None and decode(updated[0]) == [DocEffect(OP_UPDATE, "idx", "1", 8, b'{"doc":{"b":2}}')]
    deleted = document_effect(Kind.DELETE, b"", 200, {**reply, "result": "deleted", "_seq_no": 9})
    assert deleted is not None and decode(deleted[0]) == [DocEffect(OP_DELETE, "idx", "1", 9, b"")]


@pytest.mark.parametrize(
    ("kind", "status", "result"),
    [(Kind.UPDATE, 200, "noop"), (Kind.DELETE, 404, "not_found"), (Kind.INDEX, 409, None), (Kind.UPDATE, 404, None)],
)
def test_a_write_that_changed_nothing_is_not_recorded(kind: Kind, status: int, result: str | None) -> None:
    reply = {"_index": "idx", "_id": "1", "_seq_no": 3, "result": result}
    assert document_effect(kind, b"{}", status, reply) is None


def test_a_bulk_records_the_items_that_succeeded_with_their_sources() -> None:
    body = (
        b'{"index":{"_index":"a","_id":"1"}}\n{"n":1}\n'
        b'{"create":{"_index":"a","_id":"2"}}\n{"n":2}\n'
        b'{"delete":{"_index":"b","_id":"3"}}\n'
        b'{"update":{"_index":"a","_id":"4"}}\n{"doc":{"n":4}}\n'
        b'{"index":{"_index":"a"}}\n{"n":5}\n'
        b'{"delete":{"_index":"a","_id":"6"}}\n'
    )
    items = [
        {"index": {"_index": "a", "_id": "1", "_seq_no": 10, "status": 201, "result": "created"}},
        {"create": {"_index": "a", "_id": "2", "status": 409, "error": {"type": "version_conflict_engine_exception"}}},
        {"delete": {"_index": "b", "_id": "3", "_seq_no": 4, "status": 200, "result": "deleted"}},
        {"update": {"_index": "a", "_id": "4", "_seq_no": 11, "status": 200, "result": "updated"}},
        {"index": {"_index": "a", "_id": "auto", "_seq_no": 12, "status": 201, "result": "created"}},
        {"delete": {"_index": "a", "_id": "6", "_seq_no": 13, "status": 404, "result": "not_found"}},
    ]
    found = bulk_effect(body, {"errors": True, "items": items})
    assert found is not None
    payload, indexes = found
    assert indexes == {"a", "b"}
    assert decode(payload) == [
        DocEffect(OP_INDEX, "a", "1", 10, b'{"n":1}'),
        DocEffect(OP_DELETE, "b", "3", 4, b""),
        DocEffect(OP_UPDATE, "a", "4", 11, b'{"doc":{"n":4}}'),
        DocEffect(OP_INDEX, "a", "auto", 12, b'{"n":5}'),
    ]


def test_a_bulk_reply_that_does_not_match_its_request_is_refused() -> None:
    body = b'{"index":{"_index":"a","_id":"1"}}\n{"n":1}\n'
    item = {"index": {"_index": "a", "_id": "1", "_seq_no": 1, "status": 201, "result": "created"}}
    with pytest.raises(BulkMismatchError):
        bulk_effect(body, {"errors": False, "items": [item, item]})
    with pytest.raises(BulkMismatchError):
        bulk_effect(body + body, {"errors": False, "items": [item]})


def test_a_kept_request_round_trips_and_names_what_it_may_change() -> None:
    payload = raw_effect("PUT", "/idx/_mapping?pretty", b'{"_meta":{"a":"\xc3\xa9"}}')
    assert decode(payload) == RawEffect("PUT", "/idx/_mapping?pretty", b'{"_meta":{"a":"\xc3\xa9"}}')
    assert kept_changes("/idx/_delete_by_query?conflicts=proceed") == {"idx"}
    assert kept_changes("/_index_template/t") == set()
    assert kept_changes("/_aliases") is None


def _segment(tmp_path: Path, *records: bytes) -> Path:
    path = segment_path(tmp_path, 3)
    path.write_bytes(MAGIC + b"".join(frame(r) for r in records))
    return path


def test_a_torn_or_corrupt_tail_ends_the_segment_and_is_reported(tmp_path: Path) -> None:
    path = _segment(tmp_path, b"one", b"two")
    whole = path.read_bytes()
    assert read_segment(path).records == [b"one", b"two"]

    path.write_bytes(whole + frame(b"three")[:-2])  # cut mid-record
    read = read_segment(path)
    assert read.records == [b"one", b"two"] and read.torn_bytes == len(frame(b"three")) - 2

    corrupt = bytearray(whole + frame(b"three"))
    corrupt[-1] ^= 0xFF  # a flipped byte in the last payload
    path.write_bytes(bytes(corrupt))
    assert read_segment(path).records == [b"one", b"two"]

    path.write_bytes(whole + bytes(4096))  # zeros ahead of the write position: a clean end
    assert read_segment(path).records == [b"one", b"two"] and read_segment(path).torn_bytes == 0

    path.write_bytes(whole + frame(b"three")[:-2] + bytes(4096))
    read = read_segment(path)
    assert read.records == [b"one", b"two"] and read.torn_bytes == len(frame(b"three")) - 2

    path.write_bytes(b"garbage")
    assert read_segment(path).records == []
    assert list_segments(tmp_path) == [(3, path)]


def test_group_commit_makes_every_appended_record_durable_in_order(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int], int, int]:
        journal = Journal(tmp_path, 5, asyncio.get_running_loop())

        async def write(i: int) -> int:
            lsn = journal.append(json.dumps({"i": i}).encode())
            await journal.wait_durable(lsn)
            return lsn

        lsns = await asyncio.gather(*(write(i) for i in range(200)))
        await journal.prepare_roll()  # the next segment made ahead, while writes go on
        straggler = journal.append(json.dumps({"i": 200}).encode())
        closed = await journal.roll()
        assert journal.is_durable(straggler)
        last = journal.append(b"after the cut")
        await journal.wait_durable(last)
        commits = journal.stats.commits
        journal.close()
        return list(lsns), closed, commits

    lsns, closed, commits = asyncio.run(scenario())
    assert sorted(lsns) == list(range(1, 201))
    assert closed == 5 and commits < 201  # grouped: fewer syncs than records
    first, second = read_segment(segment_path(tmp_path, 5)), read_segment(segment_path(tmp_path, 6))
    assert [json.loads(r)["i"] for r in first.records] == list(range(201))
    assert second.records == [b"after the cut"] and first.torn_bytes == second.torn_bytes == 0
    assert oct(os.stat(segment_path(tmp_path, 6)).st_mode & 0o777) == oct(0o600)
