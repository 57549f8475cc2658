"""The tests' OpenSearch: one real node per test process, or the cluster at ``OPENSEARCH_URL``.

Each test process (pytest-xdist runs three) starts one OpenSearch 2.19 node the way the service
starts its embedded index (:class:`async_query.embedded.index.EmbeddedIndex`: the same jars, guard
and settings, as the index user when the run is root), the first time a test needs an index. A
test that wants an empty cluster gets the node wiped first (every index deleted: one request), so
tests within a process never see each other's documents, and the three processes never share a
node. ``OPENSEARCH_URL`` names an existing cluster instead (tests then keep apart by their own
datasource names, hence index names: ``tests/conftest.py``).

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
from query_core.config import OpenSearchConfig

REAL_CLUSTER = os.environ.get("OPENSEARCH_URL", "")
#: One TLS context for every HTTP client the tests make (``verify=CLIENT_SSL``): a client made
#: without one loads the CA bundle again, some 27 ms of CPU, even for a plain-HTTP URL, and the
#: tests make thousands (a wipe of the node, a client of each test's service, each poll made with
#: ``httpx.get``).
CLIENT_SSL = httpx.create_ssl_context()
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
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)
        _made = None


def wipe(node: EmbeddedIndex) -> None:
    """Delete every index of ``node`` (hidden ones too): an empty cluster for the next test."""
    with httpx.Client(base_url=node.url, auth=node.auth, timeout=60, verify=CLIENT_SSL) as client:
        reply = client.delete("/*", params={"expand_wildcards": "all"})
        if reply.status_code not in (200, 404):
            raise RuntimeError(f"cannot wipe the test node: {reply.status_code} {reply.text[:300]}")


def _set(node: EmbeddedIndex, settings: dict[str, Any]) -> None:
    with httpx.Client(base_url=node.url, auth=node.auth, timeout=60, verify=CLIENT_SSL) as client:
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
