"""`from nni.experiment import Experiment` where nnix is installed as the README says, and a real NNI 3.0
beside it: never shadowed, and nnix says so.

Two virtual environments, each kept under a fixed directory of /tmp so that reruns are fast:

* ``pip install -e`` of this tree into a fresh venv (its dependencies from the interpreter running the tests,
  through a ``.pth``, so nothing heavy is installed); when pip cannot build here (no package index), the
  layout an editable install produces is reproduced instead, and the test says so.
* ``pip install nni==3.0`` (its dependencies too, those not already there) into another; ~20 s the first
  time. When it cannot be installed (no network), that test is skipped, loudly.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import warnings
from pathlib import Path

import pytest

import nnix

SRC = Path(nnix.__file__).resolve().parents[1]
ROOT = SRC.parent
DEPS = sysconfig.get_paths()["purelib"]  # the dependencies of the interpreter running the tests

LAUNCHER = """import sys
from nni.experiment import (AlgorithmConfig, CustomAlgorithmConfig, Experiment, ExperimentConfig, LocalConfig,
                            RemoteConfig, RemoteMachineConfig)
import nni
print("nni from", nni.__file__)
experiment = Experiment('local')
experiment.config.trial_command = 'python3 trial.py'
experiment.config.trial_code_directory = '.'
experiment.config.search_space = {"x": {"_type": "choice", "_value": [1, 2]}}
experiment.config.tuner.name = 'GridSearch'
experiment.config.max_trial_number = 2
experiment.config.trial_concurrency = 2
print("RESULT", experiment.run(8080 if len(sys.argv) < 2 else int(sys.argv[1])), flush=True)
print("VALUES", sorted(r.value for r in experiment.export_data()), flush=True)
experiment.stop()
"""
TRIAL = "import nni\nnni.report_final_result(nni.get_next_parameter()['x'] * 10)\n"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _env(**extra: str) -> dict[str, str]:
    """This process's environment (NNIX_HOME included) without what would put nnix or nni on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "NNIX_NNI_FALLBACK") and not k.startswith("NNI_")}
    return {**env, **extra}


def _run(python: Path, cwd: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=_env(**env))


