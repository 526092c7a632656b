"""SMAC (NNI ``SMAC``): a wrapper of SMAC3 (random-forest SMBO), an optional extra.

Install with ``pip install 'nnix[smac]'`` (SMAC3 2.x, which brings ConfigSpace and scikit-learn).
Without it, building the tuner raises :class:`~nnix.errors.TunerError` with that hint; nothing else
in nnix needs it.

How it is wrapped (SMAC3's documented ask-and-tell interface, ``HyperparameterOptimizationFacade``
with its defaults: random forest, log expected improvement, Sobol initial design of 10
configurations per parameter, local and random search):

* **Rebuilt on every call.** Each ``suggest`` builds a fresh SMAC from the search space and
  ``seed`` and *tells* it the history: every record with a final value (cost = the value, negated
  when maximising; a metric of 0 is data; imported results count like any other); every running or
  waiting trial with the worst cost observed so far (a constant liar, so SMAC's model steers away
  from concurrent trials); every failed or cancelled trial without a value is registered as still
  running, which SMAC never proposes again and never learns from (NNI ignores failures too). Then
  it *asks* once per parameter id, telling each answer back with the liar's cost before the next
  ask. SMAC's own randomness is seeded with ``seed`` (the same in every call, so its initial design
  is stable across calls), which makes proposals a pure function of the seed and the history.
* **Search space** (NNI's SMAC types): ``choice`` (categorical, by option index), ``randint``
  (ordered integer), ``uniform``, ``loguniform`` (log-scaled float) and ``quniform`` (an ordered
  integer over its grid points, so the configuration SMAC proposed is exactly the one told back).
  Nested choice, ``qloguniform`` and the normal family are a :class:`~nnix.errors.SearchSpaceError`.
* **Files.** SMAC3 always writes its run state to an output directory; the wrapper gives it a
  private temporary directory that is deleted when the call returns (nothing is read back).
* ``config_dedup``: SMAC already avoids the configurations it has been told about; with
  ``config_dedup: true`` a proposal that repeats the history or the batch anyway is replaced by a
  random unused one (NNI's meaning), and a discrete space ends with
  :class:`~nnix.errors.NoMoreTrialsError` when exhausted.

classArgs (NNI's, NNI defaults): ``optimize_mode`` (maximize), ``config_dedup`` (false), ``seed``
(overrides the experiment's seed).

Cost cap: rebuilding SMAC costs one ``tell`` per observation, and SMAC's own model fit grows with them
(measured: 0.08 / 0.2 / 0.9 s per suggestion at 100 / 200 / 500 observations, 2-D). So SMAC learns from at most
``HISTORY_CAP`` (200) observations: the best 100 and the 100 most recent. Beyond 200 observations a suggestion
costs about what it costs at 200 (measured: 0.2 s at 200 and 0.24 s at 1000 in 2-D; 0.6 s and 0.7 s in 10-D).
The observations left out are not told at all (registering them as known configurations made SMAC slower than
telling them), so SMAC may propose one of them again: ``config_dedup: true`` replaces such a repeat.
"""

from __future__ import annotations

import importlib
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Literal

from nnix.errors import NoMoreTrialsError, SearchSpaceError, TunerError
from nnix.model.trials import Direction
from nnix.space import Param, Params, SearchSpace
from nnix.tuners.base import TunerArgs, TunerContext
from nnix.tuners.bo import propose_random
from nnix.tuners.dedup import Deduplicator, exhausted
from nnix.tuners.transform import Column, SpaceTransform, unsupported

__all__ = ["SMACArgs", "SMACTuner", "smac_modules"]

SMAC_TYPES = frozenset({"choice", "randint", "uniform", "quniform", "loguniform"})
INSTALL_HINT = "pip install 'nnix[smac]'"
_TRIAL_SEED = 0  # the instance seed every told trial carries (deterministic scenario: one seed)


