"""Bearer tokens for non-loopback binds (DESIGN.md property 7).

A manager bound to a loopback address needs no token. Bound anywhere else it requires the
experiment's token on every API call: ``Authorization: Bearer <token>``, a ``nnix_token`` cookie
(set when the UI is opened through its ``/?token=...`` link) or a ``?token=`` query parameter
(how the UI's EventSource authenticates). The token is generated once per experiment, kept in
``<experiment dir>/api.token`` with mode 0600 for the CLI's own calls, and printed once by the CLI.

Kept light (stdlib only): the CLI imports it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

TOKEN_FILE = "api.token"
COOKIE = "nnix_token"

Scope = dict[str, Any]


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect_host(host: str | None) -> str:
    """Where a local client reaches a manager bound to ``host`` (a wildcard bind means this machine)."""
    if not host or host in ("0.0.0.0", "::", "*"):
        return "127.0.0.1"
    return host


def read_token(exp_dir: Path) -> str | None:
    try:
        text = (exp_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return None
    return text or None


def ensure_token(exp_dir: Path) -> str:
    """The experiment's token, created (mode 0600) on first use."""
    existing = read_token(exp_dir)
    if existing:
        return existing
    token = secrets.token_urlsafe(32)
    path = exp_dir / TOKEN_FILE
    exp_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return read_token(exp_dir) or token


def token_for_bind(exp_dir: Path, host: str) -> str | None:
    """The token a manager bound to ``host`` requires (None on loopback)."""
    return None if is_loopback(host) else ensure_token(exp_dir)


def _query_token(scope: Scope) -> list[str]:
    qs = scope.get("query_string", b"")
    return parse_qs(qs.decode("latin-1")).get("token", []) if qs else []


def _presented(scope: Scope) -> list[str]:
    found: list[str] = []
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text = value.decode("latin-1").strip()
            if text[:7].lower() == "bearer ":
                found.append(text[7:].strip())
        elif name == b"cookie":
            from http.cookies import SimpleCookie  # (not imported by a manager's start: the CLI's `create` needs none)

            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(value.decode("latin-1"))
            except Exception:  # a malformed cookie header is simply no token
                continue
            if COOKIE in cookie:
                found.append(cookie[COOKIE].value)
    return found + _query_token(scope)


def _matches(presented: list[str], token: str) -> bool:
    return any(hmac.compare_digest(p.encode(), token.encode()) for p in presented)


def token_ok(scope: Scope, token: str) -> bool:
    return _matches(_presented(scope), token)


def _public(path: str) -> bool:
    """Static UI files carry no data: they load without a token (the UI then asks for one). The manager's
    log files (``/logs/``) are data."""
    return not path.startswith(("/api/", "/logs/"))


Headers = list[tuple[bytes, bytes]]


class HttpMiddleware:
    """An ASGI middleware over ``app`` that handles HTTP requests (:meth:`http`); other scopes pass through."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Any, send: Any) -> None:
        raise NotImplementedError


def response_headers(send: Any, change: Callable[[Headers], Headers]) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """``send`` with the response's headers passed through ``change`` (on ``http.response.start``)."""

    async def changed(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": change(list(message.get("headers", [])))}
        await send(message)

    return changed


class TokenMiddleware(HttpMiddleware):
    """ASGI middleware: 401 for API calls without the token; sets the cookie from ``?token=``."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def http(self, scope: Scope, receive: Any, send: Any) -> None:
        ok = token_ok(scope, self.token)
        path = scope.get("path", "")
        if not ok and not _public(path):
            body = json.dumps({"error": "a bearer token is required: open the link `nnix` printed, or send "
                                        "'Authorization: Bearer <token>' (the token is in the experiment's "
                                        f"directory, file {TOKEN_FILE})"}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="nnix"')]})
            await send({"type": "http.response.body", "body": body})
            return
        if ok and _public(path) and _matches(_query_token(scope), self.token):
            cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()
            await self.app(scope, receive, response_headers(send, lambda headers: [*headers, (b"set-cookie", cookie)]))
            return
        await self.app(scope, receive, send)
