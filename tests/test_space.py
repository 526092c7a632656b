from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import statistics
from typing import Any

import numpy as np
import pytest

from nnix.errors import SearchSpaceError
from nnix.space import (
    SearchSpace,
    contains,
    duplicates_possible,
    grid,
    is_finite,
    key,
    sample,
    validate,
)
from nnix.testing.spaces import EVERY_TYPE

NESTED: dict[str, Any] = {
    "layer0": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "kernel_size": {"_type": "choice", "_value": [1, 2, 3, 5]}},
            {"_name": "Max_pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
        ],
    },
    "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
}


def one(ptype: str, value: list[Any]) -> SearchSpace:
    return SearchSpace.from_json({"x": {"_type": ptype, "_value": value}})


def draws(space: SearchSpace, n: int = 2000, seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [sample(space, rng)["x"] for _ in range(n)]


def paths(raw: Any) -> dict[str, str]:
    return {i.path: i.message for i in validate(raw)}


# -- validation -----------------------------------------------------------------------------------


def test_every_type_validates() -> None:
    raw = {**EVERY_TYPE, **NESTED}
    assert validate(raw) == []
    assert validate({}) == []
    space = SearchSpace.from_json(raw)
    assert [p.name for p in space.params] == [*"abcdefghij", "layer0", "lr"]


def test_top_level_must_be_an_object() -> None:
    issues = validate([1, 2])
    assert [i.path for i in issues] == ["searchSpace"]
    assert "object" in issues[0].message
    assert validate("x", path="trial.space")[0].path == "trial.space"


def test_unknown_type_suggests_the_closest() -> None:
    (issue,) = validate({"lr": {"_type": "loguniformm", "_value": [1, 2]}})
    assert issue.path == "searchSpace.lr._type"
    assert "unknown type 'loguniformm'" in issue.message
    assert issue.hint == "did you mean 'loguniform'?"
    (issue,) = validate({"lr": {"_type": "Choice", "_value": [1]}})
    assert issue.hint is not None and "'choice'" in issue.hint


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"_type": "quniform", "_value": [0, 1]}, "quniform needs 3 values [low, high, q], got 2"),
        ({"_type": "uniform", "_value": [0, 1, 2]}, "uniform needs 2 values [low, high], got 3"),
        ({"_type": "uniform", "_value": [1, 1]}, "low < high"),
        ({"_type": "quniform", "_value": [5, 1, 1]}, "low < high"),
        ({"_type": "loguniform", "_value": [0, 1]}, "low > 0"),
        ({"_type": "qloguniform", "_value": [-1, 10, 1]}, "low > 0"),
        ({"_type": "normal", "_value": [0, 0]}, "sigma > 0"),
        ({"_type": "lognormal", "_value": [0, -1]}, "sigma > 0"),
        ({"_type": "qnormal", "_value": [0, 1, 0]}, "q > 0"),
        ({"_type": "quniform", "_value": [0, 1, -0.5]}, "q > 0"),
        ({"_type": "randint", "_value": [0.5, 3]}, "integers"),
        ({"_type": "randint", "_value": [3, 3]}, "lower < upper"),
        ({"_type": "uniform", "_value": ["0", 1]}, "finite numbers"),
        ({"_type": "uniform", "_value": [0, float("inf")]}, "finite numbers"),
        ({"_type": "uniform", "_value": [True, 2]}, "finite numbers"),
        ({"_type": "choice", "_value": []}, "at least one option"),
        ({"_type": "choice", "_value": [1, float("nan")]}, "finite"),
        ({"_type": "choice", "_value": 3}, "must be a list"),
    ],
)
def test_invalid_parameter(spec: dict[str, Any], fragment: str) -> None:
    issues = validate({"p": spec})
    assert len(issues) >= 1
    assert any(fragment in i.message for i in issues), [i.render() for i in issues]
    assert all(i.path.startswith("searchSpace.p") for i in issues)


def test_wrong_arity_names_the_values_and_gives_an_example() -> None:
    (issue,) = validate({"p": {"_type": "qlognormal", "_value": [0, 1]}})
    assert issue.path == "searchSpace.p._value"
    assert issue.message == "qlognormal needs 3 values [mu, sigma, q], got 2"
    assert issue.hint is not None and "qlognormal" in issue.hint


