"""nnix's private Ray head (``platform: ray`` without ``address``): one per experiment, outliving its manager.

A manager killed mid-run must leave its Ray actors, their agents and their trials running, so that ``nnix resume``
takes them over as on any Ray cluster. The head therefore does not run in the manager: a small *keeper* process
(``python -m nnix.services.rayhead``, double-forked into a session of its own) runs ``ray start --head --block`` on
127.0.0.1 with ports chosen free, a temporary directory of its own and token authentication with a token of its own
(whatever the user's ``~/.ray/auth_token`` or ``RAY_AUTH_MODE``).

Ownership is recorded with the experiment, in ``<experiment>/ray-head.json`` (0600, written by the keeper): the
head's address and token, the keeper's pid *and start time* (a reused pid is never taken for it), the head's
temporary directory and a random head id, and the manager that owns it now. The temporary directory holds
``nnix-head.json`` with the experiment id and head id: a manager adopts a head only when its own experiment's
record, the running keeper and that marker agree (see :func:`check`), then checks the head itself (a key in
Ray's KV store, see :mod:`nnix.services.ray`).

The keeper is a child subreaper: the actors' guardians (double-forked) come back to it. It stops the head
(SIGTERM to ``ray start``, which takes the node down; the guardians then end their agents and trials within
their grace; SIGKILL to whatever is left) when

* it gets SIGTERM: its manager closes with nothing left to run, the experiment is stopped (``nnix stop``) or
  deleted (``nnix experiment delete``), see :func:`stop`;
* the record is gone or names another head (the experiment's directory was removed);
* no manager owns it (the recorded one is dead) and no agent is left under it for ``orphan_grace`` seconds:
  agents of a killed manager wait for a resume as long as their own timeout, and the head waits with them.

Standard library only: the CLI imports this module to stop a head without importing Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from nnix.services.rayguardian import Guardian, reaper_with_wakeup

__all__ = ["RECORD", "Head", "check", "read", "set_owner", "start", "stop", "stop_recorded"]

RECORD = "ray-head.json"
MARKER = "nnix-head.json"
LOG = "ray-head.log"
READY = "Ray runtime started"


@dataclass(frozen=True)
class Head:
    """A private head as recorded with its experiment."""

    experiment_id: str
    head_id: str
    address: str
    token: str
    temp_dir: str
    keeper_pid: int
    keeper_start: str
    owner_pid: int | None = None
    owner_start: str | None = None

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])


# --- processes ----------------------------------------------------------------------------------
def proc_start(pid: int | None) -> str | None:
    """A live process's start time (clock ticks since boot), None when it is gone or a zombie."""
    if not pid or pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    if not fields or fields[0] in (b"Z", b"X") or len(fields) <= 19:
        return None
    return fields[19].decode()


def _same(pid: int | None, start: str | None) -> bool:
    return start is not None and proc_start(pid) == start


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
                out.setdefault(int(stat[stat.rfind(b")") + 2:].split()[1]), []).append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live process below ``root`` (by parent pid)."""
    children = _children() if children is None else children
    out: list[int] = []
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return [p for p in out if proc_start(p) is not None]


def naming(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a head's own temporary directory)."""
    needle = text.encode()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if needle in Path(f"/proc/{name}/cmdline").read_bytes() and proc_start(int(name)) is not None:
                    out.append(int(name))
            except OSError:
                continue
    return out


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, sig)


# --- the record ---------------------------------------------------------------------------------
def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read(exp_dir: Path) -> Head | None:
    """The head recorded for the experiment in ``exp_dir``, or None (none, or an unreadable record)."""
    data = _read_json(exp_dir / RECORD)
    if data is None:
        return None
    fields: dict[str, Any] = {k: data.get(k) for k in Head.__dataclass_fields__}
    head = Head(**fields)
    ok = all(isinstance(getattr(head, k), str) and getattr(head, k)
             for k in ("experiment_id", "head_id", "address", "token", "temp_dir", "keeper_start"))
    if not ok or not isinstance(head.keeper_pid, int) or not head.address.rpartition(":")[2].isdigit():
        return None
    if not isinstance(head.owner_pid, (int, type(None))) or not isinstance(head.owner_start, (str, type(None))):
        return None
    return head


def set_owner(exp_dir: Path, head: Head, pid: int) -> Head:
    """Record ``pid`` as the manager owning ``head`` now (the keeper stops an ownerless head with no agent)."""
    owned = replace(head, owner_pid=pid, owner_start=proc_start(pid))
    if _names(read(exp_dir), head):
        _write_json(exp_dir / RECORD, asdict(owned))
    return owned


def _names(found: Head | None, head: Head) -> bool:
    """Whether the record ``found`` is of ``head`` (whoever owns it now)."""
    return found is not None and (found.head_id, found.keeper_pid) == (head.head_id, head.keeper_pid)


