"""``GET /logs/<file>`` (NNI's route for the manager's log files): the files of ``<experiment>/log/``.

Only plain names in that one directory are served (no ``/``, no leading dot), opened by the rules of
:mod:`nnix.api.files`: no link anywhere on the way is followed, only regular files with one hard link.
NNI's names map to nnix's: ``nnimanager.log`` and ``dispatcher.log`` are ``manager.log`` (nnix's tuner
runs in the manager and logs there). ``?tail=N`` sends only the last N bytes; ``?download=1`` asks the
browser to save the file. Like every data route it needs the experiment's token on a non-loopback bind.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnix.api.common import ApiContext, ApiError, int_param
from nnix.api.files import open_trial_file_async, serve_file

ALIASES = {"nnimanager.log": "manager.log", "dispatcher.log": "manager.log", "experiment.log": "manager.log"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def routes(ctx: ApiContext) -> list[Route]:
    async def log_file(request: Request) -> Response:
        asked = request.path_params["name"]
        name = ALIASES.get(asked, asked)
        if not _NAME.match(name):
            raise ApiError(400, f"bad log file name {asked!r}")
        exp_dir = ctx.manager.exp_dir
        file = await open_trial_file_async(exp_dir / "log", exp_dir, name, f"log file {name}")
        if file is None:
            raise ApiError(404, f"the experiment has no log file {name}")
        tail = int_param(request, "tail", 0, 0, 1 << 40)
        start = max(0, file.size - tail) if tail else 0
        headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        if request.query_params.get("download") not in (None, "", "0"):
            headers["Content-Disposition"] = f'attachment; filename="{ctx.manager.experiment_id}-{name}"'
        return serve_file(file, request.headers.get("range"), "text/plain; charset=utf-8", headers, start=start)

    return [Route("/logs/{name}", log_file, methods=["GET"])]
