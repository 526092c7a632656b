"""One numeric encoding of a search space, shared by the model-based tuners (TPE, GP, Metis, DNGO, BOHB,
SMAC).

Each parameter becomes a :class:`Column`. A column knows its parameter's *internal* value (what TPE
models: logs for log types; a ``randint`` as the integer itself on ``[low - 0.5, high - 0.5]`` or as a
category; a ``choice`` as its option index) and its *unit* value (what GP, Metis, DNGO and BOHB model:
the uniform family linearly in internal space on ``[0, 1]``, the normal family through the normal CDF,
a ``randint`` or an ordered numeric ``choice`` as the centre of its cell among ``size`` equal cells, a
categorical ``choice`` as its option index).

How ``randint`` and ``choice`` are seen is the tuner's pick (:class:`SpaceTransform`'s ``randint`` and
``choice``). Option matching is JSON equality (``True`` is not ``1``; ``1 == 1.0``). A nested choice
has one :class:`Group` of sub-parameter columns per option (``children``).

:func:`unsupported` lists, as field issues, the parameters a tuner cannot model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from nnix.errors import FieldIssue
from nnix.space import Param, Params, SearchSpace

__all__ = ["Column", "Group", "SpaceTransform", "canon", "is_number", "unsupported"]

Array = NDArray[np.float64]

NORMAL_SPAN = 10.0  # internal values of the normal family are clamped to mu +- this many sigmas
EDGE = 1e-9  # unit values of the normal family stay this far inside (0, 1)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def canon(value: Any) -> tuple[str, Any]:
    """A hashable key under which JSON-equal values meet (``True`` is not ``1``; ``1 == 1.0``)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("n", float(value))
    if isinstance(value, str):
        return ("s", value)
    return ("j", json.dumps(value, sort_keys=True, default=repr))


