"""The one retry policy: bounded in attempts and in time, exponential back-off with jitter."""

from __future__ import annotations

import time

import pytest

from query_core.retry import bounded_retrying


class TransientError(Exception):
    pass


class PermanentError(Exception):
    pass


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TransientError)


class Flaky:
    """Raises ``TransientError`` on every call (or the first ``failures`` calls), counting them."""

    def __init__(self, failures: int = 1_000_000, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or TransientError("try again")
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def recorded_sleeps(attempts: int, first: float, most: float, jitter: float) -> list[float]:
    """The sleeps between ``attempts`` failing attempts (recorded, not slept)."""
    sleeps: list[float] = []
    retrying = bounded_retrying(
        is_transient, attempts=attempts, seconds=60, first_wait=first, max_wait=most, jitter=jitter
    ).copy(sleep=sleeps.append)
    with pytest.raises(TransientError):
        retrying(Flaky())
    return sleeps


def test_waits_grow_exponentially_within_their_jitter_and_never_pass_the_cap() -> None:
    first, most, jitter = 0.1, 1.0, 0.05
    sleeps = recorded_sleeps(8, first, most, jitter)
    assert len(sleeps) == 7  # one sleep between each two attempts
    for n, slept in enumerate(sleeps, start=1):
        base = min(first * 2 ** (n - 1), most - jitter)
        assert base <= slept <= base + jitter, (n, slept)
        assert slept <= most


def test_waits_are_jittered() -> None:
    runs = [recorded_sleeps(4, 0.1, 1.0, 0.05) for _ in range(5)]
    for position in zip(*runs, strict=True):
        assert len(set(position)) > 1, f"the same wait every time: {position}"


def test_a_jitter_larger_than_the_cap_is_cut_to_the_cap() -> None:
    for slept in recorded_sleeps(6, 0.5, 0.1, 0.5):
        assert 0 <= slept <= 0.1


def test_stops_after_the_attempts() -> None:
    flaky = Flaky()
    retrying = bounded_retrying(is_transient, attempts=3, seconds=60, first_wait=0.001, max_wait=0.01)
    with pytest.raises(TransientError):  # the last error itself, not tenacity's RetryError
        retrying(flaky)
    assert flaky.calls == 3


def test_stops_after_the_time_bound() -> None:
    flaky = Flaky()
    retrying = bounded_retrying(is_transient, attempts=1_000_000, seconds=0.3, first_wait=0.01, max_wait=0.05)
    started = time.monotonic()
    with pytest.raises(TransientError):
        retrying(flaky)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 0.3 + 0.05 + 1.0
    assert 2 <= flaky.calls < 1_000


def test_success_after_transient_failures_is_returned() -> None:
    flaky = Flaky(failures=2)
    retrying = bounded_retrying(is_transient, attempts=5, seconds=60, first_wait=0.001, max_wait=0.01)
    assert retrying(flaky) == "done"
    assert flaky.calls == 3


def test_other_errors_are_not_retried() -> None:
    flaky = Flaky(error=PermanentError("no"))
    retrying = bounded_retrying(is_transient, attempts=5, seconds=60, first_wait=0.001, max_wait=0.01)
    with pytest.raises(PermanentError):
        retrying(flaky)
    assert flaky.calls == 1


def test_before_sleep_sees_each_retry() -> None:
    seen: list[int] = []
    retrying = bounded_retrying(
        is_transient,
        attempts=4,
        seconds=60,
        first_wait=0.001,
        max_wait=0.01,
        before_sleep=lambda state: seen.append(state.attempt_number),
    )
    with pytest.raises(TransientError):
        retrying(Flaky())
    assert seen == [1, 2, 3]
