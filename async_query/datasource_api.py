"""``/_plugins/_query/_datasources``: the reference's datasource API shape.

Reading is open to every authenticated caller; creating, changing and deleting datasources is for
admins only: a 403 otherwise, before the datasource in the body is read (a body that is not JSON
at all is still a 406 or 400 first, as FastAPI decodes it before the check runs; nothing is
written either way).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, Response

from async_query.datasources import DatasourceRegistry, parse_datasource
from async_query.security.authz import require_admin
from async_query.security.middleware import audit_note, current_principal
from async_query.security.principal import Principal
from query_core.errors import InvalidRequestError

BASE = "/_plugins/_query/_datasources"


def admin_only(principal: Principal = Depends(current_principal)) -> Principal:  # noqa: B008 - FastAPI's idiom
    """FastAPI dependency of every datasource write."""
    require_admin(principal, "change datasources")
    return principal


def datasource_router(registry: DatasourceRegistry) -> APIRouter:
    router = APIRouter()
    writes = [Depends(admin_only)]

    @router.post(BASE, status_code=201, dependencies=writes)
    def create(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008 - FastAPI's idiom
        datasource = parse_datasource(body)
        audit_note(request, datasource=datasource.name)
        registry.create(datasource)
        return JSONResponse(f"Created DataSource with name {datasource.name}", status_code=201)

    @router.put(BASE, dependencies=writes)
    def update(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        datasource = parse_datasource(body)
        audit_note(request, datasource=datasource.name)
        registry.update(datasource)
        return JSONResponse(f"Updated DataSource with name {datasource.name}")

    @router.patch(BASE, dependencies=writes)
    def patch(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise InvalidRequestError("a patch names the datasource in 'name'")
        audit_note(request, datasource=body["name"])
        current = registry.get(body["name"]).to_wire()
        datasource = parse_datasource({**current, **body})
        registry.update(datasource)
        return JSONResponse(f"Updated DataSource with name {datasource.name}")

    @router.get(BASE)
    def list_all() -> JSONResponse:
        return JSONResponse([d.to_wire() for d in registry.all()])

    @router.get(BASE + "/{name}")
    def get_one(name: str) -> JSONResponse:
        return JSONResponse(registry.get(name).to_wire())

    @router.delete(BASE + "/{name}", status_code=204, dependencies=writes)
    def delete(name: str) -> Response:
        registry.delete(name)
        return Response(status_code=204)

    return router
