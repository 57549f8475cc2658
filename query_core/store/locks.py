"""Lock documents: leases (one plugin process at a time does some housekeeping) and slots (the
deployment's limits, held race-free). The one operation is :meth:`LockRepository.take`: a
create-only write of a missing lock, or a write at the version read of a lock found free; two
processes racing for one lock conflict on that write, so at most one wins it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from query_core.errors import DocumentExistsError, VersionConflictError
from query_core.models import now_millis
from query_core.store.connector import DocumentConnector, Found

LEASE_TYPE = "lease"


class LockRepository:
    def __init__(self, index: DocumentConnector) -> None:
        self.index = index

    def read(self, index: str, lock_id: str) -> Found | None:
        return self.index.get(index, lock_id)

    def take(self, index: str, lock_id: str, body: dict[str, Any], free: Callable[[dict[str, Any]], bool]) -> bool:
        """Write ``body`` as the lock if it is missing or ``free`` says its holder is gone; False
        when it is held, or another process took it between the read and the write."""
        found = self.index.get(index, lock_id)
        try:
            if found is None:
                self.index.create(index, lock_id, body)
                return True
            if not free(found.source):
                return False
            self.index.update_if(index, lock_id, body, found.version)
            return True
        except (DocumentExistsError, VersionConflictError):
            return False

    def release(self, index: str, lock_id: str, body: dict[str, Any], held: Callable[[dict[str, Any]], bool]) -> bool:
        """Overwrite the lock with ``body`` (a free one) while ``held`` says it is still ours."""
        found = self.index.get(index, lock_id)
        if found is None or not held(found.source):
            return False
        try:
            self.index.update_if(index, lock_id, body, found.version)
            return True
        except VersionConflictError:
            return False

    def acquire_lease(self, index: str, lease_id: str, owner: str, lease_ms: int) -> bool:
        """Take or renew a lease; False while another owner holds an unexpired one."""
        now = now_millis()
        body = {"type": LEASE_TYPE, "owner": owner, "lastUpdateTime": now, "expires": now + lease_ms}
        return self.take(
            index, lease_id, body, lambda held: held.get("owner") == owner or int(held.get("expires", 0)) <= now
        )
