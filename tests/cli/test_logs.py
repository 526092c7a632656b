"""Failure reasons and logs where users meet them, through real processes: a trial whose dataset download
fails deep in a traceback (REST, `trial ls --json`, `nnix log trial`, manager.log), `--follow` of a trial's
stderr and of the manager's log, the same for a trial that ran on a cluster node (the manager's copy), and
manager.log rotation."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import StatusChanged, TrialCreated, TrialEnded
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import STORE_NAME, Registry, read_state
from nnix.model.runs import TrialSpec
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.cluster import ProcessClusterService, ProcessLauncher
from nnix.testing.experiments import make_experiment, run_experiment

NNIX = [sys.executable, "-m", "nnix.cli.main"]
REASON = "RuntimeError: Error downloading train-images-idx3-ubyte.gz (exit code 1)"

# NNI's MNIST example as it fails without network: the download raises deep in a call chain, and a background
# thread still fetching prints its `<urlopen error ...>` after the traceback (the old reason showed that line)
MNIST = '''import sys, threading, urllib.error, urllib.request
import nni

MIRRORS = ["http://127.0.0.1:9/mnist/", "http://127.0.0.1:9/mirror/"]

def fetch(url):
    return urllib.request.urlopen(url, timeout=5)

def prefetch_test_set():
    threading.main_thread().join()
    try:
        fetch(MIRRORS[0] + "t10k-images-idx3-ubyte.gz")
    except urllib.error.URLError as error:
        print(f"Failed to download (trying next):\\n{error}", file=sys.stderr)

def download(filename):
    for mirror in MIRRORS:
        try:
            fetch(mirror + filename)
        except urllib.error.URLError as error:
            print(f"Failed to download (trying next):\\n{error}", file=sys.stderr)
            continue
        break
    else:
        raise RuntimeError(f"Error downloading {filename}")

class MNIST:
    def __init__(self, root):
        download("train-images-idx3-ubyte.gz")

def main(params):
    print(f"params {params}", flush=True)
    threading.Thread(target=prefetch_test_set).start()
    MNIST("data")

main(nni.get_next_parameter())
'''


def nnix(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _config(tmp_path: Path, trial: str, **extra: Any) -> Path:
    (tmp_path / "trial.py").write_text(trial)
    cfg = {"searchSpace": {"lr": {"_type": "loguniform", "_value": [0.0001, 0.1]}},
           "trialCommand": f"{sys.executable} trial.py", "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1,
           "maxTrialNumber": 2, "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}, **extra}
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


def _create(config: Path) -> tuple[str, Path, int]:
    r = nnix("create", "--config", str(config), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    url = next(line.split()[-1] for line in r.stdout.splitlines() if "Web UI" in line)
    return exp_id, Path(Registry().get(exp_id).dir), int(url.rstrip("/").rsplit(":", 1)[1])


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def test_download_failure_reason_in_rest_trial_ls_log_trial_and_manager_log(tmp_path: Path) -> None:
    exp_id, exp_dir, port = _create(_config(tmp_path, MNIST))
    try:
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.FAILED) == 2, 60.0)
        st = read_state(exp_dir)
        tid = next(t.trial_id for t in st.trials.values() if t.sequence_id == 0)
        stderr = (exp_dir / "environments/local-env/trials" / tid / "trial.stderr").read_text()
        assert stderr.strip().splitlines()[-1].startswith("<urlopen error")  # the misleading last line

        # REST: NNI's trial-jobs (message, stderrPath) and the native API
        jobs = _get(port, "/api/v1/nni/trial-jobs")
        assert [j["message"] for j in jobs] == [REASON, REASON]
        assert all(Path(j["stderrPath"].removeprefix("file://localhost:")).read_text() .startswith("Failed")
                   for j in jobs)
        assert _get(port, f"/api/nnix/v1/trials/{tid}")["message"] == REASON

        # trial ls --json (NNI's shape)
        ls = nnix("trial", "ls", exp_id, "--json")
        assert [t["message"] for t in json.loads(ls.stdout)] == [REASON, REASON]

        # nnix log trial: the stderr tail by default, --tail N, --stdout; NNI's --trial_id; without -T: paths
        out = nnix("log", "trial", exp_id, "-T", tid)
        assert out.returncode == 0, out.stderr
        assert "Traceback (most recent call last):" in out.stdout and REASON.split(" (")[0] in out.stdout
        assert REASON in out.stderr  # the header line names the reason
        last2 = nnix("log", "trial", exp_id, "-T", tid, "--tail", "2").stdout.splitlines()
        assert last2 == stderr.strip().splitlines()[-2:]
        assert nnix("log", "trial", exp_id, "--trial_id", tid, "--stdout").stdout.startswith("params {'lr': ")
        listing = nnix("log", "trial", exp_id).stdout
        assert all(t in listing for t in st.trials) and listing.count(REASON) == 2
        missing = nnix("log", "trial", exp_id, "-T", "nope0")
        assert missing.returncode != 0 and "no trial nope0" in missing.stderr

        # manager.log: created from which file, tuner and limits, each trial's start and end with its reason
        text = nnix("log", "manager", exp_id).stdout
        assert f"experiment {exp_id} created from {tmp_path / 'config.yml'}" in text
        assert "tuner Random" in text and "maxTrialNumber 2" in text
        assert f"trial {tid} #0 started on local-env" in text
        assert f"WARNING nnix.manager: trial {tid} #0 FAILED after" in text and REASON in text
        assert "-> DONE: maxTrialNumber (2) reached" in text
        assert nnix("log", "manager", exp_id, "--tail", "1").stdout.strip() == text.strip().splitlines()[-1]
        assert nnix("log", "stdout", exp_id).returncode == 0 and nnix("log", "stderr", exp_id).returncode == 0
    finally:
        assert nnix("stop", exp_id).returncode == 0


def _never_started(tmp_path: Path, status: ExperimentStatus, message: str, log_line: str = "") -> str:
    """An experiment recorded without a manager: trial tr0 never started (WAITING), tr1 was canceled while waiting."""
    exp_id, exp_dir = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand="true")
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        store.append([StatusChanged(ExperimentStatus.RUNNING), TrialCreated("tr0", 0, 0, {"x": 0.5}),
                      TrialCreated("tr1", 1, 1, {"x": 0.2}), TrialEnded("tr1", TrialStatus.USER_CANCELED, None,
                                                                         "canceled by the user"),
                      StatusChanged(status, message)])
    finally:
        store.close()
    if log_line:
        (exp_dir / "log").mkdir(exist_ok=True)
        (exp_dir / "log" / "manager.log").write_text(log_line + "\n[2024-01-01 00:00:09] INFO nnix.manager: bye\n")
    return exp_id


@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_log_trial_of_a_trial_that_never_started_says_so_and_why(tmp_path: Path, follow: list[str]) -> None:
    no_gpu = "No GPU found, but trialGpuNumber is 1"
    exp_id = _never_started(tmp_path, ExperimentStatus.ERROR, no_gpu)
    r = nnix("log", "trial", exp_id, "-T", "tr0", *follow, timeout=60)
    assert r.returncode == 1, r.stdout
    assert f"trial tr0 never started (WAITING): experiment {exp_id} is in ERROR: {no_gpu}" in r.stderr, r.stderr
    assert f"nnix resume {exp_id}" in r.stderr and "try again later" not in r.stderr
    canceled = nnix("log", "trial", exp_id, "-T", "tr1", *follow, timeout=60)
    assert "trial tr1 never started (USER_CANCELED): canceled by the user" in canceled.stderr, canceled.stderr
    assert "try again later" not in canceled.stderr


def test_log_trial_of_a_stopped_experiment_gives_the_last_waiting_reason(tmp_path: Path) -> None:
    why = "waits for 1 free GPU: GPU 0 runs 1 process not started by nnix"
    exp_id = _never_started(tmp_path, ExperimentStatus.STOPPED, "",
                            f"[2024-01-01 00:00:01] INFO nnix.manager: trials wait: {why}")
    r = nnix("log", "trial", exp_id, "-T", "tr0")
    assert r.returncode == 1
    assert f"trial tr0 never started (WAITING): experiment {exp_id} is STOPPED; it was waiting: {why}" in r.stderr, \
        r.stderr
    assert "try again later" not in r.stderr


SLOW = '''import os, sys, time
import nni
nni.get_next_parameter()
print("trial started", file=sys.stderr, flush=True)
while not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")):
    time.sleep(0.05)
for i in range(3):
    print(f"line {i}", file=sys.stderr, flush=True)
print("no newline at the end", file=sys.stderr, end="", flush=True)
sys.exit(3)
'''


def _follow(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([*NNIX, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=os.environ.copy())
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def test_follow_a_trial_until_it_ends_and_the_manager_log_until_the_manager_exits(tmp_path: Path) -> None:
    exp_id, exp_dir, _ = _create(_config(tmp_path, SLOW, maxTrialNumber=1))
    try:
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.RUNNING) == 1, 60.0)
        tid = next(iter(read_state(exp_dir).trials))
        trial, trial_out = _follow("log", "trial", exp_id, "-T", tid, "--follow")
        manager, manager_out = _follow("log", "manager", exp_id, "-f")
        wait_until(lambda: any("trial started" in ln for ln in trial_out), 60.0)
        wait_until(lambda: any(f"trial {tid} #0 started" in ln for ln in manager_out), 60.0)
        assert trial.poll() is None  # still following a running trial
        (tmp_path / "go").touch()
        assert trial.wait(timeout=60) == 0  # ends by itself once the trial has ended
        wait_until(lambda: "".join(trial_out).endswith("line 2\nno newline at the end"), 60.0)
        wait_until(lambda: any(f"trial {tid} #0 FAILED" in ln and "no newline at the end (exit code 3)" in ln
                          for ln in manager_out), 60.0)
        assert manager.poll() is None  # the manager still serves the finished experiment
    finally:
        assert nnix("stop", exp_id).returncode == 0
    assert manager.wait(timeout=60) == 0  # the manager exited: --follow ends
    wait_until(lambda: any("manager exits" in ln for ln in manager_out), 60.0)


@dataclass
class NodeLauncher(ProcessLauncher):
    """Environments on a "node" that does not share files with the manager: trials write under ``node/``,
    the manager records ``node1:<path>`` and keeps the copy its agents stream."""

    node: Path = Path()
    shares_files = False

    def place(self, spec: TrialSpec) -> TrialSpec:
        return TrialSpec(spec.trial_id, spec.command, spec.code_dir, self.node / spec.trial_id, spec.record, spec.env)

    def output_location(self, spec: TrialSpec) -> str:
        return f"node1:{self.node / spec.trial_id}"


def test_a_cluster_trial_gets_the_same_reason_and_log_trial_reads_the_managers_copy(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text(MNIST)
    exp_id, exp_dir = make_experiment(code, searchSpace={"lr": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand=f"{sys.executable} trial.py", maxTrialNumber=1,
                                      trainingService={"platform": "slurm"})
    launcher = NodeLauncher(node=tmp_path / "node")
    st = run_experiment(exp_dir, timeout=60, service_class=ProcessClusterService, launcher=launcher,
                        engine_poll_interval=0.1, end_grace=0.3, poll_interval=0.05, kill_grace=1.0)
    assert st.status is ExperimentStatus.DONE
    (t,) = st.trials.values()
    assert t.status is TrialStatus.FAILED and t.message == REASON
    assert t.output_dir == f"node1:{tmp_path / 'node' / t.trial_id}"
    out = nnix("log", "trial", exp_id, "-T", t.trial_id)
    assert out.returncode == 0, out.stderr
    assert str(exp_dir / "trials" / t.trial_id / "trial.stderr") in out.stderr  # the copy on this machine
    assert "Traceback (most recent call last):" in out.stdout and "RuntimeError: Error downloading" in out.stdout
    ls = json.loads(nnix("trial", "ls", exp_id, "--json").stdout)
    assert ls[0]["message"] == REASON and ls[0]["logPath"] == t.output_dir
    assert ls[0]["stderrPath"] == f"file://localhost:{exp_dir / 'trials' / t.trial_id}/trial.stderr"


def test_manager_log_rotates_and_follow_survives_a_rotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.cli import logs
    from nnix.host import logs as manager_logs

    monkeypatch.setattr(manager_logs, "LOG_MAX_BYTES", 4000)
    manager_logs.setup_manager_logging(tmp_path, "info")
    log = logging.getLogger("nnix.manager")
    try:
        for i in range(400):
            log.info("trial line %d %s", i, "x" * 40)
    finally:
        for h in logging.getLogger("nnix").handlers:
            h.close()
        logging.getLogger("nnix").handlers.clear()
    names = sorted(p.name for p in (tmp_path / "log").iterdir())
    assert names == ["manager.log", "manager.log.1", "manager.log.2", "manager.log.3"]
    assert all((tmp_path / "log" / n).stat().st_size <= 4000 for n in names)
    assert "trial line 399 " in (tmp_path / "log" / "manager.log").read_text()

    path = tmp_path / "log" / "manager.log"
    printed: list[str] = []
    steps = iter(range(4))

    def alive() -> bool:  # one rotation while following: the new file is printed from its start
        step = next(steps)
        if step == 1:
            os.replace(path, tmp_path / "log" / "manager.log.1")
            path.write_text("after rotation\n")
        return step < 3

    monkeypatch.setattr(logs, "FOLLOW_POLL", 0.0)
    logs.print_file(path, 2, True, alive, printed.append)
    assert printed[0].count("\n") == 2 and printed[-1] == "after rotation\n"


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a fifo"])
@pytest.mark.parametrize("tail", [None, 10])
def test_a_trial_output_file_made_a_fifo_or_a_link_is_refused_not_read(tmp_path: Path, kind: str,
                                                                       tail: int | None) -> None:
    """`nnix log trial` of a trial that replaced its trial.stderr with a FIFO (open() waited for a writer forever)
    or a link to /dev/zero (an endless read): a clear error at once."""
    from nnix.cli.logs import print_file
    from nnix.errors import NnixError

    path = tmp_path / "trial.stderr"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    shown: list[str] = []
    with pytest.raises(NnixError, match="not a regular file: nnix does not read it"):
        print_file(path, tail, follow=False, alive=lambda: False, write=shown.append)
    assert shown == []
