"""Small Java helpers the job compiles into its own JVM, with the Janino compiler Spark ships.

Nothing is built ahead: each ``.java`` file beside this module is compiled in the driver's JVM the
first time it is needed (a few hundred milliseconds, once per JVM), and anything that goes wrong
there leaves the job as it would be without the helper. A local job that starts from a class
archive keeps what it compiled beside the archive, and later jobs define the classes from there
instead of compiling them again (:func:`cache_dir`). See docs/job.md, "The JVM's helpers".

* :func:`reply_at_once`: every py4j connection of the JVM sends its replies without waiting
  (``TCP_NODELAY``): a reply over 8 KB otherwise waited about 40 ms for a delayed acknowledgement.
* :class:`PlanJson`: a plan's JSON exactly as ``TreeNode.toJSON`` writes it, at a tenth of the cost.
* ``StoredTables``: what a plan reads and writes of the catalog, in one call (:mod:`flint_repl_job.stored`).
* :func:`session`: the job's session, made without the session extensions it never uses
  (``SessionProviders``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JJavaError

log = logging.getLogger(__name__)

_PACKAGE = "asyncquery.jvm"
_UNSUPPORTED = "PlanJson$Unsupported"
_lock = threading.Lock()
#: Per JVM (its gateway), per helper class: an instance, or None when it could not be made.
_instances: dict[tuple[int, str], Any] = {}


#: Session extensions the job's session is made without (docs/job.md, "Start-up of local jobs"):
#: MLlib's, which registers internal ML functions that no SQL statement can call, and whose
#: first session costs the JVM about a CPU-second of Scala reflection.
UNUSED_EXTENSIONS = ("org.apache.spark.sql.ml.InternalFunctionRegistration",)


def helper(spark: Any, name: str) -> Any | None:
    """An instance of the helper class ``name`` compiled in the JVM of ``spark`` (a session or a
    SparkContext; compiled on first use, then kept for the JVM's life); None when the JVM cannot
    compile it."""
    gateway = _context(spark)._gateway
    key = (id(gateway), name)
    found = _instances.get(key, _MISSING)
    if found is not _MISSING:
        return found
    with _lock:
        found = _instances.get(key, _MISSING)
        if found is _MISSING:
            found = _compile(spark, name)
            _instances[key] = found
    return found


_MISSING = object()


def _context(spark: Any) -> Any:
    """The SparkContext of ``spark``, a session or a context."""
    from pyspark import SparkContext

    return spark if isinstance(spark, SparkContext) else spark.sparkContext


def _compile(spark: Any, name: str) -> Any | None:
    try:
        source = resources.files(__name__).joinpath(f"{name}.java").read_text(encoding="utf-8")
        kept = _kept_path(spark, name, source)
    except Exception as exc:  # noqa: BLE001 - as below
        log.warning("the JVM helper %s could not be read (%s); going on without it", name, type(exc).__name__)
        return None
    if kept is not None:
        found = load_kept(spark, name, kept)
        if found is not None:
            return found
    try:
        compiler = spark._jvm.org.codehaus.janino.SimpleCompiler()
        compiler.cook(source)
        instance = compiler.getClassLoader().loadClass(f"{_PACKAGE}.{name}").newInstance()
    except Exception as exc:  # noqa: BLE001 - a helper is an optimisation: without it, the job works as before
        log.warning("the JVM helper %s could not be compiled (%s); going on without it", name, type(exc).__name__)
        return None
    if kept is not None:
        keep(compiler, kept)
    return instance


# -- compiled helpers kept beside the class archive -------------------------------------------------
#
# Compiling the three helpers a job prepares costs its JVM about half a CPU-second, at every job's start.
# A local job that maps a class archive (docs/job.md, "Start-up of local jobs") keeps their classes
# beside it, in ``helpers/``: the archive's directory is the job user's own, and the archive is code
# the JVM maps already, so the kept classes are trusted as much (and only a file of this user's or
# root's that no one else may write is read at all). A file's name carries a digest of
# its source and of the Spark version (whose Janino wrote it): another source, or another Spark,
# compiles again.


def cache_dir(spark: Any) -> Path | None:
    """Where this JVM's compiled helpers are kept: ``helpers/`` beside the class archive its driver
    maps (``-XX:SharedArchiveFile``), or None when it maps none."""
    try:
        options = str(_context(spark).getConf().get("spark.driver.extraJavaOptions", "") or "")
        parts = shlex.split(options)
    except Exception:  # noqa: BLE001 - unreadable options: nothing kept, helpers compiled as before
        return None
    prefix = "-XX:SharedArchiveFile="
    archive = next((part[len(prefix) :] for part in parts if part.startswith(prefix)), "")
    return Path(archive).parent / "helpers" if archive else None


def _kept_path(spark: Any, name: str, source: str) -> Path | None:
    directory = cache_dir(spark)
    if directory is None:
        return None
    digest = hashlib.sha256(f"{spark.version}\n{source}".encode()).hexdigest()[:16]
    return directory / f"{name}-{digest}.jar"


def load_kept(spark: Any, name: str, path: Path) -> Any | None:
    """An instance of helper ``name`` defined from the classes kept in ``path`` (None when there
    are none, they are another user's to change, or they cannot be read or defined: the helper
    is then compiled)."""
    try:
        found = path.stat()
        if found.st_uid not in (os.getuid(), 0) or found.st_mode & 0o022:
            log.warning("the kept classes %s are not this user's alone: compiling the helper instead", path)
            return None
        with zipfile.ZipFile(path) as jar:
            classes = {n[: -len(".class")].replace("/", "."): jar.read(n) for n in jar.namelist() if n.endswith(".class")}
        bytecodes = spark._jvm.java.util.HashMap()
        for class_name, code in classes.items():
            bytecodes.put(class_name, bytearray(code))
        parent = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader = spark._jvm.org.codehaus.commons.compiler.util.reflect.ByteArrayClassLoader(bytecodes, parent)
        return loader.loadClass(f"{_PACKAGE}.{name}").newInstance()
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a damaged file: compiled again, and the file replaced
        log.warning("the kept classes of the JVM helper %s were not usable (%s); compiling it", name, type(exc).__name__)
        return None


def keep(compiler: Any, path: Path) -> None:
    """Keep the classes ``compiler`` made in ``path`` (written aside, then renamed: a reader sees
    the whole file or none); a directory it cannot write keeps nothing."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        bytecodes = compiler.getBytecodes()
        with zipfile.ZipFile(temporary, "w") as jar:
            for class_name in bytecodes.keySet():
                jar.writestr(str(class_name).replace(".", "/") + ".class", bytes(bytecodes.get(class_name)))
        os.replace(temporary, path)
    except Exception as exc:  # noqa: BLE001 - keeping is an optimisation
        log.info("the compiled JVM helper was not kept in %s (%s)", path.parent, type(exc).__name__)
        temporary.unlink(missing_ok=True)


def session(options: dict[str, str]) -> Any:
    """The job's Spark session, its settings ``options``: the builder's, made while the JVM's
    thread that makes it sees none of :data:`UNUSED_EXTENSIONS` (where the helper cannot be had,
    with them)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # What the builder would make first, made here so the helper can be compiled before the session.
    context = SparkContext.getOrCreate(SparkConf().setAll(list(options.items())))
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    with _extensions_hidden(context):
        return builder.getOrCreate()


@contextmanager
def _extensions_hidden(context: Any) -> Iterator[None]:
    """While the block runs, the JVM thread that serves this Python thread loads classes and
    resources through a loader that hides :data:`UNUSED_EXTENSIONS` from Spark's session."""
    providers = helper(context, "SessionProviders")
    thread = before = None
    if providers is not None:
        try:
            thread = context._jvm.java.lang.Thread.currentThread()
            before = thread.getContextClassLoader()
            thread.setContextClassLoader(providers.hiding(before, ",".join(UNUSED_EXTENSIONS)))
        except Exception as exc:  # noqa: BLE001 - as in _compile: the session is made with them
            log.warning("the session is made with every extension (%s)", type(exc).__name__)
            thread = None
    try:
        yield
    finally:
        if thread is not None:
            thread.setContextClassLoader(before)


def reply_at_once(spark: Any) -> bool:
    """Make the JVM's py4j replies leave at once (``TCP_NODELAY`` on its connections, now and
    later); False when that could not be done."""
    installer = helper(spark, "Py4jNoDelay")
    if installer is None:
        return False
    try:
        installer.install(spark.sparkContext._gateway.java_gateway_server)
    except Exception as exc:  # noqa: BLE001 - as in _compile
        log.warning("py4j replies keep their delay (%s)", type(exc).__name__)
        return False
    return True


def prepare(spark: Any) -> threading.Thread:
    """At a job's start, in the background (the job's start goes on meanwhile): replies at once
    from then on, and the plan writer and the catalog reader compiled (a statement that needs one
    before waits for it)."""

    def run() -> None:
        try:
            reply_at_once(spark)
            helper(spark, "PlanJson")
            helper(spark, "StoredTables")
        except Exception as exc:  # noqa: BLE001 - the helpers are an optimisation: the job goes on without
            log.warning("the JVM helpers were not prepared (%s); going on without them", type(exc).__name__)

    thread = threading.Thread(target=run, name="jvm-helpers", daemon=True)
    thread.start()
    return thread


class PlanJson:
    """``plan.toJSON()``, written by the :file:`PlanJson.java` helper where the JVM has it, by
    Spark otherwise (and for the rare value the helper does not know)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._writer: Any = _MISSING

    def __call__(self, plan: Any) -> str:
        writer = self._writer
        if writer is _MISSING:
            writer = self._writer = helper(self.spark, "PlanJson")
        if writer is not None:
            try:
                return str(writer.write(plan))
            except Py4JJavaError as exc:
                # Only what the helper says it does not know goes to Spark's writer: anything
                # else (the thread stopped, the JVM out of memory) is the statement's.
                if not str(exc.java_exception.getClass().getName()).endswith(_UNSUPPORTED):
                    raise
                log.debug("plan JSON by Spark: %s", exc.java_exception)
        return str(plan.toJSON())
