"""A corpus of malformed and hostile configs, each through the real CLI entry point (``nnix create``).

Every one must give exit code 2, a message that names the file and the field (or what is wrong with the
file), no traceback, and a message of bounded size. Most run in-process through ``nnix.cli.main.main``
(fast); the ones that hung or blew the stack in older versions run in a real subprocess with a deadline.
Nothing is ever started: ``nnix.host.build.create`` is replaced by a function that fails the test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

VALID = textwrap.dedent(
    """\
    searchSpace:
      lr: {_type: loguniform, _value: [0.0001, 0.1]}
      opt: {_type: choice, _value: [sgd, adam]}
    trialCommand: python3 main.py
    trialConcurrency: 2
    maxTrialNumber: 4
    tuner: {name: Random}
    trainingService: {platform: local}
    """
)


def setting(key: str, value: str) -> str:
    """VALID with the top-level ``key`` set to ``value`` (YAML text), replacing the line if present."""
    lines = [line for line in VALID.splitlines() if not line.startswith(f"{key}:")]
    return "\n".join([*lines, f"{key}: {value}"]) + "\n"


def missing_space_file(d: Path) -> Path:
    """A config whose ``searchSpaceFile`` names a file that is not there."""
    space_file("s.json", "{}")(d)
    (d / "s.json").unlink()
    return d / "config.yml"


def with_space(space: str) -> str:
    """VALID with the inline search space replaced by ``space`` (YAML/JSON text)."""
    _, _, rest = VALID.partition("trialCommand:")
    return f"searchSpace: {space}\ntrialCommand:{rest}"


def space_file(name: str, content: str | bytes | None) -> Callable[[Path], Path]:
    """A config whose ``searchSpaceFile`` is ``name`` holding ``content`` (None: a directory there)."""

    def make(d: Path) -> Path:
        if content is None:
            (d / name).mkdir()
        else:
            (d / name).write_bytes(content.encode() if isinstance(content, str) else content)
        _, _, rest = VALID.partition("trialCommand:")
        cfg = d / "config.yml"
        cfg.write_text(f"searchSpaceFile: {name}\ntrialCommand:{rest}")
        return cfg

    return make


def laugh_lines(levels: int = 10) -> str:
    """Anchors ``l0``..``l9``: ``*l9`` stands for 9**10 values."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def laughs() -> str:
    return laugh_lines() + setting("trialConcurrency", "*l9")


def nested_choice_json(depth: int) -> str:
    spec = '{"_type": "choice", "_value": [{"_name": "leaf"}]}'
    for i in range(depth):
        spec = f'{{"_type": "choice", "_value": [{{"_name": "n{i}", "x": {spec}}}]}}'
    return f'{{"x": {spec}}}'


def nested_choice_yaml(depth: int) -> str:
    spec = "{_type: choice, _value: [{_name: leaf}]}"
    for i in range(depth - 1):
        spec = f"{{_type: choice, _value: [{{_name: n{i}, x: {spec}}}]}}"
    return f"{{x: {spec}}}"


def directory(d: Path) -> Path:
    (d / "config.yml").mkdir()
    return d / "config.yml"


def huge_file(d: Path) -> Path:
    path = d / "config.yml"
    path.write_text(VALID)
    with open(path, "r+b") as f:
        f.truncate(40 * 1024 * 1024)
    return path


def block_nesting(depth: int) -> str:
    return VALID + "experimentName:\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(depth)) + "  " * (
        depth + 1) + "leaf\n"


Content = str | bytes | Callable[[Path], Path]

