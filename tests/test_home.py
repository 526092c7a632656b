"""Where experiments live: registry and experiment files are the owner's only; the reason a manager left."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from nnix.core.state import ExperimentState
from nnix.errors import NnixError
from nnix.home import STORE_NAME, Registry, pid_alive
from nnix.testing.experiments import make_experiment


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_experiment_and_the_registry_are_the_owners_only(tmp_path: Path, nnix_home: Path) -> None:
    os.umask(0o022)
    (tmp_path / "t.py").write_text("")
    _, d = make_experiment(tmp_path, searchSpace={"x": {"_type": "choice", "_value": [1]}},
                           trialCommand=f"{sys.executable} t.py")
    assert _mode(d) == 0o700
    assert _mode(d / STORE_NAME) == 0o600
    reg = Registry()
    assert _mode(reg.path) == 0o600 and _mode(reg.path.parent) == 0o700
    assert _mode(reg.path.with_suffix(".lock")) == 0o600


def test_loose_modes_of_an_older_experiment_are_tightened(tmp_path: Path) -> None:
    from nnix.home import tighten_permissions

    d = tmp_path / "exp"
    (d / "db").mkdir(parents=True)
    for name in ("nnix.sqlite", "nnix.sqlite-wal", "nnix.sqlite-shm"):
        (d / "db" / name).write_bytes(b"")
        os.chmod(d / "db" / name, 0o644)
    os.chmod(d / "db", 0o755)
    os.chmod(d, 0o755)
    changed = tighten_permissions(d)
    assert len(changed) == 5 and all("->" in c for c in changed)
    assert _mode(d) == 0o700 and _mode(d / "db") == 0o700
    assert all(_mode(d / "db" / n) == 0o600 for n in ("nnix.sqlite", "nnix.sqlite-wal", "nnix.sqlite-shm"))
    assert tighten_permissions(d) == []


def test_the_reason_file_is_written_in_place_read_and_cleared(tmp_path: Path) -> None:
    from nnix.core.manager_error import (
        apply_manager_error,
        clear_manager_error,
        prepare_manager_error,
        read_manager_error,
        write_manager_error,
    )

    prepare_manager_error(tmp_path)
    path = tmp_path / "manager.error"
    size = path.stat().st_size
    assert size > 0 and read_manager_error(tmp_path) is None and _mode(path) == 0o600
    ino = path.stat().st_ino
    assert write_manager_error(tmp_path, "the disk holding X is full", "free space", pid=42)
    assert path.stat().st_size == size and path.stat().st_ino == ino  # no growth, no new file
    error = read_manager_error(tmp_path)
    assert error is not None and error["message"] == "the disk holding X is full" and error["pid"] == 42
    st = ExperimentState(message="")
    apply_manager_error(st, tmp_path)
    assert "the disk holding X is full" in st.message and "free space" in st.message and len(st.errors) == 1
    clear_manager_error(tmp_path)
    assert read_manager_error(tmp_path) is None and path.stat().st_size == size


def test_read_state_serves_dropped_series_after_its_store_is_closed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An ended trial's series beyond the held budget stays in the store: the state read_state returns
    reads it from there when asked, although read_state closed the store it folded."""
    from nnix.core import state as state_mod
    from nnix.core.events import MetricReported, TrialCreated, TrialEnded
    from nnix.core.status import MetricType, TrialStatus
    from nnix.home import STORE_NAME, read_state
    from nnix.store.sqlite import SqliteStore

    monkeypatch.setattr(state_mod, "HOLD_ENDED_METRICS", 0)
    store = SqliteStore(tmp_path / STORE_NAME)
    store.append([TrialCreated("a", 0, 0, {"x": 1})])
    store.append([MetricReported("a", MetricType.PERIODICAL, k, k / 2, k, 0) for k in range(5)])
    store.append([MetricReported("a", MetricType.FINAL, 0, 9.0, 5, 0), TrialEnded("a", TrialStatus.SUCCEEDED, 0)])
    store.close()
    t = read_state(tmp_path).trials["a"]
    assert t.held is None  # not in memory
    assert [m.value for m in t.intermediate] == [0.0, 0.5, 1.0, 1.5, 2.0] and t.final_value == 9.0
    assert t.n_inter == 5 and list(t.inter_values) == [0.0, 0.5, 1.0, 1.5, 2.0]


# --- one manager per experiment: the manager lock ---------------------------------------------------------------
_HOLD = """
import sys, time
from pathlib import Path
from nnix.errors import ExperimentBusyError
from nnix.home import ManagerLock
go = float(sys.argv[2])
while time.time() < go:
    time.sleep(0.001)
try:
    lock = ManagerLock.acquire(Path(sys.argv[1]), "exp1", "resume")
except ExperimentBusyError as e:
    print("BUSY", e.message, flush=True)
    sys.exit(3)
lock.record(port=4242)
print("HELD", flush=True)
time.sleep(float(sys.argv[3]))
"""


