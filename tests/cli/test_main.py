"""The CLI verbs for scripts and for what went wrong, through real processes: live managers of any
status listed and stopped, a busy port named with its holder, a failed create leaving nothing,
plain untruncated tables in a pipe, the reason column fitted to a terminal, --json everywhere,
`trial ls --head/--tail` by best."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from nnix.core.events import MetricReported, StatusChanged, TrialCreated, TrialEnded, TrialStarted
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME, Registry, home, pid_alive, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.experiments import make_experiment

NNIX = [sys.executable, "-m", "nnix.cli.main"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_REASON = "ValueError: heldout_validation_loss diverged at epoch 17 " + "x" * 150 + " END-OF-REASON"


def nnix(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _config(tmp_path: Path, trial_body: str, **extra: Any) -> Path:
    (tmp_path / "trial.py").write_text("import nni, time, sys\np = nni.get_next_parameter()\n" + trial_body)
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} trial.py",
        "trialCodeDirectory": str(tmp_path),
        "trialConcurrency": 1,
        "tuner": {"name": "Random"},
        "trainingService": {"platform": "local"},
        **extra,
    }
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


def _recorded(tmp_path: Path, finals: list[Any], mode: str) -> str:
    """An experiment whose trials are recorded directly (no manager): one per final value, None = FAILED."""
    exp_id, exp_dir = make_experiment(
        tmp_path, searchSpace={"heldout_learning_rate": {"_type": "uniform", "_value": [0, 1]}},
        trialCommand="true", tuner={"name": "TPE", "classArgs": {"optimize_mode": mode}},
    )
    events: list[Any] = []
    for i, value in enumerate(finals):
        tid = f"tr{i:03d}"
        events += [TrialCreated(tid, i, i, {"heldout_learning_rate": 0.001 * (i + 1), "nested": {"width": 2 ** i}}),
                   TrialStarted(tid, "local-env", str(exp_dir / "trials" / tid))]
        if value is None:
            events.append(TrialEnded(tid, TrialStatus.FAILED, 1, LONG_REASON))
        else:
            events += [MetricReported(tid, MetricType.FINAL, 0, value, 0), TrialEnded(tid, TrialStatus.SUCCEEDED, 0)]
    events.append(StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached"))
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        store.append(events)
    finally:
        store.close()
    return exp_id


def _pty(args: list[str], columns: int) -> str:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0, out
    finally:
        os.close(master)
    return ANSI.sub("", out.decode(errors="replace")).replace("\r", "")


def test_a_finished_experiment_holding_a_port_is_listed_named_and_stopped(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "nni.report_final_result(p['x'])\n", maxTrialNumber=1)
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = r.stdout.split()[1]
    exp_dir = Path(Registry().get(exp_id).dir)
    try:
        wait_until(lambda: read_state(exp_dir, summary=True).status is ExperimentStatus.DONE, 60.0)
        st = read_state(exp_dir, summary=True)
        port = st.manager_port
        assert port and pid_alive(st.manager_pid)  # a finished background manager keeps serving, as NNI's
        listed = nnix("experiment", "list")
        row = next((line for line in listed.stdout.splitlines() if line.startswith(exp_id)), None)
        assert row is not None and "DONE" in row and f"http://127.0.0.1:{port}/" in row, listed.stdout
        as_json = json.loads(nnix("experiment", "list", "--json").stdout)
        assert [(e["id"], e["status"], e["port"]) for e in as_json] == [(exp_id, "DONE", port)]

        before = sorted(p.name for p in home().iterdir())
        for flags in ([], ["--foreground"]):
            busy = nnix("create", "--config", str(cfg), "--port", str(port), *flags)
            assert busy.returncode == 1, busy.stdout + busy.stderr
            assert f"port {port} is not idle: it is held by experiment {exp_id} (DONE" in busy.stderr
            assert f"nnix stop {exp_id}" in busy.stderr
            # a failed create leaves nothing behind: no registry entry, no directory
            assert [e.id for e in Registry().all()] == [exp_id]
            assert sorted(p.name for p in home().iterdir()) == before
    finally:
        stopped = nnix("stop", "--all")
    assert stopped.returncode == 0
    assert f"experiment {exp_id} (DONE): its manager on port {port} stopped" in stopped.stdout
    assert not pid_alive(st.manager_pid)
    assert read_state(exp_dir, summary=True).status is ExperimentStatus.DONE
    assert "no experiments running" in nnix("experiment", "list").stdout
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_port_held_by_another_process_names_it(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "nni.report_final_result(p['x'])\n", maxTrialNumber=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        busy = nnix("create", "--config", str(cfg), "--port", str(port))
    assert busy.returncode == 1
    assert f"port {port} is not idle: it is held by process {os.getpid()} (" in busy.stderr, busy.stderr
    assert Registry().all() == []


def test_piped_tables_are_plain_and_nothing_is_cut(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path, [0.5, None, 0.25], "minimize")
    out = nnix("trial", "ls", exp_id).stdout
    assert "│" not in out and "…" not in out
    lines = out.splitlines()
    assert lines[1].split() == ["trial", "no.", "status", "start", "end", "final", "parameters", "reason"]
    failed = next(line for line in lines if line.startswith("tr001"))
    assert failed.endswith(LONG_REASON) and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", failed)
    assert '{"heldout_learning_rate": 0.003, "nested": {"width": 4}}' in out
    listed = nnix("experiment", "list", "--all").stdout
    assert "…" not in listed and re.search(rf"^{exp_id} .* DONE .*\d\d:\d\d:\d\d .*maxTrialNumber reached$", listed,
                                           re.M), listed
    algos = nnix("algo", "list").stdout
    assert "│" not in algos and re.search(r"^tpe +tuner +nnix +nnix\.tuners\.\S+:\w+$", algos, re.M), algos


def test_the_reason_column_is_cut_to_the_terminal_width(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path, [0.5, None], "minimize")
    out = _pty([*NNIX, "trial", "ls", exp_id], columns=80)
    lines = [line for line in out.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "reason" in out and "END-OF-REASON" not in out
    row = next(line for line in lines if "tr001" in line)
    assert "FAILED" in row and "…" in row


def test_json_on_listing_and_status_verbs(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path, [0.5, None, 0.25], "minimize")
    listed = json.loads(nnix("experiment", "list", "--all", "--json").stdout)
    assert [(e["id"], e["status"], e["trials"], e["port"]) for e in listed] == [(exp_id, "DONE", 3, None)]
    assert json.loads(nnix("experiment", "list", "--json").stdout) == []
    status = json.loads(nnix("experiment", "status", exp_id, "--json").stdout)
    assert status["status"] == "DONE" and status["trials"] == {"SUCCEEDED": 2, "FAILED": 1}
    assert status["best"]["trialJobId"] == "tr002" and status["best"]["value"] == 0.25
    assert status["manager"]["alive"] is False
    trials = json.loads(nnix("trial", "ls", exp_id, "--json").stdout)
    assert [t["trialJobId"] for t in trials] == ["tr000", "tr001", "tr002"]
    assert trials[1]["message"] == LONG_REASON
    algos = json.loads(nnix("algo", "list", "--json").stdout)
    assert {"name": "tpe", "type": "tuner", "source": "nnix"}.items() <= next(
        a for a in algos if a["name"] == "tpe").items()


def test_experiment_status_prints_only_nnis_json_on_stdout(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path, [0.5, None, 0.25], "minimize")
    r = nnix("experiment", "status", exp_id)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"status": "DONE", "errors": [], "message": "maxTrialNumber reached"}
    assert re.search(r"^DONE +trials 3: 2 succeeded, 0 running, 0 waiting, 1 failed", r.stderr, re.M), r.stderr


def test_experiment_status_of_an_experiment_left_without_its_manager_is_consistent(tmp_path: Path) -> None:
    """Recorded RUNNING with two trials running and one waiting, and no manager (one that halted, e.g. on a full
    disk): the status word and the trials agree -- STOPPED, its trials left as they were, and what to do."""
    exp_id, exp_dir = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand="true")
    events: list[Any] = [StatusChanged(ExperimentStatus.RUNNING)]
    for i in range(3):
        events.append(TrialCreated(f"tr{i}", i, i, {"x": 0.1}))
        if i < 2:
            events.append(TrialStarted(f"tr{i}", "local-env", str(exp_dir / "trials" / f"tr{i}")))
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        store.append(events)
    finally:
        store.close()
    r = nnix("experiment", "status", exp_id)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "STOPPED"
    line = next(line for line in r.stderr.splitlines() if "trials 3" in line)
    assert line.startswith("STOPPED ") and "2 left running, 1 left waiting" in line, r.stderr
    assert "RUNNING" not in r.stderr and not re.search(r"\b2 running", r.stderr), r.stderr
    assert f"nnix resume {exp_id}" in r.stderr
    as_json = json.loads(nnix("experiment", "status", exp_id, "--json").stdout)
    assert as_json["status"] == "STOPPED" and as_json["manager"]["alive"] is False


def test_trial_ls_head_and_tail_are_by_best(tmp_path: Path) -> None:
    finals = [0.5, 0.1, None, 0.9, 0.3]
    (tmp_path / "min").mkdir()
    (tmp_path / "max").mkdir()
    low = _recorded(tmp_path / "min", finals, "minimize")
    high = _recorded(tmp_path / "max", finals, "maximize")

    def ids(exp_id: str, *flags: str) -> list[str]:
        r = nnix("trial", "ls", exp_id, *flags, "--json")
        assert r.returncode == 0, r.stderr
        return [t["trialJobId"] for t in json.loads(r.stdout)]

    assert ids(low, "--head", "2") == ["tr001", "tr004"]  # minimize: the smallest first
    assert ids(low, "--tail", "2") == ["tr000", "tr003"]  # the worst, worst last
    assert ids(high, "--head", "2") == ["tr003", "tr000"]
    assert ids(high, "--tail", "1") == ["tr001"]
    table = nnix("trial", "ls", low, "--head", "1").stdout
    assert "tr001" in table and "tr003" not in table


def test_experiment_export_json_is_the_whole_list_written_a_row_at_a_time(tmp_path: Path) -> None:
    (tmp_path / "some").mkdir()
    (tmp_path / "none").mkdir()
    some = _recorded(tmp_path / "some", [0.5, None, {"default": 0.9, "acc": [1, 2]}], "maximize")
    none = _recorded(tmp_path / "none", [None], "maximize")
    out = tmp_path / "out.json"
    assert nnix("experiment", "export", some, "--type", "json", "--filename", str(out), "-i").returncode == 0
    values: tuple[tuple[int, Any], ...] = ((0, 0.5), (2, {"default": 0.9, "acc": [1, 2]}))
    rows = [{"parameter": {"heldout_learning_rate": 0.001 * (i + 1), "nested": {"width": 2 ** i}}, "value": v,
             "trialJobId": f"tr{i:03d}", "intermediate": []}
            for i, v in values]
    assert out.read_text() == json.dumps(rows, indent=2)
    assert nnix("experiment", "export", none, "--type", "json", "--filename", str(out)).returncode == 0
    assert out.read_text() == "[]"
