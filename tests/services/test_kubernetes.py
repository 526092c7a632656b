"""The Kubernetes services on a real control plane: etcd + kube-apiserver + controller-manager + scheduler v1.20 and
nnix's process kubelet (``kube_lab``, :class:`nnix.testing.kube.KubeLab`), with nnix's TFJob / PyTorchJob /
Framework CRDs installed and :class:`nnix.testing.kube.FakeOperators` playing the operators (pods from the
templates, status patched the way the operators do). Jobs run end to end: the pods' commands (the real agent,
the real trials) run as local processes; storage is a hostPath seen at the same path by the manager and the pods.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nnix.config import parse_config
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.errors import ConfigError, ServiceError
from nnix.home import read_state
from nnix.services.base import ServiceContext
from nnix.services.cluster import EnvRequest
from nnix.services.kubernetes import (
    FrameworkLauncher,
    JobLauncher,
    KubeflowLauncher,
    KubeLauncher,
    framework_state,
    job_state,
    kubeflow_state,
)
from nnix.testing import wait_until
from nnix.testing.experiments import detach_when, make_experiment, run_experiment
from nnix.testing.killpoints import (
    Chain,
    assert_stopped_with_its_running_trials_canceled,
    chain_experiment,
    kill_at_every_point_and_resume,
    leftover_processes,
    settled,
)
from nnix.testing.kube import FakeOperators, KubeLab
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"engine_poll_interval": 0.3, "end_grace": 0.5, "poll_interval": 0.05, "kill_grace": 1.0}
TRIAL = """import nni, os, time
p = nni.get_next_parameter()
for i in range(int(os.environ.get("STEPS", "3"))):
    nni.report_intermediate_result(p["x"] * i)
    time.sleep(float(os.environ.get("STEP_S", "0")))
