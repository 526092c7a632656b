"""The native experiment schema and its loader."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_snake

from nnix.config import (
    AlgorithmConfig,
    ExperimentConfig,
    LocalConfig,
    RemoteConfig,
    load_config,
    parse_config,
    parse_duration,
    parse_gpu_indices,
    training_service_platforms,
)
from nnix.errors import ConfigError
from nnix.registry import AlgorithmRef

HAS_SPACE = importlib.util.find_spec("nnix.space") is not None
needs_space = pytest.mark.skipif(not HAS_SPACE, reason="nnix.space (search-space validation) is not written yet")
HAS_RANDOM = importlib.util.find_spec("nnix.tuners.random") is not None

SPACE = {"x": {"_type": "choice", "_value": [1, 2, 3]}}
TUNER_CODE = """
class MyTuner:
    def __init__(self, optimize_mode="maximize", seed=0):
        pass
"""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNIX_HOME", str(tmp_path / "home"))


def base(tmp_path: Path) -> dict[str, Any]:
    """A valid config that needs no registered tuner: a custom class in ``tmp_path``."""
    module = tmp_path / "cfg_test_tuner.py"
    if not module.exists():
        module.write_text(TUNER_CODE)
    return {
        "searchSpace": dict(SPACE),
        "trialCommand": "python3 main.py",
        "trialConcurrency": 2,
        "tuner": {"className": "cfg_test_tuner.MyTuner", "classArgs": {"optimize_mode": "minimize"}},
        "trainingService": {"platform": "local"},
    }


def write(tmp_path: Path, data: dict[str, Any] | str, name: str = "config.yml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def issues_of(data: dict[str, Any], base_dir: Path) -> list[tuple[str, str, str | None]]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, base_dir)
    assert info.value.exit_code == 2
    return [(i.path, i.message, i.hint) for i in info.value.issues]


# --------------------------------------------------------------------------------------------------
# Value parsing


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1h", 3600),
        ("0.5h", 1800),
        (90, 90),
        ("90", 90),
        ("1.5m", 90),
        ("2D", 172800),
        ("10s", 10),
        ("1 d", 86400),
        (" 3M ", 180),
        (2.2, 3),
        ("0.1h", 360),
        (".5m", 30),
    ],
)
def test_duration_parsing(value: Any, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["10x", "h", "", "1h30m", "-1h", True, None, [1], float("inf")])
def test_bad_durations(value: Any) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "indices"),
    [(1, [1]), ([0, 2], [0, 2]), ("0,1", [0, 1]), (" 3 , 1 ", [3, 1]), ("2", [2]), ([], [])],
)
def test_gpu_indices_forms(value: Any, indices: list[int]) -> None:
    assert parse_gpu_indices(value) == indices


@pytest.mark.parametrize(
    ("value", "fragment"),
    [([0, 0], "listed twice"), ("1,1", "listed twice"), (-1, "negative"), ("0,-2", "negative"),
     ("a", "not a GPU index"), (True, "expected GPU indices"), ([1.5], "not a GPU index"), ("", "not a GPU index")],
)  # fmt: skip
def test_bad_gpu_indices(value: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_gpu_indices(value)


# --------------------------------------------------------------------------------------------------
# The models


@needs_space
def test_defaults(tmp_path: Path) -> None:
    loaded = parse_config(base(tmp_path), tmp_path)
    config = loaded.config
    assert loaded.format == "v2" and loaded.warnings == []
    assert config.trial_code_directory == tmp_path.resolve()
    assert config.experiment_working_directory == (tmp_path / "home").resolve()
    assert config.log_level == "info"
    assert config.max_experiment_duration is None and config.max_trial_number is None
    assert config.assessor is None and config.trial_gpu_number is None
    assert config.trial_params_as_args is False and config.nan_policy == "error"
    assert isinstance(config.training_service, LocalConfig)
    assert config.training_service.max_trial_number_per_gpu == 1
    assert config.tuner.code_directory == tmp_path.resolve()  # nnix default for a custom class


@needs_space
def test_debug_implies_debug_log_level_unless_set(tmp_path: Path) -> None:
    assert parse_config({**base(tmp_path), "debug": True}, tmp_path).config.log_level == "debug"
    data = {**base(tmp_path), "debug": True, "logLevel": "error"}
    assert parse_config(data, tmp_path).config.log_level == "error"


@needs_space
def test_to_json_uses_nni_camel_case_keys(tmp_path: Path) -> None:
    data = {**base(tmp_path), "maxExperimentDuration": "1h", "trialGpuNumber": 0}
    data["trainingService"] = {"platform": "local", "useActiveGpu": False, "gpuIndices": "1"}
    out = parse_config(data, tmp_path).config.to_json()
    assert out["maxExperimentDuration"] == 3600
    assert out["trialCodeDirectory"] == str(tmp_path.resolve())
    assert out["trainingService"] == {
        "platform": "local",
        "useActiveGpu": False,
        "maxTrialNumberPerGpu": 1,
        "gpuIndices": [1],
        "reuseMode": False,
    }
    assert out["tuner"]["classArgs"] == {"optimize_mode": "minimize"}
    assert "assessor" not in out and "maxTrialNumber" not in out
    again = ExperimentConfig.model_validate(out)
    assert again.to_json() == out


@needs_space
def test_python_api_uses_field_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = ExperimentConfig(
        search_space=SPACE,
        trial_command="python3 main.py",
        trial_concurrency=1,
        max_trial_duration="2m",  # type: ignore[arg-type]
        tuner=AlgorithmConfig(name="random"),
        training_service=LocalConfig(platform="local"),
    )
    assert config.trial_code_directory == tmp_path.resolve()
    assert config.max_trial_duration == 120


@needs_space
def test_python_api_checks_cross_field_rules() -> None:
    with pytest.raises(ValueError, match="useActiveGpu"):
        ExperimentConfig(
            search_space=SPACE,
            trial_command="python3 main.py",
            trial_concurrency=1,
            trial_gpu_number=1,
            tuner=AlgorithmConfig(name="random"),
            training_service=LocalConfig(platform="local"),
        )


def test_algorithm_config_ref(tmp_path: Path) -> None:
    assert AlgorithmConfig(name="TPE").ref() == AlgorithmRef(name="TPE")
    custom = AlgorithmConfig.model_validate({"className": "m.C", "codeDirectory": "."}, context={"base_dir": tmp_path})
    assert custom.ref() == AlgorithmRef(class_name="m.C", code_directory=tmp_path.resolve())


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"name": "TPE", "className": "m.C"}, "not both"),
        ({}, "no algorithm"),
        ({"classArgs": {"x": 1}}, "no algorithm"),
        ({"name": "TPE", "codeDirectory": "."}, "only for a custom algorithm"),
    ],
)
def test_algorithm_config_rules(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        AlgorithmConfig.model_validate(data)


def test_supported_platforms() -> None:
    table = training_service_platforms()
    assert table["local"] is LocalConfig and table["remote"] is RemoteConfig
    assert {"slurm", "ray", "kubernetes", "kubeflow", "frameworkcontroller", "openpai", "hybrid"} <= set(table)


# --------------------------------------------------------------------------------------------------
# Loading files


@needs_space
def test_relative_paths_resolve_against_the_config_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf_dir = tmp_path / "conf"
    (conf_dir / "code").mkdir(parents=True)
    (conf_dir / "spaces").mkdir()
    (conf_dir / "spaces" / "space.json").write_text('{"x": {"_type": "choice", "_value": [1, 2]}}')
    data = base(conf_dir)
    del data["searchSpace"]
    data.update(
        searchSpaceFile="spaces/space.json",
        trialCodeDirectory="code",
        experimentWorkingDirectory="../exps",
    )
    data["tuner"]["codeDirectory"] = "."
    path = write(conf_dir, data)
    monkeypatch.chdir(tmp_path)  # anywhere else
    config = load_config(path).config
    assert config.search_space_file == (conf_dir / "spaces" / "space.json").resolve()
    assert config.search_space == {"x": {"_type": "choice", "_value": [1, 2]}}
    assert config.trial_code_directory == (conf_dir / "code").resolve()
    assert config.experiment_working_directory == (tmp_path / "exps").resolve()
    assert config.tuner.code_directory == conf_dir.resolve()


@needs_space
def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    data = {**base(tmp_path), "experimentWorkingDirectory": "~/runs"}
    assert parse_config(data, tmp_path).config.experiment_working_directory == (tmp_path / "runs").resolve()


@needs_space
def test_search_space_file_may_be_yaml(tmp_path: Path) -> None:
    (tmp_path / "space.yml").write_text("x:\n  _type: choice\n  _value: [1, 2]\n")
    data = base(tmp_path)
    del data["searchSpace"]
    data["searchSpaceFile"] = "space.yml"
    assert parse_config(data, tmp_path).config.search_space == {"x": {"_type": "choice", "_value": [1, 2]}}


@needs_space
def test_search_space_problems_are_prefixed_with_the_users_key(tmp_path: Path) -> None:
    bad = {"x": {"_type": "choise", "_value": [1]}}
    data = {**base(tmp_path), "searchSpace": bad}
    paths = [p for p, _, _ in issues_of(data, tmp_path)]
    assert paths and all(p.startswith("searchSpace") for p in paths)

    (tmp_path / "ss.json").write_text('{"x": {"_type": "choise", "_value": [1]}}')
    data = base(tmp_path)
    del data["searchSpace"]
    data["searchSpaceFile"] = "ss.json"
    paths = [p for p, _, _ in issues_of(data, tmp_path)]
    assert paths and all(p.startswith("searchSpaceFile(ss.json)") for p in paths)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_config("/nonexistent/config.yml")
    assert info.value.source == "/nonexistent/config.yml"


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empty"):
        load_config(write(tmp_path, ""))


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        trialCommand: python3 main.py
        trialConcurrency: 1
        tuner:
          name: TPE
         classArgs: {}
        """
    )
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    (issue,) = info.value.issues
    assert "YAML syntax error at line 5" in issue.message
    assert issue.hint


