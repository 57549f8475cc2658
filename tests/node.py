"""The tests' OpenSearch: one real node per test process, or the cluster at ``OPENSEARCH_URL``.

Each test process (pytest-xdist runs three) starts one OpenSearch 2.19 node the way the service
starts its embedded index (:class:`async_query.embedded.index.EmbeddedIndex`: the same jars, guard
and settings, as the index user when the run is root), the first time a test needs an index. A
test that wants an empty cluster gets the node wiped first (:func:`wipe`: every index deleted,
but the product's own indexes of ``local`` that are still exactly as it makes them, which are
emptied instead), so tests within a process never see each other's documents, and the three
processes never share a node. ``OPENSEARCH_URL`` names an existing cluster instead (tests then
keep apart by their own datasource names, hence index names: ``tests/conftest.py``).

Every client of the node sends its credential: :func:`index_config` and :func:`index_auth` give
it for a URL, so a test that builds its own connection writes ``index_config(url)``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from async_query.embedded.index import EmbeddedIndex, NodeOptions
from async_query.embedded.node_jars import NodeJars
from async_query.runtime import embedded_class_archive_dir
from async_query.security.accounts import index_user
from async_query.security.job_user import JobUser
from async_query.settings import Settings
from async_query_cli.client import tls_context
from query_core.config import OpenSearchConfig
from query_core.ids import DATASOURCE_INDEX, SCHEDULER_INDEX, USAGE_INDEX, default_result_index, request_index
from query_core.store.client import ClusterConnection, ProductIndexes

REAL_CLUSTER = os.environ.get("OPENSEARCH_URL", "")
#: One TLS context for every HTTP client the tests make (``verify=CLIENT_SSL``): a client made
#: without one loads the CA bundle again, some 27 ms of CPU, even for a plain-HTTP URL, and the
#: tests make thousands (a wipe of the node, a client of each test's service, each poll made with
#: ``httpx.get``). It is the one the CLI's clients of this process use.
CLIENT_SSL = tls_context()
#: This process's node (None until a test needs it, or when testing against ``OPENSEARCH_URL``).
_node: EmbeddedIndex | None = None
#: URLs that reach this process's node another way (a fault injector's port in front of it).
_aliases: set[str] = set()
#: The directory this process made for its node (removed with the node).
_made: Path | None = None


def node_options(heap_mb: int = 512) -> NodeOptions:
    """How the service would run a node here (as the index user when root, from the
    installation's class archive)."""
    user = index_user("", JobUser.resolve()) if os.geteuid() == 0 else None
    return NodeOptions(heap_mb=heap_mb, user=user, class_archive=embedded_class_archive_dir(Settings()))


#: Held while the class archives of the run's node and metastore JVMs are recorded
#: (``tests/archives.py``): a node of the run starts once it is released.
ARCHIVE_LOCK = Path(tempfile.gettempdir()) / "async-query-tests-jvm-archives.lock"


@contextmanager
def archive_lock() -> Iterator[None]:
    with ARCHIVE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def wait_for_archives() -> None:
    """Return once the class archives are recorded (at once when no one records them)."""
    with archive_lock():
        pass


def start_node(directory: Path | None = None) -> EmbeddedIndex:
    """This process's node, started on first use (in a directory of its own unless given), once
    the class archives are recorded."""
    global _node, _made
    if _node is None:
        wait_for_archives()
        if directory is None:
            directory = _made = Path(tempfile.mkdtemp(prefix="async-query-test-node-"))
        directory.chmod(0o711)
        _node = EmbeddedIndex.start(directory / "index", NodeJars.resolve(), node_options())
        _set(_node, {"action.destructive_requires_name": False})
    return _node


def stop_node() -> None:
    global _node, _made
    if _node is not None:
        _node.close()
        _node = None
        _as_made.clear()
        _writes.clear()
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)
        _made = None


#: The product's indexes of the tests' datasource (``local``), which most tests' services make. A
#: wipe keeps each of them that is still exactly as the product makes it, and deletes its
#: documents instead: making them again would cost the node more than the rest of a typical test
#: does. Anything else, and any of these changed in any way (mappings, settings, aliases, state),
#: is deleted, so a test still starts from what a cluster without them would become.
KEPT = (request_index("local"), default_result_index("local"), DATASOURCE_INDEX, SCHEDULER_INDEX, USAGE_INDEX)
#: How each of :data:`KEPT` looks as the product makes it (recorded once per node).
_as_made: dict[str, dict[str, Any]] = {}
#: The uuid and count of writes of each kept index at the last wipe.
_writes: dict[str, tuple[str, int]] = {}
#: Index metadata that differs between two indexes made alike.
_IDENTITY = ("uuid", "creation_date", "provided_name")


