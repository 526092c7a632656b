"""Keeping a trial's processes together, so that none outlives its trial.

A trial's process group is not enough: a child may ignore SIGTERM, or leave the group (``setsid``,
double fork) and run on after the trial ended or was killed. Two ways to find every process of a trial:

* **cgroup v2** (where the machine lets this user create and fill one: root, a delegated systemd unit, a
  container with a writable cgroup2 mount such as ``/sys/fs/cgroup/unified`` of a hybrid layout): each
  trial gets ``<own cgroup>/nnix.trials/<token>``; the trial's wrapper joins it before it runs the user's
  command. No process can leave it without write access elsewhere in the hierarchy, so it catches
  everything, ``setsid`` and double forks included. It is killed as a whole (``cgroup.kill``).
* **the marker** (fallback, and ``NNIX_CONTAINMENT=marker``): every trial process inherits
  ``NNIX_TRIAL_TOKEN=<token>``; the processes of this user whose ``/proc/PID/environ`` holds it belong to
  the trial. Limits: a process that clears or rewrites its environment (``env -i``, ``execve`` with a new
  environment) is not found; the scan runs only where a watcher runs (after a crash of the manager,
  leftovers of local trials that ended meanwhile live until ``resume`` re-attaches them).

When the trial's command ends, whatever of it is still there is a leftover: in cgroup mode the wrapper
itself (no manager needed) sends it SIGTERM, waits up to a second, kills the cgroup and writes the count
to ``<channel>/leftovers``. (The wrapper steps out of the cgroup only then: a move between cgroups waits for
an RCU grace period of the kernel, 5-20 ms, and a trial that left nothing behind pays none; its empty cgroup
is removed by the watcher, or by the next manager's sweep when nobody watched). The watcher
(:class:`~nnix.agent.runner.TrialRunner`) then kills what is still found by either way and reports the total
in ``Exited.leftovers``. Everything the trial can write (the token file, the leftover count) is validated before
use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import secrets
import signal
import time
from pathlib import Path

from nnix.agent.safeopen import read_at_most

TOKEN_ENV = "NNIX_TRIAL_TOKEN"
CGROUP_ENV = "NNIX_TRIAL_CGROUP"
MODE_ENV = "NNIX_CONTAINMENT"  # "auto" (default): cgroup where possible, else marker; "marker": never cgroup
TOKEN_FILE = "token"
LEFTOVERS_FILE = "leftovers"
NOCGROUP_FILE = "nocgroup"
CGROUP_PARENT = "nnix.trials"
_TOKEN_RE = re.compile(r"[0-9a-f]{32}")
_ENVIRON_MAX = 4 * 1024 * 1024

log = logging.getLogger(__name__)

# The wrapper's cgroup parts (see runner.WRAPPER). Join the trial's cgroup first; when the command is
# over, step out into the parent, SIGTERM what is left, wait up to 1 s, kill the cgroup, count.
JOIN = (
    'g=$NNIX_TRIAL_CGROUP; if [ -n "$g" ] && ! { echo $$ > "$g/cgroup.procs"; } 2>/dev/null; then '
    'g=; : > "$NNIX_TRIAL_CHANNEL/nocgroup"; fi; '
)
REAP = (
    'if [ -n "$g" ]; then n=0; while read -r p; do [ "$p" = $$ ] || n=$((n+1)); done < "$g/cgroup.procs"; '
    'if [ $n -gt 0 ] && { echo $$ > "$g/../cgroup.procs"; } 2>/dev/null; then n=0; '
    'while read -r p; do kill -TERM "$p" 2>/dev/null; n=$((n+1)); done < "$g/cgroup.procs"; '
    'if [ $n -gt 0 ]; then i=0; while [ $i -lt 20 ]; do u=1; '
    'while read -r k v; do [ "$k" = populated ] && u=$v; done < "$g/cgroup.events"; '
    '[ "$u" = 0 ] && break; sleep 0.05; i=$((i+1)); done; '
    '{ echo 1 > "$g/cgroup.kill"; } 2>/dev/null; printf "%s\\n" "$n" > "$NNIX_TRIAL_CHANNEL/leftovers"; fi; '
    'rmdir "$g" 2>/dev/null; fi; fi; '
)


def _mode() -> str:
    return (os.environ.get(MODE_ENV) or "auto").strip().lower()


@functools.cache
def _cgroup_parent() -> Path | None:
    """``<own cgroup v2>/nnix.trials`` when this process may create cgroups there and move processes in."""
    try:
        own = next(
            line[3:].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        mount: Path | None = None
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                fields = left.split()
                root, point = fields[3], fields[4]
                if own == root or own.startswith(root.rstrip("/") + "/"):
                    mount = Path(point) / own[len(root.rstrip("/")):].lstrip("/")
                    break
        if mount is None or not os.access(mount / "cgroup.procs", os.W_OK):
            return None
        parent = mount / CGROUP_PARENT
        parent.mkdir(exist_ok=True)
        if not (parent / "cgroup.procs").exists() or not os.access(parent / "cgroup.procs", os.W_OK):
            return None
        return parent
    except (OSError, StopIteration, IndexError, ValueError):
        return None


_swept: set[Path] = set()
STALE_AFTER = 600.0  # seconds: an empty trial cgroup older than this is left over (its trial was SIGKILLed)


def _sweep(parent: Path) -> None:
    """Once per process: remove the empty trial cgroups left by trials killed with nobody to clean up (a
    cgroup with processes cannot be removed, so a live trial never loses its own)."""
    if parent in _swept:
        return
    _swept.add(parent)
    now = time.time()
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        if not _TOKEN_RE.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > STALE_AFTER:
                entry.rmdir()


def _pid_ok(name: str, me: int) -> bool:
    return name.isdigit() and int(name) != me


def _exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (dead, waiting for its parent): not a process left running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(512)
    except OSError:
        return True
    state = stat[stat.rfind(b")") + 2:][:1]  # the field after "(comm)"; comm may hold spaces and parentheses
    return state in (b"Z", b"X", b"x")


def _marked(token: str) -> set[int]:
    """Processes of this user whose environment holds the trial's marker."""
    needle = f"{TOKEN_ENV}={token}".encode()
    me = os.getpid()
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not _pid_ok(name, me):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                data = f.read(_ENVIRON_MAX)
        except OSError:
            continue
        if data.startswith(needle + b"\0") or b"\0" + needle + b"\0" in data or data == needle:
            found.add(int(name))
    return found


