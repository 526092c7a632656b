"""The Slurm training service (``platform: slurm``, new in nnix): each environment is one ``sbatch`` job running
the nnix agent.

The manager runs where the Slurm client commands work (a login node). Each environment is a batch job that
asks for the resources of one trial (``cpusPerTrial``, ``memory``, ``gres`` or ``trialGpuNumber``, plus
``partition``, ``account``, ``qos``, ``timeLimit`` and any ``sbatchOptions``), so Slurm's scheduler decides
where and when trials run: an environment stays *pending* ("Resources: waiting for free resources") until a
node has room. Once it runs, the job's script starts the agent (``<pythonExecutable> -m nnix.agent ...``),
which connects back to the manager and runs trials: one after another in reuse mode, one in non-reuse mode.
Everything else (trials, metrics, kill) is the shared part in :mod:`nnix.services.cluster`.

Storage: a shared file system is assumed (as on nearly every Slurm cluster). Trials run in
``trialCodeDirectory`` and write to ``<sharedWorkingDirectory>/trials/<trial id>`` (default
``<experiment dir>/slurm``), which the manager reads directly. Each environment has a directory
``<sharedWorkingDirectory>/envs/<environment id>`` (mode 0700) with its batch script ``job.sh``, the agent's
log ``agent.log`` (the job's output) and the agent's token in ``token`` (mode 0600). The script reads the token
from that file, so it is neither on a command line (``ps``), nor in the job's submitted environment, nor in the
script Slurm keeps (``scontrol write batch_script``). Jobs are submitted with ``--no-requeue`` (an environment
whose node fails ends with ``NODE_FAIL`` and its trial fails with that reason, rather than the job starting over
unseen); ``sbatchOptions: [--requeue]`` turns that back.

Slurm commands used (the ``slurm`` CLI, any version since 20.11; pyslurm is tied to one Slurm version):
``sbatch --parsable`` to submit, ``squeue -O`` to follow jobs (one call for all of them, every
``engine_poll_interval`` seconds; never a tight loop), ``sacct`` for jobs ``squeue`` has forgotten (it lists
ended jobs for ``MinJobAge``, 300 s by default) when the cluster keeps accounting, ``scancel`` to stop, and
``sinfo`` to check the controller and the partition before the first job. Why ``squeue -O`` and not
``squeue --json``: up to Slurm 23.02 the JSON output ignores every filter (``-j``, ``-u``, ``--me``) and returns
each job of the whole cluster with over a hundred fields, at every poll; ``-O`` returns the five fields needed,
for this user's jobs only, in every supported version.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import pwd
import shlex
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.base import ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig, SlurmConfig

__all__ = ["SlurmLauncher", "SlurmService", "describe_state", "job_script"]

log = logging.getLogger("nnix.services.slurm")

CLIENT_HINT = ("run the manager where the Slurm commands work (a login node of the cluster), or add Slurm's "
               "bin directory to PATH")
# the launcher's options that are the config's fields of the same name (SlurmConfig)
_SAME_NAMED_OPTIONS = {"partition", "account", "qos", "time_limit", "memory", "sbatch_options", "setup_commands"}
_SQUEUE_FIELDS = "JobID:|,State:|,Reason:|,exit_code:|,TimeLimit:|,Name:|"
_SACCT_FIELDS = "JobIDRaw,State,ExitCode,Reason,Timelimit,JobName"

RUNNING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED",
                     "STOPPED"})
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
ENDED = {
    "COMPLETED": "the job finished",
    "FAILED": "the job failed",
    "CANCELLED": "the job was cancelled outside nnix (scancel, or an administrator)",
    "TIMEOUT": "the job reached its Slurm time limit",
    "NODE_FAIL": "the job's node failed",
    "PREEMPTED": "the job was preempted (a job of higher priority needed its resources)",
    "OUT_OF_MEMORY": "the job used more memory than it was given (raise trainingService.memory)",
    "BOOT_FAIL": "the job's node failed to boot",
    "DEADLINE": "the job reached its deadline",
    "REVOKED": "the job was revoked (it ran on another cluster of the federation)",
    "SPECIAL_EXIT": "the job ended with a special exit and is held",
}
PENDING_REASONS = {
    "Resources": "waiting for free resources",
    "Priority": "jobs of higher priority come first",
    "Dependency": "waiting for the jobs it depends on",
    "BeginTime": "its start time has not come yet",
    "JobHeldUser": "held by its user (scontrol release <job id>)",
    "JobHeldAdmin": "held by an administrator",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionTimeLimit": "its time limit is above the partition's maximum: it will never start (lower timeLimit)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "ReqNodeNotAvail": "the nodes it needs are unavailable (down, drained or reserved)",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "its constraints cannot be met by any node",
    "InvalidAccount": "its account is invalid (check trainingService.account)",
    "InvalidQOS": "its QOS is invalid (check trainingService.qos)",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above its QOS's maximum (lower timeLimit)",
    "AssocMaxJobsLimit": "the account's limit of running jobs is reached",
    "QOSMaxJobsPerUserLimit": "the QOS's limit of running jobs per user is reached",
}


# --------------------------------------------------------------------------------------------------
# Words for states


def _exit_status(raw: str, *, wait_status: bool) -> tuple[int | None, int | None]:
    """``(exit code, signal)`` from squeue's raw wait status (``768``) or sacct's ``3:0``."""
    try:
        if wait_status:
            value = int(raw)
            return value >> 8, (value & 0x7F) or None
        code, _, sig = raw.partition(":")
        return int(code), int(sig or 0) or None
    except ValueError:
        return None, None


def describe_state(state: str, reason: str = "", *, exit_code: int | None = None, signal: int | None = None,
                   time_limit: str = "", stopped: bool = False, log_tail: str = "") -> EnvStatus:
    """A Slurm job state (as ``squeue`` / ``sacct`` show it) as an environment status with a reason in words."""
    state = (state.split() or ["UNKNOWN"])[0].upper().rstrip("+")  # sacct: "CANCELLED by 0", "RUNNING+"
    reason = "" if reason in ("None", "(null)", "") else reason
    if state in RUNNING:
        return EnvStatus("running", state if state not in ("RUNNING", "CONFIGURING") else "")
    if state in PENDING:
        code = reason or state
        gloss = PENDING_REASONS.get(code, "")
        return EnvStatus("pending", f"{code}: {gloss}" if gloss else code)
    if state not in ENDED:
        return EnvStatus("ended", f"{state}: {reason}" if reason else state)
    if state == "CANCELLED" and stopped:
        return EnvStatus("ended", "CANCELLED: stopped by nnix", killed=True)
    text = ENDED[state]
    if state == "TIMEOUT" and time_limit and time_limit not in ("UNLIMITED", "Partition_Limit"):
        text += f" ({time_limit})"
    if state in ("FAILED", "COMPLETED") and exit_code:
        text = f"the job exited with status {exit_code}"
    if state == "FAILED" and signal:
        text = f"the job was killed by signal {signal}"
    if state == "FAILED" and log_tail:
        text += f": {log_tail}"
    return EnvStatus("ended", f"{state}: {text}", killed=state not in ("COMPLETED", "FAILED"))


def _last_line(path: Path) -> str:
    """The last meaningful line of an agent log (not the agent's own log records)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------------------------------
# The batch script


def job_script(*, env_dir: Path, argv: Sequence[str], directives: Sequence[str], setup: Sequence[str] = (),
               header: str = "") -> str:
    """The batch script of one environment: ``#SBATCH`` ``directives``, the ``setup`` lines, then the agent
    (``argv``) with its token read from ``<env_dir>/token``."""
    token = shlex.quote(str(env_dir / "token"))
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives)]
    if header:
        lines.append(f"# {header}")
    lines += list(setup)
    lines += [
        f"NNIX_AGENT_TOKEN=\"$(cat {token})\" || {{ echo 'nnix: cannot read the agent token {token}' >&2; exit 1; }}",
        "export NNIX_AGENT_TOKEN",
        "exec " + " ".join(shlex.quote(a) for a in argv),
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# The launcher


@dataclass(frozen=True)
class _Result:
    rc: int
    out: str
    err: str

    @property
    def message(self) -> str:
        """stderr without sbatch's ``sbatch: error:`` prefixes, on one line."""
        parts = []
        for line in self.err.splitlines():
            line = line.strip()
            for prefix in ("sbatch: error: ", "squeue: error: ", "sacct: error: ", "scancel: error: ",
                           "sinfo: error: ", "Batch job submission failed: "):
                line = line.removeprefix(prefix)
            if line and line not in parts:
                parts.append(line)
        return "; ".join(parts) or self.out.strip() or f"exit status {self.rc}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _route_to(host: str) -> str | None:
    """This machine's address on the route to ``host`` (no packet is sent)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return str(s.getsockname()[0])
    return None


def _submit_hint(message: str) -> str:
    low = message.lower()
    if "partition" in low:
        return "check trainingService.partition (`sinfo -s` lists the partitions)"
    if "account" in low or "association" in low:
        return "check trainingService.account (`sacctmgr show assoc user=$USER` lists yours)"
    if "qos" in low:
        return "check trainingService.qos"
    if "time limit" in low:
        return "lower trainingService.timeLimit (the partition or QOS allows less)"
    if "memory" in low:
        return "lower trainingService.memory"
    if "gres" in low or "generic resource" in low or "node configuration" in low:
        return "check trainingService.gres / trialGpuNumber, cpusPerTrial and memory against the nodes (`sinfo -N -l`)"
    return "check the trainingService options (partition, account, qos, timeLimit, memory, gres, sbatchOptions)"


class SlurmLauncher:
    """Environments as Slurm batch jobs (see the module docstring)."""

    kind = "slurm"

    def __init__(
        self,
        *,
        experiment_id: str,
        working_dir: Path,
        python: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | None = None,
        cpus_per_task: int = 1,
        memory: str | None = None,
        gres: str | None = None,
        sbatch_options: Sequence[str] = (),
        setup_commands: Sequence[str] = (),
        command_timeout: float = 60.0,
    ) -> None:
        self.advertise_host: str | None = None
        self._experiment_id = experiment_id
        self._working_dir = working_dir
        self._python = python or sys.executable
        self._partition = partition
        self._directives = [
            "--nodes=1", "--ntasks=1", f"--cpus-per-task={cpus_per_task}", "--no-requeue",
            *([f"--partition={partition}"] if partition else []),
            *([f"--account={account}"] if account else []),
            *([f"--qos={qos}"] if qos else []),
            *([f"--time={time_limit}"] if time_limit else []),
            *([f"--mem={memory}"] if memory else []),
            *([f"--gres={gres}"] if gres else []),
            *sbatch_options,
        ]
        self._setup = list(setup_commands)
        self._timeout = float(command_timeout)
        self._user = pwd.getpwuid(os.getuid()).pw_name
        self._envs: dict[str, str] = {}  # job id -> environment id
        self._stopped: set[str] = set()
        self._sacct: bool | None = None  # None: not tried yet
        self._version = ""

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: ServiceContext | None) -> SlurmLauncher:
        ts = cast("SlurmConfig", config.training_service)
        working_dir = ts.shared_working_directory
        if working_dir is None:
            if context is None:
                raise ServiceError("the slurm service needs a shared working directory",
                                   "set trainingService.sharedWorkingDirectory")
            working_dir = context.experiment_dir / "slurm"
        gres = ts.gres
        if gres is None and config.trial_gpu_number:
            gres = f"gpu:{config.trial_gpu_number}"
        return cls(
            experiment_id=context.experiment_id if context is not None else "standalone",
            working_dir=working_dir,
            python=ts.python_executable,
            gres=gres,
            cpus_per_task=ts.cpus_per_trial,
            **ts.model_dump(include=_SAME_NAMED_OPTIONS),
        )

    # --- views -----------------------------------------------------------------------------------
    @property
    def working_dir(self) -> Path:
        return self._working_dir

    @property
    def directives(self) -> list[str]:
        """The ``#SBATCH`` options of every job (besides its name, output and directory)."""
        return list(self._directives)

    def job_name(self, env_id: str) -> str:
        return f"nnix-{self._experiment_id}-{env_id}"

    def env_dir(self, env_id: str) -> Path:
        return self._working_dir / "envs" / env_id

    def log_path(self, env_id: str) -> Path:
        """The agent's log (the job's output) of environment ``env_id``."""
        return self.env_dir(env_id) / "agent.log"

    # --- the Slurm CLI -----------------------------------------------------------------------------
    async def _cli(self, *argv: str, timeout: float | None = None) -> _Result:
        limit = self._timeout if timeout is None else timeout
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise ServiceError(f"the Slurm command `{argv[0]}` is not installed here", CLIENT_HINT) from None
        except OSError as e:
            raise ServiceError(f"cannot run the Slurm command `{argv[0]}`: {e}", CLIENT_HINT) from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(), limit)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise ServiceError(f"`{' '.join(argv[:2])}` did not answer within {limit:g} s",
                               "the Slurm controller is slow or down; check `sinfo` on this machine") from None
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        return _Result(proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    # --- the Launcher protocol -------------------------------------------------------------------
    async def prepare(self) -> None:
        missing = [c for c in ("sbatch", "squeue", "scancel", "sinfo") if shutil.which(c) is None]
        if missing:
            raise ServiceError(f"platform slurm needs the Slurm commands, and {', '.join(missing)} "
                               f"{'is' if len(missing) == 1 else 'are'} not on this machine's PATH", CLIENT_HINT)
        res = await self._cli("sinfo", "-a", "-h", "-o", "%R|%a")  # -a: hidden partitions too
        if res.rc != 0:
            raise ServiceError(f"the Slurm controller does not answer: {res.message}",
                               "check that `sinfo` works on this machine (slurmctld up, SLURM_CONF, munge running)")
        partitions = {}
        for line in res.out.splitlines():
            name, _, avail = line.strip().partition("|")
            if name:
                partitions[name] = avail
        if self._partition is not None:
            wanted = [p for p in self._partition.split(",") if p]
            unknown = [p for p in wanted if p not in partitions]
            if unknown:
                raise ServiceError(
                    f"Slurm has no partition {', '.join(repr(p) for p in unknown)}",
                    f"set trainingService.partition to one of: {', '.join(sorted(partitions)) or '(none)'}",
                )
            down = [p for p in wanted if partitions[p] not in ("up", "")]
            if down:
                log.warning("Slurm partition %s is %s: jobs will wait until it is up", ", ".join(down),
                            ", ".join(partitions[p] for p in down))
        elif not partitions:
            raise ServiceError("Slurm lists no partition", "ask the cluster's administrators")
        ver = await self._cli("sinfo", "-V")
        self._version = ver.out.strip()
        self.advertise_host = await self._advertise()
        try:
            await asyncio.to_thread(self._make_dirs)
        except OSError as e:
            raise ServiceError(f"cannot create the shared working directory {self._working_dir}: {e}",
                               "set trainingService.sharedWorkingDirectory to a writable directory that the "
                               "nodes see at the same path") from e
        if os.path.isabs(self._python) and not os.path.exists(self._python):
            log.warning("pythonExecutable %s does not exist on this machine; it must exist on the nodes",
                        self._python)
        log.info("Slurm %s ready; jobs: %s", self._version or "(unknown version)", " ".join(self._directives))

    def _make_dirs(self) -> None:
        for sub in ("envs", "trials"):
            (self._working_dir / sub).mkdir(parents=True, exist_ok=True)

    async def _advertise(self) -> str | None:
        """Loopback when every node of the partition is this machine's loopback (a single-machine cluster), so
        the manager listens on 127.0.0.1 only; else this machine's address on the route to the nodes."""
        argv = ["sinfo", "-h", "-N", "-o", "%N|%o"]
        if self._partition:
            argv += ["-p", self._partition]
        res = await self._cli(*argv)
        addrs = []
        for line in res.out.splitlines() if res.rc == 0 else []:
            name, _, addr = line.strip().partition("|")
            if name:
                addrs.append(addr or name)
        if addrs and all(_is_loopback(a) for a in addrs):
            return "127.0.0.1"
        for a in addrs[:3]:
            via = await asyncio.to_thread(_route_to, a)
            if via and not _is_loopback(via):
                return via
        return None

    async def launch(self, request: EnvRequest) -> str:
        env_dir = self.env_dir(request.env_id)
        argv = [self._python, *request.agent_args()]
        script = job_script(
            env_dir=env_dir, argv=argv, directives=self._directives, setup=self._setup,
            header=f"nnix environment {request.env_id} of experiment {self._experiment_id}",
        )

        def write() -> Path:
            env_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(env_dir / "token", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(request.agent_env()["NNIX_AGENT_TOKEN"])
            path = env_dir / "job.sh"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(script)
            return path

        try:
            path = await asyncio.to_thread(write)
        except OSError as e:
            raise ServiceError(f"cannot write the job script in {env_dir}: {e}",
                               "set trainingService.sharedWorkingDirectory to a writable directory") from e
        res = await self._cli(
            "sbatch", "--parsable", f"--job-name={self.job_name(request.env_id)}",
            f"--output={self.log_path(request.env_id)}", "--open-mode=append", f"--chdir={env_dir}", str(path),
        )
        job_id = res.out.strip().split(";")[0] if res.rc == 0 else ""
        if not job_id.isdigit():
            message = res.message if res.rc != 0 else f"unexpected answer {res.out.strip()!r}"
            raise ServiceError(f"Slurm refused the job of environment {request.env_id}: {message}",
                               _submit_hint(message))
        self._envs[job_id] = request.env_id
        return job_id

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        if not handles:
            return {}
        res = await self._cli("squeue", "-h", "-t", "all", "-u", self._user, "-O", _SQUEUE_FIELDS)
        if res.rc != 0:
            log.warning("squeue failed: %s", res.message)
            return {h: EnvStatus("unknown", f"squeue failed: {res.message}") for h in handles}
        found = self._parse(res.out, set(handles), accounting=False)
        missing = [h for h in handles if h not in found]
        if missing:
            found.update(await self._from_sacct(missing))
        for h in handles:
            if h not in found:
                found[h] = EnvStatus("ended", "gone: Slurm no longer lists the job (it ended more than MinJobAge "
                                              "ago, and the cluster keeps no accounting to say how)")
            if found[h].state == "ended":
                self._forget(h)
        return found

    def _status(self, job: str, state: str, reason: str, code: int | None, sig: int | None, limit: str,
                name: str) -> EnvStatus:
        prefix = f"nnix-{self._experiment_id}-"
        if job not in self._envs and name.startswith(prefix):  # a job of an earlier manager (resume)
            self._envs[job] = name[len(prefix):]
        env_id = self._envs.get(job)
        tail = ""
        if env_id and state.split()[:1] == ["FAILED"]:
            tail = _last_line(self.log_path(env_id))
        return describe_state(state, reason, exit_code=code, signal=sig, time_limit=limit,
                              stopped=job in self._stopped, log_tail=tail)

    async def _from_sacct(self, jobs: list[str]) -> dict[str, EnvStatus]:
        """Jobs ``squeue`` no longer lists, from accounting (when the cluster keeps it)."""
        if self._sacct is False or shutil.which("sacct") is None:
            return {}
        try:
            res = await self._cli("sacct", "-n", "-P", "-X", "-j", ",".join(jobs), "-o", _SACCT_FIELDS)
        except ServiceError as e:
            log.warning("sacct failed: %s", e.message)
            return {}
        if res.rc != 0:
            if "accounting storage is disabled" in res.err.lower() or "not running a supported" in res.err.lower():
                self._sacct = False
                log.info("this Slurm keeps no accounting (sacct): jobs ended longer than MinJobAge ago are 'gone'")
            else:
                log.warning("sacct failed: %s", res.message)
            return {}
        self._sacct = True
        return self._parse(res.out, set(jobs), accounting=True)

    def _parse(self, out: str, wanted: set[str], *, accounting: bool) -> dict[str, EnvStatus]:
        """The states of the jobs ``wanted`` in lines of ``squeue`` (``job|state|reason|exit|limit|name``, the exit
        as a wait status) or, with ``accounting``, of ``sacct`` (``job|state|exit|reason|limit|name``)."""
        found: dict[str, EnvStatus] = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 6 or parts[0] not in wanted:
                continue
            if accounting:
                parts[2], parts[3] = parts[3], parts[2]
            job, state, reason, raw_exit, limit, name = parts[:6]
            code, sig = _exit_status(raw_exit, wait_status=not accounting)
            found[job] = self._status(job, state, reason, code, sig, limit, name)
        return found

    def _forget(self, job: str) -> None:
        """An ended or cancelled job: its token file is of no more use."""
        env_id = self._envs.get(job)
        if env_id is not None:
            with contextlib.suppress(OSError):
                (self.env_dir(env_id) / "token").unlink()

    async def stop(self, handle: str) -> None:
        self._stopped.add(handle)
        res = await self._cli("scancel", handle)
        if res.rc != 0 and not any(s in res.err for s in ("already completing or completed", "Invalid job id")):
            raise ServiceError(f"scancel {handle} failed: {res.message}", "check `squeue` and the Slurm controller")
        self._forget(handle)

    # --- environments no live manager knows (nnix.services.launcher.Reclaiming) -------------------------
    async def adopt(self, request: EnvRequest, handle: str | None) -> str | None:
        """The job of an earlier manager's environment: its agent reconnects by itself (the job script has the
        address and reads the token file); a job submitted but never recorded is found by its name."""
        if handle is not None:
            return handle
        return (await self.environments()).get(request.env_id)

    async def open_engine(self) -> None:
        return None  # the Slurm commands need nothing opened

    async def environments(self) -> dict[str, str]:
        """``{environment id: job id}`` of this experiment's jobs Slurm still queues or runs (by the job name)."""
        res = await self._cli("squeue", "-h", "-u", self._user, "-O", "JobID:|,State:|,Name:|")
        if res.rc != 0:
            raise ServiceError(f"squeue failed: {res.message}", "check `squeue` and the Slurm controller")
        prefix = f"nnix-{self._experiment_id}-"
        out = {}
        for line in res.out.splitlines():
            job, state, name = [*line.strip().split("|"), "", ""][:3]
            if job and name.startswith(prefix) and describe_state(state).state != "ended":
                out[name[len(prefix):]] = job
                self._envs.setdefault(job, name[len(prefix):])
        return out

    def place(self, spec: TrialSpec) -> TrialSpec:
        return replace(spec, output_dir=self._working_dir / "trials" / spec.trial_id)

    def output_location(self, spec: TrialSpec) -> str:
        return str(self._working_dir / "trials" / spec.trial_id)

    async def close(self) -> None:
        return None


class SlurmService(ClusterService):
    """``platform: slurm``: the shared cluster service over :class:`SlurmLauncher`."""

    platform = "slurm"
    # one squeue call per poll for all environments; agents report trials by themselves, so the engine is asked
    # only for pending reasons and for jobs that ended under their agent: every 5 s is plenty
    engine_poll_interval = 5.0

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> SlurmLauncher:
        return SlurmLauncher.from_config(config, context)