class SMACArgs(TunerArgs):
    """NNI ``SMAC`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    config_dedup: bool = False
    seed: int | None = None  # overrides the experiment's seed when set


@dataclass(frozen=True)
class SmacModules:
    """The SMAC3 and ConfigSpace names the wrapper uses."""

    facade: Any
    scenario: Any
    trial_info: Any
    trial_value: Any
    configspace: ModuleType


def smac_modules() -> SmacModules:
    """Import SMAC3 lazily; :class:`TunerError` with the install hint when it is missing or broken."""
    try:
        smac = importlib.import_module("smac")
        dataclasses = importlib.import_module("smac.runhistory.dataclasses")
        configspace = importlib.import_module("ConfigSpace")
        modules = SmacModules(
            facade=smac.HyperparameterOptimizationFacade,
            scenario=smac.Scenario,
            trial_info=dataclasses.TrialInfo,
            trial_value=dataclasses.TrialValue,
            configspace=configspace,
        )
    except (ImportError, AttributeError) as e:
        raise TunerError(
            f"the SMAC tuner needs the SMAC3 package, which cannot be imported ({e})",
            f"{INSTALL_HINT}  (or pick another model-based tuner: TPE, GP, Metis, DNGO)",
        ) from e
    logger = logging.getLogger("smac")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)  # SMAC logs every facade construction at INFO
    return modules


@dataclass(frozen=True)
class _Dim:
    column: Column  # the parameter in the shared space transform (option matching)
    fixed: bool  # one possible value: not given to SMAC
    k_min: int = 0  # quniform: grid index of the first point
    points: int = 0  # quniform: number of grid points

    @property
    def param(self) -> Param:
        return self.column.param


def _dims(space: SearchSpace) -> list[_Dim]:
    issues = unsupported(
        space,
        "SMAC",
        SMAC_TYPES,
        numeric_choice=False,
        nested_hint="flatten the search space, or use TPE",
        allowed=", ".join(sorted(SMAC_TYPES)),
    )
    if issues:
        raise SearchSpaceError(issues)
    dims: list[_Dim] = []
    for c in SpaceTransform(space).columns:
        p = c.param
        if p.type == "quniform":
            q = float(p.q or 1.0)
            k_min, k_max = round(float(p.low or 0) / q), round(float(p.high or 0) / q)
            dims.append(_Dim(c, k_max == k_min, k_min, k_max - k_min + 1))
        else:
            dims.append(_Dim(c, p.size == 1))
    return dims


def _configspace(modules: SmacModules, dims: Sequence[_Dim], seed: int) -> Any:
    cs_mod = modules.configspace
    cs = cs_mod.ConfigurationSpace(seed=seed)
    hps: list[Any] = []
    for dim in dims:
        p = dim.param
        if dim.fixed:
            continue
        if p.type == "choice":
            hps.append(cs_mod.CategoricalHyperparameter(p.name, [str(i) for i in range(len(p.choices))]))
        elif p.type == "randint":
            hps.append(cs_mod.UniformIntegerHyperparameter(p.name, int(p.low or 0), int(p.high or 1) - 1))
        elif p.type == "quniform":
            hps.append(cs_mod.UniformIntegerHyperparameter(p.name, 0, dim.points - 1))
        else:
            hps.append(cs_mod.UniformFloatHyperparameter(p.name, p.low, p.high, log=p.log))
    add = getattr(cs, "add", None) or cs.add_hyperparameters  # ConfigSpace 1.x, else 0.x
    add(hps)
    return cs


def _to_smac(dims: Sequence[_Dim], params: Any) -> dict[str, Any] | None:
    """A parameter set as SMAC configuration values; None when it is not a point of the space's shape."""
    if not isinstance(params, Mapping):
        return None
    out: dict[str, Any] = {}
    for dim in dims:
        p = dim.param
        if dim.fixed:
            continue
        v = params.get(p.name)
        if p.type == "choice":
            index = dim.column.option(v)
            if index is None:
                return None
            out[p.name] = str(index)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        if p.type == "randint":
            out[p.name] = min(max(round(v), int(p.low or 0)), int(p.high or 1) - 1)
        elif p.type == "quniform":
            out[p.name] = min(max(round(float(v) / float(p.q or 1.0)) - dim.k_min, 0), dim.points - 1)
        else:
            out[p.name] = min(max(float(v), float(p.low or 0)), float(p.high or 0))
    return out


def _from_smac(dims: Sequence[_Dim], values: Mapping[str, Any]) -> Params:
    out: Params = {}
    for dim in dims:
        p = dim.param
        if p.type == "choice":
            out[p.name] = p.choice_value(0 if dim.fixed else int(values[p.name]))
        elif p.type == "randint":
            out[p.name] = int(p.low or 0) if dim.fixed else int(values[p.name])
        elif p.type == "quniform":
            k = dim.k_min + (0 if dim.fixed else int(values[p.name]))
            out[p.name] = p.from_internal(float(k * float(p.q or 1.0)))
        else:
            out[p.name] = min(max(float(values[p.name]), float(p.low or 0)), float(p.high or 0))
    return out


HISTORY_CAP = 200  # observations SMAC learns from (the best half, then the most recent): see the docstring


