"""Host health: the one policy that decides what a failed start or a lost host means, for every service whose
trials run in agents (the machines of a fixed list, such as SSH's, in :mod:`nnix.services.hosts`, and engine
environments in :mod:`nnix.services.cluster`).

The rules (a "host" is an SSH machine, or a cluster engine as a whole):

* a trial whose agent did not start it in time (or whose host went away before it started) goes back to the
  queue: the service emits :class:`~nnix.model.runs.Requeued` with the reason. It never ran, so there is
  nothing to fail, whatever ``lostHostPolicy`` says (that policy is about trials that were running);
* the host is *failing* from then on and gets no trial for a backoff: ``backoff_min`` seconds, doubled for each
  failure in a row, at most ``backoff_max``. A host that is unreachable or lost is failing until it is back.
  Any success (the host connected, a trial started on it) clears all of it;
* the experiment stops only when **every** host has been failing, with no success in between, for
  ``give_up_after`` seconds (or ``max_failures`` failed starts in a row each, where given: an engine whose first
  environments all die before their agent connects is misconfigured, and waiting longer only delays saying so).
  :meth:`HostHealth.verdict` then gives the reason, naming each host and what happened to it; the service
  raises it as :class:`~nnix.errors.ServiceUnavailableError`, which sets the experiment to ERROR without failing
  the trials that wait (a resume runs them).

Why not end the experiment at the first start that times out: on a loaded machine a slow start is normal, and
one host's trouble says nothing about the others. Why not wait forever: when nothing can run anywhere, the user
must hear it (with each host's story) rather than watch an experiment that never moves.

Pure bookkeeping with an injected clock: no I/O, no tasks; the services call it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["HostHealth"]


@dataclass
class _Host:
    name: str
    failures: int = 0  # failed starts in a row since the last success
    failing_since: float | None = None  # first failure (or loss) with no success since
    retry_at: float = 0.0  # no trial before this time (backoff)
    down: str | None = None  # unreachable or lost: why (no trial until it is back)
    problem: str = ""  # the last thing that went wrong


class HostHealth:
    """Per-host failure bookkeeping and the give-up rule (see the module docstring)."""

    def __init__(
        self,
        hosts: Iterable[str],
        *,
        give_up_after: float,
        backoff_min: float = 1.0,
        backoff_max: float = 30.0,
        max_failures: int | None = None,
        noun: str = "host",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hosts = {h: _Host(h) for h in hosts}
        if not self._hosts:
            raise ValueError("HostHealth needs at least one host")
        self.give_up_after = float(give_up_after)
        self._backoff = (float(backoff_min), max(float(backoff_min), float(backoff_max)))
        self._max_failures = max_failures
        self._noun = noun
        self._clock = clock

    # --- what happened -----------------------------------------------------------------------------
    def ok(self, host: str) -> None:
        """Something worked on ``host`` (it connected, a trial started there): it is healthy again."""
        h = self._hosts[host]
        h.failures, h.failing_since, h.retry_at, h.down, h.problem = 0, None, 0.0, None, ""

    def failed(self, host: str, why: str) -> float:
        """A start failed on ``host`` (its agent did not start a trial in time, or could not be started).
        Returns the backoff: no trial goes there for that many seconds."""
        h = self._hosts[host]
        now = self._clock()
        h.failures += 1
        if h.failing_since is None:
            h.failing_since = now
        low, high = self._backoff
        delay = min(high, low * 2.0 ** min(h.failures - 1, 30))
        h.retry_at, h.problem = now + delay, why
        return delay

    def down(self, host: str, why: str) -> None:
        """``host`` is unreachable or lost: no trial goes there until :meth:`ok`."""
        h = self._hosts[host]
        if h.failing_since is None:
            h.failing_since = self._clock()
        h.down, h.problem = why, why

    # --- questions ---------------------------------------------------------------------------------
    def usable(self, host: str) -> bool:
        """Whether ``host`` may be given a trial now (not down, not backing off)."""
        h = self._hosts[host]
        return h.down is None and self._clock() >= h.retry_at

    def retry_in(self, host: str) -> float:
        """Seconds left of ``host``'s backoff (0 when none)."""
        return max(0.0, self._hosts[host].retry_at - self._clock())

    def failing(self, host: str) -> bool:
        return self._hosts[host].failing_since is not None

    def describe(self, host: str) -> str:
        """``host`` and what happened to it, in words (empty problem: "healthy")."""
        h = self._hosts[host]
        if h.failing_since is None:
            return f"{h.name}: healthy"
        now = self._clock()
        parts = [h.problem or "failing"]
        if h.failures:
            parts.append(f"{h.failures} failed start{'s' if h.failures != 1 else ''} in a row")
        if h.down is None and h.retry_at > now:
            parts.append(f"next try in {h.retry_at - now:.0f} s")
        parts.append(f"failing for {now - h.failing_since:.0f} s")
        return f"{h.name}: " + "; ".join(parts)

    def verdict(self) -> str | None:
        """The reason to stop the experiment, or None while some host may still run trials (see the module
        docstring): every host failing for ``give_up_after`` seconds (or ``max_failures`` in a row each)."""
        hosts = list(self._hosts.values())
        if any(h.failing_since is None for h in hosts):
            return None
        now = self._clock()
        since = max(h.failing_since for h in hosts if h.failing_since is not None)
        by_count = self._max_failures is not None and all(h.failures >= self._max_failures for h in hosts)
        if not by_count and now - since < self.give_up_after:
            return None
        what = (f"after {self._max_failures} failed starts in a row" if by_count
                else f"for {now - since:.0f} s (give-up time {self.give_up_after:g} s)")
        return f"no {self._noun} could run a trial {what}: " + " | ".join(self.describe(h.name) for h in hosts)
