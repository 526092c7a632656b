"""Kubernetes training services: each environment is one Kubernetes object whose main container runs the nnix agent.

Three platforms share this module:

* ``platform: kubernetes`` (new in nnix): a ``batch/v1`` Job with one pod (``backoffLimit: 0``,
  ``restartPolicy: Never``) asking for the resources of one trial (``cpu``, ``memory``, ``nvidia.com/gpu`` from
  ``trialGpuNumber``), with the namespace's service account, node selector, tolerations and pull secrets given.
* ``platform: kubeflow`` (NNI's): a ``TFJob`` (tf-operator: ``Worker`` and ``PS`` replicas) or ``PyTorchJob``
  (pytorch-operator: ``Master`` and ``Worker``) of ``kubeflow.org/<apiVersion>``. The primary replica (TFJob worker
  0, the PyTorchJob master) runs the agent; the other replicas run their role's command.
* ``platform: frameworkcontroller`` (NNI's): a ``Framework`` of ``frameworkcontroller.microsoft.com/v1``, one task
  role per configured role with its ``frameworkAttemptCompletionPolicy``; task 0 of the first role runs the agent.

Names follow NNI's reuse mode: ``nniexp<experiment>env<environment>`` (lowercase). Every object carries the labels
``app: nni-kubernetes-trial``, ``expId`` (NNI's) and ``nnix.io/experiment`` / ``nnix.io/environment``; the
environment's token is in a Secret ``<name>-token`` owned by the object (owner reference: deleting the object
deletes it), given to the agent as ``$NNIX_AGENT_TOKEN`` through ``secretKeyRef`` (never in the object's spec).

Storage (``storage``): a volume every container mounts at ``containerMountPoint`` (NNI's ``/tmp/mount``) and the
manager reads at ``localMountPoint``: NFS (mounted by nnix under the experiment directory when
``localMountPoint`` is not given, as NNI does), a PersistentVolumeClaim, a hostPath, or an Azure file share
(its key read from Key Vault with the ``az`` CLI into a Secret, as NNI does). At start the manager puts the trial
code (honouring ``.nniignore``) and its own nnix (pure-Python wheels, unpacked by the first pod) in
``nnix/<experiment>/`` there; trials write to ``nnix/<experiment>/trials/<trial>/``, which the manager reads.
So any image with a Python >= 3.10 (``pythonExecutable``) and what the trials import works: nothing is installed
from the network.

States come from watches (one list + watch per resource, restarted with backoff, never a tight loop) kept in a
cache that :meth:`KubeLauncher.poll` reads: a Job's pod phase (with the scheduler's and the kubelet's reasons:
``Unschedulable``, ``ImagePullBackOff``, ``OOMKilled``...) and its ``Failed`` condition; a TFJob/PyTorchJob's last
condition (``Created``/``Running``/``Restarting``/``Succeeded``/``Failed``); a Framework's ``status.state`` and, once
``Completed``, its completion status. An object that ended is deleted (with its pods and Secret) after its state was
reported; at the end every object of the experiment still there is deleted, except those whose trials keep
running for a resumed manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.base import ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus, SharedStorageLayout
from nnix.services.packing import shared_bootstrap, stage_shared

if TYPE_CHECKING:
    from nnix.config import (
        ExperimentConfig,
        FrameworkControllerConfig,
        KubeflowConfig,
        KubernetesConfig,
    )

__all__ = [
    "FrameworkControllerService", "KubeLauncher", "KubeflowService", "KubernetesService", "framework_state",
    "job_state", "kubeflow_state",
]

log = logging.getLogger("nnix.services.kubernetes")

EXP_LABEL = "nnix.io/experiment"
ENV_LABEL = "nnix.io/environment"
VOLUME = "nni-vol"
CLIENT_HINT = "install the kubernetes extra: pip install 'nnix[kubernetes]'"


@dataclass(frozen=True)
class Resource:
    """One kind of object the launcher creates and watches."""

    group: str  # "" for batch/v1 Job (built-in)
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else "batch/v1"


JOB = Resource("", "v1", "jobs", "Job")
FRAMEWORK = Resource("frameworkcontroller.microsoft.com", "v1", "frameworks", "Framework")


def kubeflow_resource(operator: str, api_version: str) -> Resource:
    if operator == "pytorch-operator":
        return Resource("kubeflow.org", api_version, "pytorchjobs", "PyTorchJob")
    return Resource("kubeflow.org", api_version, "tfjobs", "TFJob")


# --------------------------------------------------------------------------------------------------
# States (pure functions of the objects, tested on their own)


def _pod_detail(pod: dict[str, Any] | None) -> tuple[str, str, bool]:
    """(phase, reason, killed) of a pod: the kubelet's and the scheduler's words."""
    if not pod:
        return "", "", False
    st = pod.get("status") or {}
    phase = str(st.get("phase") or "Pending")
    for c in st.get("containerStatuses") or []:
        state = c.get("state") or {}
        if "waiting" in state and phase == "Pending":
            w = state["waiting"] or {}
            if w.get("reason") and w["reason"] != "ContainerCreating":
                return phase, f"{w['reason']}: {w.get('message') or ''}".rstrip(": "), False
        if "terminated" in state:
            t = state["terminated"] or {}
            reason = str(t.get("reason") or "")
            code = t.get("exitCode")
            if reason == "OOMKilled":
                return phase, "OOMKilled: the container used more memory than its limit (raise memory)", True
            text = f"{reason or 'terminated'} (exit code {code})" if code is not None else reason
            return phase, text, False
    if st.get("reason"):  # Evicted, DeadlineExceeded, NodeLost...
        return phase, f"{st['reason']}: {st.get('message') or ''}".rstrip(": "), True
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return phase, f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or ''}".rstrip(": "), False
    return phase, "", False


def job_state(job: dict[str, Any] | None, pod: dict[str, Any] | None) -> EnvStatus:
    """A ``batch/v1`` Job (and its pod) as an environment state."""
    if job is None:
        return EnvStatus("ended", "gone: the Job was deleted outside nnix", killed=True)
    phase, reason, killed = _pod_detail(pod)
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return EnvStatus("ended", reason or "the Job completed")
        if cond.get("type") == "Failed":
            why = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".rstrip(": ")
            deadline = cond.get("reason") == "DeadlineExceeded"
            return EnvStatus("ended", f"{why}; {reason}" if reason else why, killed=killed or deadline)
    if phase == "Running":
        return EnvStatus("running")
    if phase in ("Succeeded", "Failed"):
        return EnvStatus("ended", reason or f"its pod {phase.lower()}", killed=killed)
    return EnvStatus("pending", reason or ("waiting for its pod" if pod is None else "pod pending"))


def kubeflow_state(obj: dict[str, Any] | None) -> EnvStatus:
    """A TFJob / PyTorchJob: the last condition that holds (NNI's rule)."""
    if obj is None:
        return EnvStatus("ended", "gone: the object was deleted outside nnix", killed=True)
    conds = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status", "True") == "True"]
    if not conds:
        return EnvStatus("pending", "waiting for the operator")
    last = conds[-1]
    kind = str(last.get("type") or "")
    why = f"{kind}: {last.get('reason') or ''} {last.get('message') or ''}".strip().rstrip(":")
    if kind in ("Running", "Restarting"):
        return EnvStatus("running")
    if kind == "Succeeded":
        return EnvStatus("ended", why)
    if kind == "Failed":
        return EnvStatus("ended", why)
    return EnvStatus("pending", why)


_FC_PENDING = {"AttemptCreationPending", "AttemptCreationRequested", "AttemptPreparing"}
_FC_RUNNING = {"AttemptRunning", "AttemptDeletionPending", "AttemptDeletionRequested", "AttemptDeleting",
               "AttemptCompleted"}  # the attempt ends; a retry or the Framework's completion follows


def framework_state(obj: dict[str, Any] | None) -> EnvStatus:
    """A Framework: ``status.state``, and once ``Completed`` its completion status."""
    if obj is None:
        return EnvStatus("ended", "gone: the Framework was deleted outside nnix", killed=True)
    st = obj.get("status") or {}
    state = str(st.get("state") or "")
    if not state or state in _FC_PENDING:
        return EnvStatus("pending", state or "waiting for FrameworkController")
    if state in _FC_RUNNING:
        return EnvStatus("running")
    if state == "Completed":
        cs = ((st.get("attemptStatus") or {}).get("completionStatus")) or {}
        kind = str(((cs.get("type") or {}).get("name")) or "")
        code = cs.get("code")
        words = " ".join(str(x) for x in (kind or "Completed", cs.get("phrase") or "",
                                          f"(code {code})" if code is not None else "",
                                          cs.get("diagnostics") or "") if x)
        # FrameworkController's negative completion codes are platform failures (the pod was lost, preempted,
        # deleted...): the engine ended it, not its command
        return EnvStatus("ended", words, killed=isinstance(code, int) and code < 0)
    return EnvStatus("unknown", state)


# --------------------------------------------------------------------------------------------------
# Watches


class _Watch:
    """A list + watch of one resource (label selector) kept in a cache of raw objects by name, in a thread."""

    def __init__(self, name: str, list_fn: Callable[..., Any], kwargs: dict[str, Any], selector: str) -> None:
        self.name = name
        self.list_fn = list_fn
        self.kwargs = kwargs
        self.selector = selector
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.stopped = threading.Event()
        self._watch: Any = None
        self.thread = threading.Thread(target=self._run, name=f"nnix-k8s-watch-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self._watch is not None:
            with contextlib.suppress(Exception):
                self._watch.stop()

    def get(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get(name)

    def values(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.objects.values())

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        backoff = 0.5
        while not self.stopped.is_set():
            try:
                resp = self.list_fn(**self.kwargs, label_selector=self.selector, _preload_content=False)
                data = json.loads(resp.data)
                with self.lock:
                    self.objects = {o["metadata"]["name"]: o for o in data.get("items") or []}
                self.synced.set()
                version = (data.get("metadata") or {}).get("resourceVersion")
                backoff = 0.5
                while not self.stopped.is_set():
                    self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                    for event in self._watch.stream(self.list_fn, **self.kwargs, label_selector=self.selector,
                                                    resource_version=version, timeout_seconds=60):
                        obj = event.get("raw_object") or {}
                        kind = event.get("type")
                        if kind == "ERROR":
                            raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message")))
                        meta = obj.get("metadata") or {}
                        version = meta.get("resourceVersion") or version
                        if kind == "BOOKMARK" or "name" not in meta:
                            continue
                        with self.lock:
                            if kind == "DELETED":
                                self.objects.pop(meta["name"], None)
                            else:
                                self.objects[meta["name"]] = obj
                        if self.stopped.is_set():
                            break
            except Exception as e:
                if self.stopped.is_set():
                    return
                gone = getattr(e, "status", None) == 410
                if not gone:
                    log.debug("watch of %s interrupted: %s; listing again in %.1f s", self.name, e, backoff)
                    self.stopped.wait(backoff)
                    backoff = min(backoff * 2, 10.0)


# --------------------------------------------------------------------------------------------------
# The launcher


def _q(s: str) -> str:
    return shlex.quote(s)


def _resources(cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(limits), "limits": limits}


def _cpu(value: float) -> str:
    return f"{value:g}" if value >= 1 or value * 1000 != int(value * 1000) else f"{int(value * 1000)}m"


@dataclass(frozen=True)
class _Role:
    """One kind of pod of an environment."""

    name: str  # TFJob/PyTorchJob replica type or Framework task role name
    replicas: int
    image: str
    command: str  # its own command (non-primary roles)
    cpu: str
    memory: str
    gpus: int
    extra: dict[str, Any] | None = None  # per-role extras (Framework completion policy)


class KubeLauncher(SharedStorageLayout):
    """Starts environments as Kubernetes objects (see the module docstring). Subclasses build the object."""

    kind = "kubernetes"
    advertise_host: str | None = None
    shares_files = True
    resource = JOB

    def __init__(self, cfg: KubernetesConfig | KubeflowConfig | FrameworkControllerConfig, context: ServiceContext,
                 code_dir: Path, trial_gpu_number: int) -> None:
        self.cfg = cfg
        self.context = context
        self.code_dir = code_dir
        self.gpus = trial_gpu_number
        self.exp = context.experiment_id
        self.namespace = cfg.namespace
        storage = cfg.storage
        self.storage = storage
        self._mounted: Path | None = None
        local = storage.local_mount_point or (Path(storage.path) if storage.storage_type == "hostPath" and
                                              storage.path else None)
        self.local_root = local  # None: nfs to be mounted in prepare
        self.local = (local or context.experiment_dir / "nfs") / "nnix" / self.exp
        self.remote = f"{storage.container_mount_point.rstrip('/')}/nnix/{self.exp}"
        self._wheels: list[str] = []
        self._api: Any = None
        self._watches: list[_Watch] = []
        self._launched: dict[str, float] = {}
        self._final: dict[str, EnvStatus] = {}
        self._azure_secret: str | None = None

    # --- helpers -----------------------------------------------------------------------------------
    def labels(self, env_id: str | None = None) -> dict[str, str]:
        out = {"app": "nni-kubernetes-trial", "expId": self.exp, EXP_LABEL: self.exp}
        if env_id is not None:
            out[ENV_LABEL] = env_id
        return out

    def object_name(self, env_id: str) -> str:
        return f"nniexp{self.exp}env{env_id}".lower()

    def _apis(self) -> Any:
        if self._api is None:
            try:
                from kubernetes import client, config
            except ImportError:
                raise ServiceError(f"platform {self.kind} needs the kubernetes client", CLIENT_HINT) from None
            kubeconfig, context = self.cfg.kubeconfig, self.cfg.context
            try:
                if kubeconfig is None and not os.environ.get("KUBECONFIG") and not (
                        Path.home() / ".kube" / "config").is_file() and os.environ.get("KUBERNETES_SERVICE_HOST"):
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    api = client.ApiClient()
                else:
                    path = str(kubeconfig) if kubeconfig else (
                        os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config"))
                    api = config.new_client_from_config(path, context=context)  # type: ignore[no-untyped-call]
            except Exception as e:
                raise ServiceError(f"cannot load a kubeconfig: {e}",
                                   "set trainingService.kubeconfig, $KUBECONFIG or ~/.kube/config") from None
            self._api = api
        return self._api

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._apis())

    def _explain(self, e: Exception, what: str) -> ServiceError:
        status = getattr(e, "status", None)
        body = getattr(e, "body", None)
        message = str(e)
        if body:
            with contextlib.suppress(ValueError, TypeError):
                message = str(json.loads(body).get("message") or message)
        if status in (401, 403):
            return ServiceError(f"Kubernetes refused {what}: {message}",
                                "check the kubeconfig's credentials and the RBAC rights in namespace "
                                f"{self.namespace!r} (create/delete/watch {self.resource.plural}, secrets, pods)")
        if status is None:
            return ServiceError(f"cannot reach Kubernetes for {what}: {message}",
                                "check the kubeconfig's server address and the network")
        return ServiceError(f"Kubernetes refused {what} ({status}): {message}")

    # --- Launcher ----------------------------------------------------------------------------------
    async def prepare(self) -> None:
        await asyncio.to_thread(self._prepare)

    def _prepare(self) -> None:
        from kubernetes import client

        self._apis()
        try:
            self._core().read_namespace(self.namespace)
        except client.ApiException as e:
            if e.status == 404:
                raise ServiceError(f"namespace {self.namespace!r} does not exist",
                                   f"kubectl create namespace {self.namespace}, or set trainingService.namespace"
                                   ) from None
            raise self._explain(e, f"reading namespace {self.namespace!r}") from None
        except Exception as e:
            raise self._explain(e, "the first request") from None
        self.check_resource()
        self._mount()
        self._wheels = stage_shared(self.local, self.code_dir)
        if self.storage.storage_type == "azureStorage":
            self._azure_secret = self._make_azure_secret()
        sel = f"{EXP_LABEL}={self.exp}"
        self._watches = self.make_watches(sel)
        for w in self._watches:
            w.start()
        for w in self._watches:
            w.synced.wait(10)

    def check_resource(self) -> None:
        """CRD platforms: the CRD is installed and serves the version (else a clear error)."""
        if not self.resource.group:
            return
        from kubernetes import client

        name = f"{self.resource.plural}.{self.resource.group}"
        try:
            crd = client.ApiextensionsV1Api(self._apis()).read_custom_resource_definition(name)
        except client.ApiException as e:
            if e.status == 404:
                raise ServiceError(f"the cluster has no {self.resource.kind} resource (CRD {name})",
                                   self.operator_hint()) from None
            raise self._explain(e, f"reading CRD {name}") from None
        served = [v.name for v in crd.spec.versions or [] if v.served]
        if self.resource.version not in served:
            raise ServiceError(f"CRD {name} does not serve version {self.resource.version} (it serves "
                               f"{', '.join(served) or 'none'})", "set trainingService.apiVersion to one it serves")

    def operator_hint(self) -> str:
        return "install its operator"

    def _mount(self) -> None:
        if self.local_root is not None:
            if not self.local_root.is_dir():
                raise ServiceError(f"storage: {self.local_root} is not a directory here",
                                   "mount the storage on this machine and set storage.localMountPoint")
            return
        s = self.storage  # nfs without localMountPoint: mount it, as NNI does
        target = self.context.experiment_dir / "nfs"
        target.mkdir(parents=True, exist_ok=True)
        cmd = ["mount", "-t", "nfs", f"{s.server}:{s.path}", str(target)]
        if os.geteuid() != 0:
            cmd = ["sudo", "-n", *cmd]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            r = subprocess.CompletedProcess(cmd, 1, "", str(e))
        if r.returncode != 0:
            raise ServiceError(f"cannot mount NFS {s.server}:{s.path} at {target}: "
                               f"{(r.stderr or r.stdout).strip() or 'mount failed'}",
                               "mount it yourself and set storage.localMountPoint to where it is mounted")
        self._mounted = target
        self.local_root = target
        self.local = target / "nnix" / self.exp

    def _make_azure_secret(self) -> str:
        s = self.storage
        az = shutil.which("az")
        if az is None:
            raise ServiceError("storage azureStorage: the Azure CLI (az) is needed to read the storage key from Key "
                               "Vault", "install the Azure CLI and run az login")
        r = subprocess.run([az, "keyvault", "secret", "show", "--vault-name", str(s.key_vault_name), "--name",
                            str(s.key_vault_key), "--query", "value", "--output", "tsv"],
                           capture_output=True, text=True, timeout=60)
        key = r.stdout.strip()
        if r.returncode != 0 or not key:
            raise ServiceError(f"cannot read secret {s.key_vault_key!r} of Key Vault {s.key_vault_name!r}: "
                               f"{r.stderr.strip() or 'empty'}", "check keyVaultName / keyVaultKey and az login")
        name = f"nniexp{self.exp}-azure".lower()
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "labels": self.labels()},
                "stringData": {"azurestorageaccountname": str(s.azure_account), "azurestorageaccountkey": key}}
        self._create_secret(body)
        return name

    def _create_secret(self, body: dict[str, Any]) -> None:
        from kubernetes import client

        try:
            self._core().create_namespaced_secret(self.namespace, body)
        except client.ApiException as e:
            if e.status == 409:
                self._core().replace_namespaced_secret(body["metadata"]["name"], self.namespace, body)
            else:
                raise self._explain(e, f"creating Secret {body['metadata']['name']}") from None

    def make_watches(self, selector: str) -> list[_Watch]:
        from kubernetes import client

        api = self._apis()
        custom = client.CustomObjectsApi(api)
        r = self.resource
        return [_Watch(r.plural, custom.list_namespaced_custom_object,
                       {"group": r.group, "version": r.version, "namespace": self.namespace, "plural": r.plural},
                       selector)]

    def volume(self) -> dict[str, Any]:
        s = self.storage
        if s.storage_type == "nfs":
            return {"name": VOLUME, "nfs": {"server": s.server, "path": s.path}}
        if s.storage_type == "pvc":
            return {"name": VOLUME, "persistentVolumeClaim": {"claimName": s.claim_name}}
        if s.storage_type == "hostPath":
            return {"name": VOLUME, "hostPath": {"path": s.path, "type": "Directory"}}
        return {"name": VOLUME, "azureFile": {"secretName": self._azure_secret, "shareName": s.azure_share,
                                              "readOnly": False}}

    def agent_script(self, request: EnvRequest) -> str:
        """The primary container's shell command: unpack nnix, run the agent (its log on the storage too)."""
        unpack, pythonpath = shared_bootstrap(self.remote, self._wheels, self.cfg.python_executable)
        env_dir = f"{self.remote}/envs/{request.env_id}"
        args = " ".join(_q(a) for a in request.agent_args())
        return (f"mkdir -p {_q(env_dir)} && {unpack} && cd {_q(self.remote + '/code')} && "
                f"{pythonpath} exec {_q(self.cfg.python_executable)} {args} >> {_q(env_dir + '/agent.log')} 2>&1")

    def container(self, name: str, role: _Role, script: str, token_secret: str | None) -> dict[str, Any]:
        env: list[dict[str, Any]] = [{"name": "NNI_PLATFORM", "value": self.kind},
                                     {"name": "NNI_EXP_ID", "value": self.exp}]
        if token_secret is not None:
            env.append({"name": "NNIX_AGENT_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": token_secret, "key": "token"}}})
        if not role.gpus:  # the NVIDIA device plugin shows every GPU to a container asking for none
            env.append({"name": "CUDA_VISIBLE_DEVICES", "value": ""})
        return {"name": name, "image": role.image, "command": ["sh", "-c", script], "env": env,
                "resources": _resources(role.cpu, role.memory, role.gpus),
                "volumeMounts": [{"name": VOLUME, "mountPath": self.storage.container_mount_point}]}

    def role_script(self, role: _Role) -> str:
        """A non-primary pod runs its role's command in the code directory."""
        return f"cd {_q(self.remote + '/code')} && exec sh -c {_q(role.command or 'true')}"

    def primary_command(self) -> str:
        """The command of the role whose first pod runs the agent ("": the experiment's ``trialCommand``)."""
        return ""

    def place(self, spec: TrialSpec) -> TrialSpec:
        placed = super().place(spec)
        command = self.primary_command()
        return replace(placed, command=command) if command else placed

    def build(self, name: str, request: EnvRequest, token_secret: str) -> dict[str, Any]:
        raise NotImplementedError

    async def launch(self, request: EnvRequest) -> str:
        return await asyncio.to_thread(self._launch, request)

    def _launch(self, request: EnvRequest) -> str:
        from kubernetes import client

        name = self.object_name(request.env_id)
        secret = f"{name}-token"
        (self.local / "envs" / request.env_id).mkdir(parents=True, exist_ok=True)
        self._create_secret({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                             "metadata": {"name": secret, "labels": self.labels(request.env_id)},
                             "stringData": {"token": request.token}})
        body = self.build(name, request, secret)
        try:
            created = self.create(body)
        except client.ApiException as e:
            with contextlib.suppress(Exception):
                self._core().delete_namespaced_secret(secret, self.namespace)
            raise self._explain(e, f"creating {self.resource.kind} {name}") from None
        uid = (created.get("metadata") or {}).get("uid") if isinstance(created, dict) else created.metadata.uid
        owner = [{"apiVersion": self.resource.api_version, "kind": self.resource.kind, "name": name, "uid": uid,
                  "blockOwnerDeletion": False}]
        with contextlib.suppress(Exception):  # without it the Secret is still deleted with the environment
            self._core().patch_namespaced_secret(secret, self.namespace, {"metadata": {"ownerReferences": owner}})
        self._launched[name] = time.monotonic()
        return name

    def create(self, body: dict[str, Any]) -> Any:
        from kubernetes import client

        r = self.resource
        return client.CustomObjectsApi(self._apis()).create_namespaced_custom_object(
            r.group, r.version, self.namespace, r.plural, body)

    def state(self, name: str) -> EnvStatus:
        raise NotImplementedError

    def fetch(self, name: str) -> dict[str, Any] | None:
        """The object straight from the apiserver (a watch cache miss); None when it does not exist."""
        from kubernetes import client

        r = self.resource
        try:
            return cast("dict[str, Any]", client.CustomObjectsApi(self._apis()).get_namespaced_custom_object(
                r.group, r.version, self.namespace, r.plural, name))
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        return await asyncio.to_thread(self._poll, handles)

    def _poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        out: dict[str, EnvStatus] = {}
        for name in handles:
            if name in self._final:
                out[name] = self._final[name]
                continue
            if self._watches[0].get(name) is None:
                try:
                    obj = self.fetch(name)
                except Exception as e:
                    log.warning("cannot read %s %s: %s", self.resource.kind, name, e)
                    out[name] = EnvStatus("unknown")
                    continue
                if obj is not None:
                    with self._watches[0].lock:
                        self._watches[0].objects.setdefault(name, obj)
            st = self.state(name)
            out[name] = st
            if st.state == "ended":
                self._final[name] = st
                self._delete(name)  # its state is known: the object and its pods can go
        return out

    def _delete(self, name: str) -> None:
        from kubernetes import client

        r = self.resource
        try:
            if r is JOB:
                client.BatchV1Api(self._apis()).delete_namespaced_job(name, self.namespace,
                                                                      propagation_policy="Background")
            else:
                client.CustomObjectsApi(self._apis()).delete_namespaced_custom_object(
                    r.group, r.version, self.namespace, r.plural, name, propagation_policy="Background")
        except client.ApiException as e:
            if e.status != 404:
                log.warning("could not delete %s %s: %s", r.kind, name, e.reason)
        with contextlib.suppress(Exception):
            self._core().delete_namespaced_secret(f"{name}-token", self.namespace)
        # the pods too, by their labels: the garbage collector would delete them with their owner, but only once
        # it knows the owner's resource (CRDs: up to its next discovery sync), and never if an operator is gone
        prefix = self.object_name("")
        if name.startswith(prefix):
            with contextlib.suppress(Exception):
                self._core().delete_collection_namespaced_pod(
                    self.namespace, label_selector=f"{EXP_LABEL}={self.exp},{ENV_LABEL}={name[len(prefix):]}")

    async def stop(self, handle: str) -> None:
        await asyncio.to_thread(self._delete, handle)
        self._final.setdefault(handle, EnvStatus("ended", "stopped by nnix", killed=True))

    # --- environments no live manager knows (nnix.services.launcher.Reclaiming) -------------------------
    async def adopt(self, request: EnvRequest, handle: str | None) -> str | None:
        """The object of an earlier manager's environment: its agent reconnects by itself (its token is in its
        Secret); one created but never recorded is found by its labels."""
        if handle is not None:
            return handle
        return (await self.environments()).get(request.env_id)

    async def open_engine(self) -> None:
        await asyncio.to_thread(self._apis)

    async def environments(self) -> dict[str, str]:
        """``{environment id: object name}`` of whatever of this experiment the namespace holds, found by its label:
        the objects, their pods and token Secrets (a Secret whose object was never created counts too)."""
        return await asyncio.to_thread(self._environments)

    def _environments(self) -> dict[str, str]:
        from kubernetes import client

        sel = f"{EXP_LABEL}={self.exp}"
        r = self.resource
        try:
            found: list[Any] = []
            if r is JOB:
                found += client.BatchV1Api(self._apis()).list_namespaced_job(self.namespace, label_selector=sel).items
            core = self._core()
            found += core.list_namespaced_secret(self.namespace, label_selector=sel).items
            found += core.list_namespaced_pod(self.namespace, label_selector=sel).items
            items: list[dict[str, Any]] = [dict((o.metadata.labels if o.metadata else None) or {}) for o in found]
            if r is not JOB:
                listed: Any = client.CustomObjectsApi(self._apis()).list_namespaced_custom_object(
                    r.group, r.version, self.namespace, r.plural, label_selector=sel)
                items += [(o.get("metadata") or {}).get("labels") or {} for o in listed.get("items") or []]
        except client.ApiException as e:
            raise self._explain(e, f"listing the {r.plural} of experiment {self.exp}") from None
        return {str(lab[ENV_LABEL]): self.object_name(str(lab[ENV_LABEL])) for lab in items if lab.get(ENV_LABEL)}

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        for w in self._watches:
            w.stop()
        if self._azure_secret is not None and not any(n not in self._final for n in self._launched):
            with contextlib.suppress(Exception):
                self._core().delete_namespaced_secret(self._azure_secret, self.namespace)
        if self._mounted is not None and all(n in self._final for n in self._launched):
            cmd = ["umount", str(self._mounted)]
            with contextlib.suppress(Exception):
                subprocess.run(cmd if os.geteuid() == 0 else ["sudo", "-n", *cmd], capture_output=True, timeout=60)
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()


