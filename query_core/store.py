"""All index access. No other module talks to the OpenSearch client.

- Indexes are created lazily, from ``index_mappings``, the first time a write finds them missing.
- Writes are create-only, or conditional on ``_seq_no``/``_primary_term``; a lost race surfaces as
  :class:`~query_core.errors.ConflictError` and the caller re-reads.
- Every state change goes through :func:`query_core.states.check_move` here, in :meth:`_move`.
- Hot paths read by id (real-time); searches are used only where a refresh delay is acceptable.
- Transient failures (connection refused/reset, timeouts, 429, 502/503/504) are retried with
  ``tenacity``, bounded in attempts and time, then raised as ``IndexUnavailableError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_exc
from tenacity import RetryCallState

import index_mappings
from query_core.config import OpenSearchConfig
from query_core.errors import (
    AsyncQueryError,
    DocumentExistsError,
    IndexOperationError,
    IndexUnavailableError,
    InvalidRequestError,
    InvalidTransitionError,
    UnknownFieldError,
    VersionConflictError,
)
from query_core.ids import request_index
from query_core.models import FlintIndexStateDoc, ResultDoc, SessionDoc, StatementDoc, Versioned, now_millis
from query_core.realtime import AsyncRealtimeReader, ReadNotServed, ReadTimedOut, RealtimeReader
from query_core.retry import bounded_retrying
from query_core.states import FlintIndexState, SessionState, StatementState, can_remove_index_state, check_move

log = logging.getLogger(__name__)

T = TypeVar("T")
_TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
#: Where datasources created over REST are kept (the reference's index name).
DATASOURCE_INDEX = ".ql-datasources"
#: How long ago a waiting statement may have been submitted and still be found by a search.
WAITING_LOOKBACK = "now-1h"


def quiet_driver_logs() -> None:
    """opensearch-py logs every request (INFO) and every 404 (WARNING); this module reports what
    matters itself, translated. Called by the programs (service and job), not on import."""
    logging.getLogger("opensearch").setLevel(logging.ERROR)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, os_exc.ConnectionError):  # includes ConnectionTimeout and refused/reset
        return True
    return isinstance(exc, os_exc.TransportError) and exc.status_code in _TRANSIENT_STATUS


def _reason(exc: os_exc.TransportError) -> str:
    info = exc.info
    if isinstance(info, dict):
        err = info.get("error")
        if isinstance(err, dict):
            return f"{err.get('type', 'error')}: {err.get('reason', '')}"
    return str(exc.error)


def translate(exc: Exception, what: str) -> AsyncQueryError:
    """One opensearch-py exception as the product's exception."""
    if isinstance(exc, os_exc.ConflictError):
        if "document already exists" in _reason(exc):
            return DocumentExistsError(f"{what}: document already exists")
        return VersionConflictError(f"{what}: {_reason(exc)}")
    if _is_transient(exc):
        return IndexUnavailableError(f"{what}: index server unavailable ({type(exc).__name__})")
    if isinstance(exc, os_exc.RequestError):
        return InvalidRequestError(f"{what}: {_reason(exc)}")
    if isinstance(exc, os_exc.TransportError):
        return IndexOperationError(f"{what}: {exc.status_code} {_reason(exc)}")
    return IndexOperationError(f"{what}: {type(exc).__name__}")


def build_client(cfg: OpenSearchConfig) -> OpenSearch:
    """An opensearch-py client with its own retries off (this module retries with tenacity)."""
    kwargs: dict[str, Any] = {
        "hosts": [cfg.url],
        "timeout": cfg.request_timeout,
        "max_retries": 0,
        "retry_on_timeout": False,
        "pool_maxsize": cfg.pool_maxsize,
        "http_compress": False,
    }
    if cfg.scheme == "https":
        kwargs["verify_certs"] = cfg.verify_certs
        kwargs["ssl_show_warn"] = cfg.verify_certs
        if cfg.ca_certs:
            kwargs["ca_certs"] = cfg.ca_certs
    if cfg.auth == "basic":
        kwargs["http_auth"] = (cfg.username, cfg.password)
    elif cfg.auth == "sigv4":
        import boto3
        from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

        credentials = boto3.Session().get_credentials()
        kwargs["http_auth"] = AWSV4SignerAuth(credentials, cfg.region, "es")
        kwargs["connection_class"] = RequestsHttpConnection
    return OpenSearch(**kwargs)


