"""What a request to the index does, and what the journal keeps of it once the server applied it.

Requests are sorted by method and path (:func:`route`) into reads, which change nothing, the
document writes whose effect can be recorded exactly (index/create, update, delete, ``_bulk``),
and everything else that may change something (index creation and deletion, mappings, templates,
aliases, ``_delete_by_query``...), which is recorded as the request itself and applied alone,
with no other write in flight, so that replaying it in journal order gives the same result.

A document write is recorded by its *effect*, unconditionally: a created or indexed document as
its full source, an update as its partial document, a delete as a delete. Each carries the
``_seq_no`` the server gave it, which orders replay exactly when concurrent writes of one document
reached the journal in another order than the server applied them. See ``docs/durability.md``.

Record payload: one JSON header line, then the body bytes it describes:

- documents: ``{"o": "d", "it": [[op, index, id, seq_no, body_length], ...]}`` then the bodies
  back to back (op ``i`` index, ``u`` update, ``x`` delete);
- a request kept as it was: ``{"o": "r", "m": method, "p": path_and_query}`` then its body.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

OP_INDEX = "i"
OP_UPDATE = "u"
OP_DELETE = "x"

#: Path segments of requests that change nothing worth keeping (searches, reads, refreshes).
_READ_SEGMENTS = frozenset(
    {
        "_search",
        "_msearch",
        "_count",
        "_mget",
        "_field_caps",
        "_validate",
        "_explain",
        "_analyze",
        "_refresh",
        "_flush",
        "_cache",
        "_forcemerge",
        "_termvectors",
        "_mtermvectors",
        "_rank_eval",
        "_search_shards",
        "_render",
        "_osmem",
    }
)
_BULK_INDEX = re.compile(rb'"_index"\s*:\s*"((?:[^"\\]|\\.)*)"')


class Kind(enum.Enum):
    READ = "read"
    INDEX = "index"
    UPDATE = "update"
    DELETE = "delete"
    BULK = "bulk"
    #: Anything else that may change the cluster: kept as the request, applied alone.
    RAW = "raw"
    #: The index server's own endpoints (``/_embedded/...``), answered without forwarding.
    CONTROL = "control"


@dataclass(slots=True)
class Route:
    kind: Kind
    #: The indexes the request may read or write; None when that is not known (any index).
    scope: frozenset[str] | None
    index: str = ""


def route(method: str, path: str, aliases: frozenset[str] = frozenset()) -> Route:
    """Sort one request by its method and path (without the query string)."""
    parts = [unquote(p) for p in path.split("/") if p]
    scope = _scope(parts, aliases)
    if method in ("GET", "HEAD"):
        return Route(Kind.CONTROL if parts[:1] == ["_embedded"] else Kind.READ, scope)
    if parts[:1] == ["_embedded"]:
        return Route(Kind.CONTROL, scope)
    if any(p in _READ_SEGMENTS for p in parts):
        return Route(Kind.READ, scope)
    doc = _document_route(method, parts, scope)
    if doc is not None:
        return doc
    if parts and parts[-1] == "_bulk" and len(parts) <= 2 and method in ("POST", "PUT"):
        return Route(Kind.BULK, scope, parts[0] if len(parts) == 2 else "")
    return Route(Kind.RAW, None)


def _document_route(method: str, parts: list[str], scope: frozenset[str] | None) -> Route | None:
    if len(parts) == 3 and parts[1] in ("_doc", "_create") and method in ("PUT", "POST"):
        return Route(Kind.INDEX, scope, parts[0])
    if len(parts) == 2 and parts[1] == "_doc" and method == "POST":
        return Route(Kind.INDEX, scope, parts[0])
    if len(parts) == 3 and parts[1] == "_update" and method == "POST":
        return Route(Kind.UPDATE, scope, parts[0])
    if len(parts) == 3 and parts[1] == "_doc" and method == "DELETE":
        return Route(Kind.DELETE, scope, parts[0])
    return None


def _scope(parts: list[str], aliases: frozenset[str]) -> frozenset[str] | None:
    """The one index a path names, or None (several, a pattern, an alias, or none named)."""
    if not parts:
        return None
    name = parts[0]
    if name.startswith("_") or any(c in name for c in "*,?") or name in aliases:
        return None
    return frozenset((name,))


def bulk_scope(default_index: str, body: bytes, aliases: frozenset[str]) -> frozenset[str] | None:
    """Every index a bulk body may write (a superset: any ``"_index"`` in it counts)."""
    names = {m.decode("utf-8", "replace") for m in _BULK_INDEX.findall(body)}
    if default_index:
        names.add(default_index)
    if not names or any(n in aliases or any(c in n for c in "*,?") for n in names):
        return None
    return frozenset(names)


# -- effects of applied writes ---------------------------------------------------------------


def _payload(header: dict[str, Any], bodies: list[bytes]) -> bytes:
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" + b"".join(bodies)


def document_effect(kind: Kind, body: bytes, status: int, reply: Any) -> tuple[bytes, set[str]] | None:
    """The record of one applied document write (index, update or delete) and the index it
    changed, or None when the server changed nothing (an error, a no-op update, a delete of a
    missing document)."""
    if status >= 300 or not isinstance(reply, dict):
        return None
    result = reply.get("result")
    if kind is Kind.DELETE:
        if result != "deleted":
            return None
        op, body = OP_DELETE, b""
    elif result in ("created", "updated"):
        op = OP_INDEX if kind is Kind.INDEX else OP_UPDATE
    else:
        return None
    item = [op, reply["_index"], reply["_id"], reply["_seq_no"], len(body)]
    return _payload({"o": "d", "it": [item]}, [body]), {reply["_index"]}


class BulkMismatchError(ValueError):
    """A bulk reply whose items do not line up with the request's lines."""


