"""The suite's own guard rails: a hung test fails alone, with a traceback, instead of stalling CI."""

from __future__ import annotations

import pytest


def test_every_test_runs_under_a_timeout(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (the dev extra has it)"
    assert 0 < float(pytestconfig.getini("timeout")) <= 900
    assert pytestconfig.getini("timeout_method") == "signal"  # fails one test; "thread" would end the session


def test_the_readme_test_command_is_what_ci_runs(pytestconfig: pytest.Config) -> None:
    root = pytestconfig.rootpath
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = readme.split("Run the tests", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    steps = [s.strip() for s in block.replace("\\\n", " ").split("&&")]
    pytest_steps = [s for s in steps if s.startswith("python -m pytest")]
    assert len(pytest_steps) == 2, steps  # the unit suite in workers, then the lab tests in one process
    assert "-n 2" in pytest_steps[0] and '-m "not lab"' in pytest_steps[0] and pytest_steps[1].endswith("-m lab")
    ci = (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert [line for line in ci if line.startswith("python -m pytest")] == pytest_steps
    assert pytestconfig.pluginmanager.hasplugin("xdist"), "pytest-xdist is not installed (the dev extra has it)"
