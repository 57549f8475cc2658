"""The job's JVM helpers are an optimisation: preparing them where they cannot be had (no py4j
gateway, as here) logs a warning and leaves no error in the background thread."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from flint_repl_job import jvm


class NoGateway:
    """A Spark session whose context has no py4j gateway."""

    class sparkContext:  # noqa: N801 - named as pyspark names it
        pass


def test_preparing_without_a_gateway_logs_and_raises_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    raised: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    with caplog.at_level(logging.WARNING, logger=jvm.__name__):
        thread = jvm.prepare(NoGateway())
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert raised == []
    assert "the JVM helpers were not prepared (AttributeError)" in caplog.text