@dataclass(frozen=True, eq=False)
class Column:
    """One parameter as one number (see the module docstring)."""

    col: int
    param: Param
    categorical: bool  # a category index (choice; randint when seen as categories)
    lo: float  # internal bounds; +-inf for the normal family
    hi: float
    mu: float  # prior centre and width in internal space (numeric)
    sigma: float
    size: int  # categories, or cells of an ordered discrete parameter; 0 when continuous
    index: Mapping[tuple[str, Any], int]  # choice: option -> first index
    order: tuple[int, ...]  # ordered choice: option indices sorted by value; () otherwise
    children: tuple[Group, ...]  # nested choice: one group per option

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.lo)

    @property
    def categories(self) -> int:
        """Number of categories of a categorical column, 0 otherwise."""
        return self.size if self.categorical else 0

    @property
    def levels(self) -> int:
        """Number of unit-cube cells of an ordered discrete column (randint, ordered choice), 0 otherwise."""
        return 0 if self.categorical else self.size

    def option(self, value: Any) -> int | None:
        """The index of the option ``value`` is (a nested choice: by its ``_name``), or None."""
        p = self.param
        if p.nested:
            if not isinstance(value, Mapping):
                return None
            value = value.get("_name")
        try:
            return self.index.get(canon(value))
        except TypeError:
            return None

    # -- internal values (TPE) ---------------------------------------------------------------------

    def to_internal(self, value: Any) -> float:
        """The internal value, NaN when ``value`` is not one of this parameter's."""
        p = self.param
        if p.type == "choice":
            i = self.option(value)
            return math.nan if i is None else float(i)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return math.nan
        x = float(value)
        if not math.isfinite(x):
            return math.nan
        if p.type == "randint":
            low = float(p.low)  # type: ignore[arg-type]
            if not (x.is_integer() and low <= x < float(p.high)):  # type: ignore[arg-type]
                return math.nan
            return x - low if self.categorical else x
        if p.log:
            x = math.log(x) if x > 0 else -math.inf
        lo, hi = (
            (self.lo, self.hi)
            if self.bounded
            else (self.mu - NORMAL_SPAN * self.sigma, self.mu + NORMAL_SPAN * self.sigma)
        )
        return min(max(x, lo), hi)

    def from_internal(self, x: float, row: Array) -> Any:
        """The parameter's value at internal value ``x`` (a nested choice reads its branch from ``row``)."""
        p = self.param
        if p.type == "choice":
            i = int(x)
            if p.nested:
                out: dict[str, Any] = {"_name": p.choices[i]}
                out.update(self.children[i].from_internal(row))
                return out
            return p.choice_value(i)
        if p.type == "randint":
            low, high = int(p.low), int(p.high)  # type: ignore[arg-type]
            if self.categorical:
                return low + int(x)
            return int(min(max(math.floor(x + 0.5), low), high - 1))
        return p.from_internal(x)

    # -- unit values (GP, Metis, DNGO, BOHB) -------------------------------------------------------

    def to_unit(self, value: Any) -> float | None:
        """The unit value (a category index for categorical columns); None when ``value`` is not one
        of this parameter's. Numbers outside the bounds are clipped (a log type's non-positive ones too)."""
        p = self.param
        if self.categorical and p.type == "choice":
            i = self.option(value)
            return None if i is None else float(i)
        if not is_number(value) or not math.isfinite(float(value)):
            return None
        v = float(value)
        if self.order:  # ordered numeric choice
            i = self.option(v)
            return None if i is None else (self.order.index(i) + 0.5) / self.size
        if p.type == "randint":
            if self.categorical:
                i = self.option(v)
                return None if i is None else float(i)
            cell = v - float(p.low or 0)
            return (min(max(math.floor(cell), 0), self.size - 1) + 0.5) / self.size
        if p.log:
            if v <= 0:  # below every bound (a q-lognormal value rounded to 0): the lowest unit value
                return 0.0 if self.bounded else EDGE
            v = math.log(v)
        if self.bounded:
            return min(max((v - self.lo) / (self.hi - self.lo), 0.0), 1.0)
        from scipy.special import ndtr  # only unbounded (normal) parameters need scipy: keep it off start-up

        return float(min(max(ndtr((v - self.mu) / self.sigma), EDGE), 1 - EDGE))

    def from_unit(self, u: float) -> Any:
        """The parameter's value at unit value ``u`` (a nested choice: ``{"_name": option}`` only)."""
        p = self.param
        if self.categorical:
            i = int(u)
            if p.type == "randint":
                return int(p.low or 0) + i
            return {"_name": p.choices[i]} if p.nested else p.choice_value(i)
        x = min(max(float(u), 0.0), 1.0)
        if self.size:
            cell = min(int(x * self.size), self.size - 1)
            return int(p.low or 0) + cell if p.type == "randint" else p.choice_value(self.order[cell])
        if self.bounded:
            return p.from_internal(self.lo + x * (self.hi - self.lo))
        from scipy.special import ndtri

        z = float(ndtri(min(max(x, EDGE), 1 - EDGE)))
        return p.from_internal(self.mu + self.sigma * z)

    def snap_unit(self, col: Array) -> Array:
        """Unit values moved to those that would really be proposed (cell centres, q grids)."""
        if self.size:
            out: Array = (np.minimum(np.floor(col * self.size), self.size - 1) + 0.5) / self.size
            return out
        p = self.param
        if p.q is None or not self.bounded:
            return col
        low, high, q = float(p.low or 0), float(p.high or 0), p.q
        x = self.lo + col * (self.hi - self.lo)
        v = np.exp(x) if p.log else x
        v = np.clip(np.round(v / q) * q, low, high)
        x = np.log(v) if p.log else v
        snapped: Array = np.clip((x - self.lo) / (self.hi - self.lo), 0.0, 1.0)
        return snapped


@dataclass(frozen=True, eq=False)
class Group:
    """Parameters that are active together: the top level, or the sub-parameters of one option."""

    columns: tuple[Column, ...]
    parent_col: int | None
    branch: int

    def from_internal(self, row: Array) -> Params:
        return {c.param.name: c.from_internal(float(row[c.col]), row) for c in self.columns}


