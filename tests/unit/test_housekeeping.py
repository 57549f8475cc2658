"""Old documents go, recent ones stay; one plugin process at a time does it."""

from __future__ import annotations

from async_query.workers import DAY_MS, Housekeeper, Lease
from query_core.ids import new_id, request_index
from query_core.models import ResultDoc, SessionDoc, StatementDoc, now_millis
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import seed


def test_housekeeping_deletes_only_old_documents(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0]
    now = now_millis()
    old_sid, new_sid = new_id(ds.name), new_id(ds.name)
    seed(store,
        SessionDoc(
            session_id=old_sid, data_source_name=ds.name, state=SessionState.DEAD, last_update_time=now - 31 * DAY_MS
        )
    )
    seed(store,
        SessionDoc(
            session_id=new_sid, data_source_name=ds.name, state=SessionState.DEAD, last_update_time=now - 29 * DAY_MS
        )
    )
    ids = {}
    for label, age_days in (("old", 31), ("new", 29)):
        qid = new_id(ds.name)
        ids[label] = qid
        seed(store,
            StatementDoc(
                statement_id=qid,
                query_id=qid,
                session_id=new_sid,
                query="SELECT 1",
                data_source_name=ds.name,
                submit_time=now - age_days * DAY_MS,
            )
        )
    results = {}
    for label, age_days in (("old", 61), ("new", 59)):
        qid = new_id(ds.name)
        results[label] = qid
        store.results.put(ds.results, ResultDoc(query_id=qid, status="SUCCESS", update_time=now - age_days * DAY_MS))

    store.index.refresh("*")  # the sweep deletes what a search finds
    plugin.housekeeper.run_once()

    assert store.statements.get(ds.name, ids["old"]) is None
    assert store.statements.get(ds.name, ids["new"]) is not None
    assert store.sessions.get(ds.name, old_sid) is None
    assert store.sessions.get(ds.name, new_sid) is not None
    assert store.results.get(ds.results, results["old"]) is None
    assert store.results.get(ds.results, results["new"]) is not None
    assert plugin.housekeeper.deleted == 3


def test_only_one_process_holds_the_housekeeping_lease(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0]
    first = Lease(store, "housekeeping-lease", lease_ms=60_000, owner="plugin-a")
    second = Lease(store, "housekeeping-lease", lease_ms=60_000, owner="plugin-b")
    assert first.acquire(ds.name)
    assert not second.acquire(ds.name)
    assert first.acquire(ds.name)  # renewal by the holder

    other = Housekeeper(store, plugin.datasources, plugin.liveness, 60, 30, 60, second)
    qid = new_id(ds.name)
    store.statements.create(
        StatementDoc(
            statement_id=qid,
            query_id=qid,
            session_id="s",
            query="q",
            data_source_name=ds.name,
            submit_time=now_millis() - 40 * DAY_MS,
        )
    )
    other.run_once()
    assert store.statements.get(ds.name, qid) is not None  # plugin-b holds no lease: it did nothing
    assert other.deleted == 0


def test_an_expired_lease_is_taken_over(store: Store) -> None:
    index = request_index("local")
    assert store.locks.acquire_lease(index, "lease", "a", lease_ms=-1)  # expires at once
    assert store.locks.acquire_lease(index, "lease", "b", lease_ms=60_000)
    assert not store.locks.acquire_lease(index, "lease", "a", lease_ms=60_000)
