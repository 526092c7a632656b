"""The fault suite, through real processes: kill -9 of the manager at seeded random points with resume
(0 metrics lost, 0 duplicated), a disk that fills up under a running experiment (a small tmpfs: root only,
skipped loudly otherwise), and damaged stores (a clear error naming the file, nothing written)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import STORE_NAME, pid_alive, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.experiments import make_experiment
from nnix.testing.faults import (
    audit,
    created_id,
    exp_dir_of,
    fast_reporting_config,
    kill_rounds,
    nnix,
    small_tmpfs,
)

ROUNDS = 6  # bench/faults.py runs more
SEED = 20240611


def test_kill_9_at_random_points_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    metrics = 600
    cfg = fast_reporting_config(tmp_path, trials=12, concurrency=4, metrics=metrics)
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = created_id(r.stdout)
    delays = kill_rounds(exp_id, ROUNDS, SEED)
    assert len(delays) == ROUNDS
    final = nnix("resume", exp_id, "--foreground", "--port", "0")
    assert final.returncode == 0, final.stderr
    d = exp_dir_of(exp_id)
    st = read_state(d)
    assert st.status is ExperimentStatus.DONE
    a = audit(d, metrics)
    assert a.trials == 12 and a.succeeded == 12, [t.message for t in st.trials.values()]
    assert (a.lost, a.duplicated, a.phantom) == (0, 0, 0), a
    assert a.lines == a.recorded and a.lines >= 12 * (metrics + 1)


def test_kill_9_mid_group_commit_keeps_every_acknowledged_metric(tmp_path: Path) -> None:
    """Eight trials report as fast as they can, so each store transaction holds the lines of many trials (group
    commit). The manager is killed -9 right after its REST API said which metrics it holds (what it counts
    as recorded): the store holds every one of them, each trial's stored lines are a whole prefix of its
    channel (a transaction is kept whole or not at all), and a resume ends with nothing lost or doubled."""
    metrics = 3000
    cfg = fast_reporting_config(tmp_path, trials=8, concurrency=8, metrics=metrics)
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = created_id(r.stdout)
    d = exp_dir_of(exp_id)
    port = read_state(d, summary=True).manager_port
    shown: Counter[str] = Counter()

    def mid_stream() -> bool:  # metrics of several trials recorded, none of the trials done yet
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/metric-data", timeout=30) as resp:
            rows = json.loads(resp.read())
        shown.clear()
        shown.update(row["trialJobId"] for row in rows)
        return len(shown) >= 2 and sum(shown.values()) >= 200

    wait_until(mid_stream, 120, "metrics of two trials recorded")
    os.kill(read_state(d, summary=True).manager_pid or 0, 9)
    wait_until(lambda: not pid_alive(read_state(d, summary=True).manager_pid), 30, "the manager gone")
    store = SqliteStore(d / STORE_NAME, create=False)
    try:
        stored: dict[str, list[int]] = {}
        for s in store.read(kinds=("MetricReported",)):
            stored.setdefault(str(s.event.trial_ref), []).append(s.event.index)  # type: ignore[attr-defined]
    finally:
        store.close()
    for tid, n in shown.items():
        assert len(stored.get(tid, [])) >= n, (tid, n, len(stored.get(tid, [])))  # acknowledged: kept
    for tid, indexes in stored.items():
        assert sorted(indexes) == list(range(len(indexes))), tid  # whole transactions only: a prefix
    final = nnix("resume", exp_id, "--foreground", "--port", "0")
    assert final.returncode == 0, final.stderr
    a = audit(d, metrics)
    assert (a.lost, a.duplicated, a.phantom) == (0, 0, 0), a
    assert a.trials == 8 and a.succeeded == 8


# --- a full disk ----------------------------------------------------------------------------------


def fill(path: Path) -> None:
    """Write ``path`` until the file system says ENOSPC."""
    chunk = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def test_a_full_disk_stops_the_manager_with_its_reason_and_resume_loses_nothing(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        gate = tmp_path / "go"  # outside the full disk: the trials wait for it before reporting the rest
        metrics = 50
        cfg = fast_reporting_config(tmp_path, trials=2, concurrency=2, metrics=metrics, gate=gate, before_gate=5,
                                    working_dir=disk)
        r = nnix("create", "--config", str(cfg), "--port", "0")
        assert r.returncode == 0, r.stderr
        exp_id = created_id(r.stdout)
        d = exp_dir_of(exp_id)
        assert d.is_relative_to(disk)

        def both_waiting_at_the_gate() -> bool:
            st = read_state(d)
            return st.count(TrialStatus.RUNNING) == 2 and all(len(t.metrics) == 5 for t in st.trials.values())

        wait_until(both_waiting_at_the_gate, 60, "two trials with 5 metrics each")
        st = read_state(d)
        manager_pid = st.manager_pid
        trial_pids = [t.pid for t in st.trials.values()]
        fill(disk / "filler")

        up = nnix("update", "concurrency", exp_id, "--value", "2")  # the manager must record it: no room
        assert up.returncode != 0 and "full" in up.stderr, up.stderr
        wait_until(lambda: not pid_alive(manager_pid), 30, "the manager to stop")
        assert all(pid_alive(p) for p in trial_pids)  # trials keep running, as after a crash

        status = nnix("experiment", "status", exp_id)
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)  # NNI's JSON alone on stdout
        assert shown["status"] == "STOPPED" and "is full" in shown["message"], shown
        # the human lines agree with it: the trials were left running, a resume re-attaches them
        assert re.search(r"^STOPPED +trials 2/2: 0 succeeded, 2 left running", status.stderr, re.M), status.stderr
        assert f"nnix resume {exp_id}" in status.stderr
        ls = nnix("trial", "ls", exp_id)
        assert ls.returncode == 0 and "is full" in ls.stdout + ls.stderr
        assert "Traceback" not in status.stderr + ls.stderr + up.stderr

        (disk / "filler").unlink()  # space is back
        gate.write_text("")
        res = nnix("resume", exp_id, "--foreground", "--port", "0")
        assert res.returncode == 0, res.stderr
        st = read_state(d)
        assert st.status is ExperimentStatus.DONE and "full" not in st.message
        assert [t.pid for t in st.trials.values()] == trial_pids  # re-attached, not re-run
        a = audit(d, metrics)
        assert a.succeeded == 2 and not a.irregular and (a.lost, a.duplicated, a.phantom) == (0, 0, 0), a
        assert a.recorded == 2 * (metrics + 1)


# --- a damaged store --------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes((i * 37 + 11) % 256 for i in range(len(data))))
    else:
        path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("how", ["empty", "garbage", "truncated"])
def test_a_damaged_store_is_named_and_left_alone_by_every_verb(tmp_path: Path, how: str) -> None:
    (tmp_path / "t.py").write_text("")
    exp_id, d = make_experiment(tmp_path, searchSpace={"x": {"_type": "choice", "_value": list(range(300))}},
                                trialCommand="true", experimentName="x" * 2000)
    store = d / STORE_NAME
    assert store.stat().st_size >= 8192  # big enough that "truncated" keeps a valid header
    _damage(store, how)
    before = store.read_bytes()
    for verb in (["experiment", "status", exp_id], ["trial", "ls", exp_id], ["resume", exp_id, "--port", "0"],
                 ["view", exp_id, "--port", "0"]):
        r = nnix(*verb)
        assert r.returncode != 0, (verb, r.stdout)
        assert "Traceback" not in r.stdout + r.stderr, r.stderr
        assert str(store) in r.stderr and "backup" in r.stderr, (verb, r.stderr)
        assert store.read_bytes() == before, verb  # no schema, no header written into it
    assert not (d / "db" / "nnix.sqlite-wal").exists() or how != "empty"


def test_permissions_of_an_older_experiment_are_tightened_on_resume(tmp_path: Path) -> None:
    cfg = fast_reporting_config(tmp_path, trials=1, concurrency=1, metrics=3)
    r = nnix("create", "--config", str(cfg), "--port", "0", "--foreground")
    assert r.returncode == 0, r.stderr
    d = next(p for p in (Path(os.environ["NNIX_HOME"])).iterdir() if (p / STORE_NAME).exists())
    os.chmod(d, 0o755)
    os.chmod(d / STORE_NAME, 0o644)
    res = nnix("resume", d.name, "--port", "0", "--foreground")
    assert res.returncode == 0, res.stderr
    assert d.stat().st_mode & 0o777 == 0o700 and (d / STORE_NAME).stat().st_mode & 0o777 == 0o600
    assert "permissions tightened" in (d / "log" / "manager.log").read_text()
    shutil.rmtree(d)
