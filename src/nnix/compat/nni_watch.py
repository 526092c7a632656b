"""Stops an experiment that the Python API started when the launching process ends without stopping it.

``python -m nnix.compat.nni_watch EXP_ID MANAGER_PID``, its stdin the read end of a pipe that only
the launcher can write to. ``stop()`` (and ``atexit``) write ``detach`` before closing it: nothing to do. An
end-of-file without it means the launcher died (``kill -9``, a crashed Jupyter kernel): the watcher then stops
the experiment, if the manager it was started with still serves it. It runs in its own session (a Ctrl-C in
the launcher's terminal is not for it) and imports nnix only when it has to act (which is why it lives outside
the ``nni_experiment`` package, whose import is heavy: its own start takes milliseconds).
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    exp_id, manager_pid = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    received = b""
    while True:
        try:
            chunk = os.read(0, 256)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if not chunk:
            break
        received += chunk
    if b"detach" in received:
        return 0
    from pathlib import Path

    from nnix.client import stop_experiment
    from nnix.errors import NnixError
    from nnix.home import Registry, read_state

    try:
        state = read_state(Path(Registry().get(exp_id).dir), summary=True)
        if state.manager_pid == manager_pid:
            stop_experiment(exp_id)
    except NnixError as e:
        print(f"nnix: could not stop experiment {exp_id}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
