"""The index client: the one user of opensearch-py (both interfaces of
:mod:`query_core.store.connector`), in parts that share one connection:

- :class:`ClusterConnection`: the driver, the call listeners and the call plumbing (retries,
  error translation) both sides use;
- :class:`IndexClient`: the documents (:class:`~query_core.store.connector.DocumentConnector`),
  with :class:`ProductIndexes`, the lazy creation of the product's own indexes and templates;
- :class:`ClusterAdmin` (``IndexClient.admin``): index administration
  (:class:`~query_core.store.connector.IndexAdmin`), the Flint data indexes.

- The product's own indexes (request, result, datasource) are created lazily, from
  ``index_mappings``, the first time a write finds them missing; an index template per kind makes
  an index the cluster creates by itself get the same mappings.
- Writes are create-only, or conditional on ``_seq_no``/``_primary_term``; a lost race surfaces as
  :class:`~query_core.errors.ConflictError` and the caller re-reads.
- Reads by id are real-time, on a lean connection where it can answer (:mod:`query_core.realtime`).
- Transient failures (connection refused/reset, timeouts, 429, 502/503/504) are retried with
  ``tenacity``, bounded in attempts and time, then raised as ``IndexUnavailableError``; every
  other driver error is translated into the product's exception hierarchy (:func:`translate`).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import quote

from opensearchpy import OpenSearch, Urllib3HttpConnection
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
    VersionConflictError,
)
from query_core.ids import (
    DATASOURCE_INDEX,
    REQUEST_INDEX_PATTERN,
    RESULT_INDEX_PATTERN,
    SCHEDULER_INDEX,
    USAGE_INDEX,
    index_kind,
)
from query_core.peer import check_peer
from query_core.realtime import AsyncRealtimeReader, ReadNotServed, ReadTimedOut, RealtimeReader
from query_core.retry import bounded_retrying
from query_core.store.connector import (
    CallListener,
    Filter,
    Found,
    Query,
    Term,
    Terms,
    Version,
    WriteListener,
    tell,
    tell_call,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
_TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
#: The most hits a cluster returns to one search (``index.max_result_window``'s default).
RESULT_WINDOW = 10_000


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


def call_outcome(exc: BaseException) -> str:
    """The outcome of a failed call as call listeners are told it (``CALL_OUTCOMES``)."""
    if isinstance(exc, os_exc.ConnectionError):
        return "unreachable"
    if isinstance(exc, os_exc.TransportError) and isinstance(exc.status_code, int):
        return f"{exc.status_code // 100}xx"
    return "error"


#: Second words that make an operation of their own ("create index" is not "create").
_OPERATION_OBJECTS = frozenset({"index", "template", "mapping", "stats"})


def operation_of(what: str) -> str:
    """The operation of a call as call listeners are told it: ``get``, ``create_index``... (a
    bounded set: never an index or document name)."""
    words = what.split(" ", 2)
    if len(words) > 1 and words[1] in _OPERATION_OBJECTS:
        return f"{words[0]}_{words[1]}"
    return words[0]


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


class CheckedConnection(Urllib3HttpConnection):
    """opensearch-py's connection whose every new socket is checked before it is used
    (:func:`query_core.peer.check_peer`: the embedded index's listener, not another user's)."""

    def __init__(self, *args: Any, peer_uid: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        base = self.pool.ConnectionCls

        class Checked(base):  # type: ignore[valid-type,misc]
            def _new_conn(self) -> socket.socket:
                sock: socket.socket = super()._new_conn()
                check_peer(sock, peer_uid)
                return sock

        self.pool.ConnectionCls = Checked


def build_client(cfg: OpenSearchConfig) -> OpenSearch:
    """An opensearch-py client with its own retries off (:class:`ClusterConnection` retries with tenacity)."""
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
    if cfg.peer_uid is not None:
        kwargs["connection_class"] = CheckedConnection
        kwargs["peer_uid"] = cfg.peer_uid
    if cfg.auth == "basic":
        kwargs["http_auth"] = (cfg.username, cfg.password)
    elif cfg.auth == "sigv4":
        import boto3
        from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

        credentials = boto3.Session().get_credentials()
        kwargs["http_auth"] = AWSV4SignerAuth(credentials, cfg.region, "es")
        kwargs["connection_class"] = RequestsHttpConnection
    return OpenSearch(**kwargs)


class ClusterConnection:
    """One cluster as both sides of the client share it (:class:`IndexClient`, its documents, and
    :class:`ClusterAdmin`, its indexes): the driver, the call listeners, and the call plumbing
    (bounded retries of transient failures, error translation, telling the listeners). A lost
    connection is told to ``on_lost`` (the product's indexes are then checked again)."""

    def __init__(self, cfg: OpenSearchConfig, client: OpenSearch | None = None) -> None:
        self.cfg = cfg
        self.driver = client if client is not None else build_client(cfg)
        self.call_listeners: list[CallListener] = []
        self.on_lost: list[Callable[[], None]] = []

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one driver call with bounded retries of transient failures; translate errors.

        The first attempt is made directly: the retry machinery is set up only once a transient
        failure asks for it (it costs as much as a fast read's own parsing, on every call).
        """
        started = time.monotonic()
        try:
            answer = fn()
        except os_exc.OpenSearchException as exc:
            if isinstance(exc, os_exc.ConnectionError):
                self._lost()
            if not _is_transient(exc):
                self.tell(what, call_outcome(exc), 0)
                raise translate(exc, what) from exc
            failed_first: os_exc.OpenSearchException | None = exc
        else:
            if self.call_listeners:
                tell_call(self.call_listeners, operation_of(what), "2xx")
            return answer
        log.warning("index call %s failed (%s)", what, type(failed_first).__name__)
        retries = 0

        def again() -> T:
            nonlocal failed_first
            if failed_first is not None:  # attempt 1 is the one that just failed
                first, failed_first = failed_first, None
                raise first
            return fn()

        def before_sleep(state: RetryCallState) -> None:
            nonlocal retries
            retries = state.attempt_number
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, os_exc.ConnectionError):
                self._lost()
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
            answer = retrying(again)
        except os_exc.OpenSearchException as exc:
            if isinstance(exc, os_exc.ConnectionError):
                self._lost()
            self.tell(what, call_outcome(exc), retries)
            raise translate(exc, what) from exc
        self.tell(what, "2xx", retries)
        return answer

    def tell(self, what: str, outcome: str, retries: int) -> None:
        if self.call_listeners:
            tell_call(self.call_listeners, operation_of(what), outcome, retries)

    def _lost(self) -> None:
        for listener in self.on_lost:
            listener()

    def ping(self) -> bool:
        try:
            return bool(self.driver.ping())
        except os_exc.OpenSearchException:
            return False

    def close(self) -> None:
        self.driver.close()


class _ClusterSide:
    """What both sides of the client have: the shared connection, its call listeners, a ping and
    a close (of the connection both use)."""

    def __init__(self, connection: ClusterConnection) -> None:
        self.cfg = connection.cfg
        self._connection = connection
        self._client = connection.driver
        #: The connection's own list: a listener added on either side hears the calls of both.
        self.call_listeners = connection.call_listeners

    @property
    def driver(self) -> OpenSearch:
        """The opensearch-py client itself, for tests and benchmarks that look at the server (its
        stats, a document's ``_version``); the product never uses it outside this module."""
        return self._client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return self._connection.call(what, fn)

    def _tell(self, what: str, outcome: str, retries: int) -> None:
        self._connection.tell(what, outcome, retries)

    def ping(self) -> bool:
        return self._connection.ping()

    def close(self) -> None:
        self._connection.close()


class ProductIndexes:
    """The product's own indexes (request, result, datasource), made sure of before a document
    write: created from ``index_mappings`` when missing, with an index template per kind, and the
    fields of our mappings added to an index an older version made. Each check runs once per
    index per process, and again after the connection was lost."""

    def __init__(self, connection: ClusterConnection) -> None:
        self._connection = connection
        self._client = connection.driver
        self._known_indexes: set[str] = set()
        self._known_templates: set[str] = set()
        #: Existing indexes whose mappings were brought up to date (:meth:`_add_missing_fields`).
        self._fields_checked: set[str] = set()
        connection.on_lost.append(self.forget)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return self._connection.call(what, fn)

    def forget(self) -> None:
        """After losing the connection, check indexes and templates again before the next write:
        the server may have restarted without them (an in-memory one does)."""
        self._known_indexes.clear()
        self._known_templates.clear()
        self._fields_checked.clear()

    def _ensure_template(self, kind: index_mappings.IndexKind) -> None:
        """An index template for the kind, so that an index the cluster creates by itself (on a
        write after the index was lost, say) still gets our mappings. Once per kind per process;
        a cluster that refuses templates (no permission) is logged and otherwise ignored."""
        if kind in self._known_templates:
            return
        name = f"async-query-{kind.replace('_', '-')}"
        body = index_mappings.load(kind)
        # The usage index's name is also a request index's: its template is the one that wins.
        priority = 101 if kind == "usage_index" else 100
        template = {"index_patterns": [_TEMPLATE_PATTERNS[kind]], "priority": priority, "template": body}

        def put_if_missing() -> None:
            # Also when an older version's template lacks fields added since, or maps one
            # otherwise (statement text was full-text indexed before: docs/documents.md).
            try:
                current = _template_mappings(self._client.indices.get_index_template(name=name))
            except os_exc.NotFoundError:
                current = None
            if current is None or _differs(current, body):
                self._client.indices.put_index_template(name=name, body=template)

        try:
            self._call(f"put template {kind}", put_if_missing)
        except (IndexUnavailableError, InvalidRequestError, IndexOperationError) as exc:
            log.warning("cannot install the index template for %s: %s", kind, exc)
        self._known_templates.add(kind)

    def ensure_index(self, index: str, recheck: bool = False) -> None:
        if recheck:
            self._known_indexes.discard(index)
            self._known_templates.discard(index_kind(index))
        if index in self._known_indexes:
            return
        kind = index_kind(index)
        self._ensure_template(kind)

        def create() -> bool:
            if self._client.indices.exists(index=index):
                return True
            try:
                self._client.indices.create(index=index, body=index_mappings.load(kind))
                log.info("created index %s", index)
                return False
            except os_exc.RequestError as exc:
                if "resource_already_exists" not in str(exc.error):
                    raise
                return True

        existed = self._call(f"create index {index}", create)
        if existed and index not in self._fields_checked:
            self._add_missing_fields(index, kind)
        self._known_indexes.add(index)

    def _add_missing_fields(self, index: str, kind: index_mappings.IndexKind) -> None:
        """Map the fields of our mappings that an existing index lacks (an index made by an older
        version: its ``dynamic: false`` mapping would leave a newer field unsearchable, such as
        ``submittedBy``). Fields it has are never changed; a refusal (no permission) is logged."""
        wanted = index_mappings.load(kind)["mappings"].get("properties", {})

        def add() -> None:
            found: dict[str, Any] = self._client.indices.get_mapping(index=index)
            entry: dict[str, Any] = next(iter(found.values()), {})
            have = entry.get("mappings", {}).get("properties", {})
            missing = {name: spec for name, spec in wanted.items() if name not in have}
            if missing:
                self._client.indices.put_mapping(index=index, body={"properties": missing})
                log.info("index %s: mapped the fields %s", index, ", ".join(sorted(missing)))

        try:
            self._call(f"update the mappings of {index}", add)
        except (InvalidRequestError, IndexOperationError) as exc:
            log.warning("cannot add the missing fields to the mappings of %s: %s", index, exc)
        self._fields_checked.add(index)


class IndexClient(_ClusterSide):
    """An OpenSearch cluster's documents, as a :class:`~query_core.store.connector.IndexConnector`:
    real-time reads (on a lean connection where it can answer), create-only and conditional
    writes, searches; :attr:`admin` administers its (Flint data) indexes over the same connection."""

    def __init__(self, cfg: OpenSearchConfig, client: OpenSearch | None = None) -> None:
        super().__init__(ClusterConnection(cfg, client))
        self._product_indexes = ProductIndexes(self._connection)
        #: The index administration of the same cluster, on the same connection.
        self.admin = ClusterAdmin(self._connection)
        # The lean reader only for a client built here: a client handed in (a test's, say) is
        # used as it is, for every call.
        self._reader = RealtimeReader(cfg) if client is None and RealtimeReader.usable(cfg) else None
        self._async_reader = AsyncRealtimeReader(self._reader) if self._reader is not None else None
        self.write_listeners: list[WriteListener] = []

    @property
    def lean_readers(self) -> tuple[RealtimeReader | None, AsyncRealtimeReader | None]:
        """The lean real-time readers (None where the cluster is read through the driver)."""
        return self._reader, self._async_reader

    def _write(self, index: str, what: str, fn: Callable[[], T], recheck: bool = False) -> T:
        """A write, after making sure its index exists with our mappings.

        The check runs once per index per process, and again when ``recheck`` asks (new sessions
        do: an index server that lost its indexes also lost every session). It must come first:
        a cluster creates a missing index on a first write by itself, with dynamic mappings that
        break our queries.
        """
        self._product_indexes.ensure_index(index, recheck)
        return self._call(what, fn)

    # -- documents --------------------------------------------------------------------------

    def create(self, index: str, doc_id: str, source: dict[str, Any], *, recheck: bool = False) -> Version:
        """Create-only write; :class:`DocumentExistsError` when the id is taken (a retry of this
        very write that finds its own document there counts as written)."""
        attempts = 0

        def call() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            try:
                lean = self._lean_write("PUT", f"/{_quoted(index)}/_create/{_quoted(doc_id)}", source)
                if lean is not None:
                    return lean
                return self._client.index(index=index, id=doc_id, body=source, op_type="create")
            except os_exc.ConflictError:
                if attempts > 1 and self._source_is(index, doc_id, source):
                    return self._client.get(index=index, id=doc_id, _source="false")  # our own retry
                raise

        try:
            res = self._write(index, f"create {index}/{doc_id}", call, recheck)
        finally:
            tell(self.write_listeners, doc_id)
        return _version(res)

    def _source_is(self, index: str, doc_id: str, source: dict[str, Any]) -> bool:
        try:
            found = self._client.get(index=index, id=doc_id)
        except os_exc.OpenSearchException:
            return False
        return bool(found.get("_source") == source)

    def put(self, index: str, doc_id: str, source: dict[str, Any]) -> Version:
        def call() -> dict[str, Any]:
            lean = self._lean_write("PUT", f"/{_quoted(index)}/_doc/{_quoted(doc_id)}", source)
            return lean if lean is not None else self._client.index(index=index, id=doc_id, body=source)

        return _version(self._write(index, f"put {index}/{doc_id}", call))

    def _lean_write(
        self, method: str, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> dict[str, Any] | None:
        """A document write on the lean connection (:meth:`RealtimeReader.write`), answered as the
        driver answers: its reply, or the driver's exception for the status (a 409 is its
        ``ConflictError``). None when it cannot be made that way (no lean connection; a body JSON
        cannot encode as it is), for the caller to use the driver."""
        reader = self._reader
        if reader is None:
            return None
        try:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return None
        status, reply = reader.write(method, path, data, headers)
        if 200 <= status < 300:
            try:
                answer = json.loads(reply)
            except ValueError as exc:
                raise os_exc.TransportError(status, "unparsable reply", None) from exc
            if isinstance(answer, dict):
                return answer
            raise os_exc.TransportError(status, "unexpected reply", None)
        raise driver_error(status, reply)

    def get(self, index: str, doc_id: str) -> Found | None:
        """Real-time get by id: on a lean connection (:mod:`query_core.realtime`), and through the
        driver when that cannot answer for sure; a timeout of either is retried as any transient
        failure is."""
        reader = self._reader

        def call() -> dict[str, Any] | None:
            if reader is not None:
                try:
                    return reader.get(index, doc_id)
                except ReadNotServed:
                    pass
            try:
                return self._client.get(index=index, id=doc_id)
            except os_exc.NotFoundError:
                return None

        return _found(self._call(f"get {index}/{doc_id}", call))

    def get_many(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        """Real-time reads of several documents: two reads on the lean connection cost less than
        one multi-get through the driver, which is used without it."""
        if self._reader is not None:
            return [self.get(index, doc_id) for doc_id in doc_ids]

        def call() -> dict[str, Any]:
            try:
                return self._client.mget(index=index, body={"ids": list(doc_ids)})
            except os_exc.NotFoundError:
                return {"docs": []}

        docs = {d["_id"]: d for d in self._call(f"mget {index}", call).get("docs", []) if d.get("found")}
        return [_found(docs.get(doc_id)) for doc_id in doc_ids]

    async def get_many_async(self, index: str, doc_ids: Sequence[str]) -> list[Found | None]:
        """Real-time reads on the event loop, concurrently. :class:`ReadNotServed` when they cannot
        be had that way (no lean reader, or any failure); a read that times out is
        :class:`IndexUnavailableError`, as a blocking one would be after its retries."""
        reader = self._async_reader
        if reader is None:
            raise ReadNotServed("no lean reader")
        try:
            if len(doc_ids) == 1:
                replies = [await reader.get(index, doc_ids[0])]
            else:
                import asyncio

                replies = list(await asyncio.gather(*(reader.get(index, doc_id) for doc_id in doc_ids)))
        except ReadTimedOut as exc:
            self._tell("get", "unreachable", 0)
            raise IndexUnavailableError(f"get {index}/{doc_ids[0]}: index server unavailable ({exc})") from exc
        if self.call_listeners:
            for _ in replies:
                tell_call(self.call_listeners, "get", "2xx")
        return [_found(reply) for reply in replies]

    def update_if(self, index: str, doc_id: str, partial: dict[str, Any], version: Version) -> Version:
        """Partial update applied only if the document is still at ``version``. A document deleted
        meanwhile is no longer at that version either: that too is a :class:`VersionConflictError`."""
        return self._update_if(index, doc_id, partial, version, None)

    def _update_if(
        self, index: str, doc_id: str, partial: dict[str, Any], version: Version, headers: dict[str, str] | None
    ) -> Version:
        def driver() -> dict[str, Any]:
            return self._client.update(
                index=index,
                id=doc_id,
                body={"doc": partial},
                if_seq_no=version.seq_no,
                if_primary_term=version.primary_term,
                headers=headers,
            )

        return self._write_at("update", index, doc_id, version, ("POST", "_update", {"doc": partial}), driver, headers)

    def replace_if(self, index: str, doc_id: str, source: dict[str, Any], version: Version) -> Version:
        """Whole-document write applied only if the document is still at ``version``: unlike
        :meth:`update_if`, the cluster does not read the document first (a partial update's read
        of a document written since the last refresh refreshes the shard)."""

        def driver() -> dict[str, Any]:
            return self._client.index(
                index=index, id=doc_id, body=source, if_seq_no=version.seq_no, if_primary_term=version.primary_term
            )

        return self._write_at("replace", index, doc_id, version, ("PUT", "_doc", source), driver)

    def _write_at(
        self,
        what: str,
        index: str,
        doc_id: str,
        version: Version,
        lean: tuple[str, str, Any],
        driver: Callable[[], dict[str, Any]],
        headers: dict[str, str] | None = None,
    ) -> Version:
        """A write applied only while the document is at ``version`` (a missing document is no
        longer at it either: a :class:`VersionConflictError` too), on the lean connection
        (``lean``: method, endpoint, body) where it can be made, else by ``driver``."""
        method, endpoint, body = lean
        path = (
            f"/{_quoted(index)}/{endpoint}/{_quoted(doc_id)}"
            f"?if_seq_no={version.seq_no}&if_primary_term={version.primary_term}"
        )

        def call() -> dict[str, Any]:
            try:
                answer = self._lean_write(method, path, body, headers)
                return answer if answer is not None else driver()
            except os_exc.NotFoundError as exc:
                raise VersionConflictError(f"{what} {index}/{doc_id}: {_reason(exc)}") from exc

        try:
            res = self._call(f"{what} {index}/{doc_id}", call)
        finally:
            tell(self.write_listeners, doc_id)
        return _version(res)

    def delete_if(self, index: str, doc_id: str, version: Version) -> None:
        def call() -> None:
            try:
                self._client.delete(
                    index=index, id=doc_id, if_seq_no=version.seq_no, if_primary_term=version.primary_term
                )
            except os_exc.NotFoundError as exc:
                raise VersionConflictError(f"delete {index}/{doc_id}: {_reason(exc)}") from exc

        try:
            self._call(f"delete {index}/{doc_id}", call)
        finally:
            tell(self.write_listeners, doc_id)

    def delete(self, index: str, doc_id: str) -> bool:
        def call() -> bool:
            try:
                self._client.delete(index=index, id=doc_id)
                return True
            except os_exc.NotFoundError:
                return False

        try:
            return self._call(f"delete {index}/{doc_id}", call)
        finally:
            tell(self.write_listeners, doc_id)

    def search(self, index: str, query: Query) -> list[Found]:
        """A search (it sees writes only after a refresh); a missing index is an empty answer. More
        hits than a cluster returns at once (``index.max_result_window``) are read in pages, each
        after the last hit of the one before (its sort values, then its id: a stable order)."""
        found: list[Found] = []
        after: list[Any] | None = None
        while len(found) < query.size:
            page = min(query.size - len(found), RESULT_WINDOW)
            hits = self._search_page(index, query, page, after if query.size > RESULT_WINDOW else None)
            found += [Found(h["_id"], h["_source"], Version(h["_seq_no"], h["_primary_term"])) for h in hits]
            if len(hits) < page or query.size <= RESULT_WINDOW:
                break
            after = hits[-1]["sort"]
        return found

    def _search_page(self, index: str, query: Query, size: int, after: list[Any] | None) -> list[dict[str, Any]]:
        body = _search_body(query)
        body["size"] = size
        if query.size > RESULT_WINDOW:
            body["sort"] = [*body.get("sort", []), {"_id": {"order": "asc"}}]
            if after is not None:
                body["search_after"] = after

        def call() -> dict[str, Any]:
            try:
                return self._client.search(index=index, body=body, seq_no_primary_term=True)
            except os_exc.NotFoundError:
                return {"hits": {"hits": []}}

        return list(self._call(f"search {index}", call)["hits"]["hits"])

    def delete_by_query(self, index: str, query: Query) -> int:
        body = {"query": _query_dsl(query.filters)}

        def call() -> dict[str, Any]:
            try:
                return self._client.delete_by_query(index=index, body=body, conflicts="proceed")
            except os_exc.NotFoundError:
                return {"deleted": 0}

        return int(self._call(f"delete_by_query {index}", call).get("deleted", 0))

    def refresh(self, index: str) -> None:
        def call() -> None:
            try:
                self._client.indices.refresh(index=index)
            except os_exc.NotFoundError:
                pass

        self._call(f"refresh {index}", call)

    def close(self) -> None:
        """Close the connection, of both sides."""
        if self._reader is not None:
            self._reader.close()
        super().close()


class ClusterAdmin(_ClusterSide):
    """An OpenSearch cluster's indexes, as an :class:`~query_core.store.connector.IndexAdmin`
    (the Flint data indexes): whole indexes, their mappings, bulk writes and scans, and the
    figures of the embedded index's snapshots: an :class:`IndexClient`'s ``admin``."""

    # -- whole indexes ------------------------------------------------------------------------

    def index_exists(self, index: str) -> bool:
        return bool(self._call(f"exists {index}", lambda: self._client.indices.exists(index=index)))

    def create_index(self, index: str, body: dict[str, Any]) -> bool:
        def create() -> bool:
            try:
                self._client.indices.create(index=index, body=body)
                return True
            except os_exc.RequestError as exc:
                if "resource_already_exists" in str(exc.error):
                    return False
                raise

        return self._call(f"create index {index}", create)

    def delete_index(self, index: str) -> bool:
        def call() -> bool:
            try:
                self._client.indices.delete(index=index)
                return True
            except os_exc.NotFoundError:
                return False

        return self._call(f"delete index {index}", call)

    def mappings(self, pattern: str) -> dict[str, dict[str, Any]]:
        def call() -> dict[str, Any]:
            try:
                return dict(self._client.indices.get_mapping(index=pattern, allow_no_indices=True))
            except os_exc.NotFoundError:
                return {}

        found = self._call(f"get mapping {pattern}", call)
        return {name: dict(entry.get("mappings", {})) for name, entry in found.items()}

    def put_mapping_meta(self, index: str, meta: dict[str, Any]) -> None:
        self._call(f"put mapping {index}", lambda: self._client.indices.put_mapping(index=index, body={"_meta": meta}))

    def delete_all(self, index: str) -> int:
        """Every document of ``index`` deleted. A delete by query sees what a search sees, so the
        index is refreshed first: a document written a moment ago is deleted too."""
        self._call(f"refresh {index}", partial(self._client.indices.refresh, index=index))
        call = partial(
            self._client.delete_by_query,
            index=index,
            body={"query": {"match_all": {}}},
            conflicts="proceed",
            refresh=True,
        )
        return int(self._call(f"delete_by_query {index}", call).get("deleted", 0))

    def bulk_index(self, index: str, docs: Sequence[tuple[str | None, dict[str, Any]]]) -> int:
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
            res = self._call(f"bulk {index}", partial(self._client.bulk, body=body))
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

    def scan(
        self, index: str, batch: int = 1000, fields: Sequence[str] | None = None, filters: tuple[Filter, ...] = ()
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every document of the index (matching every filter) as (id, source), in batches of a
        scroll; with ``fields``, only those fields of each source."""
        body: dict[str, Any] = {"size": batch, "sort": ["_doc"]}
        if filters:
            body["query"] = _query_dsl(filters)
        if fields is not None:
            body["_source"] = list(fields)
        page = self._call(f"scan {index}", lambda: self._client.search(index=index, body=body, scroll="1m"))
        scroll_id = page.get("_scroll_id")
        try:
            while page["hits"]["hits"]:
                for hit in page["hits"]["hits"]:
                    yield hit["_id"], hit["_source"]
                if not scroll_id:
                    return
                page = self._call(f"scan {index}", partial(self._client.scroll, scroll_id=scroll_id, scroll="1m"))
                scroll_id = page.get("_scroll_id", scroll_id)
        finally:
            if scroll_id:
                try:
                    self._client.clear_scroll(scroll_id=scroll_id)
                except os_exc.OpenSearchException:
                    pass

    # -- whole-cluster figures (the embedded index's snapshots) -------------------------------

    def write_marks(self) -> dict[str, tuple[int, int]]:
        """Per index, a mark that changes with every write: (writes so far, documents)."""
        stats = self._call("index stats", lambda: self._client.indices.stats())
        marks = {}
        for name, entry in stats.get("indices", {}).items():
            primaries = entry.get("primaries", {})
            writes = int(primaries.get("indexing", {}).get("index_total", 0))
            marks[name] = (writes, int(primaries.get("docs", {}).get("count", 0)))
        return marks

    def index_definition(self, index: str) -> dict[str, Any]:
        """The index's mappings and settings, without what the cluster assigns (uuid, dates...)."""
        found = self._call(f"get index {index}", lambda: self._client.indices.get(index=index))[index]
        settings = {k: v for k, v in found.get("settings", {}).get("index", {}).items() if k not in _ASSIGNED_SETTINGS}
        return {"settings": {"index": settings}, "mappings": found.get("mappings", {})}


def driver_error(status: int, body: bytes) -> os_exc.TransportError:
    """The driver's exception for an error reply, as opensearch-py makes it (its class by status,
    the error's type as its error, the parsed body as its info)."""
    info: Any = None
    error: Any = body.decode("utf-8", "replace")
    try:
        info = json.loads(body)
    except ValueError:
        info = None
    if isinstance(info, dict):
        error = info.get("error", error)
        if isinstance(error, dict) and "type" in error:
            error = error["type"]
    kind = cast(type[os_exc.TransportError], os_exc.HTTP_EXCEPTIONS.get(status, os_exc.TransportError))
    return kind(status, error, info)


def _quoted(name: str) -> str:
    return quote(name, safe="")


def _version(res: dict[str, Any]) -> Version:
    return Version(int(res["_seq_no"]), int(res["_primary_term"]))


def _found(res: dict[str, Any] | None) -> Found | None:
    if res is None or not res.get("found"):
        return None
    return Found(str(res["_id"]), res["_source"], _version(res))


def _filter_dsl(item: Filter) -> dict[str, Any]:
    if isinstance(item, Term):
        return {"term": {item.field: item.value}}
    if isinstance(item, Terms):
        return {"terms": {item.field: list(item.values)}}
    bounds = {k: v for k, v in (("gte", item.gte), ("lt", item.lt)) if v is not None}
    return {"range": {item.field: bounds}}


def _query_dsl(filters: tuple[Filter, ...]) -> dict[str, Any]:
    if not filters:
        return {"match_all": {}}
    return {"bool": {"filter": [_filter_dsl(f) for f in filters]}}


def _search_body(query: Query) -> dict[str, Any]:
    body: dict[str, Any] = {"size": query.size, "query": _query_dsl(query.filters)}
    if query.sort:
        body["sort"] = [{name: {"order": order}} for name, order in query.sort]
    return body


def _template_mappings(found: dict[str, Any]) -> dict[str, Any]:
    """The mappings of the one template a ``GET _index_template/<name>`` found."""
    templates = found.get("index_templates") or [{}]
    return dict(templates[0].get("index_template", {}).get("template", {}).get("mappings", {}))


def _differs(mappings: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether ``mappings`` lack a field of ``wanted`` (a create-index body), or map one otherwise:
    a parameter of ours missing or of another value (compared as text: a cluster may give
    ``false`` back as ``"false"``; parameters it adds are not ours to judge)."""
    have = mappings.get("properties", {})
    return any(
        not isinstance(have.get(name), dict)
        or any(_as_text(have[name].get(key)) != _as_text(value) for key, value in spec.items())
        for name, spec in wanted.get("mappings", {}).get("properties", {}).items()
    )


def _as_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True).lower().replace('"', "") if isinstance(value, dict) else str(value).lower()


#: Index settings the cluster assigns itself; an index created from a snapshot gets new ones.
_ASSIGNED_SETTINGS = frozenset({"uuid", "creation_date", "provided_name", "version", "replication", "resize"})

_TEMPLATE_PATTERNS: dict[str, str] = {
    "request_index": REQUEST_INDEX_PATTERN,
    "result_index": RESULT_INDEX_PATTERN,
    "datasource_index": DATASOURCE_INDEX,
    "scheduler_index": SCHEDULER_INDEX,
    "usage_index": USAGE_INDEX,
}
