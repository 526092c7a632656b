"""The fault suite's parts (tests/cli/test_faults.py and bench/faults.py): a fast-reporting experiment,
``kill -9`` of its manager at points drawn from a seeded generator followed by ``nnix resume``, and an audit
that compares the store with every trial's channel file (``metrics.jsonl``): what a trial wrote and the store
lacks is lost, what the store holds twice is duplicated."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnix.home import STORE_NAME, Registry, pid_alive, read_state
from nnix.model.events import MetricReported
from nnix.model.status import MetricType, TrialStatus
from nnix.store.sqlite import SqliteStore
from nnix.testing.waiting import wait_until

NNIX = [sys.executable, "-m", "nnix.cli.main"]


def nnix(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def created_id(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("Experiment ") and "started" in line:
            return line.split()[1]
    raise AssertionError(f"no experiment id in: {out!r}")


def fast_reporting_config(
    work: Path,
    *,
    trials: int,
    concurrency: int,
    metrics: int,
    gate: Path | None = None,
    before_gate: int = 0,
    working_dir: Path | None = None,
) -> Path:
    """An experiment whose trials each report ``metrics`` intermediate results as fast as they can (a short
    pause every 10), then a final one. With ``gate``, each trial first reports ``before_gate`` results and
    waits until the file ``gate`` exists."""
    body = ["import nni, os, time", "p = nni.get_next_parameter()", "i = 0"]
    if gate is not None:
        body += [
            f"while i < {before_gate}:",
            "    nni.report_intermediate_result(i); i += 1",
            f"while not os.path.exists({str(gate)!r}):",
            "    time.sleep(0.02)",
        ]
    body += [
        f"while i < {metrics}:",
        "    nni.report_intermediate_result(i); i += 1",
        "    if i % 10 == 0: time.sleep(0.001)",
        "nni.report_final_result(p['x'])",
    ]
    (work / "fast_trial.py").write_text("\n".join(body) + "\n")
    cfg: dict[str, Any] = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} fast_trial.py",
        "trialCodeDirectory": str(work),
        "trialConcurrency": concurrency,
        "maxTrialNumber": trials,
        "tuner": {"name": "Random", "classArgs": {"seed": 7}},
        "trainingService": {"platform": "local"},
    }
    if working_dir is not None:
        cfg["experimentWorkingDirectory"] = str(working_dir)
    path = work / "fast.yml"
    path.write_text(json.dumps(cfg))
    return path


def exp_dir_of(exp_id: str) -> Path:
    return Path(Registry().get(exp_id).dir)


def kill_manager(exp_id: str) -> bool:
    """``kill -9`` the experiment's manager; False if none was alive."""
    pid = read_state(exp_dir_of(exp_id), summary=True).manager_pid
    if not pid_alive(pid):
        return False
    assert pid is not None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    wait_until(lambda: not pid_alive(pid), 30, f"manager {pid} gone after kill -9")
    return True


def kill_rounds(exp_id: str, rounds: int, seed: int, low: float = 0.15, high: float = 0.9) -> list[float]:
    """``rounds`` times: let the manager run for a delay drawn from ``random.Random(seed)``, ``kill -9``
    it, and ``nnix resume`` it (daemon). Returns the delays (the kill points)."""
    rng = random.Random(seed)
    delays = []
    for r in range(rounds):
        if r:
            res = nnix("resume", exp_id, "--port", "0")
            if res.returncode != 0:
                raise AssertionError(f"resume {r} failed: {res.stderr}")
        delay = rng.uniform(low, high)
        delays.append(delay)
        time.sleep(delay)  # the fault's position in the run, not a wait for an event
        kill_manager(exp_id)
    return delays


@dataclass
class Audit:
    trials: int = 0
    succeeded: int = 0
    lines: int = 0  # metric lines in the trials' channel files
    recorded: int = 0  # MetricReported events in the store
    lost: int = 0  # channel lines the store lacks
    duplicated: int = 0  # extra copies of a channel line in the store
    phantom: int = 0  # stored metrics with no channel line
    irregular: list[str] = field(default_factory=list)  # trials whose metrics are not 0..n-1 plus one final
    reruns: int = 0  # earlier attempts set aside (a trial started again because its start was not recorded)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.phantom == 0


def channel_lines(metrics_file: Path) -> set[int]:
    """The indexes of the complete, JSON-object lines of a channel file (what the reader counts)."""
    try:
        data = metrics_file.read_bytes()
    except FileNotFoundError:
        return set()
    out = set()
    for i, raw in enumerate(data.split(b"\n")[:-1]):
        try:
            if raw.strip() and isinstance(json.loads(raw), dict):
                out.add(i)
        except ValueError:
            continue
    return out


def audit(exp_dir: Path, metrics: int | None = None, locate: Callable[[str], Path] = Path) -> Audit:
    """Compare the store with every trial's channel file; ``locate``: where a trial's recorded ``output_dir`` is
    here (SSH hosts of a lab share this file system: ``host:path`` -> ``path``)."""
    state = read_state(exp_dir)
    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    try:
        stored = store.read(kinds=("MetricReported",))
    finally:
        store.close()
    per_trial: dict[str, Counter[int]] = {}
    for s in stored:
        ev = s.event
        assert isinstance(ev, MetricReported)
        per_trial.setdefault(ev.trial_id, Counter())[ev.index] += 1
    a = Audit(trials=len(state.trials), recorded=len(stored))
    for t in state.trials.values():
        a.succeeded += t.status is TrialStatus.SUCCEEDED
        got = per_trial.get(t.trial_id, Counter())
        if t.output_dir:
            out = locate(t.output_dir)
            a.reruns += sum(1 for p in out.parent.glob(f"{t.trial_id}.*") if p.is_dir())
            expected = channel_lines(out / ".nnix" / "metrics.jsonl")
        else:
            expected = set()
        a.lines += len(expected)
        a.lost += len(expected - set(got))
        a.phantom += len(set(got) - expected)
        a.duplicated += sum(c - 1 for c in got.values() if c > 1)
        if metrics is not None:
            seqs = [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL]
            finals = sum(m.type is MetricType.FINAL for m in t.metrics)
            if seqs != list(range(metrics)) or finals != 1:
                a.irregular.append(t.trial_id)
    return a


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A file system of ``size`` (tmpfs: ``16m``, ``1m``) mounted at ``where`` (made here) for a full-disk test,
    unmounted after. Needs root and a mount the machine permits: else the test is skipped, loudly."""
    import pytest

    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("FULL-DISK TEST SKIPPED: needs root to mount a small tmpfs (not root here)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"FULL-DISK TEST SKIPPED: mount -t tmpfs is not permitted here: {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
