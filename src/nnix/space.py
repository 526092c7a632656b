"""NNI search spaces: validation, a flattened parameter model, sampling, membership and grid order.

A search space is NNI's JSON object ``{"<name>": {"_type": <type>, "_value": [...]}, ...}``. The
semantics follow NNI's shared formatter exactly:

=============== ===================== =========================================================
``_type``       ``_value``            value of one draw
=============== ===================== =========================================================
choice          ``[opt, ...]``        one option, uniformly; *nested* when every option is an
                                      object with ``_name`` (then ``{"_name": ..., sub: ...}``)
randint         ``[low, high]``       ``int`` in ``[low, high)`` (upper bound exclusive)
uniform         ``[low, high]``       ``U(low, high)``
quniform        ``[low, high, q]``    ``clip(round(U(low, high) / q) * q, low, high)``
loguniform      ``[low, high]``       ``exp(U(log low, log high))``
qloguniform     ``[low, high, q]``    ``clip(round(loguniform / q) * q, low, high)``
normal          ``[mu, sigma]``       ``N(mu, sigma)``
qnormal         ``[mu, sigma, q]``    ``round(N(mu, sigma) / q) * q`` (no clip)
lognormal       ``[mu, sigma]``       ``exp(N(mu, sigma))``
qlognormal      ``[mu, sigma, q]``    ``round(exp(N(mu, sigma)) / q) * q`` (no clip)
=============== ===================== =========================================================

``round`` is Python's (banker's) rounding; every value is a plain Python ``int``/``float``/``str``
(q-types give ``float``). Internally, log types live in log space ("internal" values); a
parameter turns an internal value into its output with :meth:`Param.from_internal`.

Parameters are identified by *key paths*: ``("lr",)`` for a top-level parameter and
``("layer0", 1, "kernel_size")`` for sub-parameter ``kernel_size`` of option 1 of the nested choice
``layer0``. A sub-parameter exists only in points whose parent chose its option.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from nnix import limits
from nnix.errors import FieldIssue, SearchSpaceError
from nnix.limits import brief

if TYPE_CHECKING:
    import numpy as np

ParamType = Literal[
    "choice",
    "randint",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "normal",
    "qnormal",
    "lognormal",
    "qlognormal",
]
PARAM_TYPES: tuple[str, ...] = get_args(ParamType)

Key = tuple[str | int, ...]
Params = dict[str, Any]

_UNIFORM_FAMILY = frozenset({"uniform", "quniform", "loguniform", "qloguniform"})
_NORMAL_FAMILY = frozenset({"normal", "qnormal", "lognormal", "qlognormal"})
_LOG_TYPES = frozenset({"loguniform", "qloguniform", "lognormal", "qlognormal"})
_Q_TYPES = frozenset({"quniform", "qloguniform", "qnormal", "qlognormal"})
_VALUE_NAMES: dict[str, str] = {
    "randint": "[lower, upper]",
    "uniform": "[low, high]",
    "quniform": "[low, high, q]",
    "loguniform": "[low, high]",
    "qloguniform": "[low, high, q]",
    "normal": "[mu, sigma]",
    "qnormal": "[mu, sigma, q]",
    "lognormal": "[mu, sigma]",
    "qlognormal": "[mu, sigma, q]",
}
_EXAMPLES: dict[str, str] = {
    "choice": '{"_type": "choice", "_value": [16, 32, 64]}',
    "randint": '{"_type": "randint", "_value": [1, 10]} (gives 1..9)',
    "uniform": '{"_type": "uniform", "_value": [0.1, 0.5]}',
    "quniform": '{"_type": "quniform", "_value": [0, 10, 2.5]}',
    "loguniform": '{"_type": "loguniform", "_value": [0.0001, 0.1]}',
    "qloguniform": '{"_type": "qloguniform", "_value": [1, 1000, 1]}',
    "normal": '{"_type": "normal", "_value": [0, 1]}',
    "qnormal": '{"_type": "qnormal", "_value": [0, 1, 0.5]}',
    "lognormal": '{"_type": "lognormal", "_value": [0, 1]}',
    "qlognormal": '{"_type": "qlognormal", "_value": [0, 1, 0.5]}',
}


# --------------------------------------------------------------------------------------------------
# validation


def validate(raw: Any, path: str = "searchSpace") -> list[FieldIssue]:
    """Every problem in ``raw`` at once, each with the dotted path of the offending field.

    An empty object is valid here (a tuner may still refuse it).
    """
    issues: list[FieldIssue] = []
    if not isinstance(raw, Mapping):
        issues.append(
            FieldIssue(
                path,
                f"must be an object mapping parameter names to {{_type, _value}}, got {_type_name(raw)}",
                'e.g. {"lr": {"_type": "loguniform", "_value": [0.0001, 0.1]}}',
            )
        )
        return issues
    shape = limits.shape_problem(raw)
    if shape is not None:
        where, problem = shape
        issues.append(FieldIssue(f"{path}.{where}" if where else path, problem,
                                 "a search space this big or this deep is not supported; is it the right one?"))
        return issues
    _validate_level(raw, path, issues, nested_option=False, nesting=0)
    return issues


def _name(name: Any) -> str:
    """A parameter name as shown in a path (cut when it is absurdly long)."""
    return name if isinstance(name, str) and len(name) <= 80 else brief(name)


def _validate_level(
    level: Mapping[Any, Any], path: str, issues: list[FieldIssue], *, nested_option: bool, nesting: int
) -> None:
    for name, spec in level.items():
        if nested_option and name == "_name":
            continue
        if not isinstance(name, str):
            issues.append(FieldIssue(f"{path}.{_name(name)}", "parameter names must be strings"))
            continue
        _validate_param(spec, f"{path}.{_name(name)}", issues, nesting)


def _validate_param(spec: Any, path: str, issues: list[FieldIssue], nesting: int = 0) -> None:
    if not isinstance(spec, Mapping):
        issues.append(
            FieldIssue(
                path,
                f"must be an object with _type and _value, got {_type_name(spec)}",
                'e.g. {"_type": "uniform", "_value": [0, 1]}',
            )
        )
        return
    ptype = spec.get("_type")
    value = spec.get("_value")
    type_ok = False
    if "_type" not in spec:
        issues.append(FieldIssue(f"{path}._type", "missing", f"one of: {', '.join(PARAM_TYPES)}"))
    elif not isinstance(ptype, str):
        issues.append(FieldIssue(f"{path}._type", f"must be a string, got {_type_name(ptype)}"))
    elif ptype not in PARAM_TYPES:
        issues.append(FieldIssue(f"{path}._type", f"unknown type {brief(ptype)}", _type_hint(ptype)))
    else:
        type_ok = True
    if "_value" not in spec:
        example = _EXAMPLES.get(ptype, _EXAMPLES["uniform"]) if isinstance(ptype, str) else _EXAMPLES["uniform"]
        issues.append(FieldIssue(f"{path}._value", "missing", f"e.g. {example}"))
        return
    if not isinstance(value, (list, tuple)):
        issues.append(FieldIssue(f"{path}._value", f"must be a list, got {_type_name(value)}"))
        return
    if not type_ok:
        return
    if ptype == "choice":
        _validate_choice(value, f"{path}._value", issues, nesting)
    else:
        _validate_numeric(cast(str, ptype), value, f"{path}._value", issues)


def _type_hint(ptype: str) -> str:
    if ptype.lower() in PARAM_TYPES:
        return f"did you mean {ptype.lower()!r}? types are lower-case"
    close = difflib.get_close_matches(ptype.lower(), PARAM_TYPES, n=1) if len(ptype) <= 40 else []
    if close:
        return f"did you mean {close[0]!r}?"
    return f"one of: {', '.join(PARAM_TYPES)}"


def _validate_choice(options: Sequence[Any], path: str, issues: list[FieldIssue], nesting: int = 0) -> None:
    if len(options) == 0:
        issues.append(FieldIssue(path, "choice needs at least one option", f"e.g. {_EXAMPLES['choice']}"))
        return
    if len(options) > limits.MAX_CHOICE_OPTIONS:
        issues.append(FieldIssue(path, f"choice has {len(options):,} options, more than nnix's limit of "
                                 f"{limits.MAX_CHOICE_OPTIONS:,}", "use randint or a quantized range instead"))
        return
    named = [isinstance(o, Mapping) and "_name" in o for o in options]
    if any(named) and not all(named):
        for i, ok in enumerate(named):
            if not ok:
                issues.append(
                    FieldIssue(
                        f"{path}[{i}]",
                        "option of a nested choice has no _name",
                        'in a nested choice every option must be an object with `_name`, e.g. {"_name": "empty"}',
                    )
                )
    if any(named):
        if nesting + 1 > limits.MAX_CHOICE_NESTING:
            issues.append(FieldIssue(path, f"choices are nested more than {limits.MAX_CHOICE_NESTING} levels deep",
                                     "flatten the search space: nested choices this deep are not supported"))
            return
        for i, option in enumerate(options):
            if not named[i]:
                continue
            name = option["_name"]
            if isinstance(name, bool) or not isinstance(name, (str, int, float)):
                issues.append(FieldIssue(f"{path}[{i}]._name", f"must be a string or a number, got {_type_name(name)}"))
            _validate_level(option, f"{path}[{i}]", issues, nested_option=True, nesting=nesting + 1)
        return
    for i, option in enumerate(options):
        if type(option) in _PLAIN and (type(option) is not float or math.isfinite(option)):
            continue  # the common case, fast
        problem = _json_problem(option)
        if problem is not None:
            issues.append(
                FieldIssue(f"{path}[{i}]", f"choice option {problem}", "use numbers or strings (any JSON value)")
            )


_PLAIN = frozenset({int, str, float, bool, type(None)})


def _json_problem(value: Any) -> str | None:
    if value is None or isinstance(value, (bool, str)):
        return None
    if isinstance(value, (int, float)):
        return None if math.isfinite(value) else f"must be finite, got {brief(value)}"
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = _json_problem(item)
            if problem is not None:
                return problem
        return None
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"has a non-string key {brief(k)}"
            problem = _json_problem(item)
            if problem is not None:
                return problem
        return None
    return f"must be a JSON value, got {_type_name(value)}"


# numpy is not imported here (it is most of a CLI start-up): a value can only be a numpy scalar once something
# else imported numpy, so its types are looked up in sys.modules, and only for values that are not plain Python.


def _numpy_scalar(x: Any) -> Any:
    """``numpy`` if ``x`` is a numpy scalar (``np.generic``), else None."""
    np_ = sys.modules.get("numpy")
    return np_ if np_ is not None and isinstance(x, np_.generic) else None


def _is_bool(x: Any) -> bool:
    if isinstance(x, bool):
        return True
    np_ = _numpy_scalar(x)
    return np_ is not None and isinstance(x, np_.bool_)


def _is_number(x: Any) -> bool:
    if isinstance(x, (int, float)):
        return not isinstance(x, bool)
    np_ = _numpy_scalar(x)
    return np_ is not None and isinstance(x, (np_.integer, np_.floating))


def _is_integral(x: Any) -> bool:
    if isinstance(x, int):
        return not isinstance(x, bool)
    np_ = _numpy_scalar(x)
    if np_ is not None and isinstance(x, np_.integer):
        return True
    floating = isinstance(x, float) or (np_ is not None and isinstance(x, np_.floating))
    return floating and math.isfinite(x) and float(x).is_integer()


def _validate_numeric(ptype: str, value: Sequence[Any], path: str, issues: list[FieldIssue]) -> None:
    arity = 3 if ptype in _Q_TYPES else 2
    names = _VALUE_NAMES[ptype]
    if len(value) != arity:
        issues.append(
            FieldIssue(
                path,
                f"{ptype} needs {arity} values {names}, got {len(value)}",
                f"e.g. {_EXAMPLES[ptype]}",
            )
        )
        return
    bad = [i for i, x in enumerate(value) if not _is_number(x) or not math.isfinite(x)]
    if bad:
        issues.append(
            FieldIssue(
                path,
                f"{ptype} values {names} must be finite numbers, got {brief(list(value))}",
                f"e.g. {_EXAMPLES[ptype]}",
            )
        )
        return
    if ptype == "randint":
        low, high = value
        if not (_is_integral(low) and _is_integral(high)):
            issues.append(
                FieldIssue(path, f"randint bounds must be integers, got {brief(list(value))}", _EXAMPLES[ptype])
            )
        elif low >= high:
            issues.append(
                FieldIssue(
                    path,
                    f"randint needs lower < upper, got {brief(list(value))}",
                    "upper is exclusive: [0, 3] gives 0, 1 or 2",
                )
            )
        return
    if ptype in _UNIFORM_FAMILY:
        low, high = value[0], value[1]
        if low >= high:
            issues.append(FieldIssue(path, f"{ptype} needs low < high, got low={low}, high={high}", "swap them?"))
        if ptype in _LOG_TYPES and low <= 0:
            issues.append(
                FieldIssue(path, f"{ptype} needs low > 0 (it samples in log space), got low={low}", "e.g. 1e-5")
            )
    else:
        sigma = value[1]
        if sigma <= 0:
            issues.append(FieldIssue(path, f"{ptype} needs sigma > 0, got sigma={sigma}", f"e.g. {_EXAMPLES[ptype]}"))
    if arity == 3 and value[2] <= 0:
        issues.append(FieldIssue(path, f"{ptype} needs q > 0, got q={value[2]}", "q is the step, e.g. 1 or 0.5"))


def _type_name(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, str):
        return f"a string ({brief(x)})"
    if isinstance(x, (int, float)):
        return f"a number ({brief(x)})"
    if isinstance(x, (list, tuple)):
        return "a list"
    if isinstance(x, Mapping):
        return "an object"
    return type(x).__name__


# --------------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class Param:
    """One parameter of a search space, found at ``key`` (see the module docstring).

    ``low``/``high`` are the bounds as written (randint: ints, upper exclusive; log types: not logs);
    ``mu``/``sigma`` for the normal family (log types: of the log). ``choices`` holds the options of a
    plain choice, or the ``_name`` of each option of a nested one, whose sub-parameters are in
    ``branches[i]``.
    """

    key: Key
    type: ParamType
    low: float | None = None
    high: float | None = None
    mu: float | None = None
    sigma: float | None = None
    q: float | None = None
    choices: tuple[Any, ...] = ()
    nested: bool = False
    branches: tuple[tuple[Param, ...], ...] = ()

    @property
    def name(self) -> str:
        return cast(str, self.key[-1])

    @property
    def parent(self) -> Key | None:
        """Key of the nested choice this parameter hangs under, or None at top level."""
        return self.key[:-2] if len(self.key) > 1 else None

    @property
    def branch(self) -> int | None:
        """Index of the parent's option this parameter belongs to, or None at top level."""
        return cast(int, self.key[-2]) if len(self.key) > 1 else None

    @property
    def log(self) -> bool:
        return self.type in _LOG_TYPES

    @property
    def is_categorical(self) -> bool:
        """choice (plain or nested) and randint: unordered categories for most tuners."""
        return self.type in ("choice", "randint")

    @property
    def is_discrete(self) -> bool:
        """Categorical or quantised: duplicates among draws are possible."""
        return self.is_categorical or self.q is not None

    @property
    def is_bounded(self) -> bool:
        return self.type != "choice" and self.type not in _NORMAL_FAMILY

    @property
    def size(self) -> int | None:
        """Number of categories of a categorical parameter, None otherwise."""
        if self.type == "choice":
            return len(self.choices)
        if self.type == "randint":
            return int(cast(float, self.high) - cast(float, self.low))
        return None

    def internal_bounds(self) -> tuple[float, float]:
        """``(low, high)`` of a uniform-family parameter in internal space (logs for log types)."""
        if self.type not in _UNIFORM_FAMILY:
            raise ValueError(f"{self.type} parameter {self.name!r} has no bounds")
        low, high = cast(float, self.low), cast(float, self.high)
        return (math.log(low), math.log(high)) if self.log else (float(low), float(high))

    def from_internal(self, x: float) -> float:
        """Turn an internal value into the parameter's output: exp if log, then q, then clip."""
        if self.type not in _UNIFORM_FAMILY and self.type not in _NORMAL_FAMILY:
            raise ValueError(f"{self.type} parameter {self.name!r} is not numeric")
        if self.log:
            try:
                x = math.exp(x)
            except OverflowError:
                x = math.inf
        return self._quantize(x)

    def _quantize(self, x: float) -> float:
        if self.q is not None and math.isfinite(x):
            x = round(x / self.q) * self.q
        if self.type in _UNIFORM_FAMILY:
            x = min(max(x, cast(float, self.low)), cast(float, self.high))
        return float(x)

    def choice_value(self, index: int) -> Any:
        """The output of option ``index`` of a plain choice (a copy, so callers may mutate it)."""
        option = self.choices[index]
        return copy.deepcopy(option) if isinstance(option, (dict, list)) else option

    def sample(self, rng: np.random.Generator) -> Any:
        """One random value of this parameter (a nested choice samples its chosen branch too)."""
        if self.type == "choice":
            index = int(rng.integers(len(self.choices)))
            if self.nested:
                return {"_name": self.choices[index], **_sample_level(self.branches[index], rng)}
            return self.choice_value(index)
        if self.type == "randint":
            return int(rng.integers(int(cast(float, self.low)), int(cast(float, self.high))))
        if self.type in _UNIFORM_FAMILY:
            low, high = self.internal_bounds()
            return self.from_internal(float(rng.uniform(low, high)))
        return self.from_internal(float(rng.normal(cast(float, self.mu), cast(float, self.sigma))))

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a possible output of this parameter (nested: with its branch)."""
        if self.type == "choice":
            if self.nested:
                if not isinstance(value, Mapping) or "_name" not in value:
                    return False
                return any(
                    _json_equal(value["_name"], name) and _contains_level(self.branches[i], value, nested=True)
                    for i, name in enumerate(self.choices)
                )
            return any(_json_equal(value, option) for option in self.choices)
        if not _is_number(value) or not math.isfinite(value):
            return False
        if self.type == "randint":
            return _is_integral(value) and cast(float, self.low) <= value < cast(float, self.high)
        if self.type in _UNIFORM_FAMILY:
            low, high = cast(float, self.low), cast(float, self.high)
            if not low <= value <= high:
                return False
            return self.q is None or value in (low, high) or _on_grid(float(value), self.q)
        if self.log and value < 0:
            return False
        return self.q is None or _on_grid(float(value), self.q)


def _on_grid(x: float, q: float) -> bool:
    return abs(x - round(x / q) * q) <= 1e-9 * max(1.0, abs(x))


def _build_level(level: Mapping[str, Any], prefix: Key, *, nested_option: bool) -> tuple[Param, ...]:
    params: list[Param] = []
    for name, spec in level.items():
        if nested_option and name == "_name":
            continue
        params.append(_build_param((*prefix, name), spec))
    return tuple(params)


def _build_param(key: Key, spec: Mapping[str, Any]) -> Param:
    ptype = cast(ParamType, spec["_type"])
    value = list(spec["_value"])
    if ptype == "choice":
        if all(isinstance(o, Mapping) and "_name" in o for o in value):
            branches = tuple(_build_level(o, (*key, i), nested_option=True) for i, o in enumerate(value))
            return Param(key, ptype, choices=tuple(o["_name"] for o in value), nested=True, branches=branches)
        return Param(key, ptype, choices=tuple(value))  # already a private copy (from_json)
    nums = [x.item() if _numpy_scalar(x) is not None else x for x in value]
    if ptype == "randint":
        return Param(key, ptype, low=int(nums[0]), high=int(nums[1]))
    q = nums[2] if ptype in _Q_TYPES else None
    if ptype in _UNIFORM_FAMILY:
        return Param(key, ptype, low=nums[0], high=nums[1], q=q)
    return Param(key, ptype, mu=nums[0], sigma=nums[1], q=q)


def _flatten(params: Sequence[Param]) -> Iterator[Param]:
    for p in params:
        yield p
        for branch in p.branches:
            yield from _flatten(branch)


@dataclass(frozen=True, eq=False)
class SearchSpace:
    """A validated search space. Build it with :meth:`from_json`.

    ``raw`` is the JSON as given (a private deep copy); ``params`` the top-level parameters in order;
    ``parameters`` every parameter, flattened depth-first (a nested choice before its sub-parameters).
    """

    raw: Mapping[str, Any]
    params: tuple[Param, ...]
    parameters: tuple[Param, ...] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Any, path: str = "searchSpace") -> SearchSpace:
        """Validate and build. Raises :class:`SearchSpaceError` listing every problem."""
        issues = validate(raw, path)
        if issues:
            raise SearchSpaceError(issues)
        raw_copy: dict[str, Any] = _json_copy(dict(raw))
        params = _build_level(raw_copy, (), nested_option=False)
        return cls(raw=raw_copy, params=params, parameters=tuple(_flatten(params)))

    @property
    def is_empty(self) -> bool:
        return not self.params

    def __getitem__(self, key: Key) -> Param:
        for p in self.parameters:
            if p.key == key:
                return p
        raise KeyError(key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchSpace):
            return NotImplemented
        return self is other or _canonical(self.raw) == _canonical(other.raw)

    def __hash__(self) -> int:
        return hash(_canonical(self.raw))


def _json_copy(value: Any) -> Any:
    """A deep copy of validated JSON-like data; much faster than ``copy.deepcopy`` on long lists."""
    if isinstance(value, Mapping):
        return {k: _json_copy(v) if isinstance(v, (Mapping, list, tuple)) else v for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_json_copy(v) if isinstance(v, (Mapping, list, tuple)) else v for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _canonical(raw: Any) -> str:
    return json.dumps(raw, sort_keys=True, default=repr)


# --------------------------------------------------------------------------------------------------
# sampling and membership


def sample(space: SearchSpace, rng: np.random.Generator) -> Params:
    """One random point of ``space``: every top-level parameter, and sub-parameters of chosen branches."""
    return _sample_level(space.params, rng)


def _sample_level(params: Sequence[Param], rng: np.random.Generator) -> Params:
    return {p.name: p.sample(rng) for p in params}


def contains(space: SearchSpace, params: Any) -> bool:
    """Whether ``params`` is a point of ``space``: exactly its keys (nested: of the chosen branch),
    every value a possible output (in bounds, on the q grid, among the choices)."""
    return _contains_level(space.params, params, nested=False)


def _contains_level(params: Sequence[Param], values: Any, *, nested: bool) -> bool:
    if not isinstance(values, Mapping):
        return False
    expected = {p.name for p in params}
    if nested:
        expected.add("_name")
    if set(values) != expected:
        return False
    return all(p.contains(values[p.name]) for p in params)


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``True`` is not ``1``; ``1 == 1.0``."""
    if _is_bool(a) or _is_bool(b):
        return _is_bool(a) and _is_bool(b) and bool(a) == bool(b)
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_json_equal(a[k], b[k]) for k in a)
    return False


