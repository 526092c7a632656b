"""The web UI's static files (``nnix/web``, shipped in the package; no build step, no Node.js)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from nnix.api.common import ApiError

WEB = Path(__file__).resolve().parent.parent / "web"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
# NNI's web UI paths, mapped to this UI's pages
NNI_PAGES = {"/oview": "overview", "/detail": "trials", "/experiment": "experiments"}


class Assets:
    def __init__(self, root: Path = WEB) -> None:
        self.root = root
        self._cache: dict[str, bytes] = {}

    def get(self, name: str) -> tuple[bytes, str]:
        suffix = Path(name).suffix
        if suffix not in TYPES or "/" in name or name.startswith("."):
            raise ApiError(404, f"no file {name}")
        data = self._cache.get(name)
        if data is None:
            path = self.root / name
            if not path.is_file():
                raise ApiError(404, f"no file {name}")
            data = path.read_bytes()
            self._cache[name] = data
        return data, TYPES[suffix]


CSRF_SLOT = b'<meta name="nnix-csrf" content="">'


def routes(assets: Assets | None = None, csrf: str = "") -> list[Route]:
    """``csrf``: the server's anti-CSRF secret, written into the page (:mod:`nnix.api.security`)."""
    files = assets or Assets()

    def _send(name: str) -> Response:
        data, ctype = files.get(name)
        return Response(data, media_type=ctype, headers={"Cache-Control": "no-cache",
                                                         "X-Content-Type-Options": "nosniff"})

    async def index(_: Request) -> Response:
        data, ctype = files.get("index.html")
        page = data.replace(CSRF_SLOT, b'<meta name="nnix-csrf" content="%s">' % csrf.encode())
        return Response(page, media_type=ctype, headers={"Cache-Control": "no-store"})

    async def asset(request: Request) -> Response:
        return _send(request.path_params["name"])

    async def nni_page(request: Request) -> Response:
        page = NNI_PAGES.get(request.url.path.rstrip("/"), "overview")
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"/{query}#/{page}", status_code=302)

    async def favicon(_: Request) -> Response:
        return _send("favicon.svg")

    return [
        Route("/", index, methods=["GET"]),
        Route("/static/{name}", asset, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        *[Route(p, nni_page, methods=["GET"]) for p in NNI_PAGES],
    ]
