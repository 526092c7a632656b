"""What the CLI's quick commands import (issue 15: start-up). Timings are in bench/startup.py; here the imports
that made them slow are pinned: help needs no rich, pydantic or numpy; stopping an experiment needs no tuner,
config model, manager or web stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("rich", "numpy", "scipy", "pydantic", "yaml", "uvicorn", "fastapi", "starlette", "nnix.config",
         "nnix.core.manager", "nnix.tuners.base", "nnix.services.base", "nnix.api.app", "nnix.host.run")


def imported_by(argv: list[str], tmp_path: Path) -> tuple[int, str, list[str]]:
    code = (
        "import json, sys\n"
        f"sys.argv = {['nnix', *argv]!r}\n"
        "from nnix.cli.main import main\n"
        "code = 0\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    code = e.code if isinstance(e.code, int) else 1\n"
        f"print(json.dumps([code, sorted(m for m in {HEAVY!r} if m in sys.modules)]), file=sys.stderr)\n"
    )
    env = {"NNIX_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    code_, heavy = json.loads(out.stderr.strip().splitlines()[-1])
    return int(code_), out.stdout, list(heavy)


# a command's own help builds its parameters, which typer converts with pydantic (typer's import, not nnix's)
@pytest.mark.parametrize(("argv", "allowed"), [(["--help"], set()), (["trial", "--help"], {"pydantic"}),
                                               (["create", "--help"], {"pydantic"})])
def test_help_imports_nothing_heavy(argv: list[str], allowed: set[str], tmp_path: Path) -> None:
    code, out, heavy = imported_by(argv, tmp_path)
    assert code == 0 and "Usage:" in out
    assert set(heavy) <= allowed, heavy


def test_stop_imports_no_tuner_config_manager_or_web_stack(tmp_path: Path) -> None:
    code, _, heavy = imported_by(["stop", "nosuchexp"], tmp_path)
    assert code != 0  # no such experiment: a clear error, after the same imports as a real stop
    assert set(heavy) <= {"pydantic"}  # typer itself converts parameters with pydantic