def test_of_concurrent_manager_starts_exactly_one_gets_the_experiment(tmp_path: Path) -> None:
    """N processes that try to take one experiment's manager lock at the same instant: exactly one holds it, every
    other fails with a clear ExperimentBusyError naming the holder; 20 rounds."""
    import subprocess
    import sys
    import time

    for _ in range(20):
        go = time.time() + 0.3
        procs = [subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), str(go), "0.6"],
                                  stdout=subprocess.PIPE, text=True) for _ in range(4)]
        outs = [(p.communicate(timeout=60)[0], p.returncode) for p in procs]
        held = [o for o, rc in outs if rc == 0]
        busy = [o for o, rc in outs if rc == 3]
        assert len(held) == 1 and len(busy) == 3, outs
        holder_pid = next(p.pid for p, (_, rc) in zip(procs, outs, strict=True) if rc == 0)
        for out in busy:  # the holder had written its pid before the others looked, or it is not named yet
            assert "experiment exp1 already has a manager: another nnix manager is" in out
            assert f"(pid {holder_pid}" in out or "(pid" not in out


def test_the_lock_is_freed_by_kill_9_and_is_not_inherited_by_children(tmp_path: Path) -> None:
    """A manager killed with SIGKILL leaves no lock behind, even while a child it started (a trial) still runs;
    a reader of the lock file sees the live holder and never takes the lock itself."""
    import signal
    import subprocess
    import sys

    from nnix.errors import ExperimentBusyError
    from nnix.home import ManagerLock, read_lock_holder

    code = _HOLD.replace("time.sleep(float(sys.argv[3]))",
                         "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\nprint(child.pid, flush=True)\n"
                         "time.sleep(float(sys.argv[3]))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "0", "60"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "HELD"
    child = int(proc.stdout.readline())
    try:
        holder = read_lock_holder(tmp_path)
        assert holder is not None and holder.pid == proc.pid and holder.port == 4242 and holder.action == "resume"
        with pytest.raises(ExperimentBusyError) as busy:
            ManagerLock.acquire(tmp_path, "exp1", "view")
        assert f"pid {proc.pid}, port 4242" in busy.value.message and "nnix stop exp1" in (busy.value.hint or "")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert pid_alive(child)  # the trial outlives its manager...
        assert read_lock_holder(tmp_path) is None
        with ManagerLock.acquire(tmp_path, "exp1", "resume"):  # ...and holds no lock: a resume takes it
            mine = read_lock_holder(tmp_path)
            assert mine is not None and mine.pid == os.getpid() and mine.action == "resume"
    finally:
        proc.kill()
        os.kill(child, signal.SIGKILL)
    assert read_lock_holder(tmp_path) is None  # released: the file says no holder


def test_a_lock_file_that_is_a_fifo_or_link_does_not_hang_a_reader(tmp_path: Path) -> None:
    from nnix.home import LOCK_FILE, ManagerLock, read_lock_holder

    os.mkfifo(tmp_path / LOCK_FILE)
    assert read_lock_holder(tmp_path) is None
    with pytest.raises(NnixError, match="not a regular file"):
        ManagerLock.acquire(tmp_path, "exp1", "resume")
    (tmp_path / LOCK_FILE).unlink()
    (tmp_path / "elsewhere").write_text('{"pid": 1}')
    (tmp_path / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    assert read_lock_holder(tmp_path) is None
    with pytest.raises(NnixError, match="cannot open the manager lock"):
        ManagerLock.acquire(tmp_path, "exp1", "resume")


def test_a_lock_still_held_by_a_manager_that_reads_as_gone_is_waited_for(tmp_path: Path) -> None:
    """A manager killed with kill -9 reads as gone (a zombie) while its other threads still hold its files, the
    lock among them: a start right after waits for it (a resume after kill -9 failed 'already has a manager' on a
    loaded machine); with no patience it is refused."""
    import subprocess
    import sys

    from nnix.errors import ExperimentBusyError
    from nnix.home import LOCK_FILE, ManagerLock

    gone = subprocess.Popen(["true"])
    gone.wait()
    code = ("import os, sys, time\nfrom pathlib import Path\nfrom nnix.home import ManagerLock, LOCK_FILE\n"
            "lock = ManagerLock.acquire(Path(sys.argv[1]), 'x', 'resume')\n"
            f"os.pwrite(lock._fd, b'{{\"pid\": {gone.pid}}}'.ljust(200), 0)\n"
            "print('held', flush=True)\nsys.stdin.readline()\ntime.sleep(0.5)\n")
    dying = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert dying.stdout is not None and dying.stdin is not None
    try:
        assert dying.stdout.readline() == "held\n"
        assert str(gone.pid) in (tmp_path / LOCK_FILE).read_text()
        with pytest.raises(ExperimentBusyError, match="already has a manager"):
            ManagerLock.acquire(tmp_path, "exp1", "resume", patience=0)
        dying.stdin.write("go\n")
        dying.stdin.flush()  # it lets go half a second later
        with ManagerLock.acquire(tmp_path, "exp1", "resume", patience=60):
            pass
    finally:
        dying.kill()
        dying.wait(30)
