"""A POST that fails after its session was recorded holds nothing, on the real index server: the
failure is the server's own refusal of the statement document."""

from __future__ import annotations

import pytest

from async_query.service import SubmitRequest
from async_query.slots import INTERACTIVE_SESSIONS, SLOTS_INDEX, Slots
from query_core.errors import AsyncQueryError
from query_core.ids import request_index
from query_core.states import SessionState
from query_core.store import Store
from tests.conftest import PluginFactory
from tests.support import RecordingLauncher, driver


@pytest.mark.bare_cluster
def test_a_post_failing_after_its_session_was_recorded_ends_that_session(
    make_plugin: PluginFactory, store: Store
) -> None:
    """The statement's write is refused after the new session's was written (a request index whose
    mapping cannot take statements: ``queryId`` made a number): the session is ended at once, not
    left to idle out holding its slots, and its job is stopped."""
    launcher = RecordingLauncher()
    plugin = make_plugin(launcher, max_sessions=1)
    ds = plugin.datasources.all()[0].name
    driver(store).indices.create(
        index=request_index(ds), body={"mappings": {"properties": {"queryId": {"type": "long"}}}}
    )
    with pytest.raises(AsyncQueryError) as failed:
        plugin.service.submit(SubmitRequest(ds, "sql", "SELECT 1"))
    assert failed.value.http_status >= 400
    [request] = launcher.started
    found = store.sessions.get(ds, request.session_id)
    assert found is not None and found.doc.state == SessionState.DEAD
    assert "The request that started this session failed" in (found.doc.error or "")
    assert launcher.cancelled == ["job-1"]
    assert store.index.get(SLOTS_INDEX, "session-slot-0") is not None  # taken, then given back
    assert Slots(store, INTERACTIVE_SESSIONS, lambda: 1).holders() == [None]
