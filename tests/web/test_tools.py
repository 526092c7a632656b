"""The web UI's Logs panel (the manager's log, with a download link, through /logs/) and TensorBoard button
(selected trials, the URL shown, stopped from the dialog), in real Chromium against a real experiment. A fake
`tensorboard` on PATH (a tiny HTTP server) stands in for the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.web.test_ui import MISSING, NNIX, browser, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"!!! WEB UI TESTS SKIPPED: {MISSING} !!!")

FAKE_TB = """#!{python}
import http.server, sys
args = sys.argv[1:]
port = int(args[args.index('--port') + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'fake tensorboard ' + ' '.join(args).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
"""


def test_logs_panel_and_tensorboard_button(tmp_path: Path, page: Any) -> None:  # noqa: F811
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "tensorboard").write_text(FAKE_TB.format(python=sys.executable))
    (bindir / "tensorboard").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "trial.py").write_text("import nni\nnni.report_final_result(nni.get_next_parameter()['x'])\n")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": f"{sys.executable} trial.py",
           "trialCodeDirectory": str(tmp_path), "trialConcurrency": 2, "maxTrialNumber": 2,
           "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
    (tmp_path / "config.yml").write_text(json.dumps(cfg))
    r = subprocess.run([*NNIX, "create", "--config", str(tmp_path / "config.yml"), "--port", "0"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    url = next(line.split()[-1] for line in r.stdout.splitlines() if "Web UI" in line)
    try:
        page.goto(url + "#/trials")
        page.wait_for_function("""() => Array.from(document.querySelectorAll('.vt-row .c-status'))
            .filter((c) => c.textContent === 'SUCCEEDED').length === 2""", timeout=30000)

        # the Logs panel shows the manager's log; its download link serves the file as an attachment
        page.click("#btn-logs")
        page.wait_for_function("() => document.querySelector('#logs-view').textContent.includes('manager pid')")
        href = page.get_attribute("#logs-download", "href")
        assert href == "/logs/manager.log?download=1"
        with urllib.request.urlopen(url.rstrip("/") + href, timeout=10) as resp:
            assert resp.headers["Content-Disposition"] == f'attachment; filename="{exp_id}-manager.log"'
            assert b"manager pid" in resp.read()
        page.click("#logs-tabs button[data-file='nnictl_stderr.log']")
        page.wait_for_function("() => document.querySelector('#logs-view').textContent.includes('Experiment ')")
        page.click("#logs-close")

        # TensorBoard on the selected trials: its URL is shown and answers; Stop stops it
        assert page.is_disabled("#btn-tensorboard")
        for tid in page.eval_on_selector_all(".vt-row[data-id]", "rows => rows.map((r) => r.dataset.id)"):
            page.check(f'.vt-row[data-id="{tid}"] input[data-sel]')
        page.wait_for_function("() => document.querySelector('#btn-tensorboard').textContent === 'TensorBoard (2)'")
        page.click("#btn-tensorboard")
        page.wait_for_selector("#tb-url")
        assert "RUNNING" in page.inner_text("#tb-status")
        tb_url = page.get_attribute("#tb-url", "href")
        with urllib.request.urlopen(tb_url, timeout=10) as resp:
            assert resp.read().startswith(b"fake tensorboard --logdir_spec")
        page.click("#tb-stop")
        page.wait_for_function("() => document.querySelector('#tb-status').textContent.includes('STOPPED')")
        page.click("#tb-close")
    finally:
        subprocess.run([*NNIX, "stop", exp_id], capture_output=True, timeout=120, env=env)
