"""Hyperband (NNI ``Hyperband``), with its bracket state rebuilt from the history.

Schedule (NNI's exact arithmetic, ``EPS = 1e-6``): ``s_max = floor(log_eta(R) + EPS)``; brackets
are opened in the order ``s = s_max, s_max - 1, ..., 0`` and then a new Hyperband iteration starts
again at ``s_max``. Bracket ``s`` has ``n = ceil((s_max + 1) * eta**s / (s + 1) - EPS)`` and
``r = R / eta**s``; its round ``i = 0..s`` runs ``floor(n / eta**i + EPS)`` configurations with the
budget ``floor(r * eta**i + EPS)``. For R=60, eta=3: ``27x2, 9x6, 3x20, 1x60 | 12x6, 4x20, 1x60 |
6x20, 2x60 | 4x60``; for R=81 the second bracket starts with 34 configurations, as NNI's code gives.

Trials: round-0 configurations are random points of the search space; every proposal carries the
key ``TRIAL_BUDGET`` (the round's budget) in the parameters the trial receives. A configuration's
performance in a round is its final result, else its latest intermediate result; configurations
with neither are left out of the ranking. When every trial of a round has ended (any status), the
best ``n_{i+1}`` (by performance, in the experiment's direction; ties: the earlier trial) are
proposed again as *new trials* with the next budget. Proposals wait in one first-in-first-out
queue, as in NNI: a new bracket's round 0, or a finished round's promotions, are queued when they
become due and handed out in that order. ``exec_mode: parallelism`` opens a new bracket whenever
the queue is empty; ``serial`` opens one only when the latest bracket has issued its last round,
and otherwise answers "not now" (an empty list) until a round ends.

Resume without checkpoints: the whole bracket state is a pure function of ``ctx.history``. The
tuner replays the history in parameter-id order and recognises each of its own past proposals from
its parameters alone -- a promotion repeats a configuration of a finished round with that bracket's
next budget; anything else with the budget of the next bracket's round 0 opened that bracket -- so
no extra key beyond ``TRIAL_BUDGET`` is needed. Records it cannot place (imported data, trials of
another tuner) are ignored. A reading is only in doubt when a configuration repeats (small discrete
spaces): a fresh configuration, or a promotion, equal to a configuration of a round that has not
ended yet and would promote with the same budget could later be read as that round's promotion. So
fresh configurations avoid earlier ones (a few redraws) and such clashes; when a clash cannot be
avoided the tuner waits ("not now") until that round has ended. With this rule the replay of any
history places every trial exactly where the tuner put it when it proposed it.

Deviations from NNI: parameter ids are the manager's integers (NNI: ``"{bracket}_{round}_{seq}"``);
rounds that finish between two calls are queued in bracket order (NNI: in trial-end order); a round
in which no configuration reported a metric ends its bracket (NNI fails with an IndexError) and a
round with fewer ranked configurations than ``n_{i+1}`` promotes only those; on discrete spaces
fresh configurations avoid repeating earlier ones when a few redraws allow it (NNI does not check);
the state survives a resume (NNI's does not).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from nnix.errors import TunerError
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace, duplicates_possible, key, sample
from nnix.tuners.base import TunerArgs, TunerContext, rng_for

__all__ = [
    "EPS",
    "TRIAL_BUDGET",
    "BracketShape",
    "BracketView",
    "HyperbandArgs",
    "HyperbandScheduler",
    "HyperbandTuner",
    "Schedule",
    "budget_of",
    "check_space",
    "performance",
    "propose",
    "random_config",
    "seen_configs",
    "strip_budget",
]

EPS = 1e-6
TRIAL_BUDGET = "TRIAL_BUDGET"
REDRAWS = 8  # fresh draws tried on a discrete space before a repeat is accepted

Budget = int | float
ExecMode = Literal["parallelism", "serial"]
# (parameter id, budget, configurations taken this batch, clashes(key)) -> a new configuration (no TRIAL_BUDGET)
Sampler = Callable[[int, Budget, set[str], Callable[[str], bool]], Params]


# --------------------------------------------------------------------------------------------------
# the schedule


@dataclass(frozen=True)
class BracketShape:
    """One bracket: ``rounds[i] = (configurations, budget)`` of round ``i``."""

    s: int
    rounds: tuple[tuple[int, Budget], ...]

    def configs(self, i: int) -> int:
        return self.rounds[i][0]

    def budget(self, i: int) -> Budget:
        return self.rounds[i][1]


@dataclass(frozen=True)
class Schedule:
    """Every bracket shape, ``shapes[s]`` for ``s = 0..s_max``; brackets open from ``s_max`` down."""

    s_max: int
    shapes: tuple[BracketShape, ...]

    @classmethod
    def hyperband(cls, R: int, eta: float) -> Schedule:
        """NNI Hyperband's schedule: integer budgets ``floor(r * eta**i + EPS)``."""
        s_max = math.floor(math.log(R) / math.log(eta) + EPS)
        shapes = []
        for s in range(s_max + 1):
            n = math.ceil((s_max + 1) * eta**s / (s + 1) - EPS)
            r = R / eta**s
            rounds = tuple((math.floor(n / eta**i + EPS), math.floor(r * eta**i + EPS)) for i in range(s + 1))
            shapes.append(BracketShape(s, rounds))
        return cls(s_max, tuple(shapes))

    @classmethod
    def bohb(cls, min_budget: float, max_budget: float, eta: float) -> Schedule:
        """BOHB's schedule: ``s_max = floor(log_eta(max/min) + EPS)``, ``r = max_budget / eta**s``;
        budgets are ``r * eta**i``, written as integers when they are whole numbers."""
        s_max = max(0, math.floor(math.log(max_budget / min_budget) / math.log(eta) + EPS))
        shapes = []
        for s in range(s_max + 1):
            n = math.ceil((s_max + 1) * eta**s / (s + 1) - EPS)
            r = max_budget / eta**s
            rounds = tuple((math.floor(n / eta**i + EPS), _tidy(r * eta**i)) for i in range(s + 1))
            shapes.append(BracketShape(s, rounds))
        return cls(s_max, tuple(shapes))

    def bracket(self, k: int) -> tuple[int, BracketShape]:
        """The ``k``-th bracket ever opened (from 0): its Hyperband iteration and its shape."""
        iteration, pos = divmod(k, self.s_max + 1)
        return iteration, self.shapes[self.s_max - pos]


