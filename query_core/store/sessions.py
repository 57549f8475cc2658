"""Session documents (doc id = session id), and the named operations on them: a job claims its
session and beats for it, the plugin starts a session of its own work, either ends one, the plugin
appends a submitted statement to its pending list, and gives a session that has not started a new
job; a job notes its temporary views. See ``docs/documents.md``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from query_core.errors import SessionLostError
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

    def find(
        self,
        datasource: str | None,
        states: list[SessionState],
        size: int = 1000,
        job_id: str | None = None,
        submitted_by: str | None = None,
        session_type: SessionType | None = None,
        fresh: bool = False,
    ) -> list[Versioned[SessionDoc]]:
        """Sessions in ``states`` (of one job if ``job_id`` is given, started by one user if
        ``submitted_by`` is, of one type if ``session_type`` is), most recently active first; every request index's when
        ``datasource`` is None (a search: refresh-delayed unless ``fresh``; for listings and sweeps)."""
        filters: list[Filter] = [Terms("state", tuple(s.value for s in states))]
        if job_id is not None:
            filters.append(Term("jobId", job_id))
        if submitted_by is not None:
            filters.append(Term("submittedBy", submitted_by))
        if session_type is not None:
            filters.append(Term("sessionType", session_type.value))
        return self.search(datasource, *filters, sort=(("lastUpdateTime", "desc"),), size=size, fresh=fresh)

    # -- the named operations ---------------------------------------------------------------

    def claim(
        self,
        session: Versioned[SessionDoc],
        job_id: str,
        *,
        application_id: str | None = None,
        heartbeat_interval_millis: int | None = None,
        excluded: Collection[str] = (),
        **fields: Any,
    ) -> Versioned[SessionDoc] | None:
        """A job takes its session: ``running`` under ``job_id``, its start time and first heartbeat
        now (with ``application_id``, the interval until its next beat, and ``fields``, when given).

        The ownership rules (:func:`check_job_owns`, with ``excluded`` the job's own list of
        excluded job runs) are checked on every attempt: :class:`SessionLostError` when the
        session is not the job's to take. None when the session is gone.
        """

        def claim(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
            check_job_owns(current.doc, job_id, excluded)
            now = now_millis()
            claimed: dict[str, Any] = {"job_id": job_id, "job_start_time": now, "last_update_time": now}
            if application_id is not None:
                claimed["application_id"] = application_id
            if heartbeat_interval_millis is not None:
                claimed["heartbeat_interval_millis"] = heartbeat_interval_millis
            return self._move(current, SessionState.RUNNING, **claimed, **fields)

        return self._change(session, claim)

    def beat(
        self,
        session: Versioned[SessionDoc],
        *,
        at: int | None = None,
        job_id: str | None = None,
        excluded: Collection[str] = (),
        **fields: Any,
    ) -> Versioned[SessionDoc] | None:
        """A heartbeat: the session's ``lastUpdateTime`` (``at``, or now) and what is reported with
        it (``fields``: running statements, the interval until the next beat, figures), its state
        kept. An ended session takes no heartbeat (:class:`~query_core.errors.InvalidTransitionError`).

        With ``job_id``, only while the session is that job's (:func:`check_job_owns`, on every
        attempt: :class:`SessionLostError` otherwise). None when the session is gone.
        """

        def beat(current: Versioned[SessionDoc]) -> Versioned[SessionDoc]:
            if job_id is not None:
                check_job_owns(current.doc, job_id, excluded)
            landed = now_millis() if at is None else at
            return self._move(current, current.doc.state, last_update_time=landed, **fields)

        return self._change(session, beat)

    def start(self, session: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
        """``running`` with a heartbeat now, for work the plugin does itself (a ``local`` session,
        which no job claims); None when the session has ended (or is gone)."""

        def start(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state):
                return None
            return self._move(current, SessionState.RUNNING, last_update_time=now_millis())

        return self._change(session, start)

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
            return self._move(
                current, state, error=error, running_statements=[], last_update_time=now_millis(), **fields
            )

        return self._change(session, end)

    def note_temporary_views(self, datasource: str, session_id: str) -> Versioned[SessionDoc] | None:
        """Record that the session's Spark session holds temporary views (once; docs/catalog.md);
        None when the session is gone."""

        def note(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if current.doc.temporary_views or is_terminal(current.doc.state):
                return current
            return self._move(current, current.doc.state, temporary_views=True)

        current = self.get(datasource, session_id)
        return self._change(current, note) if current is not None else None

    def append_pending(
        self, session: Versioned[SessionDoc], statement_ids: str | Sequence[str], keep: int
    ) -> Versioned[SessionDoc] | None:
        """Append ``statement_ids`` (one id or several, in order) to the session's pending list
        (the real-time signal its job reads by id), keeping the last ``keep`` ids; None when the
        session has ended. The list only hastens a pickup the job also makes by searching for its
        session's waiting statements, and the statements themselves are written first: an append
        that fails delays them by a search interval and loses nothing."""
        added = [statement_ids] if isinstance(statement_ids, str) else list(statement_ids)

        def append(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state):
                return None
            ids = [*current.doc.pending_statement_ids, *added][-keep:]
            return self._move(current, current.doc.state, pending_statement_ids=ids)

        return self._change(session, append)

    def replace_job(
        self, session: Versioned[SessionDoc], job_id: str, application_id: str
    ) -> Versioned[SessionDoc] | None:
        """Give a session that has not started a new job (its claimed pool job died before it
        started the session): the old job is excluded from it, and its start-up limit counts
        again from now. None when the session started, ended, or was given another job meanwhile.
        """
        old = session.doc.job_id

        def replace(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            doc = current.doc
            if doc.state != SessionState.NOT_STARTED or doc.job_id != old:
                return None
            excluded = [*doc.exclude_job_ids, old] if old else doc.exclude_job_ids
            return self._move(
                current,
                SessionState.NOT_STARTED,
                job_id=job_id,
                application_id=application_id,
                exclude_job_ids=excluded,
                pool_slot="",
                last_update_time=now_millis(),
            )

        return self._change(session, replace)


def check_job_owns(session: SessionDoc, job_id: str, excluded: Collection[str] = ()) -> None:
    """The ownership rules: one live job per session. Raise :class:`SessionLostError` when the
    session is owned by another job run (its ``jobId`` differs), when ``job_id`` is excluded from it
    (its ``excludeJobIds``, or ``excluded``: the job's own list), or when it has ended."""
    if session.job_id and session.job_id != job_id:
        raise SessionLostError(f"session {session.session_id} is owned by job {session.job_id}")
    if job_id in session.exclude_job_ids or job_id in excluded:
        raise SessionLostError(f"job {job_id} is excluded from session {session.session_id}")
    if is_terminal(session.state):
        raise SessionLostError(f"session {session.session_id} is {session.state.value}")
