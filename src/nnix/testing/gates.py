"""Holding a manager process at a moment that is otherwise a race, to test what must work meanwhile.

:func:`history_gate` writes a ``sitecustomize`` module into a directory: put that directory first on the
``PYTHONPATH`` of a process tree, and each Python process whose command line holds ``resume`` (``nnix resume``,
whose manager daemon it forks, or ``nnix.host.daemon ... resume``) holds its manager's first read of the tuner's
history: the manager writes its pid to ``<dir>/history.pid`` when it arrives there, and waits (its loop running:
REST answers, trials report) until ``<dir>/open`` exists or ``hold`` seconds have passed. The returned
:class:`~nnix.testing.ctrlc.StartGate` says who is held and opens the gate."""

from __future__ import annotations

from pathlib import Path

from nnix.testing.ctrlc import GATE_HELPERS, StartGate

_SITECUSTOMIZE = '''"""nnix.testing.gates: hold the first history read of a resumed manager (see history_gate)."""
''' + GATE_HELPERS + '''

def _gate():
    if not _marked(b"resume"):
        return
    import asyncio

    from nnix.core import manager

    here = {here!r}
    read = manager.ExperimentManager._read_records

    async def held(self):
        _arrived(here, "history.pid")
        deadline = _time.monotonic() + {hold!r}
        while not _is_open(here, deadline):
            await asyncio.sleep(0.02)
        await read(self)

    manager.ExperimentManager._read_records = held


_gate()
'''


def history_gate(directory: Path, hold: float = 120.0) -> StartGate:
    """Write the gate's ``sitecustomize.py`` into ``directory`` (created); see the module's docstring."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(here=str(directory.resolve()), hold=float(hold)))
    return StartGate(directory, "history")
