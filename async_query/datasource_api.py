"""``/_plugins/_query/_datasources``: the reference's datasource API shape."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse, Response

from async_query.datasources import DatasourceRegistry, parse_datasource
from query_core.errors import InvalidRequestError

BASE = "/_plugins/_query/_datasources"


def datasource_router(registry: DatasourceRegistry) -> APIRouter:
    router = APIRouter()

    @router.post(BASE, status_code=201)
    def create(body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008 - FastAPI's idiom
        datasource = parse_datasource(body)
        registry.create(datasource)
        return JSONResponse(f"Created DataSource with name {datasource.name}", status_code=201)

    @router.put(BASE)
    def update(body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        datasource = parse_datasource(body)
        registry.update(datasource)
        return JSONResponse(f"Updated DataSource with name {datasource.name}")

    @router.patch(BASE)
    def patch(body: Any = Body(default=None)) -> JSONResponse:  # noqa: B008
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise InvalidRequestError("a patch names the datasource in 'name'")
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

    @router.delete(BASE + "/{name}", status_code=204)
    def delete(name: str) -> Response:
        registry.delete(name)
        return Response(status_code=204)

    return router
