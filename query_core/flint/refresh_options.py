"""The options of an index altered to manual refresh, checked as the reference checks them (the SQL
plugin's ``FlintIndexMetadataServiceImpl`` lists and messages; opensearch-spark's
``validateUpdateAllowed``): shared by ALTER ... WITH (auto_refresh = false) and the streaming
housekeeper, which alters the indexes of a disabled datasource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from query_core.errors import InvalidRequestError
from query_core.flint.ast import OptionName

_AUTO = OptionName.AUTO_REFRESH.value
_INCREMENTAL = OptionName.INCREMENTAL_REFRESH.value
#: What an ALTER to manual refresh may set (the reference's lists, in its order).
FULL_REFRESH_OPTIONS = (_AUTO, _INCREMENTAL)
INCREMENTAL_REFRESH_OPTIONS = (
    _AUTO,
    _INCREMENTAL,
    OptionName.WATERMARK_DELAY.value,
    OptionName.CHECKPOINT_LOCATION.value,
)

def manual_refresh_options(meta: Mapping[str, Any], provided: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``_meta.options`` of an index altered to manual refresh: its options with ``provided``
    merged in and ``auto_refresh`` false. Raises :class:`InvalidRequestError` with the
    reference's message when the index is not auto-refreshing or ``provided`` is not allowed."""
    provided = provided or {}
    existing = {str(k): str(v) for k, v in dict(meta.get("options") or {}).items()}
    if existing.get(_AUTO, "false").lower() != "true":
        raise InvalidRequestError("auto_refresh option must be updated")
    merged = {**existing, **provided}
    if merged.get(_INCREMENTAL, "false").lower() == "true":
        _check_allowed(provided, INCREMENTAL_REFRESH_OPTIONS, "incremental refresh")
        _check_incremental(str(meta.get("kind", "")), merged)
    else:
        _check_allowed(provided, FULL_REFRESH_OPTIONS, "full refresh")
    merged[_AUTO] = "false"
    return merged


def _check_allowed(provided: Mapping[str, str], allowed: tuple[str, ...], mode: str) -> None:
    if not set(provided) <= set(allowed):
        raise InvalidRequestError(f"Altering to {mode} only allows: [{', '.join(allowed)}] options")


def _check_incremental(kind: str, merged: Mapping[str, str]) -> None:
    missing = [OptionName.CHECKPOINT_LOCATION.value] if not merged.get(OptionName.CHECKPOINT_LOCATION.value) else []
    if kind == "mv" and not merged.get(OptionName.WATERMARK_DELAY.value):
        missing.append(OptionName.WATERMARK_DELAY.value)
    if missing:
        raise InvalidRequestError(
            "Conversion to incremental refresh index cannot proceed due to missing attributes: "
            + ", ".join(missing)
            + "."
        )
