"""Real Ray clusters for tests and benchmarks (the recipes ``shared/recipes/ray.sh`` and ``ray-netns.sh``, in
Python, with names of their own so that a concurrent run of the recipes or of another test session is never
disturbed).

* :class:`RayLab`: a single-node head on 127.0.0.1, a separate process (``ray start --head --block``) with its
  own temporary directory and free ports. Everything is pinned to loopback: Ray otherwise replaces
  127.0.0.1 with this machine's first network address (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` stops that;
  the nnix launcher sets the same for its side).
* :class:`PrivateHeads`: what tests of nnix's own private heads (:mod:`nnix.services.rayhead`) started, ended
  whatever happens: the manager processes they ran and every head recorded in their experiments.
* :class:`RayNetnsLab`: a head in the root namespace on a test bridge ``nnixrb<k>`` (10.203.<k>.1) and worker
  nodes in network namespaces ``nnixr<k>n<i>`` (10.203.<k>.1<i>), each with its own hostname. The head has no
  CPU of its own, so every environment runs on a namespace node. Needs root.

:meth:`down` stops only what the lab started: the ``ray start`` processes it recorded (and their descendants,
recorded before signalling them); nothing is found or killed by name. :func:`unavailable` and
:func:`netns_unavailable` say in words why a lab cannot run here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnix.services.rayhead import descendants, proc_start
from nnix.testing.labs import claim_bridge_slot, free_port

__all__ = ["PrivateHeads", "RayLab", "RayNetnsLab", "netns_unavailable", "unavailable"]

LOCK = Path("/tmp/nnix-raylab.lock")
SUBNET = "10.203"
_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}


def _ray_cli() -> str | None:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else shutil.which("ray")


def _cli_or_raise(reason: str | None) -> str:
    """The ``ray`` command; RuntimeError(``reason``) when a lab cannot start here."""
    if reason:
        raise RuntimeError(reason)
    cli = _ray_cli()
    assert cli is not None
    return cli


def unavailable() -> str | None:
    """Why a Ray lab cannot be started here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "the Ray lab needs Linux"
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "ray is not installed in this Python (pip install 'nnix[ray]')"
    if _ray_cli() is None:
        return "the `ray` command is missing"
    return None


def netns_unavailable() -> str | None:
    """Why a :class:`RayNetnsLab` cannot be built here, or None when it can."""
    reason = unavailable()
    if reason:
        return reason
    if os.geteuid() != 0:
        return "network-namespace nodes need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"network-namespace nodes need `{tool}`"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=60)


@dataclass
class _Node:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to ``ray start --block`` (it takes its node down), then SIGKILL to whatever it left."""
        if self.proc.poll() is not None:
            return
        tree = [(p, proc_start(p)) for p in descendants(self.proc.pid)]
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(proc_start(p) == s and s is not None for p, s in tree):
            time.sleep(0.1)
        for pid, start in tree:
            if start is not None and proc_start(pid) == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            if "Ray runtime started" in text:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = "exited" if self.proc.poll() is not None else f"not started within {timeout:g} s"
                raise RuntimeError(f"ray node {self.name} {why}: {text[-1500:]}")
            time.sleep(0.2)


def _start_node(name: str, cmd: list[str], log: Path, env: dict[str, str]) -> _Node:
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, **_ENV, **env}, start_new_session=True)
    return _Node(name, proc, log)


@dataclass
class RayLab:
    """A single-node Ray head on 127.0.0.1 (see the module docstring). Use :meth:`up` / :meth:`down`.

    The head uses Ray's token authentication with a token of its own: a driver (the manager) needs
    :attr:`env` in its environment (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), as with any such cluster.
    """

    num_cpus: int = 2
    dir: Path | None = None
    port: int = 0
    node: _Node | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(32))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a driver of this cluster needs in its environment."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def up(self, timeout: float = 180.0) -> RayLab:
        cli = _cli_or_raise(unavailable())
        self.dir = Path(tempfile.mkdtemp(prefix="nnix-ray-", dir="/tmp"))  # short: Ray's socket paths
        self.port = free_port()
        cmd = [cli, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
               f"--num-cpus={self.num_cpus}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
               "--object-store-memory=100000000",
               f"--temp-dir={self.dir / 'tmp'}", "--block"]
        try:
            self.node = _start_node("head", cmd, self.dir / "head.log",
                                    {**self.env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
            self.node.wait_started(timeout)
        except BaseException:
            self.down()
            raise
        return self

    def named_actors(self, namespace: str, wait: float = 0.0) -> list[str]:
        """The live named actors in ``namespace`` (asked by a driver process of its own), once there are none or
        after ``wait`` seconds of asking."""
        code = ("import json, sys, time, ray; ray.init(sys.argv[1], logging_level='ERROR', log_to_driver=False); "
                "end = time.monotonic() + float(sys.argv[3])\nwhile True:\n"
                "    names = [a['name'] for a in ray.util.list_named_actors(all_namespaces=True) "
                "if a['namespace'] == sys.argv[2]]\n"
                "    if not names or time.monotonic() > end: break\n    time.sleep(0.3)\n"
                "print(json.dumps(names))")
        env = {**os.environ, **self.env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        r = subprocess.run([sys.executable, "-c", code, self.address, namespace, str(wait)], capture_output=True,
                           text=True, env=env, timeout=wait + 120)
        if r.returncode != 0:
            raise RuntimeError(f"listing the actors of {self.address} failed: {r.stderr[-2000:]}")
        return [str(n) for n in json.loads(r.stdout.strip().splitlines()[-1])]

    def down(self) -> None:
        """Stop the head (and everything under it); safe to call twice."""
        if self.node is not None:
            self.node.stop()
            self.node = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


@dataclass
class PrivateHeads:
    """Managers run as processes by a test, and the private Ray heads of its experiments: :meth:`seen` notes a
    head while it runs (its record is removed when it stops), :meth:`down` ends them all (a finalizer)."""

    managers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    exp_dirs: list[Path] = field(default_factory=list)
    heads: dict[str, Any] = field(default_factory=dict)

    def manager(self, exp_id: str, action: str, log: Path, env: dict[str, str] | None = None,
                exit_when_done: bool = True, **options: Any) -> subprocess.Popen[bytes]:
        """Run ``exp_id``'s manager (``create`` / ``resume``) in a process of its own, as ``nnix`` does."""
        code = ("import json, sys; from nnix.host.run import run_manager; "
                "run_manager(sys.argv[1], sys.argv[2], port=0, live=False, exit_when_done=sys.argv[3] == '1', "
                "**json.loads(sys.argv[4]))")
        with open(log, "ab") as f:
            proc = subprocess.Popen([sys.executable, "-c", code, exp_id, action, "1" if exit_when_done else "0",
                                     json.dumps(options)], stdin=subprocess.DEVNULL, stdout=f,
                                    stderr=subprocess.STDOUT, env=env)
        self.managers.append(proc)
        return proc

    def seen(self, exp_dir: Path) -> Any:
        """The head recorded in ``exp_dir`` now (a :class:`nnix.services.rayhead.Head`), or None; remembered."""
        from nnix.services import rayhead

        if exp_dir not in self.exp_dirs:
            self.exp_dirs.append(exp_dir)
        head = rayhead.read(exp_dir)
        if head is not None:
            self.heads[head.head_id] = head
        return head

    def down(self) -> None:
        """Kill the managers, stop every head seen or recorded, then kill what still names a head's directory."""
        from nnix.services import rayhead

        for proc in self.managers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        for exp_dir in self.exp_dirs:
            self.seen(exp_dir)
            rayhead.stop(exp_dir, timeout=60)
        for head in self.heads.values():
            rayhead.stop(Path("/nonexistent"), head, timeout=60)