# --------------------------------------------------------------------------------------------------
# Bad configs: every problem, with the user's path and a useful message


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data[part]
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


_DELETE = object()

BAD: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, {dotted key: value or _DELETE}, expected path, fragment of message or hint)
    ("typo", {"trialConcurency": 3}, "trialConcurency", "did you mean 'trialConcurrency'?"),
    ("missing command", {"trialCommand": _DELETE}, "trialCommand", "missing required field"),
    ("empty command", {"trialCommand": "  "}, "trialCommand", "must not be empty"),
    ("negative concurrency", {"trialConcurrency": -1}, "trialConcurrency", "greater than 0, got -1"),
    ("concurrency as text", {"trialConcurrency": "many"}, "trialConcurrency", "valid integer"),
    ("bad duration", {"maxExperimentDuration": "10x"}, "maxExperimentDuration", "e.g. 2h"),
    ("zero duration", {"maxTrialDuration": "0s"}, "maxTrialDuration", "greater than 0"),
    ("negative gpus", {"trialGpuNumber": -1}, "trialGpuNumber", "greater than or equal to 0"),
    ("bad log level", {"logLevel": "verbose"}, "logLevel", "'trace'"),
    ("unknown platform", {"trainingService.platform": "moon"}, "trainingService.platform", "unknown platform 'moon'"),
    ("planned platform", {"trainingService.platform": "aml"}, "trainingService.platform", "not supported by this"),
    ("no platform", {"trainingService.platform": _DELETE}, "trainingService.platform", "missing"),
    ("gpu duplicates", {"trainingService.gpuIndices": [0, 0]}, "trainingService.gpuIndices", "listed twice"),
    ("gpu negative", {"tunerGpuIndices": "-1"}, "tunerGpuIndices", "negative"),
    ("per-gpu zero", {"trainingService.maxTrialNumberPerGpu": 0}, "trainingService.maxTrialNumberPerGpu", "greater"),
    ("active gpu unset", {"trialGpuNumber": 1}, "trainingService.useActiveGpu",
     "set trainingService.useActiveGpu: false (or true to share GPUs with other processes)"),
    ("per-gpu w/o gpus", {"trainingService.maxTrialNumberPerGpu": 2}, "trainingService.maxTrialNumberPerGpu",
     "unless trialGpuNumber"),
    ("both spaces", {"searchSpaceFile": "space.json"}, "searchSpaceFile", "not both"),
    ("no space", {"searchSpace": _DELETE}, "searchSpace", "no search space"),
    ("space file missing", {"searchSpace": _DELETE, "searchSpaceFile": "nope.json"}, "searchSpaceFile",
     "does not exist"),
    ("code dir missing", {"trialCodeDirectory": "nope"}, "trialCodeDirectory", "does not exist"),
    ("tuner dir missing", {"tuner.codeDirectory": "nope"}, "tuner.codeDirectory", "does not exist"),
    ("unknown tuner", {"tuner": {"name": "Randm"}}, "tuner.name", "did you mean 'random'?"),
    ("tuner arg typo", {"tuner.classArgs": {"optimize_mod": "maximize"}}, "tuner.classArgs.optimize_mod",
     "did you mean 'optimize_mode'?"),
    ("tuner not a class", {"tuner.className": "cfg_test_tuner.Nope"}, "tuner.className", "cannot import"),
    ("both name and class", {"tuner.name": "random"}, "tuner", "not both"),
    ("unknown tuner key", {"tuner.classArg": {}}, "tuner.classArg", "did you mean 'classArgs'?"),
    ("nested typo", {"trainingService.useActivGpu": True}, "trainingService.useActivGpu",
     "did you mean 'useActiveGpu'"),
    ("nas", {"experimentType": "nas"}, "experimentType", "not supported"),
    ("annotation", {"useAnnotation": True}, "useAnnotation", "not supported"),
    ("bool as int", {"trialConcurrency": True}, "trialConcurrency", "valid integer"),
    ("unknown nan policy", {"nanPolicy": "ignore"}, "nanPolicy", "'allow'"),
    ("tuner not a mapping", {"tuner": "TPE"}, "tuner", "must be a mapping"),
]  # fmt: skip