class JobLauncher(KubeLauncher):
    """``platform: kubernetes``: a ``batch/v1`` Job per environment."""

    kind = "kubernetes"
    resource = JOB

    def make_watches(self, selector: str) -> list[_Watch]:
        from kubernetes import client

        api = self._apis()
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        return [_Watch("jobs", batch.list_namespaced_job, {"namespace": self.namespace}, selector),
                _Watch("pods", core.list_namespaced_pod, {"namespace": self.namespace}, selector)]

    def build(self, name: str, request: EnvRequest, token_secret: str) -> dict[str, Any]:
        cfg = cast("KubernetesConfig", self.cfg)
        role = _Role("trial", 1, cfg.image, "", cfg.cpu, cfg.memory, self.gpus)
        labels = {**cfg.labels, **self.labels(request.env_id)}
        pod: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [self.container("nnix-agent", role, self.agent_script(request), token_secret)],
            "volumes": [self.volume()],
        }
        if cfg.service_account_name:
            pod["serviceAccountName"] = cfg.service_account_name
        if cfg.node_selector:
            pod["nodeSelector"] = dict(cfg.node_selector)
        if cfg.tolerations:
            pod["tolerations"] = list(cfg.tolerations)
        if cfg.image_pull_secrets:
            pod["imagePullSecrets"] = [{"name": s} for s in cfg.image_pull_secrets]
        return {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 600,
                     "template": {"metadata": {"labels": labels}, "spec": pod}},
        }

    def create(self, body: dict[str, Any]) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self._apis()).create_namespaced_job(self.namespace, body)  # type: ignore[arg-type]

    def fetch(self, name: str) -> dict[str, Any] | None:
        from kubernetes import client

        try:
            resp = client.BatchV1Api(self._apis()).read_namespaced_job(name, self.namespace, _preload_content=False)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        return cast("dict[str, Any]", json.loads(resp.data))  # type: ignore[attr-defined]

    def state(self, name: str) -> EnvStatus:
        job = self._watches[0].get(name)
        pods = [p for p in self._watches[1].values()
                if ((p.get("metadata") or {}).get("labels") or {}).get("job-name") == name]
        pods.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        return job_state(job, pods[-1] if pods else None)


