"""Testing Ctrl-C: a launcher that gets SIGINT as a terminal's foreground job does, and a gate that holds a
Python process at its interpreter's start, to press Ctrl-C at a moment that is otherwise a race.

:func:`foreground_job`: a command line that runs ``argv`` with SIGINT at its default action. A process started
with ``&`` from a script (a test suite run in the background, say) inherits SIGINT *ignored*, and Python then
installs no ``KeyboardInterrupt`` handler: Ctrl-C tests would hang there, as the launcher never sees it.

:func:`start_gate` writes a ``sitecustomize`` module into a directory: put that directory first on the
``PYTHONPATH`` of a process tree, and each Python process whose command line holds ``marker`` (e.g.
``nnix.host.daemon``, a manager daemon) writes its pid to ``<dir>/<marker>.pid`` and waits there until
``<dir>/open`` exists (or ``hold`` seconds have passed). The test then does what must work while such a
process is starting (a Ctrl-C in its launcher, say), and opens the gate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from nnix.home import pid_alive
from nnix.testing.waiting import wait_until

_FOREGROUND = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
               "os.execv(sys.argv[1], sys.argv[1:])")


def foreground_job(argv: Sequence[str]) -> list[str]:
    """``argv`` (its first item a path) started as a terminal's foreground job is: SIGINT at its default action
    whatever this process inherited (an ignored SIGINT survives ``exec``; a default one becomes Python's
    ``KeyboardInterrupt``). A small Python trampoline resets it, then ``exec`` runs ``argv`` (same pid)."""
    return [sys.executable, "-c", _FOREGROUND, *argv]


# What every gate's sitecustomize holds (this one's, nnix.testing.gates'): formatted into each, so no braces here.
GATE_HELPERS = '''
import os as _os
import time as _time


def _marked(marker):
    """Whether this process's command line holds ``marker`` (one whole argument)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return marker in f.read().split(b"\\0")
    except OSError:
        return False


def _arrived(here, pidfile):
    """This process's pid, written whole to ``here/pidfile``: it is at the gate."""
    tmp = _os.path.join(here, "%d.tmp" % _os.getpid())
    with open(tmp, "w") as f:
        f.write(str(_os.getpid()))
    _os.replace(tmp, _os.path.join(here, pidfile))


def _is_open(here, deadline):
    return _os.path.exists(_os.path.join(here, "open")) or _time.monotonic() >= deadline
'''

_SITECUSTOMIZE = '''"""nnix.testing.ctrlc: hold a process whose command line holds {marker!r} at its start."""
''' + GATE_HELPERS + '''

def _gate():
    if not _marked({marker!r}.encode()):
        return
    here = {here!r}
    _arrived(here, {pidfile!r})
    deadline = _time.monotonic() + {hold!r}
    while not _is_open(here, deadline):
        _time.sleep(0.02)


_gate()
'''


class StartGate:
    """The gate of :func:`start_gate`: where it is, the pid of the process it holds, how to open it."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.dir = directory
        self.pid_file = directory / f"{marker}.pid"

    def held_pid(self) -> int | None:
        """The pid of the process held (or once held) at the gate, None before one arrives."""
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None

    def open(self) -> None:
        (self.dir / "open").touch()


def start_gate(directory: Path, marker: str, hold: float = 120.0) -> StartGate:
    """Write the gate's ``sitecustomize.py`` into ``directory`` (created); see the module's docstring."""
    directory.mkdir(parents=True, exist_ok=True)
    pidfile = f"{marker}.pid"
    (directory / "sitecustomize.py").write_text(
        _SITECUSTOMIZE.format(marker=marker, here=str(directory.resolve()), pidfile=pidfile, hold=float(hold)))
    return StartGate(directory, marker)


def ctrl_c_at_the_gate(proc: subprocess.Popen[str], gate: StartGate, timeout: float = 120.0) -> tuple[str, str, bool]:
    """Wait until a process is held at ``gate``, press Ctrl-C in ``proc`` (SIGINT to its process group, as a
    terminal does: start it with ``start_new_session``) and wait for ``proc`` to end. Returns its output, its
    errors, and whether the held process was still alive once ``proc`` had ended. Afterwards, whatever
    happened, the gate is opened, and ``proc`` and the held process are killed if they still run."""
    held = None
    try:
        held = wait_until(gate.held_pid, 60.0, "a process held at the gate")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
        return out, err, pid_alive(held)
    finally:
        gate.open()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if held is not None and pid_alive(held):
            os.kill(held, signal.SIGKILL)