def test_randint_accepts_integral_floats() -> None:
    assert validate({"p": {"_type": "randint", "_value": [1.0, 4]}}) == []
    assert one("randint", [1.0, 4])["x",].low == 1


def test_missing_fields_and_non_object_specs() -> None:
    found = paths({"a": {"_value": [1]}, "b": {"_type": "choice"}, "c": 3, "d": {"_type": 7, "_value": [1]}})
    assert set(found) == {"searchSpace.a._type", "searchSpace.b._value", "searchSpace.c", "searchSpace.d._type"}
    assert found["searchSpace.a._type"] == "missing"
    assert found["searchSpace.b._value"] == "missing"


def test_all_errors_are_reported_at_once() -> None:
    raw = {
        "ok": {"_type": "uniform", "_value": [0, 1]},
        "lr": {"_type": "loguniform", "_value": [0, -1]},
        "bs": {"_type": "chioce", "_value": [16, 32]},
        "q": {"_type": "quniform", "_value": [0, 1]},
    }
    issues = validate(raw)
    assert [i.path for i in issues] == [
        "searchSpace.lr._value",
        "searchSpace.lr._value",
        "searchSpace.bs._type",
        "searchSpace.q._value",
    ]
    with pytest.raises(SearchSpaceError) as err:
        SearchSpace.from_json(raw)
    assert err.value.issues == issues
    assert "4 problems" in str(err.value)


def test_nested_choice_errors_carry_nested_paths() -> None:
    raw = {
        "layer0": {
            "_type": "choice",
            "_value": [
                {"_name": "Empty"},
                {"_name": "Conv", "kernel_size": {"_type": "chioce", "_value": [1, 2]}},
                {"_name": "Pool", "size": {"_type": "randint", "_value": [3, 1]}, "bad": 4},
            ],
        }
    }
    found = paths(raw)
    assert set(found) == {
        "searchSpace.layer0._value[1].kernel_size._type",
        "searchSpace.layer0._value[2].size._value",
        "searchSpace.layer0._value[2].bad",
    }


def test_nested_choice_needs_a_name_on_every_option() -> None:
    raw = {
        "n": {
            "_type": "choice",
            "_value": [{"_name": "a", "k": {"_type": "uniform", "_value": [1, 0]}}, {"k": 1}, 3],
        }
    }
    found = paths(raw)
    assert set(found) == {"searchSpace.n._value[1]", "searchSpace.n._value[2]", "searchSpace.n._value[0].k._value"}
    assert "_name" in found["searchSpace.n._value[1]"]


# -- the model ------------------------------------------------------------------------------------


def test_search_space_is_frozen_and_owns_its_raw() -> None:
    raw = copy.deepcopy(NESTED)
    space = SearchSpace.from_json(raw)
    assert space.raw == NESTED
    raw["lr"]["_value"][0] = 5
    assert space.raw == NESTED
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.raw = {}  # type: ignore[misc]
    assert space == SearchSpace.from_json(NESTED)
    assert hash(space) == hash(SearchSpace.from_json(NESTED))
    assert space != SearchSpace.from_json({"lr": NESTED["lr"]})
    assert not space.is_empty
    assert SearchSpace.from_json({}).is_empty


def test_flattened_parameters_have_key_paths() -> None:
    space = SearchSpace.from_json(NESTED)
    assert [p.key for p in space.parameters] == [
        ("layer0",),
        ("layer0", 1, "kernel_size"),
        ("layer0", 2, "pooling_size"),
        ("lr",),
    ]
    layer = space["layer0",]
    assert layer.nested and layer.choices == ("Empty", "Conv", "Max_pool")
    assert layer.is_categorical and layer.size == 3
    kernel = space["layer0", 1, "kernel_size"]
    assert kernel.parent == ("layer0",) and kernel.branch == 1 and kernel.name == "kernel_size"
    lr = space["lr",]
    assert lr.log and not lr.is_discrete and lr.parent is None
    assert lr.internal_bounds() == pytest.approx((math.log(1e-4), math.log(1e-1)))
    with pytest.raises(KeyError):
        space["nope",]


