"""What each user's statements and results hold in the index: one usage document per user (doc
id ``usage-<the first 20 hex digits of the SHA-256 of the name>``, in the usage index),
counting the bytes written for the user day by day (UTC). See ``docs/security.md`` ("What one
user may store") and ``docs/documents.md``.

The usage index syncs its translog each second rather than at each write
(``index_mappings.USAGE_TRANSLOG``): a charge is the one write of a POST that needs no disk sync
of its own, since losing it to a crash loses no query. A user charged before the usage index
existed has the document in the deployment-wide index; it is read from there and carried over by
the user's next charge.

- **At POST** (:meth:`UsageRepository.charge` with a ``limit``): the statement's bytes are added
  and the bound checked in one conditional write of the user's document, read by id (real time):
  two plugin processes charging one user at once conflict on that write, and the loser re-reads.
  A charge that would pass the bound is refused, and nothing is written.
- **In the job** (:meth:`UsageRepository.charge` without one): once a result is written, its
  bytes (:func:`result_bytes`) are added, whatever the bound (the statement was accepted).

Nothing here depends on a search: a user's figure is one document read by id. A charge starts
from the document as this process last wrote it, when it has written it (a read by id of a
document written since the last refresh makes the index refresh first, as long as a write): the
write is conditional on that version, so a charge of another process since is a conflict, and the
charge then reads the document and tries again, as it does after any conflict. The accounting is
approximate, on purpose: bytes are counted as written (UTF-8 text, a fixed overhead per document),
not as the index stores them; what was written more than the window ago is taken to be gone (the
results' retention removes it); a deleted or failed query is not refunded; and a charge that keeps
losing its conditional write to others (:data:`ATTEMPTS` times) is dropped with a warning.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from query_core.errors import DocumentExistsError, InvalidRequestError, TooManyRequestsError, VersionConflictError
from query_core.ids import DEPLOYMENT_INDEX, USAGE_INDEX
from query_core.models import ResultDoc, now_millis
from query_core.store.connector import DocumentConnector, Found

log = logging.getLogger(__name__)

USAGE_TYPE = "usage"
#: How often a charge re-reads and writes again after losing its conditional write to another.
ATTEMPTS = 16
#: The longest pause between two tries of a charge that lost a race (jittered, growing).
CONFLICT_PAUSE_S = 0.05
#: The bytes a document costs beyond its text (names, ids, states, times): counted per document.
DOCUMENT_OVERHEAD = 512
#: How many users' documents a process keeps as it last wrote them (the most recently charged).
KNOWN_USERS = 10_000
#: The user whose statements carry no submitter (``ASYNC_QUERY_AUTH=none``, or another plugin's).
NOBODY = "anonymous"


class UserStorageExceededError(TooManyRequestsError):
    """A user's statements and results would hold more in the index than the bound allows."""

    error_type = "StorageLimitExceededException"


@dataclass(frozen=True)
class Usage:
    """A user's bytes in the index, per UTC day (``YYYY-MM-DD``), as read."""

    user: str
    days: dict[str, int]

    def total(self, since_day: str = "") -> int:
        return sum(n for day, n in self.days.items() if day >= since_day)


def usage_id(user: str) -> str:
    """The document id of ``user``'s usage: the first 20 hex digits of the SHA-256 of the name,
    as the user slots have it (valid whatever the name; the documents do not list the users)."""
    return "usage-" + hashlib.sha256(user.encode()).hexdigest()[:20]


def statement_bytes(query: str) -> int:
    """What a statement's documents hold: its text and its document's overhead."""
    return _text_bytes(query) + DOCUMENT_OVERHEAD


