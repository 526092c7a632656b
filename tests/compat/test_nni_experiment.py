"""NNI 3.0's launcher API (``nni.experiment``) on nnix, driven as NNI's quickstart and notebooks drive it:
config objects built attribute by attribute, real manager daemons, real trial processes, a real Jupyter kernel."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nnix
from nnix.compat.nni_experiment import (
    AlgorithmConfig,
    AmlConfig,
    CustomAlgorithmConfig,
    Experiment,
    ExperimentConfig,
    K8sNfsConfig,
    KubeflowConfig,
    KubeflowRoleConfig,
    LocalConfig,
    NniConfigError,
    NotSupportedByNnixError,
    RemoteConfig,
    RemoteMachineConfig,
    TrialResult,
    UnknownFieldError,
)
from nnix.config import LocalConfig as NativeLocalConfig
from nnix.config import RemoteConfig as NativeRemoteConfig
from nnix.core.status import TrialStatus
from nnix.errors import NnixError
from nnix.home import Registry, pid_alive, read_state
from nnix.testing import wait_until
from nnix.testing.ctrlc import StartGate, ctrl_c_at_the_gate, foreground_job, start_gate
from nnix.testing.spaces import UNIT as SPACE
from nnix.testing.sshhosts import SshHost, SshLab, unavailable

SRC = Path(nnix.__file__).resolve().parents[1]
TRIAL = """import os, time, nni
hold = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold")
params = nni.get_next_parameter()
deadline = time.monotonic() + 60
while os.path.exists(hold) and time.monotonic() < deadline:  # the test holds trials running with this file
    time.sleep(0.02)
nni.report_intermediate_result(params["x"])
nni.report_final_result(params["x"] * 2)
"""


def state_of(exp_id: str, trials: bool = False) -> Any:
    return read_state(Path(Registry().get(exp_id).dir), summary=not trials)


def watchers_of(exp_id: str) -> list[int]:
    """Pids of the watcher processes of ``exp_id`` still alive."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nnix.compat.nni_watch" in cmd and exp_id.encode() in cmd:
            out.append(int(proc.name))
    return out


def gone(exp_id: str) -> bool:
    """The experiment's manager and its watcher have exited."""
    return not pid_alive(state_of(exp_id).manager_pid) and not watchers_of(exp_id)


@pytest.fixture
def code_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The launcher's current directory, holding the trial script (as NNI's quickstart lays it out)."""
    (tmp_path / "trial.py").write_text(TRIAL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def config_of(exp: Experiment) -> ExperimentConfig:
    """The experiment's config (None only for an experiment attached by id)."""
    assert exp.config is not None
    return exp.config


def quickstart(exp: Experiment, trials: int = 3) -> Experiment:
    config = config_of(exp)
    config.trial_command = f"{sys.executable} trial.py"
    config.trial_code_directory = "."
    config.search_space = SPACE
    assert config.tuner is not None
    config.tuner.name = "TPE"
    config.tuner.class_args["optimize_mode"] = "maximize"
    config.max_trial_number = trials
    config.trial_concurrency = 2
    return exp


# --------------------------------------------------------------------------------------------------
# Config objects