def key(params: Mapping[str, Any]) -> str:
    """Canonical text of a point (``json.dumps`` with sorted keys): equal points, equal keys."""
    return json.dumps(params, sort_keys=True, default=_json_default)


def _json_default(x: Any) -> Any:
    if _numpy_scalar(x) is not None:
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    return repr(x)


def is_finite(space: SearchSpace) -> bool:
    """Whether the space has finitely many points: every parameter (sub-parameters included) is
    categorical or a bounded quantised type (quniform, qloguniform). Then :func:`grid` ends."""
    return all(p.is_categorical or (p.q is not None and p.is_bounded) for p in space.parameters)


def duplicates_possible(space: SearchSpace) -> bool:
    """NNI's deduplication criterion: every top-level parameter is categorical or quantised.

    When some top-level parameter is continuous, two draws are taken never to coincide.
    """
    return all(p.is_discrete for p in space.params)


# --------------------------------------------------------------------------------------------------
# grid


def grid(space: SearchSpace) -> Iterator[Params]:
    """Every point of ``space`` in NNI GridSearch order, without repeats (by :func:`key`).

    Categorical parameters (and randint) are enumerated fully from the start. A numeric parameter is
    refined in *epochs* on quantiles of its distribution: epoch 1 uses the 1/2 quantile, epoch 2 adds
    1/4 and 3/4, epoch 3 adds 1/8, 3/8, 5/8, 7/8, and so on (uniform types: ``low + p*(high-low)`` in
    internal space; normal types: the inverse normal CDF); values that collapse onto an earlier one
    after q-rounding are skipped. Each epoch yields the cartesian product of all values known so far,
    in lexicographic order (first parameter slowest, values in the order they were added), except the
    combinations an earlier epoch already yielded. A nested choice enumerates, per option, the product
    of that option's sub-parameters. The iterator ends iff :func:`is_finite`; an empty space yields
    ``{}`` once.

    Quantised parameters whose remaining values are unreachable by cheap refinement (tiny clipped edges,
    or the far tails of qnormal/qlognormal) get them added directly once an epoch would take more than
    about four quantile points per known value: bounded ones all at once (ascending), unbounded ones one
    step of q further out on each side per epoch.
    """
    return _GridWalker(space).walk()


