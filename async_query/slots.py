"""The deployment's limits of live jobs, race-free across processes: one mechanism, three limits.

A search counting live sessions lags new ones by up to a refresh, so two plugin processes taking
the last place at once would both see room. A limit is therefore held by *slot documents*: as many
lock documents with fixed ids (``refresh-slot-0`` ..., ``session-slot-0`` ...) in the
deployment-wide index as the limit allows. A new job takes a slot as any lock is taken
(:meth:`query_core.store.locks.LockRepository.take`): the count and the claim are one conditional
write, so two processes racing for one slot conflict on it and at most one wins; the loser tries
the next slot. The job is launched only after its slot is taken.

A user's fair share (``max_sessions_per_user``, ``max_refreshing_jobs_per_user``) is the same
mechanism with slots of their own per user (``usersession-<digest of the name>-slot-0`` ...,
``userrefresh-...``), taken before the deployment's: one analyst filling the deployment cannot
keep everyone else out.

A slot is never released by a write that could be lost: it is free once its holder's session has
ended (its document is terminal, or its heartbeat went silent and its launcher confirms the job is
gone); a slot taken for a session that was never recorded is free after
:data:`UNRECORDED_GRACE_MS`. A holder that gave up before launching frees its slot at once
(:meth:`Slots.release`), on a best-effort basis, and so does a POST that fails after its job
was launched (:mod:`async_query.handlers.job_session`). See ``docs/documents.md`` (lock documents).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from async_query.settings import Settings
from query_core.errors import AsyncQueryError, TooManyRequestsError
from query_core.ids import DEPLOYMENT_INDEX
from query_core.models import SessionDoc, Versioned, now_millis
from query_core.states import SessionType, is_terminal
from query_core.store import Store

log = logging.getLogger(__name__)

SLOTS_INDEX = DEPLOYMENT_INDEX
#: How long a slot whose session document does not exist yet stays taken (the launch between).
UNRECORDED_GRACE_MS = 120_000


@dataclass(frozen=True)
class Limit:
    """One limit held by slots: the sessions it counts, the setting that bounds them, its slots'
    names and the 429 text of a refusal."""

    #: Slot ids are ``<name>-slot-<n>``, their documents' ``type`` ``<name>slot``.
    name: str
    #: The session types whose jobs count against the limit.
    session_types: frozenset[SessionType]
    #: How many are allowed.
    allowed: Callable[[Settings], int]
    #: The reference's 429 text, given the limit.
    refusal: str

    def message(self, limit: int) -> str:
        return self.refusal.format(limit=limit)

    @property
    def slot_type(self) -> str:
        return f"{self.name}slot"

    def slot_id(self, slot: int, scope: str = "") -> str:
        return f"{self.name}-{scope}-slot-{slot}" if scope else f"{self.name}-slot-{slot}"


#: Live batch and streaming jobs (``max_refreshing_jobs``).
REFRESHING_JOBS = Limit(
    "refresh",
    frozenset({SessionType.BATCH, SessionType.STREAMING}),
    lambda settings: settings.max_refreshing_jobs,
    "domain concurrent refresh job can not exceed {limit}",
)
#: Live batch and streaming jobs of one user (``max_refreshing_jobs_per_user``), slots scoped by :func:`user_scope`.
USER_REFRESHING_JOBS = Limit(
    "userrefresh",
    frozenset({SessionType.BATCH, SessionType.STREAMING}),
    lambda settings: settings.refreshing_jobs_per_user,
    "user concurrent refresh job can not exceed {limit}",
)
#: Live interactive sessions (``max_sessions``).
INTERACTIVE_SESSIONS = Limit(
    "session",
    frozenset({SessionType.INTERACTIVE}),
    lambda settings: settings.max_sessions,
    "domain concurrent active session can not exceed {limit}",
)
#: Live interactive sessions of one user (``max_sessions_per_user``), slots scoped by :func:`user_scope`.
USER_SESSIONS = Limit(
    "usersession",
    frozenset({SessionType.INTERACTIVE}),
    lambda settings: settings.sessions_per_user,
    "user concurrent active session can not exceed {limit}",
)


def user_scope(user: str) -> str:
    """The part of a user's slot ids that names the user: a digest, so that any name makes a valid
    document id and slot documents do not list who uses the service."""
    return hashlib.sha256(user.encode("utf-8")).hexdigest()[:20]


@dataclass(frozen=True)
class Holder:
    datasource: str
    session_id: str


class Slots:
    """Takes and frees the slots of one :class:`Limit` (see the module's documentation), in one
    ``scope`` (a user's share: :func:`user_scope`; "": the deployment's)."""

    def __init__(
        self,
        store: Store,
        kind: Limit,
        limit: Callable[[], int],
        is_live: Callable[[Versioned[SessionDoc]], bool] = lambda session: not is_terminal(session.doc.state),
        scope: str = "",
    ) -> None:
        self.store = store
        self.kind = kind
        self.limit = limit
        #: Whether a holder's session still runs (the plugin confirms a silent one with its launcher).
        self.is_live = is_live
        self.scope = scope

    def scoped(self, scope: str) -> Slots:
        """The same limit's slots in another scope."""
        return Slots(self.store, self.kind, self.limit, self.is_live, scope)

    def slot_id(self, slot: int) -> str:
        return self.kind.slot_id(slot, self.scope)

    def take(self, holder: Holder) -> int:
        """Take a free slot for ``holder``; returns its number. Raises :class:`TooManyRequestsError`
        when every slot is held by a live session.

        The slots are tried from a random one on, so that racing processes seldom contend for the
        same slot, and a large limit with few held slots costs few reads."""
        limit = self.limit()
        first = secrets.randbelow(limit) if limit > 0 else 0
        for slot in ((first + n) % limit for n in range(limit)):
            if self._try(slot, holder):
                log.info("%s taken by session %s", self.slot_id(slot), holder.session_id)
                return slot
        raise TooManyRequestsError(self.kind.message(limit))

    def release(self, slot: int, holder: Holder) -> None:
        """Free ``slot`` now if ``holder`` still holds it (its job was never launched)."""
        try:
            self.store.locks.release(
                SLOTS_INDEX,
                self.slot_id(slot),
                self._source(None),
                lambda held: held.get("sessionId") == holder.session_id,
            )
        except AsyncQueryError as exc:
            log.warning("cannot release %s (free once its session ends): %s", self.slot_id(slot), exc)

    def holders(self) -> list[Holder | None]:
        """Who holds each slot now (None: free), for tests and operators."""
        found = [self.store.locks.read(SLOTS_INDEX, self.slot_id(slot)) for slot in range(self.limit())]
        return [None if f is None or self._free(f.source) else _holder(f.source) for f in found]

    def _try(self, slot: int, holder: Holder) -> bool:
        return self.store.locks.take(SLOTS_INDEX, self.slot_id(slot), self._source(holder), self._free)

    def _free(self, source: dict[str, Any]) -> bool:
        holder = _holder(source)
        if holder is None:
            return True
        session = self.store.sessions.get(holder.datasource, holder.session_id)
        if session is None:
            taken = source.get("lastUpdateTime")
            return isinstance(taken, int) and now_millis() - taken > UNRECORDED_GRACE_MS
        return not self.is_live(session)

    def _source(self, holder: Holder | None) -> dict[str, Any]:
        return {
            "type": self.kind.slot_type,
            "dataSourceName": holder.datasource if holder else "",
            "sessionId": holder.session_id if holder else "",
            "lastUpdateTime": now_millis(),
        }


def _holder(source: dict[str, Any]) -> Holder | None:
    datasource, session_id = source.get("dataSourceName"), source.get("sessionId")
    if not isinstance(datasource, str) or not isinstance(session_id, str) or not session_id:
        return None
    return Holder(datasource, session_id)
