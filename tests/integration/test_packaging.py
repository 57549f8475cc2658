"""``async-query package-job``: what it builds, what it uploads (to moto's S3), and that it imports."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import boto3
import pytest

import index_mappings
from async_query.cli import main as cli_main
from async_query.launcher.emr import launcher_from_settings
from async_query.packaging import (
    build_code_zip,
    build_package,
    engine_config,
    job_requirements,
    parse_s3_uri,
)
from async_query.settings import Settings, SparkEngineConfig
from query_core.errors import AsyncQueryError, InvalidRequestError

pytestmark = pytest.mark.slow  # its own node, metastore, serve or bench process: not in the fast tier

REGION = "us-east-1"
BUCKET = "pkg-bucket"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


def keys(s3: Any, prefix: str) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}


def run_python(code: str, pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose first path entry is ``pythonpath``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


IMPORT_FROM_ZIP = """
import json, sys
import flint_repl_job.main, flint_repl_job.runners, flint_repl_job.config, query_core.store, index_mappings
print(json.dumps({
    "files": [m.__file__ for m in (flint_repl_job.main, flint_repl_job.runners, query_core.store, index_mappings)],
    "request_index": index_mappings.load("request_index"),
    "result_index": index_mappings.load("result_index"),
}))
"""


def test_code_zip_holds_the_three_packages_and_nothing_else(tmp_path: Path) -> None:
    target = build_code_zip(tmp_path / "code.zip")
    names = zipfile.ZipFile(target).namelist()
    assert {n.split("/")[0] for n in names} == {"flint_repl_job", "query_core", "index_mappings"}
    for required in (
        "flint_repl_job/__init__.py",
        "flint_repl_job/main.py",
        "flint_repl_job/runners/__init__.py",
        "query_core/store/client.py",
        "index_mappings/__init__.py",
        "index_mappings/request_index.json",
        "index_mappings/result_index.json",
        "query_core/flint/grammar.lark",  # the Flint parser's grammar travels with the code
        "flint_repl_job/jvm/PlanJson.java",  # and the helpers the job compiles into its JVM
        "flint_repl_job/jvm/Py4jNoDelay.java",
    ):
        assert required in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # The same code gives the same bytes (no timestamps), so an unchanged package is recognisable.
    again = build_code_zip(tmp_path / "again.zip")
    assert target.read_bytes() == again.read_bytes()


def test_package_job_uploads_and_the_uploaded_code_imports(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["package-job", "--s3", f"s3://{BUCKET}/releases/v1/", "--region", REGION]) == 0
    out = capsys.readouterr().out
    assert keys(s3, "releases/v1/") == {"releases/v1/main.py", "releases/v1/async_query_job.zip"}
    assert f"entryPoint: s3://{BUCKET}/releases/v1/main.py" in out
    assert f"--py-files s3://{BUCKET}/releases/v1/async_query_job.zip" in out
    assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=/usr/bin/python3.11" in out
    assert "spark.archives" not in out  # no dependency archive was asked for
    props = json.loads(out[out.index("{") :])
    assert props["packageS3Uri"] == f"s3://{BUCKET}/releases/v1"

    entry = tmp_path / "main.py"
    code = tmp_path / "async_query_job.zip"
    s3.download_file(BUCKET, "releases/v1/main.py", str(entry))
    s3.download_file(BUCKET, "releases/v1/async_query_job.zip", str(code))
    assert entry.read_bytes() == (REPO / "flint_repl_job" / "main.py").read_bytes()

    done = run_python(IMPORT_FROM_ZIP, code, tmp_path)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(f.startswith(str(code) + os.sep) for f in loaded["files"]), loaded["files"]
    assert loaded["request_index"] == index_mappings.load("request_index")
    assert loaded["result_index"] == index_mappings.load("result_index")


def test_package_job_reports_a_missing_bucket(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["package-job", "--s3", "s3://no-such-bucket/p", "--region", REGION]) == 1
    assert "cannot upload" in capsys.readouterr().err


def test_the_printed_keys_configure_the_launcher(s3: Any) -> None:
    props = engine_config(f"s3://{BUCKET}/releases/v1", with_deps=True)
    props.update(applicationId="00app", executionRoleARN="arn:aws:iam::123456789012:role/r", region=REGION)
    aq = launcher_from_settings(Settings(spark_execution_engine_config=SparkEngineConfig.model_validate(props)))
    assert aq.entry_point == f"s3://{BUCKET}/releases/v1/main.py"
    assert aq.py_files == f"s3://{BUCKET}/releases/v1/async_query_job.zip"
    assert f"--conf spark.archives=s3://{BUCKET}/releases/v1/deps.tar.gz#deps" in aq.spark_submit_parameters
    assert "--conf spark.emr-serverless.driverEnv.PYTHONPATH=./deps" in aq.spark_submit_parameters
    assert "--conf spark.executorEnv.PYTHONPATH=./deps" in aq.spark_submit_parameters
    aq.close()


def test_job_requirements_are_the_runtime_deps_pinned_to_this_environment() -> None:
    reqs = job_requirements()
    assert f"opensearch-py=={metadata.version('opensearch-py')}" in reqs
    assert f"pydantic=={metadata.version('pydantic')}" in reqs
    assert f"tenacity=={metadata.version('tenacity')}" in reqs
    assert not [r for r in reqs if r.startswith(("pyspark", "py4j"))]  # the cluster's own


def test_parse_s3_uri() -> None:
    assert parse_s3_uri("s3://b/a/b/") == ("b", "a/b")
    assert parse_s3_uri("s3://b") == ("b", "")
    with pytest.raises(InvalidRequestError):
        parse_s3_uri("https://b/a")


# -- the dependency archive (pip --target, offline from a wheel made here) --------------------


def make_wheel(folder: Path, name: str = "aqdemo", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel with a console script (whose bin/ stub must not be packed)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n\ndef main():\n    print(VALUE)\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {name}:main\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def test_deps_archive_unpacks_to_an_importable_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    package = build_package(
        tmp_path / "out",
        with_deps=True,
        requirements=["aqdemo==1.0"],
        pip_args=["--no-index", "--find-links", str(wheels)],
    )
    archive = package.files["deps.tar.gz"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        # What spark.archives=<uri>#deps gives the job: ./deps/aqdemo/__init__.py
        assert "aqdemo/__init__.py" in names
        assert not [n for n in names if n == "bin" or n.startswith("bin/") or "__pycache__" in n]
        deps = tmp_path / "deps"
        tar.extractall(deps, filter="data")
    done = run_python("import aqdemo; print(aqdemo.VALUE, aqdemo.__file__)", deps, tmp_path)
    assert done.returncode == 0, done.stderr
    value, path = done.stdout.split()
    assert value == "42"
    assert path.startswith(str(deps))


def test_package_job_with_deps_uploads_the_archive_and_prints_its_parameters(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    argv = [
        "package-job",
        "--s3",
        f"s3://{BUCKET}/rel",
        "--with-deps",
        "--dep",
        "aqdemo==1.0",
        "--pip-arg=--no-index",
        f"--pip-arg=--find-links={wheels}",
        "--arch",
        "arm64",
    ]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert keys(s3, "rel/") == {"rel/main.py", "rel/async_query_job.zip", "rel/deps.tar.gz"}
    assert f"--conf spark.archives=s3://{BUCKET}/rel/deps.tar.gz#deps" in out
    assert "--conf spark.emr-serverless.driverEnv.PYTHONPATH=./deps" in out


def test_a_failed_pip_install_is_reported(tmp_path: Path) -> None:
    with pytest.raises(AsyncQueryError, match="pip could not install"):
        build_package(
            tmp_path / "out",
            with_deps=True,
            requirements=["aqdemo-does-not-exist==9.9"],
            pip_args=["--no-index", "--find-links", str(tmp_path)],
        )


def test_an_unknown_architecture_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError):
        build_package(tmp_path / "out", with_deps=True, requirements=["x"], arch="sparc")
