"""The catalog browse statements answered at once from the catalog read model (docs/catalog.md):
a fast path the interactive handler takes before it would hand a statement to a job.

Such a statement is a document like any other of its session: it is created already ``success``,
its result written first (:meth:`~query_core.store.StatementRepository.create_answered`), so no job
ever runs it, and GET answers it from its result as always. The POST returns the session as it
would: the one named when it can still be used, otherwise a new one, whose job is started in the
background through the interactive handler's own session start, so that the user's next query
finds it warm. A statement the read model cannot answer goes on to a job as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from async_query.catalog.readmodel import Answer, CatalogReadModel
from async_query.catalog.statements import recognize
from async_query.datasources import Datasource
from async_query.dispatch import Classified, QueryKind
from async_query.handlers.base import SubmitRequest, Submitted, statement_doc
from query_core.errors import AsyncQueryError
from query_core.ids import new_id
from query_core.models import ResultDoc, SessionDoc, Versioned
from query_core.result_encoding import encode_rows
from query_core.states import SessionType, StatementState
from query_core.store import Store

log = logging.getLogger(__name__)

#: How long a POST naming a session whose start is under way waits for it.
START_WAIT_S = 10.0

#: The usable session a POST named (or None), and the start of a new one with a given id.
UsableSession = Callable[[Datasource, SubmitRequest], Versioned[SessionDoc] | None]
StartSession = Callable[[Datasource, str | None, str], object]


class BrowseFastPath:
    def __init__(
        self,
        store: Store,
        catalog: CatalogReadModel,
        usable: UsableSession,
        start_session: StartSession,
        *,
        max_rows: int = 10_000,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        #: An answer must fit one result document (``result_chunk_rows``/``_bytes``, docs/results.md);
        #: a larger one is left to the job, which streams it into several.
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.store = store
        self.catalog = catalog
        self.usable = usable
        self.start_session = start_session
        self._starts = ThreadPoolExecutor(max_workers=2, thread_name_prefix="browse-session")
        #: Session starts under way, by session id.
        self._pending: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def submit(self, request: SubmitRequest, classified: Classified, datasource: Datasource) -> Submitted | None:
        """The POST of a browse statement answered from the read model; None to run it on Spark."""
        browse = recognize(request.lang, request.query, datasource.name, classified.statement)
        if browse is None:
            return None
        session = self.usable(datasource, request) if request.session_id else None
        if session is not None and session.doc.temporary_views:
            return None  # its job's Spark session lists its temporary views too
        answer = self.catalog.answer(datasource, browse)
        if answer is None or len(answer.rows) > self.max_rows:
            return None
        result = self._result(request, answer)
        if result.lossless is not None and len(result.lossless.datarows.encode()) > self.max_bytes:
            return None
        session_id = session.doc.session_id if session is not None else new_id(datasource.name)
        query_id = new_id(datasource.name)
        doc = statement_doc(
            request,
            datasource.name,
            query_id,
            session_id,
            application_id=session.doc.application_id if session is not None else "",
            job_id=session.doc.job_id if session is not None else "",
        ).model_copy(update={"state": StatementState.SUCCESS})
        result = result.model_copy(update={"query_id": query_id, "session_id": session_id})
        self.store.statements.create_answered(doc, datasource.results, result)
        if session is None:
            self._start_in_background(datasource, request.submitted_by, session_id)
        return Submitted(query_id, session_id, QueryKind.INTERACTIVE)

    def _result(self, request: SubmitRequest, answer: Answer) -> ResultDoc:
        result, schema, lossless = encode_rows(answer.columns, answer.rows)
        return ResultDoc(
            query_id="",
            query_text=request.query,
            status="SUCCESS",
            result=result,
            schema=schema,
            lossless=lossless,
            data_source_name=request.datasource,
            job_type=SessionType.INTERACTIVE.value,
        )

    def _start_in_background(self, datasource: Datasource, submitted_by: str | None, session_id: str) -> None:
        """Start the session through the interactive handler's own start (its limit, its
        launcher), off the request path. A start that fails (the session limit, a launcher
        error) is logged: the POST was answered; the next one that names this session gets a
        new one, as for any session that can no longer be used."""

        def start() -> None:
            try:
                self.start_session(datasource, submitted_by, session_id)
            except AsyncQueryError as exc:
                log.info("session %s for a browse statement not started: %s", session_id, exc)
            except Exception:
                log.exception("session %s for a browse statement not started", session_id)

        with self._lock:
            self._pending = {sid: f for sid, f in self._pending.items() if not f.done()}
            self._pending[session_id] = self._starts.submit(start)

    def wait_for_start(self, session_id: str, timeout_s: float = START_WAIT_S) -> None:
        """Wait (boundedly) for the background start of ``session_id`` if one is under way: a
        query that names the session a browse answer returned a moment ago then goes into it,
        rather than into yet another new session."""
        with self._lock:
            pending = self._pending.get(session_id)
        if pending is not None:
            wait([pending], timeout=timeout_s)

    def wait_for_starts(self, timeout_s: float = 30.0) -> None:
        """Wait for the session starts under way (tests, and a graceful stop)."""
        with self._lock:
            pending = list(self._pending.values())
        wait(pending, timeout=timeout_s)

    def close(self) -> None:
        self._starts.shutdown(wait=True)
