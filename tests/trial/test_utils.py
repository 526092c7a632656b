"""merge_parameter: NNI's rules for merging tuner parameters into a trial's defaults."""

from __future__ import annotations

import argparse

import pytest

from nnix.trial.utils import merge_parameter


def test_none_override_returns_base_unchanged() -> None:
    base = {"lr": 0.1}
    assert merge_parameter(base, None) is base
    assert base == {"lr": 0.1}


def test_dict_is_updated_in_place() -> None:
    base = {"lr": 0.1, "layers": 2, "opt": "sgd", "extra": None, "flag": False}
    out = merge_parameter(base, {"lr": 0.5, "layers": 4, "opt": "adam", "extra": [1, 2], "flag": True})
    assert out is base
    assert base == {"lr": 0.5, "layers": 4, "opt": "adam", "extra": [1, 2], "flag": True}


def test_namespace_is_updated_in_place() -> None:
    ns = argparse.Namespace(lr=0.1, batch_size=32, name=None)
    out = merge_parameter(ns, {"lr": 0.01, "batch_size": 64, "name": "x"})
    assert out is ns
    assert vars(ns) == {"lr": 0.01, "batch_size": 64, "name": "x"}


def test_int_into_float_becomes_float() -> None:
    base = {"lr": 0.1}
    merge_parameter(base, {"lr": 1})
    assert base["lr"] == 1.0 and type(base["lr"]) is float


def test_bool_into_int_is_taken() -> None:  # bool is an int subclass, as in NNI
    base = {"n": 1}
    merge_parameter(base, {"n": True})
    assert base["n"] is True


def test_unknown_key() -> None:
    base = {"lr": 0.1}
    with pytest.raises(ValueError, match="key 'momentum' is not among the base parameters"):
        merge_parameter(base, {"momentum": 0.9})
    with pytest.raises(ValueError, match="key 'momentum'"):
        merge_parameter(argparse.Namespace(lr=0.1), {"momentum": 0.9})


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (1, 0.5, "holds a int .* new value 0.5 is a float"),
        ("sgd", 1, "holds a str .* new value 1 is a int"),
        (True, 1, "holds a bool"),
        (0.1, "0.2", "holds a float .* new value '0.2' is a str"),
    ],
)
def test_type_mismatch(old: object, new: object, message: str) -> None:
    base = {"k": old, "other": 1}
    with pytest.raises(ValueError, match=f"key 'k' {message}"):
        merge_parameter(base, {"other": 2, "k": new})
    assert base == {"k": old, "other": 1}  # nothing is applied when a key is rejected


def test_base_without_attributes() -> None:
    with pytest.raises(TypeError, match="base must be a dict"):
        merge_parameter(3, {"a": 1})
