"""Result documents in a datasource's result index: the one place they are read and written.

A result's first document has the query id as its id (a retry overwrites it); a result larger
than one document continues in chunk documents ``<queryId>-1``, ``<queryId>-2``, ... that the
first document lists. See ``docs/results.md`` for their encoding and ``docs/api.md`` for paging.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from query_core.errors import IndexOperationError
from query_core.models import ResultChunkDoc, ResultDoc
from query_core.store.connector import IndexConnector, Terms

_DECODER = json.JSONDecoder()


def chunk_id(query_id: str, chunk: int) -> str:
    """The id of a result's chunk document ``chunk`` (1, 2, ...). A query id is base64, which
    has no ``-``: a chunk's id is never another query's id."""
    return f"{query_id}-{chunk}"


@dataclass(frozen=True)
class ResultPage:
    """Rows ``offset`` .. ``offset + count - 1`` of a result, as JSON text (``[[...],...]``)."""

    head: ResultDoc
    offset: int
    count: int
    datarows: str


#: What :meth:`ResultRepository.summaries` reads of each result: never its rows.
_SUMMARY_FIELDS = ("queryId", "status", "updateTime", "queryRunTime", "lossless.total", "chunks.rows")


@dataclass(frozen=True)
class ResultSummary:
    """A result without its rows: how many rows are stored, when it was written, how long it ran."""

    rows: int | None
    update_time: int
    run_ms: int


class ResultRepository:
    def __init__(self, index: IndexConnector) -> None:
        self.index = index

    def put(self, result_index: str, doc: ResultDoc) -> None:
        self.index.put(result_index, doc.query_id, doc.to_source())

    def put_chunk(self, result_index: str, query_id: str, chunk: int, datarows: str, rows: int) -> None:
        """Write chunk document ``chunk`` of ``query_id``'s result (``datarows``: JSON text of ``rows`` rows)."""
        doc = ResultChunkDoc(chunk_of=query_id, chunk=chunk, rows=rows, datarows=datarows)
        self.index.put(result_index, chunk_id(query_id, chunk), doc.to_source())

    def get(self, result_index: str, query_id: str) -> ResultDoc | None:
        found = self.index.get(result_index, query_id)
        return None if found is None else ResultDoc.model_validate(found.source)

    def get_chunk(self, result_index: str, query_id: str, chunk: int) -> ResultChunkDoc | None:
        found = self.index.get(result_index, chunk_id(query_id, chunk))
        return None if found is None else ResultChunkDoc.model_validate(found.source)

    def summaries(self, result_index: str, query_ids: list[str]) -> dict[str, ResultSummary]:
        """The results of those of ``query_ids`` that have one, read without their rows (a
        search: a result written in the last second may be missing). The console's history."""
        if not query_ids:
            return {}
        found: dict[str, ResultSummary] = {}
        try:
            scanned = self.index.admin.scan(
                result_index, fields=_SUMMARY_FIELDS, filters=(Terms("queryId", tuple(query_ids)),)
            )
            for _, source in scanned:
                query_id = source.get("queryId")
                if isinstance(query_id, str):
                    found[query_id] = _summary(source)
        except IndexOperationError:  # no result index yet, or the index out of reach: no figures
            return {}
        return found

    def page(self, result_index: str, head: ResultDoc, offset: int, size: int, max_bytes: int) -> ResultPage:
        """Up to ``size`` rows of ``head``'s result from row ``offset``, reading only the documents
        that hold them, and fewer rows once the page holds ``max_bytes`` of row text (at least one
        document's share is always returned). ``head`` must have the lossless encoding.

        Raises :class:`LookupError` when a chunk document the head lists is missing."""
        assert head.lossless is not None
        pieces: list[str] = []
        taken = 0
        held = 0
        for chunk, first, rows in _documents(head):
            if taken >= size or (pieces and held >= max_bytes):
                break
            start = offset + taken - first
            if start >= rows:
                continue
            text = head.lossless.datarows if chunk == 0 else self._chunk_rows(result_index, head.query_id, chunk)
            piece, count = slice_rows(text, start, min(rows, start + size - taken))
            if count:
                pieces.append(piece)
                taken += count
                held += len(piece)
        return ResultPage(head, offset, taken, "[" + ",".join(pieces) + "]")

    def _chunk_rows(self, result_index: str, query_id: str, chunk: int) -> str:
        found = self.get_chunk(result_index, query_id, chunk)
        if found is None:
            raise LookupError(f"chunk {chunk} of the result of {query_id} is missing")
        return found.datarows


def _summary(source: dict[str, Any]) -> ResultSummary:
    rows: Any = None
    chunks, lossless = source.get("chunks"), source.get("lossless")
    if isinstance(chunks, dict) and isinstance(chunks.get("rows"), int):
        rows = chunks["rows"]
    elif isinstance(lossless, dict) and isinstance(lossless.get("total"), int):
        rows = lossless["total"]
    update, run = source.get("updateTime"), source.get("queryRunTime")
    return ResultSummary(rows, update if isinstance(update, int) else 0, run if isinstance(run, int) else 0)


def _documents(head: ResultDoc) -> list[tuple[int, int, int]]:
    """(chunk number, first row, rows) of each document of a result, the first document as 0."""
    assert head.lossless is not None
    counts = [head.lossless.total, *(head.chunks.chunk_rows if head.chunks else [])]
    documents = []
    first = 0
    for chunk, rows in enumerate(counts):
        documents.append((chunk, first, rows))
        first += rows
    return documents


def slice_rows(datarows: str, start: int, stop: int) -> tuple[str, int]:
    """Rows ``start`` .. ``stop - 1`` of ``datarows`` (a JSON array of rows, as the job writes it:
    no white space between rows), as their text joined by commas, without the outer brackets,
    and how many there are. The rows' text is passed through as it is (no number is re-read)."""
    if stop <= start or datarows[1:2] == "]":
        return "", 0
    pos = 1
    begin = end = 1
    row = 0
    while row < stop:
        if row == start:
            begin = pos
        _, end = _DECODER.raw_decode(datarows, pos)
        row += 1
        if datarows[end] != ",":
            break
        pos = end + 1
    if row <= start:
        return "", 0
    return datarows[begin:end], row - start
