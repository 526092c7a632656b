"""The guardian of one Ray environment: starts the nnix agent and ends it (with its trials) when told to.

Run by the Ray actor's worker as ``python -c <this file's source> <ctl fd> <status fd> <grace> <argv...>``:
:mod:`nnix.services.ray` ships the source as text, so this module may use the standard library only (the
worker's Python need not have nnix) and must keep working when run as ``__main__`` from a string.

The first process forks the guardian and exits at once (Ray's clean-up of a dead worker's children then
does not kill the guardian first). The guardian is a child subreaper, spawns ``argv`` (the agent) and
writes JSON status lines to <status fd>: ``{"pid", "agent"}`` once the agent runs (or ``{"error"}``), then
``{"status", "why"}`` when it is over. It ends when the agent exits, when <ctl fd> is written to ("stop
requested") or closed (the actor is gone), or on SIGTERM/SIGINT; unless the agent ended by itself, it then
terminates every descendant left (SIGTERM, SIGKILL after ``grace`` seconds).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any

_PR_SET_CHILD_SUBREAPER = 36


def reaper_with_wakeup() -> int:
    """Become a child subreaper (orphans below this process come back to it; best effort) and send signals to a
    non-blocking pipe, so that a ``select`` wakes up on them; returns the pipe's end to read."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    return wake_r


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is neither a zombie nor dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def descendants(root: int) -> list[int]:
    """Every process below ``root`` in the process table (children first)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                children.setdefault(int(stat[stat.rfind(b")") + 2 :].split()[1]), []).append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    out: list[int] = []
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


class Guardian:
    """The exit statuses of the guardian's reaped children, and the ending of what is left."""

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}

    def reap(self) -> None:
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.statuses[pid] = os.waitstatus_to_exitcode(st)

    def kill_tree(self, grace: float, agent: int) -> None:
        own = os.getpgid(0)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
            if not os.path.isdir("/proc"):  # no process table to walk: the agent only
                if agent not in self.statuses:
                    try:
                        os.kill(agent, sig)
                    except OSError:
                        pass
                    time.sleep(min(wait, 1.0))  # no table to poll: give the agent its grace, once
                    self.reap()
                continue
            pids = [p for p in descendants(os.getpid()) if alive(p)]
            if not pids:
                return
            for p in pids:
                try:
                    g = os.getpgid(p)
                    if g != own:
                        os.killpg(g, sig)
                except OSError:
                    pass
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(alive(p) for p in pids):
                self.reap()
                time.sleep(0.05)
            self.reap()


def main(args: list[str]) -> None:
    ctl, out, grace, argv = int(args[0]), int(args[1]), float(args[2]), args[3:]
    if os.fork():
        os._exit(0)
    os.set_inheritable(ctl, False)
    os.set_inheritable(out, False)
    wake_r = reaper_with_wakeup()

    def say(**kw: Any) -> None:
        try:
            os.write(out, (json.dumps(kw) + "\n").encode())
        except OSError:
            pass

    stop: list[str] = []
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, lambda *a: stop.append("terminated by a signal"))
    signal.signal(signal.SIGINT, lambda *a: stop.append("interrupted"))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    reset = [s for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGPIPE,
                         getattr(signal, "SIGXFSZ", None)) if s is not None]
    guardian = Guardian()
    try:
        agent = os.posix_spawnp(argv[0], argv, dict(os.environ), setsigdef=reset, setsigmask=())
    except OSError as e:
        print(f"nnix guardian: cannot run {argv[0]}: {e}", flush=True)
        say(error=f"cannot run {argv[0]}: {e}")
        return
    print(f"nnix guardian {os.getpid()}: agent {agent} started", flush=True)
    say(pid=os.getpid(), agent=agent)
    why = ""
    while agent not in guardian.statuses and not stop:
        r, _, _ = select.select([ctl, wake_r], [], [], 5.0)
        try:
            while os.read(wake_r, 512):
                pass
        except OSError:
            pass
        guardian.reap()
        if ctl in r:
            try:
                data = os.read(ctl, 64)
            except OSError:
                data = b""
            stop.append("stop requested" if data else "the Ray actor is gone")
    if agent not in guardian.statuses:
        why = stop[0]
        print(f"nnix guardian: {why}; stopping the agent and its trials", flush=True)
    guardian.kill_tree(grace, agent)
    say(status=guardian.statuses.get(agent), why=why)


if __name__ == "__main__":
    main(sys.argv[1:])
