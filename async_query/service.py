"""What POST, GET and DELETE do, in terms of documents and launchers.

Hot paths read by id (real-time) and write conditionally; nothing here depends on a search
seeing a fresh write. Sessions are reused when they are alive by their documents alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import JobRequest, Launcher, job_conf
from async_query.liveness import LivenessChecker, Staleness, fail_statement
from async_query.settings import Settings
from async_query.workers import CancelSupervisor, Housekeeper, Lease
from query_core.config import OpenSearchConfig
from query_core.errors import (
    AsyncQueryError,
    InvalidTransitionError,
    QueryNotFoundError,
    TooManyRequestsError,
    UnknownDatasourceError,
)
from query_core.ids import datasource_of, new_id
from query_core.models import ResultDoc, SessionDoc, StatementDoc, Versioned
from query_core.states import SessionState, SessionType, StatementState, is_terminal
from query_core.store import IndexStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubmitRequest:
    datasource: str
    lang: str
    query: str
    session_id: str | None = None


@dataclass(frozen=True)
class Submitted:
    query_id: str
    session_id: str


V = TypeVar("V")


class LruCache(Generic[V]):
    """A bounded map, least recently used out first, for facts that never change (finished
    replies, the session of a query)."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)


class AsyncQueryService:
    def __init__(
        self,
        settings: Settings,
        store: IndexStore,
        datasources: DatasourceRegistry,
        launchers: dict[str, Launcher],
        opensearch: OpenSearchConfig,
    ) -> None:
        self.settings = settings
        self.store = store
        self.datasources = datasources
        self.launchers = launchers
        #: The connection the jobs use (it may differ from the plugin's, e.g. a public endpoint).
        self.opensearch = opensearch
        self.replies: LruCache[bytes] = LruCache(settings.reply_cache_entries)
        #: Which session a query runs in (it never changes), so GET can read both at once.
        self.session_of_query: LruCache[str] = LruCache(settings.reply_cache_entries * 10)
        self._emr_launchers: dict[str, tuple[Datasource, Launcher]] = {}
        self._launcher_lock = threading.Lock()
        self.liveness = LivenessChecker(
            store,
            self._launcher_of_session,
            Staleness(settings.stale_heartbeats, settings.session_start_timeout_s, settings.heartbeat_idle_ms),
            settings.liveness_cache_s,
        )
        self.supervisor = CancelSupervisor(store, self.liveness, self._launcher_of_session, settings.cancel_deadline_s)
        self.housekeeper = Housekeeper(
            store,
            datasources,
            self.liveness,
            settings.housekeeping_interval_s,
            settings.request_retention_days,
            settings.result_retention_days,
            Lease(store, "housekeeping-lease", lease_ms=int(settings.housekeeping_interval_s * 2000)),
            self.supervisor,
        )

    def start_workers(self) -> None:
        """Start the background loops (cancel supervision, housekeeping); tests drive them by hand."""
        self.supervisor.start()
        self.housekeeper.start()

    def launcher_for(self, datasource: Datasource) -> Launcher:
        """The launcher of a datasource: shared by connector, or built per EMR Serverless datasource."""
        if datasource.connector in self.launchers:
            return self.launchers[datasource.connector]
        if datasource.connector == "emr-serverless":
            with self._launcher_lock:
                known = self._emr_launchers.get(datasource.name)
                if known is None or known[0] != datasource:
                    from async_query.launcher.emr import launcher_for_datasource

                    known = (datasource, launcher_for_datasource(datasource, self.settings))
                    self._emr_launchers[datasource.name] = known
                return known[1]
        raise UnknownDatasourceError(f"no launcher for connector {datasource.connector!r}")

    def _launcher_of_session(self, session: SessionDoc) -> Launcher:
        return self.launcher_for(self.datasources.get(session.data_source_name))

    # -- POST -------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> Submitted:
        datasource = self.datasources.get(request.datasource)
        session = self._usable_session(datasource, request.session_id) if request.session_id else None
        if session is None:
            self._check_session_limit()
            session = self._new_session(datasource)
        query_id = new_id(datasource.name)
        statement = StatementDoc(
            statement_id=query_id,
            query_id=query_id,
            session_id=session.doc.session_id,
            lang=request.lang,
            query=request.query,
            data_source_name=datasource.name,
            application_id=session.doc.application_id,
            job_id=session.doc.job_id,
        )
        created = self.store.create_statement(statement)
        self._signal_job(session, created)
        self.session_of_query.put(query_id, session.doc.session_id)
        return Submitted(query_id, session.doc.session_id)

    def _signal_job(self, session: Versioned[SessionDoc], statement: Versioned[StatementDoc]) -> None:
        """Append the statement id to the session's list, which its job reads by id (real-time).

        Should the session have ended in the instant since it was chosen, the statement is failed
        at once, so that it still reaches a terminal state.
        """
        sid = statement.doc.statement_id
        kept = self.settings.pending_ids_kept

        def change(current: Versioned[SessionDoc]) -> Versioned[SessionDoc] | None:
            if is_terminal(current.doc.state):
                return None
            ids = [*current.doc.pending_statement_ids, sid][-kept:]
            return self.store.update_session(current, pending_statement_ids=ids)

        written = self.store.update_with_retry(
            lambda: self.store.get_session(session.doc.data_source_name, session.doc.session_id), change, first=session
        )
        if written is None:
            self._fail_statement(
                statement, f"Session {session.doc.session_id} ended before the statement could run; submit it again"
            )

    def _usable_session(self, datasource: Datasource, session_id: str) -> Versioned[SessionDoc] | None:
        """The given session if it can take a statement: same datasource, interactive, alive."""
        try:
            if datasource_of(session_id) != datasource.name:
                return None
        except AsyncQueryError:
            return None
        session = self.store.get_session(datasource.name, session_id)
        if session is None or session.doc.session_type != SessionType.INTERACTIVE:
            return None
        return session if self.liveness.confirm_alive(session) else None

    def looks_alive(self, session: SessionDoc) -> bool:
        """Alive by its documents alone: not ended, and its heartbeat (or start-up) is recent."""
        return self.liveness.staleness.is_fresh(session)

    def _check_session_limit(self) -> None:
        """At most ``max_sessions`` live interactive sessions per deployment.

        Counted with a search (it lags new sessions by up to a refresh; it returns at most 10,000
        hits), on the path that starts a new job anyway; submitting into a live session never
        comes here.
        """
        live = self.store.find_sessions(
            None,
            [SessionState.NOT_STARTED, SessionState.RUNNING],
            size=min(self.settings.max_sessions * 4 + 100, 10_000),
        )
        count = sum(1 for s in live if s.doc.session_type == SessionType.INTERACTIVE and self.looks_alive(s.doc))
        if count >= self.settings.max_sessions:
            raise TooManyRequestsError(f"domain concurrent active session can not exceed {self.settings.max_sessions}")

    def _new_session(self, datasource: Datasource) -> Versioned[SessionDoc]:
        session_id = new_id(datasource.name)
        launcher = self.launcher_for(datasource)
        conf, secret = job_conf(self.settings, datasource, self.opensearch, session_id, SessionType.INTERACTIVE)
        job_id = launcher.start(JobRequest(session_id, datasource, SessionType.INTERACTIVE, conf, secret))
        doc = SessionDoc(
            session_id=session_id,
            session_type=SessionType.INTERACTIVE,
            data_source_name=datasource.name,
            application_id=launcher.application_id,
            job_id=job_id,
            heartbeat_interval_millis=self.settings.heartbeat_idle_ms,
        )
        try:
            return self.store.create_session(doc)
        except AsyncQueryError:
            with contextlib.suppress(AsyncQueryError):  # keep the original error
                launcher.cancel(job_id)
            raise

    # -- GET --------------------------------------------------------------------------------

    def get(self, query_id: str) -> bytes:
        """The JSON reply for GET (bytes: the result rows are passed through as stored)."""
        cached = self.replies.get(query_id)
        if cached is not None:
            return cached
        statement, session = self._statement_and_session(query_id)
        if not is_terminal(statement.doc.state):
            if session is None:
                session = self.store.get_session(statement.doc.data_source_name, statement.doc.session_id)
            if session is not None:
                session = self.liveness.check(session)
            statement = self.reconcile(statement, session)
        reply = self._reply(statement, session)
        if is_terminal(statement.doc.state):
            self.replies.put(query_id, reply)
        return reply

    def _datasource_of_query(self, query_id: str) -> str:
        datasource = datasource_of(query_id)
        try:
            self.datasources.get(datasource)
        except UnknownDatasourceError:
            raise QueryNotFoundError(f"no async query with id {query_id}") from None
        return datasource

    def _statement(self, query_id: str) -> Versioned[StatementDoc]:
        statement = self.store.get_statement(self._datasource_of_query(query_id), query_id)
        if statement is None:
            raise QueryNotFoundError(f"no async query with id {query_id}")
        return statement

    def _statement_and_session(self, query_id: str) -> tuple[Versioned[StatementDoc], Versioned[SessionDoc] | None]:
        """The statement, and its session when this process knows which it is (from the POST or an
        earlier GET): then both come in one real-time round trip."""
        datasource = self._datasource_of_query(query_id)
        session_id = self.session_of_query.get(query_id)
        if session_id is None:
            statement = self._statement(query_id)
            self.session_of_query.put(query_id, statement.doc.session_id)
            return statement, None
        found, session = self.store.get_statement_and_session(datasource, query_id, session_id)
        if found is None:
            raise QueryNotFoundError(f"no async query with id {query_id}")
        return found, session

    def reconcile(
        self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None
    ) -> Versioned[StatementDoc]:
        """A statement that is not finished, in a session that is, never will be: fail it."""
        if session is None or not is_terminal(session.doc.state):
            return statement
        reason = session.doc.error or f"session {session.doc.session_id} is {session.doc.state.value}"
        return self._fail_statement(statement, f"Session ended before the statement finished: {reason}")

    def _fail_statement(self, statement: Versioned[StatementDoc], error: str) -> Versioned[StatementDoc]:
        return fail_statement(self.store, statement, error)

    def _rereader(self, doc: StatementDoc) -> Callable[[], Versioned[StatementDoc] | None]:
        return lambda: self.store.get_statement(doc.data_source_name, doc.statement_id)

    def _reply(self, statement: Versioned[StatementDoc], session: Versioned[SessionDoc] | None = None) -> bytes:
        doc = statement.doc
        status = doc.state.value.upper()
        if doc.state != StatementState.SUCCESS:
            body: dict[str, Any] = {"status": status}
            if doc.error or doc.state in (StatementState.FAILED, StatementState.TIMEOUT):
                body["error"] = doc.error
            progress = _progress_of(doc.query_id, session) if doc.state == StatementState.RUNNING else None
            if progress is not None:
                body["progress"] = progress
            return _json(body)
        datasource = self.datasources.get(doc.data_source_name)
        result = self.store.get_result(datasource.results, doc.query_id)
        if result is None:
            # The job writes the result before it marks the statement success; a missing result
            # means it was deleted (housekeeping) or never written by a foreign job.
            return _json({"status": "FAILED", "error": "The result of this query is no longer available"})
        return success_reply(result)

    # -- listing ----------------------------------------------------------------------------

    def sessions(
        self, datasource: str | None = None, states: list[SessionState] | None = None, size: int = 100
    ) -> list[SessionDoc]:
        """Sessions, most recently active first (a search: it lags writes by up to a refresh)."""
        if datasource is not None:
            self.datasources.get(datasource)
        wanted = states or list(SessionState)
        return [v.doc for v in self.store.find_sessions(datasource, wanted, size=size)]

    # -- DELETE -----------------------------------------------------------------------------

    def cancel(self, query_id: str) -> None:
        statement = self._statement(query_id)

        cancelled_from: list[StatementState] = []  # the state of the version the cancel was written over

        def change(current: Versioned[StatementDoc]) -> Versioned[StatementDoc]:
            if is_terminal(current.doc.state):
                raise InvalidTransitionError(f"can't cancel query {query_id}: it is already {current.doc.state.value}")
            cancelled = self.store.move_statement(current, StatementState.CANCELLED)
            cancelled_from.append(current.doc.state)
            return cancelled

        if self.store.update_with_retry(self._rereader(statement.doc), change, first=statement) is None:
            # The re-read after a lost race found nothing: the statement was deleted meanwhile.
            raise QueryNotFoundError(f"no async query with id {query_id}")
        # A waiting statement never starts once cancelled (the job's move to running is
        # conditional). A running one is supervised until a heartbeat shows its work stopped;
        # past the deadline its session's job is cancelled.
        if cancelled_from[-1] == StatementState.RUNNING:
            self.supervisor.watch(query_id, statement.doc.data_source_name, statement.doc.session_id)
        log.info("cancelled query %s", query_id)

    def close(self) -> None:
        self.supervisor.stop()
        self.housekeeper.stop()
        launchers = [*self.launchers.values(), *(launcher for _, launcher in self._emr_launchers.values())]
        for launcher in launchers:
            launcher.close()


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json(value: Any) -> bytes:
    return _json_text(value).encode()