def check(head: Head, experiment_id: str) -> str | None:
    """Why ``head`` cannot be adopted by ``experiment_id``'s manager, or None when it can."""
    if head.experiment_id != experiment_id:
        return f"it was recorded for experiment {head.experiment_id}"
    if not _same(head.keeper_pid, head.keeper_start):
        return f"its keeper process {head.keeper_pid} is gone"
    marker = _read_json(Path(head.temp_dir) / MARKER) or {}
    if marker.get("experiment_id") != experiment_id or marker.get("head_id") != head.head_id:
        return f"{head.temp_dir} is not this experiment's head"
    try:
        with socket.create_connection(("127.0.0.1", head.port), timeout=5.0):
            pass
    except OSError as e:
        return f"nothing answers at {head.address} ({e})"
    return None


# --- starting and stopping ----------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _temp_root() -> str:
    root = tempfile.gettempdir()
    return root if len(root) <= 20 else "/tmp"  # Ray's socket paths under it must stay short


def start(
    exp_dir: Path,
    experiment_id: str,
    *,
    num_cpus: int | None = None,
    object_store_memory: int = 200 * 1024 * 1024,
    timeout: float = 60.0,
    owner_pid: int | None = None,
    orphan_grace: float = 60.0,
) -> Head:
    """Start a private head for the experiment in ``exp_dir`` and wait until it runs; returns its record.
    Raises ``RuntimeError`` (with the end of its log) when it does not come up within ``timeout`` seconds."""
    head_id = secrets.token_hex(8)
    temp_dir = tempfile.mkdtemp(prefix=f"nnix-ray-{experiment_id[:12]}-", dir=_temp_root())
    _write_json(Path(temp_dir) / MARKER, {"experiment_id": experiment_id, "head_id": head_id})
    port = _free_port()
    ray_args = ["start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-gpus=0",
                "--include-dashboard=false", "--disable-usage-stats", f"--object-store-memory={object_store_memory}",
                f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={temp_dir}", "--block"]
    if _has_ray_client():  # its server would take port 10001, whoever has it
        ray_args.append(f"--ray-client-server-port={_free_port()}")
    if num_cpus is not None:
        ray_args.append(f"--num-cpus={num_cpus}")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(32),
               RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")  # no 30 s drain on SIGTERM: the guardians end the trials
    log_path = exp_dir / LOG
    offset = log_path.stat().st_size if log_path.exists() else 0
    argv = [sys.executable, "-m", "nnix.services.rayhead", "--exp-dir", str(exp_dir), "--experiment", experiment_id,
            "--head-id", head_id, "--temp-dir", temp_dir, "--address", f"127.0.0.1:{port}",
            "--owner", str(owner_pid or 0), "--orphan-grace", f"{orphan_grace:g}", "--",
            sys.executable, "-m", "ray.scripts.scripts", *ray_args]
    with open(log_path, "ab") as log:
        first = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, close_fds=True)
    first.wait()  # it forks the keeper and exits at once
    deadline = time.monotonic() + timeout
    head: Head | None = None
    why = f"not running within {timeout:g} s"
    while time.monotonic() < deadline:
        found = read(exp_dir)
        if found is not None and found.head_id == head_id:
            head = found
        if head is not None and not _same(head.keeper_pid, head.keeper_start):
            why = "its keeper exited"
            break
        if head is not None and READY in _tail(log_path, offset, 1 << 20):
            return head
        if head is None and first.returncode:
            why = f"its keeper could not start (status {first.returncode})"
            break
        time.sleep(0.1)
    if head is not None:
        stop(exp_dir, head, timeout=30.0)
    else:
        shutil.rmtree(temp_dir, ignore_errors=True)
    raise RuntimeError(f"the private Ray head did not start ({why}); the end of {log_path}:\n"
                       + _tail(log_path, offset, 1500).strip())


def _has_ray_client() -> bool:
    try:
        utils: Any = importlib.import_module("ray._private.utils")
        return utils.get_ray_client_dependency_error() is None
    except Exception:
        return False


