"""The console's JSON endpoints, under ``/console/api`` (``docs/console.md``).

Each takes the caller the API's authentication found (``current_principal``) and goes through the
service's use cases and the API's authorization checks: a query is submitted, read, paged and
cancelled by :class:`~async_query.service.AsyncQueryService` (its submitter or an admin); the
datasources offered are those :func:`check_datasource_access` lets the caller query; the catalog
comes from the catalog read model and the history from the statement repository; the operators'
page is for admins only. Every request is audited by the security middleware, with the action,
datasource and query id these endpoints name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from async_query.catalog.statements import Describe, ShowSchemas, ShowTables
from async_query.console.downloads import as_csv, as_json, first_page
from async_query.console.figures import figures
from async_query.console.guard import CONSOLE, cookie_header
from async_query.console.history import History
from async_query.console.tokens import LOGIN_COOKIE, ConsoleTokens
from async_query.datasources import Datasource
from async_query.replies import CreateAsyncQueryRequest, Page, pool_job_view, session_view
from async_query.security.authz import check_datasource_access, require_admin
from async_query.security.errors import ForbiddenError
from async_query.security.middleware import AuditEntry, audit_note, current_principal
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from query_core.errors import AsyncQueryError, InvalidRequestError
from query_core.states import SessionState

if TYPE_CHECKING:
    from async_query.runtime import Plugin

API = CONSOLE + "/api"
#: Rows of one page of the results table, unless the page asks for another size.
PAGE_ROWS = 100
LIVE_SESSIONS = [SessionState.NOT_STARTED, SessionState.RUNNING]


class CatalogUnavailableError(AsyncQueryError):
    http_status = 503
    error_type = "CatalogUnavailable"
    reason_phrase = "Service Unavailable"


def audit_action(request: Request, action: str) -> None:
    """Name this request's action in its audit line."""
    entry = request.scope.get("state", {}).get("audit")
    if isinstance(entry, AuditEntry):
        entry.action = action


