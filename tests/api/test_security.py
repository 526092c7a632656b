"""What a web page in the user's browser cannot do to a loopback manager (nnix.api.security): change
anything cross-site (CSRF), read or change anything under a re-pointed name (DNS rebinding), frame
the UI; and the smaller HTTP hygiene (Allow on 405, one INFO line when a client hangs up mid-body).
Against the real app with a real running manager; the last test against the real server started by
the CLI, over raw sockets."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nnix.config import load_config
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import ConfigError
from nnix.home import Registry, read_state

P = "/api/v1/nni"
N = "/api/nnix/v1"
FOREIGN = "http://127.0.0.2:9999"  # another loopback origin: a page the user opened elsewhere
IMPORT = [{"parameter": {"x": 0.5, "opt": "a"}, "value": 0.99}]


def _secret(page: str) -> str:
    found = re.search(r'<meta name="nnix-csrf" content="([^"]+)">', page)
    assert found, "the UI's page carries no anti-CSRF token"
    return found.group(1)


def test_cross_site_and_tokenless_writes_change_nothing(sleeper: Any, h: Any) -> None:
    exp_dir = sleeper(trialConcurrency=1, maxTrialNumber=5)

    async def go() -> None:
        async with h.running(exp_dir) as m, h.client(h.create_app(m)) as c:
            await h.until(lambda: any(t.status is TrialStatus.RUNNING for t in m.state.trials.values()))
            tid = next(iter(m.state.trials))
            trials = json.dumps({"x": 0.3, "opt": "a"}).encode()
            cross = {"Origin": FOREIGN, "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"}
            attacks: list[tuple[str, str, dict[str, str], bytes | None]] = [
                # a Blob body in a no-cors fetch: no Content-Type at all
                ("POST", f"{P}/trial-jobs", {}, trials),
                ("POST", f"{P}/trial-jobs", cross, trials),
                ("POST", f"{N}/trials", {**cross, "Content-Type": "text/plain"}, trials),
                ("POST", f"{P}/experiment/import-data", cross, json.dumps(IMPORT).encode()),
                ("POST", f"{P}/experiment/import-data", {"Content-Type": "text/plain;charset=UTF-8"},
                 json.dumps(IMPORT).encode()),
                # body-less: cancel a trial, stop the experiment
                ("POST", f"{N}/trials/{tid}/cancel", cross, None),
                ("POST", f"{N}/trials/{tid}/cancel", {"Origin": "null", "Sec-Fetch-Site": "cross-site"}, None),
                ("POST", f"{N}/experiment/stop", {"Origin": FOREIGN}, None),
                ("POST", f"{N}/experiment/stop", {"Sec-Fetch-Site": "cross-site"}, None),
                ("DELETE", f"{P}/experiment", {"Origin": FOREIGN, "Sec-Fetch-Site": "cross-site"}, None),
                ("DELETE", f"{P}/trial-jobs/{tid}", {"Origin": FOREIGN}, None),
                # an HTML form
                ("PUT", f"{P}/experiment?update_type=TRIAL_CONCURRENCY",
                 {**cross, "Content-Type": "application/x-www-form-urlencoded"}, b"params=5"),
                ("PATCH", f"{N}/experiment", {**cross, "Content-Type": "multipart/form-data; boundary=x"},
                 b"--x--"),
                # same origin (the UI's own origin) but without the page's secret, or with a wrong one
                ("POST", f"{N}/experiment/stop", {"Origin": h.base, "Sec-Fetch-Site": "same-origin"}, None),
                ("POST", f"{N}/trials/{tid}/cancel",
                 {"Origin": h.base, "Sec-Fetch-Site": "same-origin", "X-Nnix-Csrf": "guess"}, None),
                ("PATCH", f"{N}/experiment", {"Origin": h.base, "Content-Type": "application/json"},
                 b'{"trialConcurrency": 5}'),
            ]
            for method, url, headers, body in attacks:
                r = await c.request(method, url, headers=headers, content=body)
                assert r.status_code in (403, 415), (method, url, headers, r.status_code, r.text)
                assert r.json()["error"], r.text
            assert len(m.state.trials) == 1 and m.state.imported == []
            assert m.state.trials[tid].cancel_reason is None and m.state.trials[tid].status is TrialStatus.RUNNING
            assert m.state.limit("trial_concurrency") == 1
            assert m.state.status is ExperimentStatus.RUNNING and not m._stop_requested

            # the UI (same origin, the secret from its page) and plain clients (no browser headers) still can
            secret = _secret((await c.get("/")).text)
            ui = {"Origin": h.base, "Sec-Fetch-Site": "same-origin", "X-Nnix-Csrf": secret}
            r = await c.patch(f"{N}/experiment", json={"trialConcurrency": 2}, headers=ui)
            assert r.status_code == 200, r.text
            r = await c.post(f"{N}/trials/{tid}/cancel", headers=ui)
            assert r.status_code in (200, 202), r.text
            assert m.state.trials[tid].cancel_reason is not None
            r = await c.put(f"{P}/experiment?update_type=TRIAL_CONCURRENCY",
                            json={"params": {"trialConcurrency": 3}})
            assert r.status_code == 200, r.text
            r = await c.post(f"{P}/experiment/import-data", json=IMPORT)
            assert r.status_code == 200, r.text
            assert m.state.limit("trial_concurrency") == 3 and len(m.state.imported) == 1

    h.run(go())


def test_foreign_host_names_are_refused(finished: Path, h: Any) -> None:
    m, app = h.viewer(finished, read_only=False)

    async def go() -> None:
        async with h.client(app) as c:
            for host in ("127.0.0.1", "127.0.0.1:8080", "localhost:1", "LOCALHOST", "[::1]:8080", "127.0.0.2:80"):
                r = await c.get(f"{P}/trial-jobs", headers={"Host": host})
                assert r.status_code == 200 and len(r.json()) == 5, host
            for host in ("evil.test", "evil.test:8080", "127.0.0.1.evil.test", "localhost.evil.test", "10.1.2.3",
                         "[::1].evil.test", "0.0.0.0:8080", "", "127.0.0.1:18301@evil.test", "127.0.0.1:abc"):
                for method, url in (("GET", f"{P}/trial-jobs"), ("GET", f"{N}/events"), ("GET", "/"),
                                    ("GET", f"{P}/trial-file/aaaaa/stdout"),
                                    ("PUT", f"{P}/experiment?update_type=TRIAL_CONCURRENCY")):
                    r = await c.request(method, url, headers={"Host": host},
                                        json={"params": {"trialConcurrency": 7}} if method == "PUT" else None)
                    assert r.status_code == 403, (host, url, r.status_code)
                    assert "Host" in r.json()["error"] and "rebinding" in r.json()["error"]
                    assert r.headers["x-frame-options"] == "DENY"
            assert m.state.limit("trial_concurrency") != 7

    h.run(go())


HOST_FORMS = [  # (Host value, its host or None where it is not host[:port])
    ("127.0.0.1", "127.0.0.1"), ("127.0.0.1:8080", "127.0.0.1"), ("LocalHost.:1", "localhost"),
    ("[::1]", "::1"), ("[::1]:65535", "::1"), ("my-host_1.lan:80", "my-host_1.lan"),
    ("127.0.0.1:18301@evil.test", None), ("127.0.0.1:abc", None), ("127.0.0.1:", None), ("127.0.0.1:123456", None),
    ("127.0.0.1:8080:1", None), ("127.0.0.1:+80", None), ("127.0.0.1:\u0663", None), ("127.0.0.1 :80", None),
    ("user@127.0.0.1", None), ("::1", None), ("[::1]:", None), ("[::1]x", None), ("[::1", None), ("[1.2.3.4]", None),
    ("[evil.test]", None), ("a..b", None), ("evil.test/x", None), ("ev\u0131l.test", None), ("", None),
    ("x" * 300, None), ("127.0.0.1\x00", None),
]


@pytest.mark.parametrize("value,host", HOST_FORMS)
def test_the_host_header_is_parsed_strictly(value: str, host: str | None) -> None:
    from nnix.api.security import HostPolicy, split_host

    assert split_host(value) == host
    if host is None:  # refused by every policy but `*`
        assert not HostPolicy("127.0.0.1").allows(value) and not HostPolicy("0.0.0.0", ["evil.test"]).allows(value)


def test_host_policy_of_non_loopback_binds_and_allowed_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.api.security import HostPolicy, configured_hosts
    from nnix.config.fields import check_host_name

    loop = HostPolicy("127.0.0.1")
    assert loop.allows("127.3.4.5:1") and loop.allows("[::1]") and loop.allows(None)
    assert not loop.allows(socket.gethostname()) and not loop.allows("192.168.1.5")
    wild = HostPolicy("0.0.0.0")
    assert wild.allows("192.168.1.5:8080") and wild.allows(f"{socket.gethostname()}:8080") and wild.allows("[fe80::1]")
    assert not wild.allows("evil.test:8080")
    named = HostPolicy("10.0.0.5", ["nnix.lan"])
    assert named.allows("nnix.lan:8080") and named.allows("10.0.0.5") and not named.allows("other.lan")
    assert HostPolicy("0.0.0.0", ["*"]).allows("anything.test")
    monkeypatch.setenv("NNIX_ALLOWED_HOSTS", "a.lan, B.lan ,http://bad/")
    assert configured_hosts(["c.lan"]) == ["c.lan", "a.lan", "b.lan"]
    for bad in ("http://x.lan", "x.lan:80", "x.lan/path", "", "a..b"):
        with pytest.raises(ValueError):
            check_host_name(bad)

    (tmp_path / "trial.py").write_text("")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": "python3 trial.py",
           "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "tuner": {"name": "Random"},
           "trainingService": {"platform": "local"}}
    path = tmp_path / "c.yml"
    path.write_text(json.dumps({**cfg, "allowedHosts": ["NNIX.lan", "10.0.0.7"]}))
    assert load_config(path).config.allowed_hosts == ["nnix.lan", "10.0.0.7"]
    path.write_text(json.dumps({**cfg, "allowedHosts": ["ok.lan", "http://nnix.lan:8080"]}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "allowedHosts[1]" in str(err.value) and "not a host name" in str(err.value)


def test_security_headers_and_allow_on_405(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)
    _, token_app = h.viewer(finished, token="tok")

    async def go() -> None:
        async with h.client(app) as c, h.client(token_app) as t:
            page = await c.get("/")
            assert page.headers["content-type"].startswith("text/html")
            responses = [page, await c.get(f"{P}/trial-jobs"), await c.get("/static/app.js"),
                         await c.get(f"{P}/trial-file/aaaaa/stdout"), await c.get("/nope"),
                         await t.get(f"{P}/trial-jobs"),
                         await c.post(f"{N}/experiment/stop", headers={"Origin": FOREIGN})]
            assert [r.status_code for r in responses] == [200, 200, 200, 200, 404, 401, 403]
            for r in responses:
                assert r.headers["x-frame-options"] == "DENY", r.url
                assert "frame-ancestors 'none'" in r.headers["content-security-policy"], r.url
                assert r.headers["x-content-type-options"] == "nosniff", r.url
                assert r.headers["referrer-policy"] == "no-referrer", r.url
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe-eval" not in csp
            assert page.headers["cache-control"] == "no-store"  # it carries the anti-CSRF secret
            for method, url, allow in (("PUT", f"{P}/trial-jobs", "GET, HEAD, POST"),
                                       ("POST", f"{P}/experiment", "DELETE, GET, HEAD, PUT"),
                                       ("GET", f"{N}/trials/x/cancel", "POST"),
                                       ("DELETE", "/", "GET, HEAD")):
                r = await c.request(method, url)
                assert r.status_code == 405 and r.headers["allow"] == allow, (method, url, r.headers.get("allow"))

    h.run(go())


NNIX = [sys.executable, "-m", "nnix.cli.main"]


def _raw(port: int, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_real_server_rebinding_and_client_hang_up(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text("import nni, time\nnni.get_next_parameter()\ntime.sleep(60)\n")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": f"{sys.executable} trial.py",
           "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "maxTrialNumber": 3, "tuner": {"name": "Random"},
           "trainingService": {"platform": "local"}}
    (tmp_path / "config.yml").write_text(json.dumps(cfg))
    r = subprocess.run([*NNIX, "create", "--config", str(tmp_path / "config.yml"), "--port", "0"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    try:
        exp_dir = Path(Registry().get(exp_id).dir)
        port = read_state(exp_dir, summary=True).manager_port
        assert port
        # a client that announces a body and hangs up in the middle of it
        for _ in range(3):
            _raw(port, b"POST /api/v1/nni/trial-jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"x\": 0.", read=False)
        log = exp_dir / "log" / "manager.log"
        deadline = time.monotonic() + 20
        while log.read_text().count("hung up") < 3:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        lines = [line for line in text.splitlines() if "hung up" in line]
        assert len(lines) == 3 and all(" INFO " in line for line in lines), lines
        assert "Traceback" not in text and " ERROR " not in text, text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{P}/check-status", timeout=10) as resp:
            assert json.loads(resp.read())["status"] == "RUNNING"
        assert len(read_state(exp_dir).trials) == 1
        req = b"GET /api/v1/nni/trial-jobs HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
        assert _raw(port, req % b"evil.test:%d" % port).startswith(b"HTTP/1.1 403")
        assert _raw(port, req % b"localhost:%d" % port).startswith(b"HTTP/1.1 200")
    finally:
        s = subprocess.run([*NNIX, "stop", exp_id], capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert s.returncode == 0, s.stderr
