from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import TunerError
from nnix.registry import AlgorithmRef, resolve
from nnix.space import Params, SearchSpace, contains
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.hyperband import TRIAL_BUDGET, HyperbandArgs, HyperbandTuner, Schedule

SPACE: dict[str, Any] = {
    "x": {"_type": "uniform", "_value": [0, 1]},
    "c": {"_type": "choice", "_value": ["a", "b", "c"]},
}
SEED = 11


def rounds_of(schedule: Schedule) -> list[list[tuple[int, int | float]]]:
    return [list(schedule.shapes[s].rounds) for s in range(schedule.s_max, -1, -1)]


class Driver:
    """A tiny manager: asks, starts, ends trials; keeps the history as the manager would."""

    def __init__(self, tuner: HyperbandTuner, direction: Direction = Direction.MAXIMIZE, space: Any = None) -> None:
        self.tuner = tuner
        self.direction = direction
        self.space = SearchSpace.from_json(space or SPACE)
        self.records: dict[int, TrialRecord] = {}

    def ctx(self) -> TunerContext:
        return TunerContext(self.space, self.direction, SEED, tuple(self.records[k] for k in sorted(self.records)))

    def ask(self, n: int) -> list[int]:
        start = max(self.records, default=-1) + 1
        ids = list(range(start, start + n))
        ctx = self.ctx()
        proposals = self.tuner.suggest(ctx, ids)
        # purity: a fresh tuner given the same context proposes the same
        assert HyperbandTuner(self.tuner.args).suggest(ctx, ids) == proposals
        for pid, params in zip(ids, proposals, strict=False):
            self.records[pid] = TrialRecord(pid, params, TrialStatus.RUNNING)
        return ids[: len(proposals)]

    def end(
        self,
        pid: int,
        value: float | None,
        status: TrialStatus = TrialStatus.SUCCEEDED,
        intermediate: tuple[float, ...] = (),
    ) -> None:
        r = self.records[pid]
        self.records[pid] = TrialRecord(pid, r.params, status, value, intermediate)

    def params(self, pid: int) -> Params:
        return self.records[pid].params

    def budget(self, pid: int) -> Any:
        return self.records[pid].params[TRIAL_BUDGET]

    def config(self, pid: int) -> Params:
        return {k: v for k, v in self.records[pid].params.items() if k != TRIAL_BUDGET}


def small(mode: str = "parallelism", **kw: Any) -> HyperbandTuner:
    # R=9, eta=3: s_max=2; s=2: 9x1, 3x3, 1x9 | s=1: 5x3, 1x9 | s=0: 3x9
    return HyperbandTuner(HyperbandArgs(R=9, eta=3, exec_mode=mode, **kw))  # type: ignore[arg-type]


# -- the schedule ------------------------------------------------------------------------------------


def test_schedule_r60_eta3() -> None:
    sched = Schedule.hyperband(60, 3)
    assert sched.s_max == 3
    assert rounds_of(sched) == [
        [(27, 2), (9, 6), (3, 20), (1, 60)],
        [(12, 6), (4, 20), (1, 60)],
        [(6, 20), (2, 60)],
        [(4, 60)],
    ]


def test_schedule_r81_eta3_has_nni_34() -> None:
    sched = Schedule.hyperband(81, 3)
    assert sched.s_max == 4
    assert rounds_of(sched) == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],  # NNI's code gives 34 (the paper 27)
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]


def test_schedule_small_and_bracket_order() -> None:
    sched = Schedule.hyperband(9, 3)
    assert rounds_of(sched) == [[(9, 1), (3, 3), (1, 9)], [(5, 3), (1, 9)], [(3, 9)]]
    order = [sched.bracket(k) for k in range(7)]
    assert [(it, shape.s) for it, shape in order] == [(0, 2), (0, 1), (0, 0), (1, 2), (1, 1), (1, 0), (2, 2)]
    assert Schedule.hyperband(1, 3).s_max == 0