def _tail(path: Path, offset: int, size: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            end = f.tell()
            f.seek(max(offset, end - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def stop(exp_dir: Path, head: Head | None = None, timeout: float = 60.0) -> bool:
    """Stop the experiment's head (``head``, else the recorded one) and wait until every process of it is gone;
    True when there was one. Only a keeper whose pid *and* start time match is signalled."""
    head = head or read(exp_dir)
    if head is None:
        return False
    deadline = time.monotonic() + timeout
    if _same(head.keeper_pid, head.keeper_start):
        _signal([head.keeper_pid], signal.SIGTERM)
        while time.monotonic() < deadline and _same(head.keeper_pid, head.keeper_start):
            time.sleep(0.05)
        if _same(head.keeper_pid, head.keeper_start):  # stuck: everything under it, then itself
            _signal([*descendants(head.keeper_pid), head.keeper_pid], signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(head.keeper_pid, os.WNOHANG)
    # a keeper killed by SIGKILL leaves its head: its processes name the head's own temporary directory
    left = naming(head.temp_dir)
    if left:
        _signal(left, signal.SIGTERM)
        end = time.monotonic() + 10.0
        while time.monotonic() < end and naming(head.temp_dir):
            time.sleep(0.1)
        tree = _children()
        _signal([q for p in naming(head.temp_dir) for q in [p, *descendants(p, tree)]], signal.SIGKILL)
    if _names(read(exp_dir), head):
        with contextlib.suppress(OSError):
            (exp_dir / RECORD).unlink()
    marker = _read_json(Path(head.temp_dir) / MARKER) or {}
    if marker.get("head_id") == head.head_id:
        shutil.rmtree(head.temp_dir, ignore_errors=True)
    return True


def stop_recorded(exp_dir: Path) -> str | None:
    """For the CLI: stop the private Ray head recorded in ``exp_dir``, if any; what was done, in words."""
    head = read(exp_dir)
    if head is None:
        return None
    running = _same(head.keeper_pid, head.keeper_start)
    stop(exp_dir, head)
    return f"its private Ray head ({head.address}) stopped" if running else None


# --- the keeper ---------------------------------------------------------------------------------
def _keep(args: argparse.Namespace) -> int:
    if os.fork():
        os._exit(0)
    exp_dir, me = Path(args.exp_dir), os.getpid()
    record = exp_dir / RECORD
    wake_r = reaper_with_wakeup()  # the guardians come back here
    asked: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: asked.append(signal.Signals(s).name))
    signal.signal(signal.SIGCHLD, lambda *_: None)
    owner = int(args.owner) or None
    own = Head(args.experiment, args.head_id, args.address, os.environ.get("RAY_AUTH_TOKEN", ""), args.temp_dir,
               me, proc_start(me) or "", owner, proc_start(owner))
    _write_json(record, asdict(own))

    def say(text: str) -> None:
        print(f"nnix ray head keeper {me}: {text}", flush=True)

    head = subprocess.Popen(args.command, stdin=subprocess.DEVNULL)
    say(f"started `ray start --head` (pid {head.pid}) at {args.address}, temporary directory {args.temp_dir}")
    reaper = Guardian()  # the exit statuses of what ends below the keeper
    exited, reap = reaper.statuses, reaper.reap

    def wait(seconds: float) -> None:
        with contextlib.suppress(OSError, ValueError):
            select.select([wake_r], [], [], seconds)
        with contextlib.suppress(OSError):
            while os.read(wake_r, 512):
                pass
        reap()

    why = ""
    alone_since: float | None = None
    while not why:
        wait(2.0)
        now = time.monotonic()
        if asked:
            why = f"asked to stop ({asked[0]})"
        elif head.pid in exited:
            why = f"`ray start` exited with status {exited[head.pid]}"
        elif (cur := read(exp_dir)) is None or cur.keeper_pid != me:
            if cur is not None or not record.exists():
                why = "its experiment no longer records it"
        elif not _same(cur.owner_pid, cur.owner_start):
            tree = _children()
            ray = {head.pid, *descendants(head.pid, tree)}
            if [p for p in descendants(me, tree) if p not in ray]:
                alone_since = None  # agents wait for their manager: so does the head
            elif alone_since is None:
                alone_since = now
            elif now - alone_since >= args.orphan_grace:
                why = f"no manager and no agent for {args.orphan_grace:g} s"
        else:
            alone_since = None
    say(f"stopping the head: {why}")
    if head.pid not in exited:
        _signal([head.pid], signal.SIGTERM)
    end = time.monotonic() + 30.0
    while head.pid not in exited and time.monotonic() < end:
        wait(0.1)
    # Ray's own processes left (same process group), then the guardians end their agents and trials
    _signal([p for p in descendants(me) if _pgid(p) == os.getpgid(0)], signal.SIGTERM)
    end = time.monotonic() + 20.0
    while descendants(me) and time.monotonic() < end:
        wait(0.1)
    for _ in range(5):
        left = descendants(me)
        if not left:
            break
        for p in left:
            with contextlib.suppress(OSError):
                g = _pgid(p)
                if g is not None and g != os.getpgid(0):
                    os.killpg(g, signal.SIGKILL)
        _signal(left, signal.SIGKILL)
        wait(0.5)
    if (cur := read(exp_dir)) is not None and cur.keeper_pid == me:
        with contextlib.suppress(OSError):
            record.unlink()
    shutil.rmtree(args.temp_dir, ignore_errors=True)
    say("stopped")
    return 0


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnix.services.rayhead", description="nnix's private Ray head keeper")
    p.add_argument("--exp-dir", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--head-id", required=True)
    p.add_argument("--temp-dir", required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--owner", default="0")
    p.add_argument("--orphan-grace", type=float, default=60.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        p.error("the `ray start` command is missing")
    return _keep(args)


if __name__ == "__main__":
    sys.exit(main())
