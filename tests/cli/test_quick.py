"""The verbs that must start fast (``nnix --help``, ``trial ls``, ``stop``, ``create``, ``resume``, ``view``: read by
nnix.cli.parse from the declarations, run from nnix.cli.quick) never import typer, pydantic, numpy nor the HTTP client
(``create`` imports pydantic for the config; its run: test_startup.py), and print what users read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_main import _recorded as recorded

QUICK = "import sys; sys.argv[0] = 'nnix'; from nnix.cli.main import main; main()"
PROBE = ("import json, sys, atexit; atexit.register(lambda: print(json.dumps(sorted(m for m in ('typer', 'click', "
         "'pydantic', 'numpy', 'urllib.request', 'nnix.services.rayhead') if m in sys.modules)), file=sys.stderr)); ")


def _recorded(tmp_path: Path) -> str:
    """A finished experiment, written straight into its store: a success, a failure, a second success."""
    return recorded(tmp_path, [0.5, None, 0.25], "maximize")


def _run(code: str, args: list[str], columns: str = "80") -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("args", [["--help"], ["trial", "ls", "ID", "--tail", "10"], ["trial", "ls", "ID"],
                                  ["stop", "ID"], ["stop", "--all"], ["trial", "ls", "--help"], ["--version"]])
def test_quick_verbs_import_neither_typer_nor_pydantic_nor_numpy_nor_http(args: list[str], tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path)
    code, out, err = _run(PROBE + QUICK, [exp_id if a == "ID" else a for a in args])
    assert code == 0, err
    assert out.strip()
    assert json.loads(err.strip().splitlines()[-1]) == []


def test_trial_ls_and_stop_print_what_users_read(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path)
    code, out, err = _run(QUICK, ["trial", "ls", exp_id[:3], "--tail", "1"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"experiment {exp_id} (maximize)"
    assert lines[1].split() == ["trial", "no.", "status", "start", "end", "final", "parameters", "reason"]
    assert len(lines) == 3 and lines[2].startswith("tr002 ") and " 0.25 " in lines[2]  # the worst success
    code, out, err = _run(QUICK, ["trial", "ls", exp_id, "--head", "1", "--tail", "1"])
    assert (code, out) == (1, "") and "--head and --tail are mutually exclusive" in err
    code, out, err = _run(QUICK, ["stop", exp_id])
    assert (code, err) == (0, "") and out == f"experiment {exp_id} is not running (DONE; no manager serves it)\n"
    code, out, err = _run(QUICK, ["stop", "all"])
    assert code == 1 and "use `nnix stop --all`" in err
