"""Session documents (doc id = session id), and the named operations on them: end one, append
a submitted statement to its pending list, note its temporary views. See ``docs/documents.md``."""

from __future__ import annotations

from typing import Any

from query_core.models import SessionDoc, Versioned, now_millis
from query_core.states import SessionState, SessionType, is_terminal
from query_core.store.connector import Filter, Term, Terms
from query_core.store.documents import DocumentRepository


class SessionRepository(DocumentRepository[SessionDoc]):
    model = SessionDoc
    doc_type = "session"

    def doc_id(self, doc: SessionDoc) -> str:
        return doc.session_id

    def create(self, doc: SessionDoc, *, recheck: bool = True) -> Versioned[SessionDoc]:
        """A new session; its index is checked again first (an index server that lost its indexes
        lost every session, and a write would otherwise create the index without its mappings)."""
        return super().create(doc, recheck=recheck)

    def update(
        self, current: Versioned[SessionDoc], state: SessionState | None = None, **fields: Any
    ) -> Versioned[SessionDoc]:
        """A conditional write of a session (a heartbeat when ``state`` is None: it stays as it is)."""
        return self.move(current, state if state is not None else current.doc.state, **fields)

    def find(
        self,
        datasource: str | None,
        states: list[SessionState],
        size: int = 1000,
        job_id: str | None = None,
        submitted_by: str | None = None,
        session_type: SessionType | None = None,
    ) -> list[Versioned[SessionDoc]]:
        """Sessions in ``states`` (of one job if ``job_id`` is given, started by one user if
        ``submitted_by`` is, of one type if ``session_type`` is), most recently active first; every request index's when
        ``datasource`` is None (a search: refresh-delayed; for limits, listings and sweeps)."""
        filters: list[Filter] = [Terms("state", tuple(s.value for s in states))]
        if job_id is not None:
            filters.append(Term("jobId", job_id))
        if submitted_by is not None:
            filters.append(Term("submittedBy", submitted_by))
        if session_type is not None:
            filters.append(Term("sessionType", session_type.value))
        return self.search(datasource, *filters, sort=(("lastUpdateTime", "desc"),), size=size)

    # -- the named operations ---------------------------------------------------------------

    def end(
        self,
        session: Versioned[SessionDoc],
        state: SessionState,
        error: str = "",
        *,
        job_id: str | None = None,
        **fields: Any,
    ) -> Versioned[SessionDoc] | None:
        """Move the session to its end ``state`` with ``error``: nothing runs in it any more.

        Never over an ended session (its end stands), and, when ``job_id`` is given, only while the
        session is that job's (a job never ends a session another job took over). Returns the
        version written, or None when it had ended (or was not the job's, or is gone). ``fields``
        are written with the end (a job's last figures).
        """

        def end(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            doc = current.doc
            if is_terminal(doc.state) or (job_id is not None and doc.job_id and doc.job_id != job_id):
                return None
            return self.move(
                current, state, error=error, running_statements=[], last_update_time=now_millis(), **fields
            )

        return self.change(session, end)

    def note_temporary_views(self, datasource: str, session_id: str) -> Versioned[SessionDoc] | None:
        """Record that the session's Spark session holds temporary views (once; docs/catalog.md);
        None when the session is gone."""

        def note(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if current.doc.temporary_views or is_terminal(current.doc.state):
                return current
            return self.move(current, current.doc.state, temporary_views=True)

        current = self.get(datasource, session_id)
        return self.change(current, note) if current is not None else None

    def append_pending(
        self, session: Versioned[SessionDoc], statement_id: str, keep: int
    ) -> Versioned[SessionDoc] | None:
        """Append ``statement_id`` to the session's pending list (the real-time signal its job
        reads by id), keeping the last ``keep`` ids; None when the session has ended."""

        def append(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state):
                return None
            ids = [*current.doc.pending_statement_ids, statement_id][-keep:]
            return self.move(current, current.doc.state, pending_statement_ids=ids)

        return self.change(session, append)
