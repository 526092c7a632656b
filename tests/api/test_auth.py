"""Bearer tokens: required on non-loopback binds (401 without), accepted as header, cookie or query;
end to end through the CLI with a manager bound to 0.0.0.0."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nnix.api.auth import TOKEN_FILE, connect_host, ensure_token, is_loopback, read_token, token_for_bind
from nnix.core.status import TrialStatus
from nnix.home import Registry, read_state


def test_loopback_and_token_file(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.org")
    assert connect_host("0.0.0.0") == "127.0.0.1" and connect_host("10.0.0.5") == "10.0.0.5"
    assert token_for_bind(tmp_path, "127.0.0.1") is None and read_token(tmp_path) is None
    token = token_for_bind(tmp_path, "0.0.0.0")
    assert token and len(token) >= 40
    assert stat.S_IMODE((tmp_path / TOKEN_FILE).stat().st_mode) == 0o600
    assert ensure_token(tmp_path) == token == read_token(tmp_path)  # one per experiment, kept for resume


def test_token_is_required_on_every_api_call(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished, token="s3cret-token")

    async def go() -> None:
        async with h.client(app) as c:
            for url in ("/api/v1/nni/check-status", "/api/nnix/v1/trials", "/api/nnix/v1/events",
                        "/api/nnix/v1/openapi.json", "/api/nope"):
                r = await c.get(url)
                assert r.status_code == 401 and "token" in r.json()["error"], url
                assert r.headers["www-authenticate"].startswith("Bearer")
            for headers in ({"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"},
                            {"Cookie": "nnix_token=wrong"}, {"Cookie": "garbage;;=="}):
                assert (await c.get("/api/v1/nni/check-status", headers=headers)).status_code == 401
            assert (await c.get("/api/v1/nni/check-status?token=wrong")).status_code == 401
            ok = await c.get("/api/v1/nni/check-status", headers={"Authorization": "Bearer s3cret-token"})
            assert ok.status_code == 200 and ok.json()["status"] == "VIEWED"
            assert (await c.get("/api/nnix/v1/trials?token=s3cret-token")).status_code == 200
            cookie_ok = await c.get("/api/nnix/v1/trials", headers={"Cookie": "nnix_token=s3cret-token"})
            assert cookie_ok.status_code == 200
            # the UI's files carry no data: they load without the token, then ask for it
            page = await c.get("/")
            assert page.status_code == 200 and "set-cookie" not in page.headers
            page = await c.get("/?token=s3cret-token")
            cookie = page.headers["set-cookie"]
            assert "nnix_token=s3cret-token" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            c.cookies.clear()
            assert "set-cookie" not in (await c.get("/?token=wrong")).headers

    h.run(go())


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _own_address() -> str | None:
    """A non-loopback address of this machine, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            addr = str(s.getsockname()[0])
    except OSError:
        return None
    return None if is_loopback(addr) or addr == "0.0.0.0" else addr


def test_cli_non_loopback_bind_needs_the_printed_token(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text("import nni, time\nnni.get_next_parameter()\ntime.sleep(60)\n")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": f"{sys.executable} trial.py",
           "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "maxTrialNumber": 3, "tuner": {"name": "Random"},
           "trainingService": {"platform": "local"}}
    (tmp_path / "config.yml").write_text(json.dumps(cfg))
    nnix = [sys.executable, "-m", "nnix.cli.main"]
    r = subprocess.run([*nnix, "create", "--config", str(tmp_path / "config.yml"), "--port", "0", "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    try:
        exp_dir = Path(Registry().get(exp_id).dir)
        token = read_token(exp_dir)
        assert token and f"?token={token}" in r.stdout and r.stdout.count(token) == 1  # shown once, in the link
        assert stat.S_IMODE((exp_dir / TOKEN_FILE).stat().st_mode) == 0o600
        st = read_state(exp_dir, summary=True)
        assert st.manager_host == "0.0.0.0"
        hosts = ["127.0.0.1"] + [a for a in [_own_address()] if a]
        for host in hosts:
            url = f"http://{host}:{st.manager_port}/api/v1/nni/check-status"
            code, body = _get(url)
            assert code == 401 and "token" in body["error"], host
            assert _get(url, "not-the-token")[0] == 401
            code, body = _get(url, token)
            assert code == 200 and body["status"] == "RUNNING", host
        # the CLI's own REST calls carry the token it stored
        u = subprocess.run([*nnix, "update", "concurrency", exp_id, "--value", "2"], capture_output=True, text=True,
                           timeout=60, env=os.environ.copy())
        assert u.returncode == 0, u.stderr
        deadline = time.monotonic() + 20
        while read_state(exp_dir).count(TrialStatus.RUNNING) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_state(exp_dir).count(TrialStatus.RUNNING) == 2
    finally:
        s = subprocess.run([*nnix, "stop", exp_id], capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert s.returncode == 0, s.stderr
