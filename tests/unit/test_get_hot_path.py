"""The pieces of GET's hot path that need no server: staleness with late beats, the beat-lag
figure the job advertises, and the session cache."""

from __future__ import annotations

import time

from async_query.liveness import MAX_LAG_INTERVALS, Staleness
from async_query.session_cache import SessionCache
from flint_repl_job.heartbeat import BeatLag
from query_core.models import SessionDoc, Versioned, now_millis
from query_core.states import SessionState

STALENESS = Staleness(stale_heartbeats=3, start_timeout_s=300, default_interval_ms=30_000)


def running(age_ms: int, interval_ms: int = 2_000, lag_ms: int = 0) -> SessionDoc:
    return SessionDoc(
        session_id="s1",
        data_source_name="local",
        state=SessionState.RUNNING,
        last_update_time=now_millis() - age_ms,
        heartbeat_interval_millis=interval_ms,
        heartbeat_lag_millis=lag_ms,
    )


def test_the_limit_is_missed_beats_of_the_advertised_interval_when_beats_land_on_time() -> None:
    assert STALENESS.limit_ms(running(0)) == 6_000
    assert STALENESS.is_fresh(running(5_000))
    assert not STALENESS.is_fresh(running(7_000))


def test_late_beats_stretch_the_limit_so_an_overloaded_session_stays_fresh() -> None:
    # Beats landing 1.5 s late on a 2 s schedule (an overloaded index): one every 3.5 s.
    late = running(7_000, lag_ms=1_500)
    assert STALENESS.limit_ms(late) == (2_000 + 1_500) * 3
    assert STALENESS.is_fresh(late)
    assert not STALENESS.is_fresh(running(11_000, lag_ms=1_500))


def test_the_stretch_is_capped_so_a_session_whose_beats_stopped_is_still_suspected() -> None:
    huge = running(0, lag_ms=10_000_000)
    assert STALENESS.limit_ms(huge) == 2_000 * (1 + MAX_LAG_INTERVALS) * 3
    assert not STALENESS.is_fresh(running(31_000, lag_ms=10_000_000))
    assert STALENESS.limit_ms(running(0, lag_ms=-5)) == 6_000


def test_the_beat_lag_remembers_a_late_beat_for_a_few_beats() -> None:
    lag = BeatLag()
    assert lag.record(due_ms=1_000, landed_ms=1_010) == 10
    assert lag.record(due_ms=3_000, landed_ms=7_000) == 4_000
    assert lag.record(due_ms=9_000, landed_ms=9_000) == 2_000  # halves on a punctual beat
    assert lag.record(due_ms=11_000, landed_ms=11_000) == 1_000
    assert lag.record(due_ms=13_000, landed_ms=12_990) == 500  # early is not negative


def versioned(seq_no: int, interval_ms: int = 2_000) -> Versioned[SessionDoc]:
    return Versioned(running(0, interval_ms=interval_ms), seq_no, 1)


def test_the_session_cache_serves_a_read_only_while_it_is_young() -> None:
    cache = SessionCache(max_age_s=0.2)
    cache.put(versioned(3), cache.generation())
    assert cache.get("s1") is not None and cache.get("s1").seq_no == 3  # type: ignore[union-attr]
    assert cache.get("other") is None
    stale = SessionCache(max_age_s=0.2)
    stale.put(versioned(4), stale.generation(), read_at=time.monotonic() - 0.5)  # its age counts from the read
    assert stale.get("s1") is None


def test_the_session_cache_never_replaces_a_newer_version_with_an_older_read() -> None:
    cache = SessionCache(max_age_s=5)
    cache.put(versioned(7), cache.generation())
    cache.put(versioned(5), cache.generation())
    assert cache.get("s1").seq_no == 7  # type: ignore[union-attr]


def test_a_write_of_this_process_drops_the_entry_and_any_read_begun_before_it() -> None:
    cache = SessionCache(max_age_s=5)
    cache.put(versioned(1), cache.generation())
    before_write = cache.generation()  # a GET starts reading the session ...
    cache.forget("s1")  # ... this process writes it meanwhile ...
    assert cache.get("s1") is None
    cache.put(versioned(2), before_write)  # ... the GET's read is older than the write: not kept
    assert cache.get("s1") is None
    cache.put(versioned(3), cache.generation())
    assert cache.get("s1").seq_no == 3  # type: ignore[union-attr]


def test_a_zero_max_age_turns_the_cache_off() -> None:
    cache = SessionCache(max_age_s=0)
    cache.put(versioned(1), cache.generation())
    assert cache.get("s1") is None


def test_the_cache_keeps_at_most_its_entries() -> None:
    cache = SessionCache(max_age_s=5, entries=2)
    for i in range(3):
        doc = running(0).model_copy(update={"session_id": f"s{i}"})
        cache.put(Versioned(doc, 1, 1), cache.generation())
    assert cache.get("s0") is None and cache.get("s1") is not None and cache.get("s2") is not None
