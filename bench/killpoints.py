"""The kill-timing suite with more rounds than CI runs (nnix.testing.killpoints), on real engine labs: per engine and
round, one experiment whose manager is killed -9 at each point of an environment's life (before submit, submitted
but unrecorded, agent hello, trials running, a trial just ended) and resumed each time, then run to the end; and one
killed while trials run, then `nnix stop`.

Run: python bench/killpoints.py [--rounds 3] [--engines slurm,ray,ray-private,kubernetes,remote]
Prints per engine: rounds, chains that ended DONE with every trial SUCCEEDED, ERROR lines logged, metrics lost or
duplicated, what was left afterwards (engine objects, processes), and `nnix stop` after a kill: its wall time
(median / max) and what it left. Exit code 1 if any round failed or left something.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINES = ("slurm", "ray", "ray-private", "kubernetes", "remote")
FAST = {"engine_poll_interval": 0.5, "end_grace": 0.5, "poll_interval": 0.05, "kill_grace": 1.0, "lost_timeout": 20.0}
METRICS = 12


@dataclass
class Engine:
    """How to run the suite on one engine: the trainingService fields, the service options, what it has left."""

    service: Callable[[bool], dict[str, Any]]  # reuse -> trainingService fields
    left: Callable[[str, Path], list[str]]  # (experiment id, its dir) -> what of it the engine still holds
    options: dict[str, Any] = field(default_factory=lambda: dict(FAST))
    reuse_chain: bool = False
    top: dict[str, Any] = field(default_factory=dict)  # other config fields
    gates: Path | None = None  # where the trials' gates go (SSH: where the lab user can see them)


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def lab(name: str, work: Path) -> Iterator[Engine]:
    """The engine's lab, up for the rounds."""
    if name == "slurm":
        from nnix.testing.slurm import SlurmLab

        slurm = SlurmLab(cpus=2).up()
        try:
            with _env(slurm.env):
                def jobs(exp_id: str, _: Path) -> list[str]:
                    out = slurm.run("squeue", "-h", "-O", "JobID:|,State:|,Name:|").stdout.splitlines()
                    return [ln for ln in out if f"|nnix-{exp_id}-" in ln]

                yield Engine(lambda reuse: {"platform": "slurm", "reuseMode": reuse, "memory": "200M"}, jobs)
        finally:
            slurm.down()
    elif name in ("ray", "ray-private"):
        from nnix.services import rayhead
        from nnix.testing.ray import PrivateHeads, RayLab

        token = secrets.token_hex(32)
        with _env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0"}):
            if name == "ray":
                ray = RayLab(num_cpus=2, token=token).up()
                try:
                    yield Engine(lambda reuse: {"platform": "ray", "address": ray.address, "reuseMode": reuse},
                                 lambda exp_id, _: ray.named_actors(f"nnix-{exp_id}", wait=30))
                finally:
                    ray.down()
            else:
                heads = PrivateHeads()

                def head_left(_: str, exp_dir: Path) -> list[str]:
                    heads.seen(exp_dir)
                    end = time.monotonic() + 60
                    while rayhead.read(exp_dir) is not None and time.monotonic() < end:
                        time.sleep(0.2)
                    return ["its private head"] if rayhead.read(exp_dir) is not None else []

                try:
                    yield Engine(lambda reuse: {"platform": "ray", "reuseMode": reuse}, head_left, reuse_chain=True)
                finally:
                    heads.down()
    elif name == "kubernetes":
        from nnix.testing.kube import KubeLab

        kube = KubeLab(work / "kube")
        kube.start()
        store = work / "kube-storage"
        store.mkdir()
        storage = {"storageType": "hostPath", "path": str(store), "containerMountPoint": str(store)}
        try:
            with _env({"KUBECONFIG": str(kube.kubeconfig)}):
                yield Engine(lambda reuse: {"platform": "kubernetes", "reuseMode": reuse, "storage": storage},
                             lambda exp_id, _: sorted(f"{k} {n}" for k, names in kube.experiment_objects(exp_id).items()
                                                      for n in names), top={"nniManagerIp": "127.0.0.1"})
        finally:
            kube.stop()
    elif name == "remote":
        from nnix.testing.sshhosts import SshLab

        ssh = SshLab(n_hosts=3).up()
        try:
            def service(reuse: bool) -> dict[str, Any]:
                return {"platform": "remote", "knownHostsFile": str(ssh.known_hosts), "reuseMode": reuse,
                        "remoteWorkDir": str(ssh.home / "work"), "machineList": [h.machine() for h in ssh.hosts[:2]]}

            yield Engine(service, lambda exp_id, _: [str(p) for p in ssh.agent_pids(exp_id)],
                         options={"connect_timeout": 3.0}, reuse_chain=True, gates=ssh.home)
        finally:
            ssh.down()
    else:
        raise SystemExit(f"unknown engine {name!r}: one of {', '.join(ENGINES)}")


