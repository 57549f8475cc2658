"""Shared fixtures.

The index is a real OpenSearch node, one per test process, wiped for each test that asks for an
empty cluster (``tests/node.py``), or the cluster at ``OPENSEARCH_URL`` when that is set (then each
test gets its own datasource name, hence its own indexes).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from async_query.api import create_app
from async_query.datasources import Datasource, DatasourceRegistry, local_datasource
from async_query.embedded.index import EmbeddedIndex
from async_query.launcher.base import Launcher
from async_query.runtime import Plugin, build_plugin
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.store import Store
from tests import archives, node
from tests.support import RecordingLauncher, serve_http

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every local job of the run (and of plugin processes the tests start) starts its JVM from one
# shared class archive, with the quick-starting JIT tier: short test jobs are mostly start-up.
os.environ.setdefault("ASYNC_QUERY_LOCAL_JOB_CLASS_ARCHIVE_DIR", str(Path(tempfile.gettempdir()) / "async-query-tests-jvm"))
#: One JIT compiler thread and no performance-data file: about 8 % less CPU per job start.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1 -XX:-UsePerfData"
os.environ.setdefault("ASYNC_QUERY_LOCAL_JOB_JAVA_OPTIONS", TEST_JVM_OPTIONS)
# The other JVMs the tests start (the shared test Spark sessions, the Hive Metastores, Spark's
# launcher) get the same: their work here is short, so the top JIT tier would cost more CPU than it
# saves, and the suite is bound by CPU (its time: bench/README.md).
os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS)
# No warm pool unless a test asks for one (tests/e2e/test_warm_pool.py): an idle Spark job per
# service would take CPU from every other test's jobs.
os.environ.setdefault("ASYNC_QUERY_WARM_POOL_SIZE", "0")
# Auto refresh streams unless a test asks for the scheduler (tests/*/test_scheduled_refresh*.py):
# the tests written for streams keep testing streams.
os.environ.setdefault("ASYNC_QUERY_EXTERNAL_SCHEDULER_ENABLED", "false")
# No limit on failed logins unless a test asks for one (tests/integration/test_failed_logins.py):
# the security tests fail logins from this one address far more often than the limit allows.
os.environ.setdefault("ASYNC_QUERY_AUTH_FAILURES_ALLOWED", "0")
REAL_CLUSTER = node.REAL_CLUSTER



# -- the order of a parallel run ----------------------------------------------------------------
#
# README's command runs the files in three processes (``--dist loadfile``), handing the next file
# to whichever process is nearly done. The longest files must start first, or they start last and
# run on alone while the other processes have nothing left (Longest Processing Time first). So the
# run takes the files in this order, each file's tests in their own order: the end-to-end files
# by their measured length (longest first, from ``--durations``), the rest of the end-to-end and
# fault tiers, the integration tier's Spark files, the other integration files, then the unit tier.
# xdist's own reordering (by the number of tests in a file) is switched off: it put the many-test
# unit files first and the few-test, minutes-long end-to-end files last.
#
# The integration files whose tests use the test process's own Spark session (marked ``spark``)
# go to one process, as one unit, rather than a file at a time: each process that ran
# one of them started a Spark session of its own and warmed it up again (bench/README.md, "The
# tests' Spark sessions in one process"). A file with tests so marked
# belongs in SPARK_SESSION_FILES (``tests/unit/test_run_order.py`` checks it).

SPARK_SESSION_FILES = frozenset(
    f"integration/test_{name}.py"
    for name in (
        "acceleration_spark",
        "bench_smoke",
        "flint_engine",
        "hostile_guard",
        "job_figures_spark",
        "job_guard",
        "jvm_helpers_spark",
        "opensearch_source",
        "opensearch_stream",
        "ppl_docs_spark",
        "ppl_functions_spark",
        "ppl_spark",
        "result_stream_spark",
        "scheduled_refresh_spark",
        "stored_metadata",
        "streaming_job",
        "worker_daemon_spark",
    )
)
#: The unit of work those files make (a name of no file).
SPARK_SESSION_SCOPE = "integration/(the test process's Spark session)"

LONGEST_FIRST = (
    SPARK_SESSION_SCOPE,
    "e2e/test_streaming.py",
    "e2e/test_flint_indexes.py",
    "e2e/test_warm_pool.py",
    "e2e/test_scheduled_refresh.py",
    "e2e/test_embedded_default.py",
    "e2e/test_interactive.py",
    "e2e/test_root_start.py",
    "faults/test_plugin_process.py",
    "faults/test_crash_storm.py",
    "e2e/test_catalog.py",
    "e2e/test_catalog_read_model.py",
    "e2e/test_console_browser.py",
    "faults/test_job_killed.py",
    "e2e/test_streaming_outage.py",
    "faults/test_index_outage.py",
    "e2e/test_spark_master.py",
    "e2e/test_dashboards.py",
)
TESTS_DIR = Path(__file__).parent


def _unit(relative: str) -> str:
    """The unit of work of the test file ``relative`` (to TESTS_DIR), as LONGEST_FIRST names it."""
    return SPARK_SESSION_SCOPE if relative in SPARK_SESSION_FILES else relative


def _run_rank(path: Path) -> tuple[int, int]:
    relative = path.relative_to(TESTS_DIR).as_posix() if path.is_relative_to(TESTS_DIR) else path.as_posix()
    unit = _unit(relative)
    if unit in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(unit))
    tier = relative.split("/", 1)[0]
    if tier in ("e2e", "faults"):
        return (1, 0)
    if tier == "integration":
        return (2, 0) if relative.endswith("_spark.py") or "stream" in relative else (3, 0)
    return (4, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _run_rank(item.path))  # stable: a file's tests keep their order


def run_scope(nodeid: str, file_scope: str) -> str:
    """The unit of work of test ``nodeid``, whose file's is ``file_scope``: the Spark session's
    files make one."""
    unit = _unit(nodeid.split("::", 1)[0].removeprefix("tests/"))
    return unit if unit == SPARK_SESSION_SCOPE else file_scope


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the Spark session's files as one unit (see above)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return run_scope(nodeid, super()._split_scope(nodeid))

    return _Scheduling(config, log)


# -- temporary directories the job user can pass through ----------------------------------------
#
# Run as root (as CI runs it), the service runs its local jobs and metastores as an unprivileged
# job user (docs/security.md, "The second wall"), who must pass through the directories above a
# data directory to reach its own places in it. pytest makes every temporary directory 0700 (and
# makes the directory of all of root's runs, ``pytest-of-root``, 0700 again at each run), so the
# run gets a base directory of its own, and its temporary directories are made 0711: passable,
# never listable, by others. Nothing else changes.


def _passable(path: Path) -> Path:
    path.chmod(0o711)
    return path


# -- the project's sources, compiled once ---------------------------------------------------------
#
# A run starts some four hundred Python processes that import the project's code: test processes,
# services, local jobs, PySpark's workers. Python compiles a module it finds no bytecode for on
# every import, and writes none when ``PYTHONDONTWRITEBYTECODE`` is set, or when the process may
# not write beside the source (a job as the job user): then each of them compiles the same sources
# again, 0.2-0.3 CPU-s per job. The run compiles them once, before its processes start; a source
# unchanged since is not compiled again.

COMPILED_PACKAGES = ("async_query", "async_query_cli", "flint_repl_job", "query_core", "bench", "tests")


def _compile_sources() -> None:
    import compileall

    for package in COMPILED_PACKAGES:
        compileall.compile_dir(TESTS_DIR.parent / package, quiet=2)  # a read-only tree: left as it is


# -- the test modules' assertions, rewritten once -------------------------------------------------
#
# pytest rewrites the asserts of each test module (and conftest) as it imports it, and keeps the
# result as bytecode beside it only where Python may write bytecode. With ``PYTHONDONTWRITEBYTECODE``
# set, each of the three test processes rewrote every test module again on every run: some 5 CPU-s
# each, half of collecting the tiers (bench/README.md, "Where a whole run's CPU goes, by test"). A
# parallel run rewrites the modules whose rewritten bytecode is missing or stale once, before its
# processes start, with pytest's own functions (private ones: a pytest without them rewrites as
# before); the processes read it as pytest reads its own cache, by the source's hash.


def _rewrite_test_modules(config: pytest.Config) -> None:
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return
    state = config.stash.get(assertstate_key, None)
    if state is None:
        return  # assertions are not rewritten (``--assert=plain``)
    for source in sorted(TESTS_DIR.rglob("*.py")):
        if source.name != "conftest.py" and not source.name.startswith("test_"):
            continue
        cache_dir = get_cache_dir(source)
        pyc = cache_dir / (source.name[:-3] + PYC_TAIL)
        if _read_pyc(source, pyc, state.trace) is not None:
            continue
        try:
            cache_dir.mkdir(exist_ok=True)
            source_hash, code = _rewrite_test(source, config)
        except OSError:
            return  # a read-only tree: each process rewrites what it imports
        except SyntaxError:
            continue  # pytest reports it when it collects the file
        _write_pyc(state, code, source_hash, pyc)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # see "the order of a parallel run" above
    if not hasattr(config, "workerinput"):
        _compile_sources()
        if getattr(config.option, "numprocesses", None):
            _rewrite_test_modules(config)
        if not REAL_CLUSTER:
            # Recorded while the test processes start and the first of them records the jobs'
            # archive (job_class_archive): each process's node waits for them (tests/archives.py).
            recorder = archives.record_in_background()
            config.add_cleanup(recorder.join)
    if os.geteuid() != 0:
        return
    # A worker of a parallel run (pytest-xdist) is given a base directory under the controller's:
    # it makes its own temporary directories passable too.
    worker = hasattr(config, "workerinput")
    if not worker:
        if config.option.basetemp:
            return
        root = _passable(Path(tempfile.mkdtemp(prefix="async-query-tests-")))
        config.option.basetemp = str(root / "base")
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
    mktemp, getbasetemp = pytest.TempPathFactory.mktemp, pytest.TempPathFactory.getbasetemp

    def passable_mktemp(self: pytest.TempPathFactory, basename: str, numbered: bool = True) -> Path:
        return _passable(mktemp(self, basename, numbered))

    def passable_basetemp(self: pytest.TempPathFactory) -> Path:
        return _passable(getbasetemp(self))

    pytest.TempPathFactory.mktemp = passable_mktemp  # type: ignore[method-assign]
    pytest.TempPathFactory.getbasetemp = passable_basetemp  # type: ignore[method-assign]


#: Held while one test process records the shared class archive; the others wait for it.
CLASS_ARCHIVE_LOCK = Path(tempfile.gettempdir()) / "async-query-tests-jvm.lock"


@pytest.fixture(scope="session", autouse=True)
def job_class_archive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    """When the run has end-to-end tests, the class archive every local job starts from is
    recorded before the first of them (about half a minute, once per installation): a job
    started without it takes about twice the CPU, and the run is bound by CPU."""
    if not any(item.get_closest_marker("e2e") for item in request.session.items):
        return
    from async_query.launcher.local import LocalLauncher

    cfg = Settings(data_dir=tmp_path_factory.mktemp("class-archive"))
    with CLASS_ARCHIVE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        launcher = LocalLauncher(
            cfg.data_dir,
            cfg.cluster_name,
            "local[1]",
            java_options=cfg.local_job_java_options,
            class_archive=cfg.local_job_class_archive_dir,
        )
        if not launcher.record_class_archive():
            warnings.warn(f"local jobs start without a class archive (see {cfg.data_dir / 'logs'})", stacklevel=1)


@pytest.fixture(scope="session")
def index_server() -> Iterator[EmbeddedIndex | None]:
    """This test process's OpenSearch node (None when testing against ``OPENSEARCH_URL``)."""
    if REAL_CLUSTER:
        yield None
        return
    yield node.start_node()
    node.stop_node()


