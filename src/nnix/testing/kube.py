"""A real Kubernetes control plane for tests, and stand-ins for the operators nnix's Kubernetes platforms talk to.

:class:`KubeLab` starts, in a directory of its own and on free loopback ports: etcd (Debian's ``etcd-server``), a
real ``kube-apiserver`` (token auth, RBAC), ``kube-controller-manager`` (Jobs, garbage collection, service
accounts) and ``kube-scheduler`` (binaries built by ``.ci/engines/k8s.sh`` into ``/opt/nni-k8s/bin`` or
``$K8S_BIN``), plus :mod:`nnix.testing.kubelet`, a process kubelet that runs each pod's command as a local process.
It installs nnix's versions of the TFJob, PyTorchJob and Framework CRDs (structural schemas written from the
operators' documented fields: enums, required fields and minimums are checked by the apiserver).

:class:`FakeOperators` does for TFJob / PyTorchJob / Framework objects what tf-operator, pytorch-operator and
FrameworkController do, as far as nnix can see: it creates one pod per replica / task from the object's templates
(owned by the object, with ``TF_CONFIG`` / ``RANK`` / ``FC_TASK_INDEX`` set), and patches the object's status
the way the operator does (conditions ``Created`` -> ``Running`` -> ``Succeeded`` / ``Failed``; Framework
``state`` ``AttemptCreationPending`` -> ``AttemptRunning`` -> ``Completed`` with a completion status).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnix.testing.labs import free_port

__all__ = ["CRDS", "FakeOperators", "KubeLab", "kube_available"]

BIN = Path(os.environ.get("K8S_BIN", "/opt/nni-k8s/bin"))
TOKEN = "nnix-admin-token"


def kube_available() -> str | None:
    """None when a lab can start here, else why not."""
    for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        if not (BIN / b).is_file():
            return f"{BIN / b} is missing (run .ci/engines/k8s.sh as root to build the control plane)"
    if shutil.which("etcd") is None:
        return "etcd is missing (apt-get install etcd-server, or run .ci/engines/k8s.sh)"
    if shutil.which("openssl") is None:
        return "openssl is missing"
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return "the kubernetes client is missing (pip install 'nnix[kubernetes]')"
    return None


def _replica_schema() -> dict[str, Any]:
    return {"type": "object", "required": ["template"], "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"type": "string", "enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }}


def _kubeflow_crd(kind: str, plural: str, key: str) -> dict[str, Any]:
    spec = {"type": "object", "required": [key], "properties": {
        key: {"type": "object", "minProperties": 1, "additionalProperties": _replica_schema()},
        "cleanPodPolicy": {"type": "string", "enum": ["All", "Running", "None"]},
        "runPolicy": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
        "backoffLimit": {"type": "integer", "minimum": 0},
    }}
    return _crd("kubeflow.org", kind, plural, spec, ["v1", "v1beta2", "v1beta1", "v1alpha2"])


def _framework_crd() -> dict[str, Any]:
    retry = {"type": "object", "properties": {"fancyRetryPolicy": {"type": "boolean"},
                                              "maxRetryCount": {"type": "integer", "minimum": -2}}}
    spec = {"type": "object", "required": ["executionType", "taskRoles"], "properties": {
        "description": {"type": "string"},
        "executionType": {"type": "string", "enum": ["Create", "Start", "Stop"]},
        "retryPolicy": retry,
        "taskRoles": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "taskNumber", "task"], "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "taskNumber": {"type": "integer", "minimum": 0, "maximum": 10000},
                "frameworkAttemptCompletionPolicy": {
                    "type": "object", "required": ["minFailedTaskCount", "minSucceededTaskCount"], "properties": {
                        "minFailedTaskCount": {"type": "integer", "minimum": -1},
                        "minSucceededTaskCount": {"type": "integer", "minimum": -1}}},
                "task": {"type": "object", "required": ["pod"], "properties": {
                    "retryPolicy": retry,
                    "podGracefulDeletionTimeoutSec": {"type": "integer", "minimum": 0},
                    "pod": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
            }}},
    }}
    return _crd("frameworkcontroller.microsoft.com", "Framework", "frameworks", spec, ["v1"])


def _crd(group: str, kind: str, plural: str, spec: dict[str, Any], versions: list[str]) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": spec, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": v, "served": True, "storage": i == 0, "schema": schema,
                               "subresources": {"status": {}}} for i, v in enumerate(versions)]},
    }


CRDS = {
    "tfjobs": _kubeflow_crd("TFJob", "tfjobs", "tfReplicaSpecs"),
    "pytorchjobs": _kubeflow_crd("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
    "frameworks": _framework_crd(),
}


class KubeLab:
    """A private control plane + process kubelet (see the module docstring). Use as a context manager."""

    def __init__(self, root: Path | None = None, crds: bool = True) -> None:
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="nnix-kube-"))
        self._own_root = root is None
        self.install_crds = crds
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.kubeconfig = self.root / "kubeconfig"
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> KubeLab:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{name}.log", "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append((name, p))

    def _check_alive(self) -> None:
        for name, p in self.procs:
            if p.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited ({p.returncode}):\n{tail}")

    def _wait(self, what: str, ok: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(Exception):
                if ok():
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready after {timeout:.0f} s (logs in {self.root})")

    def start(self) -> None:
        why = kube_available()
        if why is not None:
            raise RuntimeError(why)
        r = self.root
        (r / "pki").mkdir(parents=True, exist_ok=True)
        etcd_client, etcd_peer = free_port(), free_port()
        self._spawn("etcd", ["etcd", "--name", "nnix", "--data-dir", str(r / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                             "--initial-cluster", f"nnix=http://127.0.0.1:{etcd_peer}"])
        pki = r / "pki"
        subprocess.run(["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
                       check=True, capture_output=True)
        (pki / "tokens.csv").write_text(f"{TOKEN},admin,1,system:masters\n")
        self._wait("etcd", lambda: b"true" in urllib.request.urlopen(
            f"http://127.0.0.1:{etcd_client}/health", timeout=1).read())
        self.port = free_port()
        self._spawn("apiserver", [
            str(BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            "--insecure-port=0", "--endpoint-reconciler-type=none", f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16", "--service-account-issuer=https://kubernetes.default.svc",
            "--api-audiences=https://kubernetes.default.svc", f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}", "--enable-priority-and-fairness=false",
            "--feature-gates=TTLAfterFinished=true", "--kubelet-preferred-address-types=InternalIP"])
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "nnix", "cluster": {"server": f"https://127.0.0.1:{self.port}",
                                                      "certificate-authority": str(pki / "apiserver.crt")}}],
            "contexts": [{"name": "nnix", "context": {"cluster": "nnix", "user": "admin", "namespace": "default"}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "current-context": "nnix",
        }))
        import ssl

        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

        def ready() -> bool:
            req = urllib.request.Request(f"https://127.0.0.1:{self.port}/readyz",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
            return bool(urllib.request.urlopen(req, timeout=2, context=ctx).status == 200)

        self._wait("kube-apiserver", ready, 120)
        common = [f"--kubeconfig={self.kubeconfig}", f"--authentication-kubeconfig={self.kubeconfig}",
                  f"--authorization-kubeconfig={self.kubeconfig}", "--bind-address=127.0.0.1", "--port=0",
                  "--leader-elect=false"]
        self._spawn("controller-manager", [
            str(BIN / "kube-controller-manager"), *common, f"--secure-port={free_port()}",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'apiserver.crt'}",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle", "--feature-gates=TTLAfterFinished=true"])
        self._spawn("scheduler", [str(BIN / "kube-scheduler"), *common, f"--secure-port={free_port()}"])
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), NODE_NAME="nnix-node-1",
                   POD_LOG_DIR=str(r / "podlogs"), PYTHONWARNINGS="ignore")
        self._spawn("kubelet", [sys.executable, "-u", "-m", "nnix.testing.kubelet"], env)
        core = self.core()
        self._wait("the default service account", lambda: core.read_namespaced_service_account("default", "default"))
        self._wait("node nnix-node-1", lambda: any(
            c.type == "Ready" and c.status == "True" for c in core.read_node("nnix-node-1").status.conditions or []))
        if self.install_crds:
            self.apply_crds()

    def apply_crds(self) -> None:
        from kubernetes import client

        ext: Any = client.ApiextensionsV1Api(self.api())
        for crd in CRDS.values():
            with contextlib.suppress(client.ApiException):
                ext.create_custom_resource_definition(crd)
        for crd in CRDS.values():
            name = crd["metadata"]["name"]
            self._wait(f"CRD {name}", lambda n=name: any(
                c.type == "Established" and c.status == "True"
                for c in ext.read_custom_resource_definition(n).status.conditions or []))

    def stop(self) -> None:
        for _, p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- clients ---------------------------------------------------------------------------------
    def api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig))  # type: ignore[no-untyped-call]

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api())

    def experiment_objects(self, experiment: str, namespace: str = "default") -> dict[str, list[str]]:
        """Names of what nnix's experiment ``experiment`` has in ``namespace`` (label ``nnix.io/experiment``), by
        kind (jobs, secrets, pods, tfjobs, pytorchjobs, frameworks); kinds with none are left out."""
        from kubernetes import client

        sel = f"nnix.io/experiment={experiment}"
        with self.api() as api:
            core = client.CoreV1Api(api)
            lists: dict[str, Any] = {
                "jobs": client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=sel),
                "secrets": core.list_namespaced_secret(namespace, label_selector=sel),
                "pods": core.list_namespaced_pod(namespace, label_selector=sel)}
            out = {kind: [str(o.metadata.name) for o in found.items] for kind, found in lists.items()}
            custom = client.CustomObjectsApi(api)
            for plural, (group, _) in _KINDS.items():
                listed: Any = custom.list_namespaced_custom_object(group, "v1", namespace, plural, label_selector=sel)
                out[plural] = [o["metadata"]["name"] for o in listed["items"]]
        return {k: v for k, v in out.items() if v}

    def create_namespace(self, name: str) -> None:
        from kubernetes import client

        with contextlib.suppress(client.ApiException):
            self.core().create_namespace({"metadata": {"name": name}})
        self._wait(f"service account of {name}", lambda: self.core().read_namespaced_service_account("default", name))


# --------------------------------------------------------------------------------------------------
# Operators, as far as nnix sees them


_KINDS = {
    "tfjobs": ("kubeflow.org", "tfReplicaSpecs"),
    "pytorchjobs": ("kubeflow.org", "pytorchReplicaSpecs"),
    "frameworks": ("frameworkcontroller.microsoft.com", "taskRoles"),
}


class FakeOperators:
    """Plays tf-operator, pytorch-operator and FrameworkController for one namespace (see the module docstring).

    ``auto=False`` creates no pods and patches no status: the test drives ``patch_status`` itself."""

    def __init__(self, lab: KubeLab, namespace: str = "default", versions: dict[str, str] | None = None,
                 auto: bool = True) -> None:
        self.lab = lab
        self.namespace = namespace
        self.versions = {"tfjobs": "v1", "pytorchjobs": "v1", "frameworks": "v1", **(versions or {})}
        self.auto = auto
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._done: set[str] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> FakeOperators:
        for plural in _KINDS:
            t = threading.Thread(target=self._run, args=(plural,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def patch_status(self, plural: str, name: str, status: dict[str, Any]) -> None:
        group = _KINDS[plural][0]
        self.lab.custom().patch_namespaced_custom_object_status(
            group, self.versions[plural], self.namespace, plural, name, {"status": status})

    # --- the loop --------------------------------------------------------------------------------
    def _run(self, plural: str) -> None:
        from kubernetes import client

        custom = self.lab.custom()
        group, _ = _KINDS[plural]
        while not self._stop.is_set():
            try:
                items = custom.list_namespaced_custom_object(group, self.versions[plural], self.namespace,
                                                             plural).get("items") or []
            except client.ApiException:
                items = []
            if self.auto:
                for obj in items:
                    with contextlib.suppress(Exception):
                        self._reconcile(plural, obj)
            self._stop.wait(0.3)

    def _pods(self, owner: str) -> list[Any]:
        pods = self.lab.core().list_namespaced_pod(self.namespace, label_selector=f"nnix-fake-owner={owner}").items
        return list(pods)

    def _reconcile(self, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        if meta.get("deletionTimestamp") or name in self._done:
            return
        status = obj.get("status") or {}
        if not status:
            if plural == "frameworks":
                self.patch_status(plural, name, {"state": "AttemptCreationPending", "attemptStatus": {"id": 0}})
            else:
                self.patch_status(plural, name, {"conditions": [_cond("Created", "JobCreated", f"{name} created")]})
            self._create_pods(plural, obj)
            return
        pods = self._pods(name)
        phases = {p.metadata.name: (p.status.phase or "Pending") for p in pods}
        primary = f"{name}-{self._primary_suffix(plural, obj)}"
        prim: Any = next((p for p in pods if p.metadata.name == primary), None)
        running = any(ph == "Running" for ph in phases.values())
        ended = prim is not None and phases.get(primary) in ("Succeeded", "Failed")
        failed_pod: Any = next((p for p in pods if phases[p.metadata.name] == "Failed"), None)
        if plural == "frameworks":
            state = status.get("state")
            if ended or failed_pod is not None:
                p = prim if ended else failed_pod
                code = _exit_code(p)
                ok = code == 0
                self.patch_status(plural, name, {"state": "Completed", "attemptStatus": {"id": 0, "completionStatus": {
                    "code": code, "phrase": "Succeeded" if ok else "ContainerFailed",
                    "type": {"name": "Succeeded" if ok else "Failed", "attributes": [] if ok else ["Transient"]},
                    "diagnostics": f"pod {p.metadata.name} exited with {code}"}}})
                self._finish(name, pods)
            elif running and state != "AttemptRunning":
                self.patch_status(plural, name, {"state": "AttemptRunning"})
            return
        conds = list(status.get("conditions") or [])
        last = conds[-1]["type"] if conds else ""
        if ended or failed_pod is not None:
            p = prim if ended else failed_pod
            code = _exit_code(p)
            kind = "Succeeded" if code == 0 else "Failed"
            conds.append(_cond(kind, f"Job{kind}", f"{name} {kind.lower()} (pod {p.metadata.name} exit code {code})"))
            self.patch_status(plural, name, {"conditions": conds})
            self._finish(name, pods)
        elif running and last != "Running":
            conds.append(_cond("Running", "JobRunning", f"{name} is running"))
            self.patch_status(plural, name, {"conditions": conds})

    def _finish(self, name: str, pods: list[Any]) -> None:
        with self._lock:
            self._done.add(name)
        for p in pods:  # like cleanPodPolicy Running: what still runs is deleted
            if p.status.phase in ("Pending", "Running"):
                with contextlib.suppress(Exception):
                    self.lab.core().delete_namespaced_pod(p.metadata.name, self.namespace)

    @staticmethod
    def _primary_suffix(plural: str, obj: dict[str, Any]) -> str:
        if plural == "frameworks":
            return f"{obj['spec']['taskRoles'][0]['name']}-0"
        if plural == "pytorchjobs":
            return "master-0"
        return "worker-0"

    def _roles(self, plural: str, obj: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        spec = obj["spec"]
        if plural == "frameworks":
            for role in spec["taskRoles"]:
                yield role["name"], int(role.get("taskNumber", 1)), role["task"]["pod"]
        else:
            for key, rs in spec[_KINDS[plural][1]].items():
                yield key, int(rs.get("replicas", 1)), rs["template"]

    def _create_pods(self, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        owner = [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": name, "uid": meta["uid"],
                  "controller": True, "blockOwnerDeletion": False}]
        roles = list(self._roles(plural, obj))
        for role, count, template in roles:
            for i in range(count):
                pod = json.loads(json.dumps(template))
                pmeta = pod.setdefault("metadata", {})
                pmeta["name"] = f"{name}-{role.lower()}-{i}"
                pmeta["ownerReferences"] = owner
                pmeta.setdefault("labels", {})["nnix-fake-owner"] = name
                spec = pod["spec"]
                spec.setdefault("restartPolicy", "Never")
                extra = {"frameworks": [{"name": "FC_TASK_INDEX", "value": str(i)},
                                        {"name": "FC_TASKROLE_NAME", "value": role}],
                         "pytorchjobs": [{"name": "RANK", "value": "0" if role == "Master" else str(i + 1)}],
                         "tfjobs": [{"name": "TF_CONFIG", "value": json.dumps(
                             {"task": {"type": role.lower(), "index": i}})}]}[plural]
                c = spec["containers"][0]
                c["env"] = [*(c.get("env") or []), *extra]
                self.lab.core().create_namespaced_pod(self.namespace, pod)


def _cond(kind: str, reason: str, message: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}


def _exit_code(pod: Any) -> int:
    for cs in pod.status.container_statuses or []:
        if cs.state is not None and cs.state.terminated is not None:
            return int(cs.state.terminated.exit_code)
    return -1 if pod.status.phase == "Failed" else 0
