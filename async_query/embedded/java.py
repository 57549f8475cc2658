"""What the embedded default's JVM children share: Spark's jars, and Java sources compiled as they start.

The metastores and the OpenSearch node each start from a Java source of this package, compiled by
the Janino compiler that Spark ships (``org.codehaus.janino.SimpleCompiler``: nothing to build on
the user's machine). A source is written into the child's own directory, a file of the child's
user that no one else may read.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from async_query.security.job_user import JobUser

#: Janino's compile-and-run entry point: ``SimpleCompiler <source> <class> <its arguments>``.
JANINO_MAIN = "org.codehaus.janino.SimpleCompiler"


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def janino_classpath() -> list[str]:
    """Janino's jars (the compiler and its API), from Spark's."""
    jars = pyspark_jars()
    return [str(jar) for pattern in ("janino-*.jar", "commons-compiler-*.jar") for jar in sorted(jars.glob(pattern))]


def place_source(directory: Path, name: str, owner: JobUser) -> Path:
    """The Java source ``name`` of this package, written into ``directory`` (a child's own, where it
    reads it) for ``owner``, the child's user (:func:`write_file_for`)."""
    return write_file_for(directory / name, resources.files(__package__).joinpath(name).read_text(encoding="utf-8"), owner)


def write_file_for(path: Path, text: str, owner: JobUser) -> Path:
    """``text`` written to ``path`` as a new file of ``owner``'s, 0600, never through a link another
    user may have left there (what was at ``path`` is removed first)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # whatever the umask
    if owner.switches:
        os.fchown(fd, owner.uid, owner.gid)
    with open(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path
