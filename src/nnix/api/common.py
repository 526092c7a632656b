"""What every route module shares: the request context, JSON encoding, errors, body parsing."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnix.limits import MAX_REQUEST_BYTES

if TYPE_CHECKING:
    from nnix.api.sse import EventHub
    from nnix.api.views import TrialViews
    from nnix.core.manager import ExperimentManager

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


def _finite(obj: Any) -> Any:
    """A copy of ``obj`` with NaN/inf floats replaced by None (browsers' JSON.parse rejects them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    """Strict JSON (no NaN tokens): non-finite floats become null."""
    exact = dumps_exact(obj)
    return exact if exact is not None else json.dumps(_finite(obj), allow_nan=False, separators=(",", ":")).encode()


def dumps_exact(obj: Any) -> bytes | None:
    """:func:`dumps` of ``obj`` where it has no non-finite float (its JSON then decodes to what it was), else None."""
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        return None


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


def ms(ts: float | None) -> int | None:
    return None if ts is None else int(ts * 1000)