class Containment:
    """The processes of one trial (see the module's doc)."""

    def __init__(self, token: str, cgroup: Path | None, channel: Path) -> None:
        self.token = token
        self.cgroup = cgroup
        self.channel = channel

    @staticmethod
    def fresh() -> tuple[str, Path | None]:
        """A new token and, where allowed, a new (empty) cgroup named by it."""
        token = secrets.token_hex(16)
        cgroup: Path | None = None
        parent = _cgroup_parent() if _mode() != "marker" else None
        if parent is not None:
            _sweep(parent)
            try:
                (parent / token).mkdir()
                cgroup = parent / token
            except OSError as e:
                log.warning("cannot create a cgroup for a trial (%s): using the environment marker", e)
        return token, cgroup

    @classmethod
    def create(cls, channel: Path, made: tuple[str, Path | None] | None = None) -> Containment:
        """A new trial's containment: a token (saved in the channel) and, where allowed, a cgroup; ``made``: those
        of :meth:`fresh`, made earlier (for a wrapper started ahead, see :class:`~nnix.agent.runner.TrialRunner`)."""
        token, cgroup = made if made is not None else cls.fresh()
        (channel / TOKEN_FILE).write_text(token + "\n")
        return cls(token, cgroup, channel)

    @classmethod
    def load(cls, channel: Path) -> Containment | None:
        """The containment of a trial started by an earlier process (re-attach), None if unknown."""
        try:
            token = read_at_most(channel / TOKEN_FILE, 64).decode("ascii", "replace").strip()
        except OSError:  # (also a FIFO or a link the trial put there: never opened, see nnix.agent.safeopen)
            return None
        if not _TOKEN_RE.fullmatch(token):  # written by the trial's side: check it
            return None
        parent = _cgroup_parent() if _mode() != "marker" else None
        cgroup = parent / token if parent is not None and (parent / token).is_dir() else None
        return cls(token, cgroup, channel)

    @property
    def mode(self) -> str:
        return "cgroup" if self.uses_cgroup else "marker"

    @property
    def uses_cgroup(self) -> bool:
        return self.cgroup is not None and not (self.channel / NOCGROUP_FILE).exists()

    def env(self) -> dict[str, str]:
        return {TOKEN_ENV: self.token, CGROUP_ENV: str(self.cgroup) if self.cgroup is not None else ""}

    def members(self) -> set[int]:
        """The trial's live processes (in cgroup mode, also those the marker finds)."""
        found = _marked(self.token) if not self.uses_cgroup else set()
        if self.cgroup is not None:
            try:
                text = (self.cgroup / "cgroup.procs").read_text()
            except OSError:
                text = ""
            found.update(int(x) for x in text.split() if x.isdigit())
        found.discard(os.getpid())
        return {pid for pid in found if not _exited(pid)}

    def signal(self, pids: set[int], sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill_all(self) -> set[int]:
        """SIGKILL every member now; returns who was there."""
        pids = self.members()
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")
        self.signal(pids, signal.SIGKILL)
        return pids

    async def reap(self, grace: float) -> int:
        """End every process still there: SIGTERM, up to ``grace`` seconds, SIGKILL. Returns how many."""
        pids = self.members()
        if not pids:
            return 0
        self.signal(pids, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            left = self.members()
            pids |= left
            if not left:
                break
            await asyncio.sleep(0.05)
        pids |= self.kill_all()
        return len(pids)

    def reported_leftovers(self) -> int:
        """What the wrapper counted (a number the trial could have written: bounded, or 0)."""
        try:
            text = read_at_most(self.channel / LEFTOVERS_FILE, 16).decode("ascii", "replace").strip()
        except OSError:
            return 0
        return int(text) if text.isdigit() and int(text) < 1_000_000 else 0

    async def release(self) -> None:
        """Remove the trial's cgroup, once its last (killed) processes are gone."""
        await release_cgroup(self.cgroup)


async def release_cgroup(cgroup: Path | None) -> None:
    """Remove a trial's cgroup, once its last (killed) processes are gone (waits up to 2 s for them)."""
    if cgroup is None:
        return
    for _ in range(80):
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.025)
    log.warning("cannot remove the cgroup %s: processes are still in it", cgroup)
