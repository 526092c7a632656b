"""A real single-node Slurm for tests and benchmarks (the recipe ``shared/recipes/slurm.sh``, in Python, with
everything private so that neither ``/etc/slurm`` nor a Slurm started by someone else is touched).

One lab is a directory ``/tmp/nnix-slurmlab-<random>`` holding:

* a munge key and a ``munged`` run as the ``munge`` user on a socket of its own (``AuthInfo=socket=...``);
* ``slurm.conf`` naming free ports for slurmctld and slurmd; clients find it through ``$SLURM_CONF``
  (:attr:`SlurmLab.env`), so only processes given that variable talk to this lab;
* ``slurmctld -D`` and ``slurmd -D -N nnixnode`` (foreground, so their pids are ours), one node
  ``nnixnode`` at 127.0.0.1 with ``cpus`` CPUs (``SlurmdParameters=config_overrides``: more than the
  machine has is allowed) and two fake GPUs (``Gres=gpu:2``, no device files), in partition ``debug``;
* with ``accounting`` (when slurmdbd and MariaDB are installed): a private MariaDB on a free 127.0.0.1 port
  and ``slurmdbd -D``, so ``sacct`` answers.

Recipe traps kept in mind: ``DefMemPerCPU`` is set (without it a job without ``--mem`` takes all of the
node's memory and every other job waits); ``KillWait=2`` so that cancelled and timed-out jobs go quickly;
Slurm's time limits have a resolution of one minute and are checked about every 30 s, so a job with a
1-minute limit ends 60–90 s after it starts.

:meth:`SlurmLab.down` cancels the lab's jobs, kills what they left (processes whose environment names this
lab's ``SLURM_CONF``: slurmstepd and everything the jobs started) and the daemons it started, by pid; nothing
is found or killed by name. A lab whose owning process died (a killed test run) is torn down by the next
:meth:`SlurmLab.up`. :func:`unavailable` says in words why a lab cannot run here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nnix.services.rayhead import proc_start
from nnix.testing.labs import free_port

__all__ = ["SlurmLab", "accounting_unavailable", "ensure_installed", "unavailable"]

LOCK = Path("/tmp/nnix-slurmlab.lock")
PREFIX = "nnix-slurmlab-"
NODE = "nnixnode"
PARTITION = "debug"
PACKAGES = ("slurm-wlm", "munge")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
_DAEMONS = ("slurmctld", "slurmd", "munged")
_CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin", "/usr/bin") if (p := Path(d) / name).exists()), None)


def _missing(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if _which(n) is None]


def unavailable() -> str | None:
    """Why a lab cannot be started here, or None when it can (packages may still need :func:`ensure_installed`)."""
    if os.uname().sysname != "Linux":
        return "the Slurm lab needs Linux"
    if os.geteuid() != 0:
        return "the Slurm lab needs root (slurmd runs jobs as root, munged as the munge user)"
    missing = _missing(_DAEMONS + _CLIENTS)
    if missing and (shutil.which("apt-get") is None):
        return f"Slurm is not installed ({', '.join(missing)} missing) and apt-get is not there to install it"
    return None


def accounting_unavailable() -> str | None:
    """Why a lab cannot have accounting (``sacct``) here, or None."""
    missing = _missing(("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacctmgr", "sacct"))
    if missing:
        return (f"accounting needs slurmdbd and MariaDB ({', '.join(missing)} missing; "
                ".ci/engines/slurm.sh installs them)")
    try:
        import pwd

        pwd.getpwnam("mysql")
    except KeyError:
        return "accounting needs the mysql user (from mariadb-server)"
    return None


def ensure_installed(accounting: bool = True) -> None:
    """Install Slurm and munge (and slurmdbd + MariaDB with ``accounting``) with apt-get when missing (root only;
    the same as ``.ci/engines/slurm.sh``). Daemons the packages would start are not started."""
    want = [*PACKAGES, *(ACCOUNTING_PACKAGES if accounting else ())]
    absent = [p for p in want if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if not absent:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True, env=env, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *absent],
                       check=True, capture_output=True, env=env, timeout=900)
    finally:
        if ours:
            policy.unlink(missing_ok=True)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return int(stat[stat.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _pids_with_env(name: str, value: str) -> list[int]:
    """Live processes whose initial environment has ``name=value`` (not this process)."""
    needle = f"{name}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and proc_start(int(entry)) is not None:
            out.append(int(entry))
    return out


def _kill_recorded(pids_file: Path) -> None:
    """SIGKILL the processes listed as ``pid start-time`` lines, when still the same processes."""
    try:
        lines = pids_file.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and proc_start(int(parts[0])) == parts[1]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(parts[0]), signal.SIGKILL)


def _reap_stale_labs(base: Path) -> None:
    """Tear down labs whose owning process died without cleaning up."""
    for d in base.glob(f"{PREFIX}*"):
        try:
            owner, start = (d / "owner").read_text().split()
            if proc_start(int(owner)) == start:
                continue  # alive: not ours to touch
        except (OSError, ValueError):
            if time.time() - d.stat().st_mtime < 60:
                continue  # being set up right now
        for pid in _pids_with_env("SLURM_CONF", str(d / "etc" / "slurm.conf")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _kill_recorded(d / "pids")
        shutil.rmtree(d, ignore_errors=True)


@dataclass
class SlurmLab:
    """A private single-node Slurm (see the module docstring). Use :meth:`up` / :meth:`down`, and give
    :attr:`env` to every process that should talk to it."""

    cpus: int = 2
    accounting: bool | None = None
    """None: with accounting when slurmdbd and MariaDB are installed."""
    min_job_age: int = 300
    """Seconds an ended job stays visible to ``squeue`` (Slurm's ``MinJobAge``)."""
    base: Path = Path("/tmp")
    dir: Path = Path()
    cluster: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # --- public --------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.dir / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs to talk to this lab."""
        return {"SLURM_CONF": str(self.conf)}

    @property
    def partition(self) -> str:
        return PARTITION

    @property
    def node(self) -> str:
        return NODE

    @property
    def log_dir(self) -> Path:
        return self.dir / "log"

    def up(self) -> SlurmLab:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        if self.accounting is not False and accounting_unavailable():
            try:
                ensure_installed(accounting=True)
            except (OSError, subprocess.SubprocessError):
                if self.accounting:
                    raise
        ensure_installed(accounting=False)
        if self.accounting is None:
            self.accounting = accounting_unavailable() is None
        elif self.accounting and accounting_unavailable():
            raise RuntimeError(str(accounting_unavailable()))
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _reap_stale_labs(self.base)
            self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.base))
            (self.dir / "owner").write_text(f"{os.getpid()} {proc_start(os.getpid())}\n")
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        try:
            self.dir.chmod(0o755)
            for sub in ("etc", "state", "spool", "log"):
                (self.dir / sub).mkdir(mode=0o755)
            self.cluster = f"nnix{secrets.token_hex(3)}"
            self.ports = {"slurmctld": free_port(), "slurmd": free_port()}
            self._start_munge()
            if self.accounting:
                self._start_accounting()
            self._write_conf()
            self._start("slurmctld", ["slurmctld", "-D"])
            self._wait(lambda: "UP" in self.run("scontrol", "ping", check=False).stdout, "slurmctld", 30)
            self._start("slurmd", ["slurmd", "-D", "-N", NODE])
            self._wait(self._node_ready, "slurmd", 30)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop everything this lab started; safe to call twice."""
        if self.dir == Path() or not self.dir.exists():
            return
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            ids = self.run("squeue", "-h", "-t", "all", "-o", "%i", check=False).stdout.split()
            if ids:
                self.run("scancel", *ids, check=False)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self.run(
                        "squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i", check=False).stdout.strip():
                    time.sleep(0.2)
        self._kill_leftovers()  # what the jobs left (slurmstepd, agents, trials)
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._kill_leftovers()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = Path()

    def _kill_leftovers(self) -> None:
        """SIGKILL the processes that carry this lab's ``SLURM_CONF`` but are not its daemons (or their own
        helpers, such as slurmctld's slurmscriptd, which the daemons end themselves)."""
        daemons = {p.pid for p in self.procs.values() if p.poll() is None}
        for pid in _pids_with_env("SLURM_CONF", str(self.conf)):
            if pid in daemons or _parent(pid) in daemons:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this lab."""
        return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=timeout,
                              env={**os.environ, **self.env}, stdin=subprocess.DEVNULL)

    def set_min_job_age(self, seconds: int) -> None:
        """Change ``MinJobAge`` (how long ended jobs stay in ``squeue``) of the running lab."""
        self.min_job_age = seconds
        self._write_conf()
        self.run("scontrol", "reconfigure")

    def job_ids(self) -> list[str]:
        """Every job the controller still lists."""
        return self.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()

    # --- internals -----------------------------------------------------------------------------
    def _record(self, proc: subprocess.Popen[bytes]) -> None:
        with open(self.dir / "pids", "a", encoding="utf-8") as f:
            f.write(f"{proc.pid} {proc_start(proc.pid)}\n")

    def _start(self, name: str, argv: list[str], user: str | None = None) -> None:
        log = open(self.log_dir / f"{name}.out", "ab")
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                env={**os.environ, **self.env}, user=user, group=user, start_new_session=True,
            )
        finally:
            log.close()
        self.procs[name] = proc
        self._record(proc)

    def _wait(self, ready: Callable[[], bool], name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            proc = self.procs.get(name)
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                out = self.log_dir / f"{name}.out"
                tail = out.read_text(errors="replace")[-1500:] if out.exists() else ""
                logs = ["slurmd", "slurmctld"] if name == "slurmd" else [name]
                for extra in sorted(p for n in logs for p in self.log_dir.glob(f"{n}*.log")):
                    tail += "\n" + extra.read_text(errors="replace")[-1500:]
                why = "exited" if proc is not None and proc.poll() is not None else f"not ready in {timeout:g} s"
                raise RuntimeError(f"{name} of the Slurm lab {why}: {tail}")
            time.sleep(0.1)

    def _node_ready(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
        return bool(out) and out[0].rstrip("*") in ("idle", "mixed", "allocated")

    def _start_munge(self) -> None:
        sock_dir, key_dir = self.dir / "munge", self.dir / "munge-key"
        sock_dir.mkdir(mode=0o755)
        key_dir.mkdir(mode=0o700)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        for p in (sock_dir, key_dir, key):
            shutil.chown(p, "munge", "munge")
        key.chmod(0o400)
        sock = sock_dir / "munge.sock"
        self._start("munged", [
            _which("munged") or "munged", "-F", f"--socket={sock}", f"--key-file={key}",
            f"--pid-file={key_dir / 'munged.pid'}", f"--log-file={key_dir / 'munged.log'}",
            f"--seed-file={key_dir / 'munged.seed'}", "--num-threads=2",
        ], user="munge")

        def ready() -> bool:
            return subprocess.run(["munge", "-n", "-S", str(sock)], capture_output=True).returncode == 0

        self._wait(ready, "munged", 15)

    def _start_accounting(self) -> None:
        db = self.dir / "db"
        db.mkdir(mode=0o750)
        shutil.chown(db, "mysql", "mysql")
        self.ports["mariadb"] = free_port()
        self.ports["slurmdbd"] = free_port()
        r = subprocess.run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={db / 'data'}",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {r.stderr[-1500:]}")
        sock = db / "mysqld.sock"
        self._start("mariadbd", [
            _which("mariadbd") or "mariadbd", "--no-defaults", f"--datadir={db / 'data'}", f"--socket={sock}",
            f"--port={self.ports['mariadb']}", "--bind-address=127.0.0.1", f"--pid-file={db / 'mysqld.pid'}",
            "--innodb-buffer-pool-size=32M", "--skip-name-resolve", f"--log-error={self.log_dir / 'mariadbd.log'}",
        ], user="mysql")

        def db_ready() -> bool:
            return subprocess.run(["mariadb", "--no-defaults", "-S", str(sock), "-uroot", "-e", "select 1"],
                                  capture_output=True).returncode == 0

        self._wait(db_ready, "mariadbd", 60)
        password = secrets.token_hex(12)
        sql = ("CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
               f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        subprocess.run(["mariadb", "--no-defaults", "-S", str(sock), "-uroot", "-e", sql], check=True,
                       capture_output=True, timeout=60)
        dbd = self.dir / "etc" / "slurmdbd.conf"
        dbd.write_text(
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={self.dir / 'munge' / 'munge.sock'}\n"
            f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.ports['slurmdbd']}\nSlurmUser=root\n"
            f"PidFile={self.dir / 'slurmdbd.pid'}\nLogFile={self.log_dir / 'slurmdbd.log'}\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={self.ports['mariadb']}\nStorageUser=slurm\nStoragePass={password}\n"
            "StorageLoc=slurm_acct_db\n"
        )
        dbd.chmod(0o600)
        self._write_conf()  # sacctmgr reads slurm.conf to find slurmdbd
        self._start("slurmdbd", ["slurmdbd", "-D"])
        self._wait(lambda: self.run("sacctmgr", "-i", "-n", "show", "cluster", check=False).returncode == 0,
                   "slurmdbd", 60)
        self.run("sacctmgr", "-i", "add", "cluster", self.cluster)

    def _write_conf(self) -> None:
        mem = 4096
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    mem = max(1024, int(line.split()[1]) // 1024 - 1024)
        d = self.dir
        accounting = (
            "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
            f"AccountingStoragePort={self.ports['slurmdbd']}\n"
            f"AccountingStoragePass={d / 'munge' / 'munge.sock'}\n"  # the munge socket for slurmdbd
            if self.accounting else "AccountingStorageType=accounting_storage/none\n"
        )
        fake = d / "dev"  # two fake GPUs: Slurm hands them out, CUDA_VISIBLE_DEVICES names them
        fake.mkdir(exist_ok=True)
        for i in range(2):
            (fake / f"nnixgpu{i}").touch()
        (d / "etc" / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={fake}/nnixgpu[0-1]\n")
        tmp = self.conf.with_suffix(".tmp")
        tmp.write_text(
            f"ClusterName={self.cluster}\n"
            "SlurmctldHost=localhost(127.0.0.1)\n"
            f"SlurmctldPort={self.ports['slurmctld']}\nSlurmdPort={self.ports['slurmd']}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            "AuthType=auth/munge\nCredType=cred/munge\n"
            f"AuthInfo=socket={d / 'munge' / 'munge.sock'}\n"
            f"StateSaveLocation={d / 'state'}\nSlurmdSpoolDir={d / 'spool'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}\nSlurmdLogFile={d / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
            "DefMemPerCPU=512\n"  # without it a job takes all of the node's memory (recipe trap)
            "MpiDefault=none\nReturnToService=2\n"
            "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=1,bf_interval=1\n"
            f"{accounting}"
            "JobAcctGatherType=jobacct_gather/none\n"
            f"MinJobAge={self.min_job_age}\nKillWait=2\nInactiveLimit=0\n"
            "SlurmdParameters=config_overrides\n"
            "GresTypes=gpu\n"
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem} Gres=gpu:2 State=UNKNOWN\n"
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n"
        )
        tmp.replace(self.conf)