def _tidy(x: float) -> Budget:
    nearest = round(x)
    return int(nearest) if abs(x - nearest) <= EPS * max(1.0, abs(x)) else x


def _same_budget(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


# --------------------------------------------------------------------------------------------------
# replayed state


def performance(record: TrialRecord) -> float | None:
    """A trial's performance in its round: the final result, else the latest intermediate one."""
    if record.value is not None:
        return record.value
    series = record.series  # (as held: no tuple built)
    if series:
        return series[-1]
    return None


def budget_of(params: Any) -> float | None:
    """The numeric ``TRIAL_BUDGET`` of a parameter set, or None."""
    if not isinstance(params, dict):
        return None
    b = params.get(TRIAL_BUDGET)
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
        return None
    return float(b)


def strip_budget(params: Params) -> Params:
    return {k: v for k, v in params.items() if k != TRIAL_BUDGET}


@dataclass
class _Slot:
    record: TrialRecord
    config: Params
    config_key: str
    source: int | None  # index of the promoted slot in the previous round


@dataclass(eq=False)
class _Round:
    budget: Budget
    planned: int
    slots: list[_Slot] = field(default_factory=list)
    running: int = 0  # slots whose trial has not ended
    ranking: list[int] | None = None  # cache of HyperbandScheduler._ranking

    def add(self, slot: _Slot) -> None:
        self.slots.append(slot)
        self.running += 0 if slot.record.status.is_terminal else 1
        self.ranking = None

    @property
    def issued(self) -> bool:
        return len(self.slots) >= self.planned

    @property
    def ended(self) -> bool:
        return self.issued and self.running == 0


@dataclass(eq=False)
class _Bracket:
    k: int
    iteration: int
    shape: BracketShape
    rounds: list[_Round] = field(default_factory=list)

    @property
    def s(self) -> int:
        return self.shape.s


@dataclass(frozen=True)
class BracketView:
    """A bracket as replayed from the history: ``rounds[i]`` are the parameter ids of round ``i``."""

    k: int
    iteration: int
    s: int
    rounds: tuple[tuple[int, ...], ...]

    @property
    def bracket_id(self) -> str:
        """NNI's bracket id, ``"{iteration}-{s}"``."""
        return f"{self.iteration}-{self.s}"


@dataclass(frozen=True)
class _Action:
    bracket: _Bracket | None  # None: open a new bracket
    round_index: int
    source: int | None  # promotion: index of the slot promoted; None: a fresh configuration


class HyperbandScheduler:
    """Hyperband's bracket bookkeeping over one history (built afresh for each ``suggest``).

    Reused by BOHB, which only changes the schedule and how fresh configurations are drawn.
    """

    def __init__(self, schedule: Schedule, direction: Direction, exec_mode: ExecMode) -> None:
        self.schedule = schedule
        self.direction = direction
        self.exec_mode = exec_mode
        self.brackets: list[_Bracket] = []
        self._live: list[_Bracket] = []  # brackets that may still propose (a cache: done ones never come back)
        self._open: tuple[_Bracket, int] | None = None

    # -- replay ------------------------------------------------------------------------------------

    @classmethod
    def replay(
        cls, schedule: Schedule, direction: Direction, exec_mode: ExecMode, history: Sequence[TrialRecord]
    ) -> HyperbandScheduler:
        """The state after the tuner's own proposals in ``history`` (negative ids are skipped)."""
        state = cls(schedule, direction, exec_mode)
        for record in sorted((r for r in history if r.parameter_id >= 0), key=lambda r: r.parameter_id):
            state.add(record)
        return state

    def add(self, record: TrialRecord) -> bool:
        """Place one past proposal; False if it is not one this tuner could have made here."""
        budget = budget_of(record.params)
        if budget is None:
            return False
        config = strip_budget(record.params)
        ck = key(config)
        if self._open is not None:
            bracket, i = self._open
            rnd = bracket.rounds[i]
            if _same_budget(budget, rnd.budget):
                if i == 0:
                    self._apply(_Action(bracket, 0, None), record, config, ck)
                    return True
                src = self._source_with_key(bracket, i - 1, ck)
                if src is not None:
                    self._apply(_Action(bracket, i, src), record, config, ck)
                    return True
        for bracket in self._live:
            due = self._due_round(bracket)
            if due is None or not _same_budget(budget, bracket.shape.budget(due)):
                continue
            src = self._source_with_key(bracket, due - 1, ck)
            if src is not None:
                self._apply(_Action(bracket, due, src), record, config, ck)
                return True
        _, shape = self.schedule.bracket(len(self.brackets))
        if _same_budget(budget, shape.budget(0)):
            self._apply(_Action(None, 0, None), record, config, ck)
            return True
        return False

    # -- what comes next ---------------------------------------------------------------------------

    def next_action(self) -> _Action | None:
        """The head of the queue: the open round, a due promotion, a new bracket, or None (wait)."""
        if self._open is not None:
            bracket, i = self._open
            if i == 0:
                return _Action(bracket, 0, None)
            src = self._best_unused(bracket, i - 1)
            if src is not None:
                return _Action(bracket, i, src)
            self._close_open()  # nothing left to promote (a ranking that changed afterwards): it ends here
        for bracket in self._live:
            due = self._due_round(bracket)
            if due is not None:
                src = self._best_unused(bracket, due - 1)
                if src is not None:
                    return _Action(bracket, due, src)
        if self.exec_mode == "parallelism" or not self.brackets or self._done_issuing(self.brackets[-1]):
            return _Action(None, 0, None)
        return None

    def ambiguous(self, action: _Action, budget: Budget, config_key: str) -> bool:
        """Whether a proposal for ``action`` with this configuration could be read otherwise by a
        replay that sees more trials ended: as the promotion of a round that has not ended yet, of a
        bracket the replay would look at first. Only a repeated configuration can be."""
        if self._open is not None and action.bracket is self._open[0] and action.round_index == self._open[1]:
            return False  # the open round always takes the next proposal, in the replay too
        for bracket in self._live:
            if bracket is action.bracket:
                break  # brackets after the promoting one are never considered before it
            last = len(bracket.rounds) - 1
            rnd = bracket.rounds[last]
            if last >= bracket.s or not rnd.issued or rnd.ended:
                continue
            if _same_budget(budget, bracket.shape.budget(last + 1)) and any(
                slot.config_key == config_key for slot in rnd.slots
            ):
                return True
        return False

    def budget_for(self, action: _Action) -> Budget:
        if action.bracket is None:
            return self.schedule.bracket(len(self.brackets))[1].budget(0)
        return action.bracket.shape.budget(action.round_index)

    def config_for(self, action: _Action) -> Params | None:
        """The configuration a promotion repeats (a copy), or None for a fresh one."""
        if action.bracket is None or action.source is None:
            return None
        return copy.deepcopy(action.bracket.rounds[action.round_index - 1].slots[action.source].config)

    def emit(self, action: _Action, record: TrialRecord) -> None:
        """Record ``record`` (a proposal just made for ``action``) as if it were in the history."""
        config = strip_budget(record.params)
        self._apply(action, record, config, key(config))

    def views(self) -> list[BracketView]:
        return [
            BracketView(b.k, b.iteration, b.s, tuple(tuple(s.record.parameter_id for s in r.slots) for r in b.rounds))
            for b in self.brackets
        ]

    # -- internals ---------------------------------------------------------------------------------

    def _apply(self, action: _Action, record: TrialRecord, config: Params, ck: str) -> None:
        if action.bracket is None:
            self._close_open()
            iteration, shape = self.schedule.bracket(len(self.brackets))
            bracket = _Bracket(len(self.brackets), iteration, shape, [_Round(shape.budget(0), shape.configs(0))])
            self.brackets.append(bracket)
            self._live.append(bracket)
            self._open = (bracket, 0)
        else:
            bracket = action.bracket
            i = action.round_index
            if self._open is None or self._open[0] is not bracket or self._open[1] != i:
                self._close_open()
                prev = bracket.rounds[i - 1]
                planned = min(bracket.shape.configs(i), len(self._ranking(prev)))
                bracket.rounds.append(_Round(bracket.shape.budget(i), planned))
                self._open = (bracket, i)
        bracket, i = self._open
        rnd = bracket.rounds[i]
        rnd.add(_Slot(record, config, ck, action.source))
        if rnd.issued:
            self._open = None
        self._retire(bracket)

    def _close_open(self) -> None:
        """Truncate the open round (only for histories this tuner would not have produced)."""
        if self._open is not None:
            bracket, i = self._open
            bracket.rounds[i].planned = len(bracket.rounds[i].slots)
            self._open = None
            self._retire(bracket)

    def _retire(self, bracket: _Bracket) -> None:
        if self._done_issuing(bracket) and bracket in self._live:
            self._live.remove(bracket)

    def _ranking(self, rnd: _Round) -> list[int]:
        """Indices of the round's slots that have a performance, best first (ties: earlier first)."""
        if rnd.ranking is None:
            scored = [(p, j) for j, s in enumerate(rnd.slots) if (p := performance(s.record)) is not None]
            sign = -1.0 if self.direction is Direction.MAXIMIZE else 1.0
            scored.sort(key=lambda pj: (sign * pj[0], pj[1]))
            rnd.ranking = [j for _, j in scored]
        return rnd.ranking

    def _used(self, bracket: _Bracket, i: int) -> set[int]:
        """Slots of round ``i`` already promoted to round ``i + 1``."""
        if i + 1 >= len(bracket.rounds):
            return set()
        return {s.source for s in bracket.rounds[i + 1].slots if s.source is not None}

    def _best_unused(self, bracket: _Bracket, i: int) -> int | None:
        used = self._used(bracket, i)
        return next((j for j in self._ranking(bracket.rounds[i]) if j not in used), None)

    def _source_with_key(self, bracket: _Bracket, i: int, ck: str) -> int | None:
        rnd = bracket.rounds[i]
        used = self._used(bracket, i)
        return next((j for j in self._ranking(rnd) if j not in used and rnd.slots[j].config_key == ck), None)

    def _due_round(self, bracket: _Bracket) -> int | None:
        """The round whose promotions are due (its previous round ended, it has not started), if any."""
        last = len(bracket.rounds) - 1
        if last >= bracket.s or not bracket.rounds[last].ended:
            return None
        if self._open is not None and self._open[0] is bracket:
            return None
        return last + 1

    def _done_issuing(self, bracket: _Bracket) -> bool:
        """Whether ``bracket`` will never propose again: its last round is issued, or a round ended
        with nothing to promote."""
        last = len(bracket.rounds) - 1
        if not bracket.rounds[last].issued:
            return False
        if last >= bracket.s:
            return True
        return bracket.rounds[last].ended and not self._ranking(bracket.rounds[last])


# --------------------------------------------------------------------------------------------------
# the tuner


def random_config(
    space: SearchSpace,
    seed: int,
    pid: int,
    seen: set[str],
    taken: set[str],
    clashes: Callable[[str], bool] | None = None,
) -> Params:
    """A random point for parameter id ``pid``. On a discrete space a few redraws look for one that
    is neither in ``seen``/``taken`` nor ``clashes``; failing that, one that does not clash; failing
    that, the first draw (Hyperband never runs out: repeats are allowed)."""
    first = sample(space, rng_for(seed, pid))
    if space.is_empty or not duplicates_possible(space):
        return first
    fallback: Params | None = None
    params = first
    for stream in range(1, REDRAWS + 2):
        k = key(params)
        clash = clashes is not None and clashes(k)
        if not clash and k not in seen and k not in taken:
            return params
        if not clash and fallback is None:
            fallback = params
        if stream <= REDRAWS:
            params = sample(space, rng_for(seed, pid, stream))
    return fallback if fallback is not None else first


def seen_configs(space: SearchSpace, history: Sequence[TrialRecord]) -> set[str]:
    """Keys of every configuration in the history (``TRIAL_BUDGET`` removed); empty when the space
    cannot repeat a point (a continuous top-level parameter), where nothing needs checking."""
    if space.is_empty or not duplicates_possible(space):
        return set()
    return {key(strip_budget(r.params)) for r in history if isinstance(r.params, dict)}


def check_space(space: SearchSpace, tuner: str) -> None:
    if any(p.name == TRIAL_BUDGET for p in space.params):
        raise TunerError(
            f"{tuner}: the search space has a parameter named {TRIAL_BUDGET!r}",
            f"{tuner} adds {TRIAL_BUDGET} to every trial's parameters itself; rename that parameter",
        )


def propose(state: HyperbandScheduler, parameter_ids: Sequence[int], sampler: Sampler) -> list[Params]:
    """Hand out the head of the queue for each id until the queue has nothing to give now.

    A proposal that a later replay could read two ways (see :meth:`HyperbandScheduler.ambiguous`) is
    not made: the tuner waits for the trials that cause the doubt to end (only on discrete spaces
    small enough for configurations to repeat)."""
    out: list[Params] = []
    taken: set[str] = set()
    for pid in parameter_ids:
        action = state.next_action()
        if action is None:
            break
        budget = state.budget_for(action)
        config = state.config_for(action)
        if config is None:

            def clashes(k: str, a: _Action = action, b: Budget = budget) -> bool:
                return state.ambiguous(a, b, k)

            config = sampler(pid, budget, taken, clashes)
        ck = key(config)
        if state.ambiguous(action, budget, ck):
            break
        taken.add(ck)
        params = {**config, TRIAL_BUDGET: budget}
        out.append(params)
        state.emit(action, TrialRecord(pid, copy.deepcopy(params), TrialStatus.WAITING))
    return out


class HyperbandArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    R: int = Field(default=60, ge=1, description="the largest budget a configuration gets")
    eta: int = Field(default=3, ge=2, description="the reduction factor between rounds")
    exec_mode: ExecMode = "parallelism"
    seed: int | None = None  # overrides the experiment's seed when set


class HyperbandTuner:
    """Hyperband (Li et al., 2017) with NNI's schedule, ``TRIAL_BUDGET`` key and queueing."""

    Args: ClassVar[type[TunerArgs]] = HyperbandArgs

    def __init__(self, args: HyperbandArgs | None = None) -> None:
        self.args = args or HyperbandArgs()
        self.schedule = Schedule.hyperband(self.args.R, self.args.eta)

    def state(self, ctx: TunerContext) -> HyperbandScheduler:
        """The bracket state ``ctx.history`` implies."""
        return HyperbandScheduler.replay(self.schedule, ctx.direction, self.args.exec_mode, ctx.history)

    def brackets(self, ctx: TunerContext) -> list[BracketView]:
        """The brackets ``ctx.history`` implies (for tools and tests)."""
        return self.state(ctx).views()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        check_space(ctx.space, "Hyperband")
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        state = self.state(ctx)
        seen = seen_configs(ctx.space, ctx.history)

        def sampler(pid: int, budget: Budget, taken: set[str], clashes: Callable[[str], bool]) -> Params:
            return random_config(ctx.space, seed, pid, seen, taken, clashes)

        return propose(state, parameter_ids, sampler)