# -- sampling -------------------------------------------------------------------------------------


def test_choice_is_uniform_over_options() -> None:
    values = draws(one("choice", ["a", 2, 3.5, None]), n=4000)
    counts = {repr(v): values.count(v) for v in ["a", 2, 3.5, None]}
    assert all(850 < c < 1150 for c in counts.values()), counts
    assert {type(v) for v in values} == {str, int, float, type(None)}


def test_randint_upper_bound_is_exclusive_and_values_are_ints() -> None:
    values = draws(one("randint", [-2, 3]))
    assert set(values) == {-2, -1, 0, 1, 2}
    assert all(type(v) is int for v in values)


def test_uniform_stays_in_bounds() -> None:
    values = draws(one("uniform", [-1.5, 2.5]))
    assert all(-1.5 <= v <= 2.5 and type(v) is float for v in values)
    assert statistics.mean(values) == pytest.approx(0.5, abs=0.1)


def test_quniform_examples_from_nni() -> None:
    values = draws(one("quniform", [0, 10, 2.5]))
    assert set(values) == {0.0, 2.5, 5.0, 7.5, 10.0}
    assert all(type(v) is float for v in values)
    # the ends get half the mass of the inner points
    assert values.count(0.0) < values.count(5.0) / 1.5
    assert set(draws(one("quniform", [2, 10, 5]))) == {2.0, 5.0, 10.0}


def test_quniform_with_integer_q_still_gives_floats() -> None:
    values = draws(one("quniform", [1, 5, 1]), n=500)
    assert set(values) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert all(type(v) is float for v in values)


def test_rounding_is_bankers() -> None:
    p = one("quniform", [0, 10, 2])["x",]
    assert p.from_internal(5.0) == 4.0  # round(2.5) == 2
    assert p.from_internal(3.0) == 4.0  # round(1.5) == 2
    assert p.from_internal(11.0) == 10.0  # clipped
    q = one("qnormal", [0, 1, 2])["x",]
    assert q.from_internal(-5.0) == -4.0 and q.from_internal(99.0) == 100.0  # no clip


def test_loguniform_is_uniform_in_log_space_and_in_bounds() -> None:
    values = draws(one("loguniform", [1e-4, 1.0]))
    assert all(1e-4 <= v <= 1.0 for v in values)
    assert statistics.median(values) == pytest.approx(1e-2, rel=0.3)
    assert statistics.mean(math.log10(v) for v in values) == pytest.approx(-2, abs=0.1)


def test_qloguniform_is_quantised_and_clipped() -> None:
    values = draws(one("qloguniform", [2, 100, 5]))
    assert min(values) == 2.0 and max(values) == 100.0
    assert all(v in (2.0, 100.0) or v % 5 == 0 for v in values)
    assert set(values) <= {2.0, *(5.0 * k for k in range(1, 21))}


def test_normal_family() -> None:
    normal = draws(one("normal", [3, 2]), n=4000)
    assert statistics.mean(normal) == pytest.approx(3, abs=0.15)
    assert statistics.stdev(normal) == pytest.approx(2, rel=0.1)
    qnormal = draws(one("qnormal", [0, 10, 4]), n=4000)
    assert all(v % 4 == 0 and type(v) is float for v in qnormal)
    assert min(qnormal) < -10 and max(qnormal) > 10  # not clipped to anything
    lognormal = draws(one("lognormal", [0, 1]), n=4000)
    assert all(v > 0 for v in lognormal)
    assert statistics.median(lognormal) == pytest.approx(1.0, rel=0.15)
    qlognormal = draws(one("qlognormal", [2, 1, 3]), n=2000)
    assert all(v % 3 == 0 and v >= 0 for v in qlognormal)


def test_sampling_is_reproducible_and_plain_python() -> None:
    space = SearchSpace.from_json(NESTED)
    a = [sample(space, np.random.default_rng(7)) for _ in range(3)]
    b = [sample(space, np.random.default_rng(7)) for _ in range(3)]
    assert a == b
    json.dumps(a)  # plain JSON types only

    def walk(x: Any) -> None:
        assert not isinstance(x, np.generic)
        if isinstance(x, dict):
            for v in x.values():
                walk(v)

    for point in a:
        walk(point)


