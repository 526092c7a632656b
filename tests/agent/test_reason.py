"""A trial's failure reason from real stderr: each case runs a real program and reads what it printed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nnix.agent.reason import exception_line, exit_reason, read_tail, signal_name

# A dataset download that fails deep in a call chain while a background thread, still fetching, prints
# its own `<urlopen error ...>` after the traceback (what misled the old "last stderr line" reason).
DOWNLOAD_FAILURE = """
import sys, threading, urllib.error, urllib.request

MIRRORS = ["http://127.0.0.1:9/mnist/", "http://127.0.0.1:9/mirror/"]

def fetch(url):
    return urllib.request.urlopen(url, timeout=5)

def prefetch_test_set():
    threading.main_thread().join()
    try:
        fetch(MIRRORS[0] + "t10k-images-idx3-ubyte.gz")
    except urllib.error.URLError as error:
        print(f"Failed to download (trying next):\\n{error}", file=sys.stderr)

def download(filename):
    for mirror in MIRRORS:
        try:
            fetch(mirror + filename)
        except urllib.error.URLError as error:
            print(f"Failed to download (trying next):\\n{error}", file=sys.stderr)
            continue
        break
    else:
        raise RuntimeError(f"Error downloading {filename}")

class MNIST:
    def __init__(self, root):
        download("train-images-idx3-ubyte.gz")

def main():
    threading.Thread(target=prefetch_test_set).start()
    MNIST("data")

main()
"""


def run(tmp_path: Path, code: str, shell: bool = False) -> tuple[int, str]:
    script = tmp_path / "trial.py"
    script.write_text(textwrap.dedent(code))
    # shell: as nnix runs trials, through bash, so that a signal shows as exit code 128 + N
    cmd = ["bash", "-c", f"({sys.executable} {script}); exit $?"] if shell else [sys.executable, str(script)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return p.returncode, p.stderr


def test_download_failure_deep_in_a_traceback_with_noise_after_it(tmp_path: Path) -> None:
    code, err = run(tmp_path, DOWNLOAD_FAILURE)
    assert err.strip().splitlines()[-1].startswith("<urlopen error")  # the noise really comes last
    assert exit_reason(code, None, err) == "RuntimeError: Error downloading train-images-idx3-ubyte.gz (exit code 1)"


def test_chained_exceptions_give_the_final_one(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        import json
        def load(text):
            try:
                return json.loads(text)
            except ValueError as e:
                raise RuntimeError("config.json is not valid JSON") from e
        try:
            load("{")
        except RuntimeError:
            {}["missing"]
    """)
    assert "direct cause" in err and "During handling" in err
    assert exit_reason(code, None, err) == "KeyError: 'missing' (exit code 1)"


def test_multi_line_message_keeps_its_first_line(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        raise ValueError("bad hyper-parameters:\\n  lr: must be > 0\\n  batch_size: must be an int")
    """)
    assert exit_reason(code, None, err) == "ValueError: bad hyper-parameters: (exit code 1)"


def test_progress_bar_and_carriage_returns_after_the_traceback(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        import atexit, sys
        def bar():
            for i in range(0, 101, 25):
                sys.stderr.write(f"\\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100 [00:01<00:00, 90.1it/s]")
            sys.stderr.write("\\n")
        atexit.register(bar)
        import torch_missing_module
    """)
    assert "100%|" in err.splitlines()[-1]
    assert exit_reason(code, None, err) == "ModuleNotFoundError: No module named 'torch_missing_module' (exit code 1)"


def test_bare_assertion_names_the_failing_line(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        def check(acc):
            assert acc > 0.5
        check(0.1)
    """)
    assert exit_reason(code, None, err) == "AssertionError (trial.py, line 3: assert acc > 0.5) (exit code 1)"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_exception_group(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        raise ExceptionGroup("2 workers failed", [ValueError("worker 0: bad shard"), OSError("worker 1: disk full")])
    """)
    reason = exit_reason(code, None, err)
    assert reason == "ExceptionGroup: 2 workers failed (2 sub-exceptions) (exit code 1)"