# (id, content, fragments that must all appear in the output)
CORPUS: list[tuple[str, Content, list[str]]] = [
    # the file itself
    ("empty file", "", ["the file is empty"]),
    ("only comments", "# nothing here\n# at all\n", ["the file is empty"]),
    ("whitespace only", "   \n\n  \n", ["the file is empty"]),
    ("top-level list", "- trialCommand: x\n- trialConcurrency: 1\n", ["a config is a mapping"]),
    ("top-level scalar", "just some words\n", ["a config is a mapping"]),
    ("binary garbage", bytes(range(256)) * 16, ["is not UTF-8 text", "line"]),
    ("latin-1 text", setting("experimentName", "caf\u00e9").encode("latin-1"), ["is not UTF-8 text", "at line 9"]),
    ("NUL byte", setting("experimentName", "a\x00b"), ["not readable as YAML"]),
    ("a directory", directory, ["is a directory"]),
    ("40 MiB file", huge_file, ["larger than 32 MiB"]),
    ("UTF-8 BOM, then a bad field", "\ufeff" + setting("trialConcurrency", "many"), ["trialConcurrency"]),
    # YAML structure
    ("syntax error", VALID + "assessor:\n  name: Medianstop\n classArgs: {}\n", ["YAML syntax error at line 11"]),
    ("tab indentation", VALID + "tuner2:\n\tname: TPE\n", ["YAML syntax error at line"]),
    ("two documents", VALID + "---\n" + VALID, ["second YAML document", "line"]),
    ("python tag", setting("trialCommand", "!!python/object/apply:os.system [echo pwned]"), ["no Python tags"]),
    ("unhashable key", VALID + "? [a, b]\n: 1\n", ["YAML syntax error", "unhashable"]),
    ("duplicate top-level key", VALID + "trialConcurrency: 5\n", ["trialConcurrency", "duplicate key"]),
    ("duplicate nested key", setting("tuner", "{name: Random, name: TPE}"), ["tuner.name", "duplicate key"]),
    ("same key in two spellings", VALID + "trial_concurrency: 3\n", ["trial_concurrency", "same field"]),
    ("alias bomb", laughs(), ["more than 2,000,000 values", "line"]),
    ("alias inside its own anchor", setting("experimentName", "&a [*a]"), ["experimentName", "own anchor"]),
    ("undefined alias", setting("experimentName", "*nowhere"), ["names no anchor"]),
    ("anchor defined twice", VALID + "a: &x 1\nb: &x 2\n", ["defined twice"]),
    ("flow nesting 10000", setting("experimentName", "[" * 10000 + "]" * 10000), ["nested deeper than 100"]),
    ("block nesting 150", block_nesting(150), ["experimentName.k0.k1", "nested deeper than 100", "line"]),
    ("integer of 5000 digits", setting("trialConcurrency", "7" * 5000), ["more than 4000 digits", "at line 8"]),
    ("a megabyte of text as a count", setting("trialConcurrency", "y" * 1_000_000), ["trialConcurrency"]),
    ("a key of 1000 characters", VALID + "k" * 1000 + ": 1\n", ["unknown key", "kkk..."]),
    ("a key of 100k characters", VALID + "k" * 100_000 + ": 1\n", ["YAML syntax error at line 9"]),
    ("non-string key", VALID + "12: 1\n", ["a key must be a string"]),
    # values: types, numbers, units
    ("concurrency 10^12", setting("trialConcurrency", "1000000000000"), ["trialConcurrency", "at most 10000"]),
    ("concurrency 1e12", setting("trialConcurrency", "1e12"), ["trialConcurrency", "integer"]),
    ("concurrency NaN", setting("trialConcurrency", ".nan"), ["trialConcurrency"]),
    ("concurrency inf", setting("trialConcurrency", ".inf"), ["trialConcurrency"]),
    ("concurrency negative", setting("trialConcurrency", "-1"), ["trialConcurrency", "greater than 0"]),
    ("concurrency a word", setting("trialConcurrency", "two"), ["trialConcurrency", "integer"]),
    ("concurrency a date", setting("trialConcurrency", "2001-12-14"), ["trialConcurrency"]),
    ("impossible date", setting("trialConcurrency", "2001-13-45"), ["cannot read '2001-13-45'", "at line 8"]),
    ("a bool that is not", setting("debug", "!!bool maybe"), ["cannot read 'maybe' as a bool", "at line 9"]),
    ("a float that is not", setting("trialConcurrency", "!!float abc"), ["cannot read 'abc' as a float"]),
    ("concurrency binary", setting("trialConcurrency", "!!binary aGVsbG8="), ["trialConcurrency"]),
    ("trial number 10^20", setting("maxTrialNumber", "100000000000000000000"), ["maxTrialNumber", "at most"]),
    ("trial number float", setting("maxTrialNumber", "2.5"), ["maxTrialNumber"]),
    ("negative duration", setting("maxExperimentDuration", "-1h"), ["maxExperimentDuration"]),
    ("bad duration unit", setting("maxExperimentDuration", "3 fortnights"), ["maxExperimentDuration"]),
    ("duration of 10^8 days", setting("maxExperimentDuration", "100000000d"), ["maxExperimentDuration", "at most"]),
    ("trial duration NaN", setting("maxTrialDuration", ".nan"), ["maxTrialDuration"]),
    ("trial duration a list", setting("maxTrialDuration", "[1h]"), ["maxTrialDuration"]),
    ("gpu number 10^5", setting("trialGpuNumber", "100000"), ["trialGpuNumber", "at most 1024"]),
    ("empty command", setting("trialCommand", '""'), ["trialCommand", "must not be empty"]),
    ("missing code directory", setting("trialCodeDirectory", "/nonexistent/dir"), ["trialCodeDirectory"]),
    ("log level", setting("logLevel", "loud"), ["logLevel"]),
    ("debug as a string", setting("debug", '"yes"'), ["debug"]),
    # wrong shapes, unknown fields, v1/v2
    ("misspelled key", VALID.replace("trialConcurrency", "trialConcurency"), ["did you mean 'trialConcurrency'"]),
    ("tuner as a string", setting("tuner", "TPE"), ["tuner", "mapping"]),
    ("unknown tuner", setting("tuner", "{name: NoSuchTuner}"), ["tuner.name", "NoSuchTuner"]),
    ("tuner classArgs a list", setting("tuner", "{name: TPE, classArgs: [1, 2]}"), ["tuner.classArgs"]),
    ("no platform", setting("trainingService", "{gpuIndices: 0}"), ["trainingService.platform"]),
    ("unknown platform", setting("trainingService", "{platform: moon}"), ["trainingService.platform", "moon"]),
    ("service a number", setting("trainingService", "42"), ["trainingService"]),
    ("v1 with a v2 key", "authorName: x\ntrainingServicePlatform: local\ntrialConcurrency: 1\n"
     "searchSpacePath: s.json\ntrialCommand: python3 x.py\n", ["trialCommand", "v2 key"]),
    ("v1 with a bad trial section", "trainingServicePlatform: local\ntrialConcurrency: 1\n"
     "searchSpacePath: s.json\ntrial: 5\ntuner: {builtinTunerName: TPE}\n", ["trial"]),
    # search spaces
    ("space a number", with_space("5"), ["searchSpace"]),
    ("unknown _type", with_space("{x: {_type: uniformm, _value: [0, 1]}}"), ["searchSpace.x._type", "uniform"]),
    ("choice without options", with_space("{x: {_type: choice, _value: []}}"), ["searchSpace.x._value"]),
    ("NaN bound", with_space("{x: {_type: uniform, _value: [.nan, 1]}}"), ["searchSpace.x._value", "finite"]),
    ("choices nested 17 deep", with_space(nested_choice_yaml(17)), ["searchSpace.x._value", "nested more than 16"]),
    ("inline and file", VALID + "searchSpaceFile: s.json\n", ["searchSpaceFile", "not both"]),
    ("space file missing", missing_space_file,
     ["searchSpaceFile", "does not exist", "relative to the config file"]),
    ("space file a directory", space_file("s.json", None), ["searchSpaceFile", "is a directory"]),
    ("space file duplicate keys", space_file("s.json", '{"x": {"_type": "choice", "_value": [1]}, "x": {}}'),
     ["searchSpaceFile", "duplicate key 'x'"]),
    ("space file choices 2000 deep", space_file("s.json", nested_choice_json(2000)),
     ["searchSpaceFile", "nested deeper than 100"]),
    ("space file 1,000,001 options",
     space_file("s.json", '{"x": {"_type": "choice", "_value": [' + ",".join(["1"] * 1_000_001) + "]}}"),
     ["searchSpaceFile(s.json).x._value", "more than nnix's limit of 1,000,000"]),
    ("space file binary", space_file("s.json", bytes(range(256))), ["searchSpaceFile", "not UTF-8"]),
    ("space file NaN", space_file("s.json", '{"x": {"_type": "uniform", "_value": [NaN, 1]}}'), ["finite"]),
    ("space file neither JSON nor YAML", space_file("s.json", "{x: [}\n"), ["searchSpaceFile", "neither JSON"]),
    ("space file alias bomb", space_file("s.yml", laugh_lines() + "x: {_type: choice, _value: *l9}\n"),
     ["searchSpaceFile", "more than 2,000,000 values"]),
]