def test_args_validation_and_registry() -> None:
    with pytest.raises(ValidationError):
        HyperbandArgs(eta=1)
    with pytest.raises(ValidationError):
        HyperbandArgs.model_validate({"exec_mode": "both"})
    with pytest.raises(ValidationError):
        HyperbandArgs.model_validate({"r": 60})
    assert resolve("tuner", AlgorithmRef(name="Hyperband")) is HyperbandTuner
    assert HyperbandArgs().R == 60 and HyperbandArgs().eta == 3 and HyperbandArgs().exec_mode == "parallelism"


# -- proposals ---------------------------------------------------------------------------------------


def test_round0_configs_are_random_points_with_trial_budget() -> None:
    d = Driver(HyperbandTuner())
    ids = d.ask(30)
    assert len(ids) == 30
    space = SearchSpace.from_json(SPACE)
    assert [d.budget(p) for p in ids] == [2] * 27 + [6] * 3  # bracket s=3 then s=2 opens (parallelism)
    assert all(contains(space, d.config(p)) for p in ids)
    assert len({d.config(p)["x"] for p in ids}) == 30
    assert all(isinstance(d.budget(p), int) for p in ids)


def test_seed_arg_overrides_experiment_seed() -> None:
    a = Driver(small(seed=5))
    b = Driver(small(seed=6))
    assert [a.params(p) for p in a.ask(3)] != [b.params(p) for p in b.ask(3)]


@pytest.mark.parametrize("direction", [Direction.MAXIMIZE, Direction.MINIMIZE])
def test_promotions_follow_performance(direction: Direction) -> None:
    d = Driver(small("serial"), direction)
    ids = d.ask(9)
    values = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    for pid, v in zip(ids, values, strict=True):
        d.end(pid, v)
    nxt = d.ask(5)
    assert len(nxt) == 3  # serial: only the 3 promotions
    ranked = sorted(ids, key=lambda p: values[p], reverse=direction is Direction.MAXIMIZE)
    assert [d.config(p) for p in nxt] == [d.config(p) for p in ranked[:3]]
    assert [d.budget(p) for p in nxt] == [3, 3, 3]
    assert set(nxt).isdisjoint(ids)  # promotions are new trials


def test_performance_is_final_else_latest_intermediate_and_unmeasured_are_left_out() -> None:
    d = Driver(small("serial"))
    ids = d.ask(9)
    d.end(ids[0], 0.2, intermediate=(0.99,))  # final overrides intermediate
    d.end(ids[1], None, TrialStatus.EARLY_STOPPED, (0.1, 0.95))  # latest intermediate: 0.95
    d.end(ids[2], None, TrialStatus.FAILED)  # nothing: not ranked
    d.end(ids[3], None, TrialStatus.USER_CANCELED, (0.5,))
    for pid in ids[4:]:
        d.end(pid, 0.3)
    nxt = d.ask(3)
    assert [d.config(p) for p in nxt] == [d.config(ids[1]), d.config(ids[3]), d.config(ids[4])]


def test_ties_keep_trial_order() -> None:
    d = Driver(small("serial"))
    ids = d.ask(9)
    for pid in ids:
        d.end(pid, 1.0)
    assert [d.config(p) for p in d.ask(3)] == [d.config(p) for p in ids[:3]]


def test_round_waits_until_every_trial_ended() -> None:
    serial = Driver(small("serial"))
    ids = serial.ask(9)
    for pid in ids[:-1]:
        serial.end(pid, 0.5)
    assert serial.ask(4) == []  # "not now"
    serial.end(ids[-1], None, TrialStatus.SYS_CANCELED)  # any ending status counts
    assert len(serial.ask(4)) == 3

    par = Driver(small("parallelism"))
    ids = par.ask(9)
    for pid in ids[:-1]:
        par.end(pid, 0.5)
    more = par.ask(4)  # a new bracket (s=1, 5 configs at budget 3) fills the free slots
    assert [par.budget(p) for p in more] == [3, 3, 3, 3]
    assert all(par.config(p) not in [par.config(q) for q in ids] for p in more)


