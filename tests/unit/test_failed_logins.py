"""Failed logins counted per client address (async_query/security/throttle.py), on a clock of
the test's own."""

from __future__ import annotations

import pytest

from async_query.security.errors import TooManyFailedLoginsError
from async_query.security.throttle import FailedLogins


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_failure_that_reaches_the_limit_refuses_the_address_until_the_block_ends() -> None:
    clock = Clock()
    logins = FailedLogins(allowed=3, window_s=60, block_s=30, clock=clock)
    for _ in range(2):
        logins.failed("10.0.0.1")
        logins.check("10.0.0.1")  # still let through to a check
    logins.failed("10.0.0.1")
    with pytest.raises(TooManyFailedLoginsError) as refused:
        logins.check("10.0.0.1")
    assert refused.value.http_status == 429 and refused.value.retry_after_s == 30
    assert logins.blocked() == 1
    logins.check("10.0.0.2")  # another address is not refused
    clock.now += 29.5
    with pytest.raises(TooManyFailedLoginsError) as refused:
        logins.check("10.0.0.1")
    assert refused.value.retry_after_s == 1
    clock.now += 0.5
    logins.check("10.0.0.1")
    assert logins.blocked() == 0
    # after a block, the count starts again from nothing
    logins.failed("10.0.0.1")
    logins.check("10.0.0.1")


def test_failures_further_apart_than_the_window_never_add_up() -> None:
    clock = Clock()
    logins = FailedLogins(allowed=2, window_s=60, block_s=30, clock=clock)
    for _ in range(5):
        logins.failed("10.0.0.1")
        clock.now += 60
        logins.check("10.0.0.1")
    assert logins.blocked() == 0


@pytest.mark.parametrize("limits", [(0, 60, 30), (3, 0, 30), (3, 60, 0)])
def test_a_zero_limit_window_or_block_counts_nothing(limits: tuple[int, float, float]) -> None:
    logins = FailedLogins(*limits, clock=Clock())
    for _ in range(10):
        logins.failed("10.0.0.1")
    logins.check("10.0.0.1")
    assert not logins.enabled and logins.blocked() == 0


def test_an_unknown_address_is_never_counted() -> None:
    logins = FailedLogins(allowed=1, window_s=60, block_s=30, clock=Clock())
    logins.failed(None)
    logins.check(None)
    assert logins.blocked() == 0


def test_the_addresses_tracked_are_bounded() -> None:
    logins = FailedLogins(allowed=2, window_s=60, block_s=30, clock=Clock(), max_tracked=10)
    for i in range(1000):
        logins.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(logins._counts) <= 10