class IndexStore:
    """The request and result indexes of every datasource, behind typed, state-checked calls."""

    def __init__(self, cfg: OpenSearchConfig, client: OpenSearch | None = None) -> None:
        self.cfg = cfg
        self.client = client if client is not None else build_client(cfg)
        self._known_indexes: set[str] = set()
        self._known_templates: set[str] = set()
        # The lean reader only for a client this store built: a client handed in (a test's, say)
        # is used as it is, for every call.
        self._reader = RealtimeReader(cfg) if client is None and RealtimeReader.usable(cfg) else None
        self._async_reader = AsyncRealtimeReader(self._reader) if self._reader is not None else None
        #: Called with a document's id after this process wrote it (or tried to: a conflict means
        #: someone else did), so caches of documents can drop their copy.
        self.write_listeners: list[Callable[[str], None]] = []

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one driver call with bounded retries of transient failures; translate errors.

        The first attempt is made directly: the retry machinery is set up only once a transient
        failure asks for it (it costs as much as a fast read's own parsing, on every call).
        """
        started = time.monotonic()
        try:
            return fn()
        except os_exc.OpenSearchException as exc:
            if isinstance(exc, os_exc.ConnectionError):
                self._forget_indexes()
            if not _is_transient(exc):
                raise translate(exc, what) from exc
            failed_first: os_exc.OpenSearchException | None = exc
        log.warning("index call %s failed (%s)", what, type(failed_first).__name__)

        def again() -> T:
            nonlocal failed_first
            if failed_first is not None:  # attempt 1 is the one that just failed
                first, failed_first = failed_first, None
                raise first
            return fn()

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, os_exc.ConnectionError):
                self._forget_indexes()
            if state.attempt_number > 1:
                log.warning("index call %s failed (%s), retry %d", what, type(exc).__name__, state.attempt_number)

        retrying = bounded_retrying(
            _is_transient,
            attempts=self.cfg.retry_attempts,
            # The time bound counts from the first attempt, made before the retrying started.
            seconds=self.cfg.retry_seconds - (time.monotonic() - started),
            first_wait=0.05,
            max_wait=2.0,
            jitter=0.1,
            before_sleep=before_sleep,
        )
        try:
            return retrying(again)
        except os_exc.OpenSearchException as exc:
            if isinstance(exc, os_exc.ConnectionError):
                self._forget_indexes()
            raise translate(exc, what) from exc

    def _forget_indexes(self) -> None:
        """After losing the connection, check indexes and templates again before the next write:
        the server may have restarted without them (an in-memory one does)."""
        self._known_indexes.clear()
        self._known_templates.clear()

    def _ensure_template(self, kind: index_mappings.IndexKind) -> None:
        """An index template for the kind, so that an index the cluster creates by itself (on a
        write after the index was lost, say) still gets our mappings. Once per kind per process;
        a cluster that refuses templates (no permission) is logged and otherwise ignored."""
        if kind in self._known_templates:
            return
        name = f"async-query-{kind.replace('_', '-')}"
        template = {
            "index_patterns": [_TEMPLATE_PATTERNS[kind]],
            "priority": 100,
            "template": index_mappings.load(kind),
        }

        def put_if_missing() -> None:
            if not self.client.indices.exists_index_template(name=name):
                self.client.indices.put_index_template(name=name, body=template)

        try:
            self._call(f"put template {kind}", put_if_missing)
        except (IndexUnavailableError, InvalidRequestError, IndexOperationError) as exc:
            log.warning("cannot install the index template for %s: %s", kind, exc)
        self._known_templates.add(kind)

    def _ensure_index(self, index: str, recheck: bool = False) -> None:
        if recheck:
            self._known_indexes.discard(index)
            self._known_templates.discard(_index_kind(index))
        if index in self._known_indexes:
            return
        kind = _index_kind(index)
        self._ensure_template(kind)

        def create() -> None:
            if self.client.indices.exists(index=index):
                return
            try:
                self.client.indices.create(index=index, body=index_mappings.load(kind))
                log.info("created index %s", index)
            except os_exc.RequestError as exc:
                if "resource_already_exists" not in str(exc.error):
                    raise

        self._call(f"create index {index}", create)
        self._known_indexes.add(index)

    def _write(self, index: str, what: str, fn: Callable[[], T], recheck: bool = False) -> T:
        """A write, after making sure its index exists with our mappings.

        The check runs once per index per process, and again when ``recheck`` asks (new sessions
        do: an index server that lost its indexes also lost every session). It must come first:
        a cluster creates a missing index on a first write by itself, with dynamic mappings that
        break our queries.
        """
        self._ensure_index(index, recheck)
        return self._call(what, fn)

    # -- generic document calls -------------------------------------------------------------

    def create(self, index: str, doc_id: str, source: dict[str, Any], recheck: bool = False) -> tuple[int, int]:
        """Create-only write; :class:`DocumentExistsError` when the id is taken."""
        attempts = 0

        def call() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            try:
                return self.client.index(index=index, id=doc_id, body=source, op_type="create")
            except os_exc.ConflictError:
                if attempts > 1 and self._source_is(index, doc_id, source):
                    return self.client.get(index=index, id=doc_id, _source="false")  # our own retry
                raise

        try:
            res = self._write(index, f"create {index}/{doc_id}", call, recheck)
        finally:
            self._wrote(doc_id)
        return res["_seq_no"], res["_primary_term"]

    def _source_is(self, index: str, doc_id: str, source: dict[str, Any]) -> bool:
        try:
            found = self.client.get(index=index, id=doc_id)
        except os_exc.OpenSearchException:
            return False
        return bool(found.get("_source") == source)

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> None:
        """Idempotent overwrite, for documents whose id makes a retry harmless (results)."""
        self._write(index, f"put {index}/{doc_id}", lambda: self.client.index(index=index, id=doc_id, body=source))

    def get(self, index: str, doc_id: str) -> tuple[dict[str, Any], int, int] | None:
        """Real-time get by id: the source and its version, or None.

        Read on a lean connection (:mod:`query_core.realtime`), and through the driver when that
        cannot answer for sure; a timeout of either is retried as any transient failure is.
        """
        reader = self._reader

        def call() -> dict[str, Any] | None:
            if reader is not None:
                try:
                    return reader.get(index, doc_id)
                except ReadNotServed:
                    pass
            try:
                return self.client.get(index=index, id=doc_id)
            except os_exc.NotFoundError:
                return None

        res = self._call(f"get {index}/{doc_id}", call)
        if res is None or not res.get("found"):
            return None
        return res["_source"], res["_seq_no"], res["_primary_term"]

    def update_if(
        self, index: str, doc_id: str, partial: dict[str, Any], seq_no: int, primary_term: int
    ) -> tuple[int, int]:
        """Partial update applied only if the document is still at ``seq_no``/``primary_term``.

        A document deleted meanwhile is no longer at that version either: that too is a
        :class:`VersionConflictError`, and the caller's re-read finds nothing.
        """

        def call() -> dict[str, Any]:
            try:
                return self.client.update(
                    index=index, id=doc_id, body={"doc": partial}, if_seq_no=seq_no, if_primary_term=primary_term
                )
            except os_exc.NotFoundError as exc:
                raise VersionConflictError(f"update {index}/{doc_id}: {_reason(exc)}") from exc

        try:
            res = self._call(f"update {index}/{doc_id}", call)
        finally:
            self._wrote(doc_id)
        return res["_seq_no"], res["_primary_term"]

    def _wrote(self, doc_id: str) -> None:
        for listener in self.write_listeners:
            listener(doc_id)

    def search(self, index: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any], int, int]]:
        """A search (sees writes only after a refresh); a missing index is an empty answer."""

        def call() -> dict[str, Any]:
            try:
                return self.client.search(index=index, body=body, seq_no_primary_term=True)
            except os_exc.NotFoundError:
                return {"hits": {"hits": []}}

        res = self._call(f"search {index}", call)
        return [(h["_id"], h["_source"], h["_seq_no"], h["_primary_term"]) for h in res["hits"]["hits"]]

    def delete_older_than(
        self, index: str, field: str, before_millis: int, extra: list[dict[str, Any]] | None = None
    ) -> int:
        """Delete documents whose ``field`` is older than ``before_millis``; returns how many."""
        query = {"bool": {"filter": [{"range": {field: {"lt": before_millis}}}, *(extra or [])]}}

        def call() -> dict[str, Any]:
            try:
                return self.client.delete_by_query(index=index, body={"query": query}, conflicts="proceed")
            except os_exc.NotFoundError:
                return {"deleted": 0}

        return int(self._call(f"delete_by_query {index}", call).get("deleted", 0))

    def acquire_lease(self, index: str, lease_id: str, owner: str, lease_ms: int) -> bool:
        """Take or renew a lease document; False while another owner holds an unexpired one."""
        now = now_millis()
        body = {"type": "lease", "owner": owner, "lastUpdateTime": now, "expires": now + lease_ms}
        found = self.get(index, lease_id)
        try:
            if found is None:
                self.create(index, lease_id, body)
                return True
            source, seq_no, primary_term = found
            if source.get("owner") != owner and int(source.get("expires", 0)) > now:
                return False
            self.update_if(index, lease_id, body, seq_no, primary_term)
            return True
        except (DocumentExistsError, VersionConflictError):
            return False

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except os_exc.OpenSearchException:
            return False

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self.client.close()

    # -- data indexes written by Spark (Flint indexes) --------------------------------------

    def create_index(self, index: str, body: dict[str, Any]) -> bool:
        """Create ``index`` with ``body`` (settings, mappings) unless it exists; True if created."""

        def create() -> bool:
            try:
                self.client.indices.create(index=index, body=body)
                return True
            except os_exc.RequestError as exc:
                if "resource_already_exists" in str(exc.error):
                    return False
                raise

        return self._call(f"create index {index}", create)

    def delete_all(self, index: str) -> int:
        """Delete every document of ``index`` (the index and its mapping stay); returns how many."""
        call = partial(self.client.delete_by_query, index=index, body={"query": {"match_all": {}}}, conflicts="proceed")
        return int(self._call(f"delete_by_query {index}", call).get("deleted", 0))

    def bulk_index(self, index: str, docs: list[tuple[str | None, dict[str, Any]]]) -> int:
        """Index documents (id None: the server picks one) in one ``_bulk`` request per try.

        Items refused for a transient reason (429, 5xx) are sent again, boundedly, like a failed
        request; an item refused for good (a mapping conflict, say) raises ``IndexOperationError``
        with its reason. With ids, a retried write overwrites itself: nothing is duplicated.
        Returns how many documents were indexed.
        """
        pending = list(docs)
        attempts = 0
        while pending:
            attempts += 1
            body: list[dict[str, Any]] = []
            for doc_id, source in pending:
                body += [{"index": {"_index": index, **({"_id": doc_id} if doc_id is not None else {})}}, source]
            res = self._call(f"bulk {index}", partial(self.client.bulk, body=body))
            retry: list[tuple[str | None, dict[str, Any]]] = []
            for item, doc in zip(res.get("items", []), pending, strict=True):
                result = item.get("index", {})
                status = int(result.get("status", 500))
                if status < 300:
                    continue
                if status not in _TRANSIENT_STATUS or attempts >= self.cfg.retry_attempts:
                    error = result.get("error", {})
                    reason = (
                        f"{error.get('type', 'error')}: {error.get('reason', '')}" if isinstance(error, dict) else error
                    )
                    raise IndexOperationError(
                        f"bulk {index}: document {doc[0] or '(new)'} refused ({status}): {reason}"
                    )
                retry.append(doc)
            if retry:
                log.warning("bulk %s: %d of %d documents refused for now, retrying", index, len(retry), len(pending))
                time.sleep(min(2.0, 0.05 * 2**attempts))
            pending = retry
        return len(docs)

    def index_exists(self, index: str) -> bool:
        return bool(self._call(f"exists {index}", lambda: self.client.indices.exists(index=index)))

    def delete_index(self, index: str) -> bool:
        """Delete ``index`` and its documents; False when there was none."""

        def call() -> bool:
            try:
                self.client.indices.delete(index=index)
                return True
            except os_exc.NotFoundError:
                return False

        return self._call(f"delete index {index}", call)

    def index_metas(self, pattern: str) -> dict[str, dict[str, Any]]:
        """The mapping ``_meta`` of every index matching ``pattern`` (a name or a wildcard), by
        index name; an index without ``_meta`` maps to ``{}``, no match is an empty dict."""

        def call() -> dict[str, Any]:
            try:
                return dict(self.client.indices.get_mapping(index=pattern, allow_no_indices=True))
            except os_exc.NotFoundError:
                return {}

        found = self._call(f"get mapping {pattern}", call)
        return {name: dict(entry.get("mappings", {}).get("_meta", {})) for name, entry in found.items()}

    def put_index_meta(self, index: str, meta: dict[str, Any]) -> None:
        """Replace the mapping ``_meta`` of ``index`` (the reference keeps index metadata there)."""
        self._call(f"put mapping {index}", lambda: self.client.indices.put_mapping(index=index, body={"_meta": meta}))

    # -- whole indexes (the embedded index's snapshots) -------------------------------------

    def write_marks(self) -> dict[str, tuple[int, int]]:
        """Per index, a mark that changes with every write: (writes so far, documents)."""
        stats = self._call("index stats", lambda: self.client.indices.stats())
        marks = {}
        for name, entry in stats.get("indices", {}).items():
            primaries = entry.get("primaries", {})
            writes = int(primaries.get("indexing", {}).get("index_total", 0))
            marks[name] = (writes, int(primaries.get("docs", {}).get("count", 0)))
        return marks

    def index_definition(self, index: str) -> dict[str, Any]:
        """The index's mappings and settings, without what the cluster assigns (uuid, dates...)."""
        found = self._call(f"get index {index}", lambda: self.client.indices.get(index=index))[index]
        settings = {k: v for k, v in found.get("settings", {}).get("index", {}).items() if k not in _ASSIGNED_SETTINGS}
        return {"settings": {"index": settings}, "mappings": found.get("mappings", {})}

    def scan(self, index: str, batch: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every document of the index as (id, source), in batches of a scroll."""
        page = self._call(
            f"scan {index}",
            lambda: self.client.search(index=index, body={"size": batch, "sort": ["_doc"]}, scroll="1m"),
        )
        scroll_id = page.get("_scroll_id")
        try:
            while page["hits"]["hits"]:
                for hit in page["hits"]["hits"]:
                    yield hit["_id"], hit["_source"]
                if not scroll_id:
                    return
                page = self._call(f"scan {index}", partial(self.client.scroll, scroll_id=scroll_id, scroll="1m"))
                scroll_id = page.get("_scroll_id", scroll_id)
        finally:
            if scroll_id:
                try:
                    self.client.clear_scroll(scroll_id=scroll_id)
                except os_exc.OpenSearchException:
                    pass

    # -- statements -------------------------------------------------------------------------
    #
    # The request index is derived from the datasource name, unless ``index`` names it: the job is
    # told its request index (``spark.flint.job.requestIndex``), which the reference plugin may
    # choose otherwise.

    def create_statement(self, doc: StatementDoc, *, index: str | None = None) -> Versioned[StatementDoc]:
        seq, term = self.create(index or request_index(doc.data_source_name), doc.statement_id, doc.to_source())
        return Versioned(doc, seq, term)

    def get_many(self, index: str, doc_ids: list[str]) -> list[tuple[dict[str, Any], int, int] | None]:
        """Real-time multi-get: one round trip for several documents of one index."""

        def call() -> dict[str, Any]:
            try:
                return self.client.mget(index=index, body={"ids": doc_ids})
            except os_exc.NotFoundError:
                return {"docs": []}

        docs = {d["_id"]: d for d in self._call(f"mget {index}", call).get("docs", []) if d.get("found")}
        return [(d["_source"], d["_seq_no"], d["_primary_term"]) if (d := docs.get(i)) else None for i in doc_ids]

    def get_statement_and_session(
        self, datasource: str, statement_id: str, session_id: str
    ) -> tuple[Versioned[StatementDoc] | None, Versioned[SessionDoc] | None]:
        """A statement and its session, read in real time (GET's hot path): two reads on the lean
        connection, which cost less than one multi-get through the driver, or that multi-get."""
        index = request_index(datasource)
        if self._reader is not None:
            statement, session = self.get(index, statement_id), self.get(index, session_id)
        else:
            statement, session = self.get_many(index, [statement_id, session_id])
        return _versioned(StatementDoc, "statement", statement), _versioned(SessionDoc, "session", session)

    async def get_statement_and_session_async(
        self, datasource: str, statement_id: str, session_id: str | None = None
    ) -> tuple[Versioned[StatementDoc] | None, Versioned[SessionDoc] | None]:
        """A statement (and its session, if ``session_id`` is given) read in real time on the
        event loop, concurrently (GET's hot path, which then needs no worker thread).

        Raises :class:`~query_core.realtime.ReadNotServed` when they cannot be had that way (no
        lean reader, or any failure): the caller then reads the blocking way, with retries. A read
        that times out is :class:`IndexUnavailableError`, as a blocking one would be.
        """
        reader = self._async_reader
        if reader is None:
            raise ReadNotServed("no lean reader")
        index = request_index(datasource)
        replies: list[dict[str, Any] | None]
        try:
            if session_id is None:
                replies = [await reader.get(index, statement_id)]
            else:
                replies = list(await asyncio.gather(reader.get(index, statement_id), reader.get(index, session_id)))
        except ReadTimedOut as exc:
            # As a blocking read would end after its timeout (the retry budget is no longer).
            raise IndexUnavailableError(f"get {index}/{statement_id}: index server unavailable ({exc})") from exc
        found = [
            (r["_source"], r["_seq_no"], r["_primary_term"]) if r is not None and r.get("found") else None
            for r in replies
        ]
        session = _versioned(SessionDoc, "session", found[1]) if session_id is not None else None
        return _versioned(StatementDoc, "statement", found[0]), session

    def get_statement(
        self, datasource: str, statement_id: str, *, index: str | None = None
    ) -> Versioned[StatementDoc] | None:
        return _versioned(StatementDoc, "statement", self.get(index or request_index(datasource), statement_id))

    def move_statement(
        self, current: Versioned[StatementDoc], state: StatementState, *, index: str | None = None, **fields: Any
    ) -> Versioned[StatementDoc]:
        """Conditional state move; raises ``InvalidTransitionError`` or ``VersionConflictError``,
        and :class:`UnknownFieldError` for a keyword that is no field of a statement."""
        return self._move(current, state, f"statement {current.doc.statement_id}", fields, index)

    def find_waiting_statements(
        self, datasource: str, session_id: str, size: int = 10, *, index: str | None = None
    ) -> list[Versioned[StatementDoc]]:
        """This session's waiting statements, oldest first, as the reference job finds them.

        A search: it sees a new statement only after the index refreshes. The job uses it as the
        fallback behind the real-time signal in the session document.
        """
        body = {
            "size": size,
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"type": "statement"}},
                        {"term": {"sessionId": session_id}},
                        {"term": {"state": StatementState.WAITING.value}},
                        {"range": {"submitTime": {"gte": WAITING_LOOKBACK}}},
                    ]
                }
            },
            "sort": [{"submitTime": {"order": "asc"}}],
        }
        hits = self.search(index or request_index(datasource), body)
        return [Versioned(StatementDoc.model_validate(src), seq, term) for _, src, seq, term in hits]

    def find_unfinished_statements(
        self, datasource: str, session_id: str, size: int = 1000, *, index: str | None = None
    ) -> list[Versioned[StatementDoc]]:
        body = {
            "size": size,
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"type": "statement"}},
                        {"term": {"sessionId": session_id}},
                        {"terms": {"state": [StatementState.WAITING.value, StatementState.RUNNING.value]}},
                    ]
                }
            },
        }
        hits = self.search(index or request_index(datasource), body)
        return [Versioned(StatementDoc.model_validate(src), seq, term) for _, src, seq, term in hits]

    # -- sessions ---------------------------------------------------------------------------

    def create_session(self, doc: SessionDoc, *, index: str | None = None) -> Versioned[SessionDoc]:
        seq, term = self.create(
            index or request_index(doc.data_source_name), doc.session_id, doc.to_source(), recheck=True
        )
        return Versioned(doc, seq, term)

    def get_session(
        self, datasource: str, session_id: str, *, index: str | None = None
    ) -> Versioned[SessionDoc] | None:
        return _versioned(SessionDoc, "session", self.get(index or request_index(datasource), session_id))

    def update_session(
        self,
        current: Versioned[SessionDoc],
        state: SessionState | None = None,
        *,
        index: str | None = None,
        **fields: Any,
    ) -> Versioned[SessionDoc]:
        """Conditional write of a session (a heartbeat when ``state`` is None: it stays as it is);
        :class:`UnknownFieldError` for a keyword that is no field of a session."""
        target = state if state is not None else current.doc.state
        return self._move(current, target, f"session {current.doc.session_id}", fields, index)

    def find_sessions(
        self, datasource: str | None, states: list[SessionState], size: int = 1000, job_id: str | None = None
    ) -> list[Versioned[SessionDoc]]:
        """Sessions in the given states, of one job if ``job_id`` is given (a search:
        refresh-delayed; for limits, listings and sweeps)."""
        index = request_index(datasource) if datasource else ".query_execution_request_*"
        filters: list[dict[str, Any]] = [{"term": {"type": "session"}}, {"terms": {"state": [s.value for s in states]}}]
        if job_id is not None:
            filters.append({"term": {"jobId": job_id}})
        body = {
            "size": size,
            "query": {"bool": {"filter": filters}},
            "sort": [{"lastUpdateTime": {"order": "desc"}}],
        }
        return [Versioned(SessionDoc.model_validate(src), seq, term) for _, src, seq, term in self.search(index, body)]

    def update_with_retry(
        self,
        reread: Callable[[], Versioned[Any] | None],
        change: Callable[[Versioned[Any]], Versioned[Any] | None],
        first: Versioned[Any] | None = None,
        attempts: int = 20,
    ) -> Versioned[Any] | None:
        """Apply ``change`` until no one else wrote in between, re-reading after each conflict.

        ``first`` is a version already in hand, tried before any read. ``change`` returns the
        written version, or None to give up (the document moved on in a way that makes the change
        moot). Returns the last written version, or None.
        """
        current = first
        for _ in range(attempts):
            if current is None:
                current = reread()
            if current is None:
                return None
            try:
                return change(current)
            except VersionConflictError:
                current = None
        raise VersionConflictError(f"gave up after {attempts} conflicting writes")

    # -- results ----------------------------------------------------------------------------

    def put_result(self, result_index: str, doc: ResultDoc) -> None:
        self.put(result_index, doc.query_id, doc.to_source())

    def get_result(self, result_index: str, query_id: str) -> ResultDoc | None:
        found = self.get(result_index, query_id)
        return None if found is None else ResultDoc.model_validate(found[0])

    # -- Flint index states -----------------------------------------------------------------

    def create_index_state(self, doc: FlintIndexStateDoc, *, index: str | None = None) -> Versioned[FlintIndexStateDoc]:
        """Create-only: :class:`DocumentExistsError` when the index already has a state."""
        seq, term = self.create(index or request_index(doc.data_source_name), doc.latest_id, doc.to_source())
        return Versioned(doc, seq, term)

    def get_index_state(
        self, datasource: str, latest_id: str, *, index: str | None = None
    ) -> Versioned[FlintIndexStateDoc] | None:
        found = self.get(index or request_index(datasource), latest_id)
        return _versioned(FlintIndexStateDoc, "flintindexstate", found)

    def move_index_state(
        self, current: Versioned[FlintIndexStateDoc], state: FlintIndexState, *, index: str | None = None, **fields: Any
    ) -> Versioned[FlintIndexStateDoc]:
        """Conditional state move of a Flint index (the transition table decides)."""
        return self._move(current, state, f"index state {current.doc.latest_id}", fields, index)

    def delete_index_state(self, current: Versioned[FlintIndexStateDoc], *, index: str | None = None) -> None:
        """Remove the state document, conditionally; only a vacuum in progress may."""
        doc = current.doc
        if not can_remove_index_state(doc.state):
            raise InvalidTransitionError(f"index state {doc.latest_id} is {doc.state.value}: only a vacuum removes it")
        target = index or request_index(doc.data_source_name)

        def call() -> None:
            self.client.delete(
                index=target, id=doc.latest_id, if_seq_no=current.seq_no, if_primary_term=current.primary_term
            )

        try:
            self._call(f"delete {target}/{doc.latest_id}", call)
        finally:
            self._wrote(doc.latest_id)

    def find_index_states(
        self,
        datasource: str | None,
        states: list[FlintIndexState] | None = None,
        job_id: str | None = None,
        size: int = 1000,
    ) -> list[Versioned[FlintIndexStateDoc]]:
        """Index state documents, by state and/or owning job (a search: refresh-delayed; for the
        housekeeping sweep, limits and cancels of long-running work, never for a fresh write)."""
        filters: list[dict[str, Any]] = [{"term": {"type": "flintindexstate"}}]
        if states is not None:
            filters.append({"terms": {"state": [s.value for s in states]}})
        if job_id is not None:
            filters.append({"term": {"jobId": job_id}})
        index = request_index(datasource) if datasource else ".query_execution_request_*"
        body = {"size": size, "query": {"bool": {"filter": filters}}}
        return [
            Versioned(FlintIndexStateDoc.model_validate(src), seq, term)
            for _, src, seq, term in self.search(index, body)
        ]

    # -- datasources created over REST -----------------------------------------------------

    def get_datasource(self, name: str) -> dict[str, Any] | None:
        found = self.get(DATASOURCE_INDEX, name)
        return None if found is None else found[0]

    def create_datasource(self, name: str, source: dict[str, Any]) -> None:
        self.create(DATASOURCE_INDEX, name, source)

    def replace_datasource(self, name: str, source: dict[str, Any]) -> bool:
        """Overwrite an existing datasource; False when there is none of that name."""
        found = self.get(DATASOURCE_INDEX, name)
        if found is None:
            return False
        self.update_if(DATASOURCE_INDEX, name, source, found[1], found[2])
        return True

    def delete_datasource(self, name: str) -> bool:
        def call() -> bool:
            try:
                self.client.delete(index=DATASOURCE_INDEX, id=name)
                return True
            except os_exc.NotFoundError:
                return False

        return self._call(f"delete datasource {name}", call)

    def list_datasources(self) -> list[dict[str, Any]]:
        return [src for _, src, _, _ in self.search(DATASOURCE_INDEX, {"size": 1000, "query": {"match_all": {}}})]

    # -- the one place where documents move -------------------------------------------------

    def _move(
        self, current: Versioned[Any], target: Any, what: str, fields: dict[str, Any], index: str | None
    ) -> Versioned[Any]:
        doc = current.doc
        _check_fields(doc, fields, what)
        check_move(doc.state, target, what)
        updated = doc.model_copy(update={**fields, "state": target})
        partial = {k: v for k, v in updated.to_source().items() if k in _changed_aliases(doc, fields) or k == "state"}
        index = index or request_index(doc.data_source_name)
        seq, term = self.update_if(index, _doc_id(doc), partial, current.seq_no, current.primary_term)
        return Versioned(updated, seq, term)


DocT = TypeVar("DocT", StatementDoc, SessionDoc, FlintIndexStateDoc)


def _versioned(
    model: type[DocT], doc_type: str, found: tuple[dict[str, Any], int, int] | None
) -> Versioned[DocT] | None:
    """A read document as its model with its version; None if absent or of another type."""
    if found is None or found[0].get("type") != doc_type:
        return None
    return Versioned(model.model_validate(found[0]), found[1], found[2])


def _index_kind(index: str) -> index_mappings.IndexKind:
    if index.startswith(".query_execution_request_"):
        return "request_index"
    if index == DATASOURCE_INDEX:
        return "datasource_index"
    return "result_index"


#: Index settings the cluster assigns itself; an index created from a snapshot gets new ones.
_ASSIGNED_SETTINGS = frozenset({"uuid", "creation_date", "provided_name", "version", "replication", "resize"})

_TEMPLATE_PATTERNS: dict[str, str] = {
    "request_index": ".query_execution_request_*",
    "result_index": "query_execution_result*",
    "datasource_index": DATASOURCE_INDEX,
}


def _check_fields(doc: Any, fields: dict[str, Any], what: str) -> None:
    """Refuse, before anything is written, a keyword that names no field of the document: the
    model keeps unknown names (``extra="allow"``), so a misspelt one would be stored as it is,
    and the field meant left unchanged."""
    model = type(doc)
    unknown = sorted(name for name in fields if name not in model.model_fields)
    if unknown:
        raise UnknownFieldError(
            f"write of {what}: {model.__name__} has no field {', '.join(map(repr, unknown))}"
            " (fields are named in snake_case)"
        )


def _changed_aliases(doc: Any, fields: dict[str, Any]) -> set[str]:
    model_fields = type(doc).model_fields
    return {model_fields[name].alias or name for name in fields}


def _doc_id(doc: Any) -> str:
    if isinstance(doc, FlintIndexStateDoc):
        return doc.latest_id
    return str(doc.statement_id if isinstance(doc, StatementDoc) else doc.session_id)
