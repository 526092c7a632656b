"""What keeps web pages out of the manager's API (the README's "Security model").

One ASGI layer, outside everything else (the token check included), does three things:

- **Host check (DNS rebinding).** A page at ``http://evil.test:8080`` whose name an attacker
  re-points to 127.0.0.1 is same-origin with itself, so the browser lets it read what the manager
  answers; only the ``Host`` header tells the manager the request was meant for another name. On a
  loopback bind the manager answers only ``localhost`` and loopback addresses (any port); on other
  binds also any IP address (an attacker cannot re-point an address), this machine's name, the bind
  name and the names listed in the config's ``allowedHosts`` or ``NNIX_ALLOWED_HOSTS`` (``*`` turns
  the check off, e.g. behind a proxy that rewrites ``Host``). Anything else gets 403.
- **CSRF.** Every request that may change state (any method but GET/HEAD/OPTIONS) with a body must
  say ``Content-Type: application/json`` (a foreign page can only send that after a CORS preflight,
  which the manager never grants). A request from a browser (it carries ``Origin`` or
  ``Sec-Fetch-*``) must moreover be same-origin (``Sec-Fetch-Site: same-origin``, ``Origin`` equal to
  the ``Host``) and carry the ``X-Nnix-Csrf`` header with this server's secret, which the server
  writes into the UI's page (a foreign page can read neither the page nor set the header without a
  preflight). Non-browser clients (the nnix CLI, the Python API, curl, NNI-style REST clients) send
  none of the browser headers and are unaffected.
- **Headers on every response:** no framing (``X-Frame-Options: DENY``, CSP ``frame-ancestors
  'none'``), a CSP that lets the UI load only its own scripts and talk only to its own server,
  ``nosniff``, ``Referrer-Policy: no-referrer`` (the UI's link may carry a token),
  ``Cross-Origin-Resource-Policy: same-origin``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
from collections.abc import Iterable
from typing import Any

from nnix.api.auth import HttpMiddleware, is_loopback, response_headers
from nnix.config.fields import check_host_name, ip_address_of

Scope = dict[str, Any]

CSRF_HEADER = "x-nnix-csrf"
ALLOWED_HOSTS_ENV = "NNIX_ALLOWED_HOSTS"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BROWSER_HEADERS = (b"origin", b"sec-fetch-site", b"sec-fetch-mode", b"sec-fetch-dest")

UI_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
          "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
DATA_CSP = "default-src 'none'; frame-ancestors 'none'; sandbox"
COMMON_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def split_host(value: str) -> str | None:
    """The host of a ``Host`` header value (or an ``Origin``'s authority), lower case, without a trailing dot; None
    when the value is not ``host[:port]`` exactly: a host name (letters, digits, ``-``, ``_``, dot-separated
    labels), an IPv4 address or an IPv6 address in brackets, then nothing or ``:`` and the port's digits
    (``127.0.0.1:18301@evil.com``, ``127.0.0.1:abc`` and a bare IPv6 address are not)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = (value[1:end], value[end + 1:]) if end > 0 else ("", "")
        if not isinstance(ip_address_of(host), ipaddress.IPv6Address):
            return None
    else:
        host, colon, port = value.partition(":")
        rest = colon + port
        host = host[:-1] if host.endswith(".") else host
        labels = host.split(".")
        if not host or len(host) > 253 or not all(
                0 < len(label) <= 63 and label.isascii() and label.replace("-", "").replace("_", "").isalnum()
                for label in labels):
            return None
    if rest and not (rest[0] == ":" and 1 < len(rest) <= 6 and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    return host


def configured_hosts(config_hosts: Iterable[str] | None) -> list[str]:
    """The extra host names: the config's ``allowedHosts`` and ``NNIX_ALLOWED_HOSTS`` (comma-separated)."""
    names = list(config_hosts or [])
    names += [n for n in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if n.strip()]
    out: list[str] = []
    for n in names:
        try:
            out.append(check_host_name(n))
        except ValueError:
            continue  # the config's entries are checked at load; a bad entry in the env var allows nothing
    return out


class HostPolicy:
    """Which ``Host`` values a server bound to ``bind_host`` answers."""

    def __init__(self, bind_host: str = "127.0.0.1", extra: Iterable[str] = ()) -> None:
        self.loopback = is_loopback(bind_host)
        self.any = "*" in extra
        names = {"localhost", *extra}
        if not self.loopback:
            names.add(bind_host.strip().lower().strip("[]").rstrip("."))  # (a name or address, no port)
            host = socket.gethostname().lower()
            names |= {host, host.split(".")[0]}
        self.names = frozenset(names)

    def allows(self, value: str | None) -> bool:
        if value is None or self.any:
            return True  # no Host header: not a browser (browsers always send one)
        name = split_host(value)
        if name is None:
            return False  # not host[:port]: nothing a browser sends for a page it loaded
        if name in self.names:
            return True
        ip = ip_address_of(name)
        if ip is None:
            return False
        return ip.is_loopback or not self.loopback  # an address cannot be re-pointed by an attacker's DNS


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() != "0"
    return _header(scope, b"transfer-encoding") is not None


def is_json_type(ctype: str | None) -> bool:
    media = (ctype or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


ONLY_UI = "only the nnix web UI may change an experiment"


def csrf_problem(scope: Scope, secret: str) -> tuple[int, str] | None:
    """Why a state-changing request must be refused (status, message), or None."""
    if _has_body(scope) and not is_json_type(_header(scope, b"content-type")):
        ctype = _header(scope, b"content-type") or "none"
        return 415, f"the body must be JSON (Content-Type: application/json), not {ctype}"
    if not any(_header(scope, h) is not None for h in BROWSER_HEADERS):
        return None  # not a browser: a page cannot make a browser send a request without these
    site = _header(scope, b"sec-fetch-site")
    if site is not None and site != "same-origin":
        return 403, f"cross-site request refused (Sec-Fetch-Site: {site}): {ONLY_UI}"
    origin = _header(scope, b"origin")
    host = _header(scope, b"host")
    if origin is not None:
        scheme, _, authority = origin.partition("://")
        if scheme not in ("http", "https") or host is None or authority.lower() != host.strip().lower():
            return 403, f"cross-origin request refused (Origin: {origin}): {ONLY_UI}"
    sent = _header(scope, CSRF_HEADER.encode())
    if sent is None or not hmac.compare_digest(sent.encode(), secret.encode()):
        return 403, "the anti-CSRF token (X-Nnix-Csrf) is missing or stale: reload the web UI"
    return None


class SecurityMiddleware(HttpMiddleware):
    """ASGI layer: Host check, CSRF check, security headers (see the module's docstring)."""

    def __init__(self, app: Any, *, secret: str, hosts: HostPolicy) -> None:
        super().__init__(app)
        self.secret = secret
        self.hosts = hosts

    async def http(self, scope: Scope, receive: Any, send: Any) -> None:
        host = _header(scope, b"host")
        if not self.hosts.allows(host):
            hint = ("this manager is bound to a loopback address and answers only localhost, 127.0.0.1 and [::1]"
                    if self.hosts.loopback else
                    f"add the name to `allowedHosts` in the experiment's config or to {ALLOWED_HOSTS_ENV}")
            await _refuse(send, 403, f"Host {host!r} is not allowed (DNS rebinding protection): {hint}", "host")
            return
        if scope.get("method", "GET") not in SAFE_METHODS:
            problem = csrf_problem(scope, self.secret)
            if problem is not None:
                await _refuse(send, problem[0], problem[1], "csrf" if problem[0] == 403 else "content-type")
                return
        await self.app(scope, receive, response_headers(send, add_headers))


def add_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    present = {k.lower() for k, _ in headers}
    ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    csp = UI_CSP if ctype.startswith(b"text/html") else DATA_CSP
    extra = [*COMMON_HEADERS, (b"content-security-policy", csp.encode())]
    return headers + [(k, v) for k, v in extra if k not in present]


async def _refuse(send: Any, status: int, message: str, reason: str) -> None:
    body = json.dumps({"error": message, "reason": reason}).encode()
    headers = add_headers([(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