@needs_space
@pytest.mark.parametrize(("changes", "path", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_configs(tmp_path: Path, changes: dict[str, Any], path: str, fragment: str) -> None:
    (tmp_path / "space.json").write_text('{"x": {"_type": "choice", "_value": [1]}}')
    data = base(tmp_path)
    for key, value in changes.items():
        _set(data, key, value)
    found = issues_of(data, tmp_path)
    matching = [(p, m, h) for p, m, h in found if p == path]
    assert matching, found
    assert any(fragment in f"{m} (hint: {h})" for _, m, h in matching), found
    assert len(found) == 1, found


@needs_space
@pytest.mark.skipif(not HAS_RANDOM, reason="nnix.tuners.random is not written yet")
def test_bad_class_arg_of_a_builtin_tuner(tmp_path: Path) -> None:
    data = {**base(tmp_path), "tuner": {"name": "Random", "classArgs": {"seeed": 1}}}
    found = issues_of(data, tmp_path)
    assert [(p, h) for p, _, h in found] == [("tuner.classArgs.seeed", "did you mean 'seed'?")]


@needs_space
def test_several_errors_are_reported_together(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        searchSpaceFile: missing.json
        trialConcurency: 2
        maxExperimentDuration: 3 weeks
        tuner:
          name: Randm
        trainingService:
          platform: local
          gpuIndices: 0,0
        """
    )
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    paths = [i.path for i in info.value.issues]
    assert sorted(paths) == sorted(
        [
            "searchSpaceFile",
            "trialConcurency",
            "maxExperimentDuration",
            "trialCommand",
            "tuner.name",
            "trainingService.gpuIndices",
        ]
    )
    text = str(info.value)
    assert "6 problems" in text and "config.yml" in text


@needs_space
def test_snake_case_input_gets_snake_case_paths(tmp_path: Path) -> None:
    data = {
        "search_space": SPACE,
        "trial_concurrency": 0,
        "tuner": {"class_name": "cfg_test_tuner.MyTuner"},
        "training_service": {"platform": "local", "gpu_indices": [1, 1]},
    }
    base(tmp_path)  # writes the tuner module
    paths = sorted(p for p, _, _ in issues_of(data, tmp_path))
    assert paths == ["training_service.gpu_indices", "trial_command", "trial_concurrency"]


@needs_space
def test_cross_field_rules_pass_when_satisfied(tmp_path: Path) -> None:
    data = {**base(tmp_path), "trialGpuNumber": 1}
    data["trainingService"] = {"platform": "local", "useActiveGpu": False, "maxTrialNumberPerGpu": 2}
    config = parse_config(data, tmp_path).config
    assert isinstance(config.training_service, LocalConfig)
    assert config.training_service.use_active_gpu is False
    assert config.training_service.max_trial_number_per_gpu == 2


@pytest.mark.parametrize("name", ["kubernetes", "kubeflow", "frameworkcontroller", "slurm", "ray"])
def test_the_example_cluster_configs_load(name: str) -> None:
    """The configs shipped in examples/branin/cluster are valid as written (the README points at them)."""
    from nnix.config import load_config

    path = Path(__file__).resolve().parents[1] / "examples" / "branin" / "cluster" / f"{name}.yml"
    cfg = load_config(path).config
    assert cfg.training_service.platform == name
    assert cfg.trial_code_directory == path.parents[1]  # the example's code, one level up


# --------------------------------------------------------------------------------------------------
# Hostile files (issue 11, item 8): bounded work, a clear error with the field path and the line

VALID_TEXT = textwrap.dedent(
    """\
    searchSpace: {x: {_type: choice, _value: [1, 2, 3]}}
    trialCommand: python3 main.py
    trialConcurrency: 2
    tuner: {className: cfg_test_tuner.MyTuner}
    trainingService: {platform: local}
    """
)


def with_key(key: str, value: str) -> str:
    """VALID_TEXT with ``key: value`` set (replaced, or added at the end)."""
    lines = [line for line in VALID_TEXT.splitlines() if not line.startswith(f"{key}:")]
    return "\n".join([*lines, f"{key}: {value}"]) + "\n"


def _one_issue(path: Path) -> Any:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.issues) == 1, info.value.issues
    return info.value.issues[0]


def _load_in_subprocess(path: Path) -> str:
    """load_config in a child with a deadline: the old loader hung (or blew the stack) on these files."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom nnix.config import load_config\nfrom nnix.errors import ConfigError\n"
        f"try:\n    load_config({str(path)!r})\nexcept ConfigError as e:\n    print(e.message)\n    sys.exit(2)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return r.stdout


def test_billion_laughs_is_refused_quickly_with_the_line(tmp_path: Path) -> None:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    base(tmp_path)
    text = "\n".join(lines) + "\n" + VALID_TEXT.replace("trialConcurrency: 2", "trialConcurrency: *l9")
    out = _load_in_subprocess(write(tmp_path, text))
    assert "more than 2,000,000 values" in out and "(aliases counted as expanded)" in out
    assert "at line 7" in out and "config.yml" in out


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    issue = _one_issue(write(tmp_path, VALID_TEXT + "experimentName: &a [1, *a]\n"))
    assert issue.path == "experimentName[1]" and "inside its own anchor" in issue.message


def test_yaml_nesting_10000_deep_is_refused_without_recursion_error(tmp_path: Path) -> None:
    out = _load_in_subprocess(write(tmp_path, VALID_TEXT + "experimentName: " + "[" * 10000 + "]" * 10000 + "\n"))
    assert "nested deeper than 100 levels" in out and "line 6" in out


def test_deep_block_nesting_names_the_path_and_line(tmp_path: Path) -> None:
    nested = "".join(f"{'  ' * i}k{i}:\n" for i in range(120)) + "  " * 120 + "leaf\n"
    issue = _one_issue(write(tmp_path, VALID_TEXT + "tuner2:\n" + textwrap.indent(nested, "  ")))
    assert "nested deeper than 100 levels" in issue.message and "at line" in issue.message
    assert issue.path.startswith("tuner2.k0.k1.k2")


def test_duplicate_keys_are_an_error_with_path_and_lines(tmp_path: Path) -> None:
    issue = _one_issue(write(tmp_path, VALID_TEXT + "trialConcurrency: 5\n"))
    assert issue.path == "trialConcurrency"
    assert "at line 6: duplicate key (first at line 3)" in issue.message
    nested = VALID_TEXT.replace("{platform: local}", "{platform: local, useActiveGpu: true, useActiveGpu: false}")
    issue = _one_issue(write(tmp_path, nested))
    assert issue.path == "trainingService.useActiveGpu" and "duplicate key" in issue.message


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    base(tmp_path)
    text = VALID_TEXT.replace("trainingService: {platform: local}", "common: &c {platform: local}\n") + (
        "trainingService:\n  <<: *c\n  platform: local\n"
    )
    issue = _one_issue(write(tmp_path, text))
    assert issue.path == "common"  # only the unknown key: the merge and its override are fine


def test_integers_too_long_to_read_are_refused(tmp_path: Path) -> None:
    issue = _one_issue(write(tmp_path, VALID_TEXT.replace("trialConcurrency: 2", "trialConcurrency: " + "9" * 5000)))
    assert "more than 4000 digits" in issue.message and "line 3" in issue.message


def test_values_in_messages_are_cut_short(tmp_path: Path) -> None:
    big = "x" * 1_000_000
    issue = _one_issue(write(tmp_path, VALID_TEXT.replace("trialConcurrency: 2", f"trialConcurrency: {big}")))
    assert issue.path == "trialConcurrency" and len(issue.message) < 200


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("trialConcurrency", "1000000000000", "at most 10000"),
        ("trialConcurrency", "10001", "at most 10000"),
        ("maxTrialNumber", "99999999999999999999", "at most 999999999"),
        ("maxExperimentDuration", "3651d", "at most 315360000s"),
        ("maxTrialDuration", "99999999999999h", "at most 315360000s"),
        ("trialGpuNumber", "100000", "at most 1024"),
    ],
)
def test_huge_limits_are_refused(tmp_path: Path, key: str, value: str, fragment: str) -> None:
    base(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_key(key, value)))
    (issue,) = [i for i in info.value.issues if i.path == key]
    assert fragment in issue.message
    assert issue.hint and key in issue.hint