class _Axis:
    """The values one parameter takes in the grid so far; ``bar`` = how many an earlier epoch knew."""

    def __init__(self, param: Param) -> None:
        self.param = param
        self._list: list[float] = []
        # categorical axes hold a range (never materialised: randint may span billions of values)
        self.values: Sequence[Any] = self._list
        self.bar = 0
        self.done = False
        self._known: set[float] = set()
        self._outward = False
        self._count: int | None = None
        if param.q is not None and param.is_bounded:
            low, high, q = cast(float, param.low), cast(float, param.high), param.q
            k_min = math.floor(low / q - 0.5) + 1
            k_max = math.ceil(high / q + 0.5) - 1
            self._count = max(1, k_max - k_min + 1)

    def grow(self, epoch: int) -> bool:
        """Start ``epoch``: add this epoch's values; True if any is new."""
        self.bar = len(self.values)
        if self.done:
            return False
        p = self.param
        if p.is_categorical:
            if p.nested or p.type == "choice":
                self.values = range(len(p.choices))
            else:
                self.values = range(int(cast(float, p.low)), int(cast(float, p.high)))
            self.done = True
            return True
        points = 1 << (epoch - 1)
        if p.q is not None and points > 4 * (self._count or len(self.values)) + 64:
            if p.is_bounded:
                for v in self._all_bounded_q_values():
                    self._add(v)
                self.done = True
            else:
                self._outward = True
        if self._outward:
            self._grow_outward()
        elif not self.done:
            quantile = self._quantile_map()
            denominator = float(1 << epoch)
            for j in range(points):
                self._add(quantile((2 * j + 1) / denominator))
            if self._count is not None and len(self.values) >= self._count:
                self.done = True
        return len(self.values) > self.bar

    def _add(self, v: float) -> None:
        if v not in self._known:
            self._known.add(v)
            self._list.append(v)

    def _quantile_map(self) -> Callable[[float], float]:
        p = self.param
        if p.type in _UNIFORM_FAMILY:
            low, high = p.internal_bounds()
            return lambda u: p.from_internal(low + u * (high - low))
        dist = NormalDist(cast(float, p.mu), cast(float, p.sigma))
        return lambda u: p.from_internal(dist.inv_cdf(u))

    def _all_bounded_q_values(self) -> list[float]:
        """Every output with a positive-probability preimage, ascending."""
        p = self.param
        low, high, q = cast(float, p.low), cast(float, p.high), cast(float, p.q)
        out: list[float] = []
        for k in range(math.floor(low / q) - 1, math.ceil(high / q) + 2):
            lo, hi = max((k - 0.5) * q, low), min((k + 0.5) * q, high)
            if hi > lo:
                v = p._quantize((lo + hi) / 2)
                if not out or out[-1] != v:
                    out.append(v)
        return out

    def _grow_outward(self) -> None:
        """Unbounded q-types: fill gaps and go one step of q beyond the extremes."""
        q = cast(float, self.param.q)
        ks = [round(v / q) for v in self.values if math.isfinite(v)]
        k_lo, k_hi = (min(ks) - 1, max(ks) + 1) if ks else (0, 0)
        if self.param.log:
            k_lo = max(k_lo, 0)
        for k in range(k_lo, k_hi + 1):
            self._add(float(k * q))