@dataclass
class Tally:
    rounds: int = 0
    done: int = 0
    errors: int = 0
    lost: int = 0
    duplicated: int = 0
    left: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop_s: list[float] = field(default_factory=list)
    stop_left: list[str] = field(default_factory=list)
    chain_s: list[float] = field(default_factory=list)


def _experiment(engine: Engine, work: Path, reuse: bool) -> Any:
    from nnix.testing.experiments import make_experiment
    from nnix.testing.killpoints import Chain, chain_experiment

    gates = (engine.gates or work) / f"gates-{work.parent.name}-{work.name}"
    fields = chain_experiment(work / "code", gates, metrics=METRICS)
    exp_id, _ = make_experiment(work / "code", **{**fields, **engine.top, "trialConcurrency": 2, "maxTrialNumber": 4,
                                                 "trainingService": engine.service(reuse)})
    return Chain(exp_id, work, gates, dict(engine.options))


def one_round(engine: Engine, work: Path, tally: Tally) -> None:
    from nnix.home import read_state
    from nnix.model.status import ExperimentStatus, TrialStatus
    from nnix.testing.faults import nnix
    from nnix.testing.killpoints import audited, errors_logged, leftover_processes, settled

    remote = engine.gates is not None
    chain = _experiment(engine, work / "chain", engine.reuse_chain)
    begun = time.monotonic()
    chain.kill_at("create", "submit")
    for point in ("submitted", "hello", "running", "ended"):
        chain.kill_at("resume", point)
    status = chain.finish()
    tally.chain_s.append(time.monotonic() - begun)
    st = read_state(chain.exp_dir)
    if status is ExperimentStatus.DONE and all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()):
        tally.done += 1
    else:
        tally.failures.append(f"chain ended {status.value}: {chain.log_tail(5)}")
    a = audited(chain.exp_dir, METRICS, remote=remote)
    tally.lost += a.lost
    tally.duplicated += a.duplicated
    tally.errors += len(errors_logged(chain.exp_dir))
    tally.left += settled(lambda: engine.left(chain.exp_id, chain.exp_dir)) + settled(
        lambda: leftover_processes(chain.exp_id))

    stopped = _experiment(engine, work / "stop", True)
    stopped.kill_at("create", "running")
    t0 = time.perf_counter()
    res = nnix("stop", stopped.exp_id)
    tally.stop_s.append(time.perf_counter() - t0)
    if res.returncode != 0:
        tally.failures.append(f"nnix stop failed: {res.stderr[-500:]}")
    tally.stop_left += settled(lambda: engine.left(stopped.exp_id, stopped.exp_dir)) + settled(
        lambda: leftover_processes(stopped.exp_id))
    stopped.open()  # (a trial left behind by a failed stop must not wait for ever)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    args = ap.parse_args()
    results: dict[str, Tally] = {}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # (SSH lab users read the trials' gates under their home, not here)
        os.environ["NNIX_HOME"] = str(root / "home")
        (root / "home").mkdir()
        for name in [e for e in args.engines.split(",") if e]:
            tally = results.setdefault(name, Tally())
            try:
                with lab(name, root / f"{name}-lab") as engine:
                    for r in range(args.rounds):
                        work = root / f"{name}-{r}"
                        (work / "chain").mkdir(parents=True)
                        (work / "stop").mkdir()
                        tally.rounds += 1
                        try:
                            one_round(engine, work, tally)
                        except Exception as e:
                            tally.failures.append(f"round {r}: {type(e).__name__}: {str(e)[:300]}")
                            traceback.print_exc(file=sys.stderr)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                tally.failures.append(f"lab not available: {e}")
            print(_line(name, tally), flush=True)
    print()
    print("engine        rounds  done  ERRORs  lost/dup  left after resume  stop s (median/max)  left after stop")
    for name, t in results.items():
        print(_line(name, t))
    for name, t in results.items():
        for f in t.failures[:5]:
            print(f"{name}: {f}")
        for what in (t.left + t.stop_left)[:5]:
            print(f"{name}: left: {what}")
    bad = any(t.failures or t.left or t.stop_left or t.errors or t.lost or t.duplicated or t.done < t.rounds
              for t in results.values())
    return 1 if bad else 0


def _line(name: str, t: Tally) -> str:
    stop = f"{statistics.median(t.stop_s):.2f} / {max(t.stop_s):.2f}" if t.stop_s else "-"
    chain = f" (chain {statistics.median(t.chain_s):.0f} s)" if t.chain_s else ""
    return (f"{name:<13} {t.rounds:>6} {t.done:>5} {t.errors:>7}  {t.lost}/{t.duplicated:<7} {len(t.left):>17}  "
            f"{stop:>19}  {len(t.stop_left):>15}{chain}")


if __name__ == "__main__":
    sys.exit(main())
