"""The guide's example service (docs/writing-a-training-service.md, "Your own service, as a package") is real: the
file docs/examples/nnix_myengine.py is the guide's text, and installed as a third-party package (a dist-info
directory with the guide's entry points, in a fresh process) it passes the training-service contract and runs a
whole experiment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "writing-a-training-service.md"
EXAMPLE = REPO / "docs" / "examples" / "nnix_myengine.py"

EXPERIMENT = '''

def test_an_experiment_runs_on_myengine(tmp_path):
    from nnix.model.status import ExperimentStatus, TrialStatus
    from nnix.testing.experiments import make_experiment, run_experiment

    (tmp_path / "trial.py").write_text("import nni\\np = nni.get_next_parameter()\\n"
                                       "nni.report_intermediate_result(1)\\nnni.report_final_result(p['x'])\\n")
    _, d = make_experiment(tmp_path, searchSpace={"x": {"_type": "choice", "_value": [1, 2, 3]}},
                           trialCommand=f"{sys.executable} trial.py", trialConcurrency=2,
                           tuner={"name": "GridSearch"}, trainingService={"platform": "myengine", "idleTimeout": 5})
    st = run_experiment(d, timeout=120)
    assert st.status is ExperimentStatus.DONE
    assert sorted(t.final_value for t in st.trials.values()) == [1, 2, 3]
    assert all(t.status is TrialStatus.SUCCEEDED and len(t.intermediate) == 1 for t in st.trials.values())
    assert (d / "myengine").is_dir()  # the launcher's work directory, under the experiment
'''


def _section(text: str) -> str:
    start = text.index("## Your own service, as a package")
    return text[start:text.index("\n## ", start + 1)]


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def test_the_guide_shows_the_example_file_exactly() -> None:
    section = _section(GUIDE.read_text(encoding="utf-8"))
    module = [b for b in _blocks(section, "python") if "class MyEngineLauncher" in b]
    assert module == [EXAMPLE.read_text(encoding="utf-8")]


def test_the_guide_example_installed_as_a_package_passes_the_contract_and_runs_an_experiment(tmp_path: Path) -> None:
    section = _section(GUIDE.read_text(encoding="utf-8"))
    (toml,) = _blocks(section, "toml")
    (contract,) = [b for b in _blocks(section, "python") if "ServiceContract" in b]
    # the package: its module and its metadata, with the entry points of the guide's pyproject.toml
    site = tmp_path / "site"
    site.mkdir()
    (site / "nnix_myengine.py").write_text(EXAMPLE.read_text(encoding="utf-8"))
    dist = site / "nnix_myengine-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nnix-myengine\nVersion: 1.0\n")
    entry_points = re.sub(r'\[project\.entry-points\."([^"]+)"\]', r"[\1]", toml)
    assert "[nnix.services]" in entry_points and "[nnix.training_services]" in entry_points
    (dist / "entry_points.txt").write_text(entry_points.replace(" = ", "=").replace('"', ""))
    # the guide's test module, plus an experiment end to end
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_myengine.py").write_text("import sys\n\n" + contract + textwrap.dedent(EXPERIMENT))
    (tests / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(site)]), "NNIX_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", str(tests)], cwd=tests, env=env,
                          capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\b5 passed, 1 skipped\b", proc.stdout), proc.stdout[-2000:]  # busy: no capacity limit
