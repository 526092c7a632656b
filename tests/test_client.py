"""nnix.client: what `nnix stop` reads without importing the Ray head's module is that module's record; an import
file and its records checked before anything is sent (its size, its JSON, the records' schema), a 413 said
plainly."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nnix import client
from nnix.errors import ManagerUnreachableError, NnixError
from nnix.home import read_state
from nnix.limits import MAX_REQUEST_BYTES
from nnix.services import rayhead
from nnix.testing.experiments import make_experiment
from nnix.testing.spaces import UNIT


def test_the_ray_head_record_checked_before_importing_rayhead_is_rayheads() -> None:
    assert client.RAY_HEAD_RECORD == rayhead.RECORD


def test_the_engine_record_checked_before_importing_any_engine_is_the_cluster_services() -> None:
    from nnix.services.cluster import RECORD

    assert client.ENGINE_RECORD == RECORD


# --- experiment import: the file, its size, the request ------------------------------------------------------------


def test_an_import_file_too_large_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # 48 MB, sparse: nothing is written but its size
        f.truncate(48 * 1024 * 1024)
    with pytest.raises(NnixError) as e:
        client.read_import_file(big)
    assert "48.0 MiB" in e.value.message and "too large to import" in e.value.message, e.value.message
    assert e.value.hint and "split" in e.value.hint


@pytest.mark.parametrize("text,expected", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ('[{"parameter": {"x": 1, "x": 2}, "value": 1}]', "duplicate key"),
    ("{not json", "not JSON"),
    ("\udcff", "UTF-8"),
])
def test_an_unreadable_import_file_is_a_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(NnixError) as e:
        client.read_import_file(path)
    assert expected in e.value.message and str(path) in e.value.message, e.value.message
    with pytest.raises(NnixError, match="cannot read"):
        client.read_import_file(tmp_path / "missing.json")


def test_records_over_the_request_limit_are_refused_before_anything_is_sent(tmp_path: Path) -> None:
    _, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    eid = read_state(d).experiment_id
    n = MAX_REQUEST_BYTES // 40 + 1  # each record is more than 40 bytes as JSON
    with pytest.raises(NnixError) as e:
        client.import_records(eid, [{"parameter": {"x": 0.123456}, "value": 0.5}] * n)
    assert "one import is at most 8.0 MiB" in e.value.message and e.value.hint and "split" in e.value.hint
    with pytest.raises(NnixError, match=r"import record \[0\]: 'value'"):  # checked as the manager checks it
        client.import_records(eid, [{"parameter": {"x": 0.5}, "value": 10**400}])
    assert read_state(d).imported == []
    assert client.import_records(eid, [{"parameter": {"x": 0.5}, "value": 0.25}]) == 1  # no manager: into the store
    assert read_state(d).imported == [{"parameter": {"x": 0.5}, "value": 0.25}]


def test_a_request_over_the_limit_is_never_sent_and_a_413_is_said_plainly() -> None:
    hits: list[int] = []

    class TooLarge(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(int(self.headers.get("content-length") or 0))
            body = json.dumps({"error": "the body must be at most 8388608 bytes"}).encode()
            self.send_response(413)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TooLarge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        with pytest.raises(NnixError) as e:
            client.rest_call(port, "/experiment/import-data", "POST", ["x" * MAX_REQUEST_BYTES])
        assert not isinstance(e.value, ManagerUnreachableError) and "more than the manager takes" in e.value.message
        assert hits == []  # refused here: nothing sent
        with pytest.raises(NnixError) as e:
            client.rest_call(port, "/experiment/import-data", "POST", [1])
        assert hits == [3] and not isinstance(e.value, ManagerUnreachableError)
        assert "too large (at most 8.0 MiB)" in e.value.message, e.value.message
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("text,expected", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 100 levels"),
    ('[{"parameter": {"x": 0.5}, "value": 1' + "0" * 400 + "}]", "import record [0]: 'value'"),
    ('[{"parameter": {"x": 0.5}, "value": 0.1}, {"parameter": {"x": 0.5}, "value": "nan"}]',
     "import record [1]: 'value'"),
])
def test_nnix_experiment_import_says_what_is_wrong_without_a_traceback(tmp_path: Path, text: str,
                                                                       expected: str) -> None:
    _, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    eid = read_state(d).experiment_id
    path = tmp_path / "data.json"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-c", "from nnix.cli.main import main; main()", "experiment", "import", eid,
                        "-f", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and read_state(d).imported == []


# --- nnix stop / experiment delete after the manager died ------------------------------------------------------------


def _killed_with_running_trials(tmp_path: Path) -> tuple[str, Path, dict[str, int]]:
    """A local experiment whose two trials run (held at a gate that never opens) when its manager is killed -9."""
    from nnix.testing import wait_until
    from nnix.testing.faults import created_id, exp_dir_of, fast_reporting_config, kill_manager, nnix

    cfg = fast_reporting_config(tmp_path, trials=2, concurrency=2, metrics=5, gate=tmp_path / "never", before_gate=2)
    res = nnix("create", "--config", str(cfg), "--port", "0")
    assert res.returncode == 0, res.stderr
    exp_id = created_id(res.stdout)
    exp_dir = exp_dir_of(exp_id)

    def running() -> bool:
        trials = read_state(exp_dir).trials.values()
        return len(trials) == 2 and all(t.status.value == "RUNNING" and len(t.metrics) == 2 and t.pid
                                        for t in trials)

    wait_until(running, 120, "both trials running")
    pids = {t.trial_id: int(t.pid or 0) for t in read_state(exp_dir).trials.values()}
    assert kill_manager(exp_id)
    return exp_id, exp_dir, pids


def test_stop_after_the_manager_died_kills_its_local_trials_and_records_them_canceled(tmp_path: Path) -> None:
    from nnix.home import pid_alive
    from nnix.model.status import ExperimentStatus, TrialStatus
    from nnix.testing import wait_until

    exp_id, exp_dir, pids = _killed_with_running_trials(tmp_path)
    assert all(pid_alive(p) for p in pids.values())  # trials outlive their manager (for a resume)
    said = client.stop_experiment(exp_id)
    assert said.startswith(f"experiment {exp_id} was not running (its manager had died); marked STOPPED"), said
    assert f"local: killed 2 trial(s) ({', '.join(sorted(pids))})" in said, said
    assert "2 trial(s) left running recorded USER_CANCELED" in said, said
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), 10, "the trials' processes to be gone")
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.STOPPED
    assert [t.status for t in st.trials.values()] == [TrialStatus.USER_CANCELED] * 2
    again = client.stop_experiment(exp_id)  # nothing left: nothing done, nothing said
    assert again == f"experiment {exp_id} is not running (STOPPED; no manager serves it)", again


def test_delete_after_the_manager_died_kills_its_local_trials(tmp_path: Path) -> None:
    from nnix.home import pid_alive
    from nnix.testing import wait_until
    from nnix.testing.faults import nnix

    exp_id, exp_dir, pids = _killed_with_running_trials(tmp_path)
    res = nnix("experiment", "delete", exp_id, "--yes")
    assert res.returncode == 0, res.stderr
    assert f"deleted {exp_id}; local: killed 2 trial(s)" in res.stdout, res.stdout
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), 10, "the trials' processes to be gone")
    assert not exp_dir.exists()


_HOLDER = ("import sys\nfrom pathlib import Path\nfrom nnix.home import ManagerLock\n"
           "lock = ManagerLock.acquire(Path(sys.argv[1]), 'x', 'resume')\n"
           "print('held', flush=True)\nsys.stdin.read()\n")


def test_stop_and_delete_never_end_the_work_of_a_manager_that_holds_the_experiment(tmp_path: Path) -> None:
    """A manager that took the experiment after `stop`/`delete` looked (its lock held, the store not yet saying
    so): nothing is ended, marked or removed; both say who holds it."""
    from nnix.errors import ExperimentBusyError
    from nnix.model.events import StatusChanged
    from nnix.model.status import ExperimentStatus
    from nnix.store.sqlite import SqliteStore

    exp_id, exp_dir = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    store = SqliteStore(exp_dir / "db" / "nnix.sqlite")
    try:
        store.append([StatusChanged(ExperimentStatus.RUNNING)])  # as a killed manager leaves it
    finally:
        store.close()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(exp_dir)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ExperimentBusyError, match=f"already has a manager.*pid {holder.pid}"):
            client.stop_experiment(exp_id)
        with pytest.raises(ExperimentBusyError, match=f"already has a manager.*pid {holder.pid}"):
            client.delete_experiment(exp_id, exp_dir)
        assert exp_dir.is_dir() and read_state(exp_dir).status is ExperimentStatus.RUNNING
    finally:
        holder.kill()
        holder.wait(30)
    assert "marked STOPPED" in client.stop_experiment(exp_id)


def test_no_manager_starts_while_stop_ends_a_dead_managers_work(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """While `nnix stop` ends what a dead manager left (its engines' work, its trials), the experiment's lock is
    held: a resume at that moment is refused with a clear message instead of adopting what is being ended."""
    from nnix.model.events import StatusChanged
    from nnix.model.status import ExperimentStatus
    from nnix.store.sqlite import SqliteStore

    exp_id, exp_dir = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    store = SqliteStore(exp_dir / "db" / "nnix.sqlite")
    try:
        store.append([StatusChanged(ExperimentStatus.RUNNING)])
    finally:
        store.close()
    seen: list[str] = []

    def a_resume_meanwhile(*args: Any, **kwargs: Any) -> str:
        r = subprocess.run([sys.executable, "-c", "import sys\nfrom pathlib import Path\n"
                            "from nnix.errors import ExperimentBusyError\nfrom nnix.home import ManagerLock\n"
                            "try:\n    ManagerLock.acquire(Path(sys.argv[1]), sys.argv[2], 'resume')\n"
                            "except ExperimentBusyError as e:\n    print(e)\n", str(exp_dir), exp_id],
                           capture_output=True, text=True, timeout=60)
        seen.append(r.stdout)
        return ""

    monkeypatch.setattr(client, "_stop_engines", a_resume_meanwhile)
    assert "marked STOPPED" in client.stop_experiment(exp_id)
    assert seen and f"experiment {exp_id} is busy: `nnix stop` works on it (pid " in seen[0], seen
    assert "hint: try again once it has finished" in seen[0]