class KubeflowLauncher(KubeLauncher):
    """``platform: kubeflow``: a TFJob or PyTorchJob per environment."""

    kind = "kubeflow"

    def __init__(self, cfg: KubeflowConfig, context: ServiceContext, code_dir: Path, trial_gpu_number: int) -> None:
        super().__init__(cfg, context, code_dir, trial_gpu_number)
        self.resource = kubeflow_resource(cfg.operator, cfg.api_version)
        self.pytorch = cfg.operator == "pytorch-operator"

    def operator_hint(self) -> str:
        cfg = cast("KubeflowConfig", self.cfg)
        return f"deploy Kubeflow's {cfg.operator} (training-operator) in the cluster, or check trainingService.operator"

    def roles(self) -> list[tuple[str, _Role]]:
        cfg = cast("KubeflowConfig", self.cfg)
        named = [("Master", cfg.master), ("Worker", cfg.worker)] if self.pytorch else \
            [("Worker", cfg.worker), ("PS", cfg.ps)]
        return [(key, _Role(key, r.replicas, r.docker_image, r.command, _cpu(r.cpu_number), r.memory_size,
                            r.gpu_number)) for key, r in named if r is not None]

    def primary_command(self) -> str:
        return self.roles()[0][1].command

    def build(self, name: str, request: EnvRequest, token_secret: str) -> dict[str, Any]:
        container_name = "pytorch" if self.pytorch else "tensorflow"
        specs: dict[str, Any] = {}
        for i, (key, role) in enumerate(self.roles()):
            script = self.role_script(role)
            if i == 0:
                agent = self.agent_script(request)
                if self.pytorch:  # one master: it is the primary
                    script = agent
                else:  # TFJob workers share a template: worker 0 (tf-operator's TF_CONFIG) runs the agent
                    pick = ("import json, os, sys; t = json.loads(os.environ.get('TF_CONFIG') or '{}').get('task') "
                            "or {}; sys.exit(0 if int(t.get('index') or 0) == 0 else 1)")
                    script = (f"if {_q(self.cfg.python_executable)} -c {_q(pick)}; then {agent}; "
                              f"else {script}; fi")
            pod = {"containers": [self.container(container_name, role, script, token_secret)],
                   "volumes": [self.volume()]}
            specs[key] = {"replicas": role.replicas, "restartPolicy": "Never",
                          "template": {"metadata": {"labels": self.labels(request.env_id)}, "spec": pod}}
        key = "pytorchReplicaSpecs" if self.pytorch else "tfReplicaSpecs"
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind,
                "metadata": {"name": name, "labels": self.labels(request.env_id)},
                "spec": {key: specs}}

    def state(self, name: str) -> EnvStatus:
        return kubeflow_state(self._watches[0].get(name))


