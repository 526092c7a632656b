"""``GET /logs/<file>``: the experiment's log directory only, never through a link; NNI's names; tail and
download; the token on a non-loopback bind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def test_log_files_served_safely(finished: Path, h: Any, tmp_path: Path) -> None:
    log = finished / "log"
    (log / "manager.log").write_text("line 1\nline 2\nmanager pid 42\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret-hash")
    (log / "link.log").symlink_to(secret)
    os.link(secret, log / "hard.log")
    (finished / "outside.log").write_text("not a log of log/")
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as cl:
            r = await cl.get("/logs/manager.log")
            assert r.status_code == 200 and r.text.endswith("manager pid 42\n")
            assert r.headers["content-type"].startswith("text/plain")
            assert "content-disposition" not in r.headers
            assert (await cl.get("/logs/nnimanager.log")).text == r.text  # NNI's names
            assert (await cl.get("/logs/dispatcher.log")).text == r.text
            tail = await cl.get("/logs/manager.log?tail=15")
            assert tail.text == "manager pid 42\n"
            d = await cl.get("/logs/manager.log?download=1")
            assert d.headers["content-disposition"].startswith("attachment;")
            for name in ("link.log", "hard.log"):
                bad = await cl.get(f"/logs/{name}")
                assert bad.status_code == 403 and "secret-hash" not in bad.text, bad.text
            for url in ("/logs/..%2Foutside.log", "/logs/.hidden", "/logs/%2e%2e"):
                bad = await cl.get(url)
                assert bad.status_code in (400, 404) and "not a log" not in bad.text, (url, bad.text)
            assert (await cl.get("/logs/nothing.log")).status_code == 404

    h.run(go())


def test_logs_need_the_token_when_one_is_set(finished: Path, h: Any) -> None:
    (finished / "log" / "manager.log").write_text("private\n")
    _, app = h.viewer(finished, token="t0ken")

    async def go() -> None:
        async with h.client(app) as cl:
            r = await cl.get("/logs/manager.log")
            assert r.status_code == 401 and "private" not in r.text
            ok = await cl.get("/logs/manager.log", headers={"Authorization": "Bearer t0ken"})
            assert ok.status_code == 200 and ok.text == "private\n"

    h.run(go())