print("ran in pod", os.environ.get("POD_NAME"), "platform", os.environ.get("NNI_PLATFORM"))
nni.report_final_result(p["x"])
"""


# --- pure: states ----------------------------------------------------------------------------------


def _pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, **status}}


def test_job_states_carry_the_engines_words() -> None:
    job: dict[str, Any] = {"status": {}}
    assert job_state(job, None).state == "pending"
    unsched = _pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                           "message": "0/1 nodes are available: 1 Insufficient cpu."}])
    st = job_state(job, unsched)
    assert st.state == "pending" and "Insufficient cpu" in st.reason
    pull = _pod("Pending", containerStatuses=[{"state": {"waiting": {"reason": "ImagePullBackOff",
                                                                      "message": "no such image"}}}])
    assert job_state(job, pull).reason.startswith("ImagePullBackOff")
    assert job_state(job, _pod("Running")).state == "running"
    oom = _pod("Failed", containerStatuses=[{"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    st = job_state({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}},
                   oom)
    assert st.state == "ended" and st.killed and "OOMKilled" in st.reason
    done = _pod("Succeeded", containerStatuses=[{"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}])
    st = job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, done)
    assert st.state == "ended" and not st.killed
    st = job_state({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                               "message": "Job was active longer than specified deadline"}]}}, None)
    assert st.killed and "DeadlineExceeded" in st.reason
    evicted = _pod("Failed", reason="Evicted", message="The node was low on resource: memory.")
    assert job_state(job, evicted) == job_state(job, evicted) and job_state(job, evicted).killed
    gone = job_state(None, None)
    assert gone.state == "ended" and gone.killed and "deleted" in gone.reason


def test_kubeflow_and_framework_states() -> None:
    def kf(*kinds: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": k, "status": "True", "reason": f"Job{k}", "message": "m"}
                                          for k in kinds]}}

    assert kubeflow_state({"status": {}}).state == "pending"
    assert kubeflow_state(kf("Created")).state == "pending"
    assert kubeflow_state(kf("Created", "Running")).state == "running"
    assert kubeflow_state(kf("Created", "Running", "Restarting")).state == "running"
    st = kubeflow_state(kf("Created", "Running", "Failed"))
    assert st.state == "ended" and "JobFailed" in st.reason
    assert kubeflow_state(kf("Created", "Running", "Succeeded")).state == "ended"
    assert kubeflow_state(None).killed

    for state in ("AttemptCreationPending", "AttemptCreationRequested", "AttemptPreparing"):
        assert framework_state({"status": {"state": state}}).state == "pending"
    assert framework_state({"status": {"state": "AttemptRunning"}}).state == "running"
    ok = framework_state({"status": {"state": "Completed", "attemptStatus": {"completionStatus": {
        "code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded"}}}}})
    assert ok.state == "ended" and not ok.killed and "Succeeded" in ok.reason
    lost = framework_state({"status": {"state": "Completed", "attemptStatus": {"completionStatus": {
        "code": -220, "phrase": "PodExternalDeleted", "type": {"name": "Failed"}, "diagnostics": "pod deleted"}}}})
    assert lost.state == "ended" and lost.killed and "PodExternalDeleted" in lost.reason and "-220" in lost.reason


# --- pure: configs -----------------------------------------------------------------------------------


def _parse(tmp_path: Path, ts: dict[str, Any], **top: Any) -> Any:
    data = {"searchSpace": SPACE, "trialCommand": "python3 t.py", "trialConcurrency": 1,
            "tuner": {"name": "Random"}, "trainingService": ts, **top}
    return parse_config(data, tmp_path).config


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    nfs = {"storageType": "nfs", "server": "10.0.0.5", "path": "/export"}
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "kubeflow", "operator": "tf-operator", "apiVersion": "v1", "storage": nfs})
    assert "trainingService" in str(e.value) and "needs a worker role" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "kubeflow", "operator": "pytorch-operator", "apiVersion": "v2", "storage": nfs,
                          "master": {"command": "x"}})
    assert "trainingService.apiVersion" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "kubernetes", "storage": {"storageType": "nfs", "server": "s"}})
    assert "trainingService.storage" in str(e.value) and "path" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "kubernetes", "storage": {"storageType": "pvc", "claimName": "data"}})
    assert "localMountPoint" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "kubernetes", "memory": "lots", "storage": nfs})
    assert "trainingService.memory" in str(e.value) and "4Gi" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, {"platform": "frameworkcontroller", "storage": nfs,
                          "taskRoles": [{"name": "Worker", "taskNumber": 1}]})
    assert "taskRoles.0.name" in str(e.value) or "taskRoles[0].name" in str(e.value)
    cfg = _parse(tmp_path, {"platform": "kubernetes", "memory": 4096, "cpu": 0.5, "storage": nfs})
    assert cfg.training_service.memory == "4096Mi" and cfg.training_service.cpu == "0.5"


def test_v1_kubeflow_and_frameworkcontroller_configs_translate(tmp_path: Path) -> None:
    (tmp_path / "ss.json").write_text(json.dumps(SPACE))
    common = ("authorName: a\nexperimentName: e\ntrialConcurrency: 1\nsearchSpacePath: ss.json\n"
              "useAnnotation: false\ntuner: {builtinTunerName: TPE}\n")
    (tmp_path / "kf.yml").write_text(common + """trainingServicePlatform: kubeflow
trial:
  codeDir: .
  worker: {replicas: 2, command: python3 mnist.py, gpuNum: 1, cpuNum: 2, memoryMB: 8192, image: img:1}
  ps: {replicas: 1, command: python3 ps.py, gpuNum: 0, cpuNum: 1, memoryMB: 4096, image: img:1}
kubeflowConfig:
  operator: tf-operator
  apiVersion: v1
  storage: nfs
  nfs: {server: 10.10.10.10, path: /var/nfs/general}
""")
    from nnix.config import load_config

    cfg = load_config(tmp_path / "kf.yml").config
    ts: Any = cfg.training_service  # a KubeflowConfig: its roles and storage are checked below
    assert cfg.trial_command == "python3 mnist.py"  # NNI's converter: the worker's command
    assert ts.storage.storage_type == "nfs" and ts.storage.server == "10.10.10.10"
    assert ts.worker.replicas == 2 and ts.worker.gpu_number == 1 and ts.worker.memory_size == "8192Mi"
    assert ts.worker.docker_image == "img:1" and ts.ps.command == "python3 ps.py"
    (tmp_path / "fc.yml").write_text(common + """trainingServicePlatform: frameworkcontroller
