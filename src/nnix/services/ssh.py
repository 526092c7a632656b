"""SSH, and only SSH: the launcher of the remote training service (:mod:`nnix.services.remote`).

:class:`SshLauncher` is a :class:`~nnix.services.launcher.Launcher` with the optional capability *a fixed list of
machines* (:class:`~nnix.services.launcher.HostLauncher`: ``hosts``, one :class:`SshHost` per machine of
``machineList``); :class:`~nnix.services.cluster.ClusterService` keeps the fleet (agents, trials, machine states,
lost hosts, GPU rules: :mod:`nnix.services.hosts`). Per machine it

* connects (asyncssh; host keys checked against ``knownHostsFile`` unless ``trustUnknownHosts``: ``open``; the
  link is the SSH connection, ``closed`` when it ends), runs commands with a timeout, and drops the connection;
* ``setup``: finds Python (``pythonPath`` first; 3.10 or newer), installs the manager's nnix build into a
  content-addressed venv from uploaded wheels, unpacks the trial code, opens the *reverse port forward* (the
  agent's ``127.0.0.1:<port>`` on the worker is the manager's loopback agent endpoint: each machine's agents have
  their own agent URL) and, for non-reuse, probes the GPUs before any agent runs;
* starts environments as a :class:`~nnix.services.cluster.Launcher` does (``launch`` an :class:`EnvRequest`
  whose ``host`` names the machine; the handle is the environment id), reports them (``poll`` and ``ended``: the
  agent's SSH channel), stops them (``stop``: the agent's process killed), and probes a silent one (alive, dead,
  or SSH itself does not answer: :class:`HostError`);
* finds the agents a killed manager left (``find_agents``), points them at the current forward and token
  (``write_connect``, ``wake``), and lists or removes what nnix left under ``remoteWorkDir`` (``leftovers``).

Everything raised is a :class:`HostError` naming the machine (``permanent``: retrying cannot help).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

import asyncssh

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.launcher import EnvRequest, EnvStatus, HostError
from nnix.services.packing import CodeArchive, build_wheels, pack_code
from nnix.version import __version__

if TYPE_CHECKING:
    from nnix.config import RemoteMachineConfig

__all__ = ["HostError", "SshHost", "SshLauncher"]

log = logging.getLogger("nnix.services.remote")

MIN_PYTHON = (3, 10)
_PROBE = (
    "import sys, os, json; print(json.dumps({'exe': sys.executable, 'version': list(sys.version_info[:3]), "
    "'home': os.path.expanduser('~')}))"
)


def _q(s: str) -> str:
    return shlex.quote(s)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


@dataclass(eq=False, kw_only=True)
class SshHost:
    """One machine of ``machineList`` as SSH sees it: the connection, its reverse forward, where nnix lives there."""

    index: int
    cfg: RemoteMachineConfig
    conn: asyncssh.SSHClientConnection | None = None
    sftp: asyncssh.SFTPClient | None = None
    listener: asyncssh.SSHListener | None = None
    remote_port: int = 0
    python: str = ""
    root: str = ""
    venv: str = ""
    code_dir: str = ""

    @property
    def label(self) -> str:
        return f"{self.cfg.user}@{self.cfg.host}:{self.cfg.port}"

    @property
    def key(self) -> str:
        return self.cfg.host if self.cfg.port == 22 else f"{self.cfg.host}:{self.cfg.port}"

    @property
    def dir_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.cfg.host}_{self.cfg.port}")

    @property
    def gpu_rules(self) -> dict[str, Any]:
        """Its GPU rules (``gpuIndices``, ``maxTrialNumberPerGpu``, ``useActiveGpu``) as GpuScheduler keywords."""
        return {"gpu_indices": self.cfg.gpu_indices, "max_trial_number_per_gpu": self.cfg.max_trial_number_per_gpu,
                "use_active_gpu": self.cfg.use_active_gpu}

    def env_dir(self, env_id: str) -> str:
        """Where environment ``env_id`` keeps its connect file, pid and log on the machine."""
        return f"{self.root}/envs/{env_id}"


@dataclass(eq=False)
class _Agent:
    host: SshHost
    process: asyncssh.SSHClientProcess[Any]


class SshLauncher:
    """SSH for the remote service (see the module docstring)."""

    kind = "remote"
    advertise_host: str | None = "127.0.0.1"  # agents reach the manager through their machine's reverse forward
    shares_files = False  # trial files stay on the machines: agents stream stdout/stderr

    def __init__(
        self,
        hosts: Sequence[SshHost],
        *,
        experiment_id: str,
        stage_dir: Path | None,
        code_dir: Path,
        reuse: bool = True,
        trust_unknown_hosts: bool = False,
        known_hosts_file: Path | None = None,
        remote_work_dir: str = "~/nnix-experiments",
        connect_timeout: float = 10.0,
        keepalive_interval: float = 15.0,
        lost_policy: Literal["fail", "requeue"] = "fail",
    ) -> None:
        self._hosts = list(hosts)
        self.lost_policy = lost_policy  # lostHostPolicy (the Launcher's optional lost_policy)
        self._experiment_id = experiment_id
        self._stage = stage_dir
        self._code_dir = Path(code_dir)
        self._reuse = reuse
        self._trust = trust_unknown_hosts
        self._known_hosts = known_hosts_file or Path.home() / ".ssh" / "known_hosts"
        self._work_dir = remote_work_dir
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_interval
        self._wheels: list[Path] = []
        self._wheel_digest = ""
        self._archive: CodeArchive | None = None
        self._agents: dict[str, _Agent] = {}

    # --- the Launcher contract (nnix.services.cluster) -----------------------------------------------
    async def prepare(self) -> None:
        """Stage what every machine gets: the wheels of this nnix build and the trial code archive."""
        ssh_log = logging.getLogger("asyncssh")
        if ssh_log.level == logging.NOTSET:  # asyncssh logs every channel at INFO: keep its warnings only
            ssh_log.setLevel(logging.WARNING)
        if self._stage is None:
            raise ServiceError("the remote service needs its experiment's id and directory (a ServiceContext)")
        self._wheels, self._wheel_digest = await asyncio.to_thread(build_wheels, self._stage / "wheels")
        self._archive = await asyncio.to_thread(pack_code, self._code_dir, self._stage / "code.tar.gz")
        if self._trust:
            log.warning("trustUnknownHosts is true: hosts missing from %s are accepted without verifying their key",
                        self._known_hosts)

    async def launch(self, request: EnvRequest) -> str:
        """Start an agent for ``request`` on machine ``request.host`` (an index of ``machineList``), pointed at that
        machine's forward by its connect file (mode 0600: the token is on no command line). Returns the handle (the
        environment id); raises :class:`HostError` when it cannot start."""
        if request.host is None or not 0 <= request.host < len(self._hosts):
            raise ServiceError(f"environment {request.env_id}: no machine named for it",
                               "the remote service chooses the machine (EnvRequest.host)")
        m = self._hosts[request.host]
        if m.conn is None:
            raise HostError(f"no SSH connection to {m.label}")
        env_dir = m.env_dir(request.env_id)
        await self.write_connect(m, request.env_id, request.token)
        args = [self.venv_python(m), "-m", "nnix.agent", "--connect-file", f"{env_dir}/agent.json",
                *request.agent_options, *(["--single"] if request.single else [])]
        command = (f"cd {_q(m.code_dir)} && {self.path_prefix(m)}exec {' '.join(_q(a) for a in args)} "
                   f">> {_q(env_dir + '/agent.log')} 2>&1 < /dev/null")
        try:
            process = await m.conn.create_process(command)
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot start the agent on {m.label}: {e}") from e
        self._agents[request.env_id] = _Agent(m, process)
        return request.env_id

    async def ended(self, handle: str) -> EnvStatus:
        """When the agent started as ``handle`` ended: its exit status or signal; ``unknown`` when its channel closed
        without either (the connection went away, not necessarily the agent) or this launcher did not start it."""
        agent = self._agents.get(handle)
        if agent is None:
            return EnvStatus("unknown")
        result = await agent.process.wait()
        status, sig = getattr(result, "exit_status", None), getattr(result, "exit_signal", None)
        if sig:
            return EnvStatus("ended", f"signal {sig[0]}", killed=True, exit_status=status)
        if status is None:
            return EnvStatus("unknown")
        return EnvStatus("ended", f"exit status {status}", exit_status=status)

    def process(self, handle: str) -> asyncssh.SSHClientProcess[Any] | None:
        """The SSH channel of the agent started as ``handle`` (None: not started by this launcher)."""
        agent = self._agents.get(handle)
        return agent.process if agent is not None else None

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        """From each agent's SSH channel: running, or ended with its exit status or signal."""
        out: dict[str, EnvStatus] = {}
        for h in handles:
            agent = self._agents.get(h)
            if agent is None:
                out[h] = EnvStatus("unknown")
                continue
            p = agent.process
            if p.exit_signal is not None:
                out[h] = EnvStatus("ended", f"signal {p.exit_signal[0]}", killed=True)
            elif p.exit_status is not None:
                out[h] = EnvStatus("ended", f"exit status {p.exit_status}")
            else:
                out[h] = EnvStatus("running")
        return out

    async def stop(self, handle: str) -> None:
        """Kill the agent (SIGKILL, by its pid file; its trials are process groups of their own and keep running).
        Best effort; nothing for a handle this launcher did not start."""
        agent = self._agents.pop(handle, None)
        if agent is not None:
            pid_file = _q(agent.host.env_dir(handle) + "/agent.pid")
            with contextlib.suppress(HostError):
                await self.run(agent.host, f"p=$(cat {pid_file} 2>/dev/null) && kill -9 \"$p\" 2>/dev/null; true",
                               timeout=5)

    async def kill(self, m: SshHost, pid: int) -> None:
        """SIGKILL to process ``pid`` on the machine (an agent alive but stuck). Best effort."""
        with contextlib.suppress(HostError):
            await self.run(m, f"kill -9 {pid} 2>/dev/null; true", timeout=5)

    def forget(self, handle: str) -> None:
        """``handle`` ended or was replaced: nothing more to know of it."""
        self._agents.pop(handle, None)

    def place(self, spec: TrialSpec, host: SshHost | None = None) -> TrialSpec:
        """``spec`` as the agent on ``host`` runs it: in the machine's code copy, writing to ``trials/<trial>``."""
        if host is None:
            return spec
        return replace(spec, code_dir=Path(host.code_dir), output_dir=Path(f"{host.root}/trials/{spec.trial_id}"))

    def output_location(self, spec: TrialSpec, host: SshHost | None = None) -> str:
        """Where the trial's files are, as the manager records it: ``<host>[:<port>]:<path>``."""
        return f"{host.key}:{host.root}/trials/{spec.trial_id}" if host is not None else ""

    async def close(self) -> None:
        for m in self._hosts:
            self.drop(m)
        self._agents.clear()

    # --- the machine: connect, set up, probe -----------------------------------------------------------
    @property
    def hosts(self) -> list[SshHost]:
        """The machines of ``machineList`` (the optional Launcher capability of a fixed list of machines)."""
        return self._hosts

    async def open(self, m: SshHost) -> object:
        """Connect to ``m``; the link returned is the SSH connection."""
        m.conn = await self.connect(m)
        return m.conn

    async def closed(self, m: SshHost, link: object) -> bool:
        """When the connection ``link`` (from :meth:`open`) ended: whether it was still ``m``'s connection."""
        assert isinstance(link, asyncssh.SSHClientConnection)
        await link.wait_closed()
        return m.conn is link

    def connected(self, m: SshHost) -> bool:
        return m.conn is not None and not m.conn.is_closed()

    def disconnect(self, m: SshHost) -> None:
        """Break the connection (the service notices it through :meth:`closed` and reconnects)."""
        if m.conn is not None:
            m.conn.abort()

    def agent_url(self, m: SshHost) -> str:
        """Where the machine's agents reach the manager: the reverse forward's end on the worker."""
        return f"http://127.0.0.1:{m.remote_port}"

    def describe(self, m: SshHost) -> str:
        return f"{m.python}, work dir {m.root}"

    def drop(self, m: SshHost) -> None:
        if m.listener is not None:
            m.listener.close()
        if m.sftp is not None:
            m.sftp.exit()
        if m.conn is not None:
            m.conn.abort()
        m.conn, m.sftp, m.listener = None, None, None

    def _known_hosts_for(self, m: SshHost) -> Any:
        kh = self._known_hosts
        if not self._trust:
            if not kh.is_file():
                raise HostError(
                    f"cannot verify the host key of {m.label}: {kh} does not exist",
                    f"add the host's key (ssh-keyscan -p {m.cfg.port} {m.cfg.host} >> {kh}, then check its "
                    "fingerprint), or set knownHostsFile, or trustUnknownHosts: true (not verified)",
                    permanent=True,
                )
            return str(kh)
        if kh.is_file():
            try:
                db = asyncssh.read_known_hosts(str(kh))
                try:
                    ipaddress.ip_address(m.cfg.host)
                    addr = m.cfg.host
                except ValueError:
                    addr = ""
                if db.match(m.cfg.host, addr, m.cfg.port)[0]:
                    return db  # listed: verified, so a changed key is refused even with trustUnknownHosts
            except (OSError, ValueError, asyncssh.Error) as e:
                log.warning("cannot read %s: %s", kh, e)
        log.warning("host key of %s is not verified (trustUnknownHosts)", m.label)
        return None

    async def connect(self, m: SshHost) -> asyncssh.SSHClientConnection:
        cfg = m.cfg
        options: dict[str, Any] = {
            "port": cfg.port,
            "username": cfg.user,
            "known_hosts": self._known_hosts_for(m),
            "connect_timeout": self._connect_timeout,
            "keepalive_interval": self._keepalive,
            "keepalive_count_max": 3,
            "agent_path": None,
            # AES-GCM first: hardware-accelerated on both ends, and cheaper per packet in asyncssh than
            # chacha20-poly1305 (its default); the agent channel sends many small packets
            "encryption_algs": ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                                "aes256-ctr", "aes192-ctr", "aes128-ctr"],
        }
        key: Path | None = None
        if cfg.password is not None:
            options.update(password=cfg.password.get_secret_value(), client_keys=None,
                           preferred_auth="password,keyboard-interactive")
        else:
            key = cfg.ssh_key_file or Path.home() / ".ssh" / "id_rsa"
            if not key.is_file():
                raise HostError(f"SSH key file {key} for {m.label} does not exist",
                                "set sshKeyFile (or password) for this machine", permanent=True)
            options["client_keys"] = [str(key)]
            if cfg.ssh_passphrase is not None:
                options["passphrase"] = cfg.ssh_passphrase.get_secret_value()
        try:
            return await asyncssh.connect(cfg.host, **options)
        except asyncssh.PermissionDenied as e:
            how = "password" if cfg.password is not None else f"key {key}"
            raise HostError(f"{m.label} refused the login of user {cfg.user!r} with {how}: {e.reason}",
                            "check user, sshKeyFile/sshPassphrase or password for this machine",
                            permanent=True) from e
        except asyncssh.HostKeyNotVerifiable as e:
            raise HostError(
                f"host key of {m.label} is not trusted: it is not listed in {self._known_hosts} or differs from "
                f"the listed key; refusing to connect ({e.reason})",
                f"if the host is new, add its key (ssh-keyscan -p {cfg.port} {cfg.host} >> {self._known_hosts}) "
                f"after checking the fingerprint; if its key changed on purpose, remove the old one "
                f"(ssh-keygen -R {cfg.host})",
                permanent=True,
            ) from e
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
            raise HostError(f"cannot load SSH key {key} for {m.label}: {e}",
                            "check sshKeyFile and sshPassphrase", permanent=True) from e
        except (OSError, TimeoutError, asyncssh.Error) as e:
            text = getattr(e, "reason", "") or str(e) or type(e).__name__
            if isinstance(e, TimeoutError):
                text = f"no answer in {self._connect_timeout:g} s"
            raise HostError(f"cannot reach {m.label}: {text}",
                            "check host and port, that sshd runs there, and the network") from e

    async def run(self, m: SshHost, command: str, timeout: float = 120.0) -> asyncssh.SSHCompletedProcess:
        if m.conn is None:
            raise HostError(f"no SSH connection to {m.label}")
        try:
            result = await asyncio.wait_for(m.conn.run(command, check=False), timeout)
        except (OSError, TimeoutError, asyncssh.Error) as e:
            raise HostError(f"command on {m.label} failed: {getattr(e, 'reason', '') or e or type(e).__name__}") from e
        if result.exit_status is None and result.exit_signal is None:
            # the channel closed without the command's end: the connection went away under it (a network cut), which
            # says nothing about the machine; its output, if any, is cut short (transient: the machine is tried again)
            raise HostError(f"the SSH connection to {m.label} was lost while a command ran there",
                            "check the network to the machine; nnix reconnects by itself")
        return result


    def path_prefix(self, m: SshHost) -> str:
        return f"export PATH={_q(m.cfg.python_path)}:\"$PATH\"; " if m.cfg.python_path else ""


    async def setup(self, m: SshHost, port: int) -> dict[str, Any] | None:
        """Make a connected machine ready for agents: Python, the venv, the code, the reverse forward to the agent
        endpoint on ``port`` here; non-reuse: the GPUs (the resources the agent probe reports, else None)."""
        assert self._archive is not None
        r = await self.run(m, self.path_prefix(m) + "for p in python3 python; do command -v \"$p\" >/dev/null 2>&1 "
                           f"&& exec \"$p\" -c {_q(_PROBE)}; done; echo \"no python3 or python on PATH ($PATH)\" >&2; "
                           "exit 127")
        try:
            info = json.loads(_text(r.stdout).strip().splitlines()[-1])
            version = tuple(int(x) for x in info["version"])
        except (ValueError, IndexError, KeyError, TypeError):
            detail = _text(r.stderr).strip() or _text(r.stdout).strip()
            # permanent only for a definite answer: no Python found (127), or one that ran and said something else
            definite = bool(detail) and r.exit_status in (0, 127)
            raise HostError(f"no usable Python on {m.label}: {detail or f'exit status {r.exit_status}'}",
                            "install Python >= 3.10 there or set pythonPath for this machine",
                            permanent=definite) from None
        if version < MIN_PYTHON:
            raise HostError(
                f"{m.label} has Python {'.'.join(map(str, version))} ({info['exe']}); nnix needs Python >= "
                f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} on workers",
                "set pythonPath for this machine to a directory holding a newer python3", permanent=True)
        m.python = str(info["exe"])
        work = self._work_dir
        if work == "~" or work.startswith("~/"):
            work = str(info["home"]) + work[1:]
        m.root = str(PurePosixPath(work) / self._experiment_id / m.dir_name)
        interpreter = hashlib.sha256(m.python.encode()).hexdigest()[:8]
        m.venv = str(PurePosixPath(work) / "venvs" /
                     f"nnix-{__version__}-{self._wheel_digest}-py{version[0]}{version[1]}-{interpreter}")
        assert m.conn is not None
        try:
            m.sftp = await m.conn.start_sftp_client()
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot open SFTP on {m.label}: {e}") from e
        await self._install(m)
        # the reverse forward: the agent's 127.0.0.1:<remote_port> on the worker is our agent endpoint
        try:
            m.listener = await m.conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", port)
        except (OSError, asyncssh.Error) as e:
            if not self.connected(m):  # the connection went away, the forward was not refused
                raise HostError(f"the SSH connection to {m.label} was lost while opening the reverse port forward: "
                                f"{e}") from e
            raise HostError(f"{m.label} refused the reverse port forward: {e}",
                            "allow TCP forwarding in the worker's sshd (AllowTcpForwarding yes)",
                            permanent=True) from e
        m.remote_port = m.listener.get_port()
        if self._reuse:  # in reuse mode the agent's hello tells the GPUs
            return None
        probe = await self.run(m, self.path_prefix(m) + f"{_q(self.venv_python(m))} -m nnix.agent --probe")
        try:
            resources: dict[str, Any] = json.loads(_text(probe.stdout).strip().splitlines()[-1])["resources"]
        except (ValueError, IndexError, KeyError, TypeError):
            raise HostError(f"the nnix agent does not run on {m.label}: "
                            f"{_text(probe.stderr).strip()[-500:]}", permanent=True) from None
        return resources

    async def find_agents(self, m: SshHost) -> list[tuple[str, int]]:
        """``(environment id, pid)`` of every live agent of this experiment on the machine (a killed manager's)."""
        r = await self.run(
            m, f"for d in {_q(m.root)}/envs/*/; do [ -f \"$d/agent.pid\" ] || continue; p=$(cat \"$d/agent.pid\"); "
               "kill -0 \"$p\" 2>/dev/null && { [ ! -r /proc/$p/cmdline ] || grep -qa nnix.agent /proc/$p/cmdline; } "
               "&& echo \"$(basename \"$d\") $p\"; done; true")
        found: list[tuple[str, int]] = []
        for line in _text(r.stdout).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                found.append((parts[0], int(parts[1])))
        return found

    async def wake(self, m: SshHost, pids: Sequence[int]) -> None:
        """SIGUSR1: the agents read their connect file again (a new port and token)."""
        if pids:
            await self.run(m, "kill -USR1 " + " ".join(str(p) for p in pids) + " 2>/dev/null; true")

    async def probe(self, m: SshHost, env_id: str, pid: int | None, timeout: float) -> int | None:
        """The pid of environment ``env_id``'s agent if it is alive, else None; :class:`HostError` when SSH does not
        answer within ``timeout`` (the host is gone, not only the agent)."""
        pid_file = _q(m.env_dir(env_id) + "/agent.pid")
        probe = (f"p={pid or ''}; [ -n \"$p\" ] || p=$(cat {pid_file} 2>/dev/null); "
                 "if [ -n \"$p\" ] && kill -0 \"$p\" 2>/dev/null; then echo \"alive $p\"; else echo dead; fi")
        r = await self.run(m, probe, timeout=timeout)
        words = _text(r.stdout).split()
        return int(words[1]) if len(words) == 2 and words[0] == "alive" and words[1].isdigit() else None

    async def log_tail(self, m: SshHost, env_id: str) -> str:
        """The last lines of an agent's log on the machine (for error messages), or ""."""
        with contextlib.suppress(HostError):
            r = await self.run(m, f"tail -n 5 {_q(m.env_dir(env_id) + '/agent.log')} 2>/dev/null", timeout=10)
            return " | ".join(_text(r.stdout).strip().splitlines())[-600:]
        return ""

    def venv_python(self, m: SshHost) -> str:
        return f"{m.venv}/bin/python"

    async def _install(self, m: SshHost) -> None:
        """The agent's venv and the trial code on the host, each uploaded only when missing.

        The venv is content-addressed (``<remoteWorkDir>/venvs/nnix-<version>-<digest of the code>-py<X.Y>-
        <hash of the interpreter path>``): it holds nothing but this exact nnix build, so experiments using
        the same build share it, and a changed build gets a new one. It is built in a temporary directory
        and renamed into place, so hosts sharing a home directory (NFS) can race safely.
        """
        assert self._archive is not None and m.sftp is not None
        archive = self._archive
        m.code_dir = f"{m.root}/code-{archive.sha256[:12]}"
        marker = f"{m.venv}/.nnix-installed"
        check = await self.run(
            m, f"mkdir -p {_q(m.root)}/envs {_q(m.root)}/trials || exit 3; cat {_q(marker)} 2>/dev/null; echo; "
               f"if test -d {_q(m.code_dir)}; then echo code-ok; fi")
        if check.exit_status != 0:
            raise HostError(f"cannot create {m.root} on {m.label}: {_text(check.stderr).strip()}",
                            "check that remoteWorkDir is writable by this user on the worker", permanent=True)
        lines = _text(check.stdout).split()
        need_venv, need_code = self._wheel_digest not in lines, "code-ok" not in lines
        try:
            if need_venv:
                await m.sftp.makedirs(f"{m.root}/wheels", exist_ok=True)
                await m.sftp.put([str(w) for w in self._wheels], f"{m.root}/wheels")
            if need_code:
                await m.sftp.put(str(archive.path), f"{m.root}/code.tar.gz")
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot upload to {m.label}:{m.root}: {e}",
                            "check that remoteWorkDir is writable by this user on the worker") from e
        if need_venv:
            py, tmp = _q(m.python), _q(f"{m.venv}.tmp-{secrets.token_hex(4)}")
            names = " ".join(_q(w.name) for w in self._wheels)
            # isolated from the worker's pip configuration; never an index: only the uploaded wheels
            pip = f"install -q --isolated --no-index --no-deps --find-links . {names}"
            # the host's own pip installs into the venv's site-packages (--target: one Python start, not
            # two as with --python); without a host pip, the venv gets its own through ensurepip
            script = (
                f"set -e; export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1; "
                f"mkdir -p {_q(str(PurePosixPath(m.venv).parent))}; {py} -m venv --without-pip {tmp}; "
                f"sp=$({tmp}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); "
                f"cd {_q(m.root)}/wheels; if {py} -m pip --version >/dev/null 2>&1; then "
                f"{py} -m pip {pip} --target \"$sp\"; "
                f"else {tmp}/bin/python -m ensurepip -q >/dev/null 2>&1 || "
                "{ echo 'no pip: the host python has no pip and ensurepip does not work' >&2; exit 3; }; "
                f"{tmp}/bin/python -m pip {pip}; fi; "
                f"{tmp}/bin/python -c 'import nnix; print(nnix.__version__)'; "
                f"echo {_q(self._wheel_digest)} > {tmp}/.nnix-installed; "
                f"{py} -c 'import os, shutil, sys\ntry: os.rename(sys.argv[1], sys.argv[2])\n"
                f"except OSError: shutil.rmtree(sys.argv[1])' {tmp} {_q(m.venv)}"
            )
            r = await self.run(m, script, timeout=600)
            out = _text(r.stdout).strip().splitlines()
            if r.exit_status != 0 or __version__ not in out:
                err = _text(r.stderr).strip()[-800:]
                raise HostError(f"installing nnix {__version__} on {m.label} failed: {err or out}",
                                "the worker needs the venv module (Debian: python3-venv) and pip (python3-pip) "
                                "or ensurepip", permanent=True)
        if need_code:
            r = await self.run(m, f"set -e; cd {_q(m.root)}; t=code.tmp-$$; rm -rf $t; mkdir $t; "
                                   f"tar -xzf code.tar.gz -C $t; mv $t {_q(m.code_dir)}; rm -f code.tar.gz")
            if r.exit_status != 0:
                raise HostError(f"cannot unpack the trial code on {m.label}: {_text(r.stderr).strip()}")

    async def write_connect(self, m: SshHost, env_id: str, token: str) -> None:
        """Point agent ``env_id`` on ``m`` at the machine's forward with ``token`` (its connect file, mode 0600)."""
        assert m.sftp is not None
        env_dir = m.env_dir(env_id)
        data = json.dumps({"url": self.agent_url(m), "environment_id": env_id, "token": token})
        tmp = f"{env_dir}/.agent.json.{secrets.token_hex(4)}"
        try:
            await m.sftp.makedirs(env_dir, exist_ok=True)
            async with m.sftp.open(tmp, "w", asyncssh.SFTPAttrs(permissions=0o600)) as f:
                await f.write(data)
            await m.sftp.posix_rename(tmp, f"{env_dir}/agent.json")
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot write the agent's connect file on {m.label}: {e}") from e


    async def _work_dir_on(self, m: SshHost) -> str:
        """``remoteWorkDir`` on the connected machine, ``~`` expanded."""
        work = self._work_dir
        if work == "~" or work.startswith("~/"):
            home = _text((await self.run(m, 'printf %s "$HOME"')).stdout).strip()
            work = home + work[1:]
        return work

    # kills the live agents of the experiment folder $root (SIGKILL: they would retry for a day), the trial process
    # groups named by "<trial> <pid> <start time>" lines on stdin whose process is still the one that started (field
    # 22 of /proc/<pid>/stat), and every process of this user marked with a trial token of the folder
    # (NNIX_TRIAL_TOKEN, nnix.agent.containment: trials written off with a lost host, which the store no longer shows
    # running); SIGTERM first, SIGKILL after 2 s. Prints "agent <env> <pid>", "trial <id> <pid>", "proc <pid>"
    _RECLAIM = (
        'root={root}; for d in "$root"/envs/*/; do [ -f "$d/agent.pid" ] || continue; p=$(cat "$d/agent.pid"); '
        'case "$p" in ""|*[!0-9]*) continue;; esac; kill -0 "$p" 2>/dev/null || continue; '
        'grep -qa nnix.agent "/proc/$p/cmdline" 2>/dev/null || continue; kill -9 "$p" 2>/dev/null && '
        'echo "agent $(basename "$d") $p"; done; groups=""; while read -r t p s; do '
        'case "$p" in ""|*[!0-9]*) continue;; esac; '
        'now=$(cut -d")" -f2- "/proc/$p/stat" 2>/dev/null | awk \'{{print $20}}\'); [ -n "$now" ] && '
        '[ "$now" = "$s" ] || continue; kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; '
        'echo "trial $t $p"; groups="$groups $p"; done; procs=""; '
        'toks=$(cat "$root"/trials/*/.nnix/token 2>/dev/null | grep -E "^[0-9a-f]{{32}}$" | tr "\\n" "|"); '
        'toks=${{toks%|}}; if [ -n "$toks" ]; then for e in /proc/[0-9]*/environ; do p=${{e#/proc/}}; '
        'p=${{p%/environ}}; [ "$p" = $$ ] && continue; tr "\\0" "\\n" < "$e" 2>/dev/null | '
        'grep -qE "^NNIX_TRIAL_TOKEN=($toks)$" || continue; kill -TERM "$p" 2>/dev/null && {{ procs="$procs $p"; '
        'echo "proc $p"; }}; done; fi; [ -n "$groups$procs" ] || exit 0; i=0; while [ $i -lt 20 ]; do left=""; '
        'for p in $groups; do kill -0 -- "-$p" 2>/dev/null && left="$left $p"; done; '
        'for p in $procs; do kill -0 "$p" 2>/dev/null && left="$left $p"; done; '
        '[ -n "$left" ] || exit 0; sleep 0.1; i=$((i+1)); done; '
        'for p in $groups; do kill -KILL -- "-$p" 2>/dev/null; done; '
        'for p in $procs; do kill -KILL "$p" 2>/dev/null; done; exit 0'
    )

    async def reclaim(self, trials: Sequence[Any]) -> list[str]:
        """Without a manager (``nnix stop`` / ``experiment delete`` after the manager died): on each machine, kill
        this experiment's live agents and the ``trials`` (:class:`~nnix.services.base.LeftTrial`) recorded as running
        there. One line per machine where something was done or could not be."""

        async def one(m: SshHost) -> str:
            mine = []
            for t in trials:
                where, _, path = str(t.output_dir).rpartition(":")
                if where == m.key and t.pid and t.pid_start and path:
                    mine.append(f"{t.trial_id} {int(t.pid)} {t.pid_start}")
            try:
                m.conn = await self.connect(m)
                root = f"{await self._work_dir_on(m)}/{self._experiment_id}/{m.dir_name}"
                assert m.conn is not None
                r = await asyncio.wait_for(m.conn.run(self._RECLAIM.format(root=_q(root)), input="\n".join(mine) + "\n",
                                                      check=False), 60)
            except (ServiceError, OSError, TimeoutError, asyncssh.Error) as e:
                why = e.message if isinstance(e, ServiceError) else (str(e) or type(e).__name__)
                return (f"remote {m.label}: could not end what the experiment left there ({why}); its agents give up "
                        "after 24 h without a manager")
            finally:
                self.drop(m)
            words = [line.split() for line in _text(r.stdout).splitlines()]
            agents = sorted(w[1] for w in words if len(w) == 3 and w[0] == "agent")
            killed = sorted(w[1] for w in words if len(w) == 3 and w[0] == "trial")
            procs = {w[1] for w in words if len(w) == 2 and w[0] == "proc"} - {
                w[2] for w in words if len(w) == 3 and w[0] == "trial"}
            if not agents and not killed and not procs:
                return ""
            parts = ([f"{len(agents)} agent(s) ({', '.join(agents)})"] if agents else []) + (
                [f"{len(killed)} trial(s) ({', '.join(killed)})"] if killed else []) + (
                [f"{len(procs)} other trial process(es)"] if procs else [])
            return f"remote {m.label}: killed " + " and ".join(parts)

        return [line for line in await asyncio.gather(*(one(m) for m in self._hosts)) if line]

    # under remoteWorkDir nnix leaves venvs/ (agent venvs) and <experiment id>/<host>_<port>/{envs,trials,...}:
    # only those are listed (a directory is an experiment's when one of its folders has envs/ or trials/)
    _LEFTOVERS = (
        'w={work}; [ -d "$w" ] || exit 0; cd "$w" || exit 3; '
        '[ -d venvs ] && ls -d venvs/nnix-* >/dev/null 2>&1 && echo "$w/venvs"; '
        'for d in */; do d=${{d%/}}; [ "$d" = venvs ] && continue; '
        'for h in "$d"/*/; do if [ -d "$h/envs" ] || [ -d "$h/trials" ]; then echo "$w/$d"; break; fi; done; '
        'done; for f in */*/envs/*/agent.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
        'case "$p" in ""|*[!0-9]*) continue;; esac; kill -0 "$p" 2>/dev/null || continue; '
        'grep -qa nnix.agent "/proc/$p/cmdline" 2>/dev/null && echo "agent $f $p"; done; exit 0'
    )

    async def leftovers(self, remove: bool = False) -> list[tuple[str, list[str], str, list[str]]]:
        """For each machine: ``(label, directories nnix left under remoteWorkDir, problem, live agents)``, an agent
        as ``<environment> (pid <pid>) of experiment <id>`` (one a killed or cut-off manager left: it retries for a
        day); with ``remove`` the agents and their trials are killed and the directories deleted (and remoteWorkDir
        itself when that leaves it empty). Connects, runs, disconnects."""

        async def one(m: SshHost) -> tuple[str, list[str], str, list[str]]:
            try:
                m.conn = await self.connect(m)
                work = await self._work_dir_on(m)
                found = await self.run(m, self._LEFTOVERS.format(work=_q(work)))
                if found.exit_status not in (0, None):
                    return m.label, [], f"cannot list {work}: {_text(found.stderr).strip()}", []
                lines = _text(found.stdout).splitlines()
                paths = [p for p in lines if p.startswith(work + "/")]
                agents, roots = [], set()
                for line in lines:
                    words = line.split()
                    parts = words[1].split("/") if len(words) == 3 and words[0] == "agent" else []
                    if len(parts) == 5:  # <experiment>/<host>/envs/<environment>/agent.pid
                        agents.append(f"{parts[3]} (pid {words[2]}) of experiment {parts[0]}")
                        roots.add(f"{work}/{parts[0]}/{parts[1]}")
                if remove:
                    for root in sorted(roots):  # first the agents, and the trials they ran
                        await self.run(m, self._RECLAIM.format(root=_q(root)) + " < /dev/null", timeout=60)
                    if paths:
                        r = await self.run(m, "rm -rf -- " + " ".join(_q(p) for p in paths)
                                           + f"; rmdir {_q(work)} 2>/dev/null; true")
                        if r.exit_status not in (0, None):
                            return m.label, paths, f"rm failed: {_text(r.stderr).strip()}", agents
                return m.label, paths, "", agents
            except ServiceError as e:
                return m.label, [], e.message, []
            finally:
                self.drop(m)

        return list(await asyncio.gather(*(one(m) for m in self._hosts)))

