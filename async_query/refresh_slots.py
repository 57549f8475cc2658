"""The deployment's limit of refreshing jobs (batch and streaming), race-free across processes.

A search counting live sessions lags new ones by up to a refresh, so two plugin processes taking
the last slot at once would both see room. The limit is therefore held by *slot documents*:
``max_refreshing_jobs`` lock documents with fixed ids (``refresh-slot-0`` ...) in the
deployment-wide index. A new job takes a slot as any lock is taken
(:meth:`query_core.store.locks.LockRepository.take`): two processes racing for one slot conflict
on that write, so at most one wins it; the loser tries the next slot.

A slot is never released by a write that could be lost: it is free once its holder's session
has ended (its document is terminal, or its heartbeat went silent and its launcher confirms the
job is gone) (a slot taken for a session that was never recorded is free after
:data:`UNRECORDED_GRACE_MS`). A holder that gave up before launching frees its slot at once
(:meth:`RefreshSlots.release`), on a best-effort basis.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from query_core.errors import AsyncQueryError, TooManyRequestsError
from query_core.ids import DEPLOYMENT_INDEX
from query_core.models import SessionDoc, Versioned, now_millis
from query_core.states import is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

SLOTS_INDEX = DEPLOYMENT_INDEX
SLOT_TYPE = "refreshslot"
#: How long a slot whose session document does not exist yet stays taken (the launch between).
UNRECORDED_GRACE_MS = 120_000


def limit_message(limit: int) -> str:
    """The reference's 429 text."""
    return f"domain concurrent refresh job can not exceed {limit}"


@dataclass(frozen=True)
class Holder:
    datasource: str
    session_id: str


class RefreshSlots:
    """Takes and frees the slots of refreshing jobs (see the module's documentation)."""

    def __init__(
        self,
        store: Store,
        limit: Callable[[], int],
        is_live: Callable[[Versioned[SessionDoc]], bool] = lambda session: not is_terminal(session.doc.state),
    ) -> None:
        self.store = store
        self.limit = limit
        #: Whether a holder's session still runs (the plugin confirms a silent one with its launcher).
        self.is_live = is_live

    def take(self, holder: Holder) -> int:
        """Take a free slot for ``holder``; returns its number. Raises :class:`TooManyRequestsError`
        when every slot is held by a live session."""
        limit = self.limit()
        for slot in range(limit):
            if self._try(slot, holder):
                log.info("refresh slot %d taken by session %s", slot, holder.session_id)
                return slot
        raise TooManyRequestsError(limit_message(limit))

    def release(self, slot: int, holder: Holder) -> None:
        """Free ``slot`` now if ``holder`` still holds it (its job was never launched)."""
        try:
            self.store.locks.release(
                SLOTS_INDEX, _slot_id(slot), _source(None), lambda held: held.get("sessionId") == holder.session_id
            )
        except AsyncQueryError as exc:
            log.warning("cannot release refresh slot %d (free once its session ends): %s", slot, exc)

    def holders(self) -> list[Holder | None]:
        """Who holds each slot now (None: free), for tests and operators."""
        found = [self.store.locks.read(SLOTS_INDEX, _slot_id(slot)) for slot in range(self.limit())]
        return [None if f is None or self._free(f.source) else _holder(f.source) for f in found]

    def _try(self, slot: int, holder: Holder) -> bool:
        return self.store.locks.take(SLOTS_INDEX, _slot_id(slot), _source(holder), self._free)

    def _free(self, source: dict[str, Any]) -> bool:
        holder = _holder(source)
        if holder is None:
            return True
        session = self.store.sessions.get(holder.datasource, holder.session_id)
        if session is None:
            taken = source.get("lastUpdateTime")
            return isinstance(taken, int) and now_millis() - taken > UNRECORDED_GRACE_MS
        return not self.is_live(session)


def _slot_id(slot: int) -> str:
    return f"refresh-slot-{slot}"


def _source(holder: Holder | None) -> dict[str, Any]:
    return {
        "type": SLOT_TYPE,
        "dataSourceName": holder.datasource if holder else "",
        "sessionId": holder.session_id if holder else "",
        "lastUpdateTime": now_millis(),
    }


def _holder(source: dict[str, Any]) -> Holder | None:
    datasource, session_id = source.get("dataSourceName"), source.get("sessionId")
    if not isinstance(datasource, str) or not isinstance(session_id, str) or not session_id:
        return None
    return Holder(datasource, session_id)