def wipe(node: EmbeddedIndex, keep: bool = True) -> None:
    """An empty cluster for the next test: every index deleted (hidden ones too), except, with
    ``keep``, the product's own indexes of ``local`` left as it made them, emptied of their
    documents."""
    with index_client(node.url, timeout=60) as client:
        if not _as_made:
            _record_as_made(node, client)
        indexes = _metadata(client)
        kept = [name for name, entry in indexes.items() if keep and _as_made.get(name) == _shape(entry)]
        if len(kept) < len(indexes):
            _check(
                client.delete("/" + ",".join(["*", *(f"-{name}" for name in kept)]), params={"expand_wildcards": "all"})
            )
        written = _written_since_last_wipe(client, {name: _uuid(indexes[name]) for name in kept})
        if written:
            names = ",".join(written)
            _check(client.post(f"/{names}/_refresh"))
            _check(
                client.post(
                    f"/{names}/_delete_by_query",
                    params={"refresh": "true", "conflicts": "proceed"},
                    json={"query": {"match_all": {}}},
                )
            )


def _written_since_last_wipe(client: httpx.Client, kept: dict[str, str]) -> list[str]:
    """Those of ``kept`` (names and uuids) that took a write since the last wipe, or were made
    again since (by their uuid and count of writes)."""
    counts: dict[str, tuple[str, int]] = {}
    if kept:
        reply = client.get(f"/{','.join(kept)}/_stats/indexing", params={"level": "indices"})
        _check(reply)
        counts = {
            name: (kept[name], entry["primaries"]["indexing"]["index_total"])
            for name, entry in reply.json()["indices"].items()
            if name in kept
        }
    written = [name for name in kept if counts.get(name) != _writes.get(name)]
    _writes.clear()
    _writes.update(counts)
    return written


def _record_as_made(node: EmbeddedIndex, client: httpx.Client) -> None:
    """Have the product make :data:`KEPT` on the node, and record how they look."""
    connection = ClusterConnection(index_config(node.url))
    try:
        made = ProductIndexes(connection)
        for name in KEPT:
            made.ensure_index(name)
    finally:
        connection.close()
    _as_made.update({name: _shape(entry) for name, entry in _metadata(client).items() if name in KEPT})


def _metadata(client: httpx.Client) -> dict[str, dict[str, Any]]:
    reply = client.get("/_cluster/state/metadata", params={"filter_path": "metadata.indices"})
    _check(reply)
    indexes: dict[str, dict[str, Any]] = reply.json().get("metadata", {}).get("indices", {})
    return indexes


def _uuid(entry: dict[str, Any]) -> str:
    return str(entry.get("settings", {}).get("index", {}).get("uuid", ""))


def _shape(entry: dict[str, Any]) -> dict[str, Any]:
    """An index's metadata less what tells two alike indexes apart (or counts its writes)."""
    settings = {key: value for key, value in entry.get("settings", {}).get("index", {}).items() if key not in _IDENTITY}
    return {
        "state": entry.get("state"),
        "versions": [entry.get(f"{part}_version") for part in ("mapping", "settings", "aliases")],
        "settings": settings,
        "mappings": entry.get("mappings"),
        "aliases": entry.get("aliases"),
    }


def _check(reply: httpx.Response) -> None:
    if reply.status_code not in (200, 404):
        raise RuntimeError(f"cannot wipe the test node: {reply.status_code} {reply.text[:300]}")


def _set(node: EmbeddedIndex, settings: dict[str, Any]) -> None:
    with index_client(node.url, timeout=60) as client:
        reply = client.put("/_cluster/settings", json={"transient": settings})
        reply.raise_for_status()


def alias(url: str) -> None:
    """``url`` reaches this process's node (through a fault injector): its clients send its credential."""
    _aliases.add(url.rstrip("/"))


def index_auth(url: str = "") -> tuple[str, str] | None:
    """The basic authentication a client of ``url`` (default: this process's node) sends."""
    if _node is not None and (not url or url.rstrip("/") in {_node.url, *_aliases}):
        return _node.auth
    if os.environ.get("OPENSEARCH_USERNAME"):
        return os.environ["OPENSEARCH_USERNAME"], os.environ.get("OPENSEARCH_PASSWORD", "")
    return None


def index_config(url: str, **overrides: Any) -> OpenSearchConfig:
    """A connection to ``url`` with the credential it wants (see :func:`index_auth`)."""
    auth = index_auth(url)
    fields: dict[str, Any] = {"url": url, "auth": "noauth"}
    if auth is not None:
        fields.update(auth="basic", username=auth[0], password=auth[1])
    if url == REAL_CLUSTER:
        fields["verify_certs"] = os.environ.get("OPENSEARCH_VERIFY_CERTS", "true").lower() != "false"
    return OpenSearchConfig(**{**fields, **overrides})


def index_client(url: str, **options: Any) -> httpx.Client:
    """An HTTP client of ``url`` that sends its credential."""
    auth = index_auth(url)
    return httpx.Client(base_url=url, auth=auth, **{"timeout": 30, "verify": CLIENT_SSL, **options})


def index_env(url: str) -> dict[str, str]:
    """The environment that points a service process at ``url`` with its credential."""
    env = {"OPENSEARCH_URL": url}
    auth = index_auth(url)
    if auth is not None:
        env.update(OPENSEARCH_USERNAME=auth[0], OPENSEARCH_PASSWORD=auth[1])
    return env


def auth_fields(url: str) -> dict[str, Any]:
    """The :class:`OpenSearchConfig` fields of the credential ``url`` wants (none: empty)."""
    auth = index_auth(url)
    return {} if auth is None else {"auth": "basic", "username": auth[0], "password": auth[1]}
