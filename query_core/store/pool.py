"""Warm pool slot documents (doc id = slot id, in the deployment-wide index), and the named
operations on them. See ``docs/documents.md`` (warm pool jobs).

A pool of size ``n`` is ``n`` slot documents with fixed ids (``pool-<key>-0`` ...), read by id in
one round trip: finding an idle job never waits for an index refresh. Each slot holds one job at a
time, through its life: taken for a new job (:meth:`PoolJobRepository.reserve`), launched,
ready, claimed by a new session, served; or dead. A slot whose job has ended takes the next one.
Every move is a conditional write checked by the transition table in :mod:`query_core.states`, so
of two sessions claiming one job, or two plugin processes refilling one slot, one wins.
"""

from __future__ import annotations

from typing import Any

from query_core.errors import DocumentExistsError, VersionConflictError
from query_core.ids import DEPLOYMENT_INDEX
from query_core.models import PoolClaim, PoolJobDoc, Versioned, now_millis
from query_core.states import PoolJobState, check_reuse, is_terminal
from query_core.store.connector import DocumentConnector, Terms, Version
from query_core.store.documents import DocumentRepository

_P = PoolJobState
#: The states of a slot whose job is live (not yet the session's, not ended).
LIVE = (_P.STARTING, _P.IDLE, _P.CLAIMED)


def slot_id(pool_key: str, slot: int) -> str:
    """The id of slot ``slot`` of the pool ``pool_key``."""
    return f"pool-{pool_key}-{slot}"


class PoolJobRepository(DocumentRepository[PoolJobDoc]):
    model = PoolJobDoc
    doc_type = "pooljob"

    def __init__(self, index: DocumentConnector) -> None:
        super().__init__(index, DEPLOYMENT_INDEX)

    def doc_id(self, doc: PoolJobDoc) -> str:
        return doc.slot_id

    # -- reads ------------------------------------------------------------------------------

    def slot(self, slot_id: str) -> Versioned[PoolJobDoc] | None:
        """One slot, read in real time."""
        return self.get("", slot_id)

    def slots(self, pool_key: str, size: int) -> list[Versioned[PoolJobDoc] | None]:
        """Slots ``0 .. size-1`` of a pool, read in real time in one round trip (None: never used)."""
        if size <= 0:
            return []
        found = self.index.get_many(DEPLOYMENT_INDEX, [slot_id(pool_key, n) for n in range(size)])
        return [self.parse(f) for f in found]

    def live(self, size: int = 1000, fresh: bool = False) -> list[Versioned[PoolJobDoc]]:
        """The slots whose job is live, of every pool (a search: it lags writes by up to a refresh
        unless ``fresh``; for sweeps and listings)."""
        live = Terms("state", tuple(s.value for s in LIVE))
        return self.search(None, live, sort=(("lastUpdateTime", "desc"),), size=size, fresh=fresh)

    # -- the named operations ---------------------------------------------------------------

    def reserve(self, found: Versioned[PoolJobDoc] | None, doc: PoolJobDoc) -> Versioned[PoolJobDoc] | None:
        """Take the slot for the new job ``doc`` (``starting``, no job id yet): a create-only write
        of a slot never used, or a write at the version read of one whose job has ended. None when
        another process took it first (or its job is live)."""
        what = self.describe(doc)
        try:
            if found is None:
                return self.create(doc)
            check_reuse(found.doc.state, doc.state, what)
            version = self.index.update_if(
                DEPLOYMENT_INDEX, doc.slot_id, _whole(doc, found.doc), Version(found.seq_no, found.primary_term)
            )
        except (DocumentExistsError, VersionConflictError):
            return None
        return Versioned(doc, version.seq_no, version.primary_term)

    def launched(self, slot: Versioned[PoolJobDoc], job_id: str, application_id: str) -> Versioned[PoolJobDoc] | None:
        """The reserved slot names the job just launched; None when it was ended meanwhile."""
        if slot.doc.state != _P.STARTING or slot.doc.job_id:
            return None
        try:
            return self._move(slot, _P.STARTING, job_id=job_id, application_id=application_id, last_update_time=now_millis())
        except VersionConflictError:
            return None

    def ready(self, slot: Versioned[PoolJobDoc], interval_ms: int) -> Versioned[PoolJobDoc] | None:
        """``starting → idle``: the job is ready for a session (its first beat). None when the slot
        moved on first (claimed while starting, ended); the caller re-reads."""
        if slot.doc.state != _P.STARTING:
            return None
        try:
            return self._move(slot, _P.IDLE, last_update_time=now_millis(), heartbeat_interval_millis=interval_ms)
        except VersionConflictError:
            return None

    def beat(self, slot: Versioned[PoolJobDoc], interval_ms: int) -> Versioned[PoolJobDoc] | None:
        """An idle job's heartbeat; None when the slot moved on (a claim won): the caller re-reads."""
        if slot.doc.state != _P.IDLE:
            return None
        try:
            return self._move(
                slot, _P.IDLE, last_update_time=now_millis(), heartbeat_interval_millis=interval_ms
            )
        except VersionConflictError:
            return None

    def claim(self, slot: Versioned[PoolJobDoc], claim: PoolClaim) -> Versioned[PoolJobDoc] | None:
        """A new session takes the slot's job, starting or idle: one conditional write at the
        version read, so of two sessions claiming one job one wins. None: it lost, or the job is
        no longer claimable."""
        if slot.doc.state not in (_P.STARTING, _P.IDLE) or not slot.doc.job_id:
            return None
        try:
            return self._move(
                slot,
                _P.CLAIMED,
                claim=claim,
                session_id=claim.session_id,
                data_source_name=claim.data_source_name,
                claim_time=now_millis(),
            )
        except VersionConflictError:
            return None

    def serve(self, slot: Versioned[PoolJobDoc]) -> Versioned[PoolJobDoc] | None:
        """``claimed → served``: the job read its claim and is the session's now (the slot may take
        the next job). None when the slot was ended first."""
        if slot.doc.state != _P.CLAIMED:
            return None
        try:
            return self._move(slot, _P.SERVED, last_update_time=now_millis())
        except VersionConflictError:
            return None

    def end(
        self, slot: Versioned[PoolJobDoc], error: str, *, unless_claimed: bool = False
    ) -> Versioned[PoolJobDoc] | None:
        """End the slot's job ``dead`` with ``error`` (never over an ended one). With
        ``unless_claimed``, a job a session has claimed is left alone (scale-down, the service's
        stop: a claim that won stands). Returns the version written, or None."""

        def end(current: Versioned[PoolJobDoc]) -> Versioned[PoolJobDoc] | None:
            doc = current.doc
            if is_terminal(doc.state) or doc.job_id != slot.doc.job_id:
                return None
            if unless_claimed and doc.state == _P.CLAIMED:
                return None
            return self._move(current, _P.DEAD, error=error, last_update_time=now_millis())

        return self._change(slot, end)


def _whole(doc: PoolJobDoc, previous: PoolJobDoc) -> dict[str, Any]:
    """``doc`` as a partial update that replaces everything ``previous`` held (fields it no longer
    has are emptied: an update never removes a field)."""
    source = doc.to_source()
    emptied = PoolJobDoc(slot_id=doc.slot_id, pool_key=doc.pool_key, slot=doc.slot).to_source()
    for key in previous.to_source():
        if key not in source:
            source[key] = emptied.get(key)
    return source