@dataclass
class RayNetnsLab:
    """A head on a test bridge plus worker nodes in network namespaces (see the module docstring)."""

    n_nodes: int = 2
    cpus_per_node: int = 1
    slot: int = 0
    port: int = 0
    dir: Path | None = None
    head: _Node | None = None
    nodes: list[_Node] = field(default_factory=list)
    token: str = field(default_factory=lambda: secrets.token_hex(32))

    @property
    def env(self) -> dict[str, str]:
        """What a driver of this cluster needs in its environment (see :attr:`RayLab.env`)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    @property
    def bridge(self) -> str:
        return f"nnixrb{self.slot}"

    @property
    def head_ip(self) -> str:
        return f"{SUBNET}.{self.slot}.1"

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    def node_names(self) -> list[str]:
        """Hostnames of the worker nodes (each namespace has its own)."""
        return [f"nnixr{self.slot}n{i}" for i in range(1, self.n_nodes + 1)]

    def up(self, timeout: float = 180.0) -> RayNetnsLab:
        cli = _cli_or_raise(netns_unavailable())
        self._claim_slot()
        try:
            self._network()
            self.port = free_port(self.head_ip)
            assert self.dir is not None
            common = ["--object-store-memory=100000000", "--disable-usage-stats", "--num-gpus=0", "--block"]
            self.head = _start_node("head", [
                cli, "start", "--head", f"--node-ip-address={self.head_ip}", f"--port={self.port}", "--num-cpus=0",
                "--include-dashboard=false",
                f"--temp-dir={self.dir / 'h'}", *common], self.dir / "head.log", self.env)
            self.head.wait_started(timeout)
            for i, name in enumerate(self.node_names(), start=1):
                ip = f"{SUBNET}.{self.slot}.{10 + i}"
                inner = " ".join([cli, "start", f"--address={self.address}", f"--node-ip-address={ip}",
                                  f"--num-cpus={self.cpus_per_node}", f"--temp-dir={self.dir / f'n{i}'}", *common])
                self.nodes.append(_start_node(name, ["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c",
                                                     f"hostname {name} && exec {inner}"],
                                              self.dir / f"{name}.log", self.env))
            for node in self.nodes:
                node.wait_started(timeout)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop the nodes, then remove the namespaces, the bridge and the directory; safe to call twice."""
        for node in [*self.nodes, *([self.head] if self.head else [])]:
            node.stop()
        self.nodes, self.head = [], None
        if self.slot:
            for i in range(1, self.n_nodes + 1):
                _run("ip", "link", "del", f"nnixr{self.slot}v{i}", check=False)
                _run("ip", "netns", "del", f"nnixr{self.slot}n{i}", check=False)
            _run("ip", "link", "del", self.bridge, check=False)
            others = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
            if "nnixrb" not in others:
                _run("ip", "route", "del", "unreachable", f"{SUBNET}.0.0/16", "metric", "4000", check=False)
            self.slot = 0
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _claim_slot(self) -> None:
        self.slot = claim_bridge_slot(LOCK, "nnixrb", "Ray")
        self.dir = Path(tempfile.mkdtemp(prefix=f"nnix-rayns{self.slot}-", dir="/tmp"))

    def _network(self) -> None:
        routes = _run("ip", "route", "show", check=False).stdout
        if f"unreachable {SUBNET}.0.0/16" not in routes:  # never let the test network leak to eth0
            _run("ip", "route", "add", "unreachable", f"{SUBNET}.0.0/16", "metric", "4000", check=False)
        _run("ip", "addr", "add", f"{self.head_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.node_names(), start=1):
            veth, ip = f"nnixr{self.slot}v{i}", f"{SUBNET}.{self.slot}.{10 + i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "route", "add", "default", "via", self.head_ip)