def test_limits_at_the_bound_are_accepted(tmp_path: Path) -> None:
    base(tmp_path)
    extra = "maxTrialNumber: 999999999\nmaxExperimentDuration: 3650d\nmaxTrialDuration: 3650d\n"
    cfg = load_config(write(tmp_path, VALID_TEXT.replace("trialConcurrency: 2", "trialConcurrency: 10000") + extra))
    assert cfg.config.trial_concurrency == 10000 and cfg.config.max_experiment_duration == 3650 * 86400


def test_files_larger_than_the_limit_are_not_read(tmp_path: Path) -> None:
    path = write(tmp_path, VALID_TEXT)
    with open(path, "r+b") as f:
        f.truncate(33 * 1024 * 1024)  # sparse: the old loader read and scanned all of it
    issue = _one_issue(path)
    assert "larger than 32 MiB" in issue.message


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_bytes(VALID_TEXT.encode() + "experimentName: caf\u00e9\n".encode("latin-1"))
    issue = _one_issue(path)
    assert "is not UTF-8 text" in issue.message and "line 6" in issue.message


@needs_space
def test_search_space_file_with_duplicate_keys_or_deep_nesting(tmp_path: Path) -> None:
    base(tmp_path)
    cfg = write(tmp_path, VALID_TEXT.replace("searchSpace: {x: {_type: choice, _value: [1, 2, 3]}}",
                                             "searchSpaceFile: space.json"))
    (tmp_path / "space.json").write_text('{"x": {"_type": "choice", "_value": [1]}, "x": {"_type": "uniform"}}')
    issue = _one_issue(cfg)
    assert issue.path == "searchSpaceFile" and "duplicate key 'x'" in issue.message
    spec = '{"_type": "choice", "_value": [{"_name": "leaf"}]}'
    for i in range(2000):
        spec = f'{{"_type": "choice", "_value": [{{"_name": "n{i}", "x": {spec}}}]}}'
    (tmp_path / "space.json").write_text(f'{{"x": {spec}}}')
    out = _load_in_subprocess(cfg)
    assert "searchSpaceFile" in out and "nested deeper than 100 levels" in out


