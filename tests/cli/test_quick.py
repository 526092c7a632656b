"""The verbs run without typer (``nnix --help``; plain spellings of ``trial ls``, ``stop``, ``create``, ``resume``
and ``view``: nnix.cli.main and nnix.cli.quick) print, to the byte, what typer prints for them, exit with its code,
and never import typer, pydantic or numpy (``create`` imports pydantic for the config; its run: test_startup.py);
any other spelling goes to typer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnix.cli.main import _quick
from tests.cli.test_main import _recorded as recorded

# the same program name for both (click reads it from argv[0]), the same error handling; typer's by force
QUICK = "import sys; sys.argv[0] = 'nnix'; from nnix.cli.main import main; main()"
TYPER = "import sys; sys.argv[0] = 'nnix'; from nnix.cli import main as m; m._quick = lambda args: None; m.main()"
PROBE = ("import json, sys, atexit; atexit.register(lambda: print(json.dumps(sorted(m for m in ('typer', 'click', "
         "'pydantic', 'numpy', 'urllib.request', 'nnix.services.rayhead') if m in sys.modules)), file=sys.stderr)); ")


def _recorded(tmp_path: Path) -> str:
    """A finished experiment, written straight into its store: a success, a failure, a second success."""
    return recorded(tmp_path, [0.5, None, 0.25], "maximize")


def _run(code: str, args: list[str], columns: str = "80") -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, r.stdout, r.stderr


# Many spellings through one Python: each case runs in a child forked from it (a fresh process state for each, as
# its own interpreter would have, without paying an interpreter start per case), its output in files
FORKED = """
import json, os, sys, tempfile, traceback
sys.argv[0] = "nnix"
from nnix.cli import main as m
if sys.argv[1] == "typer":
    m._quick = lambda args: None
    from nnix.cli import commands  # (imported once, before the forks)
results = []
for columns, *args in json.loads(sys.argv[2]):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        os.environ["COLUMNS"] = columns
        sys.argv[1:] = args
        code = 0
        try:
            m.main()
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr); code = 1
        except BaseException:
            traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    out.seek(0); err.seek(0)
    results.append([os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()])
print(json.dumps(results))
"""


def _forked(way: str, cases: list[list[str]]) -> list[tuple[int, str, str]]:
    env = {**os.environ, "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-c", FORKED, way, json.dumps(cases)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return [(int(c), str(o), str(e)) for c, o, e in json.loads(r.stdout)]


def test_quick_verbs_print_what_typer_prints(tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path)
    bad = tmp_path / "bad.yml"
    bad.write_text("trialCommand: python3 trial.py\ntrialConcurrency: -1\ntrainingService: {platform: local}\n")
    unreadable = tmp_path / "unreadable.yml"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    cases = [
        ["--help"], ["trial", "ls", exp_id], ["trial", "ls", exp_id[:3], "--tail", "1"],
        ["trial", "ls", exp_id, "--head=2", "--json"], ["trial", "ls", "--json", exp_id, "--tail", "0"],
        ["trial", "ls", exp_id, "--head", "1", "--tail", "1"], ["trial", "ls", "nosuch"], ["trial", "ls"],
        ["stop", exp_id], ["stop"], ["stop", "--all"], ["stop", "-a"], ["stop", "--port", "1"], ["stop", "all"],
        ["create", "--config", str(bad)], ["create", "-c", str(tmp_path / "missing.yml"), "--port", "0", "-f"],
        ["create", "--config", str(unreadable)], ["create"], ["resume", "nosuch", "-f"], ["view", "nosuch", "-p", "0"],
        ["resume", exp_id, "-e", str(tmp_path / "nowhere")], ["view", exp_id[:2], "--experiment-dir", str(tmp_path)],
    ]
    runs = [["80", *args] for args in cases] + [["200", "--help"], ["60", "--help"]]  # (at 60 typer prints it)
    quick, typer = _forked("quick", runs), _forked("typer", runs)
    for run, q, t in zip(runs, quick, typer, strict=True):
        assert q == t, run
        assert q[1] or q[2], run
    # one of them as its own program, as the user runs it: the same as forked
    assert _run(QUICK, cases[1]) == quick[1]


@pytest.mark.parametrize("args", [["--help"], ["trial", "ls", "ID", "--tail", "10"], ["trial", "ls", "ID"],
                                  ["stop", "ID"], ["stop", "--all"]])
def test_quick_verbs_import_neither_typer_nor_pydantic_nor_numpy_nor_http(args: list[str], tmp_path: Path) -> None:
    exp_id = _recorded(tmp_path)
    code, out, err = _run(PROBE + QUICK, [exp_id if a == "ID" else a for a in args])
    assert code == 0, err
    assert out.strip()
    assert json.loads(err.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("args", [
    ["trial", "ls", "a", "b"], ["trial", "ls", "--tail"], ["trial", "ls", "--tail", "-1"],
    ["trial", "ls", "--tail", "x"], ["trial", "ls", "--tail", "010"], ["trial", "ls", "--tail", "1", "--tail", "2"],
    ["trial", "ls", "--help"],
    ["trial", "ls", "--json=1"], ["trial", "ls", "-"], ["trial", "ls", "--", "ID"], ["trial", "ls", "--bogus"],
    ["stop", "-p8080"], ["stop", "--all=1"], ["stop", "-a", "--all"], ["stop", "--help"], ["stop", "-ap", "1"],
    ["--help", "trial"], ["--version"], ["trial"], ["create"], ["create", "-c", "x.yml", "extra"], [],
    ["create", "-c", "x.yml", "--config", "y.yml"], ["create", "-c", "-x.yml"],
    ["create", "-c", "x.yml", "--port", "p"], ["resume"], ["view", "ID", "-f"], ["view", "ID", "--debug"],
])
def test_other_spellings_go_to_typer(args: list[str]) -> None:
    assert _quick(args) is None


@pytest.mark.parametrize("args", [["trial", "ls"], ["trial", "ls", "ID", "--tail", "10"], ["trial", "ls", "--head=0"],
                                  ["trial", "ls", "--json", "ID"], ["stop"], ["stop", "ID", "-a"],
                                  ["stop", "--port=8080"], ["stop", "-p", "8080"], ["create", "-c", "x.yml"],
                                  ["create", "--config=x.yml", "--port", "0", "-f", "--id", "abc", "--host", "::1"],
                                  ["resume", "ID", "-f", "--port", "0"], ["view", "ID", "-e", "/tmp"]])
def test_plain_spellings_run_without_typer(args: list[str]) -> None:
    assert _quick(args) is not None


def test_the_kept_root_help_is_what_typer_prints() -> None:
    from nnix.cli.roothelp import TEXT, render

    assert render() == TEXT, "a top-level verb's help changed: rewrite the kept one with python -m nnix.cli.roothelp"
