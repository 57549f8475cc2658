"""Snapshots of the embedded index: the seed directory ``osmem-server --seed`` loads, plus a manifest.

Layout of ``<data_dir>/index`` (files 0600, directories 0700):

- ``MANIFEST.json``: which snapshot directory is current, ``journal_from`` (the first journal
  segment that snapshot does *not* hold) and the snapshot's size;
- ``snap-<n>/``: the snapshot, a seed directory as ``osmem-server --seed`` loads it
  (``<index>.index.json`` with settings, mappings and aliases, ``<index>.ndjson`` with the
  documents as a bulk body), plus ``_cluster.json`` (templates, which the server does not seed);
- ``journal/``: the journal segments (:mod:`async_query.embedded.journal`).

A snapshot is taken right after a compaction cut (writes paused for an instant while the journal
rolls to a new segment). It builds a new directory: the indexes the journal changed since the
previous cut are read from the server and written, the others hard-linked from the previous
snapshot; every file is ``fsync``ed, the directory renamed into place, and only then the manifest
replaced (temporary file, ``fsync``, rename, ``fsync`` of the directory). A crash anywhere before
leaves the previous manifest, snapshot and journal segments as they were; older snapshots and
segments are removed after. A data directory of the earlier layout (seed files directly in
``<data_dir>/index``, no manifest) is read as a snapshot with nothing journaled yet.

This module also runs on its own (``python -m async_query.embedded.snapshot``): the index server's
process keeps one such worker and asks it for each snapshot, so that serializing documents does not
compete with the proxy for that process's interpreter.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from async_query.embedded.files import fsync_dir, replace_file
from async_query.embedded.osmem_http import IndexHttp, IndexHttpError

log = logging.getLogger("async_query.embedded.snapshot" if __name__ == "__main__" else __name__)

DEFINITION_SUFFIX = ".index.json"
DOCUMENTS_SUFFIX = ".ndjson"
CLUSTER_FILE = "_cluster.json"
MANIFEST_FILE = "MANIFEST.json"
#: Index settings the cluster assigns itself; an index created from a snapshot gets new ones.
ASSIGNED_SETTINGS = frozenset({"uuid", "creation_date", "provided_name", "version", "replication", "resize"})
SCROLL_PAGE = 2000
SCROLL_KEEP = "5m"
_TEMPLATE_KINDS = (
    ("component_templates", "/_component_template"),
    ("index_templates", "/_index_template"),
    ("templates", "/_template"),
)


@dataclass
class Manifest:
    #: The current snapshot's directory (a name inside the index directory; "" for the earlier
    #: layout, whose seed files lie in the index directory itself).
    snapshot: str = ""
    #: The first journal segment the snapshot does not hold.
    journal_from: int = 0
    #: Bytes of the snapshot's index files (the compaction threshold is a fraction of it).
    snapshot_bytes: int = 0
    written_at: float = 0.0

    def seed_dir(self, directory: Path) -> Path:
        return directory / self.snapshot if self.snapshot else directory


def read_manifest(directory: Path) -> Manifest:
    """The manifest; for a directory without one, the earlier layout (nothing journaled)."""
    try:
        data = json.loads((directory / MANIFEST_FILE).read_text())
    except FileNotFoundError:
        return Manifest(snapshot_bytes=snapshot_bytes(directory) if directory.is_dir() else 0)
    return Manifest(**{k: v for k, v in data.items() if k in Manifest.__dataclass_fields__})


def write_manifest(directory: Path, manifest: Manifest) -> None:
    replace_file(directory / MANIFEST_FILE, lambda out: json.dump(asdict(manifest), out))
    fsync_dir(directory)


def snapshot_bytes(directory: Path) -> int:
    """The size of the index files in a seed directory."""
    return sum(p.stat().st_size for p in directory.iterdir() if p.name.endswith((DEFINITION_SUFFIX, DOCUMENTS_SUFFIX)))


def without_empty_documents(seed_dir: Path) -> int:
    """Remove the empty documents files of a seed directory (an empty index's; the server refuses
    to load one, and without it seeds the index empty, as it was); how many. Snapshots written
    before empty indexes were left without one hold such files."""
    removed = 0
    for path in seed_dir.glob(f"*{DOCUMENTS_SUFFIX}"):
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()
            removed += 1
    if removed:
        fsync_dir(seed_dir)
    return removed


def has_snapshot(seed_dir: Path) -> bool:
    return seed_dir.is_dir() and any(p.name.endswith(DEFINITION_SUFFIX) for p in seed_dir.iterdir())


def snapshot_name(cut_segment: int) -> str:
    return f"snap-{cut_segment:012d}"


@dataclass
class SnapshotReport:
    indexes_written: list[str] = field(default_factory=list)
    indexes_linked: int = 0
    documents: int = 0
    bytes_written: int = 0
    snapshot_bytes: int = 0
    cpu_s: float = 0.0
    seconds: float = 0.0


def take_snapshot(client: IndexHttp, previous: Path, target: Path, indexes: set[str] | None) -> SnapshotReport:
    """Build the seed directory ``target``: the given indexes (None: all) read from the server,
    the other indexes still present linked from ``previous``, and the templates. ``target`` is
    built under a temporary name and renamed into place once every file is durable."""
    began = time.monotonic()
    report = SnapshotReport()
    building = target.with_name(target.name + ".tmp")
    if building.exists():
        shutil.rmtree(building)
    building.mkdir(mode=0o700)
    definitions = client.json("GET", "/_all?expand_wildcards=all")
    for name in sorted(definitions):
        if indexes is not None and name not in indexes and _link_index(previous, building, name):
            report.indexes_linked += 1
        else:
            _write_index(client, building, name, definitions[name], report)
    report.bytes_written += replace_file(building / CLUSTER_FILE, lambda out: json.dump(_templates(client), out))
    fsync_dir(building)
    os.replace(building, target)
    fsync_dir(target.parent)
    report.snapshot_bytes = snapshot_bytes(target)
    report.seconds = time.monotonic() - began
    return report


def _link_index(previous: Path, building: Path, name: str) -> bool:
    """Hard-link an unchanged index's files from the previous snapshot (an index without
    documents has no documents file); False if it has none."""
    definition, documents = (previous / f"{name}{suffix}" for suffix in (DEFINITION_SUFFIX, DOCUMENTS_SUFFIX))
    if not definition.exists():
        return False
    for source in (definition, documents) if documents.exists() else (definition,):
        os.link(source, building / source.name)
        os.chmod(building / source.name, 0o600)  # a file of the earlier layout may be wider
    return True


def _write_index(client: IndexHttp, directory: Path, name: str, found: dict[str, Any], report: SnapshotReport) -> None:
    settings = {k: v for k, v in found.get("settings", {}).get("index", {}).items() if k not in ASSIGNED_SETTINGS}
    definition: dict[str, Any] = {"settings": {"index": settings}, "mappings": found.get("mappings", {})}
    if found.get("aliases"):
        definition["aliases"] = found["aliases"]
    counted = [0]

    def documents(out: IO[str]) -> None:
        counted[0] = _write_documents(client, name, out)

    documents_file = directory / f"{name}{DOCUMENTS_SUFFIX}"
    try:
        report.bytes_written += replace_file(documents_file, documents)
    except IndexHttpError as exc:
        if exc.status != 404:
            raise
        log.info("index %s went away during the snapshot (the journal holds its deletion)", name)
        return
    if counted[0] == 0:
        documents_file.unlink()  # the server refuses an empty documents file: an empty index has none
    report.bytes_written += replace_file(
        directory / f"{name}{DEFINITION_SUFFIX}", lambda out: json.dump(definition, out)
    )
    report.indexes_written.append(name)
    report.documents += counted[0]


def _write_documents(client: IndexHttp, name: str, out: IO[str]) -> int:
    """Every document of the index as bulk lines, read with a scroll; returns how many."""
    fields = "filter_path=_scroll_id,hits.hits._id,hits.hits._source"
    page = client.json(
        "POST", f"/{name}/_search?scroll={SCROLL_KEEP}&{fields}", {"size": SCROLL_PAGE, "sort": ["_doc"]}
    )
    scroll_id = page.get("_scroll_id")
    written = 0
    try:
        while hits := page.get("hits", {}).get("hits", []):
            for hit in hits:
                out.write('{"index":{"_id":')
                out.write(json.dumps(hit["_id"], ensure_ascii=False))
                out.write("}}\n")
                out.write(json.dumps(hit["_source"], ensure_ascii=False, separators=(",", ":")))
                out.write("\n")
            written += len(hits)
            if not scroll_id or len(hits) < SCROLL_PAGE:
                break
            page = client.json("POST", f"/_search/scroll?{fields}", {"scroll": SCROLL_KEEP, "scroll_id": scroll_id})
            scroll_id = page.get("_scroll_id", scroll_id)
    finally:
        if scroll_id:
            client.request("DELETE", "/_search/scroll", json.dumps({"scroll_id": [scroll_id]}).encode())
    return written


def _templates(client: IndexHttp) -> dict[str, Any]:
    """Every template kind the server answers for (one it does not know is left out)."""
    found: dict[str, Any] = {}
    for key, target in _TEMPLATE_KINDS:
        try:
            found[key] = client.json("GET", target)
        except IndexHttpError:
            continue
    return found


def restore_templates(client: IndexHttp, seed_dir: Path) -> int:
    """Put back the templates of the last snapshot (before replay); returns how many."""
    try:
        saved = json.loads((seed_dir / CLUSTER_FILE).read_text())
    except FileNotFoundError:
        return 0
    restored = 0
    for entry in saved.get("component_templates", {}).get("component_templates", []):
        client.json("PUT", f"/_component_template/{entry['name']}", entry["component_template"])
        restored += 1
    for entry in saved.get("index_templates", {}).get("index_templates", []):
        client.json("PUT", f"/_index_template/{entry['name']}", entry["index_template"])
        restored += 1
    for name, body in (saved.get("templates") or {}).items():
        client.json("PUT", f"/_template/{name}", body)
        restored += 1
    return restored


def serve(url: str, commands: IO[str], replies: IO[str]) -> None:
    """Take snapshots as asked, one JSON line per command and per reply, until ``commands`` ends.

    Command: ``{"previous": dir, "target": dir, "indexes": [names] | null}`` (null: every index).
    Reply: the :class:`SnapshotReport` (its ``cpu_s`` this snapshot's alone), or ``{"error": ...}``.
    """
    client = IndexHttp(url)
    try:
        for line in commands:
            command = json.loads(line)
            cpu = _cpu_s()
            try:
                indexes = command["indexes"]
                report = take_snapshot(
                    client,
                    Path(command["previous"]),
                    Path(command["target"]),
                    None if indexes is None else set(indexes),
                )
            except Exception as exc:  # reported to the index server, which keeps its journal
                log.exception("snapshot failed")
                replies.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            else:
                report.cpu_s = _cpu_s() - cpu
                replies.write(json.dumps(asdict(report)) + "\n")
            replies.flush()
    finally:
        client.close()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    """The snapshot worker of an index server: ``--url`` (the server's private port); commands on
    stdin, replies on stdout (see :func:`serve`)."""
    parser = argparse.ArgumentParser(description="Take snapshots of the embedded index as asked on stdin.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(args.url, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
