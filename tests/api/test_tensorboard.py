"""NNI's ``/tensorboard`` routes: start on trials' output directories (``tensorboard/`` inside when the trial
wrote one), list, get, restart, stop one or all, a clear error without TensorBoard, bad bodies refused, and
every process stopped with the app. A fake ``tensorboard`` on PATH stands in for the real one."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

P = "/api/v1/nni"
FAKE = """#!{python}
import http.server, json, os, sys
args = sys.argv[1:]
open(os.path.join({out!r}, 'args-%d.json' % os.getpid()), 'w').write(json.dumps(args))
if os.environ.get('FAKE_TB_FAIL'):
    print('no module named tensorflow, or some such', file=sys.stderr); sys.exit(3)
port = int(args[args.index('--port') + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'fake')
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
"""


@pytest.fixture
def fake_tb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "tensorboard"
    exe.write_text(FAKE.format(python=sys.executable, out=str(tmp_path)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return tmp_path


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_start_list_restart_stop(finished: Path, h: Any, fake_tb: Path) -> None:
    trials = finished / "environments" / "local-env" / "trials"
    (trials / "aaaaa" / "tensorboard").mkdir()
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as cl:
            r = await cl.post(f"{P}/tensorboard", json={"trials": "aaaaa,ccccc"})
            assert r.status_code == 200, r.text
            info = r.json()
            assert info["status"] == "RUNNING" and info["trialJobIdList"] == ["aaaaa", "ccccc"]
            assert info["trialLogDirectoryList"] == [str(trials / "aaaaa" / "tensorboard"), str(trials / "ccccc")]
            port = int(info["port"])
            assert _listening(port) and info["url"] == f"http://127.0.0.1:{port}/"
            args = json.loads(next(fake_tb.glob("args-*.json")).read_text())
            assert args[args.index("--host") + 1] == "127.0.0.1"
            assert args[args.index("--logdir_spec") + 1] == ",".join(
                f"{t}:{d}" for t, d in zip(info["trialJobIdList"], info["trialLogDirectoryList"], strict=True))
            listed = (await cl.get(f"{P}/tensorboard-tasks")).json()
            assert [t["id"] for t in listed] == [info["id"]]
            assert (await cl.get(f"{P}/tensorboard/{info['id']}")).json()["pid"] == info["pid"]
            restarted = (await cl.put(f"{P}/tensorboard/{info['id']}")).json()
            assert restarted["status"] == "RUNNING" and restarted["pid"] != info["pid"]
            one = await cl.post(f"{P}/tensorboard", json={"trials": ["aaaaa"]})
            assert one.json()["trialLogDirectoryList"] == [str(trials / "aaaaa" / "tensorboard")]
            stopped = (await cl.delete(f"{P}/tensorboard/{info['id']}")).json()
            assert stopped["status"] == "STOPPED" and not _listening(port)
            other = int(one.json()["port"])
            assert _listening(other)
            await app.close()  # the manager exits: every TensorBoard with it
            assert not _listening(other)
            assert all(t["status"] == "STOPPED" for t in (await cl.get(f"{P}/tensorboard-tasks")).json())

    h.run(go())


def test_refusals(finished: Path, h: Any, fake_tb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as cl:
            for body, status, text in (({}, 400, "trials"), ({"trials": ""}, 400, "comma-separated"),
                                       ({"trials": "zzzzz"}, 404, "no trial zzzzz"),
                                       ({"trials": "ddddd"}, 400, "has not started"),
                                       ({"trials": "aaaaa", "port": "x"}, 400, "port")):
                r = await cl.post(f"{P}/tensorboard", json=body)
                assert r.status_code == status and text in r.json()["error"], (body, r.text)
            assert (await cl.get(f"{P}/tensorboard/nope")).status_code == 404
            monkeypatch.setenv("FAKE_TB_FAIL", "1")
            r = await cl.post(f"{P}/tensorboard", json={"trials": "aaaaa"})
            assert r.status_code == 400 and "exited at start (code 3)" in r.json()["error"]
            assert "tensorflow" in r.json()["error"]
            monkeypatch.setenv("PATH", "/nonexistent")
            monkeypatch.setattr("nnix.api.tensorboard.importlib.util.find_spec", lambda name: None)
            r = await cl.post(f"{P}/tensorboard", json={"trials": "aaaaa"})
            assert r.status_code == 400 and "TensorBoard is not installed" in r.json()["error"]
            assert "nnix[tensorboard]" in r.json()["error"]

    h.run(go())
