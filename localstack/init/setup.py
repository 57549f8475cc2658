"""Create the AWS resources the async query service uses, on LocalStack (or any AWS-compatible endpoint).

Creates, each only if it is not there yet (running it again changes nothing):

- an S3 bucket for the job's package (``async-query package-job --s3 s3://<bucket>/<prefix>``),
- an IAM role for the job runs (LocalStack does not enforce IAM by default; the ARN must exist),
- an EMR Serverless application (``SPARK``),
- an OpenSearch domain for the request and result indexes.

Then prints (and, with ``SETUP_OUTPUT_DIR``, writes) ``setup.json`` with the ids and endpoints, and
``datasources.json`` with one ``emr-serverless`` datasource for ``ASYNC_QUERY_DATASOURCES_FILE``.

Everything comes from environment variables, so the same file serves the LocalStack ready hook
(``ready.d/10-async-query.py`` runs :func:`run_from_env` inside LocalStack) and a shell::

    AWS_ENDPOINT_URL=http://localhost:4566 python localstack/init/setup.py

=============================  ===============================  ==========================================
variable                       default                          meaning
=============================  ===============================  ==========================================
``AWS_ENDPOINT_URL``           ``http://localhost:4566``        the AWS endpoint (LocalStack, moto server)
``AWS_DEFAULT_REGION``         ``us-east-1``                    region of every resource
``ASYNC_QUERY_BUCKET``         ``async-query``                  bucket for the job's package
``ASYNC_QUERY_PACKAGE_PREFIX`` ``job``                          key prefix of the package in the bucket
``EMR_APPLICATION_NAME``       ``async-query``                  EMR Serverless application name
``EMR_RELEASE_LABEL``          ``emr-7.1.0``                    its release (Spark 3.5)
``EMR_ROLE_NAME``              ``async-query-job-role``         the job runs' execution role
``OPENSEARCH_DOMAIN``          ``async-query``                  OpenSearch domain name
``OPENSEARCH_ENGINE_VERSION``  ``OpenSearch_2.11``              its engine version
``DATASOURCE_NAME``            ``mys3``                         name of the datasource written
``WAIT_FOR_DOMAIN_SECONDS``    ``0``                            wait this long for the domain's endpoint
``SETUP_OUTPUT_DIR``           (none)                           where to write the two JSON files
=============================  ===============================  ==========================================

Only ``boto3`` is needed (LocalStack's own interpreter has it).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import ClientError

log = logging.getLogger("async_query.localstack_setup")

DEFAULTS = {
    "AWS_ENDPOINT_URL": "http://localhost:4566",
    "AWS_DEFAULT_REGION": "us-east-1",
    "ASYNC_QUERY_BUCKET": "async-query",
    "ASYNC_QUERY_PACKAGE_PREFIX": "job",
    "EMR_APPLICATION_NAME": "async-query",
    "EMR_RELEASE_LABEL": "emr-7.1.0",
    "EMR_ROLE_NAME": "async-query-job-role",
    "OPENSEARCH_DOMAIN": "async-query",
    "OPENSEARCH_ENGINE_VERSION": "OpenSearch_2.11",
    "DATASOURCE_NAME": "mys3",
    "WAIT_FOR_DOMAIN_SECONDS": "0",
    "SETUP_OUTPUT_DIR": "",
}
#: Who may assume the job runs' role.
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "emr-serverless.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}
#: Application states from which it can no longer run jobs.
GONE_STATES = {"TERMINATED"}


def config(env: Mapping[str, str]) -> dict[str, str]:
    return {key: env.get(key) or default for key, default in DEFAULTS.items()}


def client(service: str, cfg: Mapping[str, str], env: Mapping[str, str]) -> Any:
    # An emulator accepts any credentials; LocalStack's hooks run without any set.
    return boto3.client(
        service,
        endpoint_url=cfg["AWS_ENDPOINT_URL"],
        region_name=cfg["AWS_DEFAULT_REGION"],
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or "test",
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or "test",
    )


def ensure_bucket(s3: Any, name: str, region: str) -> None:
    try:
        s3.head_bucket(Bucket=name)
        log.info("bucket %s exists", name)
        return
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    params: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": region}
    s3.create_bucket(**params)
    log.info("created bucket %s", name)


def ensure_role(iam: Any, name: str) -> str:
    try:
        return str(iam.get_role(RoleName=name)["Role"]["Arn"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
    arn = str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST_POLICY))["Role"]["Arn"])
    log.info("created role %s", arn)
    return arn


def ensure_application(emr: Any, name: str, release_label: str) -> str:
    """The id of the live SPARK application named ``name``, created if there is none."""
    for page in emr.get_paginator("list_applications").paginate():
        for app in page.get("applications", []):
            if app.get("name") == name and app.get("type", "").upper() == "SPARK" and app["state"] not in GONE_STATES:
                log.info("EMR Serverless application %s (%s) exists", name, app["id"])
                return str(app["id"])
    created = emr.create_application(name=name, releaseLabel=release_label, type="SPARK")
    log.info("created EMR Serverless application %s (%s)", name, created["applicationId"])
    return str(created["applicationId"])


def ensure_domain(opensearch: Any, name: str, engine_version: str, wait_seconds: float) -> str:
    """The domain's endpoint (host[:port]); empty while it is still being created."""
    try:
        status = opensearch.describe_domain(DomainName=name)["DomainStatus"]
        log.info("OpenSearch domain %s exists", name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        status = opensearch.create_domain(DomainName=name, EngineVersion=engine_version)["DomainStatus"]
        log.info("created OpenSearch domain %s", name)
    deadline = time.monotonic() + wait_seconds
    # An operator's script, not a test: polling a cloud API for its resource is the way to wait.
    while not _endpoint(status) and time.monotonic() < deadline:
        time.sleep(2)
        status = opensearch.describe_domain(DomainName=name)["DomainStatus"]
    return _endpoint(status)


def _endpoint(status: Mapping[str, Any]) -> str:
    endpoint = status.get("Endpoint") or (status.get("Endpoints") or {}).get("vpc") or ""
    return "" if status.get("Processing") and not endpoint else str(endpoint)


def setup(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Create what is missing; return the ids, endpoints and the datasource to serve."""
    env = os.environ if env is None else env
    cfg = config(env)
    region = cfg["AWS_DEFAULT_REGION"]
    bucket = cfg["ASYNC_QUERY_BUCKET"]
    ensure_bucket(client("s3", cfg, env), bucket, region)
    role_arn = ensure_role(client("iam", cfg, env), cfg["EMR_ROLE_NAME"])
    app_id = ensure_application(
        client("emr-serverless", cfg, env), cfg["EMR_APPLICATION_NAME"], cfg["EMR_RELEASE_LABEL"]
    )
    domain_endpoint = ensure_domain(
        client("opensearch", cfg, env),
        cfg["OPENSEARCH_DOMAIN"],
        cfg["OPENSEARCH_ENGINE_VERSION"],
        float(cfg["WAIT_FOR_DOMAIN_SECONDS"]),
    )
    package_uri = f"s3://{bucket}/{cfg['ASYNC_QUERY_PACKAGE_PREFIX'].strip('/')}"
    # LocalStack serves its domains over the same scheme as its API (plain http).
    scheme = urlsplit(cfg["AWS_ENDPOINT_URL"]).scheme or "http"
    # Where jobs run is the service's setting (ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG); the
    # datasource only names its engine.
    engine = {
        "applicationId": app_id,
        "executionRoleARN": role_arn,
        "region": region,
        "packageS3Uri": package_uri,
    }
    datasource = {"name": cfg["DATASOURCE_NAME"], "connector": "emr-serverless"}
    return {
        "endpointUrl": cfg["AWS_ENDPOINT_URL"],
        "region": region,
        "bucket": bucket,
        "packageS3Uri": package_uri,
        "applicationId": app_id,
        "executionRoleARN": role_arn,
        "opensearchDomain": cfg["OPENSEARCH_DOMAIN"],
        "opensearchEndpoint": domain_endpoint,
        "opensearchUrl": f"{scheme}://{domain_endpoint}" if domain_endpoint else "",
        "sparkExecutionEngineConfig": engine,
        "datasources": [datasource],
    }


def write_outputs(result: Mapping[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "setup.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out_dir / "datasources.json").write_text(json.dumps(result["datasources"], indent=2) + "\n", encoding="utf-8")
    engine = json.dumps(result["sparkExecutionEngineConfig"], indent=2) + "\n"
    (out_dir / "engine.json").write_text(engine, encoding="utf-8")


def run_from_env() -> dict[str, Any]:
    """Set up, print the result, write the files; raise on failure (the hook is marked failed)."""
    result = setup()
    print(json.dumps(result, indent=2), flush=True)
    out_dir = os.environ.get("SETUP_OUTPUT_DIR", "")
    if out_dir:
        write_outputs(result, Path(out_dir))
    return result


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    try:
        run_from_env()
    except ClientError as exc:
        print(f"setup failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