def test_a_config_is_built_attribute_by_attribute_with_nni_defaults(code_dir: Path) -> None:
    config = ExperimentConfig("local")
    assert isinstance(config.training_service, LocalConfig)
    assert config.trial_code_directory == "." and config.use_annotation is False and config.debug is False
    assert config.experiment_working_directory == "~/nni-experiments"
    assert config.training_service.max_trial_number_per_gpu == 1 and config.training_service.use_active_gpu is None
    assert config.tuner is not None
    assert config.tuner.name is None and config.tuner.class_args == {}  # placeholders until touched
    config.trial_command = "python3 trial.py"
    config.search_space = SPACE
    config.trial_concurrency = 2
    config.tuner.name = "TPE"
    config.tuner.class_args["optimize_mode"] = "maximize"
    config.training_service.use_active_gpu = False
    config.trialGpuNumber = 0  # NNI matches names ignoring case and underscores
    assert config.trial_gpu_number == 0 and config.trainingService.useActiveGpu is False
    # only what was set goes to the schema; the assessor/advisor placeholders are dropped
    assert config.to_nni_dict() == {
        "search_space": SPACE, "trial_command": "python3 trial.py", "trial_concurrency": 2, "trial_gpu_number": 0,
        "tuner": {"name": "TPE", "class_args": {"optimize_mode": "maximize"}},
        "training_service": {"platform": "local", "use_active_gpu": False},
    }
    loaded = config.validate()  # the native schema, paths relative to the current directory
    assert loaded.config.trial_code_directory == code_dir
    assert loaded.config.tuner.class_args == {"optimize_mode": "maximize"}
    assert config.json()["trainingService"] == {"platform": "local", "useActiveGpu": False, "maxTrialNumberPerGpu": 1,
                                                "reuseMode": False}
    # the other forms: keyword arguments, nested dicts, an algorithm object, a list of platforms (hybrid)
    other = ExperimentConfig(trial_command="x", trialConcurrency=1, search_space={},
                             tuner=AlgorithmConfig(name="Random"),
                             training_service={"platform": "local", "gpu_indices": "0"})
    validated = other.validate().config.training_service
    assert isinstance(validated, NativeLocalConfig) and validated.gpu_indices == [0]
    hybrid = ExperimentConfig(["local", "remote"])
    assert isinstance(hybrid.training_service, list)
    assert [type(s) for s in hybrid.training_service] == [LocalConfig, RemoteConfig]
    custom = CustomAlgorithmConfig(class_name="my_tuner.MyTuner")
    assert custom.code_directory == "."


def test_a_remote_config_is_built_attribute_by_attribute(code_dir: Path) -> None:
    (code_dir / "id_key").write_text("not a real key\n")
    experiment = quickstart(Experiment("remote"))
    ts = config_of(experiment).training_service
    assert isinstance(ts, RemoteConfig) and ts.machine_list == []
    ts.machine_list.append(RemoteMachineConfig(host="10.0.0.5", user="alice", ssh_key_file="id_key"))
    machine = RemoteMachineConfig()
    machine.host = "10.0.0.6"
    machine.port = 2222
    machine.user = "bob"
    machine.password = "secret"
    machine.python_path = "/opt/py/bin"
    ts.machine_list.append(machine)
    ts.trust_unknown_hosts = True  # nnix's own field of the platform
    assert machine.ssh_key_file == "~/.ssh/id_rsa"  # NNI's default, shown
    native = config_of(experiment).validate().config.training_service
    assert isinstance(native, NativeRemoteConfig)
    assert native.platform == "remote"
    assert [m.label for m in native.machine_list] == ["alice@10.0.0.5:22", "bob@10.0.0.6:2222"]
    assert native.machine_list[0].ssh_key_file == code_dir / "id_key"  # relative to the current directory
    password = native.machine_list[1].password
    assert password is not None and password.get_secret_value() == "secret"
    assert native.trust_unknown_hosts is True
    # a whole list assigned at once, as NNI's docs write it; dicts become machine objects
    ts.machine_list = [{"host": "h", "user": "u", "port": 70000}]  # type: ignore[list-item]  # NNI takes dicts
    with pytest.raises(NniConfigError) as e:
        config_of(experiment).validate()
    assert "training_service.machine_list[0].port: input should be less than or equal to 65535" in str(e.value)


def test_kubeflow_objects_nest_like_nni() -> None:
    config = ExperimentConfig("kubeflow")
    ts = config.training_service
    assert isinstance(ts, KubeflowConfig) and ts.namespace == "default"
    ts.operator = "tf-operator"
    ts.api_version = "v1"
    ts.storage = K8sNfsConfig(server="10.0.0.1", path="/exports")
    ts.worker = KubeflowRoleConfig(replicas=2, command="python3 trial.py", cpu_number=1, memory_size="2g")
    assert config.to_nni_dict()["training_service"] == {
        "platform": "kubeflow", "operator": "tf-operator", "api_version": "v1",
        "storage": {"storage_type": "nfs", "server": "10.0.0.1", "path": "/exports"},
        "worker": {"replicas": 2, "command": "python3 trial.py", "cpu_number": 1, "memory_size": "2g"},
    }


