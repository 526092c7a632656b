"""The host's GPUs: what an inventory reports (:class:`GpuInfo`), the :class:`GpuInventory` protocol and the
NVIDIA driver's inventory (:class:`NvmlInventory`, through ``pynvml`` when installed). Its own module, below
the agent and the services: an agent reports its host's GPUs with it, the local service's GPU scheduler
(:mod:`nnix.services.gpu`) hands them to trials; tests use :class:`nnix.testing.gpu.DescribedInventory`."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["GpuInfo", "GpuInventory", "NvmlInventory"]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as seen at one moment.

    ``util`` is the core utilisation and ``mem_util`` the fraction of memory in use, both in ``0..1``;
    ``processes`` counts the distinct compute and graphics processes running on it.
    """

    index: int
    util: float
    mem_util: float
    processes: int
    name: str = ""
    memory_total_mb: int = 0


class GpuInventory(Protocol):
    """Anything that can list the host's GPUs."""

    def snapshot(self) -> list[GpuInfo]: ...



class NvmlInventory:
    """The host's GPUs as reported by the NVIDIA driver (``pynvml``).

    A host without driver, NVML library or GPU yields ``[]``; this class never raises for that.
    ``last_error`` then says what went wrong (e.g. ``"NVML Shared Library Not Found"``).
    Snapshots are cached for ``cache_seconds`` (NNI uses 10 s) measured with ``clock``.
    ``nvml`` replaces the ``pynvml`` module (tests); by default it is imported on first use.
    """

    def __init__(
        self,
        cache_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        nvml: Any = None,
    ) -> None:
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._nvml = nvml
        self._cached: list[GpuInfo] | None = None
        self._cached_at = 0.0
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def invalidate(self) -> None:
        """Forget the cached snapshot; the next :meth:`snapshot` asks the driver again."""
        with self._lock:
            self._cached = None

    def snapshot(self) -> list[GpuInfo]:
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached_at < self.cache_seconds:
                return list(self._cached)
            gpus = self._query()
            self._cached = gpus
            self._cached_at = now
            return list(gpus)

    def _load(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as e:  # nvidia-ml-py is a dependency, but be robust anyway
                self.last_error = f"pynvml (nvidia-ml-py) is not installed: {e}"
                return None
            self._nvml = pynvml
        return self._nvml

    def _query(self) -> list[GpuInfo]:
        nvml = self._load()
        if nvml is None:
            return []
        try:
            nvml.nvmlInit()
        except Exception as e:  # no library, no driver, no permission: all mean "no GPU here"
            self.last_error = f"NVML could not be initialised: {e}"
            return []
        try:
            count = int(nvml.nvmlDeviceGetCount())
            gpus = [self._describe(nvml, i) for i in range(count)]
        except Exception as e:  # a GPU fell off the bus mid-query, driver reset, ...
            self.last_error = f"NVML query failed: {e}"
            return []
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
        self.last_error = None if gpus else "NVML reports no GPU"
        return gpus

    @staticmethod
    def _describe(nvml: Any, index: int) -> GpuInfo:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)

        def optional(fn: Callable[[], Any]) -> Any:
            # Some fields are "not supported" on some boards (e.g. utilisation on a few consumer GPUs).
            try:
                return fn()
            except Exception:
                return None

        name = optional(lambda: nvml.nvmlDeviceGetName(handle))
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        rates = optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        util = _fraction(getattr(rates, "gpu", 0)) if rates is not None else 0.0
        memory = optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        total = int(getattr(memory, "total", 0) or 0) if memory is not None else 0
        used = int(getattr(memory, "used", 0) or 0) if memory is not None else 0
        mem_util = min(1.0, max(0.0, used / total)) if total > 0 else 0.0
        pids: set[int] = set()
        anonymous = 0
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn: Callable[[Any], Any] | None = getattr(nvml, getter, None)
            procs: Any = None
            if fn is not None:
                try:
                    procs = fn(handle)
                except Exception:
                    procs = None
            for proc in procs or ():
                pid = getattr(proc, "pid", None)
                if pid is None:
                    anonymous += 1
                else:
                    pids.add(int(pid))
        return GpuInfo(
            index=index,
            util=util,
            mem_util=mem_util,
            processes=len(pids) + anonymous,
            name=str(name) if name is not None else "",
            memory_total_mb=total // (1024 * 1024),
        )


def _fraction(percent: Any) -> float:
    try:
        value = float(percent) / 100.0
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, value))
