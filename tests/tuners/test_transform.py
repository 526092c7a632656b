"""The shared search-space transform: every NNI type survives the round trip through internal and unit values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnix.space import SearchSpace, contains, sample
from nnix.tuners.transform import SpaceTransform
from tests.tuners.test_proposals_unchanged import SPACES


@pytest.mark.parametrize("randint", ["ordinal", "categorical"])
@pytest.mark.parametrize("name", ["all_types", "nested"])
def test_internal_round_trip(name: str, randint: str) -> None:
    space = SearchSpace.from_json(SPACES[name])
    t = SpaceTransform(space, randint=randint)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for _ in range(100):
        params = sample(space, rng)
        back = t.from_internal(t.to_internal(params))
        assert contains(space, back)
        assert back == params or any(c.param.log and not c.param.is_bounded for c in t.columns)
    assert math.isnan(t.to_internal({"c": "nope"})[0])


def test_unit_round_trip_and_snap() -> None:
    space = SearchSpace.from_json(SPACES["numeric"])
    t = SpaceTransform(space, choice="ordered")
    for u in np.random.default_rng(1).random((100, len(t.columns))):
        params = t.from_unit(u)
        assert contains(space, params)
        again = t.to_unit(params)
        assert again is not None and t.from_unit(again) == params
        assert np.allclose(t.snap_unit(u[None, :])[0], again)
    assert t.to_unit({**t.from_unit(np.full(6, 0.5)), "c": 3}) is None  # not an option
