"""The trial SDK (nnix.trial) and the ``nni`` shim, in-process and through real trial subprocesses."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnix.trial as sdk
from nnix.agent.channel import CHANNEL_ENV, MetricReader, write_parameter

RECORD = {
    "parameter_id": 7,
    "parameter_source": "algorithm",
    "parameters": {"lr": 0.01, "layers": 3, "opt": "adam"},
    "parameter_index": 0,
}

_ENV_VARS = (
    CHANNEL_ENV,
    "NNIX_NAN_POLICY",
    "NNIX_PARAMETER_TIMEOUT",
    "NNI_EXP_ID",
    "NNI_TRIAL_JOB_ID",
    "NNI_TRIAL_SEQ_ID",
    "NNI_OUTPUT_DIR",
    "NNI_PLATFORM",
    "NNIX_PARAMETERS",
    "NNIX_PARAMETERS_FILE",
)


@pytest.fixture(autouse=True)
def fresh_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with a clean environment and a fresh SDK state object."""
    for name in _ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sdk, "_state", None)


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "channel"
    write_parameter(path, RECORD)
    monkeypatch.setenv(CHANNEL_ENV, str(path))
    return path


def _records(channel: Path) -> list[dict[str, Any]]:
    return [record for _, record in MetricReader(channel / sdk.METRICS_FILE).read_new()]


def _trial_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_VARS and k != "PYTHONPATH"}
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=30)


# --------------------------------------------------------------------------------------------------
# Real trial subprocesses through the ``nni`` shim


def test_nni_is_not_installed() -> None:
    # Real NNI is absent; what ``import nni`` finds in a script run by hand is nnix's shim, appended
    # last to sys.meta_path by nnix-nni.pth (so an installed NNI would still win).
    spec = importlib.util.find_spec("nni")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve() == (Path(sdk.shim_path()) / "nni" / "__init__.py").resolve()
    off = _run([sys.executable, "-c", "import nni"], _trial_env(NNIX_NNI_FALLBACK="0"), Path.cwd())
    assert off.returncode != 0 and "No module named 'nni'" in off.stderr


def test_shim_path_holds_the_nni_package() -> None:
    path = Path(sdk.shim_path())
    assert path.is_absolute()
    assert (path / "nni" / "__init__.py").is_file()
    assert (path / "nni" / "utils.py").is_file()
    assert (path / "nni" / "trial.py").is_file()


TRIAL_CODE = textwrap.dedent(
    """
    import json, math, sys
    import nni
    import nni.trial
    from nni.utils import merge_parameter

    params = nni.get_next_parameter()
    assert nni.get_current_parameter() is params
    assert nni.get_current_parameter("lr") == params["lr"]
    assert nni.trial.get_next_parameter is nni.get_next_parameter
    args = merge_parameter({"lr": 1.0, "layers": 1, "opt": "sgd", "other": None}, params)
    for i in range(3):
        nni.report_intermediate_result(0.25 * i)
    nni.report_final_result({"default": 0.9, "loss": 0.1, "curve": [1, 2], "note": "ok"})
    assert math.isnan(nni.load(nni.dump({"x": float("nan")}))["x"])
    assert nni.trace(len) is len and nni.trace(kw_only=False)(len) is len
    print(json.dumps({
        "params": params,
        "merged": args,
        "ids": [nni.get_experiment_id(), nni.get_trial_id(), nni.get_sequence_id()],
        "sdk": nni._sdk.__name__,
        "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("nnix", "nnix_trial", "nni")),
    }))
    """
)