class FrameworkLauncher(KubeLauncher):
    """``platform: frameworkcontroller``: a Framework per environment."""

    kind = "frameworkcontroller"
    resource = FRAMEWORK

    def operator_hint(self) -> str:
        return "deploy FrameworkController in the cluster (its CRD frameworks.frameworkcontroller.microsoft.com)"

    def roles(self) -> list[_Role]:
        cfg = cast("FrameworkControllerConfig", self.cfg)
        out = []
        for r in cfg.task_roles:
            policy = r.framework_attempt_completion_policy
            out.append(_Role(r.name, r.task_number, r.docker_image, r.command, _cpu(r.cpu_number), r.memory_size,
                             r.gpu_number, {"minFailedTaskCount": policy.min_failed_task_count,
                                            "minSucceededTaskCount": policy.min_succeed_task_count}))
        return out

    def build(self, name: str, request: EnvRequest, token_secret: str) -> dict[str, Any]:
        cfg = cast("FrameworkControllerConfig", self.cfg)
        task_roles = []
        for i, role in enumerate(self.roles()):
            script = self.role_script(role)
            if i == 0:  # FrameworkController gives each pod its task index in FC_TASK_INDEX
                script = (f"if [ \"${{FC_TASK_INDEX:-0}}\" = 0 ]; then {self.agent_script(request)}; "
                          f"else {script}; fi")
            pod: dict[str, Any] = {"restartPolicy": "Never", "hostNetwork": False,
                                   "containers": [self.container("framework", role, script, token_secret)],
                                   "volumes": [self.volume()]}
            if cfg.service_account_name:
                pod["serviceAccountName"] = cfg.service_account_name
            task_roles.append({
                "name": role.name, "taskNumber": role.replicas,
                "frameworkAttemptCompletionPolicy": role.extra,
                "task": {"retryPolicy": {"fancyRetryPolicy": False, "maxRetryCount": 0},
                         "pod": {"metadata": {"labels": self.labels(request.env_id)}, "spec": pod}},
            })
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind,
                "metadata": {"name": name, "labels": self.labels(request.env_id)},
                "spec": {"executionType": "Start", "retryPolicy": {"fancyRetryPolicy": False, "maxRetryCount": 0},
                         "taskRoles": task_roles}}

    def state(self, name: str) -> EnvStatus:
        return framework_state(self._watches[0].get(name))

    def primary_command(self) -> str:
        return self.roles()[0].command


# --------------------------------------------------------------------------------------------------
# Services


def _launcher(cls: type[KubeLauncher], config: ExperimentConfig, context: ServiceContext | None) -> Any:
    if context is None:
        raise ServiceError(f"the {cls.kind} service needs its experiment's id and directory (a ServiceContext)")
    ts = config.training_service
    return cls(ts, context, Path(config.trial_code_directory), config.trial_gpu_number or 0)  # type: ignore[arg-type]


class KubernetesService(ClusterService):
    platform = "kubernetes"

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> KubeLauncher:
        return cast("KubeLauncher", _launcher(JobLauncher, config, context))


class KubeflowService(ClusterService):
    platform = "kubeflow"

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> KubeLauncher:
        return cast("KubeLauncher", _launcher(KubeflowLauncher, config, context))


class FrameworkControllerService(ClusterService):
    platform = "frameworkcontroller"

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> KubeLauncher:
        return cast("KubeLauncher", _launcher(FrameworkLauncher, config, context))

