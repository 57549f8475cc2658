"""Flint index names, and the id of each index's state document, as the reference derives them.

An index is stored in the OpenSearch index ``flint_<catalog>_<database>_<table>_skipping_index``
(skipping), ``flint_<catalog>_<database>_<table>_<name>_index`` (covering) or
``flint_<catalog>_<database>_<view>`` (materialized view), made safe for OpenSearch the reference's
way: characters OpenSearch refuses are percent-encoded, and everything is lower-cased. Its state
document in the request index has the id :func:`latest_id`.
"""

from __future__ import annotations

import base64
import binascii

from query_core.flint.ast import IndexKind, IndexRef, QualifiedName

FLINT_INDEX_PREFIX = "flint_"
SKIPPING_INDEX_SUFFIX = "_skipping_index"
COVERING_INDEX_SUFFIX = "_index"

#: What OpenSearch refuses in an index name (the reference's ``OpenSearchClientUtils``).
#: OpenSearch's refused characters, and ``*`` (a wildcard wherever an index name is a pattern: an
#: index named with one matched others'; the reference's list lacks it, so such a name failed there).
_INVALID_INDEX_NAME_CHARS = frozenset(' ,:"+/\\|?#><*')


def sanitize_index_name(name: str) -> str:
    """``name`` as an OpenSearch index name: refused characters as ``%XX``, then all lower case.

    Idempotent, so a name that is already sanitized comes back unchanged.
    """
    encoded = "".join(f"%{ord(c):02X}" if c in _INVALID_INDEX_NAME_CHARS else c for c in name)
    return encoded.lower()


def skipping_index_name(table: QualifiedName) -> str:
    return sanitize_index_name(_prefix(table) + SKIPPING_INDEX_SUFFIX)


def covering_index_name(name: str, table: QualifiedName) -> str:
    return sanitize_index_name(f"{_prefix(table)}_{name}{COVERING_INDEX_SUFFIX}")


def mv_index_name(mv: QualifiedName) -> str:
    return sanitize_index_name(_prefix(mv))


def flint_index_name(index: IndexRef, datasource: str | None = None) -> str:
    """The OpenSearch index of ``index``; its names are qualified with ``datasource`` first if given."""
    if datasource is not None:
        index = index.qualify(datasource)
    if index.kind is IndexKind.SKIPPING:
        return skipping_index_name(index.table)
    if index.kind is IndexKind.COVERING:
        assert index.name is not None  # IndexRef guarantees it
        return covering_index_name(index.name, index.table)
    return mv_index_name(index.table)


def latest_id(index_name: str) -> str:
    """The id of the index's state document: base64 of its (sanitized) OpenSearch index name."""
    return base64.b64encode(sanitize_index_name(index_name).encode("utf-8")).decode("ascii")


def _prefix(name: QualifiedName) -> str:
    if not name.is_qualified:
        raise ValueError(f"{name} is not qualified: qualify it with the datasource first")
    catalog, database, table = name.parts
    return f"{FLINT_INDEX_PREFIX}{catalog}_{database}_{table}"


def index_name_of(latest: str, index_name: str = "") -> str:
    """The OpenSearch index a state document is of: its ``indexName`` (this product's field), or
    its ``latestId`` decoded (the reference's documents have no ``indexName``; the id is its base64)."""
    if index_name:
        return index_name
    try:
        return base64.b64decode(latest, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return latest
