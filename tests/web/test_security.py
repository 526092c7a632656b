"""Web pages against a loopback manager, in real headless Chromium: a page from another origin (another
loopback address: cross-site; another port: same-site) tries every write it can make a browser send
(CSRF); a page under a re-pointed name (DNS rebinding, simulated by a resolver rule and a forwarding
server) tries to read trial data and change the experiment; a foreign page frames the UI. The store
must show that nothing happened, and no trial data may reach the pages."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import Registry, read_state
from nnix.testing import wait_until
from nnix.testing.browser import ARGS as BROWSER_ARGS
from nnix.testing.browser import CHROMIUM, missing

EVIL = "evil.test"
ARGS = [*BROWSER_ARGS, f"--host-resolver-rules=MAP {EVIL} 127.0.0.1"]
NNIX = [sys.executable, "-m", "nnix.cli.main"]


MISSING = missing()
if MISSING:
    warnings.warn(f"WEB SECURITY TESTS SKIPPED — {MISSING}", stacklevel=1)
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"!!! WEB SECURITY TESTS SKIPPED: {MISSING} !!!")

# Every write a foreign page can make the browser send. Each entry: a name, and a function of (manager base
# URL, running trial id) that sends it and resolves whatever happens (a refusal is the expected outcome).
ATTACKS = r"""
const J = (o) => new Blob([JSON.stringify(o)]);
const form = (action, enctype, fields) => new Promise((resolve) => {
  const name = 'f' + Math.random().toString(36).slice(2);
  const frame = document.createElement('iframe'); frame.name = name; document.body.appendChild(frame);
  frame.onload = () => resolve('submitted');
  const f = document.createElement('form');
  f.method = 'POST'; f.action = action; f.enctype = enctype; f.target = name;
  for (const [k, v] of Object.entries(fields)) {
    const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
  }
  document.body.appendChild(f); f.submit();
});
const IMPORT = [{parameter: {x: 0.5, opt: 'a'}, value: 0.99}];
window.ATTACKS = [
  ['no-cors POST trial-jobs, Blob body', (M) => fetch(M + '/api/v1/nni/trial-jobs',
    {method: 'POST', mode: 'no-cors', body: J({x: 0.3, opt: 'a'})})],
  ['no-cors POST native trials, Blob body', (M) => fetch(M + '/api/nnix/v1/trials',
    {method: 'POST', mode: 'no-cors', body: J({parameters: {x: 0.3, opt: 'a'}})})],
  ['no-cors POST import-data, Blob body', (M) => fetch(M + '/api/v1/nni/experiment/import-data',
    {method: 'POST', mode: 'no-cors', body: J(IMPORT)})],
  ['no-cors POST import-data, text/plain', (M) => fetch(M + '/api/v1/nni/experiment/import-data',
    {method: 'POST', mode: 'no-cors', body: JSON.stringify(IMPORT)})],
  ['no-cors POST cancel (no body)', (M, T) => fetch(M + `/api/nnix/v1/trials/${T}/cancel`,
    {method: 'POST', mode: 'no-cors'})],
  ['no-cors POST experiment/stop (no body)', (M) => fetch(M + '/api/nnix/v1/experiment/stop',
    {method: 'POST', mode: 'no-cors'})],
  ['sendBeacon experiment/stop', (M) => navigator.sendBeacon(M + '/api/nnix/v1/experiment/stop')],
  ['cors PUT trialConcurrency, JSON', (M) => fetch(M + '/api/v1/nni/experiment?update_type=TRIAL_CONCURRENCY',
    {method: 'PUT', headers: {'Content-Type': 'application/json'},
     body: JSON.stringify({params: {trialConcurrency: 5}})})],
  ['cors DELETE trial-jobs/ID', (M, T) => fetch(M + `/api/v1/nni/trial-jobs/${T}`, {method: 'DELETE'})],
  ['form POST text/plain trial-jobs (JSON-shaped)', (M) => form(M + '/api/v1/nni/trial-jobs', 'text/plain',
    {'{"x": 0.3, "opt": "a", "pad": "': '"}'})],
  ['form POST urlencoded trialConcurrency', (M) => form(M + '/api/v1/nni/experiment?update_type=TRIAL_CONCURRENCY',
    'application/x-www-form-urlencoded', {params: '{"trialConcurrency": 5}'})],
  ['form POST experiment/stop', (M) => form(M + '/api/nnix/v1/experiment/stop',
    'application/x-www-form-urlencoded', {})],
];
window.runAttacks = async (M, T) => {
  const out = [];
  for (const [name, attack] of window.ATTACKS) {
    try { const r = await attack(M, T); out.push([name, r && r.type ? r.type + ' ' + r.status : String(r)]); }
    catch (e) { out.push([name, 'error ' + e.message]); }
  }
  return out;
};
"""
# what a page under a re-pointed name tries: same-origin for the browser, so it could read the answers
REBIND = r"""
window.rebind = async () => {
  const out = {};
  for (const path of ['/api/v1/nni/trial-jobs', '/api/nnix/v1/trials', '/api/v1/nni/experiment', '/']) {
    try { const r = await fetch(path); out[path] = [r.status, await r.text()]; }
    catch (e) { out[path] = [0, 'error ' + e.message]; }
  }
  const page = out['/'][1];
  const m = /<meta name="nnix-csrf" content="([^"]*)">/.exec(page);
  const csrf = m ? m[1] : '';
  try {
    const r = await fetch('/api/nnix/v1/experiment', {method: 'PATCH',
      headers: {'Content-Type': 'application/json', 'X-Nnix-Csrf': csrf}, body: JSON.stringify({trialConcurrency: 5})});
    out.patch = [r.status, await r.text()];
  } catch (e) { out.patch = [0, 'error ' + e.message]; }
  out.events = await new Promise((resolve) => {
    const es = new EventSource('/api/nnix/v1/events');
    const done = (v) => { es.close(); resolve(v); };
    es.onopen = () => done([200, 'the event stream opened']);
    es.onmessage = (ev) => done([200, ev.data]);
    es.onerror = () => done([0, 'error']);
  });
  return out;
};
"""


class _Foreign(BaseHTTPRequestHandler):
    """A web server of someone else: serves its pages; with ``forward`` set, passes every other request on
    to the manager unchanged (``Host`` included), which is what the browser does after a DNS rebinding."""

    pages: ClassVar[dict[str, str]] = {}
    forward: ClassVar[int | None] = None

    def log_message(self, *args: Any) -> None:
        pass

    def _page(self) -> bool:
        page = self.pages.get(self.path.split("?")[0])
        if page is None:
            return False
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def _relay(self) -> None:
        if self.forward is None:
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection("127.0.0.1", self.forward, timeout=30)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in ("connection", "keep-alive"):
                conn.putheader(k, v)
        conn.putheader("Connection", "close")
        conn.endheaders(body)
        resp = conn.getresponse()
        self.send_response_only(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            while chunk := resp.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            pass  # the browser went away (the event stream is closed after its first message)
        finally:
            conn.close()
        self.close_connection = True

    def do_GET(self) -> None:
        if not self._page():
            self._relay()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _relay


def _server(host: str, pages: dict[str, str], forward: int | None = None) -> ThreadingHTTPServer:
    handler = type("Handler", (_Foreign,), {"pages": pages, "forward": forward})
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def experiment(tmp_path: Path) -> Iterator[tuple[Path, int, str]]:
    """A running experiment (one trial, sleeping; concurrency 1): its directory, port and running trial."""
    (tmp_path / "trial.py").write_text("import nni, time\nnni.get_next_parameter()\ntime.sleep(120)\n")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}, "opt": {"_type": "choice", "_value": ["a"]}},
           "trialCommand": f"{sys.executable} trial.py", "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1,
           "maxTrialNumber": 10, "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
    (tmp_path / "config.yml").write_text(json.dumps(cfg))
    r = subprocess.run([*NNIX, "create", "--config", str(tmp_path / "config.yml"), "--port", "0"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    try:
        exp_dir = Path(Registry().get(exp_id).dir)
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.RUNNING) == 1, 20.0)
        port = read_state(exp_dir, summary=True).manager_port
        assert port
        yield exp_dir, port, next(iter(read_state(exp_dir).trials))
    finally:
        subprocess.run([*NNIX, "stop", exp_id], capture_output=True, text=True, timeout=60, env=os.environ.copy())


def _untouched(state: ExperimentState, tid: str) -> None:
    changes = []
    if list(state.trials) != [tid]:
        changes.append(f"trials created: {list(state.trials)[1:]}")
    if state.trials[tid].status is not TrialStatus.RUNNING or state.trials[tid].cancel_reason is not None:
        changes.append(f"trial canceled: {state.trials[tid].status.value}")
    if state.imported:
        changes.append(f"results imported: {state.imported}")
    if state.limit("trial_concurrency") != 1:
        changes.append(f"trialConcurrency changed to {state.limit('trial_concurrency')}")
    if state.status is not ExperimentStatus.RUNNING:
        changes.append(f"experiment {state.status.value}")
    assert changes == [], changes


def test_csrf_from_other_origins_changes_nothing(browser: Any, experiment: tuple[Path, int, str]) -> None:
    exp_dir, port, tid = experiment
    manager = f"http://127.0.0.1:{port}"
    page_html = f"<!doctype html><html><body><script>{ATTACKS}</script></body></html>"
    cross = _server("127.0.0.2", {"/attack.html": page_html})  # another address: cross-site
    same_site = _server("127.0.0.1", {"/attack.html": page_html})  # another port: same-site
    try:
        outcomes: list[str] = []  # one per request the browser made to the manager: sent and answered, or not
        for origin in (cross, same_site):
            host, p = origin.server_address[:2]
            assert isinstance(host, str)
            page = browser.new_page()
            for event in ("requestfinished", "requestfailed"):
                page.on(event, lambda r, e=event: outcomes.append(f"{e} {r.method} {r.url} {r.failure or ''}")
                        if r.url.startswith(manager) else None)
            page.goto(f"http://{host}:{p}/attack.html")
            results = page.evaluate("([M, T]) => window.runAttacks(M, T)", [manager, tid])
            assert len(results) == 12, results
            deadline = time.monotonic() + 20
            while len(outcomes) < 12 * (1 + (origin is same_site)) and time.monotonic() < deadline:
                page.wait_for_timeout(50)  # lets Playwright deliver the request events
            page.close()
        assert len(outcomes) == 2 * 12, outcomes  # every attack's request has come back (or never left)
        _untouched(read_state(exp_dir), tid)
    finally:
        cross.shutdown()
        same_site.shutdown()


def test_rebinding_host_reads_and_changes_nothing(browser: Any, experiment: tuple[Path, int, str]) -> None:
    exp_dir, port, tid = experiment
    proxy = _server("127.0.0.1", {"/rebind.html": f"<!doctype html><html><body><script>{REBIND}</script></body>"
                                                  "</html>"}, forward=port)
    try:
        page = browser.new_page()
        page.goto(f"http://{EVIL}:{proxy.server_address[1]}/rebind.html")
        out = page.evaluate("() => window.rebind()")
        page.close()
        for key, (status, text) in out.items():
            assert status in (0, 403), (key, status, text[:200])
            assert tid not in text and "nnix-csrf" not in text and '"x"' not in text, (key, text[:200])
        _untouched(read_state(exp_dir), tid)
        # the same page under the manager's own name works: the refusal is the Host check's
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        r = page.evaluate("() => fetch('/api/v1/nni/trial-jobs').then((r) => r.text())")
        assert tid in r
        page.close()
    finally:
        proxy.shutdown()


def test_foreign_page_cannot_frame_the_ui(browser: Any, experiment: tuple[Path, int, str]) -> None:
    _, port, _ = experiment
    frames = "".join(f'<iframe id="f{i}" src="http://127.0.0.1:{port}{path}"></iframe>'
                     for i, path in enumerate(["/", "/#/trials", "/api/v1/nni/trial-jobs"]))
    html = (f"<!doctype html><html><body>{frames}<script>window.loaded = 0; for (const f of "
            "document.querySelectorAll('iframe')) f.onload = () => { window.loaded += 1; };</script></body></html>")
    cross = _server("127.0.0.2", {"/frame.html": html})
    try:
        page = browser.new_page()
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "frame" in m.text.lower() else None)
        page.goto(f"http://127.0.0.2:{cross.server_address[1]}/frame.html")
        page.wait_for_function("window.loaded === 3")
        children = [f for f in page.frames if f != page.main_frame]
        assert len(children) == 3
        for f in children:
            assert not f.url.startswith("http://127.0.0.1"), f.url  # the browser replaced it with an error page
            assert f.query_selector("#top") is None and f.query_selector("#exp-status") is None
        deadline = time.monotonic() + 20
        while len(blocked) < 3 and time.monotonic() < deadline:
            page.wait_for_timeout(50)  # lets Playwright deliver the console messages
        assert len(blocked) >= 3, blocked  # Chromium says why: X-Frame-Options / frame-ancestors
        page.close()
    finally:
        cross.shutdown()


def test_ui_changes_work_across_a_manager_restart(browser: Any, experiment: tuple[Path, int, str]) -> None:
    """A resumed manager has a new anti-CSRF secret: a UI page left open fetches it again and its change
    goes through (the refusal of the stale secret is not shown to the user)."""
    exp_dir, port, _ = experiment
    exp_id = exp_dir.name
    page = browser.new_page()
    page.goto(f"http://127.0.0.1:{port}/#/overview")
    page.wait_for_selector("#ed-concurrency")
    for args in (["stop", exp_id], ["resume", exp_id, "--port", str(port)]):
        r = subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert r.returncode == 0, r.stderr
    page.fill("#ed-concurrency", "2")
    page.click("#ed-save")
    page.wait_for_function("() => document.querySelector('#ed-msg').textContent === 'saved'")
    wait_until(lambda: read_state(exp_dir).limits["trial_concurrency"] == 2, 20.0)
    page.close()