def test_queue_is_first_in_first_out() -> None:
    d = Driver(small("parallelism"))
    first = d.ask(9)  # bracket s=2, round 0
    second = d.ask(2)  # bracket s=1 opens: 2 of its 5 round-0 configs
    for pid in first:
        d.end(pid, float(pid))
    nxt = d.ask(6)
    # the rest of bracket s=1's round 0 first, then the promotions of bracket s=2
    assert [d.budget(p) for p in nxt] == [3, 3, 3, 3, 3, 3]
    assert [d.config(p) for p in nxt[3:]] == [d.config(first[8]), d.config(first[7]), d.config(first[6])]
    assert all(d.config(p) not in [d.config(q) for q in first] for p in nxt[:3])
    views = d.tuner.brackets(d.ctx())
    assert [(v.bracket_id, [len(r) for r in v.rounds]) for v in views] == [("0-2", [9, 3]), ("0-1", [5])]
    assert views[1].rounds[0][:2] == tuple(second)


def test_full_serial_iteration_then_a_new_one() -> None:
    d = Driver(small("serial"))
    seen_budgets: list[Any] = []
    for _ in range(40):
        ids = d.ask(2)
        seen_budgets += [d.budget(p) for p in ids]
        for pid in ids:
            d.end(pid, d.config(pid)["x"])
        if len(d.records) >= 9 + 3 + 1 + 5 + 1 + 3 + 9:
            break
    views = d.tuner.brackets(d.ctx())
    assert [(v.bracket_id, [len(r) for r in v.rounds]) for v in views[:4]] == [
        ("0-2", [9, 3, 1]),
        ("0-1", [5, 1]),
        ("0-0", [3]),
        ("1-2", [9]),
    ]
    assert seen_budgets[:22] == [1] * 9 + [3] * 3 + [9] + [3] * 5 + [9] + [9] * 3


def test_serial_opens_the_next_bracket_once_the_last_round_is_issued() -> None:
    d = Driver(small("serial"))
    ids = d.ask(9)
    for pid in ids:
        d.end(pid, 0.5)
    r1 = d.ask(3)
    for pid in r1:
        d.end(pid, 0.5)
    last = d.ask(3)  # the last round (1 config) is issued, and bracket s=1 may open at once
    assert [d.budget(p) for p in last] == [9, 3, 3]


def test_a_round_without_any_metric_ends_its_bracket() -> None:
    d = Driver(small("serial"))
    ids = d.ask(9)
    for pid in ids:
        d.end(pid, None, TrialStatus.FAILED)
    nxt = d.ask(2)
    assert [d.budget(p) for p in nxt] == [3, 3]  # bracket s=1 opens
    assert [len(v.rounds) for v in d.tuner.brackets(d.ctx())] == [1, 1]


def test_history_of_others_is_ignored() -> None:
    d = Driver(small("serial"))
    space = SearchSpace.from_json(SPACE)
    d.records[-1] = TrialRecord(-1, {"x": 0.5, "c": "a"}, TrialStatus.SUCCEEDED, 0.9)  # imported
    ids = d.ask(2)
    d.records[2] = TrialRecord(2, {"x": 0.1, "c": "b"}, TrialStatus.SUCCEEDED, 1.0)  # no TRIAL_BUDGET
    d.records[3] = TrialRecord(3, {"x": 0.1, "c": "b", TRIAL_BUDGET: 1000}, TrialStatus.SUCCEEDED, 1.0)
    more = d.ask(7)
    assert len(more) == 7 and all(d.budget(p) == 1 for p in more)
    views = d.tuner.brackets(d.ctx())
    assert views[0].rounds[0] == (*ids, *more)
    assert all(contains(space, d.config(p)) for p in more)


def test_rejects_a_space_with_trial_budget() -> None:
    space = SearchSpace.from_json({TRIAL_BUDGET: {"_type": "choice", "_value": [1, 2]}})
    with pytest.raises(TunerError):
        HyperbandTuner().suggest(TunerContext(space, Direction.MAXIMIZE, 0), [0])