def _progress_of(query_id: str, session: Versioned[SessionDoc] | None) -> dict[str, int] | None:
    """Spark's progress for a running statement, from its session's last heartbeat."""
    if session is None:
        return None
    for running in session.doc.running_statements:
        if running.query_id == query_id and running.progress is not None:
            return running.progress.model_dump(by_alias=True)
    return None


def success_reply(result: ResultDoc) -> bytes:
    """The SUCCESS reply, splicing the stored lossless rows (exact JSON text) without re-parsing."""
    if result.lossless is not None:
        schema = _json_text([c.model_dump() for c in result.lossless.schema_])
        total = result.lossless.total
        rows = result.lossless.datarows
    else:
        try:
            schema_list, row_list = reference_rows(result)
        except (ValueError, KeyError, TypeError, AttributeError):
            # The reference's quote-swapped encoding cannot hold every value (a quote in a
            # string breaks it): say so rather than guess.
            return _json(
                {
                    "status": "FAILED",
                    "error": "The result was written in the reference's lossy form and cannot be read back",
                }
            )
        schema, rows, total = (
            _json_text(schema_list),
            _json_text(row_list),
            len(row_list),
        )
    text = f'{{"status":"SUCCESS","schema":{schema},"datarows":{rows},"total":{total},"size":{total}}}'
    return text.encode()


def reference_rows(result: ResultDoc) -> tuple[list[dict[str, str]], list[list[Any]]]:
    """Schema and rows from the reference's lossy encoding (for results written by its job)."""
    columns = [json.loads(c.replace("'", '"')) for c in result.schema_]
    schema = [{"name": c["column_name"], "type": c["data_type"]} for c in columns]
    rows = []
    for text in result.result:
        row = json.loads(text.replace("'", '"'))
        rows.append([row.get(c["name"]) for c in schema])
    return schema, rows