def materialise(content: Content, d: Path) -> Path:
    if callable(content):
        return content(d)
    path = d / "config.yml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def check(code: Any, output: str, path: Path, fragments: list[str]) -> None:
    assert code == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert str(path) in output, output[-3000:]
    for fragment in fragments:
        assert fragment in output, (fragment, output[-3000:])
    assert len(output) < 20_000, f"a {len(output)}-character message"


# These hung, blew the stack or crawled in older versions: a real process with a deadline.
SUBPROCESS = {"alias bomb", "flow nesting 10000", "space file choices 2000 deep", "space file alias bomb",
              "concurrency negative"}
IN_PROCESS = [c for c in CORPUS if c[0] not in SUBPROCESS]


@pytest.mark.parametrize(("case_id", "content", "fragments"), IN_PROCESS, ids=[c[0] for c in IN_PROCESS])
def test_malformed_config_gives_a_clear_error(
    case_id: str, content: Content, fragments: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import nnix.host.build
    from nnix.cli.main import main

    path = materialise(content, tmp_path)

    def started(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{case_id}: the config was accepted")

    monkeypatch.setattr(nnix.host.build, "create", started)
    monkeypatch.setattr(sys, "argv", ["nnix", "create", "--config", str(path)])
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    check(info.value.code, out.out + out.err, path, fragments)




@pytest.mark.parametrize("case_id", sorted(SUBPROCESS))  # the child exits before it would start anything
def test_malformed_config_through_a_real_process(case_id: str, tmp_path: Path) -> None:
    (_, content, fragments) = next(c for c in CORPUS if c[0] == case_id)
    path = materialise(content, tmp_path)
    r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "create", "--config", str(path)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    check(r.returncode, r.stdout + r.stderr, path, fragments)
