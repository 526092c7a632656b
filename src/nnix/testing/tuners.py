"""A conformance suite every tuner inherits (pytest).

Subclass it in a test module, name the subclass ``Test...``, and set at least ``tuner_factory`` (a
callable returning a fresh tuner) and ``spaces`` (raw search spaces the tuner supports)::

    class TestMyTuner(TunerContract):
        tuner_factory = staticmethod(lambda: MyTuner(MyTuner.Args()))
        spaces = ({"x": {"_type": "uniform", "_value": [0, 1]}},)

Each test drives the tuner for ``rounds`` rounds of ``batch_size`` ids on every space, feeding its
proposals back as a history that mixes succeeded, failed, cancelled, early-stopped and still running
trials, with deterministic metric values. The tests check the invariants written in
:mod:`nnix.tuners.base`: proposals are valid points, tuners are deterministic and rebuildable from the
history alone, any history is accepted, and (``deduplicates = True``) discrete spaces get no repeats.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnix.errors import NoMoreTrialsError
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace, contains, duplicates_possible, key, sample
from nnix.tuners.base import Tuner, TunerContext

STATUS_CYCLE: tuple[TrialStatus, ...] = (
    TrialStatus.SUCCEEDED,
    TrialStatus.FAILED,
    TrialStatus.SUCCEEDED,
    TrialStatus.USER_CANCELED,
    TrialStatus.EARLY_STOPPED,
    TrialStatus.SUCCEEDED,
    TrialStatus.RUNNING,
    TrialStatus.SYS_CANCELED,
    TrialStatus.SUCCEEDED,
)


@dataclass(frozen=True)
class Round:
    """One ``suggest`` call of a drive: the context it got and what came back."""

    ctx: TunerContext
    ids: tuple[int, ...]
    proposals: tuple[Params, ...] | None  # None: NoMoreTrialsError


def objective(params: Params) -> float:
    """A deterministic pseudo-metric in [0, 1) for a parameter set."""
    return zlib.crc32(key(params).encode()) / 2**32


def record_for(parameter_id: int, params: Params, status: TrialStatus) -> TrialRecord:
    """A history record as the manager would keep it for a trial in ``status``."""
    value = objective(params)
    if status is TrialStatus.SUCCEEDED:
        return TrialRecord(parameter_id, params, status, value, (value / 2, value))
    if status in (TrialStatus.EARLY_STOPPED, TrialStatus.RUNNING):
        return TrialRecord(parameter_id, params, status, None, (value / 2,))
    return TrialRecord(parameter_id, params, status)


class TunerContract:
    """Base class of a tuner's conformance tests (not collected itself: its name has no ``Test``)."""

    tuner_factory: ClassVar[Callable[[], Tuner]]
    spaces: ClassVar[Sequence[dict[str, Any]]] = ()
    seed: ClassVar[int] = 20240601
    rounds: ClassVar[int] = 6
    batch_size: ClassVar[int] = 3
    direction: ClassVar[Direction] = Direction.MAXIMIZE
    deduplicates: ClassVar[bool] = True  # on discrete spaces: no repeats within a batch or of the history

    # -- hooks a subclass may override ------------------------------------------------------------

    def make_tuner(self) -> Tuner:
        factory: Callable[[], Tuner] = type(self).tuner_factory
        return factory()

    def is_valid_proposal(self, space: SearchSpace, params: Params) -> bool:
        """Whether ``params`` is a valid proposal for ``space`` (default: a point of the space)."""
        return contains(space, params)

    # -- helpers ---------------------------------------------------------------------------------

    def parsed_spaces(self) -> list[SearchSpace]:
        assert self.spaces, "set `spaces` to the search spaces this tuner supports"
        return [SearchSpace.from_json(raw) for raw in self.spaces]

    def context(self, space: SearchSpace, history: Sequence[TrialRecord] = ()) -> TunerContext:
        return TunerContext(space=space, direction=self.direction, seed=self.seed, history=tuple(history))

    def drive(
        self,
        space: SearchSpace,
        tuner: Tuner,
        history: Sequence[TrialRecord] = (),
        on_round: Callable[[Round], None] | None = None,
    ) -> list[Round]:
        """Ask ``tuner`` ``rounds`` times, feeding proposals back as history; stop when exhausted."""
        records = list(history)
        next_id = max((r.parameter_id for r in records), default=-1) + 1
        transcript: list[Round] = []
        for _ in range(self.rounds):
            ids = tuple(range(next_id, next_id + self.batch_size))
            ctx = self.context(space, records)
            try:
                proposals: tuple[Params, ...] | None = tuple(tuner.suggest(ctx, ids))
            except NoMoreTrialsError:
                proposals = None
            current = Round(ctx, ids, proposals)
            transcript.append(current)
            if on_round is not None:
                on_round(current)
            if proposals is None:
                break
            for pid, params in zip(ids, proposals, strict=False):
                records.append(record_for(pid, params, STATUS_CYCLE[pid % len(STATUS_CYCLE)]))
            next_id += len(ids)
        return transcript

    # -- the contract ----------------------------------------------------------------------------

    def test_proposals_are_valid_points(self) -> None:
        for space in self.parsed_spaces():
            for rnd in self.drive(space, self.make_tuner()):
                if rnd.proposals is None:
                    continue
                assert len(rnd.proposals) <= len(rnd.ids), f"more proposals than ids for {space.raw}"
                for params in rnd.proposals:
                    assert isinstance(params, dict)
                    assert self.is_valid_proposal(space, params), f"{params} is not a point of {space.raw}"

    def test_deterministic(self) -> None:
        for space in self.parsed_spaces():
            first = [r.proposals for r in self.drive(space, self.make_tuner())]
            second = [r.proposals for r in self.drive(space, self.make_tuner())]
            assert first == second, f"two fresh tuners disagree on {space.raw}"

    def test_rebuildable_from_history(self) -> None:
        for space in self.parsed_spaces():
            original = self.make_tuner()

            def check(rnd: Round, space: SearchSpace = space) -> None:
                try:
                    fresh: tuple[Params, ...] | None = tuple(self.make_tuner().suggest(rnd.ctx, rnd.ids))
                except NoMoreTrialsError:
                    fresh = None
                assert fresh == rnd.proposals, (
                    f"a fresh tuner given {len(rnd.ctx.history)} records proposes differently on {space.raw}"
                )

            self.drive(space, original, on_round=check)

    def test_reused_instance_follows_a_different_history(self) -> None:
        """A tuner used on one history and then handed another behaves like a fresh one."""
        for space in self.parsed_spaces():
            tuner = self.make_tuner()
            self.drive(space, tuner)
            other = self._foreign_history(space, count=4)
            ids = tuple(range(100, 100 + self.batch_size))
            ctx = self.context(space, other)
            assert self._ask(tuner, ctx, ids) == self._ask(self.make_tuner(), ctx, ids)

    def test_accepts_failed_cancelled_and_foreign_history(self) -> None:
        for space in self.parsed_spaces():
            history = self._foreign_history(space, count=2 * len(STATUS_CYCLE))
            assert {r.status for r in history} >= {TrialStatus.FAILED, TrialStatus.USER_CANCELED}
            transcript = self.drive(space, self.make_tuner(), history)
            for rnd in transcript:
                for params in rnd.proposals or ():
                    assert self.is_valid_proposal(space, params), f"{params} is not a point of {space.raw}"
            again = self.drive(space, self.make_tuner(), history)
            assert [r.proposals for r in transcript] == [r.proposals for r in again]

    def test_no_repeats_on_discrete_spaces(self) -> None:
        if not self.deduplicates:
            return
        for space in self.parsed_spaces():
            if not duplicates_possible(space):
                continue
            for rnd in self.drive(space, self.make_tuner()):
                keys = [key(p) for p in rnd.proposals or ()]
                assert len(keys) == len(set(keys)), f"repeated proposal within a batch on {space.raw}"
                before = {key(r.params) for r in rnd.ctx.history}
                assert not before.intersection(keys), f"proposal repeats the history on {space.raw}"

    # -- internals -------------------------------------------------------------------------------

    def _ask(self, tuner: Tuner, ctx: TunerContext, ids: Sequence[int]) -> list[Params] | None:
        try:
            return tuner.suggest(ctx, ids)
        except NoMoreTrialsError:
            return None

    def _foreign_history(self, space: SearchSpace, count: int) -> list[TrialRecord]:
        """Records this tuner did not propose: taken from one of its own runs under another seed when
        it can propose on this space at all, else random points of the space."""
        rng = np.random.default_rng(self.seed + 1)
        records: list[TrialRecord] = []
        source = self._ask(self.make_tuner(), TunerContext(space, self.direction, self.seed + 7), range(count))
        points = list(source or ())
        while len(points) < count:  # repeats allowed: any history is a valid history
            points.append(sample(space, rng))
        for i, params in enumerate(points[:count]):
            records.append(record_for(i, params, STATUS_CYCLE[(i + 1) % len(STATUS_CYCLE)]))
        return records


