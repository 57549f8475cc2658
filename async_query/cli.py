"""The ``async-query`` command."""

from __future__ import annotations

import argparse
import logging
import sys


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from async_query.api import create_app
    from async_query.runtime import build_runtime
    from async_query.settings import Settings
    from query_core.store import quiet_driver_logs

    quiet_driver_logs()

    runtime = build_runtime(Settings())
    try:
        app = create_app(runtime.service, on_shutdown=runtime.close)
        print(f"async query service on http://{args.host}:{args.port}/_plugins/_async_query", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
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
