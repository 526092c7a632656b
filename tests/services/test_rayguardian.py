"""The Ray guardian as the actor runs it (``python -c <source>``), without Ray: starts the agent, reports it,
ends it and its trials when told to, and reports an agent that cannot start."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from nnix.services import rayguardian
from nnix.services.ray import _GUARDIAN
from nnix.testing import wait_until


def _start(tmp_path: Path, argv: list[str], grace: float = 0.5) -> tuple[int, int, Path]:
    """Run the guardian the way the actor does; its control fd's writing end and its status fd's reading end."""
    ctl_r, ctl_w = os.pipe()
    st_r, st_w = os.pipe()
    log = tmp_path / "agent.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen([sys.executable, "-c", _GUARDIAN, str(ctl_r), str(st_w), str(grace), *argv],
                                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                pass_fds=(ctl_r, st_w), start_new_session=True)
    os.close(ctl_r)
    os.close(st_w)
    assert proc.wait(30) == 0  # the first process forks the guardian and exits at once
    return ctl_w, st_r, log


def _line(fd: int, timeout: float = 30.0) -> dict[str, object]:
    """The guardian's next status line (within ``timeout`` seconds)."""
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no status line from the guardian within {timeout:g} s (so far {line!r})"
        chunk = os.read(fd, 1)
        assert chunk, f"the guardian closed its status pipe after {line!r}"
        line += chunk
    out: dict[str, object] = json.loads(line)
    return out


def test_the_shipped_program_is_the_module() -> None:
    assert Path(rayguardian.__file__).read_text(encoding="utf-8") == _GUARDIAN
    assert 'if __name__ == "__main__":' in _GUARDIAN and "import nnix" not in _GUARDIAN  # stdlib only


def test_a_stop_request_ends_the_agent_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    agent = f"import os, subprocess, time; p = subprocess.Popen(['sleep', '60']); open({str(pidfile)!r}, 'w')" \
            ".write(str(p.pid)); time.sleep(60)"
    ctl, st, log = _start(tmp_path, [sys.executable, "-c", agent])
    try:
        first = _line(st)
        assert isinstance(first["agent"], int) and isinstance(first["pid"], int)
        child = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), 30, "the agent's child"))
        os.write(ctl, b"stop")
        last = _line(st)
        assert last["why"] == "stop requested" and last["status"] is not None  # reaped: killed by a signal
        assert not rayguardian.alive(first["agent"]) and not rayguardian.alive(child)
        assert "stopping the agent and its trials" in log.read_text()
    finally:
        os.close(ctl)
        os.close(st)


def test_an_agent_that_cannot_start_is_reported(tmp_path: Path) -> None:
    ctl, st, log = _start(tmp_path, [str(tmp_path / "no-such-agent")])
    try:
        first = _line(st)
        assert "cannot run" in str(first["error"])
        assert "nnix guardian: cannot run" in log.read_text()
    finally:
        os.close(ctl)
        os.close(st)