def test_nested_choice_samples_only_the_chosen_branch() -> None:
    space = SearchSpace.from_json(NESTED)
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(300):
        point = sample(space, rng)
        layer = point["layer0"]
        seen.add(layer["_name"])
        expected = {"Empty": set(), "Conv": {"kernel_size"}, "Max_pool": {"pooling_size"}}[layer["_name"]]
        assert set(layer) == {"_name", *expected}
        if "kernel_size" in layer:
            assert layer["kernel_size"] in (1, 2, 3, 5)
        if "pooling_size" in layer:
            assert layer["pooling_size"] in (2, 3, 5)
    assert seen == {"Empty", "Conv", "Max_pool"}


def test_choice_of_plain_dicts_is_returned_verbatim_and_copied() -> None:
    space = one("choice", [{"a": 1}, {"a": 2, "b": [1]}])
    values = draws(space, n=50)
    assert {json.dumps(v, sort_keys=True) for v in values} == {'{"a": 1}', '{"a": 2, "b": [1]}'}
    values[0]["a"] = 99
    values[0].setdefault("b", []).append(5)
    assert space.raw["x"]["_value"] == [{"a": 1}, {"a": 2, "b": [1]}]
    assert space["x",].choices == ({"a": 1}, {"a": 2, "b": [1]})


# -- membership -----------------------------------------------------------------------------------


def test_samples_are_contained() -> None:
    raw = {
        "a": {"_type": "choice", "_value": [1, "two", True]},
        "b": {"_type": "randint", "_value": [1, 10]},
        "d": {"_type": "quniform", "_value": [0.1, 1, 0.2]},
        "f": {"_type": "qloguniform", "_value": [1, 100, 3]},
        "h": {"_type": "qnormal", "_value": [0, 1, 0.1]},
        "j": {"_type": "qlognormal", "_value": [0, 1, 0.3]},
        **NESTED,
    }
    space = SearchSpace.from_json(raw)
    rng = np.random.default_rng(3)
    for _ in range(500):
        assert contains(space, sample(space, rng))


@pytest.mark.parametrize(
    ("ptype", "value", "inside", "outside"),
    [
        ("choice", [1, "a"], [1, 1.0, "a"], [2, "b", True, None]),
        ("choice", [True, 0], [True, 0], [1, False, "True"]),
        ("randint", [0, 3], [0, 2, 2.0], [3, -1, 1.5, True, "1"]),
        ("uniform", [0, 1], [0, 0.5, 1], [-0.1, 1.1, float("nan"), "0.5"]),
        ("quniform", [0, 10, 2.5], [0.0, 2.5, 7.5, 10], [1.0, 12.5, -2.5]),
        ("quniform", [2, 10, 5], [2, 5.0, 10], [0.0, 3.0, 15.0]),
        ("quniform", [0, 1, 0.1], [0.30000000000000004, 0.3, 0.7], [0.35, 1.1]),
        ("loguniform", [1, 10], [1, 5, 10], [0.5, 11]),
        ("qloguniform", [1, 100, 10], [1, 10, 100], [5, 110]),
        ("normal", [0, 1], [-100, 0, 3.3], [float("inf")]),
        ("qnormal", [0, 1, 0.5], [-3.5, 0, 100.0], [0.25]),
        ("lognormal", [0, 1], [0.01, 50], [-1]),
        ("qlognormal", [0, 1, 2], [0, 2, 40], [-2, 3]),
    ],
)
def test_contains_per_type(ptype: str, value: list[Any], inside: list[Any], outside: list[Any]) -> None:
    space = one(ptype, value)
    for v in inside:
        assert contains(space, {"x": v}), v
    for v in outside:
        assert not contains(space, {"x": v}), v


