"""All index access: one index client, a repository per document kind, and an in-memory twin.

- :mod:`.connector`: the two small interfaces of a cluster, documents (what the repositories
  are written against) and index administration (the Flint data indexes), and typed queries;
- :mod:`.client`: :class:`IndexClient`, an OpenSearch cluster's documents, and its ``admin``
  (:class:`~.client.ClusterAdmin`), its indexes, over one connection (the only user of
  opensearch-py: transport, retries, error translation, conditional writes);
- :mod:`.memory`: :class:`MemoryIndex` and its ``admin`` (:class:`~.memory.MemoryAdmin`), the
  in-memory twin for unit tests, held to the same contract tests;
- one repository per document kind: :mod:`.statements`, :mod:`.sessions`, :mod:`.results`,
  :mod:`.index_states`, :mod:`.datasources`, :mod:`.locks`, :mod:`.pool` (warm pool jobs),
  :mod:`.catalog_changes`, :mod:`.schedules` (scheduled refresh); the stateful kinds share
  :mod:`.documents` (the one conditional write that moves a document, checked by the transition
  table in :mod:`query_core.states`).

:class:`Store` bundles the repositories over one connector; no module above this package talks to a
connector's documents except through a repository. Flint data indexes, which are not documents of
this product, are administered through :attr:`Store.admin`, the index-administration interface
alone. The documents and their states are described in ``docs/documents.md``.
"""

from __future__ import annotations

from query_core.config import OpenSearchConfig
from query_core.ids import request_index
from query_core.models import SessionDoc, StatementDoc, Versioned
from query_core.store.catalog_changes import CatalogChangeRepository
from query_core.store.client import IndexClient, quiet_driver_logs, translate
from query_core.store.connector import (
    DocumentConnector,
    Found,
    IndexAdmin,
    IndexConnector,
    Query,
    Range,
    Term,
    Terms,
    Version,
)
from query_core.store.datasources import DatasourceRepository
from query_core.store.documents import DocumentRepository, retry_on_conflict
from query_core.store.index_states import IndexStateRepository
from query_core.store.locks import LockRepository
from query_core.store.memory import MemoryIndex
from query_core.store.pool import PoolJobRepository
from query_core.store.results import ResultRepository
from query_core.store.schedules import ScheduleRepository, ScheduleTerms
from query_core.store.sessions import SessionRepository
from query_core.store.statements import Settled, StatementRepository
from query_core.store.usage import UsageRepository

__all__ = [
    "CatalogChangeRepository",
    "DatasourceRepository",
    "DocumentConnector",
    "DocumentRepository",
    "Found",
    "IndexAdmin",
    "IndexClient",
    "IndexConnector",
    "IndexStateRepository",
    "LockRepository",
    "MemoryIndex",
    "PoolJobRepository",
    "Query",
    "Range",
    "ResultRepository",
    "ScheduleRepository",
    "ScheduleTerms",
    "SessionRepository",
    "Settled",
    "StatementRepository",
    "Store",
    "Term",
    "Terms",
    "UsageRepository",
    "Version",
    "quiet_driver_logs",
    "retry_on_conflict",
    "translate",
]


class Store:
    """The repositories of every document kind, over one connector.

    ``request_index`` binds the statement, session and index-state repositories to one request
    index (a job's, which it is told); without it each datasource's own is used. ``index`` is the
    connector (its documents); :attr:`admin` is its index administration, over the same
    connection, for the users of Flint data indexes.
    """

    def __init__(self, index: IndexConnector, request_index: str | None = None) -> None:
        self.index = index
        self.admin: IndexAdmin = index.admin
        self.request_index = request_index
        self.results = ResultRepository(index)
        #: What each user's statements and results hold in the index (deployment-wide).
        self.usage = UsageRepository(index)
        self.statements = StatementRepository(index, request_index, self.results, self.usage)
        self.sessions = SessionRepository(index, request_index)
        self.index_states = IndexStateRepository(index, request_index)
        self.datasources = DatasourceRepository(index)
        self.locks = LockRepository(index)
        self.catalog_changes = CatalogChangeRepository(index, request_index)
        #: Warm pool jobs, in the deployment-wide index whatever ``request_index`` says.
        self.pool = PoolJobRepository(index)
        #: Schedules of scheduled refresh, in the scheduler index whatever ``request_index`` says.
        self.schedules = ScheduleRepository(index)

    @classmethod
    def connect(cls, cfg: OpenSearchConfig, request_index: str | None = None) -> Store:
        """A store over the cluster ``cfg`` names."""
        return cls(IndexClient(cfg), request_index)

    @classmethod
    def in_memory(cls, refresh_interval_s: float = 1.0) -> Store:
        """A store over a fresh in-memory twin (unit tests)."""
        return cls(MemoryIndex(refresh_interval_s))

    def bound_to(self, request_index: str) -> Store:
        """The same connector, its documents in ``request_index``."""
        return Store(self.index, request_index)

    # -- GET's hot path: a statement and its session at once ----------------------------------

    def statement_and_session(
        self, datasource: str, statement_id: str, session_id: str | None = None
    ) -> tuple[Versioned[StatementDoc] | None, Versioned[SessionDoc] | None]:
        """A statement, and its session when ``session_id`` is given, read in real time together."""
        found = self.index.get_many(self._index_of(datasource), _ids(statement_id, session_id))
        return self._pair(found, session_id)

    async def statement_and_session_async(
        self, datasource: str, statement_id: str, session_id: str | None = None
    ) -> tuple[Versioned[StatementDoc] | None, Versioned[SessionDoc] | None]:
        """The same on the event loop; :class:`~query_core.realtime.ReadNotServed` when it cannot
        be read that way (the caller then reads the blocking way, with retries)."""
        found = await self.index.get_many_async(self._index_of(datasource), _ids(statement_id, session_id))
        return self._pair(found, session_id)

    def _index_of(self, datasource: str) -> str:
        return self.request_index or request_index(datasource)

    def _pair(
        self, found: list[Found | None], session_id: str | None
    ) -> tuple[Versioned[StatementDoc] | None, Versioned[SessionDoc] | None]:
        session = self.sessions.parse(found[1]) if session_id is not None else None
        return self.statements.parse(found[0]), session

    def close(self) -> None:
        self.index.close()


def _ids(statement_id: str, session_id: str | None) -> list[str]:
    return [statement_id] if session_id is None else [statement_id, session_id]
