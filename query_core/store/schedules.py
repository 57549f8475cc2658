"""Schedules of scheduled refresh (doc id = the Flint index's name) in the scheduler index
``.async-query-scheduler``, and the named operations on them (docs/documents.md, "Schedules").

A schedule is armed by a CREATE (``pending``), enabled once its index exists, claimed for each
run by one plugin process (``enabled → running``: one conditional write at the version read, so
of several processes looking at the same tick one wins), told the run's query once it is
launched, and settled with the run's outcome (``running → enabled``); ALTER, DROP and a disabled
datasource disable it, VACUUM removes it. Every move passes the table in :mod:`query_core.states`.

The scheduler's own moves (:meth:`ScheduleRepository.claim`, :meth:`~ScheduleRepository.launched`,
:meth:`~ScheduleRepository.settle`, :meth:`~ScheduleRepository.pass_turn`) write once at the
version they are given and return None when the document moved meanwhile (another process did
the work, or an ALTER changed the schedule): the caller re-reads and decides. The moves a
statement asks for (:meth:`~ScheduleRepository.arm`, :meth:`~ScheduleRepository.enable`,
:meth:`~ScheduleRepository.change_interval`, :meth:`~ScheduleRepository.disable`) re-read and
apply again after a conflict: they must win over the scheduler's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from query_core.errors import DocumentExistsError, VersionConflictError
from query_core.ids import SCHEDULER_INDEX
from query_core.models import ScheduleDoc, ScheduleRun, Versioned, now_millis
from query_core.states import ScheduleState
from query_core.store.connector import DocumentConnector, Terms, Version
from query_core.store.documents import DocumentRepository, retry_on_conflict

_S = ScheduleState
#: The states of a schedule the scheduler looks at.
ACTIVE = (_S.PENDING, _S.ENABLED, _S.RUNNING)
#: Longest error text kept on a schedule.
MAX_SCHEDULE_ERROR = 2000


@dataclass(frozen=True)
class ScheduleTerms:
    """What a statement that turns a schedule on sets: its index, interval and owner."""

    datasource: str
    index_name: str
    interval: str
    interval_millis: int
    #: The user whose statement it is ("": the anonymous caller of ``none``) and their roles.
    owner: str = ""
    owner_roles: tuple[str, ...] = field(default_factory=tuple)
    #: The ``REFRESH`` statement a run submits ("" while the index does not exist yet).
    scheduled_query: str = ""

    def fields(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "interval_millis": self.interval_millis,
            "owner": self.owner,
            "owner_roles": list(self.owner_roles),
            "scheduled_query": self.scheduled_query,
        }


class ScheduleRepository(DocumentRepository[ScheduleDoc]):
    model = ScheduleDoc
    doc_type = "schedule"

    def __init__(self, index: DocumentConnector) -> None:
        super().__init__(index, SCHEDULER_INDEX)

    def doc_id(self, doc: ScheduleDoc) -> str:
        return doc.index_name

    def describe(self, doc: ScheduleDoc) -> str:
        return f"schedule of {doc.index_name}"

    # -- reads ------------------------------------------------------------------------------

    def of(self, index_name: str) -> Versioned[ScheduleDoc] | None:
        """An index's schedule, read in real time."""
        return self.get("", index_name)

    def of_many(self, index_names: list[str]) -> dict[str, ScheduleDoc]:
        """The schedules of several indexes, read in real time in one round trip (by index name)."""
        if not index_names:
            return {}
        found = (self.parse(f) for f in self.index.get_many(SCHEDULER_INDEX, index_names))
        return {v.doc.index_name: v.doc for v in found if v is not None}

    def active(self, size: int = 10_000) -> list[Versioned[ScheduleDoc]]:
        """Every schedule the scheduler looks after (pending, enabled, running), soonest due first
        (a search: it lags writes by up to a refresh; each is read again by id before it is moved)."""
        return self.search(
            None, Terms("state", tuple(s.value for s in ACTIVE)), sort=(("nextRunTime", "asc"),), size=size
        )

    # -- what statements ask for --------------------------------------------------------------

    def arm(self, terms: ScheduleTerms, now: int | None = None) -> Versioned[ScheduleDoc] | None:
        """A CREATE's schedule, ``pending`` until its index exists: created, or a disabled (or
        still pending) one re-armed with ``terms``. None when the index's schedule is enabled or
        running: the index exists and is scheduled already (the CREATE will say so)."""
        at = now if now is not None else now_millis()

        def arm(current: Versioned[ScheduleDoc]) -> Versioned[ScheduleDoc] | None:
            if current.doc.state not in (_S.DISABLED, _S.PENDING):
                return None
            return self._move(current, _S.PENDING, **terms.fields(), **_fresh(at), last_error="", last_outcome="")

        doc = ScheduleDoc(
            index_name=terms.index_name,
            data_source_name=terms.datasource,
            state=_S.PENDING,
            **terms.fields(),
            last_update_time=at,
        )
        return self._create_or_change(doc, arm)

    def enable(self, terms: ScheduleTerms, next_run: int, now: int | None = None) -> Versioned[ScheduleDoc]:
        """Enable the index's schedule with ``terms``, its next run at ``next_run``: created, or
        moved from any state (a run it was running is forgotten: its job ends on its own, and
        the index's state excludes a second refresh meanwhile); failures are forgotten."""
        at = now if now is not None else now_millis()
        doc = ScheduleDoc(
            index_name=terms.index_name,
            data_source_name=terms.datasource,
            state=_S.ENABLED,
            **terms.fields(),
            enabled_time=at,
            next_run_time=next_run,
            last_update_time=at,
        )

        def enable(current: Versioned[ScheduleDoc]) -> Versioned[ScheduleDoc]:
            fields = {**terms.fields(), **_fresh(at), "next_run_time": next_run, "enabled_time": at}
            return self._move(current, _S.ENABLED, **fields, failures=0, last_error="", refreshed_digest="")

        enabled = self._create_or_change(doc, enable)
        assert enabled is not None  # enable never gives up
        return enabled

    def change_interval(
        self, index_name: str, interval: str, interval_millis: int, next_run: int, now: int | None = None
    ) -> Versioned[ScheduleDoc] | None:
        """A new interval for an enabled (or running) schedule, its next run at ``next_run``.
        None when the index has no such schedule."""
        at = now if now is not None else now_millis()

        def change(current: Versioned[ScheduleDoc]) -> Versioned[ScheduleDoc] | None:
            if current.doc.state not in (_S.ENABLED, _S.RUNNING):
                return None
            return self._move(
                current,
                current.doc.state,
                interval=interval,
                interval_millis=interval_millis,
                next_run_time=next_run,
                last_update_time=at,
            )

        found = self.of(index_name)
        return self._change(found, change) if found is not None else None

    def disable(self, index_name: str, reason: str, now: int | None = None) -> Versioned[ScheduleDoc] | None:
        """Turn the index's schedule off, saying why (None: it has none). A run in progress is
        not stopped here: the statement that disables it stops the run's job."""
        at = now if now is not None else now_millis()

        def disable(current: Versioned[ScheduleDoc]) -> Versioned[ScheduleDoc] | None:
            if current.doc.state == _S.DISABLED:
                return current
            return self._move(current, _S.DISABLED, last_error=reason[:MAX_SCHEDULE_ERROR], last_update_time=at)

        found = self.of(index_name)
        return self._change(found, disable) if found is not None else None

    def remove(self, index_name: str) -> bool:
        """Delete the index's schedule (VACUUM); False when it had none."""

        def delete(current: Versioned[ScheduleDoc]) -> Versioned[ScheduleDoc] | None:
            self.index.delete_if(SCHEDULER_INDEX, index_name, Version(current.seq_no, current.primary_term))
            return current

        return retry_on_conflict(lambda: self.of(index_name), delete) is not None

    # -- the scheduler's moves ----------------------------------------------------------------

    def activate(
        self,
        current: Versioned[ScheduleDoc],
        scheduled_query: str,
        interval: str,
        interval_millis: int,
        next_run: int,
        now: int | None = None,
    ) -> Versioned[ScheduleDoc] | None:
        """A pending schedule whose index now exists, enabled (``pending → enabled``) with the
        ``REFRESH`` its runs submit and the interval its index was made with, the first run due
        at ``next_run``."""
        if current.doc.state != _S.PENDING:
            return None
        at = now if now is not None else now_millis()
        return self._once(
            current,
            _S.ENABLED,
            scheduled_query=scheduled_query,
            interval=interval,
            interval_millis=interval_millis,
            enabled_time=at,
            next_run_time=next_run,
            last_update_time=at,
        )

    def claim(
        self,
        current: Versioned[ScheduleDoc],
        claimed_by: str,
        next_run: int,
        source_digest: str = "",
        now: int | None = None,
    ) -> Versioned[ScheduleDoc] | None:
        """Claim the run due at ``current``'s next run time (``enabled → running``), moving the
        next run to ``next_run``. None when another process claimed it first, or the schedule
        moved (the caller re-reads)."""
        doc = current.doc
        if doc.state != _S.ENABLED:
            return None
        at = now if now is not None else now_millis()
        run = ScheduleRun(due_time=doc.next_run_time, claim_time=at, claimed_by=claimed_by, source_digest=source_digest)
        return self._once(current, _S.RUNNING, run=run, next_run_time=next_run, last_update_time=at)

    def launched(
        self, current: Versioned[ScheduleDoc], query_id: str, session_id: str, job_id: str, now: int | None = None
    ) -> Versioned[ScheduleDoc] | None:
        """The claimed run was submitted: its query, batch session and job."""
        doc = current.doc
        if doc.state != _S.RUNNING or doc.run.query_id:
            return None
        at = now if now is not None else now_millis()
        run = doc.run.model_copy(update={"query_id": query_id, "session_id": session_id, "job_id": job_id})
        return self._once(current, _S.RUNNING, run=run, runs=doc.runs + 1, last_run_time=at, last_update_time=at)

    def settle(
        self,
        current: Versioned[ScheduleDoc],
        outcome: str,
        error: str,
        next_run: int,
        now: int | None = None,
    ) -> Versioned[ScheduleDoc] | None:
        """The claimed run's turn ended with ``outcome`` (``running → enabled``): failures counted
        (reset by a success, which also adopts the run's source fingerprint), the next run at
        ``next_run``."""
        doc = current.doc
        if doc.state != _S.RUNNING:
            return None
        at = now if now is not None else now_millis()
        fields: dict[str, Any] = {"last_outcome": outcome, "last_error": error[:MAX_SCHEDULE_ERROR]}
        if outcome == "success":
            fields.update(failures=0, refreshed_digest=doc.run.source_digest)
        elif outcome == "failed":
            fields["failures"] = doc.failures + 1
        return self._once(
            current,
            _S.ENABLED,
            **fields,
            run=ScheduleRun(),
            next_run_time=next_run,
            last_end_time=at,
            last_update_time=at,
        )

    def pass_turn(
        self, current: Versioned[ScheduleDoc], outcome: str, reason: str, next_run: int, now: int | None = None
    ) -> Versioned[ScheduleDoc] | None:
        """A tick that launched nothing (the previous run still runs, the source is unchanged, no
        refresh share was free): recorded, the next run at ``next_run``; the state is kept (a run
        in progress stays claimed)."""
        doc = current.doc
        if doc.state not in (_S.ENABLED, _S.RUNNING):
            return None
        at = now if now is not None else now_millis()
        fields: dict[str, Any] = {"next_run_time": next_run, "last_update_time": at}
        if doc.state == _S.RUNNING:
            fields["skips"] = doc.skips + 1
        else:
            fields.update(last_outcome=outcome, last_error=reason[:MAX_SCHEDULE_ERROR], last_end_time=at)
        return self._once(current, doc.state, **fields)

    # -- helpers ------------------------------------------------------------------------------

    def _once(
        self, current: Versioned[ScheduleDoc], state: ScheduleState, **fields: Any
    ) -> Versioned[ScheduleDoc] | None:
        try:
            return self._move(current, state, **fields)
        except VersionConflictError:
            return None

    def _create_or_change(
        self, doc: ScheduleDoc, change: Callable[[Versioned[ScheduleDoc]], Versioned[ScheduleDoc] | None]
    ) -> Versioned[ScheduleDoc] | None:
        """Create ``doc``; if the index has a schedule already, apply ``change`` to it (again
        after each conflicting write)."""
        found = self.of(doc.index_name)
        if found is None:
            try:
                return self.create(doc)
            except DocumentExistsError:
                found = self.of(doc.index_name)
                if found is None:
                    raise
        return self._change(found, change)


def _fresh(at: int) -> dict[str, Any]:
    """The fields of a schedule (re)started: no run, no skips, written at ``at``."""
    return {"run": ScheduleRun(), "last_update_time": at}
