"""Streaming queries (CREATE and ALTER with auto refresh, RECOVER INDEX JOB): a job that keeps an
index refreshed until it is told to stop.

POST is the batch one (:class:`~async_query.handlers.batch.BatchHandler`): under the deployment's
limit of refreshing jobs (a slot, :mod:`async_query.slots`), it launches the job (named
``<cluster>:streaming:<index>``, with no execution timeout) and writes the statement, then the
session (``sessionType: streaming``). The job reports the statement ``success`` once its stream
runs; its session then stays ``running``, heart-beating the stream's progress once per interval,
until the stream is stopped or dies.

A stream is stopped through its index: ALTER to manual refresh, DROP and the streaming
housekeeper move the index's state document, and the job, which watches it, stops
(:mod:`async_query.streams`). DELETE is refused with the reference's advice to do just that.
"""

from __future__ import annotations

from async_query.dispatch import Classified, QueryKind, index_named
from async_query.handlers.batch import BatchHandler
from query_core.errors import InvalidRequestError
from query_core.models import StatementDoc, Versioned
from query_core.states import SessionType

#: DELETE's refusal (``docs/flint.md``, the reference's message): a stream is stopped by ALTER or VACUUM.
CANNOT_CANCEL = (
    "can't cancel index DML query, using ALTER auto_refresh=off statement to stop job, "
    "using VACUUM statement to stop job and delete data"
)


class StreamingHandler(BatchHandler):
    kind = QueryKind.STREAMING
    session_type = SessionType.STREAMING

    def job_name_suffix(self, classified: Classified, datasource: str) -> str:
        """The index the job keeps refreshed."""
        return index_named(classified.statement, datasource) or ""

    def cancel(self, statement: Versioned[StatementDoc]) -> None:
        raise InvalidRequestError(CANNOT_CANCEL)
