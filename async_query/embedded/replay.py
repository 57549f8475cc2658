"""Replay of the journal onto a freshly seeded index server, before it takes any request.

Segments are read in order from the manifest's ``journal_from``. Within a segment, document effects
are gathered up to the next kept request (index creation, ``_delete_by_query``...), sorted by
(index, ``_seq_no``) and applied as ``_bulk`` requests; then the kept request is applied alone.
Sorting restores the server's own order for writes of one document that reached the journal in
another order (seq_nos are per index and grow with every write; they restart with a new index, which
only a kept request makes, and with a new server process, which only a new segment sees).

Replay is idempotent on top of a snapshot that already holds some of the replayed writes: a full
document or a delete sets the document whatever it held, and a partial update sets the same fields
to the same values again; later effects of the same document follow in the same order. An update
or delete of a document that is not there is expected in that case and skipped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from async_query.embedded.effects import OP_DELETE, OP_INDEX, DocEffect, RawEffect, decode, touched_indexes
from async_query.embedded.journal import MAGIC, cut_torn_tail, list_segments, read_segment
from async_query.embedded.osmem_http import IndexHttp

log = logging.getLogger(__name__)

#: Documents per replayed ``_bulk`` request, and its largest body.
BULK_ITEMS = 2000
BULK_BYTES = 8 << 20
_ACTIONS = {OP_INDEX: "index", OP_DELETE: "delete"}
#: Failures a replayed kept request may meet without anything being wrong (the snapshot already
#: holds its effect).
_EXPECTED = ("resource_already_exists_exception", "index_not_found_exception")


@dataclass
class ReplayReport:
    segments: int = 0
    records: int = 0
    documents: int = 0
    requests: int = 0
    failures: int = 0
    bytes: int = 0
    torn_bytes: int = 0
    #: Indexes the replayed records changed (None: any, a kept request named none).
    touched: set[str] | None = field(default_factory=set)
    last_segment: int = -1

    def touch(self, names: set[str] | None) -> None:
        if names is None or self.touched is None:
            self.touched = None
        else:
            self.touched |= names


def replay(client: IndexHttp, journal_dir: Path, first_segment: int) -> ReplayReport:
    report = ReplayReport()
    for number, path in list_segments(journal_dir):
        report.last_segment = number
        if number < first_segment:
            continue
        read = read_segment(path)
        if read.torn_bytes:
            log.warning(
                "journal segment %s: dropped a torn tail of %d bytes (never acknowledged)", path.name, read.torn_bytes
            )
            _repair(path, read.valid_bytes)
        report.segments += 1
        report.bytes += read.valid_bytes
        report.torn_bytes += read.torn_bytes
        _replay_records(client, read.records, report)
    return report


def _repair(path: Path, valid_bytes: int) -> None:
    if valid_bytes < len(MAGIC):
        path.write_bytes(MAGIC)
    else:
        cut_torn_tail(path, valid_bytes)


def _replay_records(client: IndexHttp, records: list[bytes], report: ReplayReport) -> None:
    pending: list[DocEffect] = []
    for payload in records:
        decoded = decode(payload)
        report.records += 1
        report.touch(touched_indexes(decoded))
        if isinstance(decoded, RawEffect):
            _apply_documents(client, pending, report)
            pending = []
            _apply_request(client, decoded, report)
        else:
            pending.extend(decoded)
    _apply_documents(client, pending, report)


def _apply_documents(client: IndexHttp, effects: list[DocEffect], report: ReplayReport) -> None:
    effects.sort(key=lambda e: (e.index, e.seq_no))  # stable: equal keys keep journal order
    batch: list[bytes] = []
    size = 0
    for effect in effects:
        lines = _bulk_lines(effect)
        batch.append(lines)
        size += len(lines)
        if len(batch) >= BULK_ITEMS or size >= BULK_BYTES:
            _send_bulk(client, batch, report)
            batch, size = [], 0
    if batch:
        _send_bulk(client, batch, report)
    report.documents += len(effects)


def _bulk_lines(effect: DocEffect) -> bytes:
    action = {_ACTIONS.get(effect.op, "update"): {"_index": effect.index, "_id": effect.doc_id}}
    head = json.dumps(action, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    if effect.op == OP_DELETE:
        return head
    # A raw line break can only be whitespace between JSON tokens (inside strings it is escaped).
    return head + effect.body.replace(b"\r", b" ").replace(b"\n", b" ") + b"\n"


def _send_bulk(client: IndexHttp, batch: list[bytes], report: ReplayReport) -> None:
    status, body = client.request("POST", "/_bulk", b"".join(batch))
    if status != 200:
        report.failures += len(batch)
        log.error("journal replay: a bulk of %d documents was refused: %d %s", len(batch), status, body[:300])
        return
    reply = json.loads(body)
    if not reply.get("errors"):
        return
    for item in reply.get("items", []):
        action, info = next(iter(item.items()))
        code = int(info.get("status", 500))
        if code < 300 or (code == 404 and action in ("update", "delete")):
            continue
        report.failures += 1
        if report.failures <= 10:
            log.error(
                "journal replay: %s %s/%s refused: %s", action, info.get("_index"), info.get("_id"), info.get("error")
            )


def _apply_request(client: IndexHttp, effect: RawEffect, report: ReplayReport) -> None:
    report.requests += 1
    status, body = client.request(effect.method, effect.target, effect.body or None)
    if status < 300 or (status == 404 and effect.method == "DELETE") or any(e.encode() in body for e in _EXPECTED):
        return
    report.failures += 1
    log.error("journal replay: %s %s refused: %d %s", effect.method, effect.target, status, body[:300])
