"""A stream's failure as the job reads it, for a query that dies while it is being read."""

from __future__ import annotations

from typing import Any, cast

from flint_repl_job.indexes.streaming import IndexStream

INDEX = "flint_local_default_t_cov_index"


class _Dying:
    """A streaming query that runs until it is looked at, then fails as Spark's does: its cause
    recorded first, then the query marked terminated."""

    def __init__(self) -> None:
        self.cause: Exception | None = None
        self.terminated = False
        self.looks = 0

    def _look(self) -> None:
        self.looks += 1
        if self.looks == 2:  # between the reader's two reads
            self.cause = RuntimeError("column: [id], physicalType: BINARY, logicalType: bigint")
            self.terminated = True

    @property
    def isActive(self) -> bool:  # noqa: N802 (PySpark's name)
        self._look()
        return not self.terminated

    def exception(self) -> Exception | None:
        self._look()
        return self.cause


def _stream(query: object) -> IndexStream:
    return IndexStream(cast(Any, query), INDEX, None)


def test_a_query_that_fails_between_the_two_reads_fails_with_its_cause() -> None:
    failed = f"Streaming refresh of {INDEX} failed: column: [id], physicalType: BINARY, logicalType: bigint"
    stream = _stream(_Dying())
    assert stream.failure() == failed
    assert stream.failure() == failed


class _Stopped:
    """A query stopped without a cause."""

    @property
    def isActive(self) -> bool:  # noqa: N802 (PySpark's name)
        return False

    def exception(self) -> None:
        return None


def test_a_query_that_ended_without_a_cause_stopped_unexpectedly() -> None:
    assert _stream(_Stopped()).failure() == f"Streaming refresh of {INDEX} stopped unexpectedly"
