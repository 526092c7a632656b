"""Real SSH hosts for tests: an OpenSSH server on loopback and N "hosts" that are network namespaces,
each with its own address and its own sshd (the recipes in ``shared/recipes/ssh.sh`` and
``netns-hosts.sh``, in Python, with names of their own so that a concurrent run of the recipes or of
another test session is never disturbed).

Layout of one lab (``k`` is a free slot number, 1..200, picked under a lock):

* a dedicated login user ``nnixlab<k>`` (key login only; its home holds the remote work directories);
* a loopback sshd on a free port of 127.0.0.1;
* a bridge ``nnixbr<k>`` with 10.201.<k>.1/24 and namespaces ``nnix<k>h1..N`` at 10.201.<k>.11.., each
  with its own hostname (UTS namespace) and sshd on port 22;
* one client key and one ``known_hosts`` file naming every host.

Everything is torn down by :meth:`SshLab.down`: the user's processes (found by uid, killed by pid), the
daemons (by their pid files), the namespaces, the bridge and the user. Needs root; :func:`unavailable`
says in words why a lab cannot run here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nnix.testing.labs import claim_bridge_slot, free_port

__all__ = ["SshHost", "SshLab", "unavailable"]

SSHD = "/usr/sbin/sshd"
LOCK = Path("/tmp/nnix-sshlab.lock")
SUBNET = "10.201"


def unavailable() -> str | None:
    """Why a lab cannot be built on this machine, or None when it can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "SSH lab needs Linux"
    if os.geteuid() != 0:
        return "SSH lab needs root (user accounts, network namespaces, sshd on port 22)"
    for tool in ("ip", "unshare", "useradd", "ssh-keygen"):
        if shutil.which(tool) is None and not (tool == "ssh-keygen" and shutil.which("apt-get")):
            return f"SSH lab needs `{tool}`"
    if not Path(SSHD).exists() and shutil.which("apt-get") is None:
        return "SSH lab needs openssh-server (and apt-get is not available to install it)"
    return None


def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=timeout)


def ensure_openssh() -> None:
    """Install openssh-server with apt-get when sshd is missing (root only)."""
    if Path(SSHD).exists() and shutil.which("ssh-keygen"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True, env=env, timeout=300)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server", "openssh-client"],
        check=True, capture_output=True, env=env, timeout=600,
    )


def _reap_stale_labs(base: Path) -> None:
    """Tear down labs whose owning process died without cleaning up (a killed test run)."""
    bridges = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
    for k in range(1, 201):
        if f"nnixbr{k}:" not in bridges and f"nnixbr{k}@" not in bridges:
            continue
        d = base / f"nnix-sshlab-{k}"
        try:
            owner = int((d / "owner").read_text().strip())
            os.kill(owner, 0)
            continue  # alive: not ours to touch
        except (OSError, ValueError):
            pass
        SshLab(slot=k, user=f"nnixlab{k}", dir=d, base=base).down()


@dataclass
class SshHost:
    """One host of the lab, as a remote machine entry needs it."""

    name: str
    host: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    namespace: str | None = None  # None: the loopback host
    pid_file: Path | None = None

    def machine(self, **extra: object) -> dict[str, object]:
        """A ``machineList`` entry (NNI v2 camelCase) for this host."""
        return {"host": self.host, "port": self.port, "user": self.user, "sshKeyFile": str(self.key_file), **extra}

    def link(self, up: bool) -> None:
        """Cut (``up=False``) or restore this namespace host's network link: a partition, as seen from outside."""
        if self.namespace is None:
            raise ValueError("the loopback host has no link to cut")
        _run("ip", "-n", self.namespace, "link", "set", "eth0", "up" if up else "down")

    def sshd_pid(self) -> int | None:
        try:
            return int((self.pid_file or Path("/nonexistent")).read_text().strip())
        except (OSError, ValueError):
            return None


