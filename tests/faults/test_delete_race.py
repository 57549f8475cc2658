"""100 rounds of DELETE racing the completion of ``SELECT 1`` in one warm session.

Each round submits, waits a random 0-200 ms (the race: the DELETE lands while the statement is
waiting, running, or already done), deletes, and polls to a terminal state. Whatever the timing:
DELETE answers 204 (then the query ends CANCELLED) or 400 (only when it had already finished: then
it ends SUCCESS), exactly one terminal state is ever seen, and it never changes afterwards, neither
on GET nor in the statement document.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from async_query.api import create_app
from query_core.states import SessionState, StatementState
from tests.e2e.conftest import TERMINAL, Api
from tests.faults.conftest import close_service, fault_service
from tests.faults.procs import kill_all_jobs
from tests.support import serve_http, wait_for

pytestmark = pytest.mark.e2e

ROUNDS = 100


def _poll_to_terminal(api: Api, query_id: str, timeout: float = 60) -> list[str]:
    """Every status GET answered, in order, until the first terminal one."""
    seen: list[str] = []

    def probe() -> bool:
        seen.append(api.get(query_id)["status"])
        return seen[-1] in TERMINAL

    wait_for(probe, timeout=timeout, interval=0.02, what=f"{query_id} to finish")
    return seen


def test_delete_racing_completion_has_one_terminal_outcome(
    module_index_url: str, module_ds_name: str, tmp_path: Path
) -> None:
    plugin = fault_service(module_index_url, tmp_path, module_ds_name, heartbeat_idle_ms=5_000)
    data_dir = plugin.settings.data_dir
    rng = random.Random(20240229)
    outcomes: Counter[tuple[int, str]] = Counter()
    finals: dict[str, str] = {}
    try:
        with serve_http(create_app(plugin)) as url:
            api = Api(url, module_ds_name)
            warm, reply = api.run("SELECT 1", timeout=120)
            assert reply["status"] == "SUCCESS"
            sid = warm["sessionId"]
            job_id = plugin.store.sessions.get(module_ds_name, sid).doc.job_id  # type: ignore[union-attr]

            for round_no in range(ROUNDS):
                submitted = api.submit("SELECT 1 AS one", sid)
                qid = submitted["queryId"]
                assert submitted["sessionId"] == sid, f"round {round_no}: the warm session was replaced"
                # Deliberate delay: it moves the DELETE across the statement's life (waiting,
                # running, finishing, finished); not a wait for anything.
                time.sleep(rng.uniform(0, 0.2))
                deleted = api.cancel(qid)
                assert deleted.status_code in (204, 400), (round_no, deleted.status_code, deleted.text)
                seen = _poll_to_terminal(api, qid)
                final = seen[-1]
                later = [api.get(qid)["status"] for _ in range(3)]
                doc = plugin.store.statements.get(module_ds_name, qid)
                assert doc is not None
                context: dict[str, Any] = {"round": round_no, "delete": deleted.status_code, "seen": seen}
                assert later == [final] * 3, {**context, "later": later}
                assert doc.doc.state.value.upper() == final, {**context, "document": doc.doc.state}
                if deleted.status_code == 204:
                    assert final == "CANCELLED", context
                else:
                    body = deleted.json()
                    assert body["status"] == 400 and body["error"]["type"] == "IllegalStateException", body
                    assert "success" in body["error"]["details"], body
                    assert final == "SUCCESS", context
                    assert api.get(qid) == {
                        "status": "SUCCESS",
                        "schema": [{"name": "one", "type": "integer"}],
                        "datarows": [[1]],
                        "total": 1,
                        "size": 1,
                    }
                outcomes[(deleted.status_code, final)] += 1
                finals[qid] = final

            # After all rounds, with the job idle: no statement moved since its round, as the
            # documents and a second plugin instance (no reply cache) both tell.
            wait_for(
                lambda: not plugin.store.sessions.get(module_ds_name, sid).doc.running_statements,  # type: ignore[union-attr]
                timeout=30,
                what="the heartbeat to show nothing running",
            )
            other = fault_service(module_index_url, tmp_path / "other", module_ds_name)
            try:
                for qid, final in finals.items():
                    doc = plugin.store.statements.get(module_ds_name, qid)
                    assert doc is not None and doc.doc.state == StatementState(final.lower()), (qid, final, doc)
                    assert json.loads(other.service.get(qid))["status"] == final, (qid, final, other.service.get(qid))
            finally:
                close_service(other)
            session = plugin.store.sessions.get(module_ds_name, sid)
            assert session is not None and session.doc.state == SessionState.RUNNING and session.doc.job_id == job_id
    finally:
        print(f"\nDELETE race outcomes over {sum(outcomes.values())} rounds (delete status, final status):")
        for (code, final), count in sorted(outcomes.items()):
            print(f"  DELETE {code} -> {final}: {count}")
        for log in (data_dir / "logs").glob("*.log"):
            text = log.read_text(errors="replace")
            print(
                f"  job log {log.name}: {text.count('cancelled: cancelling its Spark job group')} cancels seen while"
                f" running, {text.count('moved before it could start')} statements cancelled between pick-up and start"
            )
        close_service(plugin)
        kill_all_jobs(data_dir)

    assert sum(outcomes.values()) == ROUNDS
    # Both sides of the race were exercised (a fixed seed keeps the delays the same run to run).
    assert outcomes[(204, "CANCELLED")] > 0 and outcomes[(400, "SUCCESS")] > 0, outcomes