def test_contains_checks_keys_and_nested_branches() -> None:
    space = SearchSpace.from_json(NESTED)
    assert contains(space, {"layer0": {"_name": "Conv", "kernel_size": 3}, "lr": 0.01})
    assert contains(space, {"layer0": {"_name": "Empty"}, "lr": 0.01})
    assert not contains(space, {"layer0": {"_name": "Empty"}})  # missing key
    assert not contains(space, {"layer0": {"_name": "Empty"}, "lr": 0.01, "x": 1})  # extra key
    assert not contains(space, {"layer0": {"_name": "Conv"}, "lr": 0.01})  # sub-parameter missing
    assert not contains(space, {"layer0": {"_name": "Empty", "kernel_size": 3}, "lr": 0.01})
    assert not contains(space, {"layer0": {"_name": "Conv", "pooling_size": 3}, "lr": 0.01})
    assert not contains(space, {"layer0": {"_name": "Conv", "kernel_size": 4}, "lr": 0.01})
    assert not contains(space, {"layer0": "Conv", "lr": 0.01})
    assert not contains(space, {"layer0": {"_name": "Dense"}, "lr": 0.01})
    assert not contains(space, [("lr", 0.01)])


# -- grid -----------------------------------------------------------------------------------------


def xs(space: SearchSpace, n: int | None = None) -> list[Any]:
    points = grid(space) if n is None else itertools.islice(grid(space), n)
    return [p["x"] for p in points]


def test_grid_enumerates_categoricals_lexicographically_and_ends() -> None:
    space = SearchSpace.from_json(
        {"c": {"_type": "choice", "_value": ["a", "b"]}, "r": {"_type": "randint", "_value": [0, 3]}}
    )
    assert list(grid(space)) == [
        {"c": c, "r": r} for c, r in [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    ]
    assert is_finite(space)


def test_grid_refines_uniform_by_quantile_epochs() -> None:
    assert xs(one("uniform", [0, 8]), 7) == [4.0, 2.0, 6.0, 1.0, 3.0, 5.0, 7.0]
    assert xs(one("uniform", [0, 16]), 15)[7:] == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]


def test_grid_epochs_skip_combinations_already_produced() -> None:
    space = SearchSpace.from_json(
        {"x": {"_type": "uniform", "_value": [0, 1]}, "c": {"_type": "choice", "_value": ["a", "b"]}}
    )
    got = [(p["x"], p["c"]) for p in itertools.islice(grid(space), 10)]
    assert got == [
        (0.5, "a"),
        (0.5, "b"),  # epoch 1
        (0.25, "a"),
        (0.25, "b"),
        (0.75, "a"),
        (0.75, "b"),  # epoch 2
        (0.125, "a"),
        (0.125, "b"),
        (0.375, "a"),
        (0.375, "b"),  # epoch 3 ...
    ]
    two = SearchSpace.from_json(
        {"x": {"_type": "uniform", "_value": [0, 4]}, "y": {"_type": "uniform", "_value": [0, 4]}}
    )
    assert [(p["x"], p["y"]) for p in itertools.islice(grid(two), 9)] == [
        (2.0, 2.0),
        (2.0, 1.0),
        (2.0, 3.0),
        (1.0, 2.0),
        (1.0, 1.0),
        (1.0, 3.0),
        (3.0, 2.0),
        (3.0, 1.0),
        (3.0, 3.0),
    ]
    assert not is_finite(two)


def test_grid_quniform_examples_collapse_and_end() -> None:
    assert xs(one("quniform", [0, 10, 2.5])) == [5.0, 2.5, 7.5, 0.0, 10.0]
    assert xs(one("quniform", [2, 10, 5])) == [5.0, 10.0, 2.0]
    assert all(type(v) is float for v in xs(one("quniform", [0, 4, 1])))


def test_grid_reaches_tiny_clipped_edges() -> None:
    # 11.3 is only produced by draws in [11.25, 11.3]
    assert sorted(xs(one("quniform", [0, 11.3, 2.5]))) == [0.0, 2.5, 5.0, 7.5, 10.0, 11.3]
    values = xs(one("qloguniform", [1, 1000, 1]))
    assert sorted(values) == [float(k) for k in range(1, 1001)]
    assert values[0] == pytest.approx(32.0)  # the geometric middle first


