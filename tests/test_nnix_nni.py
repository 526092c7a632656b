"""`import nni` in a trial script run by hand (`python3 trial.py`), where nnix is installed: a fresh virtual
environment laid out as pip installs nnix (`nnix-nni.pth` and `_nnix_nni.py` at the root of site-packages,
nnix itself on the path as an editable install puts it), its own interpreter, no PYTHONPATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

import nnix

SRC = Path(nnix.__file__).resolve().parents[1]

TRIAL = """import nni
from nni.utils import merge_parameter
params = merge_parameter({"lr": 0.5, "layers": 1}, nni.get_next_parameter())
print("params", params, flush=True)
for step in range(2):
    nni.report_intermediate_result(params["lr"] * (step + 1))
nni.report_final_result(params["lr"] * 3)
print("trial", nni.get_trial_id(), nni.get_experiment_id())
"""


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with nnix installed (no NNI): its interpreter."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root)
    (site,) = root.glob("lib/python*/site-packages")
    shutil.copy(SRC / "nnix-nni.pth", site)
    shutil.copy(SRC / "_nnix_nni.py", site)
    (site / "__editable__.nnix-0.1.0.pth").write_text(f"{SRC}\n")  # nnix itself, as `pip install -e .` does
    return root / "bin" / "python"


def _run(python: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NNI"))}
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**clean, **env})


def test_a_trial_script_run_by_hand_imports_nni(python: Path, tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text(TRIAL)
    r = _run(python, tmp_path, "trial.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "params {'lr': 0.5, 'layers': 1}",
        "[nnix] Intermediate result: 0.5 (index 0)",
        "[nnix] Intermediate result: 1.0 (index 1)",
        "[nnix] Final result: 1.5",
        "trial STANDALONE STANDALONE",
    ]
    warning = [ln for ln in r.stderr.splitlines() if "RuntimeWarning" in ln]
    assert len(warning) == 1 and "no nnix/NNI experiment is running" in warning[0]

    # parameters to try, from the environment or a file (an NNI parameter record works too)
    r = _run(python, tmp_path, "trial.py", NNIX_PARAMETERS='{"lr": 0.25}')
    assert r.returncode == 0 and "[nnix] Final result: 0.75" in r.stdout, r.stderr
    record = tmp_path / "p.json"
    record.write_text(json.dumps({"parameter_id": 3, "parameter_source": "algorithm", "parameters": {"lr": 1.0},
                                  "parameter_index": 0}))
    r = _run(python, tmp_path, "trial.py", NNIX_PARAMETERS_FILE=str(record))
    assert r.returncode == 0 and "[nnix] Final result: 3.0" in r.stdout, r.stderr


def test_a_real_nni_always_wins(python: Path, tmp_path: Path) -> None:
    (site,) = python.parent.parent.glob("lib/python*/site-packages")
    real = tmp_path / "elsewhere"
    (real / "nni").mkdir(parents=True)
    (real / "nni" / "__init__.py").write_text("REAL = True\n")
    code = "import nni; print(getattr(nni, 'REAL', False), nni.__file__)"
    # on PYTHONPATH, or even at the very end of sys.path (a .pth processed after nnix's): NNI is imported
    assert _run(python, tmp_path, "-c", code, PYTHONPATH=str(real)).stdout.startswith("True")
    late = site / "zzz-real-nni.pth"
    late.write_text(f"{real}\n")
    try:
        r = _run(python, tmp_path, "-c", "import sys; print(sys.path[-1])")
        assert r.stdout.strip() == str(real)  # really the last entry
        assert _run(python, tmp_path, "-c", code).stdout.startswith("True")
    finally:
        late.unlink()
    assert "nnix/trial/_shim/nni" in _run(python, tmp_path, "-c", code).stdout


def test_the_fallback_can_be_turned_off_and_costs_nothing_at_start(python: Path, tmp_path: Path) -> None:
    r = _run(python, tmp_path, "-c", "import nni", NNIX_NNI_FALLBACK="0")
    assert r.returncode != 0 and "No module named 'nni'" in r.stderr
    r = _run(python, tmp_path, "-c", "import sys; print(sorted(m for m in sys.modules if 'nni' in m), "
                                       "getattr(sys.meta_path[-1], '__name__', ''))")
    assert r.stdout.strip() == "[] NnixNniFallback"  # nothing is imported at interpreter start: a finder, last
