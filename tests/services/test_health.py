"""The host-health policy (:mod:`nnix.services.health`) with a fake clock: backoff, recovery, and the give-up
rule that alone may stop an experiment for host trouble."""

from __future__ import annotations

import pytest

from nnix.services.health import HostHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _health(clock: Clock, **kw: object) -> HostHealth:
    args: dict[str, object] = {"give_up_after": 60.0, "backoff_min": 1.0, "backoff_max": 8.0, "clock": clock}
    args.update(kw)
    return HostHealth(["a", "b"], **args)  # type: ignore[arg-type]


def test_a_failed_start_backs_the_host_off_exponentially_capped_and_a_success_clears_it() -> None:
    clock = Clock()
    h = _health(clock)
    assert h.usable("a") and not h.failing("a")
    delays = [h.failed("a", "did not start trial T within 60 s") for _ in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # doubled per failure in a row, capped
    assert not h.usable("a") and h.usable("b")  # the other host keeps working
    assert h.retry_in("a") == 8.0
    clock.now += 7.9
    assert not h.usable("a")
    clock.now += 0.1
    assert h.usable("a") and h.failing("a")  # may be tried again, still failing until something works
    assert "6 failed starts in a row" in h.describe("a") and "did not start trial T" in h.describe("a")
    h.ok("a")
    assert h.usable("a") and not h.failing("a") and h.describe("a") == "a: healthy"
    assert h.failed("a", "again") == 1.0  # the count starts over after a success


def test_a_lost_host_is_unusable_until_it_is_back() -> None:
    clock = Clock()
    h = _health(clock)
    h.down("a", "host a lost: SSH does not answer")
    clock.now += 1000
    assert not h.usable("a") and h.failing("a")
    h.ok("a")  # reconnected
    assert h.usable("a")


def test_the_experiment_gives_up_only_when_every_host_fails_for_the_give_up_time() -> None:
    clock = Clock()
    h = _health(clock)
    h.down("a", "host a lost: unreachable for 60 s")
    clock.now += 600
    assert h.verdict() is None  # b is fine: a lost host alone never ends the experiment
    h.failed("b", "the agent on b did not start trial T within 60 s")
    clock.now += 59.9
    assert h.verdict() is None  # every host failing, but not for long enough yet
    clock.now += 0.1
    reason = h.verdict()
    assert reason is not None
    assert reason.startswith("no host could run a trial for 60 s")
    assert "a: host a lost: unreachable for 60 s" in reason  # each host named, with what happened to it
    assert "b: the agent on b did not start trial T within 60 s; 1 failed start in a row" in reason


def test_a_success_anywhere_restarts_the_give_up_time() -> None:
    clock = Clock()
    h = _health(clock)
    h.failed("a", "x")
    h.failed("b", "y")
    clock.now += 59
    h.ok("b")  # a trial started on b
    clock.now += 30
    assert h.verdict() is None
    h.failed("b", "y again")
    clock.now += 59
    assert h.verdict() is None  # b failing for 59 s only (since its last success)
    clock.now += 1
    assert h.verdict() is not None


def test_max_failures_in_a_row_gives_up_early() -> None:
    clock = Clock()
    h = HostHealth(["slurm"], give_up_after=600, max_failures=3, noun="slurm environment", clock=clock)
    h.failed("slurm", "environment 1 ended before the nnix agent in it connected back: exit 1")
    h.failed("slurm", "environment 2 ended before ...")
    assert h.verdict() is None
    h.failed("slurm", "environment 3 ended before the nnix agent in it connected back: exit 1")
    reason = h.verdict()
    assert reason is not None
    assert reason.startswith("no slurm environment could run a trial after 3 failed starts in a row")
    assert "environment 3 ended before" in reason


def test_no_hosts_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        HostHealth([], give_up_after=1)