class SpaceTransform:
    """A search space as columns (see the module docstring).

    ``randint``: ``"ordinal"`` (an ordered integer) or ``"categorical"``; ``choice``: ``"categorical"``
    (option index) or ``"ordered"`` (numeric options as ordered levels, sorted by value).
    """

    def __init__(
        self,
        space: SearchSpace,
        *,
        randint: Literal["ordinal", "categorical"] = "ordinal",
        choice: Literal["categorical", "ordered"] = "categorical",
    ) -> None:
        self.space = space
        self.randint, self.choice = randint, choice
        self.width = 0
        self.top = self._group(space.params, None, 0)

    @property
    def columns(self) -> tuple[Column, ...]:
        """The top-level columns."""
        return self.top.columns

    def _group(self, params: Sequence[Param], parent_col: int | None, branch: int) -> Group:
        return Group(tuple(self._column(p) for p in params), parent_col, branch)

    def _column(self, p: Param) -> Column:
        col = self.width
        self.width += 1
        if p.type == "choice":
            index: dict[tuple[str, Any], int] = {}
            for i, option in enumerate(p.choices):
                index.setdefault(canon(option), i)
            k = len(p.choices)
            if self.choice == "ordered" and not p.nested:
                order = tuple(sorted(range(k), key=lambda i: (float(p.choices[i]), i)))
                return Column(col, p, False, 0.0, 1.0, 0.5, 1.0, k, index, order, ())
            children = tuple(self._group(b, col, i) for i, b in enumerate(p.branches)) if p.nested else ()
            return Column(col, p, True, 0.0, float(k), 0.0, 1.0, k, index, (), children)
        if p.type == "randint":
            low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
            size = int(high - low)
            if self.randint == "categorical":
                cells = {canon(low + i): i for i in range(size)}
                return Column(col, p, True, 0.0, float(size), 0.0, 1.0, size, cells, (), ())
            lo, hi = low - 0.5, high - 0.5
            return Column(col, p, False, lo, hi, (lo + hi) / 2, hi - lo, size, {}, (), ())
        if p.is_bounded:
            lo, hi = p.internal_bounds()
            return Column(col, p, False, lo, hi, (lo + hi) / 2, hi - lo, 0, {}, (), ())
        mu, sigma = float(p.mu), float(p.sigma)  # type: ignore[arg-type]
        return Column(col, p, False, -math.inf, math.inf, mu, sigma, 0, {}, (), ())

    # -- internal rows: every column of every group, NaN where inactive ----------------------------

    def to_internal(self, params: Any) -> Array:
        row = np.full(self.width, math.nan)
        self._to_internal(self.top, params, row)
        return row

    def _to_internal(self, group: Group, values: Any, row: Array) -> None:
        if not isinstance(values, Mapping):
            return
        for c in group.columns:
            if c.param.name not in values:
                continue
            x = c.to_internal(values[c.param.name])
            row[c.col] = x
            if c.children and not math.isnan(x):
                self._to_internal(c.children[int(x)], values[c.param.name], row)

    def from_internal(self, row: Array) -> Params:
        return self.top.from_internal(row)

    # -- unit rows: the top-level columns ----------------------------------------------------------

    def to_unit(self, params: Any) -> Array | None:
        """The unit row of a parameter set, None when it is not a point of this space's shape."""
        if not isinstance(params, Mapping):
            return None
        cols = self.columns
        row = np.empty(len(cols))
        for j, c in enumerate(cols):
            if c.param.name not in params:
                return None
            u = c.to_unit(params[c.param.name])
            if u is None:
                return None
            row[j] = u
        return row

    def from_unit(self, row: Array) -> Params:
        return {c.param.name: c.from_unit(float(row[j])) for j, c in enumerate(self.columns)}

    def snap_unit(self, points: Array) -> Array:
        """Each row (all columns ordered or continuous) moved to the point that would really be proposed."""
        out = np.clip(points, 0.0, 1.0)
        for j, c in enumerate(self.columns):
            out[:, j] = c.snap_unit(out[:, j])
        return out


def unsupported(
    space: SearchSpace,
    tuner: str,
    supported: Collection[str],
    *,
    numeric_choice: bool,
    nested_hint: str,
    allowed: str,
) -> list[FieldIssue]:
    """The parameters of ``space`` that ``tuner`` cannot model, as field issues."""
    issues: list[FieldIssue] = []
    for p in space.params:
        path = "searchSpace." + ".".join(str(k) for k in p.key)
        if p.nested:
            issues.append(FieldIssue(path, f"{tuner} does not support nested choice", nested_hint))
        elif p.type not in supported:
            issues.append(FieldIssue(path, f"{tuner} does not support {p.type!r}", f"supported types: {allowed}"))
        elif numeric_choice and p.type == "choice":
            bad = [o for o in p.choices if not is_number(o) or not math.isfinite(o)]
            if bad:
                issues.append(
                    FieldIssue(
                        path,
                        f"{tuner} supports only numeric choice options, got {bad[0]!r}",
                        "use numbers (e.g. 0, 1, 2) and map them to your values in the trial code, or use TPE",
                    )
                )
    return issues
