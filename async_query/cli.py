"""The ``async-query`` command."""

from __future__ import annotations

import argparse
import logging
import sys


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from async_query.api import create_app
    from async_query.gateway import Gateway, GatewayConfigError, GatewayLimits, service_credentials
    from async_query.runtime import build_runtime
    from async_query.settings import Settings
    from query_core.store import quiet_driver_logs

    quiet_driver_logs()

    settings = Settings()
    with_gateway = args.gateway or settings.gateway
    try:
        # Checked before anything starts: a cluster the gateway cannot pass requests to.
        policy = service_credentials(settings.opensearch()) if with_gateway else None
    except GatewayConfigError as exc:
        print(f"async-query serve --gateway: {exc}", file=sys.stderr)
        return 2
    runtime = build_runtime(settings)
    try:
        gateway = None
        if policy is not None:
            limits = GatewayLimits(
                settings.gateway_connect_timeout_s, settings.gateway_read_timeout_s, settings.gateway_max_connections
            )
            gateway = Gateway.for_cluster(runtime.service.opensearch, policy, limits)
        app = create_app(runtime.service, on_shutdown=runtime.close, gateway=gateway)
        print(f"async query service on http://{args.host}:{args.port}/_plugins/_async_query", flush=True)
        if gateway is not None:
            print(
                f"gateway: every other path on http://{args.host}:{args.port} passes to {gateway.upstream}", flush=True
            )
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
            # As a gateway, the cluster's own Server header (if any) passes through instead.
            server_header=gateway is None,
        )
    finally:
        runtime.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async-query", description="Async SQL queries on Spark, tracked in OpenSearch."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run the REST service (embedded index and local Spark unless OPENSEARCH_URL is set)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=9000)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--gateway",
        action="store_true",
        help="also answer as the index cluster (for OpenSearch Dashboards): every other path passes to it",
    )
    serve.set_defaults(func=_serve)
    from async_query import client_cli, packaging

    client_cli.add_commands(sub)
    packaging.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, getattr(args, "log_level", "info").upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