@dataclass
class SshLab:
    """A set of real SSH hosts (see the module docstring). Use :meth:`up` / :meth:`down`."""

    n_hosts: int = 3
    base: Path = Path("/tmp")
    slot: int = 0
    user: str = ""
    dir: Path = Path()
    loopback: SshHost | None = None
    hosts: list[SshHost] = field(default_factory=list)
    _lock_fd: int | None = None

    # --- public --------------------------------------------------------------------------------
    @property
    def key_file(self) -> Path:
        return self.dir / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def home(self) -> Path:
        return Path("/home") / self.user

    def up(self) -> SshLab:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        ensure_openssh()
        self._claim_slot()
        try:
            self._make_user_and_keys()
            self._start_loopback()
            self._make_bridge()
            for i in range(1, self.n_hosts + 1):
                self._start_namespace_host(i)
            self._wait_and_scan()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop everything this lab started; safe to call twice."""
        self.kill_user_processes()
        if self.dir != Path() and self.dir.exists():
            for pid_file in self.dir.glob("*/sshd.pid"):
                with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                    os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        if self.slot:
            prefix = f"nnix{self.slot}h"
            for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
                ns = line.split()[0] if line.split() else ""
                if ns.startswith(prefix) and ns[len(prefix):].isdigit():
                    _run("ip", "link", "del", self._veth(int(ns[len(prefix):])), check=False)
                    _run("ip", "netns", "del", ns, check=False)
        if self.slot:
            _run("ip", "link", "del", f"nnixbr{self.slot}", check=False)
            others = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
            if "nnixbr" not in others:
                _run("ip", "route", "del", "unreachable", f"{SUBNET}.0.0/16", "metric", "4000", check=False)
        if self.user:
            self.kill_user_processes()
            _run("userdel", "-r", self.user, check=False)
        if self.dir and self.dir != Path() and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.hosts = []
        self.loopback = None

    def user_pids(self) -> list[int]:
        """Processes of the lab user (all of them were started by tests through this lab)."""
        if not self.user:
            return []
        try:
            import pwd

            uid = pwd.getpwnam(self.user).pw_uid
        except KeyError:
            return []
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid != uid:
                        continue
                    stat = Path(f"/proc/{name}/stat").read_bytes()
                except OSError:
                    continue
                if stat[stat.rfind(b")") + 2 :][:1] != b"Z":  # zombies wait for a (slow) init to reap them
                    pids.append(int(name))
        return pids

    def kill_user_processes(self) -> None:
        for pid in self.user_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.user_pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    def agent_pids(self, contains: str = "") -> list[int]:
        """Pids of ``python -m nnix.agent`` processes of the lab user (whose command line contains ``contains``)."""
        out = []
        for pid in self.user_pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"nnix.agent" in cmd.split(b"\0") and contains.encode() in cmd:
                out.append(pid)
        return out

    def restore_links(self) -> None:
        for h in self.hosts:
            h.link(True)

    # --- internals -----------------------------------------------------------------------------
    def _ns(self, i: int) -> str:
        return f"nnix{self.slot}h{i}"

    def _veth(self, i: int) -> str:
        return f"nnix{self.slot}v{i}"

    def _claim_slot(self) -> None:
        # one lock file, held only while choosing: a bridge name marks a slot as taken
        self.slot = claim_bridge_slot(LOCK, "nnixbr", "SSH", before=lambda: _reap_stale_labs(self.base))
        self.user = f"nnixlab{self.slot}"
        self.dir = self.base / f"nnix-sshlab-{self.slot}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700, parents=True)
        (self.dir / "owner").write_text(f"{os.getpid()}\n")

    def _make_user_and_keys(self) -> None:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key_file))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / "host_ed25519"))
        if _run("id", self.user, check=False).returncode != 0:
            _run("useradd", "-m", "-s", "/bin/bash", self.user)
        _run("usermod", "-p", "*", self.user)  # no password, but not locked (sshd refuses locked accounts)
        ssh_dir = self.home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        shutil.copy(self.key_file.with_suffix(".pub"), ssh_dir / "authorized_keys")
        _run("chown", "-R", f"{self.user}:{self.user}", str(ssh_dir))
        os.chmod(ssh_dir / "authorized_keys", 0o600)
        Path("/run/sshd").mkdir(exist_ok=True)

    def _sshd_config(self, d: Path, listen: str, port: int, host_key: Path) -> Path:
        cfg = d / "sshd_config"
        cfg.write_text(
            f"ListenAddress {listen}\nPort {port}\nHostKey {host_key}\nPidFile {d / 'sshd.pid'}\n"
            "AuthorizedKeysFile .ssh/authorized_keys\nPermitRootLogin no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PrintMotd no\nAllowTcpForwarding yes\nMaxStartups 100\nMaxSessions 100\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        )
        _run(SSHD, "-t", "-f", str(cfg))
        return cfg

    def _start_loopback(self) -> None:
        port = free_port()
        d = self.dir / "loopback"
        d.mkdir()
        cfg = self._sshd_config(d, "127.0.0.1", port, self.dir / "host_ed25519")
        _run(SSHD, "-f", str(cfg), "-E", str(d / "sshd.log"))
        self.loopback = SshHost("loopback", "127.0.0.1", port, self.user, self.key_file, self.known_hosts,
                                None, d / "sshd.pid")

    def _make_bridge(self) -> None:
        br = f"nnixbr{self.slot}"
        routes = _run("ip", "route", "show", check=False).stdout
        if f"unreachable {SUBNET}.0.0/16" not in routes:  # never let the test network leak to eth0
            _run("ip", "route", "add", "unreachable", f"{SUBNET}.0.0/16", "metric", "4000", check=False)
        _run("ip", "addr", "add", f"{SUBNET}.{self.slot}.1/24", "dev", br)
        _run("ip", "link", "set", br, "up")

    def _start_namespace_host(self, i: int) -> None:
        ns, veth, ip = self._ns(i), self._veth(i), f"{SUBNET}.{self.slot}.{10 + i}"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", veth, "master", f"nnixbr{self.slot}", "up")
        _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", f"{SUBNET}.{self.slot}.1")
        d = self.dir / ns
        d.mkdir()
        key = d / "host_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        cfg = self._sshd_config(d, ip, 22, key)
        _run("ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
             f"hostname {ns} && exec {SSHD} -f {cfg} -E {d / 'sshd.log'}")
        self.hosts.append(SshHost(ns, ip, 22, self.user, self.key_file, self.known_hosts, ns, d / "sshd.pid"))

    def _wait_and_scan(self) -> None:
        assert self.loopback is not None
        lines: list[str] = []
        for h in [self.loopback, *self.hosts]:
            deadline = time.monotonic() + 20
            while True:
                r = _run("ssh-keyscan", "-T", "2", "-t", "ed25519", "-p", str(h.port), h.host, check=False)
                if r.returncode == 0 and r.stdout.strip():
                    lines.append(r.stdout.strip())
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {h.host}:{h.port} did not come up: {r.stderr.strip()}")
                time.sleep(0.1)
        self.known_hosts.write_text("\n".join(lines) + "\n")
