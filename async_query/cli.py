"""The ``async-query`` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from async_query.gateway import Gateway, PassPolicy
    from async_query.settings import Settings
    from query_core.config import OpenSearchConfig


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from async_query.api import create_app
    from async_query.gateway import GatewayConfigError, gateway_policy
    from async_query.http_limits import uvicorn_limits
    from async_query.runtime import build_runtime
    from async_query.security.files import PRIVATE_UMASK, private_dir
    from async_query.security.proxies import SERVER_OPTIONS
    from async_query.security.setup import build_security, probe_cluster, serve_checks
    from async_query.settings import Settings
    from query_core.errors import AsyncQueryError
    from query_core.store import quiet_driver_logs

    quiet_driver_logs()
    if bool(args.tls_cert) != bool(args.tls_key):
        return _fail("--tls-cert and --tls-key go together")
    try:
        settings = Settings()
    except ValidationError as exc:
        return _fail(
            "invalid settings: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        )
    checks = serve_checks(settings, args.host, args.insecure_no_auth, tls=bool(args.tls_cert), tls_key=args.tls_key or "")
    for warning in checks.warnings:
        print(warning, file=sys.stderr, flush=True)
    if checks.errors:
        return _fail(*checks.errors)
    problem = probe_cluster(settings) if settings.auth == "cluster" else None
    if problem:
        return _fail(problem)
    with_gateway = args.gateway or settings.gateway
    try:
        # Checked before anything starts: a cluster the gateway cannot pass requests to.
        policy = gateway_policy(settings) if with_gateway else None
    except GatewayConfigError as exc:
        return _fail(f"serve --gateway: {exc}")
    # Everything the service and its children (index server, metastore, Spark jobs) create from
    # here on is private to this user; the data directory itself is 0700.
    os.umask(PRIVATE_UMASK)
    private_dir(settings.data_dir)
    try:
        runtime = build_runtime(settings)
    except AsyncQueryError as exc:  # a job user, a metastore or an index server that cannot start
        return _fail(f"cannot start: {exc}")
    try:
        if policy is not None:  # as the service reaches its cluster (the embedded index: with its credential)
            policy = gateway_policy(settings, runtime.plugin.opensearch)
        security = build_security(settings, args.insecure_no_auth)
        gateway = _gateway(settings, runtime.plugin.opensearch, policy) if policy is not None else None
        app = create_app(runtime.plugin, on_shutdown=runtime.close, security=security, gateway=gateway)
        scheme = "https" if args.tls_cert else "http"
        say = _announcer(args.log_format)
        say(f"async query service on {scheme}://{args.host}:{args.port}/_plugins/_async_query (auth: {settings.auth})")
        if gateway is not None:
            say(f"gateway: every other path on {scheme}://{args.host}:{args.port} passes to {gateway.upstream}")
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
            # As a gateway, the cluster's own Server header (if any) passes through instead.
            server_header=gateway is None,
            ssl_certfile=args.tls_cert,
            ssl_keyfile=args.tls_key,
            # Connections, head and body time, head size (docs/security.md, "Resource limits").
            **uvicorn_limits(settings),
            # No X-Forwarded-For believed but from the trusted proxies (docs/security.md, "Client addresses").
            **SERVER_OPTIONS,
            # JSON lines: uvicorn's own lines go through the root's JSON handler too.
            log_config=None if args.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        )
    finally:
        runtime.close()
    return 0


def _gateway(settings: Settings, cluster: OpenSearchConfig, policy: PassPolicy) -> Gateway:
    from async_query.gateway import Gateway, GatewayLimits

    limits = GatewayLimits(settings.gateway_connect_timeout_s, settings.gateway_read_timeout_s, settings.gateway_max_connections)
    return Gateway.for_cluster(cluster, policy, limits)


def _announcer(log_format: str) -> Callable[[str], None]:
    """How ``serve`` announces where it listens: a line on stdout, or with JSON logs a log line
    (every line it writes is then JSON)."""
    if log_format == "json":
        import logging

        return logging.getLogger("async_query.cli").info
    return lambda text: print(text, flush=True)


def _fail(*messages: str) -> int:
    for message in messages:
        print(f"error: {message}", file=sys.stderr, flush=True)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async-query", description="Async SQL queries on Spark, tracked in OpenSearch."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the REST service (embedded index and local Spark unless OPENSEARCH_URL is set)",
        description=(
            "Run the REST service. Callers are authenticated as ASYNC_QUERY_AUTH says: none (the default; "
            "only on a loopback address), basic (users added with `async-query user add`) or cluster (the "
            "index cluster's security plugin checks them)."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9000)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one JSON object per line, with queryId and sessionId on every line about a query",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="with ASYNC_QUERY_AUTH=none, listen on a non-loopback address anyway: anyone who reaches the "
        "port can run any Spark SQL as this user",
    )
    serve.add_argument(
        "--gateway",
        action="store_true",
        help="also answer as the index cluster (for OpenSearch Dashboards): every other path passes to it",
    )
    serve.add_argument("--tls-cert", default=None, metavar="PEM", help="serve HTTPS with this certificate (chain)")
    serve.add_argument("--tls-key", default=None, metavar="PEM", help="the private key of --tls-cert")
    serve.set_defaults(func=_serve)
    from async_query import packaging
    from async_query.security import user_cli
    from async_query_cli import commands

    commands.add_commands(sub)
    user_cli.add_commands(sub)
    packaging.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from async_query import logs

    args = build_parser().parse_args(argv)
    logs.configure(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
