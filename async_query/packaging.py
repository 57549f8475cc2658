"""``async-query package-job``: build and upload what EMR Serverless needs to run the job.

Layout under ``--s3 s3://bucket/prefix``:

``main.py``
    The entry file (``flint_repl_job/main.py`` unchanged): the ``entryPoint`` of ``StartJobRun``.
``async_query_job.zip``
    The job's code: the packages ``flint_repl_job``, ``query_core`` and ``index_mappings`` (with its
    JSON files), shipped with ``--py-files`` (the launcher adds it from the datasource's
    ``packageS3Uri``). Pure Python, imported straight from the zip.
``deps.tar.gz`` (``--with-deps``)
    The job's Python dependencies (opensearch-py, pydantic, tenacity, boto3 and what they need,
    pinned to the versions installed here; pyspark and py4j are the cluster's own), installed by
    ``pip install --target`` for the EMR application's platform (manylinux wheels for CPython
    3.11 on x86_64 or arm64, ``--arch``), so they can be built on any machine. About 30 MB.

The spark-submit parameters that use them (``package-job`` prints them; the launcher adds
``--py-files`` itself from ``packageS3Uri``, the rest goes into ``sparkSubmitParameters`` of the
engine setting, ``ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG``)::

    --py-files s3://bucket/prefix/async_query_job.zip
    --conf spark.archives=s3://bucket/prefix/deps.tar.gz#deps
    --conf spark.emr-serverless.driverEnv.PYTHONPATH=./deps
    --conf spark.executorEnv.PYTHONPATH=./deps
    --conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=/usr/bin/python3.11
    --conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=/usr/bin/python3.11
    --conf spark.executorEnv.PYSPARK_PYTHON=/usr/bin/python3.11

``spark.archives=<uri>#deps`` unpacks the archive as ``./deps`` in the working directory of the
driver and of each executor; ``PYTHONPATH=./deps`` puts it on the path (Spark keeps its own entries
and the ``--py-files`` zip ahead of it).

The job needs Python 3.11 or later (``enum.StrEnum``), and the stock EMR Serverless images have an
older ``python3``. The interpreter comes from a custom image (EMR Serverless 6.9+), for example::

    FROM public.ecr.aws/emr-serverless/spark/emr-7.1.0:latest
    USER root
    RUN dnf install -y python3.11
    USER hadoop:hadoop

and ``PYSPARK_PYTHON`` names it (``--python``, default ``/usr/bin/python3.11``; ``--python ''``
leaves the image's default). An image that also has the dependencies installed
(``python3.11 -m pip install opensearch-py pydantic tenacity boto3``) needs no ``--with-deps``.
A packed virtual environment that carries its own interpreter (AWS's venv-pack recipe for other
Python versions) works too: upload it, and set ``spark.archives=<it>#environment`` and the three
``PYSPARK_*`` keys to ``./environment/bin/python`` in ``sparkSubmitParameters`` instead.

Build and upload are separate functions (:func:`build_package`, :func:`upload_package`), so each
can be tested, and a package can be built once and uploaded to several places.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from query_core.errors import AsyncQueryError, InvalidRequestError
from query_core.jobconf import CODE_ARCHIVE_NAME, ENTRY_FILE_NAME

log = logging.getLogger(__name__)

#: The packages of the job's code archive (``query_core`` imports ``index_mappings``).
JOB_PACKAGES = ("flint_repl_job", "query_core", "index_mappings")
#: Files of those packages that go into the archive (``*.json``: the index mappings; ``*.java``:
#: the helpers the job compiles into its JVM).
PACKAGE_SUFFIXES = (".py", ".json", ".lark", ".java")
DEPS_ARCHIVE_NAME = "deps.tar.gz"
#: The name ``spark.archives`` unpacks the dependency archive under (``<uri>#deps``).
DEPS_DIR = "deps"
#: The job's runtime dependencies (``boto3``: SigV4 signing for Amazon OpenSearch Service;
#: ``pyarrow``: PySpark's Python data sources, which write Flint indexes, exchange rows as Arrow).
JOB_REQUIREMENTS = ("opensearch-py", "pydantic", "tenacity", "boto3", "lark", "pyarrow", "sqlglot")
DEFAULT_PYTHON = "/usr/bin/python3.11"
#: A fixed timestamp for archive members, so the same code gives the same bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}


@dataclass(frozen=True)
class BuiltPackage:
    """The files of one package, by the name they are uploaded under."""

    directory: Path
    files: dict[str, Path] = field(default_factory=dict)


# -- build --------------------------------------------------------------------------------------


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise AsyncQueryError(f"cannot find the package {name!r} to pack")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def build_entry_file(out_dir: Path) -> Path:
    """Copy the job's entry file, unchanged: it imports everything as ``flint_repl_job.*``."""
    target = out_dir / ENTRY_FILE_NAME
    shutil.copyfile(package_dir("flint_repl_job") / "main.py", target)
    return target