def test_grid_log_and_normal_types_use_their_quantiles() -> None:
    assert xs(one("loguniform", [1, 100]), 3) == pytest.approx([10.0, 10**0.5, 10**1.5])
    z = statistics.NormalDist().inv_cdf(0.75)
    assert xs(one("normal", [1, 2]), 3) == pytest.approx([1.0, 1 - 2 * z, 1 + 2 * z])
    assert xs(one("lognormal", [0, 1]), 3) == pytest.approx([1.0, math.exp(-z), math.exp(z)])
    assert xs(one("qnormal", [0, 1, 0.5]), 3) == [0.0, -0.5, 0.5]


def test_grid_of_unbounded_quantised_keeps_growing_outwards() -> None:
    # quantiles alone would (almost) never leave 0 here
    assert xs(one("qnormal", [0, 1, 100]), 5) == [0.0, -100.0, 100.0, -200.0, 200.0]
    assert xs(one("qlognormal", [0, 0.1, 10]), 3) == [0.0, 10.0, 20.0]
    assert not is_finite(one("qnormal", [0, 1, 100]))


def test_grid_nested_choice_enumerates_each_branch() -> None:
    space = SearchSpace.from_json({"layer0": NESTED["layer0"], "r": {"_type": "randint", "_value": [0, 2]}})
    points = list(grid(space))
    assert points[:4] == [
        {"layer0": {"_name": "Empty"}, "r": 0},
        {"layer0": {"_name": "Empty"}, "r": 1},
        {"layer0": {"_name": "Conv", "kernel_size": 1}, "r": 0},
        {"layer0": {"_name": "Conv", "kernel_size": 1}, "r": 1},
    ]
    assert len(points) == (1 + 4 + 3) * 2
    assert all(contains(space, p) for p in points)
    assert len({key(p) for p in points}) == len(points)


def test_grid_nested_with_continuous_sub_parameter() -> None:
    raw = {
        "m": {
            "_type": "choice",
            "_value": [{"_name": "a"}, {"_name": "b", "x": {"_type": "uniform", "_value": [0, 1]}}],
        }
    }
    space = SearchSpace.from_json(raw)
    assert list(itertools.islice(grid(space), 4)) == [
        {"m": {"_name": "a"}},
        {"m": {"_name": "b", "x": 0.5}},
        {"m": {"_name": "b", "x": 0.25}},
        {"m": {"_name": "b", "x": 0.75}},
    ]
    assert not is_finite(space)
    assert duplicates_possible(space)  # the top-level parameter is categorical


def test_grid_points_are_valid_and_distinct_for_a_mixed_space() -> None:
    raw = {
        "c": {"_type": "choice", "_value": [1, 1, 2]},  # a repeated option appears once
        "q": {"_type": "qloguniform", "_value": [1, 50, 4]},
        "n": {"_type": "qnormal", "_value": [0, 3, 1]},
        **NESTED,
    }
    space = SearchSpace.from_json(raw)
    points = list(itertools.islice(grid(space), 3000))
    assert len(points) == 3000
    assert all(contains(space, p) for p in points)
    assert len({key(p) for p in points}) == 3000
    assert {p["c"] for p in points} == {1, 2}


def test_grid_does_not_materialise_huge_randints() -> None:
    space = SearchSpace.from_json(
        {"seed": {"_type": "randint", "_value": [0, 2**40]}, "c": {"_type": "choice", "_value": [1, 2]}}
    )
    assert list(itertools.islice(grid(space), 3)) == [{"seed": 0, "c": 1}, {"seed": 0, "c": 2}, {"seed": 1, "c": 1}]


def test_grid_of_empty_space_is_one_empty_point() -> None:
    assert list(grid(SearchSpace.from_json({}))) == [{}]


def test_choice_with_plain_dicts_in_grid_is_copied() -> None:
    space = one("choice", [{"a": [1]}])
    (point,) = list(grid(space))
    point["x"]["a"].append(2)
    assert list(grid(space)) == [{"x": {"a": [1]}}]


# -- helpers --------------------------------------------------------------------------------------