trial:
  codeDir: .
  taskRoles:
    - name: worker
      taskNum: 2
      command: python3 mnist.py
      gpuNum: 0
      cpuNum: 1
      memoryMB: 2048
      image: img:2
      frameworkAttemptCompletionPolicy: {minFailedTaskCount: 1, minSucceededTaskCount: 2}
frameworkcontrollerConfig:
  storage: nfs
  serviceAccountName: frameworkcontroller
  nfs: {server: 10.10.10.10, path: /var/nfs/general}
""")
    cfg = load_config(tmp_path / "fc.yml").config
    fc: Any = cfg.training_service  # a FrameworkControllerConfig
    role = fc.task_roles[0]
    assert cfg.trial_command == "python3 mnist.py"
    assert role.task_number == 2 and role.framework_attempt_completion_policy.min_succeed_task_count == 2
    assert fc.service_account_name == "frameworkcontroller"


# --- the lab -------------------------------------------------------------------------------------------


def _name(obj: Any) -> str:
    """The name of a Kubernetes object as the client returns it (its models make every field optional)."""
    return str(obj.metadata.name)


def _experiment(tmp_path: Path, ts: dict[str, Any], *, trials: int = 4, concurrency: int = 2,
                command: str = "python3 trial.py", **top: Any) -> tuple[str, Path, Path]:
    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(TRIAL)
    store = tmp_path / "storage"
    store.mkdir(exist_ok=True)
    storage = {"storageType": "hostPath", "path": str(store), "containerMountPoint": str(store)}
    exp_id, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand=command,
                                      trialConcurrency=concurrency, maxTrialNumber=trials, nniManagerIp="127.0.0.1",
                                      trainingService={"storage": storage, **ts}, **top)
    return exp_id, exp_dir, store


def _check_trials(st: Any, exp_id: str, store: Path, n: int, platform: str) -> None:
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == n
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    for t in st.trials.values():
        assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == [0, 1, 2]
        assert sum(m.type is MetricType.FINAL for m in t.metrics) == 1
        out = Path(str(t.output_dir))
        assert out == store / "nnix" / exp_id / "trials" / t.trial_id  # on the storage, read where the pod wrote
        assert f"platform {platform}" in (out / "trial.stdout").read_text()


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_experiment_on_kubernetes_jobs(tmp_path: Path, kube_lab: KubeLab, reuse: bool) -> None:
    exp_id, exp_dir, store = _experiment(tmp_path, {"platform": "kubernetes", "reuseMode": reuse, "cpu": "100m",
                                                    "memory": "256Mi"})
    st = run_experiment(exp_dir, timeout=120, **FAST)
    _check_trials(st, exp_id, store, 4, "kubernetes")
    envs = {t.environment_id for t in st.trials.values()}
    assert len(envs) == (4 if not reuse else len(envs)) and (len(envs) <= 2 if reuse else True)
    # every Job, pod and Secret of the experiment is deleted at the end
    wait_until(lambda: not kube_lab.experiment_objects(exp_id), 30)


def _launcher(cls: type[KubeLauncher], tmp_path: Path, ts: dict[str, Any], gpus: int = 0) -> KubeLauncher:
    store = tmp_path / "storage"
    store.mkdir(exist_ok=True)
    (tmp_path / "code").mkdir(exist_ok=True)
    cfg = _parse(tmp_path, {"storage": {"storageType": "hostPath", "path": str(store),
                                        "containerMountPoint": str(store)}, **ts},
                 trialGpuNumber=gpus, trialCodeDirectory=str(tmp_path / "code"))
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir(exist_ok=True)
    return cls(cfg.training_service, ServiceContext("kexp" + tmp_path.name[-4:].lower().replace("_", "0"), exp_dir),
               tmp_path / "code", gpus)


def test_job_object_token_resources_and_cleanup(tmp_path: Path, kube_lab: KubeLab) -> None:
    from kubernetes import client

    launcher = _launcher(JobLauncher, tmp_path, {
        "platform": "kubernetes", "cpu": 2, "memory": "1Gi", "serviceAccountName": "default",
        "nodeSelector": {"kubernetes.io/hostname": "elsewhere"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {"team": "hpo"}}, gpus=1)

    async def go() -> None:
        try:
            await check()
        finally:
            await launcher.close()

    async def check() -> None:
        await launcher.prepare()
        req = EnvRequest("e1-abc", True, "http://127.0.0.1:1", "s3cret-token")
        name = await launcher.launch(req)
        batch = client.BatchV1Api(kube_lab.api())
        job: Any = batch.read_namespaced_job(name, "default")  # the client's models: every field optional
        pod = job.spec.template.spec
        c = pod.containers[0]
        assert name == f"nniexp{launcher.exp}enve1-abc"
        assert job.metadata.labels["app"] == "nni-kubernetes-trial" and job.metadata.labels["team"] == "hpo"
        assert "s3cret-token" not in json.dumps(client.ApiClient().sanitize_for_serialization(job))  # type: ignore[no-untyped-call]
        token_env = next(e for e in c.env if e.name == "NNIX_AGENT_TOKEN")
        assert token_env.value is None and token_env.value_from.secret_key_ref.name == f"{name}-token"
        assert c.resources.limits == {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
        assert c.resources.requests == c.resources.limits
        assert pod.service_account_name == "default" and pod.node_selector == {"kubernetes.io/hostname": "elsewhere"}
        assert pod.tolerations[0].key == "gpu" and pod.restart_policy == "Never" and job.spec.backoff_limit == 0
        secret: Any = kube_lab.core().read_namespaced_secret(f"{name}-token", "default")
        assert secret.metadata.owner_references[0].uid == job.metadata.uid  # deleted with the Job
        # no node matches the selector: pending, with the scheduler's words (once the scheduler has looked)
        deadline = time.monotonic() + 60
        while True:
            st = (await launcher.poll([name]))[name]
            if (st.state == "pending" and "node" in st.reason.lower()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert st.state == "pending" and "node" in st.reason.lower(), st
        await launcher.stop(name)
        wait_until(lambda: not kube_lab.experiment_objects(launcher.exp), 30)

    asyncio.run(go())


def test_clear_errors_for_a_missing_namespace_or_operator(tmp_path: Path, kube_lab: KubeLab) -> None:
    launcher = _launcher(JobLauncher, tmp_path, {"platform": "kubernetes", "namespace": "nowhere"})
    with pytest.raises(ServiceError) as e:
        asyncio.run(launcher.prepare())
    assert "namespace 'nowhere' does not exist" in e.value.message and "kubectl create namespace" in str(e.value.hint)
    kf = _launcher(KubeflowLauncher, tmp_path, {"platform": "kubeflow", "operator": "tf-operator",
                                                "apiVersion": "v1", "worker": {"command": "x"}})
    from dataclasses import replace

    kf.resource = replace(kf.resource, plural="mxjobs", kind="MXJob")
    with pytest.raises(ServiceError) as e:
        asyncio.run(kf.prepare())
    assert "no MXJob resource" in e.value.message and "tf-operator" in str(e.value.hint)


def test_the_apiserver_accepts_nnix_objects_and_its_crds_validate(tmp_path: Path, kube_lab: KubeLab) -> None:
    from kubernetes import client

    custom = kube_lab.custom()
    cases: list[tuple[type[KubeLauncher], dict[str, Any]]] = [
        (KubeflowLauncher, {"platform": "kubeflow", "operator": "tf-operator", "apiVersion": "v1",
                            "worker": {"replicas": 2, "command": "python3 w.py"}, "ps": {"command": "python3 ps.py"}}),
        (KubeflowLauncher, {"platform": "kubeflow", "operator": "tf-operator", "apiVersion": "v1beta2",
                            "worker": {"command": "python3 w.py"}}),
        (KubeflowLauncher, {"platform": "kubeflow", "operator": "pytorch-operator", "apiVersion": "v1",
                            "master": {"command": "python3 m.py"}, "worker": {"replicas": 3, "command": "w"}}),
        (FrameworkLauncher, {"platform": "frameworkcontroller", "serviceAccountName": "default", "taskRoles": [
            {"name": "worker", "taskNumber": 2, "command": "python3 w.py",
             "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceedTaskCount": 2}},
            {"name": "ps", "command": "python3 ps.py"}]}),
    ]
    for cls, ts in cases:
        launcher = _launcher(cls, tmp_path, ts)
        launcher._wheels = ["nnix.whl"]
        body = launcher.build(launcher.object_name("e1"), EnvRequest("e1", False, "http://h:1", "t"), "sec")
        r = launcher.resource
        created = custom.create_namespaced_custom_object(r.group, r.version, "default", r.plural, body,
                                                         dry_run="All")
        assert created["spec"] == body["spec"]  # accepted as is: nothing pruned by the CRD's schema
        bad = json.loads(json.dumps(body))
        if r.plural == "frameworks":
            bad["spec"]["taskRoles"][0]["taskNumber"] = -1
            bad["spec"]["executionType"] = "Go"
        else:
            next(iter(next(iter(bad["spec"].values())).values()))["restartPolicy"] = "Sometimes"
        with pytest.raises(client.ApiException) as e:
            custom.create_namespaced_custom_object(r.group, r.version, "default", r.plural, bad, dry_run="All")
        assert e.value.status == 422
    # the roles as NNI gives them: replica types, container names, completion policy spelled for the CRD
    tf = _launcher(KubeflowLauncher, tmp_path, cases[0][1])
    tf._wheels = []
    spec = tf.build("n", EnvRequest("e1", False, "http://h:1", "t"), "sec")["spec"]["tfReplicaSpecs"]
    assert set(spec) == {"Worker", "PS"} and spec["Worker"]["replicas"] == 2
    assert spec["Worker"]["template"]["spec"]["containers"][0]["name"] == "tensorflow"
    fc = _launcher(FrameworkLauncher, tmp_path, cases[3][1])
    fc._wheels = []
    roles = fc.build("n", EnvRequest("e1", False, "http://h:1", "t"), "sec")["spec"]["taskRoles"]
    assert roles[0]["frameworkAttemptCompletionPolicy"] == {"minFailedTaskCount": 1, "minSucceededTaskCount": 2}
    assert roles[0]["task"]["pod"]["spec"]["serviceAccountName"] == "default"


def test_status_transitions_as_the_operators_patch_them(tmp_path: Path, kube_lab: KubeLab) -> None:
    ops = FakeOperators(kube_lab, auto=False)
    tf = _launcher(KubeflowLauncher, tmp_path, {"platform": "kubeflow", "operator": "tf-operator",
                                                "apiVersion": "v1", "worker": {"command": "x"}})
    (tmp_path / "fc").mkdir()
    fc = _launcher(FrameworkLauncher, tmp_path / "fc",
                   {"platform": "frameworkcontroller", "taskRoles": [{"name": "worker", "command": "x"}]})

    async def poll(launcher: KubeLauncher, name: str, want: str, reason: str = "") -> Any:
        deadline = time.monotonic() + 60
        while True:  # until the watch has seen the patch
            st = (await launcher.poll([name]))[name]
            if (st.state == want and st.reason.startswith(reason)) or time.monotonic() > deadline:
                return st
            await asyncio.sleep(0.1)

    def cond(kind: str, reason: str) -> dict[str, Any]:
        return {"type": kind, "status": "True", "reason": reason, "message": f"{kind} now"}

    async def go() -> None:
        try:
            await transitions()
        finally:
            await tf.close()
            await fc.close()

    async def transitions() -> None:
        await tf.prepare()
        name = await tf.launch(EnvRequest("e7", False, "http://h:1", "t"))
        assert (await poll(tf, name, "pending")).state == "pending"
        ops.patch_status("tfjobs", name, {"conditions": [cond("Created", "TFJobCreated")]})
        assert (await poll(tf, name, "pending", "Created")).reason.startswith("Created")
        ops.patch_status("tfjobs", name, {"conditions": [cond("Created", "TFJobCreated"),
                                                         cond("Running", "TFJobRunning")]})
        assert (await poll(tf, name, "running")).state == "running"
        ops.patch_status("tfjobs", name, {"conditions": [cond("Created", "TFJobCreated"),
                                                         cond("Running", "TFJobRunning"),
                                                         cond("Failed", "TFJobFailed")]})
        st = await poll(tf, name, "ended")
        assert st.state == "ended" and "TFJobFailed" in st.reason
        wait_until(lambda: not kube_lab.experiment_objects(tf.exp), 30)  # ended: deleted, with its Secret
        assert (await tf.poll([name]))[name] == st  # and its last state is still what nnix says

        await fc.prepare()
        name = await fc.launch(EnvRequest("e8", False, "http://h:1", "t"))
        ops.patch_status("frameworks", name, {"state": "AttemptCreationRequested"})
        assert (await poll(fc, name, "pending", "AttemptCreationRequested")).reason == "AttemptCreationRequested"
        ops.patch_status("frameworks", name, {"state": "AttemptRunning"})
        assert (await poll(fc, name, "running")).state == "running"
        ops.patch_status("frameworks", name, {"state": "Completed", "attemptStatus": {"completionStatus": {
            "code": -220, "phrase": "FrameworkAttemptPreempted", "type": {"name": "Failed"}}}})
        st = await poll(fc, name, "ended")
        assert st.killed and "FrameworkAttemptPreempted" in st.reason

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["tf-operator", "pytorch-operator", "frameworkcontroller"])
def test_experiment_through_the_operators(tmp_path: Path, kube_lab: KubeLab, kube_operators: FakeOperators,
                                          kind: str) -> None:
    if kind == "frameworkcontroller":
        ts: dict[str, Any] = {"platform": "frameworkcontroller", "taskRoles": [
            {"name": "worker", "command": "python3 trial.py",
             "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceedTaskCount": 1}},
            {"name": "ps", "command": "sleep 60"}]}
    elif kind == "tf-operator":
        ts = {"platform": "kubeflow", "operator": kind, "apiVersion": "v1",
              "worker": {"replicas": 2, "command": "python3 trial.py"}, "ps": {"command": "sleep 60"}}
    else:
        ts = {"platform": "kubeflow", "operator": kind, "apiVersion": "v1",
              "master": {"command": "python3 trial.py"}, "worker": {"command": "sleep 60"}}
    exp_id, exp_dir, store = _experiment(tmp_path, {**ts, "reuseMode": kind != "tf-operator"}, trials=3)
    st = run_experiment(exp_dir, timeout=120, **FAST)
    _check_trials(st, exp_id, store, 3, "kubeflow" if kind != "frameworkcontroller" else kind)
    for t in st.trials.values():  # the primary replica ran the trials
        primary = "worker-0" if kind != "pytorch-operator" else "master-0"
        assert primary in (Path(str(t.output_dir)) / "trial.stdout").read_text()
    # objects, pods, Secrets gone
    wait_until(lambda: not kube_lab.experiment_objects(exp_id), 30, "the experiment's objects gone",
               show=lambda: kube_lab.experiment_objects(exp_id))


def test_a_job_deleted_outside_nnix_fails_its_trial_with_the_reason(tmp_path: Path, kube_lab: KubeLab) -> None:
    from kubernetes import client

    exp_id, exp_dir, _ = _experiment(tmp_path, {"platform": "kubernetes", "reuseMode": True}, trials=1,
                                     concurrency=1, command="STEP_S=5 python3 trial.py")
    batch = client.BatchV1Api(kube_lab.api())

    def delete_when_running() -> None:
        def running() -> bool:
            st = read_state(exp_dir)
            return any(t.status is TrialStatus.RUNNING and t.metrics for t in st.trials.values())

        wait_until(running, 60)
        for j in batch.list_namespaced_job("default", label_selector=f"nnix.io/experiment={exp_id}").items:
            batch.delete_namespaced_job(_name(j), "default", propagation_policy="Background")

    threading.Thread(target=delete_when_running, daemon=True).start()
    st = run_experiment(exp_dir, timeout=120, **FAST)
    (t,) = st.trials.values()
    assert t.status is TrialStatus.FAILED
    assert "deleted outside nnix" in (t.message or ""), t.message


def test_a_detached_manager_is_resumed_and_takes_its_jobs_over(tmp_path: Path, kube_lab: KubeLab) -> None:
    from kubernetes import client

    exp_id, exp_dir, _ = _experiment(tmp_path, {"platform": "kubernetes"}, trials=2, concurrency=2,
                                     command="STEPS=40 STEP_S=0.1 python3 trial.py")
    def both_running() -> bool:
        st = read_state(exp_dir)
        return len(st.trials) == 2 and all(t.status is TrialStatus.RUNNING and len(t.metrics) >= 3
                                           for t in st.trials.values())

    detach_when(exp_dir, both_running, 60, **FAST)  # the manager goes away; its Jobs keep running
    batch = client.BatchV1Api(kube_lab.api())
    sel = f"nnix.io/experiment={exp_id}"
    jobs = {_name(j) for j in batch.list_namespaced_job("default", label_selector=sel).items}
    saved = json.loads((exp_dir / "cluster.json").read_text())
    assert jobs == {e["handle"] for e in saved["envs"].values()} and len(jobs) == 2
    st = run_experiment(exp_dir, action="resume", timeout=120, **FAST)
    assert st.status is ExperimentStatus.DONE, st.message
    for t in st.trials.values():
        assert t.status is TrialStatus.SUCCEEDED, t.message
        assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == list(range(40))  # once each
    assert {t.environment_id for t in st.trials.values()} == {e for e in saved["envs"]}  # taken over, no new Job
    wait_until(lambda: not kube_lab.experiment_objects(exp_id), 30, show=lambda: kube_lab.experiment_objects(exp_id))


# --- a manager killed -9 at chosen points (nnix.testing.killpoints) ------------------------------------------------
METRICS = 12


def _chain(tmp_path: Path, reuse: bool) -> Chain:
    gates = tmp_path / "gates"
    fields = chain_experiment(tmp_path / "code", gates, metrics=METRICS)
    store = tmp_path / "storage"
    store.mkdir(exist_ok=True)
    storage = {"storageType": "hostPath", "path": str(store), "containerMountPoint": str(store)}
    exp_id, _ = make_experiment(tmp_path / "code", **{
        **fields, "trialConcurrency": 2, "maxTrialNumber": 4, "nniManagerIp": "127.0.0.1",
        "trainingService": {"platform": "kubernetes", "reuseMode": reuse, "storage": storage}})
    return Chain(exp_id, tmp_path, gates, {**FAST, "lost_timeout": 20.0})


def test_a_manager_killed_at_each_point_is_resumed_on_kubernetes(tmp_path: Path, kube_lab: KubeLab) -> None:
    """Non-reuse (a Job per trial): kill -9 before a Job is created (its token Secret may be), after it was created
    but before its name was recorded, at its agent's hello, while trials run, just after one ended; each time
    resumed. Every trial succeeds, every metric once, no ERROR, no Job, pod or Secret of the experiment left."""
    chain = _chain(tmp_path, reuse=False)
    kill_at_every_point_and_resume(chain, METRICS)
    assert settled(lambda: kube_lab.experiment_objects(chain.exp_id)) == {}


@pytest.mark.parametrize("verb", ["stop", "delete"])
def test_stop_or_delete_after_a_kill_deletes_every_object(tmp_path: Path, kube_lab: KubeLab, verb: str) -> None:
    """kill -9 while trials run, then `nnix stop` / `nnix experiment delete`: every Job, pod and token Secret of the
    experiment is deleted, the trials shown RUNNING are USER_CANCELED (stop)."""
    from nnix.testing.faults import nnix

    chain = _chain(tmp_path, reuse=True)
    chain.kill_at("create", "running")
    assert kube_lab.experiment_objects(chain.exp_id)
    res = nnix("stop", chain.exp_id) if verb == "stop" else nnix("experiment", "delete", chain.exp_id, "--yes")
    assert res.returncode == 0, res.stderr
    assert "kubernetes: cancelled" in res.stdout, res.stdout
    assert settled(lambda: kube_lab.experiment_objects(chain.exp_id)) == {}
    assert settled(lambda: leftover_processes(chain.exp_id)) == []
    if verb == "stop":
        assert_stopped_with_its_running_trials_canceled(chain.exp_dir)
