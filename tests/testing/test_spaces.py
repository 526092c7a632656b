from __future__ import annotations

import math

import pytest

from nnix.space import SearchSpace
from nnix.testing import spaces


@pytest.mark.parametrize("name", [n for n in spaces.__all__ if n.isupper()])
def test_every_shared_space_is_a_valid_search_space(name: str) -> None:
    raw = getattr(spaces, name)
    space = SearchSpace.from_json(raw)
    assert [p.name for p in space.params] == list(raw)


def test_branin_has_its_known_minimum_inside_its_square() -> None:
    for x, y in ((-math.pi, 12.275), (math.pi, 2.275), (9.42478, 2.475)):
        assert spaces.branin({"x": x, "y": y}) == pytest.approx(0.397887, abs=1e-5)
        assert spaces.SQUARE["x"]["_value"][0] <= x <= spaces.SQUARE["x"]["_value"][1]
