"""A POST's pending-id signal, written to its session just after the reply
(:mod:`async_query.pending_signals`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from async_query.handlers.base import SubmitRequest, Submitted
from async_query.pending_signals import PendingSignals
from async_query.runtime import Plugin
from query_core.models import SessionDoc, Versioned
from query_core.states import SessionState, StatementState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import job_beats


def test_posts_into_a_session_reach_its_list_in_their_order(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    _running(store, ds, first.session_id)
    start = threading.Barrier(6)
    done: list[str] = []

    def post(n: int) -> None:
        start.wait()
        done.append(plugin.service.submit(SubmitRequest(ds, "sql", f"SELECT {n}", first.session_id)).query_id)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(1, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    plugin.signals.flush()
    session = store.sessions.get(ds, first.session_id)
    assert session is not None and session.doc.state == SessionState.RUNNING
    assert session.doc.pending_statement_ids[0] == first.query_id
    assert sorted(session.doc.pending_statement_ids[1:]) == sorted(done) and len(done) == 6
    assert plugin.signals.queued == 0


def test_a_session_that_ended_before_the_signal_fails_the_statement(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    session = _running(store, ds, first.session_id)
    statement = store.statements.get(ds, first.query_id)
    assert statement is not None
    plugin.signals.flush()
    assert store.sessions.end(session, SessionState.DEAD, "its job died") is not None
    # A signaller stopped before its first signal writes each at once, in the caller's thread:
    # here, to the session as the POST chose it, which has ended since.
    signals = PendingSignals(store, keep=100)
    signals.stop()
    signals.add(session, statement)
    failed = store.statements.get(ds, first.query_id)
    assert failed is not None and failed.doc.state == StatementState.FAILED
    assert "ended before the statement could run; submit it again" in failed.doc.error


def test_the_stop_writes_what_is_queued_and_a_post_after_it_is_written_before_its_reply(
    make_plugin: PluginFactory, store: Store
) -> None:
    plugin = make_plugin()
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    _running(store, ds, first.session_id)
    plugin.signals.stop()
    late = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", first.session_id))
    assert plugin.signals.queued == 0
    session = store.sessions.get(ds, first.session_id)
    assert session is not None and session.doc.pending_statement_ids == [first.query_id, late.query_id]


def test_the_next_post_takes_the_session_as_the_signal_wrote_it(
    make_plugin: PluginFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = make_plugin(session_reuse_ms=600_000)  # long enough that the test never races it
    ds, first, second = _signalled(plugin, store)
    kept = plugin.signals.written(first.session_id)
    current = store.sessions.get(ds, first.session_id)
    assert kept is not None and current is not None and kept.seq_no == current.seq_no
    reads = _count_session_reads(store, monkeypatch)
    third = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 2", first.session_id))
    assert third.session_id == first.session_id and reads == []
    plugin.signals.flush()
    session = store.sessions.get(ds, first.session_id)
    assert session is not None
    assert session.doc.pending_statement_ids == [first.query_id, second.query_id, third.query_id]


def test_another_write_of_this_process_to_the_session_drops_the_copy(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin(session_reuse_ms=600_000)
    _, first, _ = _signalled(plugin, store)
    kept = plugin.signals.written(first.session_id)
    assert kept is not None
    job_beats(store, kept)  # through this process's connector
    assert plugin.signals.written(first.session_id) is None


def test_a_write_by_another_thread_just_after_the_append_is_not_undone_by_the_copy(
    make_plugin: PluginFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread of this process ends the session between the append's write and the
    keeping of its copy: the copy is not kept, and the next POST starts a new session."""
    plugin = make_plugin(session_reuse_ms=600_000)
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    _running(store, ds, first.session_id)
    plugin.signals.flush()  # the first statement's signal, written before the patch
    append = store.sessions.append_pending

    def append_then_ended_elsewhere(*args: Any, **kwargs: Any) -> Any:
        written = append(*args, **kwargs)
        ender = threading.Thread(target=store.sessions.end, args=(written, SessionState.DEAD, "its job died"))
        ender.start()
        ender.join()
        return written

    monkeypatch.setattr(store.sessions, "append_pending", append_then_ended_elsewhere)
    plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", first.session_id))
    plugin.signals.flush()
    monkeypatch.undo()
    ended = store.sessions.get(ds, first.session_id)
    assert ended is not None and ended.doc.state == SessionState.DEAD
    assert plugin.signals.written(first.session_id) is None
    late = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 2", first.session_id))
    assert late.session_id != first.session_id