def console_router(plugin: Plugin, tokens: ConsoleTokens, auth_mode: str) -> APIRouter:
    router = APIRouter(prefix=API)
    service, settings = plugin.service, plugin.settings
    history = History(plugin.store, plugin.datasources)
    caller = Depends(current_principal)
    page_limit = settings.result_chunk_rows

    def queryable(principal: Principal, name: str) -> Datasource:
        datasource = plugin.datasources.get(name)
        check_datasource_access(principal, datasource)
        return datasource

    @router.get("/me")
    def me(request: Request, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "console.me")
        return JSONResponse(_me(principal, auth_mode))

    @router.post("/session")
    def login(request: Request, principal: Principal = caller) -> JSONResponse:
        """The login form's request: its ``Authorization`` was checked on the way in; it is
        sealed into the login cookie (``basic`` and ``cluster``; nothing to keep under ``none``)."""
        audit_action(request, "console.login")
        reply = JSONResponse(_me(principal, auth_mode))
        authorization = request.headers.get("authorization")
        if auth_mode != "none" and authorization:
            sealed = tokens.seal_login(authorization.encode("latin-1"))
            reply.headers.append("set-cookie", cookie_header(LOGIN_COOKIE, sealed, request.scope, tokens.session_s).decode())
        return reply

    @router.delete("/session")
    def logout(request: Request, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "console.logout")
        reply = JSONResponse({"user": None})
        reply.headers.append("set-cookie", cookie_header(LOGIN_COOKIE, "", request.scope, 0).decode())
        return reply

    @router.get("/datasources")
    def datasources(request: Request, principal: Principal = caller) -> JSONResponse:
        """Only the datasources the caller may query (and that are enabled)."""
        audit_action(request, "datasource.list")
        listed = [ds for ds in plugin.datasources.all() if ds.status == "ACTIVE" and _may_query(principal, ds)]
        return JSONResponse({"datasources": [{"name": ds.name} for ds in listed]})

    @router.post("/queries", status_code=201)
    def submit(body: CreateAsyncQueryRequest, request: Request, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "query.submit")
        audit_note(request, datasource=body.datasource)
        if len(body.query) > settings.max_query_chars:
            raise InvalidRequestError(f"the query is longer than {settings.max_query_chars} characters")
        submitted = service.submit(SubmitRequest(body.datasource, body.lang, body.query, body.session_id, principal))
        audit_note(request, query_id=submitted.query_id)
        return JSONResponse({"queryId": submitted.query_id, "sessionId": submitted.session_id}, status_code=201)

    @router.get("/queries/{query_id}")
    async def read(request: Request, query_id: str, offset: int = 0, size: int = PAGE_ROWS, principal: Principal = caller) -> Response:
        """The query's state; once it succeeded, one page of its rows (never the whole result)."""
        audit_action(request, "query.get")
        audit_note(request, query_id=query_id)
        if offset < 0 or not 1 <= size <= page_limit:
            raise InvalidRequestError(f"offset must be 0 or more and size between 1 and {page_limit}")
        body = await run_in_threadpool(service.get_page, query_id, Page(offset, size), principal)
        return Response(body, media_type="application/json")

    @router.delete("/queries/{query_id}", status_code=204)
    def cancel(request: Request, query_id: str, principal: Principal = caller) -> Response:
        audit_action(request, "query.cancel")
        audit_note(request, query_id=query_id)
        service.cancel(query_id, principal)
        return Response(status_code=204)

    @router.get("/queries/{query_id}/download")
    async def download(
        request: Request, query_id: str, format: Literal["csv", "json"] = "csv", principal: Principal = caller
    ) -> StreamingResponse:
        """The whole stored result, page by page (:mod:`.downloads`)."""
        audit_action(request, "query.download")
        audit_note(request, query_id=query_id)

        def read_page(offset: int, size: int) -> bytes:
            return service.get_page(query_id, Page(offset, size), principal)

        first = await run_in_threadpool(first_page, read_page, page_limit)
        write = as_csv if format == "csv" else as_json
        media = "text/csv; charset=utf-8" if format == "csv" else "application/json"
        headers = {"content-disposition": f'attachment; filename="{_file_name(query_id)}.{format}"'}
        return StreamingResponse(write(read_page, first, page_limit), media_type=media, headers=headers)

    @router.get("/history")
    def past(request: Request, q: str = "", size: int = 50, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "history.list")
        if not 1 <= size <= 200:
            raise InvalidRequestError("size must be between 1 and 200")
        return JSONResponse({"queries": history.entries(principal, q, size), "everyone": principal.is_admin})

    @router.get("/catalog/{datasource}/schemas")
    def schemas(request: Request, datasource: str, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "catalog.browse")
        audit_note(request, datasource=datasource)
        answer = _catalog_answer(plugin, queryable(principal, datasource), ShowSchemas())
        return JSONResponse({"schemas": [row[0] for row in answer]})

    @router.get("/catalog/{datasource}/schemas/{database}/tables")
    def tables(request: Request, datasource: str, database: str, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "catalog.browse")
        audit_note(request, datasource=datasource)
        answer = _catalog_answer(plugin, queryable(principal, datasource), ShowTables(database.lower(), False))
        return JSONResponse({"tables": [row[1] for row in answer]})

    @router.get("/catalog/{datasource}/schemas/{database}/tables/{table}/columns")
    def columns(request: Request, datasource: str, database: str, table: str, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "catalog.browse")
        audit_note(request, datasource=datasource)
        answer = _catalog_answer(plugin, queryable(principal, datasource), Describe(database.lower(), table.lower()))
        return JSONResponse({"columns": _columns(answer)})

    @router.get("/catalog/{datasource}/indexes")
    def indexes(request: Request, datasource: str, principal: Principal = caller) -> JSONResponse:
        audit_action(request, "catalog.indexes")
        audit_note(request, datasource=datasource)
        chosen = queryable(principal, datasource)
        found = plugin.catalog.flint_indexes(chosen) if plugin.catalog is not None else None
        if found is None:
            raise CatalogUnavailableError(
                f"the Flint indexes of {datasource} are kept where only its jobs see them; run SHOW FLINT INDEXES IN {datasource}"
            )
        return JSONResponse({"indexes": found})

    @router.get("/ops")
    def operators(request: Request, principal: Principal = caller) -> JSONResponse:
        """Live sessions and jobs, the warm pools, health and the metrics' figures: admins only."""
        audit_action(request, "console.ops")
        require_admin(principal, "see the operators' page")
        report = plugin.health.report()
        return JSONResponse(
            {
                "sessions": [session_view(s) for s in service.sessions(None, LIVE_SESSIONS, 500, principal)],
                "poolJobs": [pool_job_view(p) for p in service.pool_jobs(500, principal)],
                "health": {"serving": report.serving, "checks": report.checks},
                "metrics": figures() if settings.metrics_enabled else [],
            }
        )

    return router


def _me(principal: Principal, auth_mode: str) -> dict[str, Any]:
    return {"user": principal.name, "admin": principal.is_admin, "auth": auth_mode}


def _may_query(principal: Principal, datasource: Datasource) -> bool:
    try:
        check_datasource_access(principal, datasource)
    except ForbiddenError:
        return False
    return True


def _catalog_answer(plugin: Plugin, datasource: Datasource, browse: Any) -> list[tuple[Any, ...]]:
    answer = plugin.catalog.answer(datasource, browse) if plugin.catalog is not None else None
    if answer is None:
        raise CatalogUnavailableError(
            f"the catalog of {datasource.name} cannot be read from here now; browse it with SHOW statements in the editor"
        )
    return answer.rows


def _columns(rows: list[tuple[Any, ...]]) -> list[dict[str, str]]:
    """DESC's rows up to its first section line (``# Partition Information``...): the columns."""
    found = []
    for name, data_type, *rest in rows:
        if not name or str(name).startswith("#"):
            break
        found.append({"name": str(name), "type": str(data_type), "comment": str(rest[0] or "") if rest else ""})
    return found


def _file_name(query_id: str) -> str:
    return "".join(c for c in query_id if c.isalnum() or c in "-_") or "result"