class _GridWalker:
    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.axes: dict[Key, _Axis] = {p.key: _Axis(p) for p in space.parameters}
        # for each level (top level and every option of every nested choice): whether params[i:] can
        # contribute a value new in this epoch
        self._suffix_new: dict[Key, list[bool]] = {}

    def walk(self) -> Iterator[Params]:
        if self.space.is_empty:
            yield {}
            return
        seen: set[str] = set()
        epoch = 1
        while True:
            grew = False
            for axis in self.axes.values():
                grew = axis.grow(epoch) or grew
            if grew:
                self._suffix_new.clear()
                for items, _ in self._level(self.space.params, (), require_new=True):
                    point = dict(items)
                    k = key(point)
                    if k not in seen:
                        seen.add(k)
                        yield point
            elif all(axis.done for axis in self.axes.values()):
                return
            epoch += 1

    def _can_be_new(self, params: tuple[Param, ...], level: Key, start: int) -> bool:
        flags = self._suffix_new.get(level)
        if flags is None:
            flags = [False] * (len(params) + 1)
            for i in range(len(params) - 1, -1, -1):
                p = params[i]
                axis = self.axes[p.key]
                here = len(axis.values) > axis.bar or any(
                    self._can_be_new(branch, (*p.key, b), 0) for b, branch in enumerate(p.branches)
                )
                flags[i] = here or flags[i + 1]
            self._suffix_new[level] = flags
        return flags[start]

    def _level(
        self, params: tuple[Param, ...], level: Key, *, require_new: bool, start: int = 0
    ) -> Iterator[tuple[list[tuple[str, Any]], bool]]:
        """(items, is_new) for every combination of ``params[start:]``; only new ones if asked."""
        if start == len(params):
            if not require_new:
                yield [], False
            return
        if require_new and not self._can_be_new(params, level, start):
            return
        p = params[start]
        rest_can_be_new = self._can_be_new(params, level, start + 1)
        for value, new in self._values(p, require_new=require_new and not rest_can_be_new):
            for rest, rest_new in self._level(params, level, require_new=require_new and not new, start=start + 1):
                yield [(p.name, value), *rest], new or rest_new

    def _values(self, p: Param, *, require_new: bool) -> Iterator[tuple[Any, bool]]:
        axis = self.axes[p.key]
        for index, value in enumerate(axis.values):
            new = index >= axis.bar
            if p.nested:
                branch_key = (*p.key, index)
                for items, sub_new in self._level(p.branches[index], branch_key, require_new=require_new and not new):
                    yield {"_name": p.choices[index], **dict(items)}, new or sub_new
            elif require_new and not new:
                continue
            elif p.type == "choice":
                yield p.choice_value(value), new
            else:
                yield value, new
