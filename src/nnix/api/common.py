"""What every route module shares: the request context, JSON encoding, errors, body parsing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnix.limits import MAX_REQUEST_BYTES
from nnix.query import dumps as dumps
from nnix.query import dumps_exact as dumps_exact
from nnix.query import ms as ms

if TYPE_CHECKING:
    from nnix.api.sse import EventHub
    from nnix.core.manager import ExperimentManager
    from nnix.query import TrialViews

MAX_BODY = MAX_REQUEST_BYTES  # bytes: nothing legitimate sent to the API is bigger (the CLI sends no more)
READ_ONLY = "readonly mode: the experiment is only viewed"

Handler = Callable[[Request], Awaitable[Response]]


class RouteTable:
    """A module's routes, each declared on its handler (``@table.get("/trials")``): one
    :class:`~starlette.routing.Route` per method and path, under ``prefix``."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.routes: list[Route] = []

    def route(self, method: str, path: str) -> Callable[[Handler], Handler]:
        def add(handler: Handler) -> Handler:
            self.routes.append(Route(self.prefix + path, handler, methods=[method]))
            return handler

        return add

    def get(self, path: str) -> Callable[[Handler], Handler]:
        return self.route("GET", path)

    def post(self, path: str) -> Callable[[Handler], Handler]:
        return self.route("POST", path)

    def put(self, path: str) -> Callable[[Handler], Handler]:
        return self.route("PUT", path)

    def patch(self, path: str) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path)

    def delete(self, path: str) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path)


class ApiError(Exception):
    """A request the API refuses: becomes ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ApiContext:
    """One per app: the manager, the mode, and the caches the routes share."""

    manager: ExperimentManager
    read_only: bool
    views: TrialViews
    hub: EventHub
    token: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def require_writable(self) -> None:
        if self.read_only:
            raise ApiError(400, READ_ONLY)


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content  # already encoded
        return dumps(content)


def error(status: int, message: str) -> Response:
    return JSON({"error": message}, status_code=status)


async def read_json(request: Request) -> Any:
    """The request's JSON body, or ApiError(400/413/415)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # anything but JSON (no type, a form, plain text) is what a foreign web page can send without a
    # CORS preflight: refusing it keeps the API safe from cross-site requests (see nnix.api.security)
    if ctype != "application/json" and not (ctype.startswith("application/") and ctype.endswith("+json")):
        raise ApiError(415, f"the body must be JSON (Content-Type: application/json), not {ctype or 'none'}")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        raise ApiError(413, f"the body must be at most {MAX_BODY} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"the body must be at most {MAX_BODY} bytes")
    if not raw.strip():
        raise ApiError(400, "the body must be JSON, got nothing")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}") from e


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as e:
        raise ApiError(400, f"{name} must be an integer, got {raw!r}") from e
    if not lo <= value <= hi:
        raise ApiError(400, f"{name} must be between {lo} and {hi}, got {value}")
    return value