def test_discrete_space_avoids_repeating_configs() -> None:
    d = Driver(small("parallelism"), space={"c": {"_type": "choice", "_value": list(range(12))}})
    ids = d.ask(9)
    assert len({d.config(p)["c"] for p in ids}) == 9


TINY: dict[str, Any] = {"c": {"_type": "choice", "_value": [1, 2, 3]}}


@pytest.mark.parametrize("mode", ["parallelism", "serial"])
@pytest.mark.parametrize(("seed", "space"), [(1, SPACE), (2, SPACE), (3, TINY), (4, TINY)])
def test_rebuilt_from_history_at_every_step(mode: str, seed: int, space: dict[str, Any]) -> None:
    """A random run: trials end in random order with random statuses; at every request a fresh tuner
    (a resumed experiment) proposes exactly what the long-lived one does (checked in Driver.ask), and
    replaying the final history places every trial where it was put when proposed -- also on a space
    of 3 points, where configurations repeat all the time."""
    rng = random.Random(seed)
    d = Driver(HyperbandTuner(HyperbandArgs(R=27, eta=3, exec_mode=mode)), space=space)  # type: ignore[arg-type]
    running: list[int] = []
    placed_when_proposed: dict[int, tuple[int, int]] = {}
    while len(d.records) < 150:
        new = d.ask(6 - len(running))
        placed = placements(d)
        placed_when_proposed.update({p: placed[p] for p in new})
        running += new
        if not running:
            break
        pid = running.pop(rng.randrange(len(running)))
        status = rng.choice([TrialStatus.SUCCEEDED] * 6 + [TrialStatus.FAILED, TrialStatus.EARLY_STOPPED])
        value = rng.random() * d.budget(pid)
        if status is TrialStatus.SUCCEEDED:
            d.end(pid, value, status, (value / 2,))
        else:
            d.end(pid, None, status, (value / 3,) if status is TrialStatus.EARLY_STOPPED else ())
    views = d.tuner.brackets(d.ctx())
    assert len(d.records) >= 150
    sched = Schedule.hyperband(27, 3)
    for v in views:
        shape = sched.shapes[v.s]
        assert len(v.rounds[0]) <= shape.configs(0)
        for i, pids in enumerate(v.rounds):
            assert all(d.budget(p) == shape.budget(i) for p in pids)
            if i:
                assert len(pids) <= shape.configs(i)
                earlier = [d.config(p) for p in v.rounds[i - 1]]
                assert all(d.config(p) in earlier for p in pids)
    assert sum(len(r) for v in views for r in v.rounds) == len(d.records)  # every trial placed
    # replaying the final history places every trial where the tuner put it when it proposed it
    assert placements(d) == placed_when_proposed


def placements(d: Driver) -> dict[int, tuple[int, int]]:
    """parameter id -> (bracket number, round) in the state replayed from the driver's history."""
    return {p: (v.k, i) for v in d.tuner.brackets(d.ctx()) for i, pids in enumerate(v.rounds) for p in pids}


# -- the conformance suite ---------------------------------------------------------------------------

CONTRACT_SPACES: tuple[dict[str, Any], ...] = (
    SPACE,
    {
        "a": {"_type": "randint", "_value": [1, 10]},
        "b": {"_type": "quniform", "_value": [0, 10, 2.5]},
        "d": {"_type": "loguniform", "_value": [1e-5, 1]},
        "e": {"_type": "qloguniform", "_value": [1, 100, 1]},
        "f": {"_type": "normal", "_value": [0, 1]},
        "g": {"_type": "qnormal", "_value": [0, 1, 0.5]},
        "h": {"_type": "lognormal", "_value": [0, 1]},
        "i": {"_type": "qlognormal", "_value": [0, 1, 0.5]},
    },
    {"c": {"_type": "choice", "_value": [1, 2]}},
)


