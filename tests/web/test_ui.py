"""The web UI end to end, in real headless Chromium (Debian's, driven by Playwright) against real
experiments started by the CLI: trials appear live, sort, filter, search, a trial's log, kill from
the UI (the store records USER_CANCELED), and `nnix view` read-only. Screenshots go to artifacts/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import (
    Event,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCreated,
    TrialEnded,
    TrialStarted,
)
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME, Registry, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.browser import ARGS, CHROMIUM, missing
from nnix.testing.experiments import make_experiment

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
NNIX = [sys.executable, "-m", "nnix.cli.main"]


MISSING = missing()
if MISSING:
    warnings.warn(f"WEB UI TESTS SKIPPED — {MISSING}", stacklevel=1)
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"!!! WEB UI TESTS SKIPPED: {MISSING} !!!")


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
def page(browser: Any) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # failed requests are the tests' business (a refused call, the event stream ending when a test stops the
    # experiment); any other console error or uncaught exception fails the test
    pg.on("console", lambda m: errors.append(m.text)
          if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    pg.set_default_timeout(20000)
    yield pg
    pg.close()
    assert errors == [], errors  # no JavaScript error on any page


def nnix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=120, env=os.environ.copy())


def _config(tmp_path: Path, *, gate: bool = False, **extra: Any) -> Path:
    """Six trials, two at a time; trial 0 runs for a minute. ``gate``: trial 1 waits for ``tmp_path/release``
    (so that no third trial exists before the test says so)."""
    wait = ("import os\n"
            f"while n == 1 and not os.path.exists({str(tmp_path / 'release')!r}) and time.time() < t0 + 120:\n"
            "    time.sleep(0.05)\n") if gate else ""
    (tmp_path / "trial.py").write_text(
        "import nni, sys, time\n"
        "t0 = time.time()\n"
        "p = nni.get_next_parameter()\n"
        "n = nni.get_sequence_id()\n"
        + wait +
        "print(f'hello from trial {n}', flush=True)\n"
        "if n == 0:\n"
        "    for i in range(600):\n"
        "        nni.report_intermediate_result(i / 600)\n"
        "        time.sleep(0.1)\n"
        "for i in range(5):\n"
        "    nni.report_intermediate_result(p['x'] * (i + 1) / 5)\n"
        "    time.sleep(0.08)\n"
        "nni.report_final_result({'default': p['x'], 'acc': 1 - p['x']})\n")
    space = {"x": {"_type": "uniform", "_value": [0, 1]}, "opt": {"_type": "choice", "_value": ["a", "b"]}}
    cfg = {"searchSpace": space,
           "trialCommand": f"{sys.executable} trial.py", "trialCodeDirectory": str(tmp_path), "trialConcurrency": 2,
           "maxTrialNumber": 6, "tuner": {"name": "Random", "classArgs": {"optimize_mode": "maximize"}},
           "trainingService": {"platform": "local"}, "experimentName": "ui-e2e", **extra}
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


def _start(*args: str) -> tuple[str, str]:
    r = nnix(*args)
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    url = next(line.split()[-1] for line in r.stdout.splitlines() if "Web UI" in line)
    return exp_id, url


def row(trial_id: str) -> str:
    return f'.vt-row[data-id="{trial_id}"]'


ROWS_JS = """() => Array.from(document.querySelectorAll('.vt-row:not([hidden]):not(.loading)'))
    .map((r) => ({id: r.dataset.id, status: r.querySelector('.c-status').textContent,
                  metric: r.querySelector('.c-metric').textContent, seq: r.querySelector('.c-seq').textContent,
                  at: Math.round(parseFloat(r.style.transform.slice(11)) / 28)}))
    .sort((a, b) => a.at - b.at)"""


def _rows(page: Any) -> list[dict[str, Any]]:
    """The rendered rows of the (virtualized, paged) trial table, top to bottom (``at``: a row's place in the list)."""
    rows: list[dict[str, Any]] = page.evaluate(ROWS_JS)
    return rows


def _wait_ids(page: Any, ids: list[str]) -> None:
    """Wait until the table's first rows are ``ids``, in that order (the server sorts and filters: the rows change
    when its answer comes)."""
    page.wait_for_function(f"(want) => JSON.stringify(({ROWS_JS})().slice(0, want.length).map((r) => r.id))"
                           " === JSON.stringify(want)", arg=ids)


def test_live_trials_sort_filter_log_and_kill(tmp_path: Path, page: Any) -> None:
    exp_id, url = _start("create", "--config", str(_config(tmp_path, gate=True)), "--port", "0")
    try:
        page.goto(url + "#/trials")
        page.wait_for_selector(".vt-row[data-id]")
        first_count = len(_rows(page))  # at most trials 0 and 1: trial 1 holds the second slot until released
        (tmp_path / "release").touch()
        # trials appear live (server-sent events; the page is not reloaded)
        page.wait_for_function("() => document.querySelectorAll('.vt-row:not([hidden])').length === 6", timeout=30000)
        assert first_count < 6
        page.wait_for_function("""() => Array.from(document.querySelectorAll('.vt-row .c-status'))
            .filter((c) => c.textContent === 'SUCCEEDED').length === 5""", timeout=30000)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert page.locator("#live.on").count() == 1
        st = read_state(Path(Registry().get(exp_id).dir))
        assert {t.trial_id for t in st.trials.values()} == {r["id"] for r in _rows(page)}

        # sort by the default metric: best first (maximize), the running trial (no final result) last
        page.click(".vt-hcell[data-key=metric]")
        finals = {t.trial_id: t.final_value for t in st.trials.values() if t.final_value is not None}
        _wait_ids(page, sorted(finals, key=lambda i: -(finals[i] or 0)))
        rows = _rows(page)
        assert rows[-1]["status"] == "RUNNING"
        page.click(".vt-hcell[data-key=metric]")
        _wait_ids(page, sorted(finals, key=lambda i: finals[i] or 0))

        # filter by status, then search by id
        page.check("input[name=status-filter][value=RUNNING]")
        page.wait_for_function(f"() => ({ROWS_JS})().length === 1")
        rows = _rows(page)
        assert [r["status"] for r in rows] == ["RUNNING"] and rows[0]["seq"] == "0"
        running = rows[0]["id"]
        page.uncheck("input[name=status-filter][value=RUNNING]")
        # (each wait names the rows that query answers: a count alone could be met by the rows shown before the
        # server's answer came, which stay until it does)
        _wait_ids(page, sorted(finals, key=lambda i: finals[i] or 0))
        target = sorted(finals)[0]
        page.fill("#trial-search", target)
        page.wait_for_function(f"() => JSON.stringify(({ROWS_JS})().map((r) => r.id)) === JSON.stringify([{target!r}])")
        page.fill("#trial-search", "")
        page.wait_for_function("() => document.querySelectorAll('.vt-row:not([hidden])').length === 6")

        # a trial's detail and its log file
        page.click(row(target) + " .c-id")
        try:
            page.wait_for_selector("#detail-status")
        except Exception as e:  # (say what the page showed instead: seen once under load, not reproduced since)
            drawer = page.evaluate("(d => d && [d.hidden, d.innerHTML.slice(0, 400)])"
                                   "(document.querySelector('#drawer'))")
            raise AssertionError(f"no trial detail at {page.url}: drawer {drawer}, rows {_rows(page)}") from e
        assert page.inner_text("#detail-status") == "SUCCEEDED"
        page.wait_for_function("() => document.querySelector('#log-view').textContent.includes('hello from trial')")
        page.click("#log-tabs button[data-log='trial.log']")
        page.wait_for_function("() => !document.querySelector('#log-view').textContent.includes('hello from trial')")
        page.click("#detail-close")
        page.wait_for_selector("#drawer", state="hidden")

        # charts render without errors
        for tab in ("params", "inter", "duration", "metric"):
            page.click(f"#chart-tabs button[data-tab={tab}]")
        page.goto(url + "#/overview")
        page.wait_for_function("() => document.querySelector('#ov-best-value').textContent !== 'N/A'")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-overview.png"))

        # edit limits in the overview: concurrency 1 (trial 0 keeps running, so the tuner adds nothing) and
        # maxTrialNumber 7, which leaves room for one customized trial
        exp_dir = Path(Registry().get(exp_id).dir)
        page.fill("#ed-concurrency", "1")
        page.fill("#ed-maxtrials", "7")
        page.click("#ed-save")
        wait_until(lambda: read_state(exp_dir).limits["max_trial_number"] == 7, 20.0)
        assert read_state(exp_dir).limits["trial_concurrency"] == 1
        page.wait_for_function("() => document.querySelector('#ed-msg').textContent === 'saved'")

        # re-run a trial with edited parameters: a customized trial, recorded and shown live
        page.goto(url + f"#/trial/{target}")
        page.click("#detail-rerun")
        page.fill("#rerun-params", '{"x": 0.5, "opt": "b"}')
        page.click("#rerun-submit")
        wait_until(lambda: len(read_state(exp_dir).trials) == 7, 20.0)
        custom = next(t for t in read_state(exp_dir).trials.values() if t.sequence_id == 6)
        assert custom.source == "customized" and custom.params == {"x": 0.5, "opt": "b"}
        page.wait_for_selector(row(custom.trial_id))
        page.click("#detail-rerun")  # once more: maxTrialNumber is reached, the manager refuses
        page.click("#rerun-submit")
        page.wait_for_function("() => document.querySelector('#rerun-msg').textContent.includes('maxTrialNumber')")
        page.click("#rerun-cancel")
        page.click("#detail-close")

        # compare two trials side by side
        for tid in sorted(finals)[:2]:
            page.check(row(tid) + " input[data-sel]")
        page.click("#btn-compare")
        page.wait_for_selector("#compare-table")
        assert page.locator("#compare-table tr").first.locator("td").count() == 2
        page.click("#compare-close")

        # kill the running trial from the UI: the store records USER_CANCELED, the table shows it
        page.goto(url + "#/trials")
        page.click(row(running) + " button[data-act=kill]")
        page.click("#confirm-ok")
        wait_until(lambda: read_state(exp_dir).trials[running].status is TrialStatus.USER_CANCELED, 20.0)
        page.wait_for_function(f"() => document.querySelector({json.dumps(row(running) + ' .c-status')})"
                               ".textContent === 'USER_CANCELED'")
        assert page.locator(row(running) + " button[data-act=kill]").count() == 0
        page.screenshot(path=str(ARTIFACTS / "ui-trials.png"))
    finally:
        assert nnix("stop", exp_id).returncode == 0


def test_view_is_read_only_and_customized_rerun_is_refused(tmp_path: Path, page: Any) -> None:
    cfg = _config(tmp_path, maxTrialNumber=3, trialConcurrency=3)
    (tmp_path / "trial.py").write_text("import nni, os\np = nni.get_next_parameter()\nprint('ok')\n"
                                       "nni.report_intermediate_result(p['x'] / 2)\nnni.report_final_result(p['x'])\n"
                                       "with open(os.environ['NNIX_TRIAL_CHANNEL'] + '/metrics.jsonl', 'ab') as f:\n"
                                       "    f.write(b'{\"type\": \"FINAL\", \"sequence\": 1e999}\\n')\n")
    r = nnix("create", "--config", str(cfg), "--port", "0", "--foreground")
    assert r.returncode == 0, r.stderr
    exp_id = r.stdout.strip().splitlines()[-1].split()[1].rstrip(":")
    exp_id, url = _start("view", exp_id, "--port", "0")
    try:
        page.goto(url + "#/overview")
        page.wait_for_function("() => document.querySelector('#exp-status').textContent === 'VIEWED'")
        assert page.is_visible("#ro-badge") and page.is_disabled("#ed-concurrency")
        assert not page.is_visible("#ed-save")
        page.goto(url + "#/trials")
        page.wait_for_function("() => document.querySelectorAll('.vt-row:not([hidden])').length === 3")
        first = _rows(page)[0]["id"]
        page.click(row(first) + " .c-id")
        page.wait_for_selector("#detail-status")
        assert not page.is_visible("#detail-rerun")
        assert "1 metric line not recorded (line 2: 'sequence'" in page.inner_text("#detail-warnings")
        # even a hand-made request (with the page's anti-CSRF token, as the UI sends it) is refused by the server
        status = page.evaluate("""async () => (await fetch('/api/nnix/v1/trials', {method: 'POST',
            headers: {'Content-Type': 'application/json',
                      'X-Nnix-Csrf': document.querySelector('meta[name="nnix-csrf"]').content},
            body: JSON.stringify({parameters: {x: 0.5}})})).status""")
        assert status == 400
        page.goto(url + "#/experiments")
        page.wait_for_selector(f"#exp-table tr[data-id='{exp_id}']")
        assert "VIEWED" in page.inner_text(f"#exp-table tr[data-id='{exp_id}']")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-view-experiments.png"))
    finally:
        assert nnix("stop", exp_id).returncode == 0
    assert len(read_state(Path(Registry().get(exp_id).dir)).trials) == 3


def _recorded_quick_trial(tmp_path: Path) -> str:
    """A DONE experiment (no manager) limited to 5 minutes, whose one trial ran for 40 ms, recorded directly."""
    exp_id, exp_dir = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand="true", maxExperimentDuration="5m")
    t0 = time.time() - 60
    steps: list[tuple[float, list[Event]]] = [
        (0.0, [ManagerStarted(0, "create"), StatusChanged(ExperimentStatus.RUNNING)]),
        (0.1, [TrialCreated("quick", 0, 0, {"x": 0.5})]),
        (0.2, [TrialStarted("quick", "local-env", str(exp_dir / "trials" / "quick"))]),
        (0.24, [MetricReported("quick", MetricType.FINAL, 0, 0.5, 0), TrialEnded("quick", TrialStatus.SUCCEEDED, 0)]),
        (1.0, [StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached")]),
    ]
    for offset, events in steps:
        at = t0 + offset
        store = SqliteStore(exp_dir / STORE_NAME, clock=lambda: at)  # noqa: B023 (used at once)
        try:
            store.append(events)
        finally:
            store.close()
    return exp_id


def test_a_quick_trial_shows_milliseconds_and_a_finished_experiment_no_remaining_time(tmp_path: Path,
                                                                                      page: Any) -> None:
    exp_id, url = _start("view", _recorded_quick_trial(tmp_path), "--port", "0")
    try:
        page.goto(url + "#/trials")
        page.wait_for_selector(row("quick") + " .c-duration")
        assert page.inner_text(row("quick") + " .c-duration") == "40ms"  # not "0.0s"
        page.goto(url + "#/overview")
        page.wait_for_function("() => document.querySelector('#ov-duration').textContent.includes('of 5m')")
        card = page.inner_text("#ov-duration")
        assert "of 5m 0s" in card and "remaining" not in card, card  # nothing remains of a finished experiment
    finally:
        assert nnix("stop", exp_id).returncode == 0


def test_failed_trials_show_their_reason_in_the_table_and_the_detail(tmp_path: Path, page: Any) -> None:
    (tmp_path / "trial.py").write_text(
        "import nni, sys\n"
        "p = nni.get_next_parameter()\n"
        "def load(path):\n"
        "    raise FileNotFoundError(f'dataset not found: {path}')\n"
        "try:\n"
        "    load('/data/cifar10')\n"
        "finally:\n"
        "    print('cleanup: closing workers', file=sys.stderr)\n")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": f"{sys.executable} trial.py",
           "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "maxTrialNumber": 1,
           "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    exp_id, url = _start("create", "--config", str(path), "--port", "0")
    reason = "FileNotFoundError: dataset not found: /data/cifar10 (exit code 1)"
    try:
        exp_dir = Path(Registry().get(exp_id).dir)
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.FAILED) == 1, 30)
        (tid,) = read_state(exp_dir).trials
        page.goto(url + "#/trials")
        page.wait_for_selector(row(tid) + " .c-reason .err")
        assert page.inner_text(row(tid) + " .c-reason") == reason
        page.fill("#trial-search", "filenotfound")  # free-text search finds reasons too
        page.wait_for_function("() => document.querySelectorAll('.vt-row:not([hidden])').length === 1")
        page.click(row(tid) + " .c-id")
        page.wait_for_selector("#detail-reason")
        assert page.inner_text("#detail-reason") == reason
        # the log shown first is the trial's stderr, with the traceback
        page.wait_for_function("() => document.querySelector('#log-view').textContent.includes('Traceback')")
        assert page.locator("#log-tabs button.active").get_attribute("data-log") == "stderr"
    finally:
        assert nnix("stop", exp_id).returncode == 0


