"""The figures ``/metrics`` carries, for the operators' page (``docs/console.md``): the same
exposition, read back into families of samples. Histogram buckets and ``_created`` stamps are
left out (their count and sum stay)."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from async_query import metrics


def figures() -> list[dict[str, Any]]:
    body, _ = metrics.exposition()
    families = []
    for family in text_string_to_metric_families(body.decode("utf-8")):
        samples = [
            {"name": s.name, "labels": dict(s.labels), "value": _number(s.value)}
            for s in family.samples
            if not s.name.endswith(("_bucket", "_created"))
        ]
        if samples:
            families.append({"name": family.name, "help": family.documentation, "type": family.type, "samples": samples})
    # the service's own figures first, then the process's and the runtime's
    return sorted(families, key=lambda f: (not f["name"].startswith("async_query"), f["name"]))


def _number(value: float) -> float | int | str:
    if not math.isfinite(value):
        return str(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value
