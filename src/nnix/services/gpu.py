"""GPU inventory and GPU scheduling for trials (local training service).

Two halves:

* an *inventory* says which GPUs the host has and how busy they are (:mod:`nnix.gpu`: :class:`NvmlInventory`
  asks the NVIDIA driver through ``pynvml``; tests use :class:`nnix.testing.gpu.DescribedInventory`);
* a :class:`GpuScheduler` decides which GPUs a trial gets, tells the caller *why* a trial has to wait,
  and builds the trial's ``CUDA_VISIBLE_DEVICES``.

Scheduling rules (NNI-compatible, with NNI 3.0's 1-GPU-host bug fixed):

* ``trialGpuNumber`` ``None`` or ``0``: no GPU scheduling, the inventory is never queried;
* a trial's share is ``trialGpuNumber / maxTrialNumberPerGpu``; below 1 it is a fraction of one GPU,
  otherwise a whole number of GPUs, each taken exclusively;
* with ``useActiveGpu: false`` a GPU that runs processes nnix did not start is skipped;
* a request for ``n`` GPUs is impossible only when fewer than ``n`` usable GPUs exist (``n`` equal to the
  number of GPUs is fine, unlike NNI 3.0, issue #5776).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nnix.errors import ConfigError, FieldIssue, GpuUnavailableError
from nnix.gpu import GpuInfo, GpuInventory, NvmlInventory

__all__ = [
    "Explains",
    "GpuAllocation",
    "GpuInfo",
    "GpuInventory",
    "GpuScheduler",
    "NvmlInventory",
]


@runtime_checkable
class Explains(Protocol):
    """The optional ability of a :class:`~nnix.gpu.GpuInventory` to say why its last snapshot found no GPU
    (:class:`~nnix.gpu.NvmlInventory`: the driver's error)."""

    last_error: str | None


_TOLERANCE = 1e-3
"""Slack when packing fractional shares (three shares of 1/3 fit on one GPU)."""

_EPS = 1e-9


@dataclass(frozen=True)
class GpuAllocation:
    """The GPUs given to one trial (empty when the trial gets no GPU)."""

    indices: tuple[int, ...]


# --------------------------------------------------------------------------------------------------------
# Scheduler
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Held:
    indices: tuple[int, ...]
    load: float  # nominal load this trial puts on each of its GPUs


class GpuScheduler:
    """Hands GPUs to trials.

    ``allocate`` returns a :class:`GpuAllocation`, or ``None`` when the trial must wait (then
    :meth:`waiting_reason` says why), and raises :class:`GpuUnavailableError` when the request can never
    be met on this host. ``release`` frees a finished trial's GPUs; ``restore`` re-attaches a trial that
    kept running while the manager was down.

    A GPU is *foreign-active* when it runs processes and nnix holds no allocation on it (nnix's own
    trials create processes on the GPUs they were given). A GPU released less than
    ``release_grace_seconds`` ago is not foreign-active either: its last trial's processes may still be
    exiting, and the inventory's snapshot may predate the release.
    """

    def __init__(
        self,
        inventory: GpuInventory,
        trial_gpu_number: int | None,
        gpu_indices: list[int] | None = None,
        max_trial_number_per_gpu: int = 1,
        use_active_gpu: bool = False,
        *,
        clock: Callable[[], float] = time.monotonic,
        release_grace_seconds: float = 10.0,
    ) -> None:
        issues: list[FieldIssue] = []
        if trial_gpu_number is not None and trial_gpu_number < 0:
            issues.append(
                FieldIssue("trialGpuNumber", f"must be >= 0, got {trial_gpu_number}", "use 0 for no GPU")
            )
        if max_trial_number_per_gpu < 1:
            issues.append(
                FieldIssue(
                    "trainingService.maxTrialNumberPerGpu",
                    f"must be >= 1, got {max_trial_number_per_gpu}",
                )
            )
        if not issues and trial_gpu_number:
            share = trial_gpu_number / max_trial_number_per_gpu
            if share > 1 and not share.is_integer():
                issues.append(
                    FieldIssue(
                        "trialGpuNumber",
                        f"trialGpuNumber {trial_gpu_number} / maxTrialNumberPerGpu "
                        f"{max_trial_number_per_gpu} = {share:g} GPUs per trial, which is neither a whole "
                        "number of GPUs nor a fraction of one GPU",
                        "make trialGpuNumber a multiple of maxTrialNumberPerGpu, or smaller than it",
                    )
                )
        if issues:
            raise ConfigError(issues)

        self._inventory = inventory
        self.trial_gpu_number = trial_gpu_number
        self.gpu_indices: list[int] | None = (
            list(dict.fromkeys(gpu_indices)) if gpu_indices is not None else None
        )
        self.max_trial_number_per_gpu = max_trial_number_per_gpu
        self.use_active_gpu = use_active_gpu
        self._clock = clock
        self._grace = release_grace_seconds
        self._share = (trial_gpu_number or 0) / max_trial_number_per_gpu
        self._held: dict[str, _Held] = {}
        self._released_at: dict[int, float] = {}
        self._reason = ""
        self._seen_gpus = 0
        self._lock = threading.Lock()

    # ---- public API ----------------------------------------------------------------------------------

    @property
    def schedules_gpus(self) -> bool:
        """True when trials request GPUs (``trialGpuNumber`` > 0)."""
        return bool(self.trial_gpu_number)

    def allocate(self, trial_id: str) -> GpuAllocation | None:
        """GPUs for ``trial_id`` now, or ``None`` if it must wait (see :meth:`waiting_reason`).

        Idempotent: a trial that already holds GPUs gets the same allocation again.
        """
        with self._lock:
            held = self._held.get(trial_id)
            if held is not None:
                self._reason = ""
                return GpuAllocation(held.indices)
            if not self.trial_gpu_number:
                self._held[trial_id] = _Held((), 0.0)
                self._reason = ""
                return GpuAllocation(())
            return self._allocate(trial_id)

    def release(self, trial_id: str) -> None:
        """Free the GPUs of ``trial_id`` (unknown ids are ignored)."""
        with self._lock:
            held = self._held.pop(trial_id, None)
            if held is not None:
                now = self._clock()
                for index in held.indices:
                    self._released_at[index] = now

    def restore(self, trial_id: str, indices: Iterable[int]) -> GpuAllocation:
        """Record that ``trial_id`` already runs on ``indices`` (after a manager restart / resume).

        The inventory is not consulted: the trial is running there, whatever the GPUs look like now.
        """
        allocation = GpuAllocation(tuple(sorted(set(indices))))
        with self._lock:
            load = 0.0
            if self.trial_gpu_number and allocation.indices:
                load = self._share if self._share < 1 else 1.0
            self._held[trial_id] = _Held(allocation.indices, load)
        return allocation

    def allocation(self, trial_id: str) -> GpuAllocation | None:
        """The GPUs ``trial_id`` currently holds, if any."""
        with self._lock:
            held = self._held.get(trial_id)
            return GpuAllocation(held.indices) if held is not None else None

    def waiting_reason(self) -> str:
        """Why the last :meth:`allocate` returned ``None`` (``""`` if it did not)."""
        with self._lock:
            return self._reason

    def env(self, allocation: GpuAllocation | None) -> dict[str, str]:
        """The trial's ``CUDA_VISIBLE_DEVICES`` (NNI v3 rules), as a dict to merge into its environment.

        ``trialGpuNumber`` None: ``{}`` (left untouched); 0: ``""``; otherwise sorted indices ``"0,1"``.
        """
        if self.trial_gpu_number is None:
            return {}
        if self.trial_gpu_number == 0:
            return {"CUDA_VISIBLE_DEVICES": ""}
        if allocation is None:
            raise ValueError("a trial that requests GPUs needs an allocation to build its environment")
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in sorted(allocation.indices))}

    # ---- internals -----------------------------------------------------------------------------------

    def _loads(self) -> tuple[dict[int, float], dict[int, list[str]]]:
        loads: dict[int, float] = {}
        owners: dict[int, list[str]] = {}
        for trial_id, held in self._held.items():
            for index in held.indices:
                loads[index] = loads.get(index, 0.0) + held.load
                owners.setdefault(index, []).append(trial_id)
        return loads, owners

    def _allocate(self, trial_id: str) -> GpuAllocation | None:
        gpus = self._inventory.snapshot()
        if not gpus:
            if self._seen_gpus:
                # GPUs were there a moment ago: treat an empty answer as a transient driver hiccup.
                self._reason = (
                    f"the GPU inventory found no GPU this time (it found {self._seen_gpus} before); retrying"
                )
                return None
            detail = self._inventory.last_error if isinstance(self._inventory, Explains) else None
            raise GpuUnavailableError(
                f"No GPU found, but trialGpuNumber is {self.trial_gpu_number}"
                + (f" ({detail})" if isinstance(detail, str) and detail else ""),
                hint="check that `nvidia-smi` lists a GPU (NVIDIA driver installed and loaded), "
                "or set trialGpuNumber to 0 (no GPU) or remove it",
            )
        self._seen_gpus = len(gpus)
        by_index = {g.index: g for g in gpus}
        existing = sorted(by_index)

        if self.gpu_indices is not None:
            missing = [i for i in self.gpu_indices if i not in by_index]
            if missing:
                raise GpuUnavailableError(
                    f"gpuIndices names GPU{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(str, missing))} that do{'es' if len(missing) == 1 else ''} not exist; "
                    f"this host has GPU{'s' if len(existing) > 1 else ''} {_join(existing)}",
                    hint="fix trainingService.gpuIndices (indices as listed by `nvidia-smi`)",
                )
            usable = [by_index[i] for i in self.gpu_indices]
        else:
            usable = [by_index[i] for i in existing]

        need = self._share
        whole = need >= 1
        if not usable:
            raise GpuUnavailableError(
                "gpuIndices is empty, so no GPU can be used",
                hint="list GPUs in trainingService.gpuIndices, or remove it to use all GPUs",
            )
        if whole and int(need) > len(usable):
            where = "usable GPU" + ("s" if len(usable) != 1 else "")
            raise GpuUnavailableError(
                f"each trial requests {int(need)} GPUs but only {len(usable)} {where} "
                f"exist{'s' if len(usable) == 1 else ''} ({_join([g.index for g in usable])})",
                hint="lower trialGpuNumber"
                + (", or add GPUs to trainingService.gpuIndices" if self.gpu_indices is not None else "")
                + (
                    ", or raise maxTrialNumberPerGpu to share GPUs"
                    if self.max_trial_number_per_gpu == 1
                    else ""
                ),
            )

        loads, owners = self._loads()
        now = self._clock()

        def foreign(g: GpuInfo) -> bool:
            if g.processes <= 0 or loads.get(g.index, 0.0) > _EPS or g.index in owners:
                return False
            released = self._released_at.get(g.index)
            return released is None or now - released >= self._grace

        candidates = sorted(
            (g for g in usable if self.use_active_gpu or not foreign(g)),
            key=lambda g: (loads.get(g.index, 0.0), foreign(g), g.mem_util, g.util, g.index),
        )

        if whole:
            n = int(need)
            free = [g for g in candidates if loads.get(g.index, 0.0) <= _EPS]
            if len(free) >= n:
                chosen = tuple(sorted(g.index for g in free[:n]))
                self._held[trial_id] = _Held(chosen, 1.0)
                self._reason = ""
                return GpuAllocation(chosen)
            self._reason = self._explain(trial_id, usable, loads, owners, foreign, free=free)
            return None

        for g in candidates:
            if loads.get(g.index, 0.0) + need <= 1.0 + _TOLERANCE:
                chosen = (g.index,)
                self._held[trial_id] = _Held(chosen, need)
                self._reason = ""
                return GpuAllocation(chosen)
        self._reason = self._explain(trial_id, usable, loads, owners, foreign, free=None)
        return None

    def _explain(
        self,
        trial_id: str,
        usable: list[GpuInfo],
        loads: dict[int, float],
        owners: dict[int, list[str]],
        foreign: Callable[[GpuInfo], bool],
        free: list[GpuInfo] | None,
    ) -> str:
        need = self._share
        if need >= 1:
            n = int(need)
            head = f"trial {trial_id} waits for {n} free GPU{'s' if n > 1 else ''}"
            if free:
                head += (
                    f"; only {len(free)} {'is' if len(free) == 1 else 'are'} free "
                    f"(GPU {_join([g.index for g in free])})"
                )
        else:
            head = (
                f"trial {trial_id} waits for {_fmt(need)} of a GPU "
                f"(trialGpuNumber {self.trial_gpu_number} / maxTrialNumberPerGpu "
                f"{self.max_trial_number_per_gpu})"
            )
        parts: list[str] = []
        any_foreign = False
        for g in sorted(usable, key=lambda g: g.index):
            load = loads.get(g.index, 0.0)
            trials = ", ".join(owners.get(g.index, []))
            if foreign(g) and not self.use_active_gpu:
                any_foreign = True
                parts.append(
                    f"GPU {g.index} runs {g.processes} process{'es' if g.processes != 1 else ''} "
                    "not started by nnix and useActiveGpu is false"
                )
            elif load >= 1.0 - _TOLERANCE:
                parts.append(
                    f"GPU {g.index} is fully used by nnix trial{'s' if ',' in trials else ''} {trials}"
                )
            elif load > _EPS:
                if need >= 1:
                    parts.append(f"GPU {g.index} is partly used ({_fmt(load)}) by nnix trials {trials}")
                else:
                    parts.append(
                        f"GPU {g.index} has {_fmt(1.0 - load)} left after nnix trials {trials}, "
                        f"less than {_fmt(need)}"
                    )
        text = head + (": " + "; ".join(parts) if parts else "")
        if any_foreign:
            text += (
                " (set useActiveGpu: true in the trainingService to share GPUs with other processes,"
                " or stop those processes)"
            )
        return text


def _join(indices: Iterable[int]) -> str:
    return ", ".join(str(i) for i in indices)


def _fmt(x: float) -> str:
    # 0.5 -> "0.5", 1/3 -> "0.33"
    return f"{x:.2f}".rstrip("0").rstrip(".") if not math.isclose(x, round(x)) else str(round(x))