def test_is_finite_and_duplicates_possible() -> None:
    assert is_finite(one("quniform", [0, 1, 0.1]))
    assert is_finite(one("qloguniform", [1, 10, 1]))
    assert not is_finite(one("qnormal", [0, 1, 1]))
    assert not is_finite(one("uniform", [0, 1]))
    assert duplicates_possible(one("qnormal", [0, 1, 1]))
    assert not duplicates_possible(one("loguniform", [1, 2]))
    mixed = SearchSpace.from_json(
        {"c": {"_type": "choice", "_value": [1, 2]}, "u": {"_type": "uniform", "_value": [0, 1]}}
    )
    assert not duplicates_possible(mixed)
    assert is_finite(SearchSpace.from_json(NESTED)) is False
    assert is_finite(SearchSpace.from_json({"layer0": NESTED["layer0"]}))


def test_key_is_canonical() -> None:
    assert key({"b": 1, "a": {"y": 2, "x": [1, "s"]}}) == key({"a": {"x": [1, "s"], "y": 2}, "b": 1})
    assert key({"a": 1}) != key({"a": 1.0})
    assert key({"a": np.int64(3)}) == key({"a": 3})
    assert json.loads(key({"a": 0.5})) == {"a": 0.5}


# --------------------------------------------------------------------------------------------------
# bounds (issue 11, item 8): a clear issue instead of a RecursionError or minutes of work


def nested_choices(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"_type": "choice", "_value": [{"_name": "leaf"}]}
    for i in range(depth - 1):
        spec = {"_type": "choice", "_value": [{"_name": f"n{i}", "x": spec}]}
    return {"x": spec}


def test_nested_choices_2000_deep_are_an_issue_not_a_recursion_error() -> None:
    (issue,) = validate(nested_choices(2000))
    assert "nested deeper than 100 levels" in issue.message
    assert issue.path.startswith("searchSpace.x._value[0].x._value[0]")
    with pytest.raises(SearchSpaceError, match="nested deeper"):
        SearchSpace.from_json(nested_choices(2000))


def test_nested_choice_depth_limit_is_16() -> None:
    assert validate(nested_choices(16)) == []
    assert len(SearchSpace.from_json(nested_choices(16)).parameters) == 16
    (issue,) = validate(nested_choices(17))
    assert "choices are nested more than 16 levels deep" in issue.message
    assert issue.path == "searchSpace" + ".x._value[0]" * 16 + ".x._value"


def test_deeply_nested_option_values_are_an_issue() -> None:
    option: Any = 1
    for _ in range(5000):
        option = [option]
    (issue,) = validate({"x": {"_type": "choice", "_value": [option]}})
    assert "nested deeper than 100 levels" in issue.message


def test_a_million_options_are_accepted_and_one_more_is_not() -> None:
    space = SearchSpace.from_json({"x": {"_type": "choice", "_value": list(range(1_000_000))}})
    assert space["x",].size == 1_000_000
    (issue,) = validate({"x": {"_type": "choice", "_value": list(range(1_000_001))}})
    assert issue.path == "searchSpace.x._value"
    assert "1,000,001 options, more than nnix's limit of 1,000,000" in issue.message


def test_a_space_with_too_many_values_in_all_is_an_issue() -> None:
    raw = {f"p{i}": {"_type": "choice", "_value": list(range(500_000))} for i in range(5)}
    (issue,) = validate(raw)
    assert issue.path == "searchSpace" and "more than 2,000,000 values" in issue.message


def test_shared_structure_is_counted_expanded() -> None:
    """A structure that shares its parts (what YAML aliases build) is bounded by what it expands to.
    In a child with a deadline: walking all 9**10 values took hours."""
    import subprocess
    import sys

    code = (
        "from nnix.space import validate\n"
        "level = ['lol'] * 9\n"
        "for _ in range(9):\n    level = [level] * 9\n"
        "(issue,) = validate({'x': {'_type': 'choice', '_value': level}})\n"
        "print(issue.message)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "more than 2,000,000 values" in r.stdout


def test_long_names_and_values_are_cut_in_messages() -> None:
    name = "p" * 100_000
    (issue,) = validate({name: {"_type": "t" * 1_000_000, "_value": [0, 1]}})
    assert len(issue.path) < 200 and len(issue.message) < 200