def bulk_effect(body: bytes, reply: Any) -> tuple[bytes, set[str]] | None:
    """The record of what a ``_bulk`` request changed (its items that succeeded) and the indexes
    it changed, or None."""
    items = reply.get("items") if isinstance(reply, dict) else None
    if not isinstance(items, list):
        return None
    lines = iter(line for line in body.split(b"\n") if line.strip())
    effects: list[list[Any]] = []
    bodies: list[bytes] = []
    for item in items:
        action, info = next(iter(item.items()))
        try:
            next(lines)
            source = b"" if action == "delete" else next(lines)
        except StopIteration as exc:
            raise BulkMismatchError("the reply has more items than the request") from exc
        effect = _bulk_item(action, info, source)
        if effect is not None:
            effects.append(effect)
            bodies.append(source if effect[0] != OP_DELETE else b"")
    if next(lines, None) is not None:
        raise BulkMismatchError("the request has more lines than the reply has items")
    if not effects:
        return None
    return _payload({"o": "d", "it": effects}, bodies), {e[1] for e in effects}


def _bulk_item(action: str, info: dict[str, Any], source: bytes) -> list[Any] | None:
    if int(info.get("status", 500)) >= 300:
        return None
    result = info.get("result")
    if action == "delete":
        if result != "deleted":
            return None
        return [OP_DELETE, info["_index"], info["_id"], info["_seq_no"], 0]
    if result not in ("created", "updated"):
        return None
    op = OP_UPDATE if action == "update" else OP_INDEX
    return [op, info["_index"], info["_id"], info["_seq_no"], len(source)]


def raw_effect(method: str, target: str, body: bytes) -> bytes:
    """The record of a request kept as it was (``target``: its path and query string)."""
    return _payload({"o": "r", "m": method, "p": target}, [body])


def bulk_failed_items(reply: Any) -> bool:
    """Whether a bulk reply reports any item that did not succeed."""
    return not isinstance(reply, dict) or bool(reply.get("errors", True))


# -- reading records back ----------------------------------------------------------------------


@dataclass(slots=True)
class DocEffect:
    op: str
    index: str
    doc_id: str
    seq_no: int
    body: bytes


@dataclass(slots=True)
class RawEffect:
    method: str
    target: str
    body: bytes


def decode(payload: bytes) -> list[DocEffect] | RawEffect:
    """A record's payload as the document effects or the request it holds."""
    newline = payload.index(b"\n")
    header = json.loads(payload[:newline])
    rest = memoryview(payload)[newline + 1 :]
    if header["o"] == "r":
        return RawEffect(header["m"], header["p"], bytes(rest))
    effects = []
    offset = 0
    for op, index, doc_id, seq_no, length in header["it"]:
        effects.append(DocEffect(op, index, doc_id, seq_no, bytes(rest[offset : offset + length])))
        offset += length
    return effects


#: Kept requests that change no index (templates are saved with every snapshot anyway).
_CLUSTER_ONLY = ("/_index_template", "/_component_template", "/_template")


def touched_indexes(decoded: list[DocEffect] | RawEffect) -> set[str] | None:
    """The indexes a record changed; None when a kept request may have changed any."""
    if isinstance(decoded, RawEffect):
        return kept_changes(decoded.target)
    return {e.index for e in decoded}


def kept_changes(target: str) -> set[str] | None:
    """The indexes a kept request may change: the one its path names (``PUT /idx``,
    ``/idx/_mapping``...), none for a template, None (any) otherwise."""
    path = target.split("?", 1)[0]
    if path.startswith(_CLUSTER_ONLY):
        return set()
    scope = _scope([unquote(p) for p in path.split("/") if p], frozenset())
    return set(scope) if scope is not None else None