def result_bytes(doc: ResultDoc) -> int:
    """What a result's documents hold: the statement's text again (``queryText``), the error, both
    encodings of the rows (of every document of the result when it has more than one: their row
    bytes are recorded in ``chunks.bytes``), and an overhead per document."""
    rows = doc.lossless.datarows if doc.lossless is not None else ""
    stored_rows = doc.chunks.bytes if doc.chunks is not None and doc.chunks.bytes else _text_bytes(rows)
    documents = 1 + (len(doc.chunks.chunk_rows) if doc.chunks is not None else 0)
    reference = sum(_text_bytes(r) for r in doc.result) + sum(_text_bytes(s) for s in doc.schema_)
    return (
        _text_bytes(doc.query_text) + _text_bytes(doc.error) + stored_rows + reference + documents * DOCUMENT_OVERHEAD
    )


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def day_of(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime("%Y-%m-%d")


class UsageRepository:
    """Users' usage documents, and the one operation on them, :meth:`charge`."""

    def __init__(self, index: DocumentConnector) -> None:
        self.index = index
        #: Each user's document as this process last wrote it, by id: a charge starts from it
        #: rather than from a read (see the module's documentation), most recent last.
        self._known: OrderedDict[str, Found] = OrderedDict()
        self._lock = threading.Lock()

    def _last_written(self, doc_id: str) -> Found | None:
        with self._lock:
            return self._known.get(doc_id)

    def _forget(self, doc_id: str) -> None:
        with self._lock:
            self._known.pop(doc_id, None)

    def _remember(self, found: Found) -> None:
        with self._lock:
            self._known[found.doc_id] = found
            self._known.move_to_end(found.doc_id)
            while len(self._known) > KNOWN_USERS:
                self._known.popitem(last=False)

    def read(self, user: str | None) -> Usage:
        """``user``'s usage, read in real time (no document: nothing held)."""
        name = user or NOBODY
        return _parse(name, self._read(usage_id(name))[0])

    def _read(self, doc_id: str) -> tuple[Found | None, bool]:
        """A user's document, read by id, and whether it is in the usage index (else it is an
        earlier version's, in the deployment index, or there is none)."""
        found = self.index.get(USAGE_INDEX, doc_id)
        if found is not None:
            return found, True
        return self.index.get(DEPLOYMENT_INDEX, doc_id), False

    def charge_statement(self, user: str | None, query: str, limit: int, window_days: float) -> int:
        """POST's charge: a statement's bytes (:func:`statement_bytes`) against ``limit``."""
        return self.charge(user, statement_bytes(query), limit=limit, window_days=window_days)

    def held(self, user: str | None, window_days: float, now: int | None = None) -> int:
        """The bytes ``user`` wrote within the last ``window_days``."""
        return self.read(user).total(_since(window_days, now))

    def charge(
        self,
        user: str | None,
        nbytes: int,
        *,
        limit: int | None = None,
        window_days: float = 60.0,
        now: int | None = None,
    ) -> int:
        """Add ``nbytes`` to ``user``'s figure for today; return what the user then holds within
        ``window_days``. With ``limit``, refuse (:class:`UserStorageExceededError`, nothing
        written) when that would pass it; days older than the window are dropped from the document."""
        name = user or NOBODY
        if limit is not None and nbytes > limit:
            raise InvalidRequestError(
                f"The statement is larger ({nbytes} bytes) than what one user may store in the index ({limit} bytes)."
            )
        now = now_millis() if now is None else now
        today, since = day_of(now), _since(window_days, now)
        doc_id = usage_id(name)
        for attempt in range(ATTEMPTS):
            if attempt:  # another charge of this user came first: let the racers spread out
                time.sleep(random.uniform(0, min(CONFLICT_PAUSE_S, 0.002 * 2**attempt)))
            found = self._last_written(doc_id) if attempt == 0 else None
            current = found is not None
            if found is None:
                found, current = self._read(doc_id)
            usage = _parse(name, found)
            held = usage.total(since)
            if limit is not None and held + nbytes > limit:
                raise UserStorageExceededError(_refusal(name, held, nbytes, limit, window_days))
            days = {day: n for day, n in usage.days.items() if day >= since or limit is None}
            days[today] = days.get(today, 0) + nbytes
            body = {"type": USAGE_TYPE, "days": _listed(days), "lastUpdateTime": now}
            try:
                if found is None or not current:
                    version = self.index.create(USAGE_INDEX, doc_id, body)
                else:
                    version = self.index.replace_if(USAGE_INDEX, doc_id, body, found.version)
            except (DocumentExistsError, VersionConflictError):
                self._forget(doc_id)
                continue  # read it again, and add to it
            self._remember(Found(doc_id, body, version))
            return held + nbytes
        log.warning("usage of %s: %d bytes not counted, its document kept changing under this charge", name, nbytes)
        return held


def _since(window_days: float, now: int | None) -> str:
    now = now_millis() if now is None else now
    return day_of(now - int(window_days * 86_400_000))


def _parse(user: str, found: Found | None) -> Usage:
    if found is None:
        return Usage(user, {})
    days: dict[str, int] = {}
    for entry in found.source.get("days") or []:
        if isinstance(entry, dict) and isinstance(entry.get("day"), str) and isinstance(entry.get("bytes"), int):
            days[entry["day"]] = entry["bytes"]
    return Usage(user, days)


def _listed(days: dict[str, int]) -> list[dict[str, Any]]:
    """The days as a list: a partial update replaces a list whole (a map would keep dropped days)."""
    return [{"day": day, "bytes": n} for day, n in sorted(days.items())]


def _refusal(user: str, held: int, nbytes: int, limit: int, window_days: float) -> str:
    return (
        f"user {user}'s statements and results of the last {window_days:g} days hold {held} bytes in the index; "
        f"this statement ({nbytes} bytes) would pass the {limit} bytes one user may store. "
        "Older ones leave the index as results expire."
    )
