"""The one retry policy of every driver call (index server, EMR Serverless).

Transient failures are retried with exponential back-off plus jitter, until either bound is
reached: a number of attempts, or seconds since the first attempt. Then the last error itself is
raised (not tenacity's ``RetryError``), for the caller to translate.

Built only from tenacity APIs present since 8.2, the oldest release ``pyproject.toml`` allows
(``wait_exponential_jitter`` changed its arguments in 9.1, so it is not used).
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_random,
)


def bounded_retrying(
    is_transient: Callable[[BaseException], bool],
    *,
    attempts: int,
    seconds: float,
    first_wait: float,
    max_wait: float,
    jitter: float | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """A ``Retrying`` that retries what ``is_transient`` accepts, at most ``attempts`` times and
    no longer than ``seconds`` after the first attempt.

    The wait before retry *n* is ``first_wait * 2**(n-1)`` plus a random ``0..jitter`` (``jitter``
    defaults to ``first_wait``), never more than ``max_wait`` in all. The jitter keeps the callers
    that failed together (an index server restart) from retrying in step.
    """
    spread = min(first_wait if jitter is None else jitter, max_wait)
    wait = wait_exponential(multiplier=first_wait, max=max_wait - spread) + wait_random(0, spread)
    return Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(max(attempts, 1)) | stop_after_delay(seconds),
        wait=wait,
        before_sleep=before_sleep,
        reraise=True,
    )