def test_errors_name_the_fields_as_written_and_are_typed(code_dir: Path) -> None:
    config = ExperimentConfig("local")
    config.trial_command = "python3 trial.py"
    config.search_space = {"x": {"_type": "uniform", "_value": [1]}}
    assert config.tuner is not None and isinstance(config.training_service, LocalConfig)
    config.tuner.name = "TPEE"
    config.training_service.max_trial_number_per_gpu = 2
    with pytest.raises(NniConfigError) as e:
        config.validate()
    text = str(e.value)
    assert isinstance(e.value, ValueError)  # NNI's validation raises ValueError
    for line in ("trial_concurrency: missing required field", "tuner.name: unknown tuner 'TPEE'",
                 "training_service.max_trial_number_per_gpu: must stay 1 unless trial_gpu_number is set",
                 "search_space.x"):
        assert line in text, text
    assert "- trialConcurrency" not in text  # snake_case, as the user wrote it
    with pytest.raises(UnknownFieldError, match="did you mean 'trial_concurrency'"):
        config.trial_concurency = 2
    with pytest.raises(AttributeError, match="LocalConfig has no field 'machine_list'"):
        config.training_service.machine_list = []
    with pytest.raises(NotSupportedByNnixError, match=r"platform 'aml' \(Azure ML\) is not supported by nnix"):
        Experiment("aml")
    with pytest.raises(NotSupportedByNnixError, match="platform 'dlc'"):
        ExperimentConfig(["local", "dlc"])
    with pytest.raises(NotSupportedByNnixError):
        AmlConfig()
    with pytest.raises(NotSupportedByNnixError, match="NAS experiments are not supported"):
        config.experiment_type = "nas"
    with pytest.raises(NniConfigError, match="looks like a config file"):
        Experiment("config.yml")
    shared = config_of(quickstart(Experiment("local")))
    shared.shared_storage = {"storage_type": "NFS"}  # type: ignore[assignment]  # NNI takes a dict
    with pytest.raises(NniConfigError, match="shared_storage: sharedStorage is not supported by nnix"):
        shared.validate()


def test_a_bad_config_leaves_nothing_behind(code_dir: Path, nnix_home: Path) -> None:
    experiment = quickstart(Experiment("local"))
    config_of(experiment).trial_concurrency = 0
    with pytest.raises(NniConfigError, match="trial_concurrency: input should be greater than 0"):
        experiment.run(port=0)
    assert Registry().all() == [] and experiment.port is None