def test_sys_exit_with_a_message_and_a_plain_exit_code(tmp_path: Path) -> None:
    code, err = run(tmp_path, "import sys\nsys.exit('error: no GPU visible to this trial')\n")
    assert exit_reason(code, None, err) == "error: no GPU visible to this trial (exit code 1)"
    code, err = run(tmp_path, "import sys\nsys.exit(3)\n")
    assert exit_reason(code, None, err) == "exit code 3 (nothing on stderr)"


def test_non_python_program_gives_its_last_lines(tmp_path: Path) -> None:
    p = subprocess.run(["bash", "-c", "echo 'loading data' >&2; ls /nonexistent-nnix-dir"],
                       capture_output=True, text=True)
    reason = exit_reason(p.returncode, None, p.stderr)
    assert reason.startswith("ls: cannot access") and reason.endswith(f"(exit code {p.returncode})")
    p = subprocess.run(["bash", "-c", "echo 'step 1 done' >&2; echo 'OOM' >&2; exit 4"], capture_output=True, text=True)
    assert exit_reason(p.returncode, None, p.stderr) == "step 1 done | OOM (exit code 4)"


def test_killed_by_a_signal_is_named_and_bash_noise_dropped(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        import os, signal, sys
        print("epoch 3/10", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """, shell=True)
    assert code == 137 and "Killed" in err
    assert exit_reason(code, None, err) == "epoch 3/10 (killed by SIGKILL, exit code 137)"
    assert exit_reason(137, None, "") == "killed by SIGKILL, exit code 137"
    for report in ("bash: line 1:   812 Killed  python3 t.py", "/bin/bash: line 1: 12345 Killed  python3 t.py",
                   "bash: 4321 Segmentation fault      (core dumped) ./a.out"):  # short and long pids alike
        assert exit_reason(137, None, f"epoch 3/10\n{report}\n") == "epoch 3/10 (killed by SIGKILL, exit code 137)"
    assert exit_reason(None, signal.SIGSEGV, "") == "killed by SIGSEGV"
    assert signal_name(9) == "SIGKILL" and signal_name(200) == "signal 200"


def test_traceback_then_killed(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        import os, signal
        try:
            raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        finally:
            import traceback, sys
            traceback.print_exc()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """, shell=True)
    reason = exit_reason(code, None, err)
    assert reason.startswith("MemoryError: CUDA out of memory.") and "SIGKILL" in reason


def test_every_line_tagged_by_a_launcher(tmp_path: Path) -> None:
    code, err = run(tmp_path, """
        import subprocess, sys
        child = subprocess.run([sys.executable, "-c", "import json; json.loads('{')"], capture_output=True, text=True)
        for line in child.stderr.splitlines():
            print(f"[rank0]: {line}", file=sys.stderr)
        print("[rank1]: worker exiting", file=sys.stderr)
        sys.exit(child.returncode)
    """)
    assert exit_reason(code, None, err).startswith("json.decoder.JSONDecodeError: Expecting property name enclosed")


def test_environment_message_and_unknown_exit() -> None:
    assert exit_reason(None, None, "", "host w1 lost") == "host w1 lost"
    assert "unknown" in exit_reason(None, None, "")
    assert exit_reason(0, None, "Traceback (most recent call last):\nValueError: x") == ""


def test_untrusted_text_never_breaks_it() -> None:
    for text in ["", "\x00\xff" * 100, "Traceback (most recent call last):", "Traceback (most recent call last):\n  x",
                 "\r\r\r", "\x1b[31mError\x1b[0m: red", "a" * 100_000, "Traceback (most recent call last):\n\n\n"]:
        out = exit_reason(1, None, text)
        assert isinstance(out, str) and len(out) <= 400 and "\n" not in out
    assert exit_reason(1, None, "\x1b[31mfatal: bad input\x1b[0m") == "fatal: bad input (exit code 1)"
    assert exception_line("no traceback here") is None


def test_read_tail_starts_at_a_line_boundary(tmp_path: Path) -> None:
    f = tmp_path / "trial.stderr"
    f.write_text("x" * 50_000 + "\nTraceback (most recent call last):\n  File \"a.py\", line 1\nOSError: disk full\n")
    tail = read_tail(f, 1000)
    assert tail.startswith("Traceback") and exit_reason(1, None, tail) == "OSError: disk full (exit code 1)"
    assert read_tail(tmp_path / "missing") == ""