def build_code_zip(target: Path, packages: Sequence[str] = JOB_PACKAGES) -> Path:
    """Zip the job's packages (sources and package data only, in a stable order and timestamp)."""
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in packages:
            root = package_dir(name)
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root)
                if not path.is_file() or "__pycache__" in rel.parts or path.suffix not in PACKAGE_SUFFIXES:
                    continue
                info = zipfile.ZipInfo(f"{name}/{rel.as_posix()}", date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
    return target


def job_requirements(names: Sequence[str] = JOB_REQUIREMENTS) -> list[str]:
    """The job's requirements, pinned to the versions installed here (those the tests ran with)."""
    pinned = []
    for name in names:
        try:
            pinned.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pinned.append(name)
    return pinned


def build_deps_archive(
    target: Path,
    requirements: Sequence[str],
    *,
    arch: str = "x86_64",
    python_version: str = "3.11",
    pip_args: Sequence[str] = (),
) -> Path:
    """``pip install --target`` the requirements for EMR's platform, then tar.gz the folder.

    The archive's root is the folder's content (``opensearchpy/``, ``pydantic/``, ...), so that
    ``spark.archives=<uri>#deps`` gives a ``./deps`` folder to put on ``PYTHONPATH``.
    ``pip_args`` go to pip as they are (for instance ``--index-url`` or ``--no-index
    --find-links DIR`` for an offline build).
    """
    if arch not in _PLATFORMS:
        raise InvalidRequestError(f"unknown architecture {arch!r}: use one of {', '.join(_PLATFORMS)}")
    with tempfile.TemporaryDirectory(prefix="async-query-deps-") as tmp:
        site = Path(tmp) / DEPS_DIR
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--no-compile",
            "--target",
            str(site),
            "--platform",
            _PLATFORMS[arch],
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *pip_args,
            *requirements,
        ]
        log.info("installing the job's dependencies: %s", " ".join(cmd))
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AsyncQueryError(f"pip could not install the job's dependencies:\n{done.stderr.strip()[-4000:]}")
        # Console scripts are of no use on the cluster, and their shebangs name this machine.
        shutil.rmtree(site / "bin", ignore_errors=True)
        with tarfile.open(target, "w:gz") as tar:
            for path in sorted(site.iterdir()):
                tar.add(path, arcname=path.name, filter=_stable)
    return target


