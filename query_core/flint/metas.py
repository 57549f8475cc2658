"""Flint indexes as the cluster holds them: the ``_meta`` of their mappings, where the reference
keeps an index's metadata (kind, source, options...; see ``docs/flint.md``)."""

from __future__ import annotations

from typing import Any

from query_core.store.connector import IndexAdmin


def flint_metas(index: IndexAdmin, pattern: str) -> dict[str, dict[str, Any]]:
    """The mapping ``_meta`` of every index matching ``pattern`` (a name or a wildcard), by index
    name; an index without ``_meta`` maps to ``{}``, no match is an empty dict."""
    return {name: dict(mappings.get("_meta", {})) for name, mappings in index.mappings(pattern).items()}


def flint_meta(index: IndexAdmin, name: str) -> dict[str, Any] | None:
    """The ``_meta`` of index ``name``; None when there is no such index."""
    return flint_metas(index, name).get(name)