# --------------------------------------------------------------------------------------------------
# The tuner's and the assessor's optimize_mode

V1_DIRECTIONS = """\
trialConcurrency: 1
trainingServicePlatform: local
searchSpacePath: space.json
tuner:
  builtinTunerName: {tuner}
{tuner_args}assessor:
  builtinAssessorName: Medianstop
  classArgs:
    optimize_mode: minimize
trial:
  command: python3 trial.py
  codeDir: .
"""


def test_v1_assessor_mode_with_a_silent_tuner_is_warned_and_given_to_the_tuner(tmp_path: Path) -> None:
    (tmp_path / "space.json").write_text('{"x": {"_type": "uniform", "_value": [0, 1]}}')
    loaded = load_config(write(tmp_path, V1_DIRECTIONS.format(tuner="Evolution", tuner_args="")))
    assert loaded.format == "v1"
    [warning] = [w for w in loaded.warnings if "optimize_mode" in w]
    assert warning.startswith("tuner.classArgs.optimize_mode is not set and assessor.classArgs.optimize_mode is "
                              "minimize: the tuner uses minimize too, not its default maximize"), warning
    assert loaded.config.tuner.class_args == {"optimize_mode": "minimize"}  # the experiment minimizes throughout
    # a tuner whose own default agrees (TPE minimizes) needs nothing
    agreed = load_config(write(tmp_path, V1_DIRECTIONS.format(tuner="TPE", tuner_args="")))
    assert not any("optimize_mode" in w for w in agreed.warnings) and agreed.config.tuner.class_args == {}
    # both stated and different: warned, each kept as written
    both = load_config(write(tmp_path, V1_DIRECTIONS.format(
        tuner="Evolution", tuner_args="  classArgs:\n    optimize_mode: maximize\n")))
    [warning] = [w for w in both.warnings if "optimize_mode" in w]
    assert warning.startswith("assessor.classArgs.optimize_mode is minimize but tuner.classArgs.optimize_mode is "
                              "maximize"), warning
    assert both.config.tuner.class_args == {"optimize_mode": "maximize"}


@pytest.mark.parametrize("style", ["camel", "snake"])
def test_v2_assessor_mode_with_a_silent_tuner_names_the_fields_as_written(tmp_path: Path, style: str) -> None:
    args = "classArgs" if style == "camel" else "class_args"
    data = {"searchSpace": dict(SPACE), "trialCommand": "python3 main.py", "trialConcurrency": 1,
            "tuner": {"name": "Random"}, "assessor": {"name": "Medianstop", args: {"optimize_mode": "minimize"}},
            "trainingService": {"platform": "local"}}
    if style == "snake":
        data = {to_snake(k): v for k, v in data.items()}
    loaded = parse_config(data, tmp_path)
    [warning] = [w for w in loaded.warnings if "optimize_mode" in w]
    assert warning.startswith(f"tuner.{args}.optimize_mode is not set and assessor.{args}.optimize_mode is minimize"), \
        warning
    assert loaded.config.tuner.class_args == {"optimize_mode": "minimize"}
