"""The agent bookkeeping shared by the SSH and cluster services (:mod:`nnix.services.fleet`), driven directly:
real endpoints (the commands a service queues for its agents), agent messages as the agent server hands them."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nnix.agent.protocol import Attach, Hello, Kill, Message, Shutdown, decode
from nnix.model.runs import Exited, Metrics, Requeued, RunnerEvent, Started, TrialSpec
from nnix.services.agent_server import Endpoint
from nnix.services.fleet import Fleet, FleetEnv, FleetTrial, StartFailed


@dataclass(eq=False, kw_only=True)
class _Env(FleetEnv):
    host: str = "a"
    gone: bool = False


@dataclass(eq=False, kw_only=True)
class _Trial(FleetTrial[_Env]):
    host: str = "a"


class _Fleet(Fleet[_Env, _Trial]):
    """The smallest service over the fleet: placement by host, exits by a signal held (as a cluster engine)."""

    platform = "test"

    def __init__(self, **options: Any) -> None:
        self.events: list[RunnerEvent] = []
        self.retired: list[str] = []
        super().__init__(self.events.append, None, hosts=["a", "b"], lost_after=10.0, **options)

    def add(self, env_id: str, *, adopted: bool = False, host: str = "a") -> _Env:
        env = _Env(env_id, Endpoint(env_id, "token", self), single=False, adopted=adopted, host=host)
        self._envs[env_id] = env
        return env

    def _env_gone(self, env: _Env) -> bool:
        return env.gone

    def _may_host(self, t: _Trial, env: _Env) -> bool:
        return t.host == env.host

    def _hold_exit(self, t: _Trial, env: _Env, exited: Exited) -> bool:
        return exited.signal == signal.SIGTERM

    def _retire_idle(self, env: _Env) -> None:
        self.retired.append(env.env_id)
        self._shutdown(env, "taken over; nothing left to watch")


def _sent(env: _Env) -> list[Message]:
    return [decode(envelope)[1] for _, envelope in env.endpoint.commands]


def _metrics(trial_id: str, *lines: int) -> Metrics:
    return Metrics(trial_id, [(i, {"type": "PERIODICAL", "value": i}) for i in lines])


def test_what_an_adopted_agent_says_before_the_trial_is_reattached_is_replayed_then() -> None:
    fleet = _Fleet()
    env = fleet.add("e1", adopted=True)
    fleet.on_hello("e1", Hello("e1", "v", running=["T1"]))
    fleet.on_message("e1", _metrics("T1", 4, 5))  # before the manager re-attached T1: kept
    assert fleet.events == [] and _sent(env) == []  # not a stray yet: not killed
    fleet._adopt_trial(_Trial("T1", None, "/out/T1", last_index=3))
    # bound with an Attach that asks again for what came after the last recorded line, then the replay
    assert _sent(env) == [Attach("T1", "/out/T1", None, None, 3)]
    assert fleet.events == [_metrics("T1", 4, 5)]
    assert fleet._trials["T1"].env is env and fleet._trials["T1"].last_index == 5


def test_an_adopted_agent_speaking_first_of_a_trial_is_asked_to_send_again() -> None:
    fleet = _Fleet()
    env = fleet.add("e1", adopted=True)
    fleet._adopt_trial(_Trial("T1", None, "/out/T1", last_index=7))
    fleet.on_message("e1", _metrics("T1", 8))
    assert _sent(env) == [Attach("T1", "/out/T1", None, None, 7)]
    assert fleet.events == [_metrics("T1", 8)]


def test_settling_kills_strays_of_adopted_agents_and_retires_the_idle_ones() -> None:
    fleet = _Fleet()
    busy, idle = fleet.add("e1", adopted=True), fleet.add("e2", adopted=True)
    fresh = fleet.add("e3")
    fleet.on_hello("e1", Hello("e1", "v", running=["T1", "OLD"]))
    fleet.on_hello("e2", Hello("e2", "v", running=[]))
    fleet.on_hello("e3", Hello("e3", "v", running=["GHOST"]))
    assert _sent(fresh) == [Kill("GHOST")]  # an agent of this manager runs what nobody expects: at once
    fleet._adopt_trial(_Trial("T1", None, "/out/T1"))
    assert Kill("OLD") not in _sent(busy)  # before settling, an adopted agent's trials may still be claimed
    fleet._settle()
    assert Kill("OLD") in _sent(busy) and Kill("T1") not in _sent(busy)
    assert fleet.retired == ["e2"] and idle.stopping
    assert _sent(idle) == [Shutdown("taken over; nothing left to watch")] and not idle.shutdown_delivered()
    fleet.on_hello("e2", Hello("e2", "v", running=["LATE"]))  # after settling: strays die everywhere
    assert Kill("LATE") in _sent(idle)


def test_a_trial_is_never_watched_by_an_agent_of_another_host() -> None:
    fleet = _Fleet()
    other = fleet.add("e1", adopted=True, host="b")
    fleet._adopt_trial(_Trial("T1", None, "/out/T1"))
    fleet.on_message("e1", _metrics("T1", 0))
    assert fleet._trials["T1"].env is None and fleet.events == [] and _sent(other) == []


def test_the_start_handshake_and_an_exit_before_start() -> None:
    async def scenario() -> None:
        fleet = _Fleet(start_timeout=5.0)
        env = fleet.add("e1")
        loop = asyncio.get_running_loop()
        spec = TrialSpec("T1", "true", Path("/c"), Path("/c/T1"), {})
        t = _Trial("T1", None, "/c/T1", started=loop.create_future())
        task = asyncio.ensure_future(fleet._handshake(t, env, spec))
        await asyncio.sleep(0)
        fleet.on_message("e1", _metrics("T1", 0))  # before Started: not passed on (the manager has no trial yet)
        fleet.on_message("e1", Started("T1", 42, "s", "/c/T1"))
        started = await task
        assert started is not None and started.pid == 42 and t.pid == 42
        assert fleet.events == [] and env.trials == {"T1"}

        t2 = _Trial("T2", None, "/c/T2", started=loop.create_future())
        task2 = asyncio.ensure_future(fleet._handshake(t2, env, TrialSpec("T2", "x", Path("/c"), Path("/c/T2"), {})))
        await asyncio.sleep(0)
        fleet.on_message("e1", Exited("T2", 127, None, "sh: x: not found"))
        with pytest.raises(StartFailed, match="not found"):
            await task2
        assert "T2" not in fleet._trials and env.trials == {"T1"}

    asyncio.run(scenario())


def test_a_held_exit_is_delivered_at_once_by_cancel_without_a_kill() -> None:
    fleet = _Fleet()
    env = fleet.add("e1")
    fleet._trials["T1"] = t = _Trial("T1", env, "/out/T1")
    env.trials.add("T1")
    by_sigterm = Exited("T1", None, signal.SIGTERM)
    fleet.on_message("e1", by_sigterm)
    assert t.held == by_sigterm and fleet.events == []  # the service waits to know why
    asyncio.run(fleet.cancel("T1"))
    assert fleet.events == [by_sigterm] and _sent(env) == [] and "T1" not in fleet._trials
    asyncio.run(fleet.cancel("T1"))  # idempotent
    assert fleet.events == [by_sigterm]


def test_written_off_trials_follow_the_lost_host_policy() -> None:
    async def scenario() -> None:
        fleet = _Fleet()
        env = fleet.add("e1")
        loop = asyncio.get_running_loop()
        starting = _Trial("S", env, "/o/S", started=loop.create_future())
        trials = [starting, _Trial("R", env, "/o/R"), _Trial("F", env, "/o/F"), _Trial("P", env, "/o/P")]
        for t in trials:
            fleet._trials[t.trial_id] = t
            env.trials.add(t.trial_id)
        fleet._write_off(starting, "host a lost", "fail")
        assert starting.started is not None and starting.started.result() is None  # never ran: back to the queue
        assert starting.unstarted == "host a lost"
        fleet._write_off(trials[1], "host a lost", "requeue")
        fleet._write_off(trials[2], "host a lost", "fail")
        fleet._write_off(trials[3], "its environment ended: TIMEOUT")
        assert fleet.events == [
            Requeued("R", "host a lost; re-queued (lostHostPolicy: requeue)"),
            Exited("F", None, None, "", "host a lost (lostHostPolicy: fail)"),
            Exited("P", None, None, "", "its environment ended: TIMEOUT"),
        ]
        assert fleet._trials == {} and env.trials == set()

    asyncio.run(scenario())


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TypeError, match="bogus"):
        _Fleet(bogus=1.0)
