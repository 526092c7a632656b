"""nnix.limits: one set of bounds for the config file, the REST updates and the CLI; bounded reprs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

CONFIG = """\
searchSpace: {x: {_type: choice, _value: [1, 2]}}
trialCommand: python3 main.py
trialConcurrency: 1
tuner: {name: Random}
trainingService: {platform: local}
"""


def config_accepts(tmp_path: Path, camel: str, value: Any) -> bool:
    import json

    from nnix.config import load_config
    from nnix.errors import ConfigError

    path = tmp_path / "config.yml"
    lines = [line for line in CONFIG.splitlines() if not line.startswith(f"{camel}:")]
    path.write_text("\n".join([*lines, f"{camel}: {json.dumps(value)}"]) + "\n")
    try:
        load_config(path)
    except ConfigError as e:
        assert all(i.path == camel for i in e.issues), e.issues
        return False
    return True


def rest_accepts(field: str, camel: str, value: Any) -> bool:
    from nnix.api.common import ApiError
    from nnix.api.compat import check_limit

    try:
        check_limit(field, camel, value)
    except ApiError as e:
        assert e.status == 400 and camel in e.message
        return False
    return True


@pytest.mark.parametrize(
    ("field", "camel", "value", "ok"),
    [
        ("trial_concurrency", "trialConcurrency", 1, True),
        ("trial_concurrency", "trialConcurrency", 10_000, True),
        ("trial_concurrency", "trialConcurrency", 10_001, False),
        ("trial_concurrency", "trialConcurrency", 10**12, False),
        ("trial_concurrency", "trialConcurrency", 0, False),
        ("max_trial_number", "maxTrialNumber", 999_999_999, True),
        ("max_trial_number", "maxTrialNumber", 2**31, False),
        ("max_experiment_duration", "maxExperimentDuration", "3650d", True),
        ("max_experiment_duration", "maxExperimentDuration", "3651d", False),
        ("max_experiment_duration", "maxExperimentDuration", 10**12, False),
        ("max_experiment_duration", "maxExperimentDuration", "0s", False),
    ],
)
def test_config_and_rest_share_one_set_of_bounds(tmp_path: Path, field: str, camel: str, value: Any, ok: bool) -> None:
    assert config_accepts(tmp_path, camel, value) is ok
    assert rest_accepts(field, camel, value) is ok


def test_the_bounds_are_the_documented_ones() -> None:
    from nnix import limits

    b = limits.BOUNDS
    assert (b["trial_concurrency"].low, b["trial_concurrency"].high) == (1, 10_000)
    assert b["max_trial_number"].high == 999_999_999
    assert b["max_experiment_duration"].high == b["max_trial_duration"].high == 3650 * 86400
    assert b["max_trial_duration"].hint == "nnix accepts maxTrialDuration from 1s to 3650d"
    assert b["trial_concurrency"].problem(True) == "must be an integer, got True"
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for figure in ("32 MiB", "100 levels", "2,000,000 values", "1,000,000 options", "16 levels", "10,000",
                   "999,999,999", "3650 days"):
        assert figure in readme, figure


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["update", "concurrency", "X", "-v", "10001"], "10001 is not in the range 1<=x<=10000"),
        (["update", "trialnum", "X", "-v", "1000000000"], "1000000000 is not in the range 1<=x<=999999999"),
        (["update", "duration", "X", "-v", "3651d"], "at most 315360000s"),
    ],
)
def test_cli_updates_use_the_same_bounds(args: list[str], fragment: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any experiment is looked up (X names none), with exit code 2."""
    from nnix.cli.main import main

    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(sys, "argv", ["nnix", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    assert info.value.code == 2, out
    assert fragment in out.err


def test_cli_accepts_a_concurrency_the_config_accepts(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """5000 is within bounds: the CLI goes on to look for the experiment (and fails on that, not the value)."""
    from nnix.cli.main import main

    monkeypatch.setattr(sys, "argv", ["nnix", "update", "concurrency", "nosuchexp", "-v", "5000"])
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    assert info.value.code == 1 and "nosuchexp" in out.err, out


# --------------------------------------------------------------------------------------------------
# brief


def test_brief_matches_repr_for_small_values() -> None:
    from nnix.limits import brief

    for value in (1, -2.5, "a'b", None, True, [1, "x"], {"a": [1, 2]}, (1,), b"xy", float("nan")):
        assert brief(value) == repr(value)


def test_brief_is_bounded_on_huge_and_shared_values() -> None:
    from nnix.limits import brief

    assert len(brief("x" * 10_000_000)) <= 80
    assert brief(10**5000) == "<an integer of about 5001 digits>"  # str() of it raises ValueError
    level: Any = ["lol"] * 9
    for _ in range(12):
        level = [level] * 9  # 9**13 elements when expanded: repr() would never end
    text = brief({"k": level})
    assert len(text) <= 80 and text.startswith("{'k': [[[")
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]  # repr() raises RecursionError
    assert brief(deep).startswith("[[[[")
    assert brief(object()) == "<object>"


def test_shape_problem_finds_depth_and_size_without_walking_everything() -> None:
    from nnix.limits import shape_problem

    assert shape_problem({"a": [1, 2, {"b": 3}]}) is None
    deep: Any = 0
    for _ in range(150):
        deep = {"k": deep}
    assert shape_problem(deep) == (".".join(["k"] * 100), "nested deeper than 100 levels")
    level: Any = [0] * 9
    for _ in range(15):
        level = [level] * 9
    assert shape_problem(level) == ("", "holds more than 2,000,000 values")


def test_the_rest_and_archive_bounds_are_the_ones_every_side_uses() -> None:
    from nnix import archive, limits
    from nnix.api import common
    from nnix.model.imported import MAX_PARAMETER_DEPTH

    assert common.MAX_BODY == limits.MAX_REQUEST_BYTES == 8 * 1024 * 1024  # the server's 413, the CLI's check
    assert MAX_PARAMETER_DEPTH == limits.MAX_DEPTH  # (the leaf package cannot import limits)
    assert archive.MAX_MEMBERS == limits.MAX_ARCHIVE_MEMBERS == 1_000_000
    assert limits.MAX_ARCHIVE_BYTES == 1024**4 and limits.MAX_ARCHIVE_RATIO == 200
    assert limits.ARCHIVE_RATIO_FLOOR == limits.MAX_MANIFEST_BYTES == 1024 * 1024
