"""Trial files served by the API: never through a link, regular files only, streamed, with ranges."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from nnix.api.files import CHUNK, parse_range
from nnix.testing.asgi import paused_get

P = "/api/v1/nni"
N = "/api/nnix/v1"
SECRET = "root:$6$secret-hash:19000:0:99999:7:::\n"


def trials_dir(exp_dir: Path) -> Path:
    return exp_dir / "environments" / "local-env" / "trials"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def test_links_in_a_trial_directory_are_never_followed(finished: Path, secret: Path, h: Any) -> None:
    a = trials_dir(finished) / "aaaaa"
    (a / "trial.log").unlink()
    (a / "trial.log").symlink_to(secret)  # out of the experiment
    (a / "model.onnx").symlink_to(secret)
    (a / "trial.stdout").rename(a / "real.stdout")
    (a / "trial.stdout").symlink_to(a / "real.stdout")  # inside the trial's directory: refused too
    (a / "trial.stderr").unlink()
    os.link(secret, a / "trial.stderr")  # a hard link to a file elsewhere
    b = trials_dir(finished) / "bbbbb"
    os.mkfifo(b / "trial.log")  # would block a reader forever
    (b / "model.onnx").mkdir()
    c = trials_dir(finished) / "ccccc"  # the trial's whole directory replaced by a link
    shutil.copytree(c, secret.parent / "ccccc")
    shutil.rmtree(c)
    c.symlink_to(secret.parent / "ccccc")
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as cl:
            for url in (f"{P}/trial-file/aaaaa/trial.log", f"{P}/trial-file/aaaaa/model.onnx",
                        f"{P}/trial-file/aaaaa/stdout", f"{P}/trial-file/aaaaa/stderr",
                        f"{P}/trial-file/bbbbb/trial.log", f"{P}/trial-file/bbbbb/model.onnx",
                        f"{P}/trial-file/ccccc/stdout",
                        f"{N}/trials/aaaaa/logs/trial.log", f"{N}/trials/aaaaa/logs/stdout",
                        f"{N}/trials/aaaaa/logs/stderr", f"{N}/trials/bbbbb/logs/trial.log",
                        f"{N}/trials/ccccc/logs/stdout"):
                r = await asyncio.wait_for(cl.get(url), 30)
                assert r.status_code == 403, (url, r.status_code, r.text)
                assert "secret-hash" not in r.text and "0123456789" not in r.text
                assert "not served" in r.json()["error"]
            detail = (await cl.get(f"{N}/trials/aaaaa")).json()
            assert detail["logs"] == {"stdout": None, "stderr": None, "trial.log": None}
            # what is not a link is still served
            r = await cl.get(f"{P}/trial-file/bbbbb/stderr")
            assert r.status_code == 200 and r.text == "Traceback\nboom\n"

    h.run(go())


def test_ranges(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)
    data = bytes(range(256)) * 40
    (trials_dir(finished) / "aaaaa" / "model.onnx").write_bytes(data)

    async def go() -> None:
        async with h.client(app) as c:
            url = f"{P}/trial-file/aaaaa/model.onnx"
            r = await c.get(url)
            assert r.status_code == 200 and r.content == data and r.headers["accept-ranges"] == "bytes"
            assert r.headers["content-type"] == "application/octet-stream"
            r = await c.get(url, headers={"Range": "bytes=2-5"})
            assert r.status_code == 206 and r.content == data[2:6]
            assert r.headers["content-range"] == f"bytes 2-5/{len(data)}"
            r = await c.get(url, headers={"Range": "bytes=10000-"})
            assert r.status_code == 206 and r.content == data[10000:]
            r = await c.get(url, headers={"Range": "bytes=-7"})
            assert r.status_code == 206 and r.content == data[-7:]
            r = await c.get(url, headers={"Range": "bytes=5-99999999"})
            assert r.status_code == 206 and r.content == data[5:]
            r = await c.get(url, headers={"Range": f"bytes={len(data)}-"})
            assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(data)}"
            for ignored in ("bytes=0-1,4-5", "items=0-3", "bytes=9-2", "bytes=x-"):
                r = await c.get(url, headers={"Range": ignored})
                assert r.status_code == 200 and r.content == data, ignored
            r = await c.get(f"{P}/trial-file/aaaaa/stdout", headers={"Range": "bytes=6-9"})
            assert r.status_code == 206 and r.text == "from"
            r = await c.get(f"{N}/trials/ccccc/logs/stdout", params={"tail": 4})
            assert r.text == "789\n" and r.headers["x-nnix-skipped"] == "7"

    h.run(go())


def test_parse_range() -> None:
    assert parse_range(None, 10) is None
    assert parse_range("bytes=0-0", 10) == (0, 1)
    assert parse_range("bytes=-100", 10) == (0, 10)
    assert parse_range("bytes=-0", 10) == "unsatisfiable"
    assert parse_range("bytes=", 10) is None
    assert parse_range("bytes=-", 10) is None


def test_a_big_file_is_streamed_in_bounded_chunks_while_others_are_served(finished: Path, h: Any) -> None:
    """A slow client reading a big file holds at most a chunk in the response; the manager serves other
    requests meanwhile; the bytes are exact."""
    _, app = h.viewer(finished)
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = trials_dir(finished) / "aaaaa" / "trial.stdout"
    path.write_bytes(data)

    async def go() -> None:
        resp = paused_get(app, f"{P}/trial-file/aaaaa/stdout")
        await asyncio.wait_for(resp.first.wait(), 60)
        assert resp.status == 200 and int(resp.headers["content-length"]) == len(data)
        assert not resp.done.is_set(), "the whole file was sent at once"
        assert 0 < len(resp.body) <= CHUNK
        async with h.client(app) as c:  # the manager answers while the big response waits for its reader
            r = await asyncio.wait_for(c.get(f"{P}/version"), 60)
            assert r.status_code == 200
        assert not resp.done.is_set()
        resp.resume()
        await asyncio.wait_for(resp.done.wait(), 120)
        assert resp.body == data
        assert max(len(p) for p in resp.pieces) <= CHUNK

    h.run(go())
