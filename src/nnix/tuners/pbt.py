"""Population-based training (NNI ``PBT``, alias ``PBTTuner``), synchronous generations.

A population of ``population_size`` members trains in *steps*. Every trial is one step of one
member; besides its hyper-parameters it receives two extra parameters:

* ``save_checkpoint_dir`` = ``<all_checkpoint_dir>/<member>/<step>``: where the trial saves its
  model at the end of the step;
* ``load_checkpoint_dir``: where it loads the model from. At step 0 it is the member's own step-0
  directory (nothing is there yet: trial code checks that the file exists, as with NNI); later it
  is the step before's ``save_checkpoint_dir`` of the member itself, or of the member it copied.

Generations are synchronous. Generation 0 is ``population_size`` random members. When every trial of
generation ``g`` has ended, members are ranked by their final result (a failed or cancelled trial, or
one without a result, ranks last: scored −inf when maximising, +inf when minimising, so the
generation always advances). The bottom ``ceil(fraction * population_size)`` members *exploit*: each
copies the hyper-parameters and checkpoint of a random member of the top as many, then *explores*:
each parameter is resampled from its prior with probability ``resample_probability``, otherwise moved
up or down (50/50) by ``factor * (high - low)`` (uniform), ``factor * (log high - log low)`` in log
space (loguniform), ``factor * sigma`` (normal; in log space for lognormal), one step of ``q``
(q-types) or one option/integer (choice, randint), and clipped to its bounds. The other members keep
their hyper-parameters and continue from their own checkpoint. While some trial of the current
generation is still running, ``suggest`` answers "not now" (no proposal).

State comes from the history alone: a record belongs to member ``i`` at step ``s`` when its
``save_checkpoint_dir`` is ``<all_checkpoint_dir>/<i>/<s>`` (records of other shapes, e.g. imported
results without checkpoint directories, are ignored; imported PBT records count like any other).
Randomness comes from ``rng_for(seed, parameter_id, stream)`` of the trial being proposed.

classArgs (NNI's, NNI defaults): ``optimize_mode`` (maximize), ``all_checkpoint_dir`` (None: NNI
then read ``NNI_CHECKPOINT_DIRECTORY`` from the environment, which a pure tuner cannot do; nnix uses
the relative directory ``checkpoint``, resolved by the trial against its working directory: set an
absolute path shared by all trials, e.g. on shared storage, for real runs), ``population_size``
(10), ``factor`` (0.2), ``resample_probability`` (0.25), ``fraction`` (0.2; at most 0.5 so the top and
the bottom do not overlap), ``seed`` (overrides the experiment's seed). Every search-space type is
supported except nested choice.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from nnix.errors import FieldIssue, SearchSpaceError, TunerError
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Param, Params, SearchSpace, contains, sample
from nnix.tuners.base import TunerArgs, TunerContext, rng_for

__all__ = ["LOAD_KEY", "SAVE_KEY", "PBTArgs", "PBTTuner", "checkpoint_dir", "perturb"]

LOAD_KEY = "load_checkpoint_dir"
SAVE_KEY = "save_checkpoint_dir"
DEFAULT_CHECKPOINT_DIR = "checkpoint"

_STREAM_INIT = 0  # a generation-0 member's random hyper-parameters
_STREAM_EXPLOIT = 1  # which top member a bottom member copies
_STREAM_EXPLORE = 2  # the perturbation


class PBTArgs(TunerArgs):
    """NNI ``PBT`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    all_checkpoint_dir: str | None = Field(default=None, min_length=1)
    population_size: int = Field(default=10, ge=1)
    factor: float = Field(default=0.2, gt=0, description="size of a perturbation, as a share of the range")
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    fraction: float = Field(default=0.2, gt=0, le=0.5, description="share of the population exploited / exploiting")
    seed: int | None = None  # overrides the experiment's seed when set


def checkpoint_dir(root: str, member: int, step: int) -> str:
    """``<root>/<member>/<step>``."""
    return os.path.join(root, str(member), str(step))


@dataclass(frozen=True)
class _Step:
    """One trial of the population: member, step, hyper-parameters, score (higher is better)."""

    member: int
    step: int
    hyper: Params
    score: float
    ended: bool


def _strip(params: Mapping[str, Any]) -> Params:
    return {k: v for k, v in params.items() if k not in (LOAD_KEY, SAVE_KEY)}


def _parse(root: str, params: Any) -> tuple[int, int] | None:
    """(member, step) of a record this tuner proposed, from its ``save_checkpoint_dir``."""
    if not isinstance(params, Mapping):
        return None
    path = params.get(SAVE_KEY)
    prefix = os.path.join(root, "")
    if not isinstance(path, str) or not path.startswith(prefix):
        return None
    parts = path[len(prefix) :].split(os.sep)
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _move(p: Param, value: Any, up: bool, factor: float) -> Any:
    """``value`` moved one step up or down (see the module docstring), clipped to the bounds."""
    sign = 1.0 if up else -1.0
    if p.type == "choice":
        index = next((i for i, o in enumerate(p.choices) if o == value and type(o) is type(value)), None)
        if index is None:
            index = next((i for i, o in enumerate(p.choices) if o == value), 0)
        return p.choice_value(min(max(index + (1 if up else -1), 0), len(p.choices) - 1))
    if p.type == "randint":
        low, high = int(p.low or 0), int(p.high or 1)
        return min(max(int(value) + (1 if up else -1), low), high - 1)
    v = float(value)
    if p.q is not None:
        moved = v + sign * p.q
        if p.is_bounded:
            moved = min(max(moved, float(p.low or 0)), float(p.high or 0))
        if p.log:
            return p.from_internal(math.log(moved)) if moved > 0 else 0.0
        return p.from_internal(moved)
    if p.is_bounded:
        lo, hi = p.internal_bounds()
        x = math.log(v) if p.log else v
        return p.from_internal(min(max(x + sign * factor * (hi - lo), lo), hi))
    x = math.log(v) if p.log else v
    return p.from_internal(x + sign * factor * float(p.sigma or 1.0))


def perturb(space: SearchSpace, hyper: Params, rng: np.random.Generator, factor: float, resample: float) -> Params:
    """PBT's *explore* step: every parameter resampled with probability ``resample``, else moved."""
    out: Params = {}
    for p in space.params:
        value = hyper.get(p.name)
        if value is None or rng.random() < resample or not p.contains(value) or (p.log and not float(value) > 0):
            out[p.name] = p.sample(rng)
        else:
            out[p.name] = _move(p, value, bool(rng.random() < 0.5), factor)
    return out


def _check_space(space: SearchSpace) -> None:
    issues = []
    for p in space.params:
        path = "searchSpace." + p.name
        if p.nested:
            issues.append(FieldIssue(path, "PBT does not support nested choice", "flatten the search space"))
    if issues:
        raise SearchSpaceError(issues)
    for name in (LOAD_KEY, SAVE_KEY):
        if any(p.name == name for p in space.params):
            raise TunerError(
                f"PBT: the search space has a parameter named {name!r}",
                f"PBT adds {LOAD_KEY} and {SAVE_KEY} to every trial's parameters itself; rename that parameter",
            )


class PBTTuner:
    """Population-based training; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = PBTArgs

    def __init__(self, args: PBTArgs | None = None) -> None:
        self.args = args or PBTArgs()
        self.root = self.args.all_checkpoint_dir or DEFAULT_CHECKPOINT_DIR

    def population(self, ctx: TunerContext) -> dict[int, dict[int, _Step]]:
        """Step -> member -> its trial, from the history (first record wins)."""
        size = self.args.population_size
        sign = 1.0 if ctx.direction is Direction.MAXIMIZE else -1.0
        steps: dict[int, dict[int, _Step]] = {}
        for r in ctx.history:
            found = _parse(self.root, r.params)
            if found is None or not 0 <= found[0] < size:
                continue
            member, step = found
            if member in steps.get(step, {}):
                continue
            steps.setdefault(step, {})[member] = _Step(
                member, step, _strip(r.params), _score(r, sign), r.status.is_terminal
            )
        return steps

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        _check_space(ctx.space)
        args = self.args
        size = args.population_size
        seed = args.seed if args.seed is not None else ctx.seed
        steps = self.population(ctx)
        step = max(steps, default=0)
        current = steps.get(step, {})
        if len(current) == size:
            if not all(s.ended for s in current.values()):
                return []  # not now: the generation is still running
            step += 1
            current = {}
        previous = steps.get(step - 1, {}) if step else {}
        top, bottom = self._split(previous) if step else ([], [])
        missing = [m for m in range(size) if m not in current]
        out: list[Params] = []
        for member, pid in zip(missing, parameter_ids, strict=False):
            out.append(self._member(ctx.space, member, step, previous, top, bottom, seed, pid))
        return out

    def _split(self, generation: Mapping[int, _Step]) -> tuple[list[int], list[int]]:
        """Members of the top and of the bottom of a finished generation."""
        size = self.args.population_size
        ranked = sorted(range(size), key=lambda m: (-_at(generation, m).score, m))
        k = min(math.ceil(self.args.fraction * size), size // 2)
        return ranked[:k], (ranked[size - k :] if k else [])

    def _member(
        self,
        space: SearchSpace,
        member: int,
        step: int,
        previous: Mapping[int, _Step],
        top: list[int],
        bottom: list[int],
        seed: int,
        pid: int,
    ) -> Params:
        save = checkpoint_dir(self.root, member, step)
        if step == 0:
            hyper = sample(space, rng_for(seed, pid, _STREAM_INIT))
            return {**hyper, LOAD_KEY: save, SAVE_KEY: save}
        source = member
        hyper = _at(previous, member).hyper
        if member in bottom and top:
            source = top[int(rng_for(seed, pid, _STREAM_EXPLOIT).integers(len(top)))]
            hyper = perturb(
                space,
                _at(previous, source).hyper,
                rng_for(seed, pid, _STREAM_EXPLORE),
                self.args.factor,
                self.args.resample_probability,
            )
        elif not contains(space, hyper):  # e.g. the search space was updated
            hyper = sample(space, rng_for(seed, pid, _STREAM_INIT))
        return {**hyper, LOAD_KEY: checkpoint_dir(self.root, source, step - 1), SAVE_KEY: save}


def _score(record: TrialRecord, sign: float) -> float:
    if record.value is None or not math.isfinite(record.value):
        return -math.inf
    return sign * float(record.value)


def _at(generation: Mapping[int, _Step], member: int) -> _Step:
    found = generation.get(member)
    return found if found is not None else _Step(member, -1, {}, -math.inf, True)
