"""The Kubernetes lab for ``bench/cluster_overhead.py``: a real control plane (etcd, kube-apiserver,
controller-manager, scheduler v1.20) plus nnix's process kubelet, started as in the tests
(:class:`nnix.testing.kube.KubeLab`). Environments are ``batch/v1`` Jobs; pods run as local processes, so what is
measured is nnix's API work and the control plane's latency (Job -> pod -> scheduled -> started), not image pulls.

``engine()`` yields the ``trainingService`` of an experiment on it (the benchmark adds ``reuseMode``): storage is a
hostPath seen at the same path by the manager and the pods. Its ``_bare`` entry (taken out by the benchmark) times
the engine alone: a bare Job from create to Complete, the bound for non-reuse mode. While it is open,
``KUBECONFIG`` points at the lab. Needs the control plane built by ``.ci/engines/k8s.sh``.

Alone: ``python bench/cluster/kubernetes.py [--trials 20] [--concurrency 2]`` runs the overhead benchmark for
Kubernetes only (the same as ``bench/cluster_overhead.py --engines kubernetes``).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def engine() -> Iterator[dict[str, Any]]:
    from nnix.testing.kube import KubeLab, kube_available

    reason = kube_available()
    if reason:
        raise RuntimeError(reason)
    with tempfile.TemporaryDirectory(prefix="nnix-bench-kube-") as tmp, KubeLab(Path(tmp) / "lab", crds=False) as lab:
        store = Path(tmp) / "storage"
        store.mkdir()
        saved = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(lab.kubeconfig)
        try:
            yield {"_bare": lambda: _bare_job_seconds(lab), "platform": "kubernetes", "cpu": "100m", "memory": "256Mi",
                   "storage": {"storageType": "hostPath", "path": str(store), "containerMountPoint": str(store)}}
        finally:
            if saved is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = saved


def _bare_job_seconds(lab: Any, reps: int = 10) -> tuple[str, float]:
    """The engine alone: a Job running ``python -c pass`` from create to Complete (watched), median of ``reps``."""
    import statistics
    import time

    from kubernetes import client, watch

    batch = client.BatchV1Api(lab.api())
    times = []
    for i in range(reps):
        name = f"bare-{i}-{os.getpid()}"
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "none", "command": [sys.executable, "-c", "pass"]}]}}}}
        t0 = time.perf_counter()
        batch.create_namespaced_job("default", body)
        for ev in watch.Watch().stream(batch.list_namespaced_job, "default", field_selector=f"metadata.name={name}",
                                       timeout_seconds=60):
            if any(c.type == "Complete" and c.status == "True" for c in ev["object"].status.conditions or []):
                break
        times.append(time.perf_counter() - t0)
        batch.delete_namespaced_job(name, "default", propagation_policy="Background")
    return "bare Job (python -c pass) create -> Complete", statistics.median(times)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent  # this file's name would shadow the kubernetes package
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.argv = [sys.argv[0], "--engines", "kubernetes", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "cluster_overhead.py"), run_name="__main__")