def drive(
    tuner: Tuner,
    raw: dict[str, Any],
    objective: Callable[[Params], float],
    trials: int,
    seed: int,
    batch: int = 1,
    direction: Direction = Direction.MINIMIZE,
) -> list[TrialRecord]:
    """Run ``tuner`` on ``objective`` over the space ``raw`` for ``trials`` trials asked ``batch`` ids at a
    time (every trial succeeds at once); the whole history."""
    space = SearchSpace.from_json(raw)
    history: list[TrialRecord] = []
    while len(history) < trials:
        ids = list(range(len(history), min(trials, len(history) + batch)))
        proposals = tuner.suggest(TunerContext(space, direction, seed, tuple(history)), ids)
        assert len(proposals) == len(ids), f"asked for {len(ids)} proposals, got {len(proposals)}"
        history += [TrialRecord(pid, p, TrialStatus.SUCCEEDED, objective(p)) for pid, p in zip(ids, proposals,
                                                                                                strict=True)]
    return history


def best(history: Sequence[TrialRecord]) -> float:
    """The lowest value in ``history``."""
    return min(r.value for r in history if r.value is not None)


def check_branin_smoke(make: Callable[[], Tuner], trials: int, seed: int = 0, below: float | None = None) -> None:
    """A fast smoke test of a model-based tuner on Branin: ``trials`` proposals (past its cold start) are in
    the domain and the best of them beats Random's best at the same budget and seed (and ``below``, if given;
    Branin's optimum is 0.397887). Determinism is the contract suite's. The tuner's quality, medians over
    seeds and budgets, is measured by ``bench/quality.py`` (``--problems branin --tuners gp,metis,dngo,random
    --trials 40 --seeds 3 --no-optuna``)."""
    from nnix.testing.spaces import SQUARE, branin
    from nnix.tuners.random import RandomTuner

    history = drive(make(), SQUARE, branin, trials, seed)
    space = SearchSpace.from_json(SQUARE)
    assert all(contains(space, r.params) for r in history), [r.params for r in history]
    random_best = best(drive(RandomTuner(), SQUARE, branin, trials, seed))
    assert best(history) < random_best, (best(history), random_best)
    if below is not None:
        assert best(history) < below, best(history)