def _empty_cluster(index_server: EmbeddedIndex | None, bare: bool = False) -> Iterator[str]:
    """An empty cluster: this process's node wiped (the product's own indexes of ``local`` left
    empty, as the product makes them, unless ``bare``: :func:`tests.node.wipe`), or the real
    cluster."""
    if index_server is None:
        yield REAL_CLUSTER
        return
    node.wipe(index_server, keep=not bare)
    yield index_server.url


@pytest.fixture
def index_url(request: pytest.FixtureRequest, index_server: EmbeddedIndex | None) -> Iterator[str]:
    """An empty index cluster for this test; with ``@pytest.mark.bare_cluster``, one without
    even the product's own indexes (a test of how the product makes them)."""
    yield from _empty_cluster(index_server, bare=request.node.get_closest_marker("bare_cluster") is not None)


@pytest.fixture(scope="module")
def module_index_url(index_server: EmbeddedIndex | None) -> Iterator[str]:
    """An empty index cluster shared by a module (for tests whose Spark jobs are shared)."""
    yield from _empty_cluster(index_server)


@pytest.fixture
def ds_name() -> str:
    """The datasource name for this test; unique on a shared real cluster."""
    return f"t{secrets.token_hex(4)}" if REAL_CLUSTER else "local"


@pytest.fixture
def opensearch_config(index_url: str) -> OpenSearchConfig:
    return node.index_config(index_url, retry_seconds=5.0)


