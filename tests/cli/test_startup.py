"""What the CLI's quick commands import (issue 15: start-up). Timings are in bench/startup.py; here the imports
that made them slow are pinned: help needs no rich, pydantic or numpy; stopping an experiment needs no tuner,
config model, manager or web stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("typer", "rich", "numpy", "scipy", "pydantic", "yaml", "uvicorn", "fastapi", "starlette", "nnix.config",
         "nnix.core.manager", "nnix.tuners.base", "nnix.services.base", "nnix.api.app", "nnix.host.run")


def imported_by(argv: list[str], tmp_path: Path, also: str = "None") -> tuple[int, str, Any]:
    """Run ``nnix ARGV`` in a fresh Python: its exit code, stdout and the HEAVY modules it imported (and, when
    ``also`` is given, ``[that list, eval(also)]`` afterwards)."""
    code = (
        "import json, sys\n"
        f"sys.argv = {['nnix', *argv]!r}\n"
        "from nnix.cli.main import main\n"
        "code = 0\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    code = e.code if isinstance(e.code, int) else 1\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        f"print(json.dumps([code, heavy if {also!r} == 'None' else [heavy, eval({also!r})]]), file=sys.stderr)\n"
    )
    env = {"NNIX_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.stderr.strip(), out.stdout
    code_, heavy = json.loads(out.stderr.strip().splitlines()[-1])
    return int(code_), out.stdout, heavy


# every page of help is made from the declarations (nnix.cli.spec), without typer or what a verb imports
@pytest.mark.parametrize("argv", [["--help"], ["trial", "--help"], ["create", "--help"],
                                  ["experiment", "list", "--help"]])
def test_help_imports_nothing_heavy(argv: list[str], tmp_path: Path) -> None:
    code, out, heavy = imported_by(argv, tmp_path)
    assert code == 0 and "Usage:" in out
    assert heavy == []


def test_listing_experiments_imports_nothing_heavy(tmp_path: Path) -> None:
    code, out, heavy = imported_by(["experiment", "list", "--all"], tmp_path)
    assert code == 0 and "no experiments" in out
    assert heavy == []  # (it needed typer, and through it pydantic)


def test_stop_imports_no_tuner_config_manager_or_web_stack(tmp_path: Path) -> None:
    code, _, heavy = imported_by(["stop", "nosuchexp"], tmp_path)
    assert code != 0  # no such experiment: a clear error, after the same imports as a real stop
    assert heavy == []  # (run without typer, which converts parameters with pydantic)


def one_trial_config(tmp_path: Path, tuner: str, space: dict[str, Any]) -> Path:
    """A one-trial experiment's config on the local platform (its trial reports 0.5)."""
    (tmp_path / "trial.py").write_text("import nni\nnni.get_next_parameter()\nnni.report_final_result(0.5)\n")
    config = {
        "searchSpace": space, "trialCommand": f"{sys.executable} trial.py", "trialCodeDirectory": str(tmp_path),
        "trialConcurrency": 1, "maxTrialNumber": 1, "tuner": {"name": tuner}, "trainingService": {"platform": "local"},
    }
    cfg = tmp_path / f"{tuner}.json"
    cfg.write_text(json.dumps(config))
    return cfg


def test_create_foreground_builds_only_what_the_experiment_uses(tmp_path: Path) -> None:
    """A grid search on the local platform, run to its end through the CLI: numpy is never imported (only
    tuners that draw import it), and of the platforms' config models only the local one is built."""
    cfg = one_trial_config(tmp_path, "GridSearch", {"x": {"_type": "choice", "_value": [1, 2]}})
    built_models = ("sorted(n for n, m in __import__('nnix.config.services', fromlist=['x'])"
                    ".BUILT_IN_PLATFORMS.items() if m.__pydantic_complete__)")
    exit_code, out, (heavy, built) = imported_by(["create", "--config", str(cfg), "--port", "0", "--foreground"],
                                                 tmp_path, built_models)
    assert exit_code == 0, out[-2000:]
    assert "DONE" in out and "1 SUCCEEDED" in out
    assert "numpy" not in heavy
    assert "typer" not in heavy  # (a plain `create` runs without it)
    assert built == ["local"]


@pytest.mark.parametrize("module", ["nnix.space", "nnix.tuners.base", "nnix.tuners.dedup", "nnix.tuners.gridsearch",
                                    "nnix.tuners.batch", "nnix.tuners.random", "nnix.core.manager", "nnix.host.build"])
def test_module_imports_no_numpy(module: str) -> None:
    code = f"import sys, {module}\nprint('numpy' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


LATE = ("uvicorn", "starlette", "nnix.api.app", "http.cookies", "nnix.client")  # not needed to start a trial

FIRST_TRIAL_PROBE = """
import gc, importlib.metadata as md, json, sys
scans = []
every = md.entry_points
def counted(**params):  # a scan of every installed distribution, each time
    if sys._getframe(1).f_globals.get("__name__", "").startswith("nnix"):
        scans.append(params.get("group", "*"))
    return every(**params)
md.entry_points = counted
import nnix.core.manager as manager
seen = {}
record = manager.ExperimentManager.record
def spy(self, *events):
    if not seen and any(type(e).__name__ == "TrialStarted" for e in events):  # the first trial's process runs
        seen.update(collector=gc.isenabled(), late=sorted(m for m in LATE if m in sys.modules), scans=list(scans))
    return record(self, *events)
manager.ExperimentManager.record = spy
import nnix.host.run
nnix.host.run.FIRST_TRIAL_WAIT = 300.0  # (a loaded machine: the web stack still waits for the first trial)
sys.argv = ARGV
from nnix.cli.main import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
print(json.dumps([code, seen, gc.isenabled()]), file=sys.stderr)
"""


def test_create_reaches_its_first_trial_without_the_web_stack_or_a_second_scan(tmp_path: Path) -> None:
    """Up to its first trial, a plain `create --foreground` imports nothing it does not use for that (the web stack
    and the REST client come after it), reads the installed distributions' entry points once (tuners, platforms
    and training services alike), and holds the garbage collector (resumed once the trial runs)."""
    cfg = one_trial_config(tmp_path, "Random", {"x": {"_type": "uniform", "_value": [0, 1]}})
    argv = ["nnix", "create", "--config", str(cfg), "--port", "0", "--foreground"]
    code = FIRST_TRIAL_PROBE.replace("LATE", repr(LATE)).replace("ARGV", repr(argv))
    env = {"NNIX_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.stderr.strip(), out.stdout
    exit_code, seen, collector_after = json.loads(out.stderr.strip().splitlines()[-1])
    assert exit_code == 0, out.stdout[-2000:]
    assert seen["late"] == []
    assert seen["scans"] == ["*"]  # one scan, shared by every group
    assert seen["collector"] is False and collector_after is True