def test_round_trip_through_a_real_trial(tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    output = tmp_path / "output"
    output.mkdir()
    write_parameter(channel, RECORD)
    env = _trial_env(
        NNIX_TRIAL_CHANNEL=str(channel),
        PYTHONPATH=sdk.shim_path(),
        NNI_EXP_ID="exp1",
        NNI_TRIAL_JOB_ID="trialA",
        NNI_TRIAL_SEQ_ID="5",
        NNI_OUTPUT_DIR=str(output),
    )
    # Without the shim (path or by-hand fallback), ``import nni`` fails: the shim is what makes NNI
    # code run.
    failed = _run([sys.executable, "-c", "import nni"], _trial_env(NNIX_NNI_FALLBACK="0"), tmp_path)
    assert failed.returncode != 0
    assert "No module named 'nni'" in failed.stderr

    done = _run([sys.executable, "-c", TRIAL_CODE], env, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["params"] == RECORD["parameters"]
    assert out["merged"] == {"lr": 0.01, "layers": 3, "opt": "adam", "other": None}
    assert out["ids"] == ["exp1", "trialA", 5]
    assert out["sdk"] == "nnix.trial"  # nnix is importable here: the shim uses it
    assert "nnix_trial" not in out["modules"]

    reader = MetricReader(channel / sdk.METRICS_FILE)
    got = reader.read_new()
    assert [i for i, _ in got] == [0, 1, 2, 3]
    assert [(r["type"], r["sequence"], r["value"]) for _, r in got] == [
        ("PERIODICAL", 0, 0.0),
        ("PERIODICAL", 1, 0.25),
        ("PERIODICAL", 2, 0.5),
        ("FINAL", 0, {"default": 0.9, "loss": 0.1, "curve": [1, 2], "note": "ok"}),
    ]
    assert all(abs(r["ts"] - time.time()) < 60 for _, r in got)
    assert reader.read_new() == []

    log = (output / "trial.log").read_text().splitlines()
    assert len(log) == 4
    assert log[0].endswith("] INFO Intermediate result: 0.0 (index 0)")
    assert log[3].endswith('] INFO Final result: {"default": 0.9, "loss": 0.1, "curve": [1, 2], "note": "ok"}')
    assert log[0].startswith("[") and log[0][20] == "]"
    time.strptime(log[0][1:20], "%Y-%m-%d %H:%M:%S")


ISOLATED_CODE = textwrap.dedent(
    """
    import importlib.util, json, sys
    assert importlib.util.find_spec("nnix") is None, "nnix must not be importable here"
    import nni
    from nni.utils import merge_parameter
    import nnix_trial
    assert nni._sdk is nnix_trial and nni.utils.merge_parameter is nnix_trial.utils.merge_parameter
    assert nni.trial.report_final_result is nnix_trial.report_final_result
    params = nni.get_next_parameter()
    nni.report_intermediate_result(1)
    nni.report_final_result(2.5)
    print(json.dumps({"params": params, "modules": sorted(m for m in sys.modules if m.startswith("nn"))}))
    """
)


def test_shim_works_where_nnix_is_not_installed(tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    write_parameter(channel, RECORD)
    env = _trial_env(NNIX_TRIAL_CHANNEL=str(channel), PYTHONPATH=sdk.shim_path())
    # -S: no site-packages, so the editable nnix install is invisible; cwd has no nnix either.
    done = _run([sys.executable, "-S", "-c", ISOLATED_CODE], env, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["params"] == RECORD["parameters"]
    assert out["modules"] == ["nni", "nni.trial", "nni.utils", "nnix_trial", "nnix_trial.utils"]
    assert [(r["type"], r["sequence"], r["value"]) for r in _records(channel)] == [
        ("PERIODICAL", 0, 1),
        ("FINAL", 0, 2.5),
    ]


def test_trial_gets_a_clear_error_for_a_string_metric(tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    write_parameter(channel, RECORD)
    env = _trial_env(NNIX_TRIAL_CHANNEL=str(channel), PYTHONPATH=sdk.shim_path())
    code = "import nni; nni.get_next_parameter(); nni.report_final_result('0.5')"
    done = _run([sys.executable, "-c", code], env, tmp_path)
    assert done.returncode == 1
    assert "TypeError: A metric must be an int or a float" in done.stderr
    assert "got '0.5' of type str" in done.stderr
    assert not (channel / sdk.METRICS_FILE).exists()


def _imported_modules(args: list[str], env: dict[str, str], cwd: Path) -> set[str]:
    done = _run([sys.executable, "-X", "importtime", *args], env, cwd)
    assert done.returncode == 0, done.stderr
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "imported package" not in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_import_pulls_only_stdlib_modules(tmp_path: Path) -> None:
    env = _trial_env()
    new = _imported_modules(["-c", "import nnix.trial"], env, tmp_path) - _imported_modules(
        ["-c", "pass"], env, tmp_path
    )
    assert "nnix.trial" in new
    foreign = {m for m in new if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "nnix"}
    assert foreign == set()
    assert not {"json", "logging"} & new  # json is imported on first use

    shim_env = _trial_env(PYTHONPATH=sdk.shim_path())
    new = _imported_modules(["-S", "-c", "import nni"], shim_env, tmp_path) - _imported_modules(
        ["-S", "-c", "pass"], shim_env, tmp_path
    )
    own = {"nni", "nnix", "nnix_trial"}
    foreign = {m for m in new if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in own}
    assert foreign == set()


# --------------------------------------------------------------------------------------------------
# In-process behaviour


def test_parameters_and_metrics_in_process(channel: Path) -> None:
    assert sdk.get_current_parameter() is None
    params = sdk.get_next_parameter()
    assert params == RECORD["parameters"]
    assert sdk.get_next_parameters() is params  # later calls return the same object
    assert sdk.get_current_parameter() is params
    assert sdk.get_current_parameter("opt") == "adam"
    sdk.report_intermediate_result(np.float32(0.5))
    sdk.report_intermediate_result(np.int64(3))
    sdk.report_intermediate_result(np.array(0.25))
    sdk.report_intermediate_result(Decimal("1.5"))
    sdk.report_final_result({"default": np.float64(0.75), "acc": np.float32(0.5), "n": [np.int32(1)]})
    records = _records(channel)
    assert [(r["type"], r["sequence"]) for r in records] == [
        ("PERIODICAL", 0),
        ("PERIODICAL", 1),
        ("PERIODICAL", 2),
        ("PERIODICAL", 3),
        ("FINAL", 0),
    ]
    values = [r["value"] for r in records]
    assert values == [0.5, 3.0, 0.25, 1.5, {"default": 0.75, "acc": 0.5, "n": [1.0]}]
    assert all(type(v) is float for v in values[:4])


def test_report_before_get_next_parameter_is_an_error(channel: Path) -> None:
    with pytest.raises(RuntimeError, match=r"report_final_result\(\) was called before get_next_parameter"):
        sdk.report_final_result(0.5)
    with pytest.raises(RuntimeError, match="report_intermediate_result"):
        sdk.report_intermediate_result(0.5)


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        ("0.5", "A metric must be an int or a float .*got '0.5' of type str"),
        (True, "got True of type bool"),
        (None, "got None of type NoneType"),
        ([0.5], r"got \[0.5\] of type list"),
        (1 + 2j, "got \\(1\\+2j\\) of type complex"),
        (np.array([0.5, 0.6]), r"shape \(2,\) \(only single values are accepted"),
        (np.bool_(True), "of type numpy.bool"),
        ({"loss": 0.5}, r"needs a numeric 'default' key; got a dict with keys \['loss'\]"),
        ({"default": "0.9"}, "'default' must be a number; got '0.9' of type str"),
        ({"default": None}, "'default' must be a number; got None"),
        ({"default": 0.5, "x": object()}, r"The metric \['x'\] is <object object"),
        ({"default": 0.5, "x": {"y": [b"raw"]}}, r"\['x'\]\['y'\]\[0\] is b'raw' of type bytes"),
        ({"default": 0.5, 3: 1}, "keys must be strings; got key 3 of type int"),
    ],
)
def test_invalid_metrics_are_rejected(channel: Path, metric: Any, message: str) -> None:
    sdk.get_next_parameter()
    with pytest.raises(TypeError, match=message) as info:
        sdk.report_intermediate_result(metric)
    assert (
        "numpy/torch scalar" in str(info.value)
        or "keys must be strings" in str(info.value)
        or ("cannot be recorded" in str(info.value))
    )
    assert not (channel / sdk.METRICS_FILE).exists()
    sdk.report_intermediate_result(0.5)
    assert [r["sequence"] for r in _records(channel)] == [0]  # a rejected report uses no sequence number


@pytest.mark.parametrize(
    "metric",
    [float("nan"), float("inf"), np.float32("-inf"), {"default": float("nan")}, {"default": 1, "x": [math.inf]}],
)
def test_non_finite_metrics_are_rejected_by_default(channel: Path, metric: Any) -> None:
    sdk.get_next_parameter()
    with pytest.raises(ValueError, match=r"not a finite number.*nanPolicy: allow"):
        sdk.report_final_result(metric)
    assert not (channel / sdk.METRICS_FILE).exists()


def test_non_finite_metrics_are_recorded_under_allow(channel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNIX_NAN_POLICY", "allow")
    sdk.get_next_parameter()
    sdk.report_intermediate_result(float("nan"))
    sdk.report_final_result({"default": float("-inf"), "x": float("inf")})
    raw = (channel / sdk.METRICS_FILE).read_text()
    assert '"value": NaN' in raw and '"default": -Infinity' in raw
    first, final = _records(channel)
    assert math.isnan(first["value"])
    assert final["value"] == {"default": -math.inf, "x": math.inf}


def test_invalid_nan_policy(channel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNIX_NAN_POLICY", "ignore")
    sdk.get_next_parameter()
    with pytest.raises(ValueError, match="NNIX_NAN_POLICY must be 'error' or 'allow', got 'ignore'"):
        sdk.report_final_result(0.5)


def test_oversized_metric_is_rejected(channel: Path) -> None:
    sdk.get_next_parameter()
    with pytest.raises(ValueError, match=r"the encoded metric is 1,\d{3},\d{3} bytes; the limit is 1,000,000"):
        sdk.report_final_result({"default": 0.5, "blob": "x" * 1_000_000})
    assert not (channel / sdk.METRICS_FILE).exists()
    sdk.report_final_result({"default": 0.5, "blob": "x" * 999_000})
    assert len(_records(channel)) == 1


def test_standalone(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNI_OUTPUT_DIR", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="no nnix/NNI experiment is running") as record:
        assert sdk.get_next_parameter() == {}
    assert record[0].filename == __file__  # the warning points at the caller
    assert sdk.get_next_parameter() == {}  # warns once
    assert sdk.get_current_parameter() == {}
    sdk.report_intermediate_result(0.5)
    sdk.report_intermediate_result(0.75)
    sdk.report_final_result({"default": 0.9})
    out = capsys.readouterr().out.splitlines()  # printed to stdout, as NNI's standalone mode does
    assert out == [
        "[nnix] Intermediate result: 0.5 (index 0)",
        "[nnix] Intermediate result: 0.75 (index 1)",
        '[nnix] Final result: {"default": 0.9}',
    ]
    assert (tmp_path / "trial.log").read_text().count(" INFO ") == 3


def test_standalone_reports_without_get_next_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    sdk.report_final_result(1)
    assert capsys.readouterr().out == "[nnix] Final result: 1\n"


def test_standalone_parameters_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNIX_PARAMETERS", '{"lr": 0.1, "layers": 2}')
    with pytest.warns(RuntimeWarning, match="returns the parameters of NNIX_PARAMETERS"):
        assert sdk.get_next_parameter() == {"lr": 0.1, "layers": 2}
    assert sdk.get_current_parameter("lr") == 0.1
    monkeypatch.setattr(sdk, "_state", None)
    monkeypatch.delenv("NNIX_PARAMETERS")
    record = tmp_path / "parameter.json"
    record.write_text(json.dumps(RECORD))  # an NNI parameter record: its parameters are taken
    monkeypatch.setenv("NNIX_PARAMETERS_FILE", str(record))
    with pytest.warns(RuntimeWarning, match="NNIX_PARAMETERS_FILE="):
        assert sdk.get_next_parameter() == RECORD["parameters"]


@pytest.mark.parametrize(("name", "value", "error"), [
    ("NNIX_PARAMETERS", "{lr: 1}", "NNIX_PARAMETERS is not valid JSON"),
    ("NNIX_PARAMETERS", "[1, 2]", "must be a JSON object of parameters"),
    ("NNIX_PARAMETERS_FILE", "/nonexistent/p.json", "NNIX_PARAMETERS_FILE: cannot read /nonexistent/p.json"),
])
def test_standalone_parameters_refused_clearly(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                               error: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=error):
        sdk.get_next_parameter()


def test_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (sdk.get_experiment_id(), sdk.get_trial_id(), sdk.get_sequence_id()) == ("STANDALONE", "STANDALONE", 0)
    monkeypatch.setenv("NNI_EXP_ID", "e1")
    monkeypatch.setenv("NNI_TRIAL_JOB_ID", "t1")
    monkeypatch.setenv("NNI_TRIAL_SEQ_ID", "12")
    assert (sdk.get_experiment_id(), sdk.get_trial_id(), sdk.get_sequence_id()) == ("e1", "t1", 12)
    monkeypatch.setenv("NNI_TRIAL_SEQ_ID", "x")
    assert sdk.get_sequence_id() == 0


def test_missing_parameter_file_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHANNEL_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setenv("NNIX_PARAMETER_TIMEOUT", "0.1")
    with pytest.raises(RuntimeError, match=r"no hyper-parameters after waiting 0.1 s for .*parameter.json"):
        sdk.get_next_parameter()


def test_parameter_file_written_after_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    channel = tmp_path / "channel"
    channel.mkdir()
    monkeypatch.setenv(CHANNEL_ENV, str(channel))
    writer = threading.Timer(0.15, write_parameter, args=(channel, RECORD))
    writer.start()
    try:
        assert sdk.get_next_parameter() == RECORD["parameters"]
    finally:
        writer.join()


def test_concurrent_reports_get_unique_sequences(channel: Path) -> None:
    sdk.get_next_parameter()

    def work(base: float) -> None:
        for i in range(50):
            sdk.report_intermediate_result({"default": base + i, "pad": "x" * 2000})

    threads = [threading.Thread(target=work, args=(t * 100.0,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = _records(channel)
    assert len(records) == 400
    assert sorted(r["sequence"] for r in records) == list(range(400))
