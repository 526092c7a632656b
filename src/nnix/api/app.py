"""The HTTP app served by an experiment's manager: NNI-compatible REST (``/api/v1/nni``, in
:mod:`nnix.api.compat`), the native API with live events (``/api/nnix/v1``, :mod:`nnix.api.native`)
and the web UI (``/``, :mod:`nnix.api.static`).

Nothing a client sends can crash the manager: every handler is guarded (refusals become 4xx
``{"error": ...}``, bugs a logged 500), request bodies are size-limited and validated before any
manager method is called, and handlers run on the manager's loop without blocking it for long.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route

from nnix.api import compat, logs, native, static, tensorboard
from nnix.api.auth import TokenMiddleware
from nnix.api.common import ApiContext, ApiError, Handler, error
from nnix.api.compat import PREFIX, UPDATES, metric_record, profile, trial_info
from nnix.api.security import HostPolicy, SecurityMiddleware, configured_hosts, new_secret
from nnix.api.sse import EventHub
from nnix.core.manager import ExperimentManager
from nnix.errors import NnixError
from nnix.query import QueryError, TrialViews

__all__ = ["PREFIX", "UPDATES", "ApiApp", "create_app", "metric_record", "profile", "trial_info"]

log = logging.getLogger("nnix.api")


def guard(handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as e:
            return error(e.status, e.message)
        except QueryError as e:  # (a list's query the read side refuses)
            return error(400, e.message)
        except ClientDisconnect:  # not a failure of the manager: one line, no traceback
            log.info("%s %s: the client hung up before sending the whole body", request.method, request.url.path)
            return error(400, "the client hung up")
        except NnixError as e:
            return error(400, e.message)
        except Exception as e:  # a bug in a handler: answer 500, keep the manager running
            log.exception("%s %s failed", request.method, request.url.path)
            return error(500, f"internal error: {type(e).__name__}: {e}")

    return guarded


def _guarded(routes: list[Route]) -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for r in routes:
        methods = sorted((r.methods or {"GET"}) - {"HEAD"})
        out.append(Route(r.path, guard(r.endpoint), methods=methods))
    return out


def _allowed_methods(request: Request) -> str:
    """Every method some route of the app answers on this path (routes are one per method)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE and isinstance(route, Route):
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    if request.url.path.startswith("/api/"):
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        response = error(exc.status_code, message.get(exc.status_code, str(exc.detail)))
        response.headers.update(headers)
        return response
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=headers)


class ApiApp:
    """The outermost ASGI layer: whatever escapes the app is logged and answered with 500.
    ``ctx`` gives tests and the server the shared context (manager, live-event hub)."""

    def __init__(self, app: Any, ctx: ApiContext) -> None:
        self.app = app
        self.ctx = ctx

    async def close(self) -> None:
        """What the app started beside the manager (TensorBoard processes) ends with it."""
        boards = self.ctx.extra.get("tensorboards")
        if boards is not None:
            await boards.close()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("request %s failed", scope.get("path"))
            if scope["type"] == "http" and not started:
                body = b'{"error":"internal error"}'
                await send({"type": "http.response.start", "status": 500,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})


async def _warm(manager: ExperimentManager, views: TrialViews) -> None:
    """The trial summaries, built once a resumed manager's tuner history is read (trials start first)."""
    await manager.history_read()
    await views.warm()


def create_app(
    manager: ExperimentManager, *, read_only: bool = False, token: str | None = None, bind_host: str = "127.0.0.1",
) -> ApiApp:
    """The ASGI app for ``manager``. ``token``: require it on every API call (non-loopback binds).
    ``bind_host``: where the server listens, which decides the ``Host`` names it answers
    (:mod:`nnix.api.security`, with the config's ``allowedHosts``)."""
    views = TrialViews(manager)
    hub = EventHub(manager, views, read_only)
    ctx = ApiContext(manager=manager, read_only=read_only, views=views, hub=hub, token=token)
    secret = new_secret()  # the UI's anti-CSRF token: written into its page, required on its changes
    routes = _guarded(compat.routes(ctx) + tensorboard.routes(ctx, PREFIX) + native.routes(ctx) + logs.routes(ctx)
                      + static.routes(csrf=secret))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.ctx = ctx
    inner: Any = TokenMiddleware(app, token) if token else app
    hosts = HostPolicy(bind_host, configured_hosts(manager.settings.allowed_hosts))
    inner = SecurityMiddleware(inner, secret=secret, hosts=hosts)
    try:  # served from the manager's loop: build the trial summaries before the first page asks
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        ctx.extra["warm"] = loop.create_task(_warm(manager, views))
    return ApiApp(inner, ctx)