class _HyperbandContract(TunerContract):
    spaces = CONTRACT_SPACES
    rounds = 8
    deduplicates = False  # promotions repeat configurations by design
    budgets: ClassVar[set[int]] = {1, 3}

    def is_valid_proposal(self, space: SearchSpace, params: Params) -> bool:
        budget = params.get(TRIAL_BUDGET)
        rest = {k: v for k, v in params.items() if k != TRIAL_BUDGET}
        return budget in self.budgets and contains(space, rest)


class TestHyperbandContractParallel(_HyperbandContract):
    tuner_factory = staticmethod(lambda: HyperbandTuner(HyperbandArgs(R=3, eta=3)))


class TestHyperbandContractSerial(_HyperbandContract):
    tuner_factory = staticmethod(lambda: HyperbandTuner(HyperbandArgs(R=3, eta=3, exec_mode="serial")))
    direction = Direction.MINIMIZE


def test_on_a_one_point_space_a_clashing_bracket_waits_for_the_round() -> None:
    d = Driver(small("parallelism"), space={"c": {"_type": "choice", "_value": [1]}})
    ids = d.ask(9)
    for pid in ids[:-1]:
        d.end(pid, 0.5)
    # a new bracket's {c: 1} at budget 3 would read, later, as a promotion of this round: wait
    assert d.ask(3) == []
    d.end(ids[-1], 0.9)
    nxt = d.ask(5)
    assert [d.budget(p) for p in nxt] == [3, 3, 3, 3, 3]  # the promotions, then bracket s=1 opens
    views = d.tuner.brackets(d.ctx())
    assert [[len(r) for r in v.rounds] for v in views] == [[9, 3], [2]]


# -- end to end: the manager with scripted trials (nnix.testing.FakeService), a resume mid-bracket -----


def test_end_to_end_with_a_resume_mid_bracket(tmp_path: Path) -> None:
    import asyncio

    from nnix.core.status import ExperimentStatus
    from nnix.testing import FakeMachine, FakeService, Outcome
    from nnix.testing.experiments import make_experiment, manager_for, run_experiment
    from nnix.testing.fakeservice import params

    def trial(spec: Any) -> Outcome:  # reports x * step for each step of its budget, then x * budget
        p = params(spec)
        return Outcome(intermediate=[p["x"] * (step + 1) for step in range(p[TRIAL_BUDGET])],
                       final=p["x"] * p[TRIAL_BUDGET])

    fake = FakeService.factory(FakeMachine(trial))
    _, exp_dir = make_experiment(
        tmp_path,
        searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
        trialCommand="true",
        trialConcurrency=2,
        maxTrialNumber=2,  # stops inside round 0 of the first bracket
        tuner={"name": "Hyperband", "classArgs": {"R": 3, "eta": 3, "exec_mode": "serial", "seed": 5}},
        assessor={"name": "Medianstop", "classArgs": {"start_step": 5}},
    )
    first = run_experiment(exp_dir, service=fake)
    assert first.status is ExperimentStatus.DONE and len(first.trials) == 2

    manager = manager_for(exp_dir, service=fake)
    manager.update_limit("max_trial_number", 8)

    async def resume() -> ExperimentStatus:
        return await asyncio.wait_for(manager.run("resume"), 60)

    try:
        assert asyncio.run(resume()) is ExperimentStatus.DONE
    finally:
        manager.store.close()
    from nnix.home import read_state

    state = read_state(exp_dir)
    trials = sorted(state.trials.values(), key=lambda t: t.sequence_id)
    assert len(trials) == 8 and all(t.status is TrialStatus.SUCCEEDED for t in trials)
    # R=3, eta=3: bracket s=1 is 3 x budget 1 then the best 1 x budget 3; bracket s=0 is 2 x budget 3
    assert [t.params[TRIAL_BUDGET] for t in trials] == [1, 1, 1, 3, 3, 3, 1, 1]
    best = max(trials[:3], key=lambda t: t.final_value or 0.0)
    assert trials[3].params == {**best.params, TRIAL_BUDGET: 3}
