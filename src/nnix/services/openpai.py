"""The OpenPAI training service (``platform: openpai``, NNI's fields): each environment is an OpenPAI job.

Through OpenPAI's REST API (``Authorization: Bearer <token>``): submit ``POST /rest-server/api/v2/jobs`` with
a job protocol v2 in YAML (``Content-Type: text/yaml``, 202 on success); state ``GET
/rest-server/api/v2/jobs/<user>~<name>`` (``jobStatus.state``); stop ``PUT .../executionType`` with
``{"value": "STOP"}``.

The job's one task role runs the nnix agent with ``python3`` of the image. Nothing is installed from the
network: at start the manager puts, under ``<localStorageMountPoint>/nnix/<experiment>/``, the trial code
(``code/``, honouring ``.nniignore`` and NNI's limits), its own nnix as wheels (``wheels/``; nnix is pure
Python, so the job unpacks them into ``site/`` and puts that on ``PYTHONPATH``), and per environment a
0600 ``envs/<env>/token`` file the job reads (the token is never in the job protocol, which OpenPAI stores
and shows). The same directory is the storage ``storageConfigName`` mounted in the containers at
``containerStorageMountPoint``; trials write to ``trials/<trial>/`` there, which the manager reads directly.

Job names: ``nni_exp_<experiment>_env_<environment>``, NNI's reuse-mode form, in both modes. Deviation from
NNI's non-reuse ``nni_exp_<experiment>_trial_<trial>``: an environment is submitted before the trial it will
run is chosen, so its name cannot carry the trial id (the trial's environment is recorded with the trial).

With ``openpaiConfig`` / ``openpaiConfigFile`` the user's protocol is the starting point (prerequisites,
resources, extras...): its name is replaced, and each task role runs its own commands (joined with
`` && ``) and then the agent.

Not tested against a live OpenPAI cluster: the tests check every request against the documented protocol
with a local fake of the REST API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import yaml

from nnix.errors import ServiceError
from nnix.services.base import ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus, SharedStorageLayout
from nnix.services.packing import shared_bootstrap, stage_shared

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig, OpenpaiConfig

__all__ = ["OpenpaiLauncher", "OpenpaiService"]

log = logging.getLogger("nnix.services.openpai")

_STATES = {
    "WAITING": ("pending", False),
    "RUNNING": ("running", False),
    "SUCCEEDED": ("ended", False),
    "FAILED": ("ended", False),
    "STOPPED": ("ended", True),
    "STOPPING": ("ended", True),
}

def _q(s: str) -> str:
    return shlex.quote(s)


class OpenpaiLauncher(SharedStorageLayout):
    kind = "openpai"
    advertise_host: str | None = None
    shares_files = True

    def __init__(self, cfg: OpenpaiConfig, context: ServiceContext, code_dir: Path, trial_gpu_number: int,
                 request_timeout: float = 30.0) -> None:
        self.cfg = cfg
        self.context = context
        host = cfg.host.rstrip("/")
        self.base = host if "://" in host else f"https://{host}"
        self.code_dir = code_dir
        self.gpus = trial_gpu_number
        self.timeout = request_timeout
        exp = context.experiment_id
        self.local = Path(cfg.local_storage_mount_point) / "nnix" / exp
        self.remote = f"{cfg.container_storage_mount_point.rstrip('/')}/nnix/{exp}"
        self._wheels: list[str] = []

    # --- REST ------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.cfg.token.get_secret_value()}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServiceError(f"cannot reach OpenPAI at {self.base}: {reason}",
                               "check trainingService.host and the network") from None
        if status in (401, 403):
            raise ServiceError(f"OpenPAI at {self.base} refused user {self.cfg.username!r} ({status})",
                               "check trainingService.username and token")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        return status, data

    async def _call(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, Any]:
        return await asyncio.to_thread(self._request, method, path, body, content_type)

    def _job_path(self, name: str) -> str:
        return f"/rest-server/api/v2/jobs/{quote(self.cfg.username, safe='')}~{quote(name, safe='')}"

    # --- Launcher ----------------------------------------------------------------------------------
    async def prepare(self) -> None:
        status, data = await self._call("GET", f"/rest-server/api/v2/jobs?username={quote(self.cfg.username)}")
        if status >= 400:
            raise ServiceError(f"OpenPAI at {self.base} answered {status} to listing jobs: {data}",
                               "check trainingService.host")
        await asyncio.to_thread(self._stage)

    def _stage(self) -> None:
        self._wheels = stage_shared(self.local, self.code_dir)

    def agent_command(self, request: EnvRequest) -> str:
        d = self.remote
        env_dir = f"{d}/envs/{request.env_id}"
        unpack, pythonpath = shared_bootstrap(d, self._wheels)
        args = " ".join(_q(a) for a in request.agent_args())
        return (
            f"{unpack} && "
            f"export NNIX_AGENT_TOKEN=\"$(cat {_q(env_dir + '/token')})\" && cd {_q(d + '/code')} && "
            f"{pythonpath} exec python3 {args} "
            f">> {_q(env_dir + '/agent.log')} 2>&1"
        )

    def protocol(self, name: str, command: str) -> dict[str, Any]:
        cfg = self.cfg
        user: dict[str, Any] | None = cfg.openpai_config
        if cfg.openpai_config_file is not None:
            try:
                user = yaml.safe_load(Path(cfg.openpai_config_file).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as e:
                raise ServiceError(f"cannot read openpaiConfigFile {cfg.openpai_config_file}: {e}") from None
        if user:
            job = json.loads(json.dumps(user))
            job["name"] = name
            for role in (job.get("taskRoles") or {}).values():
                own = " && ".join(str(c) for c in role.get("commands") or [])
                role["commands"] = [f"{own} && {command}" if own else command]
            return cast("dict[str, Any]", job)
        job = {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "jobRetryCount": 0,
            "prerequisites": [{"type": "dockerimage", "uri": cfg.docker_image, "name": "docker_image_0"}],
            "taskRoles": {
                "taskrole": {
                    "instances": 1,
                    "completion": {"minFailedInstances": 1, "minSucceededInstances": -1},
                    "taskRetryCount": 0,
                    "dockerImage": "docker_image_0",
                    "resourcePerInstance": {"gpu": self.gpus, "cpu": cfg.trial_cpu_number,
                                            "memoryMB": cfg.trial_memory_size},
                    "commands": [command],
                }
            },
            "extras": {"storages": [{"name": cfg.storage_config_name}], "submitFrom": "submit-job-v2"},
        }
        if cfg.virtual_cluster:
            job["defaults"] = {"virtualCluster": cfg.virtual_cluster}
        return job

    async def launch(self, request: EnvRequest) -> str:
        name = f"nni_exp_{self.context.experiment_id}_env_{request.env_id}"
        env_dir = self.local / "envs" / request.env_id
        env_dir.mkdir(parents=True, exist_ok=True)
        token = env_dir / "token"
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(request.token)
        body = yaml.safe_dump(self.protocol(name, self.agent_command(request)), sort_keys=False).encode()
        status, data = await self._call("POST", "/rest-server/api/v2/jobs", body, "text/yaml")
        if status != 202:
            raise ServiceError(f"OpenPAI refused job {name} ({status}): {data}",
                               "check dockerImage, virtualCluster, storageConfigName and the resources")
        return name

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        out: dict[str, EnvStatus] = {}
        for name in handles:
            try:
                status, data = await self._call("GET", self._job_path(name))
            except ServiceError as e:
                log.warning("%s", e.message)
                out[name] = EnvStatus("unknown")
                continue
            if status == 404:
                out[name] = EnvStatus("ended", "gone: OpenPAI no longer knows the job", killed=True)
                continue
            state = str(((data or {}).get("jobStatus") or {}).get("state", "")) if isinstance(data, dict) else ""
            kind, killed = _STATES.get(state, ("unknown", False))
            reason = state if kind != "ended" else f"{state}: see {self.base}/job-detail.html?username=" \
                f"{quote(self.cfg.username)}&jobName={quote(name)}"
            out[name] = EnvStatus(kind, reason if kind != "running" else "", killed=killed)  # type: ignore[arg-type]
        return out

    async def stop(self, handle: str) -> None:
        env_id = handle.rsplit("_env_", 1)[-1]
        (self.local / "envs" / env_id / "token").unlink(missing_ok=True)
        try:
            await self._call("PUT", self._job_path(handle) + "/executionType", json.dumps({"value": "STOP"}).encode(),
                             "application/json")
        except ServiceError as e:
            log.warning("could not stop OpenPAI job %s: %s", handle, e.message)

    async def close(self) -> None:
        return None


class OpenpaiService(ClusterService):
    platform = "openpai"

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> OpenpaiLauncher:
        if context is None:
            raise ServiceError("the openpai service needs its experiment's id and directory (a ServiceContext)")
        ts = cast("OpenpaiConfig", config.training_service)
        return OpenpaiLauncher(ts, context, Path(config.trial_code_directory), config.trial_gpu_number or 0)
