"""A statement's rows, streamed into result documents of bounded size, up to the caps
(``docs/results.md``). A result of one page is taken at once by the executor
(:meth:`flint_repl_job.executor.SparkExecutor.output`); this module streams the larger ones.

Rows are encoded where they are computed: each partition, on its executor, turns its rows into
both encodings (:class:`~flint_repl_job.results.RowEncoder`) and sends them on in small pieces,
stopping by itself at the caps (:func:`encode_partition`). The driver reads the partitions one
after the other (``toLocalIterator`` without prefetch: the next partition is computed only when
asked for, so a result cut at the cap computes only the partitions it needs) and packs their rows
into documents of at most ``chunk_rows`` rows and ``chunk_bytes`` bytes (:class:`ResultAssembler`):
the first is kept, to be written with the statement's result document in both encodings; each
further one is written, in the lossless encoding only, as soon as it is full.

So whatever the result's size, the driver holds one partition's share of the caps in its JVM and
about two chunks in Python, and the rows past the caps are never computed into a document.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from flint_repl_job.results import RowEncoder, columns, reference_schema
from query_core.models import LosslessResult, ResultChunks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: A partition sends its rows on in pieces of at most this many rows, or about this many bytes.
PIECE_ROWS = 1_000
PIECE_BYTES = 256 * 1024

#: Lossless row texts; the reference's texts of the first of them (a prefix, maybe empty); the
#: lossless texts' bytes; whether the partition has rows after these that its caps held back.
Piece = tuple[list[str], list[str], int, bool]

#: Writes chunk document ``n`` (1, 2, ...) of the result: its rows as JSON text, and how many.
ChunkWriter = Callable[[int, str, int], None]


class QueryCancelledError(Exception):
    """The statement was cancelled before its Spark work started, or while its rows were written."""


class ResultWriteError(Exception):
    """A chunk of the result could not be written to the result index."""


@dataclass(frozen=True)
class ResultLimits:
    """The caps of one result, and the size of its documents (``docs/results.md``)."""

    #: At most this many rows, and this many bytes of row text (lossless), are stored.
    max_rows: int
    max_bytes: int
    #: A document holds at most this many rows and, but for a single larger row, this many bytes.
    chunk_rows: int
    chunk_bytes: int


def row_bytes(text: str) -> int:
    """The UTF-8 length of a row's text (``isascii`` is a flag check: no copy for ASCII text)."""
    return len(text) if text.isascii() else len(text.encode())


def encode_partition(rows: Iterable[Any], schema: StructType, limits: ResultLimits) -> Iterator[Piece]:
    """One partition's rows as pieces (see :data:`Piece`), on the executor that computed them.

    A partition stops at the caps by itself: the driver never needs more of one partition than the
    caps of the whole result. Only its first ``chunk_rows`` rows get the reference's encoding: the
    first document holds at most that many, and they come from the partitions' first rows."""
    encoder = RowEncoder(schema)
    texts: list[str] = []
    references: list[str] = []
    held = count = total = 0
    for row in rows:
        text, reference = encoder.encode(row, reference=count < limits.chunk_rows)
        size = row_bytes(text)
        if count >= limits.max_rows or total + size > limits.max_bytes:
            yield texts, references, held, True
            return
        texts.append(text)
        if reference is not None:
            references.append(reference)
        held += size
        total += size
        count += 1
        if len(texts) >= PIECE_ROWS or held >= PIECE_BYTES:
            yield texts, references, held, False
            texts, references, held = [], [], 0
    if texts:
        yield texts, references, held, False


@dataclass
class Assembled:
    """A result as written: its first document's rows in both encodings, and its extent
    (``None`` when the first document holds the whole result)."""

    reference: list[str]
    lossless: str
    rows_in_first: int
    chunks: ResultChunks | None


@dataclass
class _Chunk:
    texts: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    bytes: int = 0


