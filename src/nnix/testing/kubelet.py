"""A process "kubelet" for tests: registers a Node with a real kube-apiserver and runs the first container of each
pod bound to it as a local process (``command`` + ``args``, its ``env`` with ``secretKeyRef`` / ``configMapKeyRef``
/ ``fieldRef`` resolved, ``workingDir``), then reports the pod Running and Succeeded / Failed with the real exit code
(``OOMKilled`` when the process got SIGKILL and ``NNIX_FAKE_OOM`` is set in its env, to test that path). A pod
being deleted has its process group killed (SIGTERM, SIGKILL after the grace period) and is then removed. As a
container runtime ends every process of a container with it, every process started in a pod (marked by
``NNIX_FAKE_POD`` in its environment, which its children inherit, new sessions included) is killed once the pod's
process has exited or the pod is deleted.

No images, volumes, probes or limits: every pod runs on this machine, with this machine's file system. What this
tests is the API work of a training service (objects, watches, statuses, cancellation, cleanup).

Run: ``python -m nnix.testing.kubelet`` with ``KUBECONFIG`` and ``NODE_NAME`` set
(see :class:`nnix.testing.kube.KubeLab`).
"""

from __future__ import annotations

import base64
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

NODE = os.environ.get("NODE_NAME", "nnix-node-1")
LOGDIR = os.environ.get("POD_LOG_DIR", "/tmp/nnix-kubelet-logs")
CPUS = os.environ.get("NODE_CPUS", str(os.cpu_count() or 2))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def main() -> None:  # pragma: no cover - runs as its own process in the tests
    import importlib

    # the client's stubs type its models strictly; this fake speaks raw dicts to it
    client: Any = importlib.import_module("kubernetes.client")
    config: Any = importlib.import_module("kubernetes.config")
    watch: Any = importlib.import_module("kubernetes.watch")

    config.load_kube_config(os.environ.get("KUBECONFIG"))
    v1 = client.CoreV1Api()
    coord = client.CoordinationV1Api()
    os.makedirs(LOGDIR, exist_ok=True)
    procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}

    def node_status() -> dict[str, Any]:
        t = _now()
        return {"status": {
            "capacity": {"cpu": CPUS, "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": CPUS, "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "nnix fake kubelet",
                            "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "nodeInfo": {"machineID": "x", "systemUUID": "x", "bootID": "x", "kernelVersion": os.uname().release,
                         "osImage": "fake", "containerRuntimeVersion": "process://0", "kubeletVersion": "v1.20.2",
                         "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64"}}}

    try:
        v1.create_node({"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    v1.patch_node_status(NODE, node_status())

    def heartbeat() -> None:
        while True:
            time.sleep(10)
            try:
                v1.patch_node_status(NODE, node_status())
                spec = {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": _now()}
                try:
                    coord.patch_namespaced_lease(NODE, "kube-node-lease", {"spec": spec})
                except client.ApiException as e:
                    if e.status != 404:
                        raise
                    coord.create_namespaced_lease("kube-node-lease", {
                        "metadata": {"name": NODE, "namespace": "kube-node-lease"}, "spec": spec})
            except Exception as e:
                print("heartbeat:", e, file=sys.stderr, flush=True)

    def env_of(pod: Any) -> dict[str, str]:
        c = pod.spec.containers[0]
        out = dict(os.environ)
        out.pop("KUBECONFIG", None)
        for e in c.env or []:
            value = e.value or ""
            ref = e.value_from
            if ref is not None and ref.secret_key_ref is not None:
                s = v1.read_namespaced_secret(ref.secret_key_ref.name, pod.metadata.namespace)
                value = base64.b64decode((s.data or {}).get(ref.secret_key_ref.key, "")).decode()
            elif ref is not None and ref.config_map_key_ref is not None:
                m = v1.read_namespaced_config_map(ref.config_map_key_ref.name, pod.metadata.namespace)
                value = (m.data or {}).get(ref.config_map_key_ref.key, "")
            elif ref is not None and ref.field_ref is not None:
                value = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
                         "spec.nodeName": NODE, "status.podIP": "127.0.0.1"}.get(ref.field_ref.field_path, "")
            out[e.name] = value
        out["POD_NAME"] = pod.metadata.name
        return out

    def set_status(pod: Any, phase: str, started: datetime.datetime, code: int | None = None,
                   reason: str = "") -> None:
        c = pod.spec.containers[0]
        if phase == "Running":
            state: dict[str, Any] = {"running": {"startedAt": started}}
        else:
            state = {"terminated": {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
                                    "startedAt": started, "finishedAt": _now()}}
        ready = "True" if phase == "Running" else "False"
        v1.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": started,
            "conditions": [{"type": "Ready", "status": ready}, {"type": "ContainersReady", "status": ready},
                           {"type": "Initialized", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": c.name, "ready": phase == "Running", "restartCount": 0,
                                   "image": c.image or "", "imageID": "", "state": state}]}})

    def kill_marked(marker: str) -> None:
        """Kill what is left of a pod's processes (those whose environment carries its marker)."""
        needle = f"NNIX_FAKE_POD={marker}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue

    def run(pod: Any) -> None:
        key = (pod.metadata.namespace, pod.metadata.name)
        c = pod.spec.containers[0]
        argv = list(c.command or []) + list(c.args or [])
        started = _now()
        try:
            env = {**env_of(pod), "NNIX_FAKE_POD": f"{key[0]}/{key[1]}/{pod.metadata.uid}"}
            log = open(f"{LOGDIR}/{key[0]}_{key[1]}.log", "wb")
            p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 cwd=c.working_dir or None)
        except Exception as e:
            print(f"pod {key}: cannot start: {e}", file=sys.stderr, flush=True)
            set_status(pod, "Failed", started, 128, "StartError")
            return
        procs[key] = p
        set_status(pod, "Running", started)
        rc = p.wait()
        procs.pop(key, None)
        kill_marked(env["NNIX_FAKE_POD"])  # the container is over: nothing started in it runs on
        code = rc if rc >= 0 else 128 - rc
        reason = "OOMKilled" if rc == -signal.SIGKILL and env.get("NNIX_FAKE_OOM") else ""
        try:
            set_status(pod, "Succeeded" if rc == 0 else "Failed", started, code, reason)
        except client.ApiException as e:
            if e.status != 404:
                raise

    def kill(key: tuple[str, str], grace: float) -> None:
        p = procs.get(key)
        if p is not None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            v1.delete_namespaced_pod(key[1], key[0], grace_period_seconds=0)
        except client.ApiException:
            pass

    threading.Thread(target=heartbeat, daemon=True).start()
    print(f"fake kubelet {NODE} ready", flush=True)
    seen: set[tuple[str, str]] = set()
    while True:
        w = watch.Watch()
        for ev in w.stream(v1.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={NODE}",
                           timeout_seconds=300):
            pod = ev["object"]
            key = (pod.metadata.namespace, pod.metadata.name)
            if ev["type"] == "DELETED":
                seen.discard(key)
                continue
            if pod.metadata.deletion_timestamp is not None:
                if key in seen:
                    grace = float(pod.metadata.deletion_grace_period_seconds or 0)
                    threading.Thread(target=kill, args=(key, min(grace, 5.0)), daemon=True).start()
                    seen.discard(key)
                else:
                    threading.Thread(target=kill, args=(key, 0.0), daemon=True).start()
                continue
            if key not in seen and pod.status.phase == "Pending":
                seen.add(key)
                threading.Thread(target=run, args=(pod,), daemon=True).start()


if __name__ == "__main__":
    main()
