"""What operators read (``docs/metrics.md``): ``GET /metrics`` (Prometheus text format), the
reference's ``GET|POST /_plugins/_sql/stats`` and ``/_plugins/_ppl/stats``, and
``GET /_plugins/_async_query/_health``.

Metrics and stats are for admins and the holders of a ``metrics_roles`` role (a scraper's user
needs one, unless authentication is ``none``); health is open to every authenticated caller (it
names no query, user or secret).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from async_query import metrics
from async_query.health import Health
from async_query.security.authz import require_admin
from async_query.security.middleware import current_principal
from async_query.security.principal import Principal
from async_query.settings import Settings
from async_query.stats import Stats

HEALTH = metrics.ROUTES["health"]


def ops_router(settings: Settings, health: Health, stats: Stats | None) -> APIRouter:
    router = APIRouter()
    roles = frozenset(settings.metrics_roles)

    def metrics_reader(principal: Principal = Depends(current_principal)) -> Principal:  # noqa: B008 - FastAPI's idiom
        """FastAPI dependency of the metrics and stats endpoints: admins, and holders of a
        ``metrics_roles`` role."""
        if principal.roles.isdisjoint(roles):
            require_admin(principal, "read the service's metrics")
        return principal

    admins = [Depends(metrics_reader)]
    enabled = settings.metrics_enabled

    def check_enabled() -> None:
        if not enabled:
            raise HTTPException(404, "metrics are off in this service (ASYNC_QUERY_METRICS_ENABLED=false)")

    @router.get(metrics.ROUTES["metrics"], dependencies=admins)
    def prometheus_metrics() -> Response:
        check_enabled()
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    def stats_reply() -> JSONResponse:
        check_enabled()
        return JSONResponse(stats.snapshot() if stats is not None else {})

    for path in (metrics.ROUTES["sql_stats"], metrics.ROUTES["ppl_stats"]):
        router.add_api_route(path, stats_reply, methods=["GET", "POST"], dependencies=admins)

    @router.get(HEALTH, dependencies=[Depends(current_principal)])
    def health_reply() -> JSONResponse:
        report = health.report()
        if report.serving:
            return JSONResponse({"serving": True, "checks": report.checks})
        body = {
            "status": 503,
            "error": {"type": "ServiceUnavailable", "reason": "Service Unavailable", "details": report.problems()},
            "checks": report.checks,
        }
        return JSONResponse(body, status_code=503)

    return router
