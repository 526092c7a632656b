"""What an experiment left running when no manager runs, ended: ``nnix stop`` and ``nnix experiment delete`` of an
experiment whose manager died (``kill -9``, a crash, a lost machine).

A manager killed at any point leaves its work on the engines, on purpose (a resume takes it over): Slurm jobs,
Ray actors, Kubernetes objects with their pods and token Secrets, agents on SSH machines (which retry for a day),
and the trials in all of them; local trials are process groups of their own. Without a resume, stopping or deleting
the experiment ends them all here, from the record each cluster service keeps of its environments
(``cluster.json``, :data:`nnix.services.cluster.RECORD`: the platform, each environment's handle, written *before*
the engine is asked, so no kill leaves an environment unrecorded) and from the engine itself (the experiment's job
names, namespace or labels: whatever the record lacks is found there too). Each engine is asked only when its record
says something may be left (``left``), so stopping an experiment that ended cleanly contacts no engine; each
platform's service module is imported only then.

Who does what: a service class with the ability :class:`~nnix.services.base.Reclaims` (cluster engines, SSH) ends
its own; local trials (no engine, no record) are killed here when their recorded process is still the one that
started (its start time). A private Ray head is ended as a whole by :func:`nnix.services.rayhead.stop_recorded`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnix.agent.runner import TrialRunner, process_start_token
from nnix.config import ExperimentConfig, HybridConfig, restore_secrets
from nnix.errors import NnixError
from nnix.registry import entry_point_group
from nnix.services.base import LeftTrial, Reclaims, ServiceContext
from nnix.services.cluster import RECORD

__all__ = ["LeftTrial", "left_records", "reclaim"]

log = logging.getLogger("nnix.services.reclaim")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def left_records(exp_dir: Path) -> list[Path]:
    """The records (``cluster.json`` of the experiment, or of a hybrid member under ``services/<i>-<platform>/``)
    that say their engine may still run something of the experiment."""
    out = []
    for path in [exp_dir / RECORD, *sorted(exp_dir.glob(f"services/*/{RECORD}"))]:
        data = _read(path)
        if data is not None and (data.get("left", True) or data.get("envs")):
            out.append(path)
    return out


async def _local(trials: Sequence[LeftTrial]) -> list[str]:
    """Local trials a dead manager left, killed as a cancel kills them (process group and containment)."""
    mine = [t for t in trials if t.pid and t.pid_start and Path(t.output_dir).is_absolute()
            and Path(t.output_dir).is_dir() and process_start_token(t.pid) == t.pid_start]
    if not mine:
        return []
    runner = TrialRunner(lambda _: None, kill_grace=3.0)
    for t in mine:
        await runner.attach(t.trial_id, Path(t.output_dir), t.pid, t.pid_start, 1 << 40)
    await runner.close(kill=True)
    return [f"local: killed {len(mine)} trial(s) ({', '.join(sorted(t.trial_id for t in mine))})"]


def _members(config: ExperimentConfig, exp_dir: Path, experiment_id: str) -> list[tuple[ExperimentConfig,
                                                                                       ServiceContext]]:
    """Each training service of the experiment (hybrid: each member, in its own directory) with its context."""
    ts = config.training_service
    if not isinstance(ts, HybridConfig):
        return [(config, ServiceContext(experiment_id, exp_dir))]
    out = []
    for i, child in enumerate(ts.services):
        sub = config.model_copy(update={"training_service": child})
        out.append((sub, ServiceContext(experiment_id, exp_dir / "services" / f"{i}-{child.platform}")))
    return out


SECRETS_FILE = "secrets.json"
"""Where an experiment keeps the secrets its stored config lacks (nnix.host.build.SECRETS_FILE; a test checks)."""


def _secrets(exp_dir: Path) -> dict[str, str]:
    data = _read(exp_dir / SECRETS_FILE) or {}
    return {str(k): str(v) for k, v in data.items()}


def reclaim(exp_dir: Path, experiment_id: str, config: dict[str, Any], trials: Sequence[LeftTrial]) -> list[str]:
    """End what the experiment in ``exp_dir`` (its stored ``config``, its secrets restored) left on its engines and
    the ``trials`` the store shows running; what was ended, in words (one line per engine or machine). Call it only
    when no manager holds the experiment. Never raises for an engine that cannot be reached: the line says so."""
    records = {p.parent for p in left_records(exp_dir)}
    if not records and not trials:
        return []
    try:
        cfg = ExperimentConfig.model_validate(restore_secrets(config, _secrets(exp_dir)))
    except Exception as e:  # a config this nnix cannot read any more: nothing it could reach
        return [f"cannot read the experiment's config to end its engine work: {e}"]
    classes: dict[str, Any] = {}

    async def run() -> list[str]:
        out: list[str] = []
        for sub, context in _members(cfg, exp_dir, experiment_id):
            platform = sub.training_service.platform
            if platform == "local":
                out += await _local(trials)
                continue
            if context.experiment_dir not in records:
                continue  # it recorded nothing left (or never ran)
            if platform not in classes:
                eps = {ep.name: ep for ep in entry_point_group("nnix.services")}
                classes[platform] = eps[platform].load() if platform in eps else None
            cls = classes[platform]
            if not isinstance(cls, Reclaims):
                continue
            try:
                out += await cls.reclaim(sub, context, trials)
            except Exception as e:
                log.warning("ending the %s work of experiment %s failed: %s", platform, experiment_id, e)
                out.append(f"{platform}: could not end what the experiment left there: "
                           f"{e.message if isinstance(e, NnixError) else e}")
        return out

    return asyncio.run(run())