def _stable(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if "__pycache__" in info.name.split("/"):
        return None
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_package(
    out_dir: Path,
    *,
    with_deps: bool = False,
    requirements: Sequence[str] | None = None,
    arch: str = "x86_64",
    python_version: str = "3.11",
    pip_args: Sequence[str] = (),
) -> BuiltPackage:
    """Build the entry file, the code archive and (``with_deps``) the dependency archive."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        ENTRY_FILE_NAME: build_entry_file(out_dir),
        CODE_ARCHIVE_NAME: build_code_zip(out_dir / CODE_ARCHIVE_NAME),
    }
    if with_deps:
        reqs = job_requirements() if requirements is None else list(requirements)
        files[DEPS_ARCHIVE_NAME] = build_deps_archive(
            out_dir / DEPS_ARCHIVE_NAME, reqs, arch=arch, python_version=python_version, pip_args=pip_args
        )
    return BuiltPackage(out_dir, files)


# -- upload -------------------------------------------------------------------------------------


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` as ``(bucket, prefix)`` (prefix without slashes at either end)."""
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidRequestError(f"not an s3://bucket/prefix URI: {uri!r}")
    return parts.netloc, parts.path.strip("/")


def object_uri(base: str, name: str) -> str:
    bucket, prefix = parse_s3_uri(base)
    return f"s3://{bucket}/{prefix}/{name}" if prefix else f"s3://{bucket}/{name}"


def upload_package(package: BuiltPackage, s3_uri: str, client: Any) -> dict[str, str]:
    """Upload every file of ``package`` under ``s3_uri``; return their URIs by name."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = parse_s3_uri(s3_uri)
    uploaded = {}
    for name, path in package.files.items():
        key = f"{prefix}/{name}" if prefix else name
        try:
            client.upload_file(str(path), bucket, key)
        except (Boto3Error, BotoCoreError, ClientError) as exc:
            raise AsyncQueryError(f"cannot upload {path.name} to s3://{bucket}/{key}: {exc}") from exc
        uploaded[name] = f"s3://{bucket}/{key}"
        log.info("uploaded %s", uploaded[name])
    return uploaded


# -- what to configure --------------------------------------------------------------------------


def python_conf(s3_uri: str, with_deps: bool, python: str = DEFAULT_PYTHON) -> dict[str, str]:
    """The Spark conf of the job's Python: its interpreter, and the dependency archive if any."""
    conf: dict[str, str] = {}
    if with_deps:
        conf["spark.archives"] = f"{object_uri(s3_uri, DEPS_ARCHIVE_NAME)}#{DEPS_DIR}"
        conf["spark.emr-serverless.driverEnv.PYTHONPATH"] = f"./{DEPS_DIR}"
        conf["spark.executorEnv.PYTHONPATH"] = f"./{DEPS_DIR}"
    if python:
        conf["spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON"] = python
        conf["spark.emr-serverless.driverEnv.PYSPARK_PYTHON"] = python
        conf["spark.executorEnv.PYSPARK_PYTHON"] = python
    return conf


def engine_config(s3_uri: str, with_deps: bool, python: str = DEFAULT_PYTHON) -> dict[str, str]:
    """The keys of the engine setting (``ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG``) that use
    this package (besides applicationId, executionRoleARN and region)."""
    props = {"packageS3Uri": s3_uri.rstrip("/")}
    from async_query.launcher.emr import conf_parameters  # boto3 is loaded only for this command

    extra = " ".join(conf_parameters(python_conf(s3_uri, with_deps, python)))
    if extra:
        props["sparkSubmitParameters"] = extra
    return props


def _package_job(args: argparse.Namespace) -> int:
    try:
        return _build_and_upload(args)
    except AsyncQueryError as exc:
        print(f"package-job: {exc.message}", file=sys.stderr)
        return 1


def _build_and_upload(args: argparse.Namespace) -> int:
    import boto3

    parse_s3_uri(args.s3)
    with tempfile.TemporaryDirectory(prefix="async-query-package-") as tmp:
        out_dir = Path(args.out) if args.out else Path(tmp)
        package = build_package(
            out_dir,
            with_deps=args.with_deps,
            requirements=args.dep or None,
            arch=args.arch,
            python_version=args.python_version,
            pip_args=args.pip_arg or (),
        )
        client = boto3.client("s3", region_name=args.region) if args.region else boto3.client("s3")
        uploaded = upload_package(package, args.s3, client)
    props = engine_config(args.s3, args.with_deps, args.python)
    print(f"entryPoint: {uploaded[ENTRY_FILE_NAME]}")
    print(f"pyFiles: {uploaded[CODE_ARCHIVE_NAME]}")
    print(f"sparkSubmitParameters: --py-files {uploaded[CODE_ARCHIVE_NAME]} {props.get('sparkSubmitParameters', '')}")
    print("ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG keys (add applicationId, executionRoleARN and region):")
    print(json.dumps(props, indent=2))
    return 0


def add_commands(sub: Any) -> None:  # argparse's _SubParsersAction
    """Register ``package-job`` on the ``async-query`` parser."""
    cmd = sub.add_parser(
        "package-job",
        help="build the job's entry file, code archive (and dependencies) and upload them to S3",
        description="Build the job's entry file and code archive (and, with --with-deps, its Python dependencies), "
        "upload them under an s3:// prefix, and print the engine setting's keys that use them.",
    )
    cmd.add_argument("--s3", required=True, help="where to upload: s3://bucket/prefix")
    cmd.add_argument("--region", default="", help="the bucket's region (default: boto3's configuration)")
    cmd.add_argument(
        "--with-deps",
        action="store_true",
        help=f"also build and upload {DEPS_ARCHIVE_NAME} (pip --target for EMR's platform; needs PyPI or --pip-arg)",
    )
    cmd.add_argument("--arch", default="x86_64", choices=sorted(_PLATFORMS), help="the EMR application's architecture")
    cmd.add_argument(
        "--dep",
        action="append",
        default=[],
        help="a requirement for --with-deps, repeatable (default: the job's runtime dependencies, pinned)",
    )
    cmd.add_argument("--python-version", default="3.11", help="the Python of the EMR image (for --with-deps)")
    cmd.add_argument(
        "--python",
        default=DEFAULT_PYTHON,
        help="the interpreter on the EMR image for PYSPARK_PYTHON ('' to leave the image's default)",
    )
    cmd.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="an extra pip argument for --with-deps, repeatable; write --pip-arg=--no-index",
    )
    cmd.add_argument("--out", default="", help="keep the built files in this folder")
    cmd.set_defaults(func=_package_job)