def _new_venv(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    venv.EnvBuilder(with_pip=False).create(root)
    (site,) = root.glob("lib/python*/site-packages")
    (site / "zz-deps.pth").write_text(f"{DEPS}\n")  # after nnix's own .pth files
    return site


def _pip(python: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
                          capture_output=True, text=True, timeout=timeout, env=_env())


@pytest.fixture(scope="module")
def installed() -> Path:
    """A venv where this tree is installed as the README says (``pip install -e .``): its interpreter."""
    files = [ROOT / "pyproject.toml", ROOT / "setup.py", SRC / "nnix-nni.pth", SRC / "_nnix_nni.py"]
    key = _key(str(ROOT), DEPS, *(f.read_text() for f in files if f.exists()))
    root = Path("/tmp") / f"nnix-test-install-venv-{key}"
    python = root / "bin" / "python"
    if (root / "ok").exists():
        return python
    site = _new_venv(root)
    try:
        r = _pip(python, "--no-deps", "-e", str(ROOT), timeout=300)
        failure = r.stderr[-2000:] if r.returncode else ""
    except subprocess.TimeoutExpired as e:
        failure = str(e)
    if failure:  # no package index for the build backend here: the layout `pip install -e .` makes
        warnings.warn(f"pip install -e could not run here; reproducing its layout instead: {failure}", stacklevel=1)
        shutil.copy(SRC / "nnix-nni.pth", site)
        shutil.copy(SRC / "_nnix_nni.py", site)
        (site / "__editable__.nnix-0.1.0.pth").write_text(f"{SRC}\n")
    (root / "ok").touch()
    return python


def test_after_pip_install_a_launcher_script_runs_nni_experiment(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "launch.py").write_text(LAUNCHER)
    (tmp_path / "trial.py").write_text(TRIAL)
    r = _run(installed, tmp_path, "launch.py", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"nni from {SRC}/nnix/trial/_shim/nni/__init__.py" in r.stdout  # nnix's nni: no NNI here
    assert "RESULT True" in r.stdout and "VALUES [10, 20]" in r.stdout, r.stdout + r.stderr
    version = _run(installed, tmp_path, "-m", "nnix.cli.main", "--version")
    assert version.stdout.strip() == nnix.__version__ and "note:" not in version.stderr  # nothing to say


def test_nnix_says_when_an_nni_package_is_importable(tmp_path: Path) -> None:
    """Without a download: any real ``nni`` package on the path (not nnix's shim) is named, with what to do."""
    fake = tmp_path / "site"
    (fake / "nni").mkdir(parents=True)
    (fake / "nni" / "__init__.py").write_text("")
    nnictl = tmp_path / "nnictl"  # nnix's nnictl, as pip would have written it over NNI's
    nnictl.write_text("from nnix.cli.main import main\nmain()\n")
    path = f"{SRC}{os.pathsep}{fake}"
    r = _run(Path(sys.executable), tmp_path, "-m", "nnix.cli.main", "--version", PYTHONPATH=path)
    assert r.stdout.strip() == nnix.__version__
    assert f"note: NNI is installed in this Python ({fake / 'nni'})" in r.stderr
    assert "from nnix.compat.nni_experiment import Experiment" in r.stderr and "pip uninstall nni" in r.stderr
    r = _run(Path(sys.executable), tmp_path, str(nnictl), "experiment", "list", PYTHONPATH=path)
    assert r.returncode == 0 and "note: NNI is installed" in r.stderr
    r = _run(Path(sys.executable), tmp_path, "-m", "nnix.cli.main", "--version", PYTHONPATH=str(SRC))
    assert "note:" not in r.stderr  # nnix's own nni (the fallback) is not "a real NNI"


@pytest.fixture(scope="module")
def with_nni30() -> Path:
    """A venv with NNI 3.0 really installed (pip, from the package index): its interpreter. nnix comes from
    this tree through PYTHONPATH, as an installed nnix would sit beside NNI."""
    root = Path("/tmp") / f"nnix-test-nni30-venv-{_key(DEPS)}"
    python = root / "bin" / "python"
    if not (root / "ok").exists():
        site = _new_venv(root)
        shutil.copy(SRC / "nnix-nni.pth", site)  # nnix's fallback finder is installed too
        try:
            r = _pip(python, "nni==3.0")
            failure = r.stderr[-1500:] if r.returncode else ""
        except subprocess.TimeoutExpired as e:
            failure = str(e)
        if failure:
            pytest.skip(f"!!! NNI 3.0 COULD NOT BE INSTALLED HERE ({failure.strip()}) "
                        "— the real-NNI test did NOT run !!!")
        (root / "ok").touch()
    return python


def test_a_real_nni_30_is_never_shadowed_and_nnix_says_so(with_nni30: Path, tmp_path: Path) -> None:
    src = str(SRC)
    # what `import nni` / `from nni.experiment import Experiment` import here (found, not imported: NNI takes
    # seconds to import): NNI's package, although nnix's fallback finder is installed
    probe = ("import sys; from importlib.util import find_spec; from importlib.metadata import version; "
             "print(version('nni'), find_spec('nni').origin, getattr(sys.meta_path[-1], '__name__', '?'))")
    r = _run(with_nni30, tmp_path, "-c", probe, PYTHONPATH=src)
    assert r.returncode == 0, r.stderr
    found_version, nni_file, last_finder = r.stdout.split()
    assert found_version == "3.0" and nni_file.endswith("/site-packages/nni/__init__.py")
    assert last_finder == "NnixNniFallback" and "nni_experiment" not in nni_file
    r = _run(with_nni30, tmp_path, "-m", "nnix.cli.main", "--version", PYTHONPATH=src)
    assert r.stdout.strip() == nnix.__version__
    assert "note: NNI 3.0 is installed in this Python" in r.stderr
    assert "`from nni.experiment import Experiment` are NNI's own, not nnix's" in r.stderr
    assert "from nnix.compat.nni_experiment import Experiment" in r.stderr
    # nnix's launcher API still works there, by its own name; the trial gets nnix's nni, not NNI's
    script = LAUNCHER.replace("from nni.experiment import", "from nnix.compat.nni_experiment import")
    script = script.replace("import nni\n", "").replace('print("nni from", nni.__file__)\n', "")
    (tmp_path / "launch.py").write_text(script)
    (tmp_path / "trial.py").write_text("import nni, sys\nassert 'nnix' in nni.__file__, nni.__file__\n" + TRIAL)
    r = _run(with_nni30, tmp_path, "launch.py", "0", PYTHONPATH=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RESULT True" in r.stdout and "VALUES [10, 20]" in r.stdout, r.stdout + r.stderr
