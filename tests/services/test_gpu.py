"""GPU inventory and scheduler: NNI's rules, the #5776 fix, and the waiting diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from nnix.errors import ConfigError, GpuUnavailableError
from nnix.services.gpu import GpuAllocation, GpuInfo, GpuScheduler, NvmlInventory
from nnix.testing.gpu import DescribedInventory


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scheduler(inv: DescribedInventory, trial_gpu_number: int | None, **kw: Any) -> GpuScheduler:
    kw.setdefault("clock", FakeClock())
    return GpuScheduler(inv, trial_gpu_number, **kw)


# --------------------------------------------------------------------------------------------------------
# Table-driven allocation scenarios
# --------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    gpus: str
    trial_gpu_number: int | None
    steps: list[tuple[str, str, Any]]  # (op, trial, expected): op in allocate/release
    gpu_indices: list[int] | None = None
    per_gpu: int = 1
    use_active: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


WAIT = None

CASES = [
    Case(
        "issue-5776: one GPU, trialGpuNumber 1; second trial waits until release",
        "0:idle",
        1,
        [
            ("allocate", "a", (0,)),
            ("allocate", "b", WAIT),
            ("release", "a", None),
            ("allocate", "b", (0,)),
        ],
    ),
    Case(
        "two GPUs, trialGpuNumber 2 takes both (n == GPU count is valid)",
        "0:idle, 1:idle",
        2,
        [("allocate", "a", (0, 1)), ("allocate", "b", WAIT)],
    ),
    Case(
        "gpuIndices subset, result sorted",
        "0:idle, 1:idle, 2:idle, 3:idle",
        2,
        [("allocate", "a", (1, 3)), ("allocate", "b", WAIT)],
        gpu_indices=[3, 1],
    ),
    Case(
        "maxTrialNumberPerGpu 2 packs two trials on a GPU, then a third waits",
        "0:idle",
        1,
        [
            ("allocate", "a", (0,)),
            ("allocate", "b", (0,)),
            ("allocate", "c", WAIT),
            ("release", "a", None),
            ("allocate", "c", (0,)),
        ],
        per_gpu=2,
    ),
    Case(
        "maxTrialNumberPerGpu 2 on two GPUs: least-loaded first (spread), then pack, then wait",
        "0:idle, 1:idle",
        1,
        [
            ("allocate", "a", (0,)),
            ("allocate", "b", (1,)),
            ("allocate", "c", (0,)),
            ("allocate", "d", (1,)),
            ("allocate", "e", WAIT),
            ("release", "c", None),
            ("allocate", "e", (0,)),
        ],
        per_gpu=2,
    ),
    Case(
        "fractional share packs onto the busy-by-nnix GPU when the other is foreign-busy",
        "0:idle, 1:busy",
        1,
        [("allocate", "a", (0,)), ("allocate", "b", (0,)), ("allocate", "c", WAIT)],
        per_gpu=2,
    ),
    Case(
        "three shares of 1/3 fit on one GPU (tolerance)",
        "0:idle",
        1,
        [("allocate", "a", (0,)), ("allocate", "b", (0,)), ("allocate", "c", (0,)), ("allocate", "d", WAIT)],
        per_gpu=3,
    ),
    Case(
        "useActiveGpu false skips a foreign-busy GPU",
        "0:busy(2), 1:idle",
        1,
        [("allocate", "a", (1,)), ("allocate", "b", WAIT)],
    ),
    Case(
        "useActiveGpu true uses a foreign-busy GPU (idle ones first)",
        "0:busy(2), 1:idle",
        1,
        [("allocate", "a", (1,)), ("allocate", "b", (0,)), ("allocate", "c", WAIT)],
        use_active=True,
    ),
    Case(
        "trialGpuNumber 2 / maxTrialNumberPerGpu 2 = one whole GPU per trial",
        "0:idle, 1:idle",
        2,
        [("allocate", "a", (0,)), ("allocate", "b", (1,)), ("allocate", "c", WAIT)],
        per_gpu=2,
    ),
    Case(
        "a whole-GPU request never lands on a partly used GPU",
        "0:idle, 1:idle",
        1,
        [("allocate", "a", (0,)), ("allocate", "b", (1,)), ("allocate", "c", WAIT)],
        per_gpu=1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_allocation_scenarios(case: Case) -> None:
    sched = scheduler(
        DescribedInventory.of(case.gpus),
        case.trial_gpu_number,
        gpu_indices=case.gpu_indices,
        max_trial_number_per_gpu=case.per_gpu,
        use_active_gpu=case.use_active,
    )
    for op, trial, expected in case.steps:
        if op == "release":
            sched.release(trial)
            continue
        got = sched.allocate(trial)
        if expected is WAIT:
            assert got is None, f"{trial} should wait, got {got}"
            assert sched.waiting_reason(), "a waiting trial must come with a reason"
        else:
            assert got == GpuAllocation(expected), f"{trial}: expected {expected}, got {got}"
            assert sched.waiting_reason() == ""


# --------------------------------------------------------------------------------------------------------
# Impossible requests
# --------------------------------------------------------------------------------------------------------


def test_more_gpus_than_host_has_is_impossible_with_clear_error() -> None:
    sched = scheduler(DescribedInventory.idle(1), 2)
    with pytest.raises(GpuUnavailableError) as err:
        sched.allocate("a")
    text = str(err.value)
    assert "2 GPUs" in text and "only 1 usable GPU" in text
    assert err.value.hint and "trialGpuNumber" in err.value.hint


def test_more_gpus_than_gpu_indices_allow_is_impossible() -> None:
    sched = scheduler(DescribedInventory.idle(4), 3, gpu_indices=[0, 2])
    with pytest.raises(GpuUnavailableError, match=r"only 2 usable GPUs exist \(0, 2\)"):
        sched.allocate("a")


def test_nonexistent_gpu_indices_are_named() -> None:
    sched = scheduler(DescribedInventory.idle(2), 1, gpu_indices=[1, 5, 7])
    with pytest.raises(GpuUnavailableError) as err:
        sched.allocate("a")
    assert "5, 7" in err.value.message
    assert "0, 1" in err.value.message  # what does exist
    assert err.value.hint and "gpuIndices" in err.value.hint


def test_no_gpu_at_all() -> None:
    sched = scheduler(DescribedInventory(), 1)
    with pytest.raises(GpuUnavailableError, match="No GPU found") as err:
        sched.allocate("a")
    assert err.value.hint


def test_no_gpu_error_carries_inventory_detail() -> None:
    inv = NvmlInventory(nvml=_BrokenNvml())
    with pytest.raises(GpuUnavailableError, match="Library Not Found"):
        GpuScheduler(inv, 1).allocate("a")


def test_gpus_vanishing_after_being_seen_is_a_wait_not_a_crash() -> None:
    inv = DescribedInventory.idle(1)
    sched = scheduler(inv, 1)
    assert sched.allocate("a") == GpuAllocation((0,))
    inv.remove(0)
    assert sched.allocate("b") is None
    assert "no GPU this time" in sched.waiting_reason()


@pytest.mark.parametrize(
    ("tgn", "per_gpu", "field"),
    [(-1, 1, "trialGpuNumber"), (1, 0, "maxTrialNumberPerGpu"), (3, 2, "trialGpuNumber")],
)
def test_bad_arguments_are_config_errors(tgn: int, per_gpu: int, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        GpuScheduler(DescribedInventory.idle(4), tgn, max_trial_number_per_gpu=per_gpu)
    assert any(field in i.path for i in err.value.issues)


# --------------------------------------------------------------------------------------------------------
# Waiting diagnostics and the foreign-process rule
# --------------------------------------------------------------------------------------------------------


def test_waiting_reason_names_foreign_processes() -> None:
    sched = scheduler(DescribedInventory.of("0:busy(2)"), 1)
    assert sched.allocate("a") is None
    reason = sched.waiting_reason()
    assert "GPU 0 runs 2 processes not started by nnix and useActiveGpu is false" in reason
    assert "useActiveGpu: true" in reason


def test_waiting_reason_names_nnix_trials_holding_gpus() -> None:
    sched = scheduler(DescribedInventory.idle(2), 1)
    sched.allocate("t1")
    sched.allocate("t2")
    assert sched.allocate("t3") is None
    reason = sched.waiting_reason()
    assert "trial t3 waits for 1 free GPU" in reason
    assert "GPU 0 is fully used by nnix trial t1" in reason
    assert "GPU 1 is fully used by nnix trial t2" in reason


def test_waiting_reason_for_partial_availability() -> None:
    sched = scheduler(DescribedInventory.of("0:idle, 1:busy, 2:idle"), 2)
    assert sched.allocate("a") == GpuAllocation((0, 2))
    sched.release("a")
    sched2 = scheduler(DescribedInventory.of("0:idle, 1:busy, 2:busy"), 2)
    assert sched2.allocate("a") is None
    reason = sched2.waiting_reason()
    assert "only 1 is free (GPU 0)" in reason
    assert "GPU 1 runs 1 process not started" in reason


def test_waiting_reason_cleared_after_success() -> None:
    inv = DescribedInventory.of("0:busy")
    sched = scheduler(inv, 1)
    assert sched.allocate("a") is None and sched.waiting_reason()
    inv.set(0, processes=0)
    assert sched.allocate("a") == GpuAllocation((0,))
    assert sched.waiting_reason() == ""


def test_own_trial_processes_do_not_make_gpu_foreign() -> None:
    # Trial a runs on GPU 0 and creates a process there; b may still share GPU 0 (maxTrialNumberPerGpu 2).
    inv = DescribedInventory.idle(1)
    sched = scheduler(inv, 1, max_trial_number_per_gpu=2)
    assert sched.allocate("a") == GpuAllocation((0,))
    inv.set(0, processes=1, util=0.95)
    assert sched.allocate("b") == GpuAllocation((0,))


def test_released_gpu_not_foreign_during_grace_then_foreign_if_processes_linger() -> None:
    clock = FakeClock()
    inv = DescribedInventory.idle(1)
    sched = GpuScheduler(inv, 1, clock=clock, release_grace_seconds=10.0)
    assert sched.allocate("a") == GpuAllocation((0,))
    inv.set(0, processes=1)  # a's process, possibly still exiting (or a stale cached snapshot)
    sched.release("a")
    clock.now += 1
    assert sched.allocate("b") == GpuAllocation((0,))  # no 10 s stall between trials
    sched.release("b")
    clock.now += 30  # long after: a process still there is somebody else's
    assert sched.allocate("c") is None
    assert "not started by nnix" in sched.waiting_reason()


def test_foreign_busy_gpu_becomes_usable_when_processes_end() -> None:
    inv = DescribedInventory.of("0:busy(3)")
    sched = scheduler(inv, 1)
    assert sched.allocate("a") is None
    inv.set(0, processes=0)
    assert sched.allocate("a") == GpuAllocation((0,))


def test_prefers_less_loaded_memory_then_core_then_index() -> None:
    inv = DescribedInventory(
        [
            GpuInfo(0, util=0.1, mem_util=0.8, processes=1),
            GpuInfo(1, util=0.9, mem_util=0.2, processes=1),
            GpuInfo(2, util=0.1, mem_util=0.2, processes=1),
        ]
    )
    sched = scheduler(inv, 1, use_active_gpu=True)
    assert [sched.allocate(t) for t in "abc"] == [GpuAllocation((i,)) for i in (2, 1, 0)]


def test_idempotent_allocate_and_release_unknown() -> None:
    sched = scheduler(DescribedInventory.idle(2), 1)
    first = sched.allocate("a")
    assert sched.allocate("a") == first
    assert sched.allocation("a") == first
    sched.release("nobody")
    sched.release("a")
    assert sched.allocation("a") is None


# --------------------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES and the no-GPU modes
# --------------------------------------------------------------------------------------------------------


def test_trial_gpu_number_zero_hides_gpus_without_querying() -> None:
    inv = DescribedInventory()  # would be "No GPU found" if consulted
    sched = scheduler(inv, 0)
    alloc = sched.allocate("a")
    assert alloc == GpuAllocation(())
    assert sched.env(alloc) == {"CUDA_VISIBLE_DEVICES": ""}
    assert inv.snapshot_calls == 0
    assert not sched.schedules_gpus


def test_trial_gpu_number_none_leaves_env_untouched() -> None:
    inv = DescribedInventory()
    sched = scheduler(inv, None)
    alloc = sched.allocate("a")
    assert alloc == GpuAllocation(())
    assert sched.env(alloc) == {}
    assert "CUDA_VISIBLE_DEVICES" not in sched.env(None)
    assert inv.snapshot_calls == 0


def test_env_is_sorted_comma_joined() -> None:
    sched = scheduler(DescribedInventory.idle(4), 3, gpu_indices=[3, 0, 2])
    alloc = sched.allocate("a")
    assert alloc is not None
    assert sched.env(alloc) == {"CUDA_VISIBLE_DEVICES": "0,2,3"}
    assert sched.env(GpuAllocation((10, 2))) == {"CUDA_VISIBLE_DEVICES": "2,10"}


def test_env_without_allocation_when_gpus_requested_is_a_bug() -> None:
    with pytest.raises(ValueError):
        scheduler(DescribedInventory.idle(1), 1).env(None)


# --------------------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------------------


def test_restore_after_resume_reserves_gpus() -> None:
    inv = DescribedInventory.idle(2)
    sched = scheduler(inv, 1)
    # The running trial's process is on GPU 1; it must count as nnix's, not as foreign.
    inv.set(1, processes=1)
    assert sched.restore("old", [1]) == GpuAllocation((1,))
    assert sched.allocation("old") == GpuAllocation((1,))
    assert sched.allocate("new1") == GpuAllocation((0,))
    assert sched.allocate("new2") is None
    assert "GPU 1 is fully used by nnix trial old" in sched.waiting_reason()
    sched.release("old")
    inv.set(1, processes=0)
    assert sched.allocate("new2") == GpuAllocation((1,))


def test_restore_fractional_share() -> None:
    sched = scheduler(DescribedInventory.idle(1), 1, max_trial_number_per_gpu=2)
    sched.restore("old", [0])
    assert sched.allocate("a") == GpuAllocation((0,))
    assert sched.allocate("b") is None


# --------------------------------------------------------------------------------------------------------
# Described inventory
# --------------------------------------------------------------------------------------------------------


def test_described_inventory_parsing_and_mutation() -> None:
    inv = DescribedInventory.of("1:busy(2), 0:idle")
    snap = inv.snapshot()
    assert [(g.index, g.processes) for g in snap] == [(0, 0), (1, 2)]
    inv.set(1, processes=0, util=0.0, mem_util=0.1)
    assert inv.snapshot()[1] == GpuInfo(1, util=0.0, mem_util=0.1, processes=0, name="Fake GPU 1")
    assert snap[1].processes == 2  # old snapshots are not mutated
    assert DescribedInventory.of("").snapshot() == []
    with pytest.raises(ValueError):
        DescribedInventory.of("0:warm")


# --------------------------------------------------------------------------------------------------------
# NVML inventory
# --------------------------------------------------------------------------------------------------------


class _NVMLError(Exception):
    pass


class _BrokenNvml:
    NVMLError = _NVMLError

    def nvmlInit(self) -> None:
        raise _NVMLError("NVML Shared Library Not Found")


class _FakeNvml:
    """Two GPUs: GPU 0 with one process seen as both compute and graphics; GPU 1 lacks utilisation."""

    def __init__(self) -> None:
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes | str:
        return b"Fake A100" if h == 0 else "Fake H100"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        if h == 1:
            raise _NVMLError("Not Supported")
        return SimpleNamespace(gpu=50, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=8 * 1024**3, used=2 * 1024**3, free=6 * 1024**3)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=42)] if h == 0 else []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=42), SimpleNamespace(pid=7)] if h == 0 else []


def test_nvml_inventory_parses_and_caches() -> None:
    fake = _FakeNvml()
    clock = FakeClock()
    inv = NvmlInventory(clock=clock, nvml=fake)
    gpus = inv.snapshot()
    assert gpus == [
        GpuInfo(0, util=0.5, mem_util=0.25, processes=2, name="Fake A100", memory_total_mb=8192),
        GpuInfo(1, util=0.0, mem_util=0.25, processes=0, name="Fake H100", memory_total_mb=8192),
    ]
    assert inv.last_error is None
    clock.now += 9.9
    inv.snapshot()
    assert fake.inits == 1  # cached
    clock.now += 0.2
    inv.snapshot()
    assert fake.inits == 2 and fake.shutdowns == 2
    inv.invalidate()
    inv.snapshot()
    assert fake.inits == 3


def test_nvml_inventory_without_library_is_empty() -> None:
    inv = NvmlInventory(nvml=_BrokenNvml())
    assert inv.snapshot() == []
    assert inv.last_error and "Library Not Found" in inv.last_error


def test_nvml_inventory_on_this_host_never_raises() -> None:
    inv = NvmlInventory()
    gpus = inv.snapshot()  # [] on a GPU-less machine, real GPUs otherwise; never an exception
    assert isinstance(gpus, list)
    if not gpus:
        assert inv.last_error


def _real_gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.skipif(
    _real_gpu_count() == 0,
    reason="NO NVIDIA GPU VISIBLE TO NVML ON THIS HOST: the real-hardware GPU inventory test did not run",
)
def test_nvml_real_gpu() -> None:
    inv = NvmlInventory()
    gpus = inv.snapshot()
    assert gpus, inv.last_error
    assert [g.index for g in gpus] == list(range(len(gpus)))
    for g in gpus:
        assert 0.0 <= g.util <= 1.0
        assert 0.0 <= g.mem_util <= 1.0
        assert g.processes >= 0
        assert g.name
        assert g.memory_total_mb > 0
    sched = GpuScheduler(inv, 1, use_active_gpu=True)
    alloc = sched.allocate("real")
    assert alloc is not None and len(alloc.indices) == 1
    assert sched.env(alloc)["CUDA_VISIBLE_DEVICES"] == str(alloc.indices[0])
