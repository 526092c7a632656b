"""nnix.services.reclaim: ending what an experiment whose manager died left on its engines. Its runs on real engines
are the kill-timing suites of each engine (test_slurm, test_ray, test_kubernetes, test_remote); the local part:
tests/test_client.py."""

from __future__ import annotations

import json
from pathlib import Path

from nnix.services.reclaim import left_records


def test_reclaim_reads_the_secrets_where_the_manager_keeps_them() -> None:
    from nnix.host.build import SECRETS_FILE
    from nnix.services.reclaim import SECRETS_FILE as RECLAIMS

    assert RECLAIMS == SECRETS_FILE


def test_only_records_that_may_have_left_something_send_nnix_stop_to_an_engine(tmp_path: Path) -> None:
    def record(path: Path, **data: object) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return path

    running = record(tmp_path / "cluster.json", platform="slurm", envs={}, left=True)  # a manager killed
    record(tmp_path / "services" / "0-ray" / "cluster.json", platform="ray", envs={}, left=False)  # closed cleanly
    kept = record(tmp_path / "services" / "1-slurm" / "cluster.json", platform="slurm", left=False,
                  envs={"e1": {"token": "t", "handle": "12", "single": False}})  # kept running for a resume
    old = record(tmp_path / "services" / "2-kubernetes" / "cluster.json", port=1, envs={})  # written by nnix < 0.3
    (tmp_path / "services" / "3-slurm").mkdir()
    (tmp_path / "services" / "3-slurm" / "cluster.json").write_text("{not json")
    assert left_records(tmp_path) == [running, kept, old]