@pytest.fixture
def store(opensearch_config: OpenSearchConfig) -> Iterator[Store]:
    s = Store.connect(opensearch_config)
    yield s
    s.close()


@pytest.fixture
def datasource(ds_name: str) -> Datasource:
    return local_datasource(ds_name)


PluginFactory = Callable[..., Plugin]


@pytest.fixture
def make_plugin(
    store: Store, datasource: Datasource, opensearch_config: OpenSearchConfig, tmp_path: Path
) -> Iterator[PluginFactory]:
    """Build services on this test's index; ``launcher`` defaults to a RecordingLauncher."""
    made: list[Plugin] = []

    def make(
        launcher: Launcher | None = None,
        datasources: list[Datasource] | None = None,
        launchers: dict[str, Launcher] | None = None,
        **settings: Any,
    ) -> Plugin:
        cfg = Settings(data_dir=tmp_path / "var", **settings)
        registry = DatasourceRegistry(datasources or [datasource], store)
        chosen = launchers or {"local": launcher or RecordingLauncher()}
        plugin = build_plugin(cfg, store, registry, chosen, opensearch_config)
        made.append(plugin)
        return plugin

    yield make
    for plugin in made:
        plugin.close()


# The two below serve the modules that define a ``service`` fixture built with a RecordingLauncher.


@pytest.fixture
def launcher(plugin: Plugin) -> RecordingLauncher:
    """The recording launcher of the module's ``service``."""
    found = plugin.launchers.shared["local"]
    assert isinstance(found, RecordingLauncher)
    return found


@pytest.fixture
def client(plugin: Plugin) -> Iterator[httpx.Client]:
    """An HTTP client of the module's ``service``, served on a free loopback port."""
    with serve_http(create_app(plugin)) as url, httpx.Client(base_url=url, timeout=30, verify=node.CLIENT_SSL) as c:
        yield c
