"""The settings a Flint index may be created with: known keys, bounded values.

``index_settings`` becomes the settings of an index the job creates on the index cluster that
every datasource and the service's own state share. A cluster holds a bounded number of shards
(1,000 a data node by default), so one index of 900 shards, or of 900 replicas, would stop anyone
from creating any index; a refresh every millisecond, or a result window of two billion hits,
costs the cluster's CPU and memory. So only a few keys are allowed, each within a bound
(docs/validation.md). The plugin checks them at POST and the job again where it creates the
index (:func:`check_index_settings`, one function for both).

The bounds are constants, not settings: they protect the index cluster, which is the same for
every datasource, so the plugin and the job (a warm pool job included) must read the same bounds
whatever a datasource's ``sparkConf`` says, and a constant cannot differ between the two.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from query_core.validation.elements import GrammarElement
from query_core.validation.policy import ValidationPolicy
from query_core.validation.refusal import QueryRefusedError

#: The most primary shards a Flint index may have (an index of the service's own has one).
MAX_SHARDS = 5
#: The most replicas of each shard a Flint index may have.
MAX_REPLICAS = 2
#: The shortest ``refresh_interval`` a Flint index may have, in seconds (``-1``: no periodic refresh).
MIN_REFRESH_INTERVAL_S = 1

#: ``refresh_interval``: a whole number and a unit, as the index cluster reads a time value.
_TIME_VALUE = re.compile(r"([0-9]{1,12})(nanos|micros|ms|s|m|h|d)")
_UNIT_SECONDS = {"nanos": 1e-9, "micros": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}
_WHOLE = re.compile(r"[0-9]{1,9}")


def check_index_settings(settings: object, policy: ValidationPolicy) -> None:
    """Refuse (:class:`QueryRefusedError`, a Flint index option) the settings of a Flint index
    when ``policy`` denies Flint options and they hold a key not allowed, or a value out of its
    bound. ``settings`` is the option's JSON, read (an object; nested objects are dotted keys)."""
    if not policy.denies(GrammarElement.FLINT_OPTION):
        return
    if not isinstance(settings, dict):
        raise QueryRefusedError(GrammarElement.FLINT_OPTION, "index_settings is not a JSON object")
    for key, value in flattened(settings):
        problem = setting_problem(key, value)
        if problem:
            raise QueryRefusedError(GrammarElement.FLINT_OPTION, f"index_settings: {problem}")


def setting_problem(key: str, value: object) -> str | None:
    """Why the setting ``key`` (dotted, ``index.`` prefix or not) cannot be ``value``: the key
    alone when it is not allowed, the key, the value and the bound when the value is out of it."""
    name = key.removeprefix("index.")
    shown = f"{key} {_shown(value)}"
    if name == "number_of_shards":
        return None if _whole(value, 1, MAX_SHARDS) else f"{shown}, not 1 to {MAX_SHARDS}"
    if name == "number_of_replicas":
        return None if _whole(value, 0, MAX_REPLICAS) else f"{shown}, not 0 to {MAX_REPLICAS}"
    if name == "refresh_interval":
        if _refresh_interval_allowed(value):
            return None
        return f"{shown}, not -1 or at least {MIN_REFRESH_INTERVAL_S}s"
    return key


def _whole(value: object, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number from ``low`` to ``high``, as a number or a string of
    digits (the index cluster reads both)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        value = int(value)
    return isinstance(value, int) and low <= value <= high


def _refresh_interval_allowed(value: object) -> bool:
    if (isinstance(value, int) and not isinstance(value, bool) and value == -1) or value == "-1":
        return True
    if not isinstance(value, str):
        return False
    match = _TIME_VALUE.fullmatch(value)
    return match is not None and int(match.group(1)) * _UNIT_SECONDS[match.group(2)] >= MIN_REFRESH_INTERVAL_S


def _shown(value: object) -> str:
    """A value as a refusal shows it: JSON, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def flattened(value: Mapping[str, object], prefix: str = "") -> Iterable[tuple[str, object]]:
    """A settings object's leaves as dotted keys (``{"index": {"a": 1}}`` is ``index.a``)."""
    for key, item in value.items():
        if isinstance(item, dict):
            yield from flattened(item, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", item
