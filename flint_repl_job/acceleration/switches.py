"""The reference's switches of query acceleration, read from the session's conf at every query, so
``SET <key> = false`` turns a rule off for the rest of the session (``docs/acceleration.md``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

OPTIMIZER_ENABLED = "spark.flint.optimizer.enabled"
COVERING_ENABLED = "spark.flint.optimizer.covering.enabled"
HYBRID_SCAN_ENABLED = "spark.flint.index.hybridscan.enabled"

#: The keys a session may SET (their defaults: both rules on, and, unlike the reference, hybrid scan).
SWITCHES: dict[str, bool] = {OPTIMIZER_ENABLED: True, COVERING_ENABLED: True, HYBRID_SCAN_ENABLED: True}


@dataclass(frozen=True)
class Switches:
    optimizer: bool = True
    covering: bool = True
    hybrid_scan: bool = True

    @classmethod
    def read(cls, get: Callable[[str, str], str | None]) -> Switches:
        """From a conf getter (``spark.conf.get``); anything but ``false`` reads as on."""

        def on(key: str) -> bool:
            value = get(key, "true" if SWITCHES[key] else "false")
            return str(value).strip().lower() != "false"

        return cls(on(OPTIMIZER_ENABLED), on(COVERING_ENABLED), on(HYBRID_SCAN_ENABLED))


__all__ = ["COVERING_ENABLED", "HYBRID_SCAN_ENABLED", "OPTIMIZER_ENABLED", "SWITCHES", "Switches"]