def _capped(told: dict[Any, float], cap: int) -> dict[Any, float]:
    """At most ``cap`` of the observations: the lowest costs first, then the most recent."""
    if len(told) <= cap:
        return told
    order = list(told)
    best = set(sorted(order, key=lambda c: told[c])[: cap // 2])
    keep = best | set([c for c in order if c not in best][-(cap - len(best)) :])
    return {c: told[c] for c in order if c in keep}


class SMACTuner:
    """SMAC3 behind nnix's pure tuner protocol; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = SMACArgs
    heavy: ClassVar[bool] = True

    def __init__(self, args: SMACArgs | None = None) -> None:
        self.args = args or SMACArgs()
        self._modules = smac_modules()
        self._dedup = Deduplicator()
        # SMAC's initial design (a Sobol sequence) depends only on the configuration space and the seed, and
        # building it is most of a fresh facade's cost: kept per (space, seed) as vectors, rebuilt as
        # configurations of each suggest's own space (equal to what SMAC would draw again, so purity holds)
        self._designs: dict[tuple[str, int], list[tuple[Any, Any]]] = {}

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        dims = _dims(ctx.space)
        seed = (self.args.seed if self.args.seed is not None else ctx.seed) & 0x7FFFFFFF
        self._dedup.begin(ctx)
        out: list[Params] = []
        if all(d.fixed for d in dims):  # nothing for SMAC to choose (or an empty space)
            for pid in parameter_ids:
                params = propose_random(ctx.space, seed, pid, self._dedup)
                if params is None:
                    break
                self._dedup.take(params)
                out.append(params)
            if not out:
                raise exhausted()
            return out
        with tempfile.TemporaryDirectory(prefix="nnix-smac-") as tmp:
            smac, liar = self._smac(ctx, dims, seed, tmp)
            m = self._modules
            for pid in parameter_ids:
                try:
                    info = smac.ask()
                except Exception as e:  # SMAC's ConfigurationSpaceExhaustedException (or StopIteration)
                    if not isinstance(e, StopIteration) and type(e).__name__ != "ConfigurationSpaceExhaustedException":
                        raise
                    info = None
                if info is not None:  # the batch's next proposals see it as a result with the liar's cost
                    smac.tell(info, m.trial_value(cost=liar), save=False)
                params = _from_smac(dims, dict(info.config)) if info is not None else None
                if params is None or (self.args.config_dedup and not self._dedup.is_new(params)):
                    params = propose_random(ctx.space, seed, pid, self._dedup)
                if params is None:
                    if not out:
                        raise NoMoreTrialsError(
                            "search space fully explored",
                            "every point of this discrete search space has been tried; widen the search space",
                        )
                    break
                self._dedup.take(params)
                out.append(params)
        return out

    def _smac(self, ctx: TunerContext, dims: Sequence[_Dim], seed: int, tmp: str) -> tuple[Any, float]:
        """A fresh SMAC told the history, and the constant liar's cost."""
        m = self._modules
        cs = _configspace(m, dims, seed)
        scenario = m.scenario(
            cs, deterministic=True, n_trials=2**31 - 1, seed=seed, output_directory=f"{tmp}/smac", name="nnix"
        )
        design = m.facade.get_initial_design(scenario)
        cache_key = (str(cs), seed)
        cached = self._designs.get(cache_key)
        if cached is None:
            cached = [(c.get_array().copy(), c.origin) for c in design.select_configurations()]
            if len(self._designs) >= 64:
                self._designs.clear()
            self._designs[cache_key] = cached
        Configuration = m.configspace.Configuration
        design.select_configurations = lambda: [Configuration(cs, vector=v, origin=o) for v, o in cached]
        smac = m.facade(scenario, None, initial_design=design, logging_level=False, overwrite=True)
        sign = -1.0 if ctx.direction is Direction.MAXIMIZE else 1.0  # SMAC minimises a cost
        told: dict[Any, float] = {}  # configuration -> cost (a later record of the same one wins)
        pending: list[Any] = []
        failed: list[Any] = []
        for r in ctx.history:
            values = _to_smac(dims, r.params)
            if values is None:
                continue
            try:
                config = m.configspace.Configuration(cs, values=values)
            except (ValueError, TypeError, KeyError):
                continue
            if r.value is not None and math.isfinite(r.value):
                told[config] = sign * float(r.value)
            elif not r.status.is_terminal:
                pending.append(config)
            else:
                failed.append(config)
        liar = max(told.values(), default=0.0)
        told = _capped(told, HISTORY_CAP)
        for config in pending:
            told.setdefault(config, liar)
        for config, cost in told.items():
            smac.tell(m.trial_info(config, seed=_TRIAL_SEED), m.trial_value(cost=cost), save=False)
        for config in dict.fromkeys(failed):
            if config not in told:
                smac.runhistory.add_running_trial(m.trial_info(config, seed=_TRIAL_SEED))
        return smac, liar
