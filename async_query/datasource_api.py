"""``/_plugins/_query/_datasources``: the reference's datasource API (docs/api.md, docs/datasources.md).

Replies are the reference's: ``201`` and ``"Created DataSource with name <name>"`` on POST,
``"Updated DataSource with name <name>"`` on PUT and PATCH, ``204`` on DELETE, a 404
``DataSourceNotFoundException`` for a name that names nothing, and datasources without their
credentials (the keys the reference leaves out of its replies).

Reading is open to every authenticated caller; creating, changing and deleting datasources is for
admins only: a 403 otherwise, before the datasource in the body is read (a body that is not JSON
at all is still a 406 or 400 first, as FastAPI decodes it before the check runs; nothing is
written either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, Response

from async_query.datasources import Datasource, DatasourceRegistry, parse_datasource, parse_patch
from async_query.security.authz import require_admin
from async_query.security.middleware import audit_note, current_principal
from async_query.security.principal import Principal
from query_core.errors import InvalidRequestError

BASE = "/_plugins/_query/_datasources"

#: Refuses (a 400) a datasource this deployment cannot run: an engine it does not have, an
#: execution role its settings do not list.
DeploymentCheck = Callable[[Datasource], None]


def admin_only(principal: Principal = Depends(current_principal)) -> Principal:  # noqa: B008 - FastAPI's idiom
    """FastAPI dependency of every datasource write."""
    require_admin(principal, "change datasources")
    return principal


def _named(body: Any) -> str:
    """The name a PATCH body names (the reference's message when it names none)."""
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("Name is a required field.")
    return name


def datasource_router(registry: DatasourceRegistry, check: DeploymentCheck | None = None) -> APIRouter:
    router = APIRouter()
    writes = [Depends(admin_only)]

    def accepted(datasource: Datasource) -> Datasource:
        """The datasource with its engine named, once this deployment can run it."""
        datasource = registry.with_engine(datasource)
        if check is not None:
            check(datasource)
        return datasource

    @router.post(BASE, status_code=201, dependencies=writes)
    def create(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008 - FastAPI's idiom
        datasource = parse_datasource(body)
        audit_note(request, datasource=datasource.name)
        registry.create(accepted(datasource))
        return JSONResponse(f"Created DataSource with name {datasource.name}", status_code=201)

    @router.put(BASE, dependencies=writes)
    def update(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        datasource = parse_datasource(body)
        audit_note(request, datasource=datasource.name)
        registry.update(accepted(datasource))
        return JSONResponse(f"Updated DataSource with name {datasource.name}")

    @router.patch(BASE, dependencies=writes)
    def patch(request: Request, body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        name = _named(body)
        audit_note(request, datasource=name)
        datasource = parse_patch(registry.describe(name), body)
        registry.update(accepted(datasource))
        return JSONResponse(f"Updated DataSource with name {name}")

    @router.get(BASE)
    def list_all() -> JSONResponse:
        return JSONResponse([registry.with_engine(d).to_reply() for d in registry.all()])

    @router.get(BASE + "/{name}")
    def get_one(name: str) -> JSONResponse:
        return JSONResponse(registry.with_engine(registry.describe(name)).to_reply())

    @router.delete(BASE + "/{name}", status_code=204, dependencies=writes)
    def delete(name: str) -> Response:
        registry.delete(name)
        return Response(status_code=204)

    return router
