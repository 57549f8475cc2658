"""A user's past queries, for the console's history (``docs/console.md``).

The history is the statement documents themselves: each records its text, datasource, language,
state, submission time and submitter (``submittedBy``), so no document of its own is written and
nothing can disagree with what GET answers. It is read by a search over every request index,
newest first (so a query submitted in the last second may be missing until the index refreshes),
the caller's own statements only unless the caller is an admin. The text filter is applied here
to the newest :data:`SCANNED` statements, so that it holds whatever the request index's mapping
makes of the ``query`` field. Row counts and end times come from the result documents, read
without their rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from async_query.datasources import DatasourceRegistry
from async_query.security.principal import Principal
from query_core.models import StatementDoc
from query_core.states import is_terminal
from query_core.store import Store
from query_core.store.results import ResultSummary

#: How many of the newest statements a history request looks through.
SCANNED = 500
#: An error is shown up to this many characters in a history entry (the query's GET has it whole).
ERROR_CHARS = 500


class History:
    def __init__(self, store: Store, datasources: DatasourceRegistry) -> None:
        self.store = store
        self.datasources = datasources

    def entries(self, principal: Principal, text: str = "", size: int = 50) -> list[dict[str, Any]]:
        """The caller's newest statements (everyone's for an admin) whose text, datasource, id or
        status holds ``text`` (case-insensitive), at most ``size``."""
        owner = None if principal.is_admin else principal.name
        needle = text.strip().lower()
        picked = [v.doc for v in self.store.statements.recent(owner, size=SCANNED, fresh=True) if _matches(v.doc, needle)][:size]
        summaries = self._summaries(picked)
        return [_entry(doc, summaries.get(doc.query_id)) for doc in picked]

    def _summaries(self, docs: list[StatementDoc]) -> dict[str, ResultSummary]:
        by_datasource: dict[str, list[str]] = defaultdict(list)
        for doc in docs:
            by_datasource[doc.data_source_name].append(doc.query_id)
        found: dict[str, ResultSummary] = {}
        for name, ids in by_datasource.items():
            datasource = self.datasources.known(name)
            if datasource is not None:
                found.update(self.store.results.summaries(datasource.results, ids))
        return found


def _matches(doc: StatementDoc, needle: str) -> bool:
    if not needle:
        return True
    return any(needle in value.lower() for value in (doc.query, doc.data_source_name, doc.query_id, doc.state.value))


def _entry(doc: StatementDoc, summary: ResultSummary | None) -> dict[str, Any]:
    ended = is_terminal(doc.state)
    return {
        "queryId": doc.query_id,
        "sessionId": doc.session_id,
        "datasource": doc.data_source_name,
        "lang": doc.lang,
        "query": doc.query,
        "status": doc.state.value.upper(),
        "submitTime": doc.submit_time,
        "endTime": summary.update_time if ended and summary is not None and summary.update_time else None,
        "runMillis": summary.run_ms if summary is not None else None,
        "rows": summary.rows if summary is not None else None,
        "error": doc.error[:ERROR_CHARS],
        "submittedBy": doc.submitted_by,
    }