class ResultAssembler:
    """Packs rows, in order, into the result's documents, and stops at the caps.

    The first document's rows are kept (they are written with the statement's result document);
    every further document is written through ``write`` once full. ``cancelled`` is looked at
    before each write: a cancelled statement stops writing at once."""

    def __init__(self, limits: ResultLimits, write: ChunkWriter, cancelled: threading.Event | None = None) -> None:
        self.limits = limits
        self.write = write
        self.cancelled = cancelled
        self.first = _Chunk()
        #: The chunk being filled: the first one until it is full.
        self.current = self.first
        #: Rows of each chunk written so far (documents 1, 2, ...).
        self.written: list[int] = []
        self.rows = 0
        self.bytes = 0
        self.truncated = False

    def add(self, piece: Piece) -> bool:
        """Take a piece's rows; False once the caps are reached (read no further)."""
        texts, references, held, more = piece
        if self._fits_whole(len(texts), held):
            self._extend(texts, references, held)
        else:
            for i, text in enumerate(texts):
                if not self._add_row(text, references[i] if i < len(references) else None):
                    return False
        if more:
            self.truncated = True
            return False
        return True

    def _fits_whole(self, rows: int, size: int) -> bool:
        limits = self.limits
        return (
            self.rows + rows <= limits.max_rows
            and self.bytes + size <= limits.max_bytes
            and len(self.current.texts) + rows <= limits.chunk_rows
            and self.current.bytes + size <= limits.chunk_bytes
        )

    def _extend(self, texts: list[str], references: list[str], size: int) -> None:
        chunk = self.current
        if chunk is self.first:
            self._check_references(len(texts), len(references))
            chunk.references.extend(references)
        chunk.texts.extend(texts)
        chunk.bytes += size
        self.rows += len(texts)
        self.bytes += size

    def _add_row(self, text: str, reference: str | None) -> bool:
        size = row_bytes(text)
        limits = self.limits
        if self.rows >= limits.max_rows or self.bytes + size > limits.max_bytes:
            self.truncated = True
            return False
        chunk = self.current
        if chunk.texts and (len(chunk.texts) >= limits.chunk_rows or chunk.bytes + size > limits.chunk_bytes):
            self._close_current()
        self._extend([text], [] if reference is None else [reference], size)
        return True

    def _check_references(self, rows: int, references: int) -> None:
        if references != rows:  # pragma: no cover - a partition encodes its first chunk_rows rows both ways
            raise AssertionError("a row of the first document came without its reference encoding")

    def _close_current(self) -> None:
        """The current chunk is full: keep it if it is the first, else write it; start the next."""
        if self.current is not self.first:
            self._write(self.current)
        self.current = _Chunk()

    def _write(self, chunk: _Chunk) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise QueryCancelledError("cancelled while its result was written")
        number = len(self.written) + 1
        self.write(number, "[" + ",".join(chunk.texts) + "]", len(chunk.texts))
        self.written.append(len(chunk.texts))

    def finish(self) -> Assembled:
        """Write the last chunk, and return the first document's rows and the result's extent."""
        if self.current is not self.first and self.current.texts:
            self._write(self.current)
        first = self.first
        chunks = None
        if self.written or self.truncated:
            chunks = ResultChunks(
                rows=self.rows, chunk_rows=list(self.written), truncated=self.truncated, bytes=self.bytes
            )
        return Assembled(first.references, "[" + ",".join(first.texts) + "]", len(first.texts), chunks)


def assemble(
    pieces: Iterable[Piece], limits: ResultLimits, write: ChunkWriter, cancelled: threading.Event | None
) -> Assembled:
    """Pack ``pieces`` into documents until they end or the caps are reached (the rest is not read)."""
    assembler = ResultAssembler(limits, write, cancelled)
    for piece in pieces:
        if cancelled is not None and cancelled.is_set():
            raise QueryCancelledError("cancelled while its result was read")
        if not assembler.add(piece):
            break
    return assembler.finish()


@dataclass(frozen=True)
class EncodedResult:
    """A result ready for its first document: the reference's lists, the lossless form, its extent."""

    result: list[str]
    schema: list[str]
    lossless: LosslessResult
    chunks: ResultChunks | None = None


def _encoded(schema: StructType, assembled: Assembled) -> EncodedResult:
    lossless = LosslessResult(schema=columns(schema), datarows=assembled.lossless, total=assembled.rows_in_first)
    return EncodedResult(assembled.reference, reference_schema(schema), lossless, assembled.chunks)


def stream_frame(
    frame: DataFrame, limits: ResultLimits, write: ChunkWriter, cancelled: threading.Event | None = None
) -> EncodedResult:
    """Run ``frame`` and stream its rows into documents (see the module's documentation)."""
    schema = frame.schema
    encoded = frame.rdd.mapPartitions(partial(encode_partition, schema=schema, limits=limits))
    pieces = encoded.toLocalIterator(prefetchPartitions=False)
    try:
        assembled = assemble(pieces, limits, write, cancelled)
    finally:
        # Stops the partitions' service: the rest of the result is never computed.
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    return _encoded(schema, assembled)


def stream_rows(
    schema: StructType,
    rows: Iterable[Any],
    limits: ResultLimits,
    write: ChunkWriter,
    cancelled: threading.Event | None = None,
) -> EncodedResult:
    """The same for rows already in the driver (a result of one page, a Flint statement's output)."""
    return _encoded(schema, assemble(encode_partition(rows, schema, limits), limits, write, cancelled))
