"""The index every bench runs on: a real OpenSearch node, started as the service starts its
embedded index, or the cluster at ``OPENSEARCH_URL``.

:func:`index_node` starts the node the way ``async-query serve`` does without ``OPENSEARCH_URL``
(:func:`async_query.runtime.start_embedded_index`: the same jars, from the same cache, the same
settings and heap, as the index user when the bench runs as root), so the figures are those of
the embedded default. ``OPENSEARCH_URL`` (or ``ASYNC_QUERY_OPENSEARCH_URL``, with its user and
password) names a cluster instead, and wins when set.

Every request to the node needs its credential (basic authentication, generated at each start):
:attr:`IndexNode.config` is a connection that carries it, :meth:`IndexNode.headers` the header for
a raw HTTP client, and :meth:`IndexNode.service_env` the environment that points an
``async-query serve`` process at it.
"""

from __future__ import annotations

import base64
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from async_query.embedded.index import MAIN_CLASS, EmbeddedIndex
from async_query.runtime import start_embedded_index
from async_query.settings import Settings
from query_core.config import OpenSearchConfig

#: The variables that name the index a service process uses; a service the bench starts gets
#: the bench's own (:meth:`IndexNode.service_env`), never ones inherited from the shell.
INDEX_VARIABLES = tuple(
    f"{prefix}OPENSEARCH_{name}" for prefix in ("", "ASYNC_QUERY_") for name in ("URL", "USERNAME", "PASSWORD")
)


@dataclass(frozen=True)
class IndexNode:
    """The index a bench runs on: its URL and a connection with its credential."""

    url: str
    config: OpenSearchConfig = field(repr=False)
    #: The node this bench started (None: the cluster at ``OPENSEARCH_URL``).
    node: EmbeddedIndex | None = None
    #: Seconds from the start of the node to its first green answer (0 for a given cluster).
    start_s: float = 0.0

    @property
    def auth(self) -> tuple[str, str] | None:
        """(user, password) of basic authentication, or None."""
        if self.config.auth != "basic":
            return None
        return self.config.username, self.config.password

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header a raw HTTP client of the index sends (empty: none)."""
        return index_headers(self.config) or {}

    def client(self, **options: Any) -> httpx.Client:
        """An HTTP client of the index that sends its credential."""
        return httpx.Client(base_url=self.url, auth=self.auth, **{"timeout": 30, **options})

    def env(self) -> dict[str, str]:
        """``OPENSEARCH_URL``, ``OPENSEARCH_USERNAME`` and ``OPENSEARCH_PASSWORD`` for this index."""
        out = {"OPENSEARCH_URL": self.url}
        auth = self.auth
        if auth is not None:
            out.update(OPENSEARCH_USERNAME=auth[0], OPENSEARCH_PASSWORD=auth[1])
        return out

    def service_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` (a service process's environment) pointed at this index: whatever index it
        named is dropped, this one's URL and credential are added."""
        return {**{k: v for k, v in base.items() if k not in INDEX_VARIABLES}, **self.env()}

    def resident(self) -> tuple[float, float] | None:
        """The node's resident memory now and at its peak (``VmRSS``, ``VmHWM``), in MB; None for
        a cluster not started here."""
        if self.node is None:
            return None
        return node_resident(self.node.directory)


@contextmanager
def index_node(directory: Path | None = None, settings: Settings | None = None) -> Iterator[IndexNode]:
    """The index for a bench: ``OPENSEARCH_URL``'s cluster when set, else a node started in
    ``directory`` (a temporary one by default; its data under ``<directory>/index``) and stopped
    on exit."""
    settings = settings or Settings()
    if settings.opensearch_url:
        yield IndexNode(settings.opensearch_url, settings.opensearch())
        return
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        place = directory or Path(tmp)
        place.mkdir(parents=True, exist_ok=True)
        # As root the node runs as the index user, who must pass through to its directory.
        place.chmod(0o711)
        began = time.perf_counter()
        node = start_embedded_index(settings, place)
        try:
            config = settings.opensearch(node.url).model_copy(update=node.connection_fields())
            yield IndexNode(node.url, config, node, time.perf_counter() - began)
        finally:
            node.close()


def index_headers(cfg: OpenSearchConfig) -> dict[str, str] | None:
    """The headers of a raw request to the index ``cfg`` reaches: its credential (None: a SigV4
    cluster, whose requests a raw client cannot sign)."""
    if cfg.auth == "sigv4":
        return None
    if cfg.auth == "noauth":
        return {}
    return {"Authorization": "Basic " + base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()}


def process_files(name: str) -> Iterator[tuple[int, bytes]]:
    """Each running process's pid and its ``/proc/<pid>/<name>`` (``cmdline``, ``environ``,
    ``stat``), for those that can be read."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / name).read_bytes()
            except OSError:
                continue


def node_pids(directory: Path | None = None) -> list[int]:
    """The JVMs of embedded index nodes running here (those of ``directory``'s only, if given)."""
    wanted = MAIN_CLASS.encode()
    place = str(directory).encode() if directory is not None else b""
    return [pid for pid, cmdline in process_files("cmdline") if wanted in cmdline and place in cmdline]


def node_resident(directory: Path) -> tuple[float, float] | None:
    """(``VmRSS``, ``VmHWM``) in MB of the node of ``directory``, or None if it is not running."""
    for pid in node_pids(directory):
        memory = status_kb(pid, ("VmRSS", "VmHWM"))
        if memory is not None:
            return memory[0] / 1024, memory[1] / 1024
    return None


def status_kb(pid: int, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """The values (kB) of ``names`` in ``/proc/<pid>/status``, or None if it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    values = {key: line.split()[1] for line in lines if (key := line.partition(":")[0]) in names}
    if set(values) != set(names):
        return None
    return tuple(int(values[name]) for name in names)
