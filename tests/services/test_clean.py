"""`nnictl platform clean` against real SSH hosts: it lists, then (after confirmation) removes, what nnix
leaves under a machine's remoteWorkDir (agent venvs, experiment folders) and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from nnix.testing.sshhosts import SshLab


def _chown(path: Path, user: str) -> None:
    for p in [path, *path.rglob("*")]:
        shutil.chown(p, user, user)


def test_platform_clean_removes_only_nnix_folders_on_remote_machines(tmp_path: Path, ssh_lab: SshLab) -> None:
    work = ssh_lab.home / "cleanwork"
    made = [work / "venvs" / "nnix-0.1.0-abc-py311-x" / "bin", work / "exp12345" / "host_22" / "envs" / "e1",
            work / "exp67890" / "host_2222" / "trials" / "t1"]
    for d in made:
        d.mkdir(parents=True, exist_ok=True)
    (work / "mine").mkdir(exist_ok=True)  # the user's own folder: no envs/ or trials/ below it
    (work / "mine" / "notes.txt").write_text("keep")
    _chown(work, ssh_lab.user)
    (tmp_path / "trial.py").write_text("")
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": "python3 trial.py",
           "trialConcurrency": 1, "tuner": {"name": "Random"},
           "trainingService": {"platform": "remote", "knownHostsFile": str(ssh_lab.known_hosts),
                               "remoteWorkDir": "~/cleanwork", "machineList": [ssh_lab.hosts[0].machine()]}}
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    nnictl = [sys.executable, "-m", "nnix.cli.main", "platform", "clean", "-c", str(path)]
    label = f"{ssh_lab.user}@{ssh_lab.hosts[0].host}:{ssh_lab.hosts[0].port}"

    no = subprocess.run(nnictl, capture_output=True, text=True, timeout=120, input="n\n", env=os.environ.copy())
    assert no.returncode == 1, no.stdout + no.stderr
    listed = sorted(line.split(": ", 1)[1] for line in no.stdout.splitlines() if line.startswith("remote "))
    assert listed == [str(work / "exp12345"), str(work / "exp67890"), str(work / "venvs")]
    assert all(d.exists() for d in made)

    yes = subprocess.run([*nnictl, "-y"], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert yes.returncode == 0, yes.stdout + yes.stderr
    assert f"removed 3 from {label}" in yes.stdout
    assert sorted(p.name for p in work.iterdir()) == ["mine"] and (work / "mine" / "notes.txt").exists()

    again = subprocess.run([*nnictl, "-y"], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert again.returncode == 0 and f"remote {label}: nothing of nnix's there" in again.stdout
