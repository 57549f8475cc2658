"""A local job's Python prefers the installed PySpark to Spark's source zips (docs/job.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from async_query.launcher.job_process import STARTUP_DIR
from async_query.launcher.local import ENTRY_FILE, LocalLauncher
from flint_repl_job.pypath import prefer_installed_pyspark

PY4J = "py4j-0.10.9.9-src.zip"


def installed(site: Path, py4j_release: str = "0.10.9.9") -> tuple[str, str]:
    """A pip-installed pyspark in ``site`` (and the py4j release pip put beside it): its two zips."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / f"py4j-{py4j_release}.dist-info").mkdir()
    for name in ("pyspark.zip", PY4J):
        (lib / name).write_bytes(b"")
    return str(lib / "pyspark.zip"), str(lib / PY4J)


def test_the_zips_of_the_pyspark_installed_on_the_path_go_to_its_end(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed(site)
    path = ["/job", pyspark_zip, py4j_zip, "/project", str(site)]
    assert prefer_installed_pyspark(path) == ["/job", "/project", str(site), pyspark_zip, py4j_zip]


def test_a_py4j_zip_of_another_release_than_the_installed_one_keeps_its_place(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed(site, py4j_release="0.10.9.7")
    assert prefer_installed_pyspark([pyspark_zip, py4j_zip, str(site)]) == [py4j_zip, str(site), pyspark_zip]


def test_zips_of_a_spark_whose_pyspark_is_not_on_the_path_keep_their_place(tmp_path: Path) -> None:
    pyspark_zip, py4j_zip = installed(tmp_path / "cluster-spark-home")
    path = [pyspark_zip, py4j_zip, str(tmp_path / "site-packages")]
    assert prefer_installed_pyspark(path) == path


def test_zips_beside_a_folder_that_is_no_pyspark_package_keep_their_place(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed(site)
    (site / "pyspark" / "__init__.py").unlink()
    path = [pyspark_zip, py4j_zip, str(site)]
    assert prefer_installed_pyspark(path) == path


def test_this_installation_s_zips_are_those_moved() -> None:
    """The layout the rule expects is the one pip gives this project's PySpark."""
    site = str(Path(pyspark.__file__).parent.parent)
    lib = os.path.join(site, "pyspark", "python", "lib")
    zips = sorted(os.path.join(lib, name) for name in os.listdir(lib) if name.endswith(".zip"))
    assert len(zips) == 2
    assert prefer_installed_pyspark([*zips, *sys.path]) == [*sys.path, *zips]


def test_the_job_s_entry_file_imports_pyspark_from_the_installed_package() -> None:
    """As ``spark-submit`` starts it: Spark's zips first on ``PYTHONPATH``."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = os.pathsep.join(str(zip_file) for zip_file in sorted(lib.glob("*.zip")))
    code = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='entry'); import pyspark; print(pyspark.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code, str(ENTRY_FILE)],
        env={**os.environ, "PYTHONPATH": zips},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == pyspark.__file__


def _run_with_path(code: str, *path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_process_spark_starts_with_the_job_s_path_imports_pyspark_from_the_installed_package() -> None:
    """Spark's own daemon (the Python data sources' planners) gets the zips first and the job's
    ``PYTHONPATH`` after them: the job's ``sitecustomize`` moves the zips behind the package."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(zip_file) for zip_file in sorted(lib.glob("*.zip"))]
    done = _run_with_path("import pyspark; print(pyspark.__file__)", *zips, str(STARTUP_DIR))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == pyspark.__file__


def test_the_sitecustomize_the_job_s_shadows_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    done = _run_with_path(
        "import builtins; print(getattr(builtins, 'SHADOWED_RAN', False))", str(STARTUP_DIR), str(tmp_path)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"


def test_a_local_job_s_path_starts_with_its_startup_directory(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "var", "aq", spark_submit="/bin/true")
    path = launcher.processes.environment(tmp_path / "tmp")["PYTHONPATH"].split(os.pathsep)
    assert path[0] == str(STARTUP_DIR)
    assert (STARTUP_DIR / "sitecustomize.py").is_file()