def test_a_busy_port_is_said_in_the_launchers_terms_without_a_chained_traceback(code_dir: Path) -> None:
    experiment = quickstart(Experiment("local"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(NnixError) as err:
            experiment.run(port)
    e = err.value
    assert e.message.startswith(f"port {port} is not idle: it is held by process {os.getpid()}")
    assert e.hint is not None and "--port" not in e.hint
    assert "experiment.run(port=8081)" in e.hint and "port=0" in e.hint, e.hint
    assert e.__cause__ is None and e.__suppress_context__  # no "direct cause" OSError above it
    assert Registry().all() == [] and experiment.port is None


# --------------------------------------------------------------------------------------------------
# The experiment, from the Python API


def test_a_run_whose_every_trial_fails_logs_the_reasons(code_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (code_dir / "bad.py").write_text("import nni\nnni.get_next_parameter()\nraise RuntimeError('dataset missing')\n")
    experiment = quickstart(Experiment("local"), trials=2)
    config_of(experiment).trial_command = f"{sys.executable} bad.py"
    try:
        assert experiment.run(port=0) is True  # DONE (NNI's rule: not ERROR)
        out = capsys.readouterr().out
    finally:
        experiment.stop()
    assert f"INFO (nni.experiment) Failed trials of experiment {experiment.id}" in out, out
    assert "INFO (nni.experiment)   2x RuntimeError: dataset missing (exit code 1)  (e.g. trial " in out, out
    assert f"INFO (nni.experiment) Experiment {experiment.id} is DONE, but no trial succeeded" in out


def test_run_export_resume_view_and_the_rest_wrappers(code_dir: Path) -> None:
    experiment = quickstart(Experiment("local"))
    assert experiment.id is not None and experiment.port is None and experiment.url is None
    assert experiment.run(port=0) is True  # returns when done; the manager keeps serving (as NNI's)
    exp_id = experiment.id
    assert experiment.get_status() == "DONE" and experiment.url == f"http://127.0.0.1:{experiment.port}"
    results = experiment.export_data()
    assert len(results) == 3 and all(isinstance(r, TrialResult) for r in results)
    assert all(r.value == pytest.approx(r.parameter["x"] * 2) for r in results)
    jobs = experiment.list_trial_jobs()
    assert sorted(j.sequenceId for j in jobs) == [0, 1, 2] and {j.status for j in jobs} == {"SUCCEEDED"}
    one = experiment.get_trial_job(results[0].trialJobId)
    assert one.hyperParameters[0].parameters == results[0].parameter
    assert one.finalMetricData is not None and one.finalMetricData[0].data == pytest.approx(results[0].value)
    assert experiment.get_job_statistics() == [{"trialJobStatus": "SUCCEEDED", "trialJobNumber": 3}]
    metrics = experiment.get_job_metrics()
    assert set(metrics) == {j.trialJobId for j in jobs}
    assert [m.type for m in experiment.get_job_metrics(one.trialJobId)[one.trialJobId]] == ["PERIODICAL", "FINAL"]
    profile = experiment.get_experiment_profile()
    assert profile["id"] == exp_id and profile["params"]["maxTrialNumber"] == 3
    meta = experiment.get_experiment_metadata(exp_id)
    assert meta is not None and meta["status"] == "DONE" and meta["port"] == experiment.port
    assert experiment.port is not None and Experiment.connect(experiment.port).id == exp_id
    manager = state_of(exp_id).manager_pid
    experiment.stop()
    assert not pid_alive(manager) and experiment.port is None
    wait_until(lambda: not watchers_of(exp_id), 60.0, "the watcher to leave")

    # resume (NNI's class form, not waiting), raise the budget, change limits at run time
    (code_dir / "hold").touch()
    resumed = Experiment.resume(exp_id, port=0, wait_completion=False)
    assert resumed is not None and resumed.id == exp_id and resumed.config is not None
    assert resumed.get_status() == "DONE"  # its 3 trials are done: nothing starts until the budget grows
    resumed.update_trial_concurrency(1)
    resumed.update_max_experiment_duration("1h")
    resumed.update_search_space({"x": {"_type": "uniform", "_value": [2, 3]}})
    resumed.update_max_trial_number(5)
    params = resumed.get_experiment_profile()["params"]
    assert (params["maxTrialNumber"], params["trialConcurrency"], params["maxExperimentDuration"]) == (5, 1, "3600s")
    running = wait_until(lambda: [j for j in resumed.list_trial_jobs() if j.status == "RUNNING"], 60.0, "a held trial")
    resumed.kill_trial_job(running[0].trialJobId)
    wait_until(lambda: resumed.get_trial_job(running[0].trialJobId).status == "USER_CANCELED", 60.0, "the kill")
    (code_dir / "hold").unlink()
    wait_until(lambda: resumed.get_status() == "DONE" and len(resumed.list_trial_jobs()) == 5, 60.0, "the end")
    assert sorted(j.sequenceId for j in resumed.list_trial_jobs()) == [0, 1, 2, 3, 4]  # numbers continue
    new = [r.value for r in resumed.export_data()][3:]  # the killed trial has no result
    assert len(new) == 1 and 4 <= new[0] <= 6  # drawn from the new space
    resumed.stop()

    # view, non-blocking: read-only
    viewed = Experiment.view(exp_id, port=0, non_blocking=True)
    assert viewed is not None and viewed.get_status() == "VIEWED" and len(viewed.list_trial_jobs()) == 5
    with pytest.raises(nnix.errors.NnixError, match="readonly"):
        viewed.update_trial_concurrency(2)
    viewed.stop()
    assert gone(exp_id)

    # NNI 3.0's instance forms: Experiment(None, id) / run_or_resume on a recorded id
    again = Experiment(None, exp_id)
    assert again.has_checkpoint()
    again.load_checkpoint()
    assert again.config is not None and again.config.max_trial_number == 3
    with again:  # the context manager stops it
        assert again.run_or_resume(port=0) is True
        assert again.get_status() == "DONE"
        port = again.port
    assert again.port is None and port is not None and gone(exp_id)
    with pytest.raises(nnix.errors.NnixError, match="has no config"):
        Experiment().start()


LAUNCHER = """import sys
from nni.experiment import Experiment

search_space = {"x": {"_type": "uniform", "_value": [0, 1]}}
experiment = Experiment('local')
experiment.config.trial_command = 'python3 trial.py'
experiment.config.trial_code_directory = '.'
experiment.config.search_space = search_space
experiment.config.tuner.name = 'TPE'
experiment.config.tuner.class_args['optimize_mode'] = 'maximize'
experiment.config.max_trial_number = int(sys.argv[1])
experiment.config.trial_concurrency = 2
print("ID", experiment.id, flush=True)
if sys.argv[2] == "run":
    result = experiment.run(0)
    print("RESULT", result, flush=True)
    if result:
        print("EXPORT", len(experiment.export_data()), experiment.get_status(), flush=True)
else:
    experiment.start(0)
    print("STARTED", experiment.port, flush=True)
    sys.stdin.read()  # until the test ends this process
"""


def launcher(code_dir: Path, *args: str, gate: StartGate | None = None, **kw: Any) -> subprocess.Popen[str]:
    """NNI's quickstart as a script of its own: ``from nni.experiment import Experiment`` (nnix's ``nni``), started
    as a terminal's foreground job (Ctrl-C is a KeyboardInterrupt even when this suite runs in a background job).
    ``gate``: the processes it starts see it (first on their ``PYTHONPATH``)."""
    (code_dir / "launch.py").write_text(LAUNCHER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([str(gate.dir)] if gate else []), str(SRC)])}
    env.pop("NNIX_NNI_FALLBACK", None)
    return subprocess.Popen(foreground_job([sys.executable, "launch.py", *args]), cwd=code_dir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_the_quickstart_script_runs_and_its_end_stops_the_experiment(code_dir: Path) -> None:
    proc = launcher(code_dir, "3", "run")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    exp_id = out.split("ID ", 1)[1].split()[0]
    assert "RESULT True\nEXPORT 3 DONE" in out, out + err
    assert f"Creating experiment, Experiment ID: {exp_id}" in out and "Web portal URL: http://127.0.0.1:" in out
    assert "Stopping experiment" in out  # at the interpreter's exit, as NNI
    assert state_of(exp_id).status.value == "DONE" and gone(exp_id)


def test_ctrl_c_stops_run_cleanly(code_dir: Path) -> None:
    (code_dir / "hold").touch()
    proc = launcher(code_dir, "4", "run", start_new_session=True)
    assert proc.stdout is not None
    exp_id = proc.stdout.readline().split()[1]
    wait_until(lambda: Registry().all() and state_of(exp_id, True).count(TrialStatus.RUNNING) == 2, 60.0,
               "running trials")
    wait_until(lambda: watchers_of(exp_id), 60.0, "start() to return")  # its last step starts the watcher
    trial_pids = [t.pid for t in state_of(exp_id, True).trials.values() if t.pid]
    assert len(trial_pids) == 2
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C goes to the whole foreground group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "KeyboardInterrupt detected" in out and "Experiment stopped" in out and "RESULT None" in out
    state = state_of(exp_id, True)
    assert state.status.value == "STOPPED" and gone(exp_id)
    assert {t.status.value for t in state.trials.values()} == {"USER_CANCELED"}
    wait_until(lambda: not any(pid_alive(p) for p in trial_pids), 60.0, "the trials to end")


def test_ctrl_c_while_the_manager_starts_leaves_no_manager_behind(code_dir: Path, tmp_path: Path) -> None:
    """The racy moment held open: the manager daemon is started but has not answered yet (a loaded machine)
    when Ctrl-C comes. The launcher ends that daemon before run() returns; no trial ran, so nothing is kept."""
    gate = start_gate(tmp_path / "gate", "nnix.host.daemon")
    proc = launcher(code_dir, "4", "run", gate=gate, start_new_session=True)
    assert proc.stdout is not None
    exp_id = proc.stdout.readline().split()[1]
    out, err, daemon_left = ctrl_c_at_the_gate(proc, gate)
    assert proc.returncode == 0, err
    assert "KeyboardInterrupt detected" in out and "RESULT None" in out, out + err
    assert not daemon_left  # not left to run the experiment without its launcher
    assert exp_id not in {e.id for e in Registry().all()}  # no trial ran: the experiment is discarded


def test_a_killed_launcher_does_not_leave_its_experiment_running(code_dir: Path) -> None:
    (code_dir / "hold").touch()
    proc = launcher(code_dir, "4", "start", stdin=subprocess.PIPE)
    assert proc.stdout is not None
    exp_id = proc.stdout.readline().split()[1]
    wait_until(lambda: "STARTED" in proc.stdout.readline(), 60.0, "the start")  # type: ignore[union-attr]
    manager = state_of(exp_id).manager_pid
    assert pid_alive(manager) and watchers_of(exp_id)
    proc.kill()  # kill -9: no atexit; the watcher sees the launcher's end
    proc.communicate(timeout=30)
    wait_until(lambda: gone(exp_id), 60.0, "the watcher to stop the experiment")
    assert state_of(exp_id).status.value == "STOPPED"


@pytest.fixture(scope="module")
def ssh_host() -> Iterator[SshHost]:
    """One real SSH host in a network namespace (see :mod:`nnix.testing.sshhosts`)."""
    reason = unavailable()
    if reason:
        pytest.skip(f"!!! REAL SSH HOSTS UNAVAILABLE: {reason} — the remote Python-API test did NOT run !!!")
    try:
        lab = SshLab(n_hosts=1).up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        pytest.skip(f"!!! REAL SSH HOSTS COULD NOT BE BUILT HERE: {e} — the remote Python-API test did NOT run !!!")
    try:
        yield lab.hosts[0]
    finally:
        lab.kill_user_processes()
        lab.down()


def test_a_remote_experiment_built_attribute_by_attribute_runs_over_ssh(code_dir: Path, ssh_host: SshHost) -> None:
    experiment = quickstart(Experiment("remote"), trials=2)
    config_of(experiment).trial_command = "python3 trial.py"  # the host's Python, with nnix's nni uploaded
    ts = config_of(experiment).training_service
    assert isinstance(ts, RemoteConfig)
    machine = RemoteMachineConfig()
    machine.host = ssh_host.host
    machine.port = ssh_host.port
    machine.user = ssh_host.user
    machine.ssh_key_file = str(ssh_host.key_file)
    ts.machine_list.append(machine)
    ts.known_hosts_file = str(ssh_host.known_hosts)
    with experiment:
        assert experiment.run(port=0) is True
        results = experiment.export_data()
        assert len(results) == 2 and all(r.value == pytest.approx(2 * r.parameter["x"]) for r in results)
        assert {j.logPath.split(":")[0] for j in experiment.list_trial_jobs() if j.logPath} == {ssh_host.host}
    assert experiment.id is not None and gone(experiment.id)


# --------------------------------------------------------------------------------------------------
# Jupyter


def test_start_and_stop_in_a_jupyter_kernel_and_the_kernel_end_stops_the_rest(code_dir: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    setup = f"""
import sys, time
sys.path.insert(0, {str(SRC)!r})
from nni.experiment import Experiment

def make():
    experiment = Experiment('local')
    experiment.config.trial_command = {sys.executable!r} + ' trial.py'
    experiment.config.search_space = {SPACE!r}
    experiment.config.tuner.name = 'Random'
    experiment.config.max_trial_number = 2
    experiment.config.trial_concurrency = 2
    return experiment
"""
    cells = [
        setup,
        "first = make()\nt0 = time.monotonic()\nfirst.start(port=0)\nprint('returned', first.id, "
        "first.get_status())",
        "while first.get_status() != 'DONE': time.sleep(0.05)\nprint('done', len(first.export_data()))",
        "first.stop()\nprint('stopped', first.port)",
        "second = make()\nsecond.start(port=0)\nprint('left running', second.id)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {
        "path": str(code_dir)}})
    client.execute()  # the kernel is shut down at the end
    outputs = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    first_id = outputs[1].split("returned ", 1)[1].split()[0]
    assert outputs[1].split("returned ", 1)[1].split()[1] in ("RUNNING", "NO_MORE_TRIAL", "DONE")
    assert "done 2" in outputs[2] and "stopped None" in outputs[3], outputs
    second_id = outputs[4].split("left running ", 1)[1].split()[0]
    assert gone(first_id) and state_of(first_id).status.value == "DONE"
    wait_until(lambda: gone(second_id), 60.0, "the kernel's end to stop the second experiment")