PAGED = 2000  # trials of the paged-table test: more than the UI loads at once


def _many(tmp_path: Path) -> tuple[str, dict[str, float], list[str]]:
    """A finished experiment of PAGED trials recorded directly (no manager): every 10th FAILED (no metric), every
    10th from the 5th EARLY_STOPPED, the others SUCCEEDED with a metric that is not in trial order. Returns its id,
    the metric of each trial that has one and the trial ids in order."""
    from nnix.core.events import MetricReported, StatusChanged, TrialCreated, TrialEnded, TrialStarted
    from nnix.core.status import ExperimentStatus, MetricType
    from nnix.home import STORE_NAME
    from nnix.store.sqlite import SqliteStore
    from nnix.testing.experiments import make_experiment

    exp_id, exp_dir = make_experiment(
        tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}}, trialCommand="true",
        maxTrialNumber=PAGED, tuner={"name": "Random", "classArgs": {"optimize_mode": "maximize"}})
    events: list[Any] = []
    metrics: dict[str, float] = {}
    ids = []
    for i in range(PAGED):
        tid = f"p{i:04d}"
        ids.append(tid)
        events += [TrialCreated(tid, i, i, {"x": i / PAGED, "opt": "ab"[i % 2]}),
                   TrialStarted(tid, "local-env", str(exp_dir / "trials" / tid))]
        if i % 10 == 0:
            events.append(TrialEnded(tid, TrialStatus.FAILED, 1, "boom"))
        elif i % 10 == 5:
            events.append(TrialEnded(tid, TrialStatus.EARLY_STOPPED, None, "early stop"))
        else:
            metrics[tid] = ((i * 7919) % PAGED) / PAGED  # distinct, shuffled
            events += [MetricReported(tid, MetricType.FINAL, 0, metrics[tid], 0),
                       TrialEnded(tid, TrialStatus.SUCCEEDED, 0)]
    events.append(StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached"))
    with closing(SqliteStore(exp_dir / STORE_NAME)) as store:
        store.append(events)
    return exp_id, metrics, ids


def _scroll_to(page: Any, index: int) -> None:
    """Scroll the table so that row ``index`` is near its top, and wait until the rows there are loaded."""
    page.evaluate("(i) => { const t = document.querySelector('#trial-table'); t.scrollTop = i * 28; }", index)
    page.wait_for_function(f"(i) => ({ROWS_JS})().some((r) => r.at === i + 2)", arg=index)
    page.wait_for_function("() => !document.querySelector('.vt-row.loading:not([hidden])')")


def test_paged_table_scroll_sort_and_filter_at_2000_trials(tmp_path: Path, page: Any) -> None:
    exp_id, metrics, ids = _many(tmp_path)
    exp_id, url = _start("view", exp_id, "--port", "0")
    try:
        page.goto(url + "#/trials")
        page.wait_for_function(f"() => document.querySelector('#trial-count').textContent === "
                               f"'{PAGED} of {PAGED} trials'")
        # the middle of the table, in trial order: the rows there are those trials
        _scroll_to(page, PAGED // 2)
        rows = _rows(page)
        assert len(rows) >= 20
        assert all(r["id"] == ids[r["at"]] and r["seq"] == str(r["at"]) for r in rows)
        # sort by metric (best first: maximize) across pages: the rows in the middle are the global order's
        page.click(".vt-hcell[data-key=metric]")
        ranked = sorted(metrics, key=lambda t: -metrics[t]) + [t for t in ids if t not in metrics]
        page.wait_for_function(f"(want) => ({ROWS_JS})().some((r) => r.id === want[r.at] && r.at > 100)", arg=ranked)
        _scroll_to(page, 1300)
        rows = _rows(page)
        assert len(rows) >= 20 and all(r["id"] == ranked[r["at"]] for r in rows), rows[:3]
        _scroll_to(page, PAGED - 30)  # the end: the trials without a metric, in trial order
        rows = _rows(page)
        assert rows[-1]["at"] == PAGED - 1 and all(r["id"] == ranked[r["at"]] for r in rows)
        # no request loaded the whole list: the table asks for the rows in view and a margin
        asked = page.evaluate("""() => performance.getEntriesByType('resource').map((e) => e.name)
            .filter((n) => n.includes('/api/nnix/v1/trials?'))""")
        assert asked and all("limit=all" not in a for a in asked)
        assert max(int(a.split("limit=")[1].split("&")[0]) for a in asked) <= 500
        # a status filter: its count is the overview's, and every row has that status
        overview = page.evaluate("async () => (await fetch('/api/nnix/v1/experiment')).json()")
        assert overview["counts"]["FAILED"] == PAGED // 10 and overview["counts"]["SUCCEEDED"] == len(metrics)
        assert overview["best"]["id"] == ranked[0]
        page.check("input[name=status-filter][value=FAILED]")
        page.wait_for_function(f"() => document.querySelector('#trial-count').textContent === "
                               f"'{overview['counts']['FAILED']} of {PAGED} trials'")
        chip = page.inner_text("label.chip:has(input[value=FAILED])")
        assert chip.split()[-1] == str(overview["counts"]["FAILED"])
        page.wait_for_function(f"() => ({ROWS_JS})().length > 0 && ({ROWS_JS})().every((r) => r.status === 'FAILED')")
        _scroll_to(page, 150)
        rows = _rows(page)
        failed = [t for t in ids if int(t[1:]) % 10 == 0]
        assert all(r["id"] == failed[r["at"]] for r in rows)  # (still sorted by metric: none has one, trial order)
        # a search with conditions, answered by the server
        page.uncheck("input[name=status-filter][value=FAILED]")
        _scroll_to(page, 0)
        page.fill("#trial-search", "x>=0.5; opt=b")
        want = [t for t in ranked if int(t[1:]) >= PAGED // 2 and int(t[1:]) % 2 == 1]
        page.wait_for_function(f"() => document.querySelector('#trial-count').textContent === "
                               f"'{len(want)} of {PAGED} trials'")
        _wait_ids(page, want[:10])
        # the overview's best and its top trials
        page.goto(url + "#/overview")
        page.wait_for_function("(id) => document.querySelector('#ov-best').textContent.includes(id)", arg=ranked[0])
        page.wait_for_function("(ids) => Array.from(document.querySelectorAll('#ov-top tr td:nth-child(2)'))"
                               ".map((c) => c.textContent).join() === ids.join()", arg=ranked[:10])
    finally:
        assert nnix("stop", exp_id).returncode == 0


def test_a_sampled_series_says_how_many_intermediate_results_the_trial_has(tmp_path: Path, page: Any) -> None:
    """A trial with more intermediate results than the detail sends (a sample, evenly spread): the drawer counts the
    trial's results, not the sample's (it said 1000 for a trial of 2,500)."""
    exp_id, exp_dir = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand="true")
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        store.append([ManagerStarted(0, "create"), StatusChanged(ExperimentStatus.RUNNING),
                      TrialCreated("long", 0, 0, {"x": 0.5}),
                      TrialStarted("long", "local-env", str(exp_dir / "trials" / "long")),
                      *(MetricReported("long", MetricType.PERIODICAL, i, i / 2500, i) for i in range(2500)),
                      MetricReported("long", MetricType.FINAL, 2500, 1.0, 2500),
                      TrialEnded("long", TrialStatus.SUCCEEDED, 0), StatusChanged(ExperimentStatus.DONE, "done")])
    finally:
        store.close()
    exp_id, url = _start("view", exp_id, "--port", "0")
    try:
        page.goto(url + "#/trials")
        page.click(row("long") + " .c-id")
        page.wait_for_selector("#detail-inter-count")
        count = page.inner_text("#detail-inter-count")
        assert count.startswith("(2500; ") and count.endswith(" shown, evenly spread)"), count
    finally:
        assert nnix("stop", exp_id).returncode == 0