def test_a_write_by_another_thread_that_lands_after_the_append_but_is_told_first_is_not_undone(
    make_plugin: PluginFactory, store: Store
) -> None:
    """The store tells of a write once it is answered. Another thread ends the session after the
    append's write has landed, and is told of before the append's own write is: the copy is not
    kept, and the next POST starts a new session."""
    plugin = make_plugin(session_reuse_ms=600_000)
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    _running(store, ds, first.session_id)
    plugin.signals.flush()  # the first statement's signal, written before the listener
    ended: list[Versioned[SessionDoc] | None] = []
    ender = threading.Thread(target=lambda: ended.append(_end(store, ds, first.session_id)))

    def before_the_appenders_own(doc_id: str) -> None:
        """The next write told of the session is the append's (its loop's thread or a flush's)."""
        if doc_id == first.session_id and ender.ident is None:
            ender.start()
            ender.join()

    store.index.write_listeners.insert(0, before_the_appenders_own)
    try:
        plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", first.session_id))
        plugin.signals.flush()
    finally:
        store.index.write_listeners.remove(before_the_appenders_own)
    assert ended and ended[0] is not None and ended[0].doc.state == SessionState.DEAD
    assert plugin.signals.written(first.session_id) is None
    late = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 2", first.session_id))
    assert late.session_id != first.session_id


def test_without_reuse_nothing_is_kept(make_plugin: PluginFactory, store: Store) -> None:
    plugin = make_plugin(session_reuse_ms=0)
    _, first, _ = _signalled(plugin, store)
    assert plugin.signals.written(first.session_id) is None


def test_a_session_ended_elsewhere_since_the_copy_fails_the_next_statement(
    make_plugin: PluginFactory, store: Store
) -> None:
    """The copy said running; the session's job ended it meanwhile (a write this process does not
    see): the POST is taken, and the signal's conditional write finds the end and fails it."""
    plugin = make_plugin(session_reuse_ms=600_000)
    ds, first, _ = _signalled(plugin, store)
    kept = plugin.signals.written(first.session_id)
    assert kept is not None
    with _unseen_by(plugin.signals.forget, store):
        assert store.sessions.end(kept, SessionState.DEAD, "its job died") is not None
    late = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 2", first.session_id))
    assert late.session_id == first.session_id
    plugin.signals.flush()
    failed = store.statements.get(ds, late.query_id)
    assert failed is not None and failed.doc.state == StatementState.FAILED
    assert "ended before the statement could run; submit it again" in failed.doc.error


def _signalled(plugin: Plugin, store: Store) -> tuple[str, Submitted, Submitted]:
    """A running session (its first statement), and a second statement POSTed into it, its
    signal written."""
    ds = plugin.datasources.all()[0].name
    first = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 0"))
    _running(store, ds, first.session_id)
    second = plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1", first.session_id))
    plugin.signals.flush()
    return ds, first, second


def _count_session_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Session ids read by id through ``store`` from now on."""
    reads: list[str] = []
    read = store.sessions.get

    def counted(datasource: str, session_id: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(session_id)
        return read(datasource, session_id, *args, **kwargs)

    monkeypatch.setattr(store.sessions, "get", counted)
    return reads


@contextmanager
def _unseen_by(listener: Any, store: Store) -> Iterator[None]:
    """Writes made meanwhile are another process's to ``listener``."""
    store.index.write_listeners.remove(listener)
    try:
        yield
    finally:
        store.index.write_listeners.append(listener)


def _end(store: Store, ds: str, session_id: str) -> Versioned[SessionDoc] | None:
    """The session, read and ended."""
    current = store.sessions.get(ds, session_id)
    assert current is not None
    return store.sessions.end(current, SessionState.DEAD, "its job died")


def _running(store: Store, ds: str, session_id: str) -> Versioned[SessionDoc]:
    """The session, started by its job (a heartbeat written)."""
    found = store.sessions.get(ds, session_id)
    assert found is not None
    return job_beats(store, found)
