"""``nnix platform clean -c CONFIG`` (NNI's ``nnictl platform clean``): what nnix left outside this machine's
experiment directories for a config's platform, found and removed.

- ``local``: nothing (everything is under the experiment directories; ``nnix experiment delete`` removes them).
- ``remote``: on each machine of ``machineList``, over SSH, the agent venvs (``<remoteWorkDir>/venvs``) and
  each experiment's folder (``<remoteWorkDir>/<id>``: wheels, code, agents' and trials' files); the live agents
  found there are listed, and killed (with their trials) before their folders are removed.
- ``slurm`` / ``ray`` with a shared working directory set: its ``envs/``, ``trials/`` (and ``wheels/``,
  ``code/`` when present); without one, nnix wrote only inside the experiment directories.
- ``kubernetes``, ``kubeflow``, ``frameworkcontroller`` with ``storage.localMountPoint`` (or a ``hostPath``):
  ``<mount>/nnix`` (each experiment's code, wheels and trial outputs); an NFS export nnix mounted itself is
  not mounted now: mount it and set ``localMountPoint`` to clean it.
- ``openpai``: ``<localStorageMountPoint>/nnix``.
- hybrid: each of its services.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnix.config import ExperimentConfig


@dataclass
class Place:
    """Where nnix left files: ``where`` is ``local`` or a remote machine's label."""

    platform: str
    where: str
    paths: list[str] = field(default_factory=list)
    note: str = ""
    problem: str = ""
    agents: list[str] = field(default_factory=list)  # live agents found there (remote: a killed manager's)


def _local_dirs(platform: str, root: Path | None, subdirs: tuple[str, ...], unset: str) -> Place:
    if root is None:
        return Place(platform, "local", note=unset)
    paths = [str(root / s) for s in subdirs if (root / s).exists()]
    return Place(platform, "local", paths, note="" if paths else f"nothing of nnix's under {root}")


def _single(ts: Any, config: ExperimentConfig) -> list[Place]:
    platform = ts.platform
    if platform == "local":
        return [Place("local", "local", note="nothing to clean for platform local: every file is in the experiment "
                                             "directories (nnix experiment delete ID removes one)")]
    if platform == "remote":
        from nnix.services.remote import RemoteService

        service = RemoteService.from_config(config.model_copy(update={"training_service": ts}), lambda _: None)
        found = asyncio.run(service.leftovers(remove=False))
        return [Place("remote", label, paths, "" if paths or problem or agents else "nothing of nnix's there", problem,
                      agents) for label, paths, problem, agents in found]
    if platform == "slurm":
        return [_local_dirs("slurm", ts.shared_working_directory, ("envs", "trials", "wheels", "code"),
                            "nothing outside the experiment directories (sharedWorkingDirectory is not set)")]
    if platform == "ray":
        return [_local_dirs("ray", ts.working_directory, ("envs", "trials", "wheels", "code"),
                            "nothing outside the experiment directories (workingDirectory is not set)")]
    if platform in ("kubernetes", "kubeflow", "frameworkcontroller"):
        storage = ts.storage
        local = storage.local_mount_point or (Path(storage.path) if storage.storage_type == "hostPath" and
                                              storage.path else None)
        return [_local_dirs(platform, local, ("nnix",),
                            "the storage is not mounted here (nnix mounts an NFS export only while an experiment "
                            "runs): mount it and set storage.localMountPoint to clean it")]
    if platform == "openpai":
        return [_local_dirs("openpai", Path(ts.local_storage_mount_point), ("nnix",), "")]
    return [Place(platform, "local", note=f"nnix does not know what platform {platform} leaves")]


def find(config: ExperimentConfig) -> list[Place]:
    """Every place nnix left files for ``config``'s platform (remote machines are asked over SSH)."""
    ts = config.training_service
    members = ts.services if ts.platform == "hybrid" else [ts]
    return [place for member in members for place in _single(member, config)]


def remove(config: ExperimentConfig, places: list[Place]) -> list[Place]:
    """Delete what :func:`find` found; returns the places with any problem met."""
    ts = config.training_service
    members = ts.services if ts.platform == "hybrid" else [ts]
    out = []
    for member in members:
        if member.platform == "remote":
            from nnix.services.remote import RemoteService

            service = RemoteService.from_config(config.model_copy(update={"training_service": member}), lambda _: None)
            for label, paths, problem, agents in asyncio.run(service.leftovers(remove=True)):
                out.append(Place("remote", label, paths, problem=problem, agents=agents))
    for place in places:
        if place.where != "local" or not place.paths:
            continue
        problems = []
        for p in place.paths:
            path = Path(p)
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            except OSError as e:
                problems.append(f"{p}: {e}")
        out.append(Place(place.platform, "local", place.paths, problem="; ".join(problems)))
    return out
