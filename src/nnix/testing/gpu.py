"""A described, mutable GPU inventory for tests (no hardware, no driver).

>>> inv = DescribedInventory.of("0:idle, 1:busy(2)")
>>> [(g.index, g.processes) for g in inv.snapshot()]
[(0, 0), (1, 2)]
>>> inv.set(1, processes=0)
>>> inv.snapshot()[1].processes
0
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from nnix.services.gpu import GpuInfo

__all__ = ["DescribedInventory"]

_TOKEN = re.compile(r"^\s*(\d+)\s*:\s*(idle|busy)\s*(?:\(\s*(\d+)\s*\))?\s*$", re.IGNORECASE)


class DescribedInventory:
    """A :class:`~nnix.services.gpu.GpuInventory` whose GPUs are whatever the test says.

    ``snapshot_calls`` counts :meth:`snapshot` calls, so tests can assert the inventory was not consulted.
    """

    def __init__(self, gpus: Iterable[GpuInfo] = ()) -> None:
        self._gpus: dict[int, GpuInfo] = {}
        for g in gpus:
            if g.index in self._gpus:
                raise ValueError(f"GPU {g.index} described twice")
            self._gpus[g.index] = g
        self.snapshot_calls = 0

    @classmethod
    def idle(cls, n: int) -> DescribedInventory:
        """``n`` idle GPUs, indices ``0..n-1``."""
        return cls(
            GpuInfo(index=i, util=0.0, mem_util=0.0, processes=0, name=f"Fake GPU {i}") for i in range(n)
        )

    @classmethod
    def of(cls, description: str) -> DescribedInventory:
        """GPUs from a comma-separated description: ``"0:idle, 1:busy, 2:busy(3)"``.

        ``idle`` is no process and no load; ``busy`` one foreign process (``busy(n)``: ``n`` processes) with
        high utilisation. An empty description means no GPU.
        """
        gpus: list[GpuInfo] = []
        for token in filter(None, (t.strip() for t in description.split(","))):
            m = _TOKEN.match(token)
            if m is None:
                raise ValueError(f"bad GPU description {token!r}; expected e.g. '0:idle' or '1:busy(2)'")
            index, state, count = int(m.group(1)), m.group(2).lower(), m.group(3)
            if state == "idle":
                if count is not None:
                    raise ValueError(f"bad GPU description {token!r}: 'idle' takes no process count")
                gpus.append(
                    GpuInfo(index=index, util=0.0, mem_util=0.0, processes=0, name=f"Fake GPU {index}")
                )
            else:
                procs = int(count) if count is not None else 1
                gpus.append(
                    GpuInfo(index=index, util=0.9, mem_util=0.5, processes=procs, name=f"Fake GPU {index}")
                )
        return cls(gpus)

    def snapshot(self) -> list[GpuInfo]:
        self.snapshot_calls += 1
        return [self._gpus[i] for i in sorted(self._gpus)]

    def set(
        self,
        index: int,
        *,
        processes: int | None = None,
        util: float | None = None,
        mem_util: float | None = None,
    ) -> None:
        """Change what GPU ``index`` looks like from now on."""
        gpu = self._gpus[index]
        if processes is not None:
            gpu = replace(gpu, processes=processes)
        if util is not None:
            gpu = replace(gpu, util=util)
        if mem_util is not None:
            gpu = replace(gpu, mem_util=mem_util)
        self._gpus[index] = gpu

    def add(self, gpu: GpuInfo) -> None:
        """Plug in a GPU (replacing one with the same index)."""
        self._gpus[gpu.index] = gpu

    def remove(self, index: int) -> None:
        """Unplug GPU ``index``."""
        del self._gpus[index]
